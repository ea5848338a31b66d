//! `join` and `unjoin`: adding a member cluster to the fleet with its own scoped hub credential
//! and agent, and removing it (see [`unjoin`]) so that nothing is left behind.

mod client;
mod unjoin;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fleethub_crds::conditions::is_true;
use fleethub_crds::member_cluster::{
    AGENT_LEASE, AGENT_SERVICE_ACCOUNT, JOINED, MemberClusterSpec,
};
use fleethub_crds::{MemberCluster, names};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::config::{
    AuthInfo, Cluster as KubeconfigCluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster,
    NamedContext,
};

use self::client::{apply, apply_typed, wait};
pub use self::unjoin::{UnjoinOptions, unjoin};
use crate::agent_manifests;
use crate::cluster::Cluster;
use crate::error::{Error, Result};

/// The hub Secret holding the token of the member's agent ServiceAccount.
pub const TOKEN_SECRET: &str = "member-agent-token";
/// The finalizer `unjoin` holds on a MemberCluster while the member's agent removes the
/// workloads (defined with the kind).
pub use fleethub_crds::member_cluster::UNJOIN_FINALIZER;
/// The member agent's Work finalizer (defined with the kind).
pub use fleethub_crds::work::CLEANUP_FINALIZER as AGENT_FINALIZER;

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
pub fn member_cluster(
    name: &str,
    labels: &[(String, String)],
    heartbeat: Option<u32>,
) -> MemberCluster {
    let mut mc = MemberCluster::new(
        name,
        MemberClusterSpec {
            // The flag is bounded far below i32::MAX; the schema refuses what it does not admit.
            heartbeat_period_seconds: heartbeat.map(|h| i32::try_from(h).unwrap_or(i32::MAX)),
        },
    );
    mc.metadata.labels = Some(labels.iter().cloned().collect());
    mc
}

/// The hub Secret that the token controller fills with the token of the member's agent
/// ServiceAccount.
fn token_secret(namespace: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(TOKEN_SECRET.to_string()),
            namespace: Some(namespace.to_string()),
            annotations: Some(BTreeMap::from([(
                "kubernetes.io/service-account.name".to_string(),
                AGENT_SERVICE_ACCOUNT.to_string(),
            )])),
            ..Default::default()
        },
        type_: Some("kubernetes.io/service-account-token".to_string()),
        ..Default::default()
    }
}

