//! The objects the benchmark puts on the hub (members, content, placements, strategies, runs),
//! waits on them, and its clean-up. Everything carries label `fleethub.dev/bench=true`.

use std::collections::HashSet;
use std::time::Duration;

use fleethub_crds::{
    ApprovalRequest, Binding, MemberCluster, Placement, ResourceSnapshot, StagedUpdateStrategy,
    UpdateRun, names,
};
use fleethub_runtime::retry::{self, Backoff};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::sim::{BENCH_LABEL, MEMBER_PREFIX};

/// Field manager of the benchmark's own writes.
use fleethub_crds::field_manager::BENCH as FIELD_MANAGER;
/// Label with a member's stage (`s1`, `s2`, `s3`).
pub const STAGE_LABEL: &str = "bench.fleethub.dev/stage";
/// Integer label that orders members within a stage.
pub const ORDER_LABEL: &str = "bench.fleethub.dev/order";
/// The three stages.
pub const STAGES: [&str; 3] = ["s1", "s2", "s3"];
/// Namespace whose content the bench placements roll out.
pub const APP_NAMESPACE: &str = "bench-app";
/// Namespace of the gated placement, whose content changes for every approval run.
pub const GATED_NAMESPACE: &str = "bench-app-gated";
/// Namespace of the overrides scenario's content and its ResourceOverrides.
pub const OVERRIDE_NAMESPACE: &str = "bench-app-overrides";
/// Namespace of the regression → hold scenario's content.
pub const REGRESSION_NAMESPACE: &str = "bench-app-regress";
/// Namespace of the rollback scenario's content (it changes to cut a newer snapshot).
pub const ROLLBACK_NAMESPACE: &str = "bench-app-rollback";
/// Every content namespace the bench creates.
const CONTENT_NAMESPACES: [&str; 5] = [
    APP_NAMESPACE,
    GATED_NAMESPACE,
    OVERRIDE_NAMESPACE,
    REGRESSION_NAMESPACE,
    ROLLBACK_NAMESPACE,
];

/// Bench member number `i` (1-based).
pub fn member_name(i: usize) -> String {
    format!("{MEMBER_PREFIX}{i:04}")
}

/// The stage of member `i`: members are dealt round-robin, so every prefix of the fleet has
/// its clusters in thirds.
pub fn stage_of(i: usize) -> &'static str {
    STAGES[(i - 1) % STAGES.len()]
}

/// Applies `obj` as `name` with the bench's field manager (server-side apply, forced).
pub async fn apply<K>(api: &Api<K>, name: &str, obj: &Value) -> anyhow::Result<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
    .map_err(|e| anyhow::anyhow!("applying {} {name}: {e}", K::kind(&())))
}

/// Metadata naming `name` with the bench's label (clean-up finds it by that).
pub fn meta(name: &str) -> Value {
    json!({"name": name, "labels": {BENCH_LABEL: "true"}})
}

/// Registers members `from..=to` (1-based) with their stage and order labels, at most 16
/// creations in flight.
/// Returns each member's name with the moment its creation was sent.
pub async fn create_members(
    client: &Client,
    from: usize,
    to: usize,
    heartbeat: Duration,
) -> anyhow::Result<Vec<(String, std::time::Instant)>> {
    let api: Api<MemberCluster> = Api::all(client.clone());
    let results: Vec<anyhow::Result<(String, std::time::Instant)>> = futures::stream::iter(from..=to)
        .map(|i| {
            let api = api.clone();
            async move {
                let name = member_name(i);
                let obj = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "MemberCluster",
                    "metadata": {"name": name, "labels": {BENCH_LABEL: "true", STAGE_LABEL: stage_of(i), ORDER_LABEL: i.to_string()}},
                    "spec": {"heartbeatPeriodSeconds": heartbeat.as_secs()}});
                let sent = std::time::Instant::now();
                apply(&api, &name, &obj).await.map(|_| (name, sent))
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect()
}

/// The content placements roll out: `namespace` with a ConfigMap holding `version` (a changed
/// version cuts a new snapshot of the placements of that namespace).
pub async fn set_content(client: &Client, namespace: &str, version: &str) -> anyhow::Result<()> {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta(namespace)});
    apply(&Api::<Namespace>::all(client.clone()), namespace, &ns).await?;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("web"),
        "data": {"version": version, "settings.json": "{\"replicas\": 3, \"feature\": true}"}});
    apply(
        &Api::<ConfigMap>::namespaced(client.clone(), namespace),
        "web",
        &cm,
    )
    .await?;
    Ok(())
}

