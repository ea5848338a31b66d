//! The hub's Prometheus metrics (prefix `fleethub_hub_`).

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels naming a controller.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// `membership`, `placement`, `update-run`, `work-generator`.
    pub controller: &'static str,
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
    /// Finished successfully.
    Succeeded,
    /// Failed (initialization).
    Failed,
}

/// Labels of the runs gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RunStateLabels {
    /// The state.
    pub state: RunState,
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
        };
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
        m
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
