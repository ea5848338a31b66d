//! The hub's Prometheus metrics (prefix `fleethub_hub_`).

use std::sync::{Arc, Mutex, PoisonError};

use fleethub_crds::approval::APPROVED;
use fleethub_crds::conditions::{find, is_true};
use fleethub_crds::member_cluster::HEALTHY;
use fleethub_crds::{ApprovalRequest, MemberCluster};
use jiff::Timestamp;
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub mod fleet_versions;

pub use fleet_versions::FleetVersions;

/// Labels naming a controller.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// `membership`, `placement`, `update-run`, `work-generator`.
    pub controller: &'static str,
}

/// Labels of a metric gate's check.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MetricCheckLabels {
    /// `pass`, `no-data` or `error`.
    pub result: &'static str,
}

/// Labels of a reconcile error.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// The controller.
    pub controller: &'static str,
    /// The kind of error (`conflict`, `kube`, `invalid`).
    pub error: &'static str,
}

/// Where an UpdateRun is.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum RunState {
    /// Not initialized yet.
    Pending,
    /// Updating clusters.
    Progressing,
    /// Waiting on an after-stage task.
    Waiting,
    /// Stopped by spec.state.
    Stopped,
    /// A cluster failed; waiting for it to recover.
    Blocked,
    /// A cluster the run updated regressed; waiting for it to recover.
    Held,
    /// Finished successfully.
    Succeeded,
    /// Failed (initialization).
    Failed,
}

impl RunState {
    /// Every state, in the order of the lifecycle.
    pub const ALL: [RunState; 8] = [
        RunState::Pending,
        RunState::Progressing,
        RunState::Waiting,
        RunState::Stopped,
        RunState::Blocked,
        RunState::Held,
        RunState::Succeeded,
        RunState::Failed,
    ];
}

/// The hub's controllers, as named in metric labels.
pub const CONTROLLERS: [&str; 5] = [
    "auto-update",
    "membership",
    "placement",
    "update-run",
    "work-generator",
];
/// Kinds of reconcile errors, as named in metric labels (see `Error::metric_label`).
pub const ERROR_KINDS: [&str; 5] = ["conflict", "kube", "invalid", "timeout", "watch"];

/// Labels of the runs gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RunStateLabels {
    /// The state.
    pub state: RunState,
}

/// Labels of an auto-update check.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CheckLabels {
    /// `ok` or `error`.
    pub result: &'static str,
}

/// Labels naming an AutoUpdatePolicy.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    /// The policy.
    pub policy: String,
}

/// Labels of the auto-update version info.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VersionLabels {
    /// The policy.
    pub policy: String,
    /// `status.currentVersion` (empty when unknown).
    pub current: String,
    /// `status.availableVersion` (empty when none).
    pub available: String,
}

/// The auto-update controller's metrics (`fleethub_hub_autoupdate_*`).
#[derive(Clone, Default)]
pub struct AutoUpdateMetrics {
    /// Registry checks, by result.
    pub checks: Family<CheckLabels, Counter>,
    /// Updates started (a version put on a target).
    pub updates_started: Counter,
    /// Rollbacks started.
    pub rollbacks: Counter,
    /// 1 while a policy's circuit is open.
    pub circuit_open: Family<PolicyLabels, Gauge>,
    /// Policies whose circuit is open (exported even when there are none, for alerts).
    pub circuits_open: Gauge,
    /// 1 per policy, labelled with its current and available versions.
    pub version_info: Family<VersionLabels, Gauge>,
    /// The labels of each policy's version-info series, to drop it when the versions change.
    version_labels: Arc<Mutex<std::collections::BTreeMap<String, VersionLabels>>>,
}