/// The most clusters a `PickFixed` placement names (the Placement CRD's bound).
const MAX_CLUSTER_NAMES: usize = 1000;

/// An `External` placement of `namespace` (and its content) on exactly `clusters`: named, or,
/// over [`MAX_CLUSTER_NAMES`], selected by the bench label when they are every bench member.
pub async fn create_placement(
    client: &Client,
    name: &str,
    namespace: &str,
    clusters: &[String],
) -> anyhow::Result<()> {
    let policy = if clusters.len() <= MAX_CLUSTER_NAMES {
        json!({"placementType": "PickFixed", "clusterNames": clusters})
    } else {
        let members = Api::<MemberCluster>::all(client.clone())
            .list_metadata(&ListParams::default().labels(&format!("{BENCH_LABEL}=true")))
            .await?;
        let mut registered: Vec<String> = members.items.iter().map(|m| m.name_any()).collect();
        let mut wanted = clusters.to_vec();
        registered.sort();
        wanted.sort();
        anyhow::ensure!(
            registered == wanted,
            "placement {name}: {} clusters are more than a placement can name ({MAX_CLUSTER_NAMES}), \
             and they are not every bench member ({} are registered): run the larger size alone",
            clusters.len(),
            registered.len()
        );
        json!({"placementType": "PickAll", "clusterSelector": {"matchLabels": {BENCH_LABEL: "true"}}})
    };
    let obj = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "Placement", "metadata": meta(name),
        "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Namespace", "name": namespace}],
                 "policy": policy,
                 "strategy": {"type": "External"}}});
    apply(&Api::<Placement>::all(client.clone()), name, &obj).await?;
    Ok(())
}

/// A strategy of the three bench stages, ordered by the order label, each at `concurrency`;
/// with `approvals`, stages s1 and s2 end with an Approval gate.
pub async fn create_strategy(
    client: &Client,
    name: &str,
    concurrency: &str,
    approvals: bool,
) -> anyhow::Result<()> {
    let stages: Vec<Value> = STAGES
        .iter()
        .map(|s| {
            let gate = approvals && *s != "s3";
            json!({"name": s, "labelSelector": {"matchLabels": {STAGE_LABEL: s}},
                   "sortingLabelKey": ORDER_LABEL, "maxConcurrency": concurrency,
                   "afterStageTasks": if gate { json!([{"type": "Approval"}]) } else { json!([]) }})
        })
        .collect();
    let obj = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "StagedUpdateStrategy",
        "metadata": meta(name), "spec": {"stages": stages}});
    apply(
        &Api::<StagedUpdateStrategy>::all(client.clone()),
        name,
        &obj,
    )
    .await?;
    Ok(())
}

/// Starts UpdateRun `name` of `placement` at snapshot `index` with `strategy`.
/// The hub API server's current revision: the resourceVersion of a quorum list (of one
/// ConfigMap of the default namespace; the list's version is etcd's, whatever it holds).
pub async fn current_revision(client: &Client) -> anyhow::Result<u64> {
    let list = Api::<ConfigMap>::namespaced(client.clone(), "default")
        .list_metadata(&ListParams::default().limit(1))
        .await?;
    let version = list.metadata.resource_version.unwrap_or_default();
    version
        .parse()
        .map_err(|_| anyhow::anyhow!("resourceVersion {version:?} is not a number"))
}

pub async fn create_run(
    client: &Client,
    name: &str,
    placement: &str,
    index: i64,
    strategy: &str,
) -> anyhow::Result<()> {
    let obj = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "UpdateRun", "metadata": meta(name),
        "spec": {"placementName": placement, "resourceSnapshotIndex": index.to_string(),
                 "stagedRolloutStrategyName": strategy}});
    apply(&Api::<UpdateRun>::all(client.clone()), name, &obj).await?;
    Ok(())
}

