//! Membership: for each MemberCluster the hub provisions namespace `fleet-member-<name>` with a
//! ServiceAccount for that member's agent and RBAC that lets it read its own Works and write
//! only its own statuses; and it judges the member `Healthy` from its agent's heartbeat.
//! Everything provisioned is owned by the MemberCluster, so deleting it cleans up (the real
//! garbage collector and namespace controller do the work).

use std::sync::Arc;
use std::time::Duration;

use fleethub_crds::conditions::{FALSE, NewCondition, TRUE, UNKNOWN, set_condition};
use fleethub_crds::member_cluster::HEALTHY;
use fleethub_crds::{MemberCluster, names};
use futures::StreamExt;
use jiff::Timestamp;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::clock::Clock;
use crate::metrics::Metrics;

/// Field manager of every write this controller makes.
pub const FIELD_MANAGER: &str = "fleethub/membership";
/// The member agent's ServiceAccount in its namespace.
pub use fleethub_crds::member_cluster::AGENT_SERVICE_ACCOUNT;
/// Heartbeat period when the MemberCluster does not set one.
pub const DEFAULT_HEARTBEAT_PERIOD: Duration = Duration::from_secs(15);

/// The name of the ClusterRole (and binding) that lets member `cluster`'s agent touch its own
/// MemberCluster.
pub fn cluster_role_name(cluster: &str) -> String {
    format!("fleethub:member:{cluster}")
}

/// The objects the hub provisions for member `name` (each owned by the MemberCluster).
pub fn provisioned_objects(member: &MemberCluster) -> Vec<Value> {
    let name = member.name_any();
    let ns = names::member_namespace(&name);
    let owner = member
        .controller_owner_ref(&())
        .map(|o| vec![o])
        .unwrap_or_default();
    let meta = |name: &str, namespace: Option<&str>| {
        let mut m = json!({"name": name, "ownerReferences": owner, "labels": {names::CLUSTER_LABEL: member.name_any()}});
        if let Some(ns) = namespace {
            m["namespace"] = json!(ns);
        }
        m
    };
    let subject =
        json!([{"kind": "ServiceAccount", "name": AGENT_SERVICE_ACCOUNT, "namespace": ns}]);
    let role = cluster_role_name(&name);
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta(&ns, None)}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(AGENT_SERVICE_ACCOUNT, Some(&ns))}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta("fleethub-member-agent", Some(&ns)),
        "rules": [
            {"apiGroups": ["fleethub.dev"], "resources": ["works"], "verbs": ["get", "list", "watch", "update", "patch"]},
            {"apiGroups": ["fleethub.dev"], "resources": ["works/status"], "verbs": ["get", "update", "patch"]},
            {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}
        ]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta("fleethub-member-agent", Some(&ns)),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "fleethub-member-agent"},
            "subjects": subject}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta(&role, None),
        "rules": [
            {"apiGroups": ["fleethub.dev"], "resources": ["memberclusters"], "resourceNames": [name], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["fleethub.dev"], "resources": ["memberclusters/status"], "resourceNames": [name], "verbs": ["get", "update", "patch"]}
        ]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta(&role, None),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": subject}),
    ]
}

/// The member's health judged from its last heartbeat: the condition to set and, while the
/// heartbeat is fresh, when it goes stale.
pub fn judge_health(
    last_heartbeat: Option<Timestamp>,
    period: Duration,
    multiple: u32,
    now: Timestamp,
) -> (&'static str, &'static str, String, Option<Timestamp>) {
    let Some(last) = last_heartbeat else {
        return (
            UNKNOWN,
            "AgentNotJoined",
            "the member agent has not reported a heartbeat yet".to_string(),
            None,
        );
    };
    let allowed = period * multiple;
    let stale_at = last.checked_add(allowed).unwrap_or(last);
    let age = now.as_second().saturating_sub(last.as_second()).max(0) as u64;
    if now < stale_at {
        (
            TRUE,
            "HeartbeatFresh",
            format!(
                "last heartbeat {age}s ago (expected every {}s)",
                period.as_secs()
            ),
            Some(stale_at),
        )
    } else {
        (
            FALSE,
            "HeartbeatStale",
            format!(
                "no heartbeat from the member agent for {age}s (expected every {}s; unhealthy after {}s): check the agent in the member cluster",
                period.as_secs(),
                allowed.as_secs()
            ),
            None,
        )
    }
}

