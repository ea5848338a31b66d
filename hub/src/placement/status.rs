//! A placement's status conditions: whether its clusters are selected, and how the rollout to
//! each of them is going, rolled up from their Bindings.

use std::collections::HashMap;
use std::sync::Arc;

use fleethub_crds::binding::BindingState;
use fleethub_crds::conditions::{FALSE, NewCondition, TRUE, find, set_condition};
use fleethub_crds::drift::{self, DRIFTED};
use fleethub_crds::placement::{
    APPLIED, AVAILABLE, ClusterPlacementStatus, MAX_PLACEMENT_STATUSES, PlacementStatus,
    ROLLOUT_STARTED, RolloutStrategyType, SCHEDULED, reason,
};
use fleethub_crds::{Binding, Placement};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

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

/// Objects listed per cluster on the placement (its Binding lists more).
const CLUSTER_OBJECTS: usize = 5;
/// Fields listed per object on the placement.
const CLUSTER_FIELDS: usize = 3;

/// Per-cluster and overall rollout and drift conditions from the bindings.
pub fn roll_up(
    status: &mut PlacementStatus,
    bindings: &[Arc<Binding>],
    selected: &[String],
    latest: Option<i64>,
    strategy: RolloutStrategyType,
    now: Timestamp,
    generation: Option<i64>,
) {
    let (mut applied, mut available) = (0, 0);
    let mut drifted: Vec<String> = Vec::new();
    // Looked up by name: a scan per cluster made this quadratic (at 10,000 clusters, two fifths
    // of the hub's CPU during a run went to comparing names). The first of a name counts.
    let mut earlier: HashMap<&str, &ClusterPlacementStatus> = HashMap::new();
    for c in &status.placement_statuses {
        earlier.entry(c.cluster_name.as_str()).or_insert(c);
    }
    let mut by_cluster: HashMap<&str, &Binding> = HashMap::new();
    for b in bindings {
        by_cluster
            .entry(b.spec.target_cluster.as_str())
            .or_insert(b);
    }
    // What every cluster counts for first, without copying anything; then the conditions of
    // only the clusters listed. At 10,000 clusters the placement lists at most
    // MAX_PLACEMENT_STATUSES of them, and building every cluster's conditions to keep a hundred
    // was most of the placement's reconcile during a run (13 % of the hub's CPU).
    let mut judged = Vec::with_capacity(selected.len());
    for cluster in selected {
        let binding = by_cluster.get(cluster.as_str()).copied();
        let index = binding.and_then(|b| b.spec.resource_snapshot_index);
        let bs = binding.and_then(|b| b.status.as_ref());
        let reported = |type_| {
            bs.and_then(|s| find(&s.conditions, type_))
                .is_some_and(|r| r.status == TRUE)
        };
        let (is_applied, is_available) = (reported(APPLIED), reported(AVAILABLE));
        applied += usize::from(is_applied);
        available += usize::from(is_available && index == latest);
        let fine = index.is_some() && index == latest && is_applied && is_available;
        let differs = reported(DRIFTED);
        if differs {
            let count = bs.and_then(|s| s.drifted_object_count);
            drifted.push(format!(
                "{cluster} ({} object{})",
                count.unwrap_or_default(),
                if count == Some(1) { "" } else { "s" }
            ));
        }
        judged.push((cluster, binding, !fine || differs));
    }
    let all = judged.len();
    let listed = judged
        .into_iter()
        .filter(|(_, _, attention)| all <= MAX_PLACEMENT_STATUSES || *attention)
        .take(MAX_PLACEMENT_STATUSES);
    let detail = Detail {
        strategy,
        now,
        generation,
    };
    let per_cluster: Vec<ClusterPlacementStatus> = listed
        .map(|(cluster, binding, _)| {
            let earlier = earlier.get(cluster.as_str()).map(|c| c.conditions.clone());
            detail.of(cluster, binding, earlier.unwrap_or_default())
        })
        .collect();
    status.omitted_placement_status_count =
        (per_cluster.len() < all).then(|| (all - per_cluster.len()) as i32);
    status.placement_statuses = per_cluster;
    status.drifted_cluster_count = Some(drifted.len() as i32);
    let n = selected.len();
    let differ = if drifted.is_empty() {
        NewCondition::new(
            DRIFTED,
            FALSE,
            drift::reason::IN_SYNC,
            "no cluster reports objects that differ from the hub".to_string(),
            generation,
        )
    } else {
        let shown = drifted
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        let more = drifted.len().saturating_sub(10);
        let tail = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        NewCondition::new(
            DRIFTED,
            TRUE,
            drift::reason::CLUSTERS_DIFFER,
            format!(
                "{}/{n} clusters have objects that differ from the hub: {shown}{tail} (`kubectl fleet drift` lists them)",
                drifted.len(),
            ),
            generation,
        )
    };
    set_condition(&mut status.conditions, differ, now);
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

/// What a listed cluster's conditions are made from, besides its Binding.
struct Detail {
    strategy: RolloutStrategyType,
    now: Timestamp,
    generation: Option<i64>,
}

impl Detail {
    /// `cluster`'s entry in the placement's status, its conditions updated from `conds` (its
    /// earlier ones: transition times are kept).
    fn of(
        &self,
        cluster: &str,
        binding: Option<&Binding>,
        mut conds: Vec<Condition>,
    ) -> ClusterPlacementStatus {
        let (now, generation) = (self.now, self.generation);
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
        let message = match (index, binding.and_then(|b| b.spec.update_run_name.as_ref())) {
            (Some(i), Some(run)) => format!("resource snapshot {i}, rolled out by UpdateRun {run}"),
            (Some(i), None) => format!("resource snapshot {i}"),
            (None, _) if self.strategy == RolloutStrategyType::External => {
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
        let bs = binding.and_then(|b| b.status.as_ref());
        for type_ in [APPLIED, AVAILABLE] {
            let reported = bs.and_then(|s| find(&s.conditions, type_));
            let ok = reported.is_some_and(|r| r.status == TRUE);
            let message = reported.map_or("no report yet".to_string(), |r| r.message.clone());
            let why = if ok {
                reason::MEMBER_REPORTED
            } else {
                reason::NOT_YET
            };
            set_condition(&mut conds, c(type_, ok, why, message), now);
        }
        let differs = match bs.and_then(|s| find(&s.conditions, DRIFTED)) {
            Some(d) => NewCondition::new(
                DRIFTED,
                if d.status == TRUE { TRUE } else { FALSE },
                &d.reason,
                d.message.clone(),
                generation,
            ),
            None => c(DRIFTED, false, reason::NOT_YET, "no report yet".to_string()),
        };
        set_condition(&mut conds, differs, now);
        let objects = bs.map(|s| s.drifted_objects.clone()).unwrap_or_default();
        ClusterPlacementStatus {
            cluster_name: cluster.to_string(),
            resource_snapshot_index: index,
            conditions: conds,
            drifted_objects: drift::trim(objects, CLUSTER_OBJECTS, CLUSTER_FIELDS),
            drifted_object_count: bs.and_then(|s| s.drifted_object_count),
        }
    }
}