/// Watches `api`'s objects matching `labels` until `ready` holds for the set, or `timeout`.
pub async fn wait_until<K>(
    api: Api<K>,
    labels: &str,
    what: &str,
    timeout: Duration,
    ready: impl Fn(&[std::sync::Arc<K>]) -> bool,
) -> anyhow::Result<()>
where
    K: fleethub_runtime::Watched,
{
    let (store, writer) = reflector::store::<K>();
    let mut events =
        fleethub_runtime::watch(api, fleethub_runtime::watcher_config().labels(labels))
            .reflect(writer)
            .boxed();
    // The store is complete once the initial list is done; check after every event from then.
    let wait = async {
        let mut listed = false;
        while let Some(event) = events.next().await {
            listed |= matches!(event, Ok(watcher::Event::InitDone));
            if listed && ready(&store.state()) {
                return;
            }
        }
    };
    tokio::time::timeout(timeout, wait)
        .await
        .map_err(|_| anyhow::anyhow!("timed out after {timeout:?} waiting for {what}"))?;
    if ready(&store.state()) {
        Ok(())
    } else {
        anyhow::bail!("the watch for {what} ended early")
    }
}

/// Waits until the hub's controller manager has given each of `namespaces` its `default`
/// ServiceAccount and its `kube-root-ca.crt` ConfigMap. Right after 10,000 members registered
/// it is still creating them (about 6,000 writes, during the next scenario's run otherwise): a
/// fleet that registered long ago has none of that load.
pub async fn wait_namespaces_settled(
    client: &Client,
    namespaces: &HashSet<String>,
    timeout: Duration,
) -> anyhow::Result<()> {
    let accounts = wait_each_namespace_has(
        Api::<PartialObjectMeta<ServiceAccount>>::all(client.clone()),
        "default",
        namespaces,
    );
    let certificates = wait_each_namespace_has(
        Api::<PartialObjectMeta<ConfigMap>>::all(client.clone()),
        "kube-root-ca.crt",
        namespaces,
    );
    tokio::time::timeout(timeout, async {
        tokio::try_join!(accounts, certificates).map(|_| ())
    })
    .await
    .map_err(|_| {
        anyhow::anyhow!(
            "timed out after {timeout:?} waiting for the controller manager to fill {} namespaces",
            namespaces.len()
        )
    })?
}

/// Waits until each of `namespaces` holds an object `name` (of the kind `api` watches). The
/// namespaces seen are kept as the events arrive: checking the whole store on every event was
/// quadratic at 10,000 namespaces, on the machine whose controller manager it waits for.
async fn wait_each_namespace_has<K: fleethub_runtime::Watched>(
    api: Api<K>,
    name: &str,
    namespaces: &HashSet<String>,
) -> anyhow::Result<()> {
    let config = fleethub_runtime::watcher_config().fields(&format!("metadata.name={name}"));
    let mut events = fleethub_runtime::watch(api, config).boxed();
    let mut have: HashSet<String> = HashSet::new();
    let mut listed = false;
    let wanted = |o: &K| o.namespace().filter(|ns| namespaces.contains(ns));
    while let Some(event) = events.next().await {
        match event {
            // A (re)list starts over.
            Ok(watcher::Event::Init) => {
                have.clear();
                listed = false;
            }
            Ok(watcher::Event::InitDone) => listed = true,
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                have.extend(wanted(&o));
            }
            Ok(watcher::Event::Delete(o)) => {
                if let Some(ns) = wanted(&o) {
                    have.remove(&ns);
                }
            }
            Err(_) => continue,
        }
        if listed && have.len() == namespaces.len() {
            return Ok(());
        }
    }
    anyhow::bail!("the watch of {name} objects ended early")
}

/// Waits for `placement`'s snapshot `index` and a Binding for each of its `clusters`.
pub async fn wait_placed(
    client: &Client,
    placement: &str,
    index: u64,
    clusters: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    let sel = format!("{}={placement}", names::PLACEMENT_LABEL);
    let snapshot = names::resource_snapshot_name(placement, index);
    wait_until(
        Api::<ResourceSnapshot>::all(client.clone()),
        &sel,
        &format!("snapshot {snapshot}"),
        timeout,
        |s| s.iter().any(|s| s.name_any() == snapshot),
    )
    .await?;
    wait_until(
        Api::<Binding>::all(client.clone()),
        &sel,
        &format!("{clusters} bindings of placement {placement}"),
        timeout,
        |b| b.len() >= clusters,
    )
    .await
}

