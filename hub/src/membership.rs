//! Membership: for each MemberCluster the hub provisions namespace `fleet-member-<name>` with a
//! ServiceAccount for that member's agent and RBAC that lets it read its own Works and write
//! only its own statuses; and it judges the member `Healthy` from its agent's heartbeat.
//! Everything provisioned is owned by the MemberCluster, so deleting it cleans up (the real
//! garbage collector and namespace controller do the work).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use fleethub_crds::conditions::{FALSE, NewCondition, TRUE, UNKNOWN, set_condition};
use fleethub_crds::field_manager::MEMBERSHIP as FIELD_MANAGER;
use fleethub_crds::member_cluster::{
    AGENT_LEASE, AGENT_ROLE, DEFAULT_HEARTBEAT_PERIOD, HEALTHY, MAX_HEARTBEAT_PERIOD_SECONDS,
    MemberClusterStatus, reason,
};
use fleethub_crds::{GROUP, MemberCluster, Work, names};
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::Resource as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::provisioning_record;

/// Kept for `hub/tests/least_privilege.rs`, which reads it from here; defined in `fleethub_crds`.
pub use fleethub_crds::member_cluster::AGENT_SERVICE_ACCOUNT;

/// Kept for the tests that read it from here; defined in `fleethub_crds::names`.
pub use fleethub_crds::names::agent_cluster_role_name as cluster_role_name;

/// The objects the hub provisions for a member, each owned by its MemberCluster and labelled
/// with its name, in the order they are applied (the namespace first).
#[derive(Debug, Clone, PartialEq)]
pub struct Provisioned {
    /// `fleet-member-<name>`, which holds the member's Works.
    pub namespace: Namespace,
    /// The identity of the member's agent on the hub.
    pub service_account: ServiceAccount,
    /// Reading the member's Works and writing their status, and recording events.
    pub role: Role,
    /// Grants `role` to `service_account`.
    pub role_binding: RoleBinding,
    /// Reading and writing the status of the member's own MemberCluster, and nothing else.
    pub cluster_role: ClusterRole,
    /// Grants `cluster_role` to `service_account`.
    pub cluster_role_binding: ClusterRoleBinding,
}