struct Context {
    client: Client,
    clock: Arc<dyn Clock>,
    stale_multiple: u32,
    /// When this process last applied each member's provisioned objects, by member UID. They
    /// depend only on the member's name and UID, so a reconcile for its health alone (a
    /// heartbeat going stale and coming back) does not re-apply them; they are re-asserted at
    /// least every `REPROVISION_AFTER` (repairing hand-made damage) and after a restart.
    provisioned: std::sync::Mutex<std::collections::HashMap<String, jiff::Timestamp>>,
}

/// Members reconciled at once. After a restart every member's six provisioned objects are
/// applied again; at 1,000 members, all at once, that burst saturated the API server while the
/// rollouts' own requests waited behind it. Sixteen at a time keeps room for them (health
/// verdicts still come within seconds: a healthy member's reconcile makes no request).
const MEMBER_CONCURRENCY: u16 = 16;

/// How long provisioned objects are trusted without re-applying them.
const REPROVISION_AFTER: Duration = Duration::from_secs(600);

/// Runs the controller until `shutdown`. A member is unhealthy once its agent missed
/// `stale_multiple` heartbeat periods.
pub async fn run(
    client: Client,
    clock: Arc<dyn Clock>,
    stale_multiple: u32,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    // Heartbeats change a MemberCluster every period; a reconcile provisions six objects, so
    // reconciling on each one costs six applies per member per period. Heartbeats of a healthy
    // member are left to the timer that judges staleness (`trigger`); the store still sees them.
    let (reader, writer) = reflector::store();
    metrics.count_members_in(reader.clone());
    let stream = watcher(
        Api::<MemberCluster>::all(client.clone()),
        fleethub_runtime::watcher_config(),
    )
    .backoff(fleethub_runtime::watch_backoff())
    .reflect(writer)
    .applied_objects()
    .predicate_filter(trigger, Default::default());
    kube::runtime::Controller::for_stream(stream, reader)
        .with_config(kube::runtime::controller::Config::default().concurrency(MEMBER_CONCURRENCY))
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(
            |o, c| crate::error::bounded(reconcile(o, c)),
            error_policy,
            Arc::new(Context {
                client,
                clock,
                stale_multiple,
                provisioned: Default::default(),
            }),
        )
        .for_each(move |res| {
            metrics.observe("membership", &res);
            if let Err(e) = res {
                tracing::debug!(error = %e, "membership reconcile error");
            }
            std::future::ready(())
        })
        .await;
}

/// What about a MemberCluster warrants a reconcile: its spec, labels, identity and deletion,
/// the agent's `Joined`, the hub's `Healthy` verdict, and — only while that verdict is not
/// `True` — the heartbeat itself (a member coming back). A fresh heartbeat of a healthy member
/// is read by the reconcile its staleness timer triggers.
fn trigger(member: &MemberCluster) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    member.metadata.generation.hash(&mut h);
    member.metadata.uid.hash(&mut h);
    member.labels().hash(&mut h);
    member.metadata.deletion_timestamp.is_some().hash(&mut h);
    let status = member.status.clone().unwrap_or_default();
    for type_ in [fleethub_crds::member_cluster::JOINED, HEALTHY] {
        let c = fleethub_crds::conditions::find(&status.conditions, type_);
        c.map(|c| (&c.status, &c.reason)).hash(&mut h);
    }
    if !fleethub_crds::conditions::is_true(&status.conditions, HEALTHY) {
        status
            .last_heartbeat_time
            .map(|t| t.0.as_second())
            .hash(&mut h);
    }
    Some(h.finish())
}

fn error_policy(member: Arc<MemberCluster>, error: &Error, _ctx: Arc<Context>) -> Requeue {
    tracing::warn!(member = %member.name_any(), error = %error, "reconciling MemberCluster failed; retrying");
    Requeue::requeue(Duration::from_secs(5))
}