/// Approves ApprovalRequest `name` as a person does (`Approved=True` on its status).
pub async fn approve(client: &Client, name: &str) -> anyhow::Result<()> {
    let patch =
        fleethub_crds::approval::approve_patch("fleethub-bench", "", jiff::Timestamp::now());
    Api::<ApprovalRequest>::all(client.clone())
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| anyhow::anyhow!("approving {name}: {e}"))?;
    Ok(())
}

async fn delete_labelled<K>(client: &Client) -> anyhow::Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let lp = ListParams::default().labels(&format!("{BENCH_LABEL}=true"));
    let api = Api::<K>::all(client.clone());
    let dp = DeleteParams::background();
    // A collection of 10,000 outlasts the API server's request timeout: the connection is
    // closed with part of it deleted. Deleting the collection again goes on from there.
    retry::retry(
        DELETE_RETRY,
        DELETE_ATTEMPTS,
        || api.delete_collection(&dp, &lp),
        |_| true,
        |e, wait| {
            eprintln!(
                "[bench] deleting bench {}s: {e}; again in {wait:?}",
                K::kind(&())
            )
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("deleting bench {}s: {e}", K::kind(&())))?;
    Ok(())
}

/// How many times the clean-up asks the API server to delete one kind's bench objects, a
/// second apart.
const DELETE_ATTEMPTS: usize = 10;
const DELETE_RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(1));

/// Deletes every UpdateRun the bench created (its ApprovalRequests go with it), and the
/// rollback runs the hub created for them: those carry only `fleethub.dev/rollback-of` naming
/// the failed run, not the bench's label (every bench run's name starts with `bench-`, as its
/// members' do).
pub async fn delete_runs(client: &Client) -> anyhow::Result<()> {
    delete_labelled::<UpdateRun>(client).await?;
    let api = Api::<UpdateRun>::all(client.clone());
    let rollbacks = api
        .list_metadata(&ListParams::default().labels(names::ROLLBACK_OF_LABEL))
        .await
        .map_err(|e| anyhow::anyhow!("listing rollback runs: {e}"))?;
    for run in rollbacks.items.iter().filter(|r| {
        r.labels()
            .get(names::ROLLBACK_OF_LABEL)
            .is_some_and(|of| of.starts_with(MEMBER_PREFIX))
    }) {
        match api
            .delete(&run.name_any(), &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => anyhow::bail!("deleting rollback run {}: {e}", run.name_any()),
        }
    }
    Ok(())
}

/// Deletes everything the bench created (runs, placements with their snapshots, bindings and
/// Works, strategies, members with their namespaces and RBAC, the content namespace) and waits
/// until the members' and the content's namespaces are gone. Returns how long it took.
pub async fn clean_up(client: &Client, timeout: Duration) -> anyhow::Result<Duration> {
    let start = std::time::Instant::now();
    delete_runs(client).await?;
    delete_labelled::<Placement>(client).await?;
    delete_labelled::<StagedUpdateStrategy>(client).await?;
    delete_labelled::<MemberCluster>(client).await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in CONTENT_NAMESPACES {
        match namespaces.delete(ns, &DeleteParams::background()).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let ours = |n: &Namespace| {
        let name = n.name_any();
        CONTENT_NAMESPACES.contains(&name.as_str())
            || names::cluster_of_namespace(&name).is_some_and(|c| c.starts_with(MEMBER_PREFIX))
    };
    let (store, writer) = reflector::store::<Namespace>();
    let mut events = fleethub_runtime::watch(namespaces, fleethub_runtime::watcher_config())
        .reflect(writer)
        .boxed();
    let wait = async {
        let mut listed = false;
        while let Some(event) = events.next().await {
            listed |= matches!(event, Ok(watcher::Event::InitDone));
            if listed && !store.state().iter().any(|n| ours(n)) {
                return;
            }
        }
    };
    tokio::time::timeout(timeout, wait).await.map_err(|_| {
        let left = store.state().iter().filter(|n| ours(n)).count();
        anyhow::anyhow!("clean-up: {left} bench namespaces still exist after {timeout:?}")
    })?;
    wait_until(
        Api::<MemberCluster>::all(client.clone()),
        &format!("{BENCH_LABEL}=true"),
        "bench MemberClusters to be deleted",
        timeout
            .saturating_sub(start.elapsed())
            .max(Duration::from_secs(5)),
        |m| m.is_empty(),
    )
    .await?;
    Ok(start.elapsed())
}
