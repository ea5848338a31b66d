//! [`Cleanup`]: a guard that deletes what a test created on the fleet when it is dropped, so a
//! test leaves the fleet as it found it even when it fails or panics half-way.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use crate::{Error, Fleet, client};

/// How long a clean-up may take before it gives up and reports what is left.
const DEADLINE: Duration = Duration::from_secs(180);
/// How long a `forced` object may hang on its finalizers before the guard removes them.
const FORCE_AFTER: Duration = Duration::from_secs(20);
/// How often a clean-up looks whether its objects are gone.
const POLL: Duration = Duration::from_millis(250);

/// One object a test created.
#[derive(Debug, Clone)]
struct Tracked {
    /// The cluster it lives on (`hub`, `member-1`, …).
    cluster: String,
    resource: ApiResource,
    namespace: Option<String>,
    name: String,
    /// Remove its finalizers if its deletion hangs: the controller that would remove them
    /// (e.g. a member agent the test ran in-process) is gone with the test.
    force: bool,
    /// Not deleted (it existed before the test): only the fields this field manager set are
    /// given up.
    release: Option<String>,
}

impl Tracked {
    fn new(cluster: &str, resource: ApiResource, namespace: Option<&str>, name: &str) -> Self {
        Self {
            cluster: cluster.to_string(),
            resource,
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
            force: false,
            release: None,
        }
    }

    fn describe(&self) -> String {
        let ns = self
            .namespace
            .as_deref()
            .map(|n| format!("{n}/"))
            .unwrap_or_default();
        format!(
            "{} {}{} on {}",
            self.resource.kind, ns, self.name, self.cluster
        )
    }

    fn api(&self, client: Client) -> Api<DynamicObject> {
        match &self.namespace {
            Some(ns) => Api::namespaced_with(client, ns, &self.resource),
            None => Api::all_with(client, &self.resource),
        }
    }
}

/// What a test created on the fleet's clusters: every recorded object is deleted (newest first,
/// with foreground propagation so the objects they own go first) and waited for when the guard
/// is dropped or [`Cleanup::clean`] is called, whether the test passed, failed or panicked.
///
/// Record an object before creating it (deleting one that was never created is harmless), so a
/// create that succeeds on the server but fails on the way back is still cleaned up. The
/// clean-up runs on a thread of its own with its own runtime and clients, so it works from
/// inside a tokio runtime (a `#[tokio::test]` unwinding) as well as from outside one.
#[derive(Debug)]
pub struct Cleanup {
    fleet_dir: PathBuf,
    tracked: Mutex<Vec<Tracked>>,
}

impl Cleanup {
    /// An empty guard for objects on `fleet`'s clusters.
    pub fn new(fleet: &Fleet) -> Self {
        Self {
            fleet_dir: fleet.dir().to_path_buf(),
            tracked: Mutex::new(Vec::new()),
        }
    }

    /// Records object `name` of type `K` (in `namespace`, if namespaced) on cluster `cluster`
    /// (`hub` or `member-<i>`).
    pub fn track<K>(&self, cluster: &str, namespace: Option<&str>, name: &str)
    where
        K: Resource<DynamicType = ()>,
    {
        self.push(
            cluster,
            ApiResource::erase::<K>(&()),
            namespace,
            name,
            false,
        );
    }

    /// Records that the test changed object `name` of type `K`, which existed before it (e.g.
    /// labelled a fleet member), with server-side apply as `field_manager`: the guard does not
    /// delete it but gives up every field that manager alone owns, so values someone else set
    /// too stay and the ones only the test set go.
    pub fn release_fields<K>(
        &self,
        cluster: &str,
        namespace: Option<&str>,
        name: &str,
        field_manager: &str,
    ) where
        K: Resource<DynamicType = ()>,
    {
        let mut item = Tracked::new(cluster, ApiResource::erase::<K>(&()), namespace, name);
        item.release = Some(field_manager.to_string());
        self.add(item);
    }

    /// Like [`Cleanup::track`], for an object whose finalizer belongs to a controller that may be
    /// gone by the time the guard runs (a Work of a member agent the test ran itself): if its
    /// deletion hangs, the guard removes its finalizers.
    pub fn track_forced<K>(&self, cluster: &str, namespace: Option<&str>, name: &str)
    where
        K: Resource<DynamicType = ()>,
    {
        self.push(cluster, ApiResource::erase::<K>(&()), namespace, name, true);
    }

    /// Records an object of a type known only at run time.
    pub fn track_dynamic(
        &self,
        cluster: &str,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) {
        self.push(cluster, resource.clone(), namespace, name, false);
    }

