//! `join` and `unjoin`: adding a member cluster to the fleet with its own scoped hub credential
//! and agent, and removing it so that nothing is left behind.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fleethub_crds::conditions::is_true;
use fleethub_crds::member_cluster::AGENT_SERVICE_ACCOUNT;
use fleethub_crds::member_cluster::JOINED;
use fleethub_crds::{MemberCluster, Work, names};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::runtime::wait::{Condition, await_condition};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::agent_manifests;
use crate::cluster::Cluster;
use crate::error::{Error, Result, is_not_found};
use crate::runs::FIELD_MANAGER;

/// The hub Secret holding the token of the member's agent ServiceAccount.
pub const TOKEN_SECRET: &str = "member-agent-token";
/// The finalizer `unjoin` holds on a MemberCluster while the member's agent removes the
/// workloads: it keeps the member's namespace (and so the agent's hub credential) alive until
/// the agent is done.
pub const UNJOIN_FINALIZER: &str = "fleethub.dev/kubectl-fleet-unjoin";
/// The member agent's Work finalizer (see the member agent's `cleanup` module).
pub const AGENT_FINALIZER: &str = "fleethub.dev/member-agent-cleanup";

/// What `join` should do.
pub struct JoinOptions {
    /// The MemberCluster name.
    pub name: String,
    /// Labels of the MemberCluster (what stages select on).
    pub labels: Vec<(String, String)>,
    /// `spec.heartbeatPeriodSeconds`.
    pub heartbeat_period: Option<u32>,
    /// The agent image (default: the base's).
    pub agent_image: Option<String>,
    /// The hub URL as the agent must reach it (default: the hub kubeconfig's server).
    pub hub_server: Option<String>,
    /// Install the agent into the member.
    pub install_agent: bool,
    /// Write the agent's hub kubeconfig here too.
    pub write_agent_kubeconfig: Option<PathBuf>,
    /// Bound of each wait.
    pub timeout: Duration,
}

fn validate_member_name(name: &str) -> Result<()> {
    if names::is_dns_label(name) && name.len() <= names::MAX_MEMBER_CLUSTER_NAME {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "{name:?} is not a valid member name: use a DNS label (lower-case letters, digits, '-') of at most {} characters",
            names::MAX_MEMBER_CLUSTER_NAME
        )))
    }
}

/// Parses `key=value`.
pub fn parse_label(s: &str) -> std::result::Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("label {s:?} is not key=value"))?;
    if k.is_empty() {
        return Err(format!("label {s:?} has an empty key"));
    }
    Ok((k.to_string(), v.to_string()))
}

/// The MemberCluster `join` applies.
pub fn member_cluster(name: &str, labels: &[(String, String)], heartbeat: Option<u32>) -> Value {
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let mut spec = json!({});
    if let Some(h) = heartbeat {
        spec["heartbeatPeriodSeconds"] = json!(h);
    }
    json!({
        "apiVersion": "fleethub.dev/v1alpha1",
        "kind": "MemberCluster",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    })
}

/// The agent's hub kubeconfig: the hub's server and CA, the agent's token.
pub fn agent_kubeconfig(
    member: &str,
    server: &str,
    ca_pem: Option<&[u8]>,
    insecure: bool,
    token: &str,
) -> String {
    use base64::Engine as _;
    let mut cluster = json!({"server": server});
    if let Some(ca) = ca_pem {
        cluster["certificate-authority-data"] =
            json!(base64::engine::general_purpose::STANDARD.encode(ca));
    }
    if insecure {
        cluster["insecure-skip-tls-verify"] = json!(true);
    }
    let user = format!("{member}-agent");
    let context = format!("{member}-agent@hub");
    let kc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "hub", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": "hub", "user": user}}],
        "current-context": context,
    });
    serde_yaml::to_string(&kc).unwrap_or_default()
}

async fn wait<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
    cond: impl Condition<K>,
) -> Result<K>
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + 'static,
{
    match tokio::time::timeout(timeout, await_condition(api.clone(), name, cond)).await {
        Ok(Ok(Some(obj))) => Ok(obj),
        Ok(Ok(None)) => Err(Error::Refused(format!("{what}: {name} disappeared"))),
        Ok(Err(e)) => Err(Error::Refused(format!("watching for {what}: {e}"))),
        Err(_) => Err(Error::Timeout(format!(
            "timed out after {} waiting for {what}",
            fleethub_crds::duration::format(timeout)
        ))),
    }
}