/// The objects the hub provisions for `member`.
pub fn provisioned_objects(member: &MemberCluster) -> Provisioned {
    let name = member.name_any();
    let ns = names::member_namespace(&name);
    let meta = |object: &str, namespace: Option<&str>| ObjectMeta {
        name: Some(object.to_string()),
        namespace: namespace.map(str::to_string),
        labels: Some(BTreeMap::from([(
            names::CLUSTER_LABEL.to_string(),
            name.clone(),
        )])),
        owner_references: member.controller_owner_ref(&()).map(|o| vec![o]),
        ..Default::default()
    };
    let rule = |resources: &[&str], names: &[&str], verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![GROUP.to_string()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        resource_names: (!names.is_empty()).then(|| names.iter().map(|n| n.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    };
    let subjects = Some(vec![Subject {
        kind: ServiceAccount::KIND.into(),
        name: AGENT_SERVICE_ACCOUNT.into(),
        namespace: Some(ns.clone()),
        ..Default::default()
    }]);
    let role_ref = |kind: &str, name: &str| RoleRef {
        api_group: Role::GROUP.into(),
        kind: kind.into(),
        name: name.into(),
    };
    let works = Work::plural(&()).to_string();
    let works_status = format!("{works}/status");
    let members = MemberCluster::plural(&()).to_string();
    let members_status = format!("{members}/status");
    let cluster_role = cluster_role_name(&name);
    let mut p = Provisioned {
        namespace: Namespace {
            metadata: meta(&ns, None),
            ..Default::default()
        },
        service_account: ServiceAccount {
            metadata: meta(AGENT_SERVICE_ACCOUNT, Some(&ns)),
            ..Default::default()
        },
        role: Role {
            metadata: meta(AGENT_ROLE, Some(&ns)),
            rules: Some(vec![
                rule(&[&works], &[], &["get", "list", "watch", "update", "patch"]),
                rule(&[&works_status], &[], &["get", "update", "patch"]),
                PolicyRule {
                    api_groups: Some(vec![String::new(), "events.k8s.io".into()]),
                    resources: Some(vec!["events".into()]),
                    verbs: vec!["create".into(), "patch".into()],
                    ..Default::default()
                },
                // The heartbeat: the agent creates its Lease, then renews only that one.
                PolicyRule {
                    api_groups: Some(vec![Lease::GROUP.into()]),
                    resources: Some(vec![Lease::URL_PATH_SEGMENT.into()]),
                    verbs: vec!["create".into()],
                    ..Default::default()
                },
                PolicyRule {
                    api_groups: Some(vec![Lease::GROUP.into()]),
                    resources: Some(vec![Lease::URL_PATH_SEGMENT.into()]),
                    resource_names: Some(vec![AGENT_LEASE.into()]),
                    verbs: vec!["get".into(), "update".into()],
                    ..Default::default()
                },
            ]),
        },
        role_binding: RoleBinding {
            metadata: meta(AGENT_ROLE, Some(&ns)),
            role_ref: role_ref(Role::KIND, AGENT_ROLE),
            subjects: subjects.clone(),
        },
        cluster_role: ClusterRole {
            metadata: meta(&cluster_role, None),
            rules: Some(vec![
                rule(&[&members], &[&name], &["get", "list", "watch"]),
                rule(&[&members_status], &[&name], &["get", "update", "patch"]),
            ]),
            ..Default::default()
        },
        cluster_role_binding: ClusterRoleBinding {
            metadata: meta(&cluster_role, None),
            role_ref: role_ref(ClusterRole::KIND, &cluster_role),
            subjects,
        },
    };
    // Applied last, the ClusterRoleBinding records that all six were applied, and what they were.
    let mark = provisioning_record::fingerprint(&[
        &p.namespace,
        &p.service_account,
        &p.role,
        &p.role_binding,
        &p.cluster_role,
        &p.cluster_role_binding,
    ]);
    p.cluster_role_binding.metadata.annotations = Some(BTreeMap::from([(
        provisioning_record::ANNOTATION.to_string(),
        mark,
    )]));
    p
}

impl Provisioned {
    /// The fingerprint of the six objects (marked on the ClusterRoleBinding).
    pub fn fingerprint(&self) -> &str {
        self.cluster_role_binding
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(provisioning_record::ANNOTATION))
            .map_or("", String::as_str)
    }
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
            reason::AGENT_NOT_JOINED,
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
            reason::HEARTBEAT_FRESH,
            format!(
                "last heartbeat {age}s ago (expected every {}s)",
                period.as_secs()
            ),
            Some(stale_at),
        )
    } else {
        (
            FALSE,
            reason::HEARTBEAT_STALE,
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
    /// The agents' heartbeat Leases (those labelled with a member's name; each is read only
    /// from its member's own namespace, where only that member's agent may write).
    leases: Store<Lease>,
    stale_multiple: u32,
    /// When this process last applied each member's provisioned objects, by member UID. They
    /// depend only on the member's name and UID, so a reconcile for its health alone (a
    /// heartbeat going stale and coming back) does not re-apply them; they are re-asserted at
    /// least every `REPROVISION_AFTER` (repairing hand-made damage) and after a restart.
    provisioned: std::sync::Mutex<std::collections::HashMap<String, jiff::Timestamp>>,
    /// The marks a restarted hub found on members' ClusterRoleBindings, by member uid, until
    /// each member's first reconcile takes its own ([`provisioning_record`]).
    recorded: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl Context {
    /// When each member's objects were last provisioned (a poisoned lock still holds a view
    /// worth keeping: at worst a member is provisioned again).
    fn provisioned(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, jiff::Timestamp>> {
        self.provisioned.lock().unwrap_or_else(|e| e.into_inner())
    }
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
    members: fleethub_runtime::shared::Subscription<MemberCluster>,
    shutdown: CancellationToken,
) {
    use kube::runtime::WatchStreamExt;
    // Heartbeats change a MemberCluster every period; a reconcile provisions six objects, so
    // reconciling on each one costs six applies per member per period. Heartbeats of a healthy
    // member are left to the timer that judges staleness (`trigger`); the store still sees them.
    let reader = members.store.clone();
    metrics.count_members_in(reader.clone());
    let recorded = provisioning_record::recorded(&client, names::CLUSTER_LABEL).await;
    let stream = members
        .events
        .applied_objects()
        .predicate_filter(trigger, Default::default());
    let (leases, lease_writer) = kube::runtime::reflector::store();
    let (renewed, came_back) = futures::channel::mpsc::unbounded();
    let lease_watch = tokio::spawn(follow_leases(
        Api::all(client.clone()),
        lease_writer,
        reader.clone(),
        renewed,
        shutdown.clone(),
    ));
    kube::runtime::Controller::for_stream(stream, reader)
        .reconcile_on(came_back)
        .with_config(kube::runtime::controller::Config::default().concurrency(MEMBER_CONCURRENCY))
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(
            |o, c| crate::error::bounded(reconcile(o, c)),
            error_policy,
            Arc::new(Context {
                client,
                clock,
                leases,
                stale_multiple,
                provisioned: Default::default(),
                recorded: std::sync::Mutex::new(recorded),
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
    lease_watch.abort();
}

/// Fills the store of the agents' Leases (labelled with a member's name), and asks for a
/// reconcile of a member whose renewed Lease may change the hub's verdict: one not `Healthy`
/// yet (coming back, or just joined). A healthy member's renewals are read by the reconcile its
/// staleness timer triggers, as its MemberCluster's heartbeats are.
async fn follow_leases(
    api: Api<Lease>,
    writer: kube::runtime::reflector::store::Writer<Lease>,
    members: Store<MemberCluster>,
    renewed: futures::channel::mpsc::UnboundedSender<ObjectRef<MemberCluster>>,
    shutdown: CancellationToken,
) {
    use kube::runtime::WatchStreamExt;
    // A restarted hub's runs wait for the lists of MemberClusters, Bindings and Works; the
    // Leases (as many as members) are listed after the members, not beside those three.
    while !fleethub_runtime::ready_within(Duration::from_secs(1), || members.wait_until_ready())
        .await
    {
        if shutdown.is_cancelled() {
            return;
        }
    }
    let config = fleethub_runtime::watcher_config().labels(names::CLUSTER_LABEL);
    let events = fleethub_runtime::reflected_events(api, config, writer).applied_objects();
    let mut events = std::pin::pin!(events);
    loop {
        let lease = tokio::select! {
            _ = shutdown.cancelled() => return,
            next = events.next() => match next {
                None => return,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "watching the agents' Leases failed; retrying");
                    continue;
                }
                Some(Ok(lease)) => lease,
            },
        };
        if lease.name_any() != AGENT_LEASE {
            continue;
        }
        let Some(member) = lease
            .namespace()
            .as_deref()
            .and_then(names::cluster_of_namespace)
            .map(ObjectRef::new)
        else {
            continue;
        };
        let healthy = members.get(&member).is_some_and(|m| {
            m.status
                .as_ref()
                .is_some_and(|s| fleethub_crds::conditions::is_true(&s.conditions, HEALTHY))
        });
        if !healthy && renewed.unbounded_send(member).is_err() {
            return;
        }
    }
}

/// The member's last heartbeat: the newer of its agent's Lease renewal and its status's
/// `lastHeartbeatTime` (what agents older than Leases write every period); and the period its
/// agent keeps, as its Lease says (`leaseDurationSeconds`; an agent sees a changed
/// `heartbeatPeriodSeconds` within minutes, and until then keeps the one it has).
fn last_heartbeat(
    member: &MemberCluster,
    leases: &Store<Lease>,
) -> (Option<Timestamp>, Option<Duration>) {
    let lease =
        ObjectRef::<Lease>::new(AGENT_LEASE).within(&names::member_namespace(&member.name_any()));
    let lease = leases.get(&lease);
    let spec = lease.as_ref().and_then(|l| l.spec.as_ref());
    let renewed = spec.and_then(|s| s.renew_time.as_ref().map(|t| t.0));
    let kept = spec
        .and_then(|s| s.lease_duration_seconds)
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        // No longer than a MemberCluster's longest period: a Lease cannot keep a member
        // healthy for ever.
        .map(|s| Duration::from_secs(s.min(u64::from(MAX_HEARTBEAT_PERIOD_SECONDS))));
    let reported = member
        .status
        .as_ref()
        .and_then(|s| s.last_heartbeat_time.as_ref().map(|t| t.0));
    (renewed.max(reported), kept)
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
        ctx.provisioned().remove(&uid);
        return Ok(Requeue::await_change()); // owner references clean up
    }
    let now = ctx.clock.now();
    let fresh = ctx
        .provisioned()
        .get(&uid)
        .is_some_and(|at| now.duration_since(*at).unsigned_abs() < REPROVISION_AFTER);
    if !fresh {
        let objects = provisioned_objects(&member);
        let mark = ctx
            .recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&uid);
        let trusted = provisioning_record::trusted_since(
            mark.as_deref(),
            objects.fingerprint(),
            &uid,
            now,
            REPROVISION_AFTER,
        );
        match trusted {
            Some(since) => {
                ctx.provisioned().insert(uid, since);
            }
            None => {
                provision(&ctx.client, objects).await?;
                ctx.provisioned().insert(uid, now);
            }
        }
    }

    // Right after a start, the Leases must be listed before any member is judged from them.
    if !fleethub_runtime::ready_within(fleethub_runtime::CACHE_WAIT, || {
        ctx.leases.wait_until_ready()
    })
    .await
    {
        return Ok(Requeue::requeue(fleethub_runtime::CACHE_WAIT));
    }
    let status = member.status.clone().unwrap_or_default();
    let period = member
        .spec
        .heartbeat_period_seconds
        .map_or(DEFAULT_HEARTBEAT_PERIOD, |s| {
            Duration::from_secs(s.max(1) as u64)
        });
    let (last, kept) = last_heartbeat(&member, &ctx.leases);
    let (state, reason, message, stale_at) = judge_health(
        last,
        kept.map_or(period, |kept| kept.max(period)),
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
        // Only `Healthy` is ours: the agent owns the rest of the status.
        let healthy = conditions.into_iter().filter(|c| c.type_ == HEALTHY);
        let name = member.name_any();
        let patch = MemberCluster {
            status: Some(MemberClusterStatus {
                conditions: healthy.collect(),
                ..Default::default()
            }),
            // The status subresource ignores the spec; it is sent only because the type has one.
            ..MemberCluster::new(&name, member.spec.clone())
        };
        Api::<MemberCluster>::all(ctx.client.clone())
            .patch_status(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
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

/// Applies every object of `p`, the namespace first.
async fn provision(client: &Client, p: Provisioned) -> Result<(), Error> {
    let ns = p.namespace.name_any();
    let c = || client.clone();
    apply(Api::all(c()), &p.namespace).await?;
    apply(Api::namespaced(c(), &ns), &p.service_account).await?;
    apply(Api::namespaced(c(), &ns), &p.role).await?;
    apply(Api::namespaced(c(), &ns), &p.role_binding).await?;
    apply(Api::all(c()), &p.cluster_role).await?;
    apply(Api::all(c()), &p.cluster_role_binding).await
}

/// Server-side applies `object` through `api` under this controller's field manager.
async fn apply<K>(api: Api<K>, object: &K) -> Result<(), Error>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(&object.name_any(), &params, &Patch::Apply(object))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleethub_crds::member_cluster::MemberClusterSpec;
    use serde_json::json;

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
    fn the_heartbeat_is_the_newer_of_the_lease_and_the_status_and_the_lease_says_the_period() {
        let mut member = MemberCluster::new("m1", MemberClusterSpec::default());
        member.status = Some(MemberClusterStatus {
            last_heartbeat_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t(10))),
            ..Default::default()
        });
        let (leases, mut writer) = kube::runtime::reflector::store::<Lease>();
        // No Lease (an agent older than Leases): the status's time.
        assert_eq!(last_heartbeat(&member, &leases), (Some(t(10)), None));
        let lease = |member: &str, at: i64, secs: u64| {
            fleethub_crds::member_cluster::agent_lease(
                None,
                member,
                "agent",
                Duration::from_secs(secs),
                t(at),
            )
        };
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(lease("m1", 40, 30)));
        assert_eq!(
            last_heartbeat(&member, &leases),
            (Some(t(40)), Some(Duration::from_secs(30)))
        );
        // A newer status report wins; a period beyond the schema's maximum is capped.
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(lease(
            "m1", 5, 86_400,
        )));
        assert_eq!(
            last_heartbeat(&member, &leases),
            (Some(t(10)), Some(Duration::from_secs(600)))
        );
        // Another member's Lease says nothing of this one.
        let other = MemberCluster::new("m2", MemberClusterSpec::default());
        assert_eq!(last_heartbeat(&other, &leases), (None, None));
    }

    #[test]
    fn provisioning_is_scoped_to_the_member() {
        let mut member = MemberCluster::new("m1", MemberClusterSpec::default());
        member.metadata.uid = Some("uid-1".into());
        let p = provisioned_objects(&member);
        let objs: Vec<serde_json::Value> = [
            serde_json::to_value(&p.namespace),
            serde_json::to_value(&p.service_account),
            serde_json::to_value(&p.role),
            serde_json::to_value(&p.role_binding),
            serde_json::to_value(&p.cluster_role),
            serde_json::to_value(&p.cluster_role_binding),
        ]
        .into_iter()
        .map(Result::unwrap)
        .collect();
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
            assert_eq!(o["metadata"]["labels"]["fleethub.dev/cluster"], "m1", "{o}");
            assert!(!o.to_string().contains("null"), "no null fields: {o}");
        }
        assert_eq!(objs[0]["metadata"]["name"], "fleet-member-m1");
        assert_eq!(objs[1]["metadata"]["name"], "member-agent");
        assert_eq!(objs[2]["metadata"]["namespace"], "fleet-member-m1");
        assert_eq!(
            objs[2]["rules"][0],
            json!({"apiGroups": ["fleethub.dev"], "resources": ["works"],
                   "verbs": ["get", "list", "watch", "update", "patch"]})
        );
        assert_eq!(
            objs[3]["subjects"],
            json!([{"kind": "ServiceAccount", "name": "member-agent", "namespace": "fleet-member-m1"}])
        );
        // Cluster-wide rights are limited to this member's own MemberCluster.
        assert_eq!(objs[4]["metadata"]["name"], "fleethub:member:m1");
        assert_eq!(
            objs[4]["rules"][1]["resources"],
            json!(["memberclusters/status"])
        );
        for rule in objs[4]["rules"].as_array().unwrap() {
            assert_eq!(rule["resourceNames"], json!(["m1"]));
        }
        assert_eq!(objs[5]["roleRef"]["name"], "fleethub:member:m1");
    }
}
