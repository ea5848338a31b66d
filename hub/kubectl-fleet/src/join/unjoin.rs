//! `unjoin`: removing a member cluster from the fleet so that nothing is left behind — its
//! Works withdrawn and cleaned up by its agent, its hub namespace and identity, and the agent.

use std::collections::BTreeSet;
use std::time::Duration;

use fleethub_crds::{MemberCluster, Work, names};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::client::{dynamic_api, wait_gone};
use super::{AGENT_FINALIZER, UNJOIN_FINALIZER, validate_member_name};
use crate::agent_manifests;
use crate::cluster::Cluster;
use crate::error::{Error, Result, is_conflict, is_not_found};

/// How often unjoin reads the MemberCluster again when removing its finalizer conflicts with
/// another write (the agent's heartbeat).
const FINALIZER_ATTEMPTS: u32 = 5;

/// What `unjoin` should do.
pub struct UnjoinOptions {
    /// The MemberCluster name.
    pub name: String,
    /// Strip the agent's finalizers from Works it did not clean up in time.
    pub force: bool,
    /// Bound of each wait.
    pub timeout: Duration,
}

/// Watches the objects `api` lists until there are none; on timeout returns the names left.
async fn wait_until_none<K>(
    api: Api<K>,
    timeout: Duration,
) -> Result<std::result::Result<(), Vec<String>>>
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + 'static,
{
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    let mut names: BTreeSet<String> = BTreeSet::new();
    let mut init: BTreeSet<String> = BTreeSet::new();
    let mut ready = false;
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let next = match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(e))) => e,
            Ok(Some(Err(e))) => return Err(Error::Refused(format!("watch failed: {e}"))),
            Ok(None) => return Err(Error::Refused("watch ended".into())),
            Err(_) => return Ok(Err(names.into_iter().collect())),
        };
        match next {
            watcher::Event::Init => init.clear(),
            watcher::Event::InitApply(o) => {
                init.insert(o.name_any());
            }
            watcher::Event::InitDone => {
                names = std::mem::take(&mut init);
                ready = true;
            }
            watcher::Event::Apply(o) => {
                names.insert(o.name_any());
            }
            watcher::Event::Delete(o) => {
                names.remove(&o.name_any());
            }
        }
        if ready && names.is_empty() {
            return Ok(Ok(()));
        }
    }
}

/// The names of the Works in namespace `ns`.
async fn work_names(works: &Api<Work>, ns: &str) -> Result<Vec<String>> {
    Ok(works
        .list(&Default::default())
        .await
        .map_err(Error::api(format!("listing Works in {ns}")))?
        .items
        .iter()
        .map(|w| w.name_any())
        .collect())
}

