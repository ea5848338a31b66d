//! A placement's status conditions: whether its clusters are selected, and how the rollout to
//! each of them is going, rolled up from their Bindings.

use std::sync::Arc;

use fleethub_crds::binding::BindingState;
use fleethub_crds::conditions::{FALSE, NewCondition, TRUE, find, set_condition};
use fleethub_crds::placement::{
    APPLIED, AVAILABLE, ClusterPlacementStatus, PlacementStatus, ROLLOUT_STARTED,
    RolloutStrategyType, SCHEDULED, reason,
};
use fleethub_crds::{Binding, Placement};
use jiff::Timestamp;

/// What [`report`] describes: the clusters selected, those wanted but missing, the placement's
/// bindings and its latest snapshot index.
pub struct Selection<'a> {
    /// The selected clusters.
    pub selected: &'a [String],
    /// Clusters the policy names that have not joined or do not exist.
    pub missing: &'a [String],
    /// The placement's Bindings.
    pub bindings: &'a [Arc<Binding>],
    /// The latest snapshot index.
    pub latest: Option<i64>,
}

/// Sets `status` for `placement` and its `selection`: the generation and index it describes, the
/// cluster count, `Scheduled`, and the rollout rolled up from the bindings.
pub fn report(
    status: &mut PlacementStatus,
    placement: &Placement,
    selection: Selection<'_>,
    now: Timestamp,
) {
    let generation = placement.metadata.generation;
    status.observed_generation = generation;
    status.latest_resource_snapshot_index = selection.latest;
    status.selected_cluster_count = Some(selection.selected.len() as i32);
    let scheduled = scheduled(selection.selected, selection.missing, generation);
    set_condition(&mut status.conditions, scheduled, now);
    roll_up(
        status,
        selection.bindings,
        selection.selected,
        selection.latest,
        super::plan::strategy(placement),
        now,
        generation,
    );
}

/// The placement's `Scheduled` condition, given the clusters selected and those wanted but
/// missing.
fn scheduled<'a>(
    selected: &[String],
    missing: &[String],
    generation: Option<i64>,
) -> NewCondition<'a> {
    let (status, reason, message) = if missing.is_empty() {
        (
            TRUE,
            reason::SCHEDULING_POLICY_FULFILLED,
            format!("{} clusters selected", selected.len()),
        )
    } else {
        (
            FALSE,
            reason::CLUSTERS_UNAVAILABLE,
            format!(
                "{} clusters selected; not joined or not found: {}",
                selected.len(),
                missing.join(", ")
            ),
        )
    };
    NewCondition::new(SCHEDULED, status, reason, message, generation)
}

/// Per-cluster and overall rollout conditions from the bindings.
pub fn roll_up(
    status: &mut PlacementStatus,
    bindings: &[Arc<Binding>],
    selected: &[String],
    latest: Option<i64>,
    strategy: RolloutStrategyType,
    now: Timestamp,
    generation: Option<i64>,
) {
    let mut per_cluster = Vec::new();
    let (mut applied, mut available) = (0, 0);
    for cluster in selected {
        let mut conds = status
            .placement_statuses
            .iter()
            .find(|c| &c.cluster_name == cluster)
            .map(|c| c.conditions.clone())
            .unwrap_or_default();
        let binding = bindings.iter().find(|b| &b.spec.target_cluster == cluster);
        let index = binding.and_then(|b| b.spec.resource_snapshot_index);
        let c = |t, ok: bool, r, m: String| {
            NewCondition::new(t, if ok { TRUE } else { FALSE }, r, m, generation)
        };
        let selected = format!("cluster {cluster} is selected");
        set_condition(
            &mut conds,
            c(SCHEDULED, true, reason::CLUSTER_SCHEDULED, selected),
            now,
        );
        let started = binding.is_some_and(|b| b.spec.state == BindingState::Bound);
        let message = match (index, &binding.and_then(|b| b.spec.update_run_name.clone())) {
            (Some(i), Some(run)) => format!("resource snapshot {i}, rolled out by UpdateRun {run}"),
            (Some(i), None) => format!("resource snapshot {i}"),
            (None, _) if strategy == RolloutStrategyType::External => {
                "waiting for an UpdateRun to roll out a snapshot".to_string()
            }
            (None, _) => "waiting for a snapshot".to_string(),
        };
        let why = if started {
            reason::ROLLOUT_STARTED
        } else {
            reason::ROLLOUT_NOT_STARTED
        };
        set_condition(&mut conds, c(ROLLOUT_STARTED, started, why, message), now);
        for type_ in [APPLIED, AVAILABLE] {
            let reported = binding
                .and_then(|b| b.status.as_ref())
                .and_then(|s| find(&s.conditions, type_));
            let ok = reported.is_some_and(|r| r.status == TRUE);
            let message = reported.map_or("no report yet".to_string(), |r| r.message.clone());
            let why = if ok {
                reason::MEMBER_REPORTED
            } else {
                reason::NOT_YET
            };
            set_condition(&mut conds, c(type_, ok, why, message), now);
            if ok && type_ == APPLIED {
                applied += 1;
            }
            if ok && type_ == AVAILABLE && index == latest {
                available += 1;
            }
        }
        per_cluster.push(ClusterPlacementStatus {
            cluster_name: cluster.clone(),
            resource_snapshot_index: index,
            conditions: conds,
        });
    }
    status.placement_statuses = per_cluster;
    let n = selected.len();
    let c = |t, ok: bool, yes, no, m: String| {
        let (status, reason) = if ok { (TRUE, yes) } else { (FALSE, no) };
        NewCondition::new(t, status, reason, m, generation)
    };
    let all_applied = c(
        APPLIED,
        applied == n,
        reason::ALL_APPLIED,
        reason::NOT_ALL_APPLIED,
        format!("{applied}/{n} clusters applied their Work"),
    );
    set_condition(&mut status.conditions, all_applied, now);
    let latest_text = latest.map_or("-".to_string(), |l| l.to_string());
    let all_available = c(
        AVAILABLE,
        available == n,
        reason::ALL_AVAILABLE,
        reason::NOT_ALL_AVAILABLE,
        format!(
            "{available}/{n} clusters run the latest resource snapshot ({latest_text}) and are available"
        ),
    );
    set_condition(&mut status.conditions, all_available, now);
}
