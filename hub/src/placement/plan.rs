//! The placement controller's decisions, without a client: from what it observed (the
//! placement, its snapshots, the selected content when it was gathered, the members and the
//! bindings) and the time, what to write. The controller only performs the plan.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use fleethub_crds::binding::{BindingSpec, BindingState};
use fleethub_crds::conditions::{FALSE, NewCondition, TRUE, find, set_condition};
use fleethub_crds::placement::{
    DEFAULT_REVISION_HISTORY_LIMIT, PlacementStatus, RESOURCES_SNAPSHOTTED, RolloutStrategyType,
    SCHEDULED, reason,
};
use fleethub_crds::resource_snapshot::ResourceSnapshotSpec;
use fleethub_crds::update_run::SUCCEEDED;
use fleethub_crds::{Binding, Placement, ResourceSnapshot, UpdateRun, names};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::controller::Action as Requeue;
use kube::{Resource, ResourceExt};
use serde_json::Value;

use super::clusters::{self, BindingChange, Member};
use super::{content, status};

/// Objects of kinds the hub does not watch are re-read this often, and a placement is
/// reconciled at least this often.
pub const RESYNC: Duration = Duration::from_secs(300);

/// What the controller observed for one placement.
#[derive(Debug, Default)]
pub struct Observed {
    /// Every ResourceSnapshot of the placement (every part of every index), without manifests.
    pub snapshots: Vec<ResourceSnapshot>,
    /// The selected objects, cleaned and sorted, or why the selectors are unusable; `None` when
    /// they are known to be what the latest snapshot holds (not gathered again).
    pub content: Option<Result<Vec<Value>, String>>,
    /// Every MemberCluster, as selection needs it.
    pub members: Vec<Member>,
    /// The placement's Bindings not being deleted.
    pub bindings: Vec<Arc<Binding>>,
}

/// What to write for one placement, in this order.
#[derive(Debug, PartialEq)]
pub struct Plan {
    /// A new snapshot to cut.
    pub snapshot: Option<NewSnapshot>,
    /// The hash of the content gathered, once the latest snapshot holds it (what the controller
    /// remembers so that it need not gather again until something changes).
    pub content_hash: Option<String>,
    /// Snapshots (index, object name) beyond the history limit, oldest first: deleted unless
    /// an unfinished UpdateRun uses their index (see [`indices_in_use`]).
    pub prune: Vec<(i64, String)>,
    /// Changes to the placement's Bindings (independent of each other).
    pub bindings: Vec<BindingChange>,
    /// The placement's status (written when it differs from the observed one).
    pub status: PlacementStatus,
    /// When to reconcile again without a change.
    pub next: Requeue,
}

/// A snapshot to cut.
#[derive(Debug, PartialEq)]
pub struct NewSnapshot {
    /// Its resource index.
    pub index: i64,
    /// Names of objects left at this index by an earlier attempt that ended before writing
    /// part 0: deleted first.
    pub leftovers: Vec<String>,
    /// Its parts, to be created in this order: part 0, which marks the snapshot complete, last.
    pub parts: Vec<ResourceSnapshot>,
}

/// The plan for `placement` given what was `observed` at `now`.
pub fn plan(placement: &Placement, observed: Observed, now: Timestamp) -> Plan {
    let Observed {
        snapshots,
        content,
        members,
        bindings,
    } = observed;
    let mut status = placement.status.clone().unwrap_or_default();

    // 1. The snapshot: a new one when the content changed.
    let snapshot = match plan_snapshot(placement, &snapshots, content, &mut status, now) {
        Ok(snapshot) => snapshot,
        Err(next) => return Plan::status_only(status, next),
    };
    let mut plan = Plan {
        snapshot: snapshot.new,
        content_hash: snapshot.content_hash,
        prune: excess_snapshots(placement, &snapshots),
        ..Plan::status_only(PlacementStatus::default(), Requeue::await_change())
    };

    // 2. The bindings of the selected clusters.
    let (selected, missing) = match clusters::select(placement.spec.policy.as_ref(), &members) {
        Ok(selection) => selection,
        Err(why) => {
            let generation = placement.metadata.generation;
            let c = NewCondition::new(SCHEDULED, FALSE, reason::INVALID_POLICY, why, generation);
            set_condition(&mut status.conditions, c, now);
            plan.status = status;
            return plan;
        }
    };
    plan.bindings = plan_bindings(placement, &selected, &bindings, snapshot.latest);

    // 3. The status.
    status::report(
        &mut status,
        placement,
        status::Selection {
            selected: &selected,
            missing: &missing,
            bindings: &bindings,
            latest: snapshot.latest,
        },
        now,
    );
    plan.status = status;
    plan.next = Requeue::requeue(RESYNC);
    plan
}