/// The agent's hub kubeconfig: the hub's server and CA, the agent's token.
pub fn agent_kubeconfig(
    member: &str,
    server: &str,
    ca_pem: Option<&[u8]>,
    insecure: bool,
    token: &str,
) -> Result<String> {
    use base64::Engine as _;
    let user = format!("{member}-agent");
    let context = format!("{member}-agent@hub");
    let kubeconfig = Kubeconfig {
        api_version: Some("v1".to_string()),
        kind: Some("Config".to_string()),
        clusters: vec![NamedCluster {
            name: "hub".to_string(),
            cluster: Some(KubeconfigCluster {
                server: Some(server.to_string()),
                certificate_authority_data: ca_pem
                    .map(|ca| base64::engine::general_purpose::STANDARD.encode(ca)),
                insecure_skip_tls_verify: insecure.then_some(true),
                ..Default::default()
            }),
            other: Default::default(),
        }],
        auth_infos: vec![NamedAuthInfo {
            name: user.clone(),
            auth_info: Some(AuthInfo {
                token: Some(token.to_string().into()),
                ..Default::default()
            }),
            other: Default::default(),
        }],
        contexts: vec![NamedContext {
            name: context.clone(),
            context: Some(Context {
                cluster: "hub".to_string(),
                user: Some(user),
                ..Default::default()
            }),
            other: Default::default(),
        }],
        current_context: Some(context),
        ..Default::default()
    };
    serde_norway::to_string(&kubeconfig)
        .map_err(|e| Error::Invalid(format!("writing the agent's kubeconfig: {e}")))
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
    apply_typed(&members, &mc, "the hub").await?;
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
    let secrets: Api<Secret> = Api::namespaced(hub.client.clone(), &ns);
    apply_typed(&secrets, &token_secret(&ns), "the hub").await?;
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
    let kubeconfig = agent_kubeconfig(name, &server, hub.ca_pem.as_deref(), hub.insecure, &token)?;
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
    let crds: Api<CustomResourceDefinition> = Api::all(member.client.clone());
    for crd in fleethub_crds::member_crds() {
        apply_typed(&crds, &crd, "the member").await?;
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

    // 6. The agent reports in: Joined, and a heartbeat from after this join started (a re-join
    //    must not be satisfied by what an earlier agent once reported). A running agent renews
    //    its Lease every period but rewrites the MemberCluster's status only when it changes
    //    (and every few minutes), so either one counts.
    let reported_since =
        started.round(jiff::Unit::Second).unwrap_or(started) - jiff::SignedDuration::from_secs(1);
    let what = format!(
        "MemberCluster {name} to become Joined=True (the agent has not reported: check kubectl --kubeconfig {} -n {} logs deploy/{})",
        member.source,
        agent_manifests::NAMESPACE,
        agent_manifests::DEPLOYMENT
    );
    let joined_at = |m: Option<&MemberCluster>, since: Option<jiff::Timestamp>| {
        m.and_then(|m| m.status.as_ref()).is_some_and(|s| {
            is_true(&s.conditions, JOINED)
                && since.is_none_or(|since| {
                    s.last_heartbeat_time.as_ref().is_some_and(|t| t.0 >= since)
                })
        })
    };
    let deadline = tokio::time::Instant::now() + opts.timeout;
    wait(
        &members,
        name,
        &what,
        opts.timeout,
        move |m: Option<&MemberCluster>| joined_at(m, None),
    )
    .await?;
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let leases: Api<Lease> = Api::namespaced(hub.client.clone(), &ns);
    let renewed = move |l: Option<&Lease>| {
        l.and_then(|l| l.spec.as_ref())
            .and_then(|s| s.renew_time.as_ref())
            .is_some_and(|t| t.0 >= reported_since)
    };
    let status = wait(
        &members,
        name,
        &what,
        left,
        move |m: Option<&MemberCluster>| joined_at(m, Some(reported_since)),
    );
    // The Lease is the usual sign; a hub that cannot show it (an error other than the
    // deadline) leaves the status to decide.
    let lease = async {
        match wait(&leases, AGENT_LEASE, &what, left, renewed).await {
            Err(e @ Error::Timeout(_)) => Err(e),
            Err(_) => std::future::pending().await,
            Ok(_) => Ok(()),
        }
    };
    tokio::select! {
        r = status => { r?; }
        r = lease => r?,
    }
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
        let applied = serde_json::to_value(&mc).unwrap();
        assert_eq!(applied["apiVersion"], "fleethub.dev/v1alpha1");
        assert_eq!(applied["kind"], "MemberCluster");
        assert_eq!(applied["metadata"]["labels"]["env"], "prod");
        assert_eq!(applied["spec"]["heartbeatPeriodSeconds"], 5);
        // Nothing else is applied (the fields the hub and the agent own stay theirs).
        assert!(applied.get("status").is_none());
        let bare = serde_json::to_value(member_cluster("m1", &[], None)).unwrap();
        assert_eq!(bare["spec"], serde_json::json!({}));
    }

    #[test]
    fn the_token_secret_names_the_agent_service_account() {
        let secret = serde_json::to_value(token_secret("fleet-member-m1")).unwrap();
        assert_eq!(secret["apiVersion"], "v1");
        assert_eq!(secret["kind"], "Secret");
        assert_eq!(secret["type"], "kubernetes.io/service-account-token");
        assert_eq!(secret["metadata"]["namespace"], "fleet-member-m1");
        assert_eq!(
            secret["metadata"]["annotations"]["kubernetes.io/service-account.name"],
            AGENT_SERVICE_ACCOUNT
        );
    }

    #[test]
    fn the_agent_kubeconfig_is_one_the_client_reads() {
        let text = agent_kubeconfig("m1", "https://hub:6443", Some(b"PEM"), false, "tok").unwrap();
        let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("m1-agent@hub"));
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://hub:6443"));
        assert_eq!(cluster.certificate_authority_data.as_deref(), Some("UEVN"));
        assert_eq!(cluster.insecure_skip_tls_verify, None);
        assert!(kc.auth_infos[0].auth_info.as_ref().unwrap().token.is_some());
        let raw: serde_norway::Value = serde_norway::from_str(&text).unwrap();
        assert_eq!(raw["users"][0]["user"]["token"].as_str(), Some("tok"));
        assert_eq!(raw["apiVersion"], "v1");
        assert_eq!(raw["kind"], "Config");
        let insecure = agent_kubeconfig("m1", "https://hub:6443", None, true, "tok").unwrap();
        let kc = kube::config::Kubeconfig::from_yaml(&insecure).unwrap();
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.insecure_skip_tls_verify, Some(true));
        assert_eq!(cluster.certificate_authority_data, None);
    }
}