/// Watches until object `name` of `api` does not exist, bounded by `timeout`.
async fn wait_gone<K>(api: &Api<K>, name: &str, what: &str, timeout: Duration) -> Result<()>
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + 'static,
{
    let gone = |o: Option<&K>| o.is_none();
    match tokio::time::timeout(timeout, await_condition(api.clone(), name, gone)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(Error::Refused(format!("watching for {what}: {e}"))),
        Err(_) => Err(Error::Timeout(format!(
            "timed out after {} waiting for {what}",
            fleethub_crds::duration::format(timeout)
        ))),
    }
}

/// Server-side applies `obj` (any kind the cluster serves) as `kubectl-fleet`.
async fn apply(client: &Client, obj: &Value, cluster: &str) -> Result<()> {
    let (ar, api) = dynamic_api(client, obj, cluster).await?;
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
    .map_err(Error::api(format!(
        "applying {} {name} in {cluster}",
        ar.kind
    )))?;
    Ok(())
}

async fn dynamic_api(
    client: &Client,
    obj: &Value,
    cluster: &str,
) -> Result<(ApiResource, Api<DynamicObject>)> {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let kind = obj["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(Error::api(format!(
            "discovering {api_version} {kind} in {cluster}"
        )))?;
    let api = match (caps.scope, obj["metadata"]["namespace"].as_str()) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
        _ => Api::all_with(client.clone(), &ar),
    };
    Ok((ar, api))
}

/// `kubectl fleet join`.
pub async fn join(hub: &Cluster, member: Option<&Cluster>, opts: &JoinOptions) -> Result<()> {
    let name = opts.name.as_str();
    validate_member_name(name)?;
    let ns = names::member_namespace(name);
    let started = jiff::Timestamp::now();

    // 1. The MemberCluster: the hub provisions the member's namespace and agent identity.
    let mc = member_cluster(name, &opts.labels, opts.heartbeat_period);
    let members: Api<MemberCluster> = Api::all(hub.client.clone());
    if let Some(existing) = members
        .get_opt(name)
        .await
        .map_err(Error::api(format!("reading MemberCluster {name}")))?
        && existing.metadata.deletion_timestamp.is_some()
    {
        return Err(Error::Refused(format!(
            "MemberCluster {name} is being removed (kubectl fleet unjoin {name} finishes that); join it again afterwards"
        )));
    }
    apply(&hub.client, &mc, "the hub").await?;
    eprintln!("membercluster {name} applied on the hub");

    // 2. The agent's ServiceAccount, provisioned by the hub.
    let sas: Api<ServiceAccount> = Api::namespaced(hub.client.clone(), &ns);
    wait(
        &sas,
        AGENT_SERVICE_ACCOUNT,
        &format!("the hub to provision ServiceAccount {ns}/{AGENT_SERVICE_ACCOUNT} (is fleethub-hub running?)"),
        opts.timeout,
        |o: Option<&ServiceAccount>| o.is_some(),
    )
    .await?;

    // 3. Its token: a service-account-token Secret the token controller fills (kept on re-join).
    let token_secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": TOKEN_SECRET, "namespace": ns,
                     "annotations": {"kubernetes.io/service-account.name": AGENT_SERVICE_ACCOUNT}},
        "type": "kubernetes.io/service-account-token",
    });
    apply(&hub.client, &token_secret, "the hub").await?;
    let secrets: Api<Secret> = Api::namespaced(hub.client.clone(), &ns);
    let has_token = |s: Option<&Secret>| {
        s.and_then(|s| s.data.as_ref())
            .is_some_and(|d| d.get("token").is_some_and(|t| !t.0.is_empty()))
    };
    let secret = wait(
        &secrets,
        TOKEN_SECRET,
        &format!("the token of ServiceAccount {ns}/{AGENT_SERVICE_ACCOUNT} (is the hub's kube-controller-manager running?)"),
        opts.timeout,
        has_token,
    )
    .await?;
    let token = secret
        .data
        .as_ref()
        .and_then(|d| d.get("token"))
        .map(|t| String::from_utf8_lossy(&t.0).to_string())
        .unwrap_or_default();

    // 4. The agent's hub kubeconfig.
    let server = opts
        .hub_server
        .clone()
        .unwrap_or_else(|| hub.server.clone());
    let kubeconfig = agent_kubeconfig(name, &server, hub.ca_pem.as_deref(), hub.insecure, &token);
    if let Some(path) = &opts.write_agent_kubeconfig {
        write_private(path, &kubeconfig)?;
        eprintln!(
            "the agent's hub kubeconfig (identity {ns}/{AGENT_SERVICE_ACCOUNT}) is in {}",
            path.display()
        );
    }

    // 5. The agent in the member.
    let Some(member) = member.filter(|_| opts.install_agent) else {
        eprintln!(
            "membercluster {name} is registered on the hub; no agent installed (--no-install-agent): it joins once fleethub-member-agent --member-name {name} runs with that hub kubeconfig"
        );
        return Ok(());
    };
    for crd in fleethub_crds::member_crds() {
        let value = serde_json::to_value(&crd).map_err(|e| Error::Invalid(e.to_string()))?;
        apply(&member.client, &value, "the member").await?;
    }
    for obj in agent_manifests::objects(name, &kubeconfig, opts.agent_image.as_deref())? {
        apply(&member.client, &obj, "the member").await?;
    }
    eprintln!(
        "agent installed in the member ({}): namespace {}, deployment {}",
        member.source,
        agent_manifests::NAMESPACE,
        agent_manifests::DEPLOYMENT
    );

    // 6. The agent reports in: Joined, with a heartbeat from after this join started (a
    //    re-join must not be satisfied by what an earlier agent once reported).
    let reported_since =
        started.round(jiff::Unit::Second).unwrap_or(started) - jiff::SignedDuration::from_secs(1);
    wait(
        &members,
        name,
        &format!(
            "MemberCluster {name} to become Joined=True (the agent has not reported: check kubectl --kubeconfig {} -n {} logs deploy/{})",
            member.source,
            agent_manifests::NAMESPACE,
            agent_manifests::DEPLOYMENT
        ),
        opts.timeout,
        move |m: Option<&MemberCluster>| {
            m.and_then(|m| m.status.as_ref()).is_some_and(|s| {
                is_true(&s.conditions, JOINED)
                    && s.last_heartbeat_time
                        .as_ref()
                        .is_some_and(|t| t.0 >= reported_since)
            })
        },
    )
    .await?;
    println!("membercluster {name} joined the fleet");
    Ok(())
}

