//! Joining the hub and heartbeating. Every heartbeat period the agent renews its Lease
//! `member-agent` in its member's hub namespace (`fleet-member-<name>`): the hub judges the
//! member `Healthy` from its `renewTime`. The MemberCluster's status (server-side apply, status
//! subresource: `Joined=True`, the time of the report, its own and the member's Kubernetes
//! version, the node count and the nodes' summed allocatable resources) is written by the first
//! heartbeat (and the first after a failure), when any of it changes, and at least every
//! [`STATUS_REPORT_PERIOD`]; against a hub that does not grant
//! the Lease, every heartbeat. The agent never writes `Healthy` and never creates the
//! MemberCluster: while it does not exist, the agent is not ready and retries with backoff.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fleethub_crds::MemberCluster;
use fleethub_crds::conditions::{self, NewCondition, set_condition};
use fleethub_crds::field_manager::MEMBER_AGENT;
use fleethub_crds::member_cluster::reason::AGENT_JOINED;
use fleethub_crds::member_cluster::{
    AGENT_LEASE, DEFAULT_HEARTBEAT_PERIOD, JOINED, MemberClusterSpec, MemberClusterStatus,
    STATUS_REPORT_PERIOD, agent_lease,
};
use fleethub_crds::names;
use fleethub_runtime::Health;
use fleethub_runtime::retry::ERROR_BACKOFF;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use serde_json::json;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::{AGENT_VERSION, Error, quantity, readiness};

/// The allocatable resources summed into the MemberCluster's status.
const SUMMED_RESOURCES: [&str; 3] = ["cpu", "memory", "pods"];

/// What the agent saw of its member cluster for one heartbeat.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    /// The member API server's version (`/version` gitVersion).
    pub kubernetes_version: String,
    /// The member's nodes.
    pub nodes: Vec<Node>,
}

/// The status fields the agent owns on its MemberCluster, given the `previous` status (whose
/// `Joined` transition time is kept) and the MemberCluster's `generation`.
pub fn status(
    previous: Option<&MemberClusterStatus>,
    generation: Option<i64>,
    observation: &Observation,
    now: Timestamp,
) -> MemberClusterStatus {
    // Only `Joined` is ours: the hub's `Healthy` stays out of what the agent applies.
    let mut conds: Vec<_> = previous
        .and_then(|s| conditions::find(&s.conditions, JOINED))
        .cloned()
        .into_iter()
        .collect();
    set_condition(
        &mut conds,
        NewCondition::new(
            JOINED,
            conditions::TRUE,
            AGENT_JOINED,
            format!("member agent {AGENT_VERSION} has joined and reports a heartbeat"),
            generation,
        ),
        now,
    );
    MemberClusterStatus {
        conditions: conds,
        last_heartbeat_time: Some(Time(now)),
        agent_version: Some(AGENT_VERSION.to_string()),
        kubernetes_version: Some(observation.kubernetes_version.clone()),
        node_count: Some(i32::try_from(observation.nodes.len()).unwrap_or(i32::MAX)),
        allocatable: allocatable(&observation.nodes),
    }
}

/// The sum of the nodes' allocatable cpu, memory and pods, as Kubernetes quantities. A resource
/// no node reports is left out; one whose quantities cannot be summed is left out and logged.
pub fn allocatable(nodes: &[Node]) -> BTreeMap<String, String> {
    let mut sums = BTreeMap::new();
    for resource in SUMMED_RESOURCES {
        let values: Vec<&str> = nodes
            .iter()
            .filter_map(|n| n.status.as_ref()?.allocatable.as_ref()?.get(resource))
            .map(|q| q.0.as_str())
            .collect();
        if values.is_empty() {
            continue;
        }
        match quantity::sum(values) {
            Ok(total) => {
                sums.insert(resource.to_string(), total);
            }
            Err(e) => tracing::warn!(resource, error = %e, "cannot sum the nodes' allocatable"),
        }
    }
    sums
}