impl AutoUpdateMetrics {
    fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("autoupdate");
        sub.register(
            "checks",
            "Registry checks of AutoUpdatePolicies, by result (ok, error)",
            self.checks.clone(),
        );
        for result in ["ok", "error"] {
            let _ = self.checks.get_or_create(&CheckLabels { result });
        }
        sub.register(
            "updates_started",
            "Versions an AutoUpdatePolicy started rolling out",
            self.updates_started.clone(),
        );
        sub.register(
            "rollbacks",
            "Versions an AutoUpdatePolicy rolled back",
            self.rollbacks.clone(),
        );
        sub.register(
            "circuit_open",
            "1 while an AutoUpdatePolicy's circuit breaker is open (nothing is applied)",
            self.circuit_open.clone(),
        );
        sub.register(
            "circuits_open",
            "AutoUpdatePolicies whose circuit breaker is open (leader only)",
            self.circuits_open.clone(),
        );
        sub.register(
            "version_info",
            "1 per AutoUpdatePolicy, labelled with its current and available versions",
            self.version_info.clone(),
        );
    }

    /// Drops the per-policy gauges (this process stopped leading).
    fn forget(&self) {
        self.circuit_open.clear();
        self.circuits_open.set(0);
        self.version_info.clear();
        self.version_labels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Counts one registry check.
    pub fn count_check(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.checks.get_or_create(&CheckLabels { result }).inc();
    }

    /// Sets a policy's gauges.
    pub fn set_state(
        &self,
        policy: &str,
        circuit_open: bool,
        current: Option<&str>,
        available: Option<&str>,
    ) {
        let was = self
            .circuit_open
            .get_or_create(&PolicyLabels {
                policy: policy.to_string(),
            })
            .set(i64::from(circuit_open));
        self.circuits_open.inc_by(i64::from(circuit_open) - was);
        let labels = VersionLabels {
            policy: policy.to_string(),
            current: current.unwrap_or_default().to_string(),
            available: available.unwrap_or_default().to_string(),
        };
        // One series per policy: drop the one with the old versions.
        let mut known = self
            .version_labels
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(old) = known.insert(policy.to_string(), labels.clone())
            && old != labels
        {
            self.version_info.remove(&old);
        }
        self.version_info.get_or_create(&labels).set(1);
    }
}

/// Labels of the rollbacks counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RollbackLabels {
    /// The reason the run failed (`ClusterUpdateFailed`, `MetricCheckTimedOut`, …).
    pub cause: &'static str,
}

/// Every metric the hub exports.
#[derive(Clone)]
pub struct Metrics {
    /// Reconciles by controller.
    pub reconciles: Family<ControllerLabels, Counter>,
    /// Reconcile errors by controller and kind.
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    /// UpdateRuns by state.
    pub update_runs: Family<RunStateLabels, Gauge>,
    /// Seconds from a cluster's start to its member reporting it available.
    pub cluster_update_seconds: Histogram,
    /// Seconds from a stage's start to its end (after-stage tasks included).
    pub stage_seconds: Histogram,
    /// Seconds an ApprovalRequest waited for a person.
    pub approval_wait_seconds: Histogram,
    /// 1 while this process holds the leader-election lease (and runs the controllers).
    pub leader: Gauge,
    /// Prometheus queries of metric gates, by result.
    pub metric_checks: Family<MetricCheckLabels, Counter>,
    /// Clusters that regressed after a run updated them.
    pub cluster_regressions: Counter,
    /// Rollback runs created by failed runs (`onFailure: Rollback`), by the failure's reason.
    pub run_rollbacks: Family<RollbackLabels, Counter>,
    /// The auto-update controller's.
    pub auto_update: AutoUpdateMetrics,
    /// Which snapshot (and auto-update image) each cluster runs, and the clusters' moves; fed
    /// by the placement controller.
    pub fleet_versions: FleetVersions,
    live: Arc<Live>,
}

/// Gauges computed when scraped from the leader's caches: member health and pending approvals.
/// Empty on a standby (it has no caches), so alerts see exactly one value per fleet.
#[derive(Debug, Default)]
struct Live {
    members: Mutex<Option<Store<MemberCluster>>>,
    approvals: Mutex<Option<Store<ApprovalRequest>>>,
}