impl Plan {
    /// A plan that writes nothing but `status`.
    fn status_only(status: PlacementStatus, next: Requeue) -> Self {
        Plan {
            snapshot: None,
            content_hash: None,
            prune: Vec::new(),
            bindings: Vec::new(),
            status,
            next,
        }
    }
}

/// How the placement's `bindings` must change for `selected` clusters and the `latest` snapshot.
fn plan_bindings(
    placement: &Placement,
    selected: &[String],
    bindings: &[Arc<Binding>],
    latest: Option<i64>,
) -> Vec<BindingChange> {
    let existing: BTreeMap<String, (BindingState, Option<i64>)> = bindings
        .iter()
        .map(|b| {
            let spec = &b.spec;
            let current = (spec.state, spec.resource_snapshot_index);
            (spec.target_cluster.clone(), current)
        })
        .collect();
    clusters::binding_changes(strategy(placement), selected, &existing, latest)
}

/// The placement's rollout strategy type (`RollingUpdate` unless it says otherwise).
pub fn strategy(placement: &Placement) -> RolloutStrategyType {
    placement
        .spec
        .strategy
        .as_ref()
        .map(|s| s.type_)
        .unwrap_or_default()
}

/// What [`plan_snapshot`] decided.
struct SnapshotDecision {
    /// The latest resource index, counting the new snapshot.
    latest: Option<i64>,
    /// The snapshot to cut, if the content changed.
    new: Option<NewSnapshot>,
    /// The hash of the gathered content, if it was gathered and can be snapshotted.
    content_hash: Option<String>,
}

/// Decides the snapshot and sets `ResourcesSnapshotted`: a new snapshot when the gathered
/// `content` differs from the latest snapshot's. When the content cannot be snapshotted,
/// `status` says why and the result is when to try again.
fn plan_snapshot(
    placement: &Placement,
    snapshots: &[ResourceSnapshot],
    content: Option<Result<Vec<Value>, String>>,
    status: &mut PlacementStatus,
    now: Timestamp,
) -> Result<SnapshotDecision, Requeue> {
    let generation = placement.metadata.generation;
    let cond = |type_, status, reason, message: String| {
        NewCondition::new(type_, status, reason, message, generation)
    };
    let latest = latest_snapshot(snapshots);
    let mut decision = SnapshotDecision {
        latest: latest.map(|s| s.spec.resource_index),
        new: None,
        content_hash: None,
    };
    match content {
        None => {}
        Some(Err(why)) => {
            let c = cond(SCHEDULED, FALSE, reason::INVALID_RESOURCE_SELECTOR, why);
            set_condition(&mut status.conditions, c, now);
            return Err(Requeue::await_change());
        }
        Some(Ok(objects)) => {
            if let Some(why) = content::oversized(&objects, content::MAX_PART_BYTES) {
                let c = cond(RESOURCES_SNAPSHOTTED, FALSE, reason::OBJECT_TOO_LARGE, why);
                set_condition(&mut status.conditions, c, now);
                return Err(Requeue::requeue(RESYNC));
            }
            let hash = content::content_hash(&objects);
            if latest.is_none_or(|s| s.spec.content_hash != hash) {
                let index = decision.latest.map_or(0, |i| i + 1);
                decision.new = Some(NewSnapshot {
                    index,
                    leftovers: snapshots
                        .iter()
                        .filter(|s| s.spec.resource_index == index)
                        .map(|s| s.name_any())
                        .collect(),
                    parts: snapshot_parts(placement, index, &hash, objects),
                });
                decision.latest = Some(index);
            }
            decision.content_hash = Some(hash);
        }
    }
    let message = format!(
        "resource snapshot {} holds the selected objects",
        decision.latest.unwrap_or_default()
    );
    let c = cond(RESOURCES_SNAPSHOTTED, TRUE, reason::SNAPSHOTTED, message);
    set_condition(&mut status.conditions, c, now);
    Ok(decision)
}