/// How long to wait between heartbeats: the flag's override, else the MemberCluster's
/// `heartbeatPeriodSeconds`, else [`DEFAULT_HEARTBEAT_PERIOD`].
pub fn period(spec: &MemberClusterSpec, override_period: Option<Duration>) -> Duration {
    override_period
        .or_else(|| {
            spec.heartbeat_period_seconds
                .and_then(|s| u64::try_from(s).ok())
                .filter(|s| *s > 0)
                .map(Duration::from_secs)
        })
        .unwrap_or(DEFAULT_HEARTBEAT_PERIOD)
}

/// Whether the status the agent would write says something `current` (the MemberCluster's
/// status as read) does not: one of the agent's own fields differs, or `current` was confirmed
/// longer than [`STATUS_REPORT_PERIOD`] before `now`.
pub fn status_due(
    current: Option<&MemberClusterStatus>,
    ours: &MemberClusterStatus,
    now: Timestamp,
) -> bool {
    let Some(current) = current else {
        return true;
    };
    let joined = |s: &MemberClusterStatus| {
        conditions::find(&s.conditions, JOINED)
            .map(|c| (c.status.clone(), c.reason.clone(), c.observed_generation))
    };
    let confirmed = current
        .last_heartbeat_time
        .as_ref()
        .is_some_and(|t| now.duration_since(t.0).unsigned_abs() < STATUS_REPORT_PERIOD);
    !confirmed
        || joined(current) != joined(ours)
        || current.agent_version != ours.agent_version
        || current.kubernetes_version != ours.kubernetes_version
        || current.node_count != ours.node_count
        || current.allocatable != ours.allocatable
}

/// What one heartbeat carries over to the next.
#[derive(Default)]
pub struct Beats {
    /// The agent's Lease as the last renewal returned it.
    lease: Option<Lease>,
    /// The MemberCluster as the agent last read or wrote it (its spec holds the period; its
    /// status, what is reported): read again only when there is none (the first heartbeat,
    /// and the one after a failure), and returned by every status write, which happens at
    /// least every [`STATUS_REPORT_PERIOD`].
    member: Option<MemberCluster>,
    /// When the hub refused the Lease (an older hub that does not grant it): the status carries
    /// every heartbeat instead, as before Leases, and the Lease is tried again after
    /// [`STATUS_REPORT_PERIOD`] (the hub may have been upgraded meanwhile).
    lease_refused: Option<Timestamp>,
}

/// Writes the heartbeats of one member.
pub struct Heartbeat {
    /// Client of the hub.
    pub hub: Client,
    /// Client of the member cluster.
    pub member: Client,
    /// The MemberCluster the agent acts for.
    pub member_name: String,
    /// A fixed period instead of the MemberCluster's.
    pub period_override: Option<Duration>,
    /// The time source.
    pub clock: Arc<dyn Clock>,
    /// Where heartbeats are counted.
    pub metrics: Metrics,
}