/// Members by the status of their `Healthy` condition (`True`, `False`, `Unknown`).
pub fn members_by_health(members: &[Arc<MemberCluster>]) -> [(&'static str, i64); 3] {
    let mut counts = [("True", 0), ("False", 0), ("Unknown", 0)];
    for m in members {
        let status = m
            .status
            .as_ref()
            .and_then(|s| find(&s.conditions, HEALTHY))
            .map_or("Unknown", |c| c.status.as_str());
        let i = match status {
            "True" => 0,
            "False" => 1,
            _ => 2,
        };
        counts[i].1 += 1;
    }
    counts
}

/// Approval requests not approved yet, and the age in seconds of the oldest one at `now`.
pub fn pending_approvals(approvals: &[Arc<ApprovalRequest>], now: Timestamp) -> (i64, f64) {
    let pending: Vec<&Arc<ApprovalRequest>> = approvals
        .iter()
        .filter(|a| a.metadata.deletion_timestamp.is_none())
        .filter(|a| {
            !a.status
                .as_ref()
                .is_some_and(|s| is_true(&s.conditions, APPROVED))
        })
        .collect();
    let oldest = pending
        .iter()
        .filter_map(|a| a.metadata.creation_timestamp.as_ref())
        .map(|t| now.duration_since(t.0).as_secs_f64().max(0.0))
        .fold(0.0, f64::max);
    (pending.len() as i64, oldest)
}

impl Collector for Live {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let members = self
            .members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|s| s.state());
        if let Some(members) = members {
            let family = Family::<Vec<(String, String)>, Gauge>::default();
            for (status, n) in members_by_health(&members) {
                family
                    .get_or_create(&vec![("healthy".to_string(), status.to_string())])
                    .set(n);
            }
            family.encode(encoder.encode_descriptor(
                "member_clusters",
                "MemberClusters by the status of their Healthy condition (True, False, Unknown)",
                None,
                family.metric_type(),
            )?)?;
        }
        let approvals = self
            .approvals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|s| s.state());
        if let Some(approvals) = approvals {
            let (pending, oldest) = pending_approvals(&approvals, Timestamp::now());
            let gauge = ConstGauge::new(pending);
            gauge.encode(encoder.encode_descriptor(
                "approvals_pending",
                "ApprovalRequests not approved yet",
                None,
                gauge.metric_type(),
            )?)?;
            let gauge = ConstGauge::new(oldest);
            gauge.encode(encoder.encode_descriptor(
                "approval_oldest_pending_seconds",
                "Age of the oldest ApprovalRequest not approved yet (0 when none waits)",
                None,
                gauge.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            update_runs: Family::default(),
            cluster_update_seconds: Histogram::new(exponential_buckets(0.25, 2.0, 14)),
            stage_seconds: Histogram::new(exponential_buckets(1.0, 2.0, 16)),
            approval_wait_seconds: Histogram::new(exponential_buckets(1.0, 2.0, 18)),
            leader: Gauge::default(),
            metric_checks: Family::default(),
            cluster_regressions: Counter::default(),
            run_rollbacks: Family::default(),
            auto_update: AutoUpdateMetrics::default(),
            fleet_versions: FleetVersions::default(),
            live: Arc::new(Live::default()),
        };
        m.auto_update.register(registry);
        m.fleet_versions.register(registry);
        registry.register(
            "metric_checks",
            "Prometheus queries of metric gates (MetricCheck stage tasks), by result",
            m.metric_checks.clone(),
        );
        for result in ["pass", "no-data", "error"] {
            let _ = m.metric_checks.get_or_create(&MetricCheckLabels { result });
        }
        registry.register(
            "cluster_regressions",
            "Clusters that lost their health after a run updated them (the run holds while they are regressed)",
            m.cluster_regressions.clone(),
        );
        registry.register(
            "run_rollbacks",
            "Rollback runs created by failed UpdateRuns with onFailure: Rollback, by the failure's reason",
            m.run_rollbacks.clone(),
        );
        registry.register(
            "reconciles",
            "Reconciles by controller",
            m.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconcile errors by controller and kind",
            m.reconcile_errors.clone(),
        );
        registry.register("update_runs", "UpdateRuns by state", m.update_runs.clone());
        registry.register(
            "cluster_update_seconds",
            "Seconds from a cluster's start to its member reporting the Work available",
            m.cluster_update_seconds.clone(),
        );
        registry.register(
            "stage_seconds",
            "Seconds from a stage's start to its end, gates included",
            m.stage_seconds.clone(),
        );
        registry.register(
            "approval_wait_seconds",
            "Seconds an ApprovalRequest waited for approval",
            m.approval_wait_seconds.clone(),
        );
        registry.register(
            "leader",
            "1 while this hub holds the leader-election lease and runs the controllers",
            m.leader.clone(),
        );
        registry.register_collector(Box::new(m.live.clone()));
        // Every series exists from the start (at 0), so rate() and alerts see the first error.
        for controller in CONTROLLERS {
            let _ = m.reconciles.get_or_create(&ControllerLabels { controller });
            for error in ERROR_KINDS {
                let _ = m
                    .reconcile_errors
                    .get_or_create(&ErrorLabels { controller, error });
            }
        }
        m
    }

    /// This process became the leader: the runs-by-state gauge starts at 0 for every state
    /// until the update-run controller counts its cache.
    pub fn zero_fleet_state(&self) {
        for state in RunState::ALL {
            self.update_runs
                .get_or_create(&RunStateLabels { state })
                .set(0);
        }
    }

    /// Lets the member-health gauge count the MemberClusters in `store` (this term's cache).
    pub fn count_members_in(&self, store: Store<MemberCluster>) {
        *self
            .live
            .members
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(store);
    }

    /// Lets the pending-approval gauges read the ApprovalRequests in `store`.
    pub fn count_approvals_in(&self, store: Store<ApprovalRequest>) {
        *self
            .live
            .approvals
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(store);
    }

    /// Counts one metric gate check with its result (`pass`, `no-data`, `error`).
    pub fn count_metric_check(&self, result: &'static str) {
        self.metric_checks
            .get_or_create(&MetricCheckLabels { result })
            .inc();
    }

    /// Drops the gauges that describe the fleet: this process stopped leading, and only the
    /// leader's view is current.
    pub fn forget_fleet_state(&self) {
        *self
            .live
            .members
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        *self
            .live
            .approvals
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        self.update_runs.clear();
        self.auto_update.forget();
        self.fleet_versions.forget();
    }

    /// Counts one result of `controller`'s reconcile stream.
    pub fn observe<T>(
        &self,
        controller: &'static str,
        result: &Result<
            T,
            kube::runtime::controller::Error<crate::Error, kube::runtime::watcher::Error>,
        >,
    ) {
        use kube::runtime::controller::Error as ControllerError;
        let error = match result {
            Ok(_) => None,
            Err(ControllerError::ReconcilerFailed(e, _)) => Some(e.metric_label()),
            Err(ControllerError::ObjectNotFound(_)) => None,
            Err(_) => Some("watch"),
        };
        self.reconciles
            .get_or_create(&ControllerLabels { controller })
            .inc();
        if let Some(error) = error {
            self.reconcile_errors
                .get_or_create(&ErrorLabels { controller, error })
                .inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleethub_crds::approval::ApprovalRequestSpec;
    use fleethub_crds::member_cluster::{MemberClusterSpec, MemberClusterStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn condition(type_: &str, status: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "Test".into(),
            message: String::new(),
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }
    }

    #[test]
    fn members_are_counted_by_their_healthy_condition() {
        let member = |status: Option<&str>| {
            let mut m = MemberCluster::new("m", MemberClusterSpec::default());
            m.status = status.map(|s| MemberClusterStatus {
                conditions: vec![condition(HEALTHY, s)],
                ..Default::default()
            });
            Arc::new(m)
        };
        let members = [
            member(Some("True")),
            member(Some("True")),
            member(Some("False")),
            member(None),
        ];
        assert_eq!(
            members_by_health(&members),
            [("True", 2), ("False", 1), ("Unknown", 1)]
        );
    }

    #[test]
    fn only_unapproved_requests_are_pending_and_the_oldest_counts() {
        let t = |s: i64| Timestamp::from_second(1_800_000_000 + s).unwrap();
        let request = |created: i64, approved: bool| {
            let mut a = ApprovalRequest::new(
                "r",
                ApprovalRequestSpec {
                    parent_stage_rollout: "run".into(),
                    target_stage: "canary".into(),
                    ..Default::default()
                },
            );
            a.metadata.creation_timestamp = Some(Time(t(created)));
            if approved {
                a.status = Some(fleethub_crds::approval::ApprovalRequestStatus {
                    conditions: vec![condition(APPROVED, "True")],
                    ..Default::default()
                });
            }
            Arc::new(a)
        };
        assert_eq!(pending_approvals(&[], t(0)), (0, 0.0));
        let all = [request(0, true), request(100, false), request(400, false)];
        assert_eq!(pending_approvals(&all, t(1000)), (2, 900.0));
    }

    #[test]
    fn fleet_gauges_are_exported_only_while_caches_are_attached() {
        use prometheus_client::encoding::text::encode;
        let mut registry = Registry::with_prefix("fleethub_hub");
        let m = Metrics::new(&mut registry);
        m.leader.set(1);
        let text = |r: &Registry| {
            let mut s = String::new();
            encode(&mut s, r).unwrap();
            s
        };
        let before = text(&registry);
        assert!(before.contains("fleethub_hub_leader 1"), "{before}");
        assert!(!before.contains("member_clusters"), "{before}");
        let (members, _writer) = kube::runtime::reflector::store::<MemberCluster>();
        let (approvals, _writer) = kube::runtime::reflector::store::<ApprovalRequest>();
        m.count_members_in(members);
        m.count_approvals_in(approvals);
        let during = text(&registry);
        for want in [
            "fleethub_hub_member_clusters{healthy=\"False\"} 0",
            "fleethub_hub_approvals_pending 0",
            "fleethub_hub_approval_oldest_pending_seconds 0",
        ] {
            assert!(during.contains(want), "missing {want:?} in\n{during}");
        }
        m.forget_fleet_state();
        assert!(!text(&registry).contains("member_clusters"));
    }
}
