//! Where a cluster is in a run, read from its conditions in the run's status. The stored form of
//! a stage ([`stored_stage`](crate::stored_stage)) keeps and counts each cluster by it, and the
//! run's reading model ([`run_progress`](crate::run_progress)) shows it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::conditions::{FALSE, TRUE, find};
use crate::update_run::{
    CLUSTER_SKIPPED, CLUSTER_STARTED, ClusterUpdatingStatus, REGRESSED, SUCCEEDED,
};

/// Where a cluster is in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterPhase {
    /// Not started yet.
    Pending,
    /// Its Binding points at the snapshot; the member has not confirmed it yet.
    Updating,
    /// Runs the snapshot and is available (or, in the deletion stage, the workload is gone).
    Succeeded,
    /// Was updated and available, and is not any more: the run holds while it is so (its
    /// `Regressed` condition says why and since when).
    Regressed,
    /// Passed over by the run: it left the placement, or its member was not healthy at its
    /// turn (within its stage's maxFailedClusters); the reason says which.
    Skipped,
    /// Failed, with a reason and message.
    Failed,
}

/// Where cluster `c` is, and the condition that says so.
pub(crate) fn phase_and_condition(c: &ClusterUpdatingStatus) -> (ClusterPhase, Option<&Condition>) {
    let succeeded = find(&c.conditions, SUCCEEDED);
    let started = find(&c.conditions, CLUSTER_STARTED);
    let skipped = find(&c.conditions, CLUSTER_SKIPPED).filter(|s| s.status == TRUE);
    let regressed = find(&c.conditions, REGRESSED).filter(|r| r.status == TRUE);
    match (succeeded, started) {
        (Some(s), _) if s.status == TRUE && regressed.is_some() => {
            (ClusterPhase::Regressed, regressed)
        }
        (Some(s), _) if s.status == TRUE => (ClusterPhase::Succeeded, Some(s)),
        _ if skipped.is_some() => (ClusterPhase::Skipped, skipped),
        (Some(s), _) if s.status == FALSE => (ClusterPhase::Failed, Some(s)),
        (_, Some(s)) if s.status == TRUE => (ClusterPhase::Updating, Some(s)),
        _ => (ClusterPhase::Pending, None),
    }
}

/// Where cluster `c` of a stage is, from its conditions.
pub fn phase(c: &ClusterUpdatingStatus) -> ClusterPhase {
    phase_and_condition(c).0
}