#[tracing::instrument(skip_all, fields(member = %member.name_any()))]
async fn reconcile(member: Arc<MemberCluster>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let uid = member.metadata.uid.clone().unwrap_or_default();
    if member.metadata.deletion_timestamp.is_some() {
        ctx.provisioned.lock().unwrap().remove(&uid);
        return Ok(Requeue::await_change()); // owner references clean up
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let now = ctx.clock.now();
    let fresh = ctx
        .provisioned
        .lock()
        .unwrap()
        .get(&uid)
        .is_some_and(|at| now.duration_since(*at).unsigned_abs() < REPROVISION_AFTER);
    let to_provision = if fresh {
        Vec::new()
    } else {
        provisioned_objects(&member)
    };
    for obj in to_provision.iter() {
        let gvk = GroupVersionKind::try_from(
            &serde_json::from_value::<kube::core::TypeMeta>(obj.clone())
                .map_err(|e| Error::Invalid(e.to_string()))?,
        )
        .map_err(|e| Error::Invalid(e.to_string()))?;
        let ar = ApiResource::from_gvk_with_plural(&gvk, &plural(&gvk.kind));
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(ctx.client.clone(), ns, &ar),
            None => Api::all_with(ctx.client.clone(), &ar),
        };
        api.patch(&name, &params, &Patch::Apply(obj)).await?;
    }
    if !fresh {
        ctx.provisioned.lock().unwrap().insert(uid, now);
    }

    let status = member.status.clone().unwrap_or_default();
    let period = member
        .spec
        .heartbeat_period_seconds
        .map_or(DEFAULT_HEARTBEAT_PERIOD, |s| {
            Duration::from_secs(s.max(1) as u64)
        });
    let (state, reason, message, stale_at) = judge_health(
        status.last_heartbeat_time.as_ref().map(|t| t.0),
        period,
        ctx.stale_multiple,
        now,
    );
    let mut conditions = status.conditions.clone();
    let changed = set_condition(
        &mut conditions,
        NewCondition::new(
            HEALTHY,
            state,
            reason,
            message.clone(),
            member.metadata.generation,
        ),
        now,
    );
    // The message carries the heartbeat's age; rewrite it only when the state or reason moves.
    let existing = fleethub_crds::conditions::find(&status.conditions, HEALTHY);
    let moved = existing.is_none_or(|c| c.status != state || c.reason != reason);
    if changed && moved {
        let healthy = conditions.into_iter().find(|c| c.type_ == HEALTHY);
        let patch = json!({
            "apiVersion": "fleethub.dev/v1alpha1",
            "kind": "MemberCluster",
            "metadata": {"name": member.name_any()},
            "status": {"conditions": [healthy]},
        });
        Api::<MemberCluster>::all(ctx.client.clone())
            .patch_status(&member.name_any(), &params, &Patch::Apply(&patch))
            .await?;
        tracing::info!(healthy = state, reason, "{message}");
    }
    Ok(match stale_at {
        Some(at) => Requeue::requeue(Duration::from_secs(
            at.as_second().saturating_sub(now.as_second()).max(1) as u64,
        )),
        None => Requeue::await_change(),
    })
}

fn plural(kind: &str) -> String {
    match kind {
        "ServiceAccount" => "serviceaccounts".into(),
        other => format!("{}s", other.to_lowercase()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleethub_crds::member_cluster::MemberClusterSpec;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn health_follows_the_heartbeat() {
        let period = Duration::from_secs(15);
        let (s, r, _, at) = judge_health(None, period, 3, t(0));
        assert_eq!((s, r, at), ("Unknown", "AgentNotJoined", None));
        let (s, r, m, at) = judge_health(Some(t(0)), period, 3, t(10));
        assert_eq!((s, r, at), ("True", "HeartbeatFresh", Some(t(45))));
        assert!(
            m.contains("last heartbeat 10s ago (expected every 15s)"),
            "{m}"
        );
        let (s, _, _, _) = judge_health(Some(t(0)), period, 3, t(44));
        assert_eq!(s, "True");
        let (s, r, m, at) = judge_health(Some(t(0)), period, 3, t(47));
        assert_eq!((s, r, at), ("False", "HeartbeatStale", None));
        assert!(m.contains("no heartbeat from the member agent for 47s (expected every 15s; unhealthy after 45s)"), "{m}");
    }

    #[test]
    fn provisioning_is_scoped_to_the_member() {
        let mut member = MemberCluster::new("m1", MemberClusterSpec::default());
        member.metadata.uid = Some("uid-1".into());
        let objs = provisioned_objects(&member);
        let kinds: Vec<&str> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "ServiceAccount",
                "Role",
                "RoleBinding",
                "ClusterRole",
                "ClusterRoleBinding"
            ]
        );
        for o in &objs {
            assert_eq!(o["metadata"]["ownerReferences"][0]["uid"], "uid-1", "{o}");
        }
        assert_eq!(objs[0]["metadata"]["name"], "fleet-member-m1");
        assert_eq!(objs[2]["metadata"]["namespace"], "fleet-member-m1");
        // Cluster-wide rights are limited to this member's own MemberCluster.
        for rule in objs[4]["rules"].as_array().unwrap() {
            assert_eq!(rule["resourceNames"], json!(["m1"]));
        }
        assert_eq!(plural("ClusterRoleBinding"), "clusterrolebindings");
        assert_eq!(plural("ServiceAccount"), "serviceaccounts");
    }
}