async fn strip_agent_finalizers(hub: &Client, ns: &str, works: &[String]) -> Result<()> {
    let api: Api<Work> = Api::namespaced(hub.clone(), ns);
    let mut stripped = Vec::new();
    for w in works {
        let Some(work) = api
            .get_opt(w)
            .await
            .map_err(Error::api(format!("reading Work {ns}/{w}")))?
        else {
            continue;
        };
        let keep: Vec<String> = work
            .finalizers()
            .iter()
            .filter(|f| *f != AGENT_FINALIZER)
            .cloned()
            .collect();
        if keep.len() == work.finalizers().len() {
            continue;
        }
        stripped.push(w.clone());
        let patch =
            json!({"metadata": {"finalizers": keep, "resourceVersion": work.resource_version()}});
        api.patch(w, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(Error::api(format!(
                "removing finalizer {AGENT_FINALIZER} from Work {ns}/{w}"
            )))?;
    }
    if !stripped.is_empty() {
        eprintln!(
            "--force: removed finalizer {AGENT_FINALIZER} from Works {} in {ns}; what they deployed was NOT removed from the member",
            stripped.join(", ")
        );
    }
    Ok(())
}

/// Why Works are still there after unjoin waited: the hub has not withdrawn them yet (is it
/// running?), or the agent has not cleaned them up (is it running?).
async fn stuck_works_message(
    works: &Api<Work>,
    ns: &str,
    waited: &str,
    left: &[String],
) -> Result<String> {
    let list = works
        .list(&Default::default())
        .await
        .map_err(Error::api(format!("listing Works in {ns}")))?;
    let (deleting, kept): (Vec<&Work>, Vec<&Work>) = list
        .items
        .iter()
        .filter(|w| left.contains(&w.name_any()))
        .partition(|w| w.metadata.deletion_timestamp.is_some());
    let names = |ws: &[&Work]| {
        ws.iter()
            .map(|w| w.name_any())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut why = Vec::new();
    if !deleting.is_empty() {
        why.push(format!(
            "Works {} in {ns} wait for the member agent to remove what they deployed and then its finalizer {AGENT_FINALIZER}: is the agent running? (kubectl -n {} get deploy {} in the member)",
            names(&deleting),
            agent_manifests::NAMESPACE,
            agent_manifests::DEPLOYMENT
        ));
    }
    if !kept.is_empty() {
        why.push(format!(
            "Works {} in {ns} have not been withdrawn by the hub: is fleethub-hub running?",
            names(&kept)
        ));
    }
    Ok(format!(
        "after {waited}: {}. Run unjoin again to keep waiting, or add --force to abandon those workloads on the member",
        why.join("; ")
    ))
}

/// `kubectl fleet unjoin`.
pub async fn unjoin(hub: &Cluster, member: Option<&Cluster>, opts: &UnjoinOptions) -> Result<()> {
    let name = opts.name.as_str();
    validate_member_name(name)?;
    let ns = names::member_namespace(name);
    let members: Api<MemberCluster> = Api::all(hub.client.clone());
    let minutes = fleethub_crds::duration::format(opts.timeout);

    if let Some(mc) = members
        .get_opt(name)
        .await
        .map_err(Error::api(format!("reading MemberCluster {name}")))?
    {
        // 1. Hold the MemberCluster (and with it the agent's namespace and credential) while the
        //    hub withdraws the member's Works and the agent removes what they deployed.
        //    (A MemberCluster already being deleted accepts no new finalizer: then only wait.)
        if !mc.finalizers().iter().any(|f| f == UNJOIN_FINALIZER)
            && mc.metadata.deletion_timestamp.is_none()
        {
            let mut finalizers = mc.finalizers().to_vec();
            finalizers.push(UNJOIN_FINALIZER.to_string());
            let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": mc.resource_version()}});
            members
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(Error::api(format!(
                    "adding finalizer {UNJOIN_FINALIZER} to MemberCluster {name}"
                )))?;
        }
        if mc.metadata.deletion_timestamp.is_none() {
            members
                .delete(name, &DeleteParams::background())
                .await
                .map_err(Error::api(format!("deleting MemberCluster {name}")))?;
        }
        eprintln!(
            "membercluster {name} deleted; waiting for its agent to remove the fleet's workloads from the member"
        );
        let works: Api<Work> = Api::namespaced(hub.client.clone(), &ns);
        if opts.force {
            // --force says the agent is gone: do not wait for it.
            let all = work_names(&works, &ns).await?;
            strip_agent_finalizers(&hub.client, &ns, &all).await?;
        }
        if let Err(left) = wait_until_none(works.clone(), opts.timeout).await? {
            if !opts.force {
                return Err(Error::Timeout(
                    stuck_works_message(&works, &ns, &minutes, &left).await?,
                ));
            }
            strip_agent_finalizers(&hub.client, &ns, &left).await?;
        }
        // 2. Release the MemberCluster: the hub's garbage collector removes its namespace and RBAC.
        // The patch names the resourceVersion it read, so it never drops a finalizer added
        // meanwhile; the agent's heartbeats also change the object, so a conflict reads it again.
        for attempt in 1.. {
            let mc = members
                .get_opt(name)
                .await
                .map_err(Error::api(format!("reading MemberCluster {name}")))?;
            let Some(mc) = mc else { break };
            let keep: Vec<String> = mc
                .finalizers()
                .iter()
                .filter(|f| *f != UNJOIN_FINALIZER)
                .cloned()
                .collect();
            let patch =
                json!({"metadata": {"finalizers": keep, "resourceVersion": mc.resource_version()}});
            match members
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => break,
                Err(e) if is_not_found(&e) => break,
                Err(e) if is_conflict(&e) && attempt < FINALIZER_ATTEMPTS => continue,
                Err(e) => {
                    return Err(Error::api(format!(
                        "removing finalizer {UNJOIN_FINALIZER} from MemberCluster {name}"
                    ))(e));
                }
            }
        }
    } else {
        eprintln!("membercluster {name} does not exist on the hub");
    }

    // 3. The namespace goes (Works left in it still need the agent, or --force).
    let namespaces: Api<Namespace> = Api::all(hub.client.clone());
    let what = format!("namespace {ns} to go");
    if let Err(e) = wait_gone(&namespaces, &ns, &what, opts.timeout).await {
        if !matches!(e, Error::Timeout(_)) {
            return Err(e);
        }
        let works: Api<Work> = Api::namespaced(hub.client.clone(), &ns);
        let left = work_names(&works, &ns).await?;
        if left.is_empty() || !opts.force {
            let held = members
                .get_opt(name)
                .await
                .map_err(Error::api(format!("reading MemberCluster {name}")))?
                .map(|mc| {
                    format!(
                        ": MemberCluster {name} (which owns it) is still held by finalizers {:?}",
                        mc.finalizers()
                    )
                })
                .unwrap_or_default();
            return Err(Error::Timeout(format!(
                "namespace {ns} still exists after {minutes}{held}{}",
                if left.is_empty() {
                    String::new()
                } else {
                    format!(
                        ": Works {} wait for the agent's finalizer {AGENT_FINALIZER} (add --force to abandon them)",
                        left.join(", ")
                    )
                }
            )));
        }
        strip_agent_finalizers(&hub.client, &ns, &left).await?;
        wait_gone(&namespaces, &ns, &what, opts.timeout).await?;
    }
    eprintln!("namespace {ns} and the member's hub identity are gone");

    // 4. The agent leaves the member.
    if let Some(member) = member {
        remove_agent(member, opts.timeout).await?;
        eprintln!("agent removed from the member ({})", member.source);
    }
    println!("membercluster {name} left the fleet");
    Ok(())
}

/// Deletes the agent's objects from the member and waits for its namespace to go.
async fn remove_agent(member: &Cluster, timeout: Duration) -> Result<()> {
    let mut objects = agent_manifests::objects("-", "", None)?;
    objects.reverse(); // Deployment first, namespace last
    for obj in objects {
        let (ar, api) = dynamic_api(&member.client, &obj, "the member").await?;
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                return Err(Error::api(format!(
                    "deleting {} {name} from the member",
                    ar.kind
                ))(e));
            }
        }
    }
    // The AppliedWork CRD stays: deleting it would delete every AppliedWork and, through their
    // ownerReferences, what another agent in this cluster deployed.
    eprintln!(
        "kept CustomResourceDefinition appliedworks.fleethub.dev in the member (kubectl delete crd appliedworks.fleethub.dev removes it once no fleethub agent runs there)"
    );
    let namespaces: Api<Namespace> = Api::all(member.client.clone());
    let what = format!(
        "namespace {} to go from the member",
        agent_manifests::NAMESPACE
    );
    wait_gone(&namespaces, agent_manifests::NAMESPACE, &what, timeout).await?;
    Ok(())
}