/// The parts of snapshot `index` of `placement` holding `objects`, part 0 last.
pub fn snapshot_parts(
    placement: &Placement,
    index: i64,
    hash: &str,
    objects: Vec<Value>,
) -> Vec<ResourceSnapshot> {
    let name = placement.name_any();
    let object_count = objects.len() as i64;
    let parts = content::split(objects, content::MAX_PART_BYTES);
    let total = parts.len() as i32;
    let labels = BTreeMap::from([
        (names::PLACEMENT_LABEL.to_string(), name.clone()),
        (names::SNAPSHOT_INDEX_LABEL.to_string(), index.to_string()),
    ]);
    let mut snapshots: Vec<ResourceSnapshot> = parts
        .into_iter()
        .enumerate()
        .map(|(part, resources)| {
            let spec = ResourceSnapshotSpec {
                placement_name: name.clone(),
                resource_index: index,
                part: part as i32,
                parts: total,
                content_hash: hash.to_string(),
                object_count,
                resources,
            };
            let mut snapshot = ResourceSnapshot::new(
                &names::resource_snapshot_part_name(&name, index as u64, part as u32),
                spec,
            );
            snapshot.metadata.labels = Some(labels.clone());
            snapshot.metadata.owner_references =
                placement.controller_owner_ref(&()).map(|o| vec![o]);
            snapshot
        })
        .collect();
    snapshots.reverse();
    snapshots
}

/// The Binding of `placement` to `cluster` as the placement creates it.
pub fn new_binding(
    placement: &Placement,
    cluster: &str,
    state: BindingState,
    index: Option<i64>,
) -> Binding {
    let name = placement.name_any();
    Binding {
        metadata: ObjectMeta {
            name: Some(names::binding_name(&name, cluster)),
            labels: Some(BTreeMap::from([
                (names::PLACEMENT_LABEL.to_string(), name.clone()),
                (names::CLUSTER_LABEL.to_string(), cluster.to_string()),
            ])),
            owner_references: placement.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: BindingSpec {
            placement_name: name,
            target_cluster: cluster.to_string(),
            state,
            resource_snapshot_index: index,
            ..Default::default()
        },
        status: None,
    }
}

/// The latest complete snapshot: part 0 (written last) of the highest index.
pub fn latest_snapshot(snapshots: &[ResourceSnapshot]) -> Option<&ResourceSnapshot> {
    snapshots
        .iter()
        .filter(|s| s.spec.part == 0)
        .max_by_key(|s| s.spec.resource_index)
}

/// The snapshots (index, object name; every part) of the indices beyond `placement`'s history
/// limit, oldest first.
pub fn excess_snapshots(
    placement: &Placement,
    snapshots: &[ResourceSnapshot],
) -> Vec<(i64, String)> {
    let limit = placement
        .spec
        .revision_history_limit
        .map_or(DEFAULT_REVISION_HISTORY_LIMIT, |l| l.max(1) as usize);
    let indices: BTreeSet<i64> = snapshots.iter().map(|s| s.spec.resource_index).collect();
    let excess = indices.len().saturating_sub(limit);
    let oldest: BTreeSet<i64> = indices.into_iter().take(excess).collect();
    let mut excess: Vec<(i64, String)> = snapshots
        .iter()
        .filter(|s| oldest.contains(&s.spec.resource_index))
        .map(|s| (s.spec.resource_index, s.name_any()))
        .collect();
    excess.sort();
    excess
}

/// The snapshot indices of `placement` that an unfinished UpdateRun among `runs` points at.
pub fn indices_in_use(runs: &[UpdateRun], placement: &str) -> BTreeSet<i64> {
    runs.iter()
        .filter(|r| r.spec.placement_name == placement)
        .filter(|r| {
            r.status
                .as_ref()
                .is_none_or(|s| find(&s.conditions, SUCCEEDED).is_none())
        })
        .filter_map(|r| r.snapshot_index()?.ok())
        .collect()
}