impl Heartbeat {
    /// Writes one heartbeat; returns the period until the next one. A heartbeat renews the
    /// agent's Lease `member-agent` in the member's hub namespace (a small built-in object,
    /// written with an update, one request), and writes the MemberCluster's status only when
    /// [`status_due`]: at 1,000 members a status apply every period was the hub API server's
    /// most frequent request. The period comes from the MemberCluster as last read or written
    /// (at most [`STATUS_REPORT_PERIOD`] old); the Lease says which period the agent keeps
    /// (`leaseDurationSeconds`), and the hub allows for it until the agent sees a new one.
    pub async fn beat(&self, beats: &mut Beats) -> Result<Duration, Error> {
        let name = &self.member_name;
        // A heartbeat without a copy (the process's first, or the first after a failure)
        // reports the status: a new agent announces itself (`kubectl fleet join` waits for a
        // report from after it started), and after a failure what the hub holds is unknown.
        let announce = beats.member.is_none();
        let mc = match beats.member.take() {
            Some(mc) => mc,
            None => match Api::<MemberCluster>::all(self.hub.clone()).get(name).await {
                Ok(mc) => mc,
                Err(e) if crate::error::is_not_found(&e) => {
                    return Err(Error::MemberClusterMissing(name.clone()));
                }
                Err(e) => return Err(Error::hub(format!("reading MemberCluster {name}"))(e)),
            },
        };
        let period = period(&mc.spec, self.period_override);
        let version = self
            .member
            .apiserver_version()
            .await
            .map_err(Error::member("reading the API server version"))?;
        let nodes = Api::<Node>::all(self.member.clone())
            .list(&ListParams::default())
            .await
            .map_err(Error::member("listing nodes"))?;
        let observation = Observation {
            kubernetes_version: version.git_version,
            nodes: nodes.items,
        };
        let now = self.clock.now();
        let status = status(
            mc.status.as_ref(),
            mc.metadata.generation,
            &observation,
            now,
        );
        let refused_lately = beats
            .lease_refused
            .is_some_and(|at| now.duration_since(at).unsigned_abs() < STATUS_REPORT_PERIOD);
        let renewed = if refused_lately {
            false
        } else {
            match self.renew(beats, period, now).await {
                Ok(()) => {
                    beats.lease_refused = None;
                    true
                }
                Err(e) if crate::error::is_forbidden(&e) => {
                    if beats.lease_refused.is_none() {
                        tracing::warn!(member = %name, error = %crate::error::describe(&e),
                            "the hub does not let this agent renew its Lease (an older hub?): heartbeats go to the MemberCluster's status");
                    }
                    beats.lease_refused = Some(now);
                    false
                }
                Err(e) => {
                    return Err(Error::hub(format!("renewing the Lease of member {name}"))(
                        e,
                    ));
                }
            }
        };
        beats.member = Some(
            if announce || !renewed || status_due(mc.status.as_ref(), &status, now) {
                let written = self.write_status(&status).await?;
                tracing::debug!(member = %name, nodes = status.node_count, "status written");
                written
            } else {
                mc
            },
        );
        self.metrics.heartbeat(true, now);
        Ok(period)
    }