fn write_private(path: &Path, content: &str) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let io = |source| Error::Io {
        path: path.display().to_string(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    f.write_all(content.as_bytes()).map_err(io)?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io)
}

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
        let mc = members
            .get_opt(name)
            .await
            .map_err(Error::api(format!("reading MemberCluster {name}")))?;
        if let Some(mc) = mc {
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
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_parse_as_key_value() {
        assert_eq!(parse_label("env=prod"), Ok(("env".into(), "prod".into())));
        assert_eq!(parse_label("a/b=c=d"), Ok(("a/b".into(), "c=d".into())));
        assert_eq!(parse_label("empty="), Ok(("empty".into(), String::new())));
        assert!(parse_label("novalue").unwrap_err().contains("key=value"));
        assert!(parse_label("=v").unwrap_err().contains("empty key"));
    }

    #[test]
    fn member_names_must_make_a_valid_namespace() {
        assert!(validate_member_name("prod-eu-1").is_ok());
        let err = validate_member_name("Prod_1").unwrap_err().to_string();
        assert!(
            err.contains("\"Prod_1\" is not a valid member name"),
            "{err}"
        );
        assert!(validate_member_name(&"a".repeat(names::MAX_MEMBER_CLUSTER_NAME + 1)).is_err());
    }

    #[test]
    fn the_member_cluster_carries_labels_and_heartbeat() {
        let mc = member_cluster("m1", &[("env".into(), "prod".into())], Some(5));
        assert_eq!(mc["metadata"]["labels"]["env"], "prod");
        assert_eq!(mc["spec"]["heartbeatPeriodSeconds"], 5);
        let bare = member_cluster("m1", &[], None);
        assert!(bare["spec"].get("heartbeatPeriodSeconds").is_none());
        // It is a valid MemberCluster.
        let typed: MemberCluster = serde_json::from_value(mc).unwrap();
        assert_eq!(typed.spec.heartbeat_period_seconds, Some(5));
    }

    #[test]
    fn the_agent_kubeconfig_is_one_the_client_reads() {
        let text = agent_kubeconfig("m1", "https://hub:6443", Some(b"PEM"), false, "tok");
        let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("m1-agent@hub"));
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://hub:6443"));
        assert_eq!(cluster.certificate_authority_data.as_deref(), Some("UEVN"));
        assert_eq!(cluster.insecure_skip_tls_verify, None);
        assert!(kc.auth_infos[0].auth_info.as_ref().unwrap().token.is_some());
        let raw: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        assert_eq!(raw["users"][0]["user"]["token"].as_str(), Some("tok"));
    }
}