    fn push(
        &self,
        cluster: &str,
        resource: ApiResource,
        namespace: Option<&str>,
        name: &str,
        force: bool,
    ) {
        let mut item = Tracked::new(cluster, resource, namespace, name);
        item.force = force;
        self.add(item);
    }

    fn add(&self, item: Tracked) {
        let mut tracked = self.tracked.lock().unwrap_or_else(|e| e.into_inner());
        if !tracked.iter().any(|t| {
            t.cluster == item.cluster
                && t.resource == item.resource
                && t.namespace == item.namespace
                && t.name == item.name
                && t.release == item.release
        }) {
            tracked.push(item);
        }
    }

    /// Deletes every recorded object now and waits until all are gone (blocking). Objects
    /// still there after the deadline are named in the error. The guard is empty afterwards.
    pub fn clean(&self) -> Result<(), Error> {
        let items = std::mem::take(&mut *self.tracked.lock().unwrap_or_else(|e| e.into_inner()));
        if items.is_empty() {
            return Ok(());
        }
        let dir = self.fleet_dir.clone();
        // A thread of its own: blocking inside the test's runtime is not allowed, and the test's
        // clients are bound to that runtime (which may be unwinding).
        std::thread::scope(|s| {
            s.spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| Error::Cleanup(format!("no runtime for the clean-up: {e}")))?;
                runtime.block_on(delete_all(dir, items))
            })
            .join()
            .unwrap_or_else(|_| Err(Error::Cleanup("the clean-up thread panicked".into())))
        })
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Err(e) = self.clean() {
            // Never panic here: the guard may be dropped while a failing test unwinds. The
            // suite's final inventory (`deploy/local/fleet test`) fails on what is left.
            eprintln!("fleethub-testkit: {e}");
        }
    }
}

/// Deletes `items` newest first, then waits until all are gone.
async fn delete_all(fleet_dir: PathBuf, items: Vec<Tracked>) -> Result<(), Error> {
    let mut clients: HashMap<String, Client> = HashMap::new();
    for item in &items {
        if !clients.contains_key(&item.cluster) {
            let path = fleet_dir.join(format!("{}.kubeconfig", item.cluster));
            clients.insert(item.cluster.clone(), client(&path).await?);
        }
    }
    let api = |item: &Tracked| item.api(clients[&item.cluster].clone());
    let (released, items): (Vec<Tracked>, Vec<Tracked>) =
        items.into_iter().partition(|t| t.release.is_some());
    let mut failed = Vec::new();
    for item in &released {
        let manager = item.release.as_deref().unwrap_or_default();
        let (group, version) = (&item.resource.group, &item.resource.version);
        let api_version = if group.is_empty() {
            version.clone()
        } else {
            format!("{group}/{version}")
        };
        let mut empty = json!({"apiVersion": api_version, "kind": item.resource.kind,
            "metadata": {"name": item.name}});
        if let Some(ns) = &item.namespace {
            empty["metadata"]["namespace"] = json!(ns);
        }
        match api(item)
            .patch(
                &item.name,
                &PatchParams::apply(manager).force(),
                &Patch::Apply(&empty),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => failed.push(format!("{} (fields of {manager}): {e}", item.describe())),
        }
    }
    for item in items.iter().rev() {
        match api(item)
            .delete(&item.name, &DeleteParams::foreground())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            // Reported below if the object then stays.
            Err(e) => eprintln!("fleethub-testkit: deleting {}: {e}", item.describe()),
        }
    }
    let start = tokio::time::Instant::now();
    let mut left: Vec<&Tracked> = items.iter().collect();
    loop {
        let mut still = Vec::new();
        for item in left {
            match api(item).get_opt(&item.name).await {
                Ok(None) => {}
                Ok(Some(obj)) => {
                    if item.force && start.elapsed() >= FORCE_AFTER && !obj.finalizers().is_empty()
                    {
                        let patch = json!({"metadata": {"finalizers": null}});
                        let _ = api(item)
                            .patch(&item.name, &PatchParams::default(), &Patch::Merge(&patch))
                            .await;
                    }
                    still.push(item);
                }
                Err(_) => still.push(item),
            }
        }
        if still.is_empty() && failed.is_empty() {
            return Ok(());
        }
        if still.is_empty() || start.elapsed() >= DEADLINE {
            let names: Vec<String> = still.iter().map(|t| t.describe()).collect();
            if !names.is_empty() {
                failed.push(format!(
                    "still there after {DEADLINE:?}: {}",
                    names.join(", ")
                ));
            }
            return Err(Error::Cleanup(failed.join("; ")));
        }
        left = still;
        tokio::time::sleep(POLL).await;
    }
}