    /// Renews the agent's Lease: an update carrying the resourceVersion last seen, a create
    /// when there is none. A conflict (someone else wrote it, or created it meanwhile) or a
    /// 404 (it was deleted) reads it again and retries once.
    async fn renew(
        &self,
        beats: &mut Beats,
        period: Duration,
        now: Timestamp,
    ) -> Result<(), kube::Error> {
        let name = &self.member_name;
        let leases: Api<Lease> = Api::namespaced(self.hub.clone(), &names::member_namespace(name));
        let mut retried = false;
        loop {
            let previous = match beats.lease.take() {
                Some(lease) => Some(lease),
                None => leases.get_opt(AGENT_LEASE).await?,
            };
            let lease = agent_lease(previous, name, &agent_identity(name), period, now);
            let written = if lease.metadata.resource_version.is_some() {
                leases
                    .replace(AGENT_LEASE, &PostParams::default(), &lease)
                    .await
            } else {
                leases.create(&PostParams::default(), &lease).await
            };
            match written {
                Ok(lease) => {
                    beats.lease = Some(lease);
                    return Ok(());
                }
                Err(e)
                    if !retried
                        && (crate::error::is_conflict(&e) || crate::error::is_not_found(&e)) =>
                {
                    retried = true;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Server-side applies the agent's fields of the MemberCluster's status.
    async fn write_status(&self, status: &MemberClusterStatus) -> Result<MemberCluster, Error> {
        let name = &self.member_name;
        let patch = json!({
            "apiVersion": MemberCluster::api_version(&()),
            "kind": MemberCluster::kind(&()),
            "metadata": {"name": name},
            "status": status,
        });
        Api::<MemberCluster>::all(self.hub.clone())
            .patch_status(
                name,
                &PatchParams::apply(MEMBER_AGENT).force(),
                &Patch::Apply(&patch),
            )
            .await
            .map_err(|e| {
                if crate::error::is_not_found(&e) {
                    Error::MemberClusterMissing(name.clone())
                } else {
                    Error::hub(format!("writing the status of MemberCluster {name}"))(e)
                }
            })
    }

    /// Heartbeats until `shutdown`, recording the outcome as readiness check
    /// [`readiness::MEMBER_CLUSTER`]. `joined` fires after the first heartbeat that succeeded.
    pub async fn run(
        self,
        health: Health,
        shutdown: CancellationToken,
        joined: oneshot::Sender<()>,
    ) {
        let mut joined = Some(joined);
        let mut failures: u32 = 0;
        let mut beats = Beats::default();
        loop {
            // A beat waiting on a slow hub must not hold up shutdown (a Lease update is whole
            // or not at all, so dropping it midway is safe).
            let outcome = tokio::select! {
                _ = shutdown.cancelled() => return,
                outcome = self.beat(&mut beats) => outcome,
            };
            let wait = match outcome {
                Ok(period) => {
                    if let Some(tx) = joined.take() {
                        tracing::info!(member = %self.member_name, ?period, "joined the hub");
                        let _ = tx.send(());
                    } else if failures > 0 {
                        tracing::info!(member = %self.member_name, "heartbeats succeed again");
                    }
                    failures = 0;
                    health.set(readiness::MEMBER_CLUSTER, Ok(()));
                    period
                }
                Err(e) => {
                    let retry_in = ERROR_BACKOFF.delay(failures);
                    failures = failures.saturating_add(1);
                    self.metrics.heartbeat(false, self.clock.now());
                    tracing::warn!(member = %self.member_name, error = %e, ?retry_in, "heartbeat failed");
                    health.set(readiness::MEMBER_CLUSTER, Err(e.to_string()));
                    retry_in
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}

/// The holder the agent writes into its Lease: its pod (`POD_NAME`) or host, with the member.
fn agent_identity(member: &str) -> String {
    std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .map(|host| format!("{member}/{host}"))
        .unwrap_or_else(|_| member.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeStatus;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    fn node(cpu: &str, memory: &str, pods: &str) -> Node {
        Node {
            status: Some(NodeStatus {
                allocatable: Some(BTreeMap::from([
                    ("cpu".to_string(), Quantity(cpu.into())),
                    ("memory".to_string(), Quantity(memory.into())),
                    ("pods".to_string(), Quantity(pods.into())),
                    ("ephemeral-storage".to_string(), Quantity("10Gi".into())),
                ])),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn ts(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    #[test]
    fn sums_allocatable_cpu_memory_and_pods() {
        let nodes = [
            node("8", "32Gi", "110"),
            node("7500m", "16Gi", "110"),
            Node::default(),
        ];
        assert_eq!(
            allocatable(&nodes),
            BTreeMap::from([
                ("cpu".to_string(), "15500m".to_string()),
                ("memory".to_string(), "48Gi".to_string()),
                ("pods".to_string(), "220".to_string()),
            ])
        );
        assert!(allocatable(&[]).is_empty());
        // An unparsable quantity leaves that resource out, not the others.
        let sums = allocatable(&[node("lots", "1Gi", "1")]);
        assert_eq!(sums.get("cpu"), None);
        assert_eq!(sums.get("memory").map(String::as_str), Some("1Gi"));
    }

    #[test]
    fn status_is_joined_with_the_observation_and_leaves_healthy_to_the_hub() {
        let observation = Observation {
            kubernetes_version: "v1.33.13".into(),
            nodes: vec![node("8", "32Gi", "110"); 3],
        };
        let s = status(None, Some(2), &observation, ts(100));
        assert_eq!(s.conditions.len(), 1);
        let joined = &s.conditions[0];
        assert_eq!(
            (
                joined.type_.as_str(),
                joined.status.as_str(),
                joined.reason.as_str()
            ),
            (JOINED, conditions::TRUE, AGENT_JOINED)
        );
        assert_eq!(joined.observed_generation, Some(2));
        assert_eq!(s.last_heartbeat_time, Some(Time(ts(100))));
        assert_eq!(s.agent_version.as_deref(), Some(AGENT_VERSION));
        assert_eq!(s.kubernetes_version.as_deref(), Some("v1.33.13"));
        assert_eq!(s.node_count, Some(3));
        assert_eq!(s.allocatable["cpu"], "24");
        assert_eq!(s.allocatable["memory"], "96Gi");
        assert_eq!(s.allocatable["pods"], "330");

        // The next heartbeat moves the heartbeat time, not the Joined transition time, and does
        // not copy the hub's Healthy condition.
        let mut previous = s.clone();
        previous.conditions.push(Condition {
            type_: fleethub_crds::member_cluster::HEALTHY.into(),
            status: conditions::TRUE.into(),
            reason: fleethub_crds::member_cluster::reason::HEARTBEAT_FRESH.into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(ts(101)),
        });
        let next = status(Some(&previous), Some(2), &observation, ts(115));
        assert_eq!(next.conditions.len(), 1);
        assert_eq!(next.conditions[0].last_transition_time, Time(ts(100)));
        assert_eq!(next.last_heartbeat_time, Some(Time(ts(115))));
    }

    #[test]
    fn the_status_is_written_when_it_changes_or_grows_old() {
        let observation = Observation {
            kubernetes_version: "v1.33.13".into(),
            nodes: vec![node("8", "32Gi", "110"); 3],
        };
        let written = status(None, Some(1), &observation, ts(1_000));
        assert!(
            status_due(None, &written, ts(1_000)),
            "nothing reported yet"
        );
        // The next heartbeats carry nothing new: the Lease is enough.
        let again = status(Some(&written), Some(1), &observation, ts(1_015));
        assert!(!status_due(Some(&written), &again, ts(1_015)));
        assert!(!status_due(Some(&written), &again, ts(1_299)));
        // ... until the report is STATUS_REPORT_PERIOD old.
        assert!(status_due(Some(&written), &again, ts(1_300)));
        // A node more, a new version, a new generation: written at once.
        let mut more = observation.clone();
        more.nodes.push(node("8", "32Gi", "110"));
        let changed = status(Some(&written), Some(1), &more, ts(1_015));
        assert!(status_due(Some(&written), &changed, ts(1_015)));
        let mut upgraded = observation.clone();
        upgraded.kubernetes_version = "v1.34.1".into();
        let changed = status(Some(&written), Some(1), &upgraded, ts(1_015));
        assert!(status_due(Some(&written), &changed, ts(1_015)));
        let changed = status(Some(&written), Some(2), &observation, ts(1_015));
        assert!(status_due(Some(&written), &changed, ts(1_015)));
        // The hub's Healthy beside the agent's fields is not a difference.
        let mut with_healthy = written.clone();
        with_healthy.conditions.push(Condition {
            type_: fleethub_crds::member_cluster::HEALTHY.into(),
            status: conditions::TRUE.into(),
            reason: fleethub_crds::member_cluster::reason::HEARTBEAT_FRESH.into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(ts(1_001)),
        });
        assert!(!status_due(Some(&with_healthy), &again, ts(1_015)));
    }

    #[test]
    fn period_prefers_the_flag_then_the_member_cluster() {
        let spec = |s| MemberClusterSpec {
            heartbeat_period_seconds: s,
        };
        let secs = Duration::from_secs;
        assert_eq!(period(&spec(None), None), DEFAULT_HEARTBEAT_PERIOD);
        assert_eq!(period(&spec(Some(3)), None), secs(3));
        assert_eq!(period(&spec(Some(3)), Some(secs(1))), secs(1));
        assert_eq!(period(&spec(Some(0)), None), DEFAULT_HEARTBEAT_PERIOD);
    }
}
