//! The UpdateRun planner: a pure function from what the hub observes (the run, its strategy,
//! placement, bindings, the members' Works, approvals) and the time to the run's next status and
//! the writes that move it on. No API server, no clock: everything it decides on is an input, and
//! everything it must remember is in the status it returns — so a restarted hub plans the same.
//!
//! Every action is idempotent (pointing a Binding at an index it already has, creating an
//! ApprovalRequest that exists, …), so performing the actions of a plan twice, or of a plan made
//! from a slightly stale view, never updates a cluster twice or out of order.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use fleethub_crds::binding::BindingState;
use fleethub_crds::conditions::TRUE;
use fleethub_crds::conditions::{FALSE, NewCondition, find, is_true, set_condition};
use fleethub_crds::strategy::StagedUpdateStrategySpec;
use fleethub_crds::update_run::{
    CLUSTER_SKIPPED, ClusterUpdatingStatus, ClustersNotInRun, INITIALIZED,
    MAX_CLUSTERS_NOT_IN_RUN_NAMES, PROGRESSING, SUCCEEDED, UpdateRunState, UpdateRunStatus, reason,
};
use fleethub_crds::work::{APPLIED, AVAILABLE};
use fleethub_crds::{Placement, UpdateRun};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

mod analysis;
mod bake;
mod deletion;
mod execute;
mod gates;
mod initialize;
mod metric;
mod regression;
mod rollback;
mod siblings;
mod windows;

pub use rollback::{ROLLBACK_STAGE, rollback_run_name};

pub use fleethub_crds::metric_check::QueryOutcome;
pub use gates::ApprovalView;
pub use siblings::SiblingRun;

/// Whether a stage task gates the stage before its clusters start or after they are done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Side {
    /// `beforeStageTasks`.
    Before,
    /// `afterStageTasks`.
    After,
}

/// Which check a query is for: a stage has at most one MetricCheck on each side, and one
/// background analysis.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MetricKey {
    /// The stage.
    pub stage: String,
    /// The gate before or after it; None: its background analysis.
    pub side: Option<Side>,
}

/// A Prometheus query the plan needs the outcome of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricQuery {
    /// The check it is for.
    pub key: MetricKey,
    /// The Prometheus base URL.
    pub url: String,
    /// The query, placeholders expanded.
    pub query: String,
    /// The Secret (in the hub's namespace) with the credentials to send, if any.
    pub secret: Option<String>,
}

/// A Binding as the planner needs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BindingView {
    /// The bound MemberCluster.
    pub cluster: String,
    /// Its state.
    pub state: BindingState,
    /// The snapshot index it points at.
    pub resource_snapshot_index: Option<i64>,
    /// The UpdateRun that last pointed it.
    pub update_run_name: Option<String>,
    /// The health timeout it carries to the Work.
    pub health_timeout: Option<String>,
    /// Why its overrides cannot be applied (`Overridden=False`), for the index it points at.
    pub override_failure: Option<String>,
    /// The override snapshots it names ([`fleethub_crds::binding::OverrideSnapshots::key`]).
    pub overrides: String,
    /// Its resourceVersion: the run points a Binding at a snapshot only if it is still the one
    /// it looked at (a Binding the placement marked Unscheduled meanwhile is not bound again).
    pub resource_version: String,
}

impl BindingView {
    /// The planner's view of a Binding.
    pub fn from_binding(b: &fleethub_crds::Binding) -> Self {
        Self {
            cluster: b.spec.target_cluster.clone(),
            state: b.spec.state,
            resource_snapshot_index: b.spec.resource_snapshot_index,
            update_run_name: b.spec.update_run_name.clone(),
            health_timeout: b.spec.health_timeout.clone(),
            overrides: fleethub_crds::binding::OverrideSnapshots {
                cluster_resource_override_snapshots: b
                    .spec
                    .cluster_resource_override_snapshots
                    .clone(),
                resource_override_snapshots: b.spec.resource_override_snapshots.clone(),
            }
            .key(),
            override_failure: b
                .status
                .as_ref()
                .and_then(|s| find(&s.conditions, fleethub_crds::binding::OVERRIDDEN))
                .filter(|c| {
                    c.status == fleethub_crds::conditions::FALSE
                        && c.observed_generation == b.metadata.generation
                })
                .map(|c| c.message.clone()),
            resource_version: b.metadata.resource_version.clone().unwrap_or_default(),
        }
    }
}

/// A condition as the planner needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionView {
    /// `True`/`False`/`Unknown`.
    pub status: String,
    /// CamelCase reason.
    pub reason: String,
    /// The member's message.
    pub message: String,
    /// The Work generation the condition describes.
    pub observed_generation: Option<i64>,
}

impl ConditionView {
    fn from(c: &Condition) -> Self {
        Self {
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
            observed_generation: c.observed_generation,
        }
    }
}

/// A member's Work for the run's placement, as the planner needs it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkView {
    /// The snapshot index the Work carries.
    pub index: i64,
    /// The Work's generation.
    pub generation: Option<i64>,
    /// The member's `Applied` condition.
    pub applied: Option<ConditionView>,
    /// The member's `Available` condition.
    pub available: Option<ConditionView>,
    /// The index the member last applied.
    pub applied_index: Option<i64>,
    /// The override snapshots the Work was written with (its annotation).
    pub overrides: Option<String>,
}

impl WorkView {
    /// The planner's view of a Work object.
    pub fn from_work(work: &fleethub_crds::Work) -> Self {
        let conditions = work
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        Self {
            index: work.spec.resource_snapshot_index,
            generation: work.metadata.generation,
            applied: find(conditions, APPLIED).map(ConditionView::from),
            available: find(conditions, AVAILABLE).map(ConditionView::from),
            applied_index: work
                .status
                .as_ref()
                .and_then(|s| s.applied_resource_snapshot_index),
            overrides: work
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(fleethub_crds::overrides::WORK_OVERRIDES_ANNOTATION))
                .cloned(),
        }
    }
}

/// Everything the planner looks at.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The run.
    pub run: &'a UpdateRun,
    /// The strategy the run names, if it exists (only read at initialization).
    pub strategy: Option<&'a StagedUpdateStrategySpec>,
    /// The placement the run names, if it exists (only read at initialization).
    pub placement: Option<&'a Placement>,
    /// The placement was deleted (or is being deleted) after the run initialized.
    pub placement_deleted: bool,
    /// The run's UpdateRunPlan is lost (deleted, or another's), and why: the run cannot go on.
    /// Its stages' clusters were not read.
    pub plan_lost: Option<String>,
    /// The placement's latest resource snapshot index: the index of a run that names none
    /// (only read until the run recorded the index it uses).
    pub latest_snapshot_index: Option<i64>,
    /// Whether the placement has a ResourceSnapshot at the run's index.
    pub snapshot_exists: bool,
    /// Every MemberCluster's labels.
    pub cluster_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// MemberClusters whose agent is not heartbeating (`Healthy=False`), with the condition's
    /// message: named when one of their updates times out.
    pub unhealthy_members: BTreeMap<String, String>,
    /// Of those, the members known to be down (`Healthy=False`: they heartbeated and stopped):
    /// their turn waits for them. A member never heard from (`Unknown`) does not hold its turn.
    pub down_members: std::collections::BTreeSet<String>,
    /// The placement's bindings.
    pub bindings: Vec<Arc<BindingView>>,
    /// The newest snapshot of every override that may apply to the placement (only read at
    /// initialization).
    pub override_snapshots: fleethub_crds::binding::OverrideSnapshots,
    /// The placement's Works, by member cluster.
    pub works: BTreeMap<String, WorkView>,
    /// ApprovalRequests by name.
    pub approvals: BTreeMap<String, ApprovalView>,
    /// The runs of the same placement (this run among them or not): which of them this run
    /// waits for and which supersede it is decided by [`siblings::order`].
    pub siblings: Vec<SiblingRun>,
    /// Outcomes of the queries a first plan asked for (made at `now`); empty otherwise.
    pub metric_results: BTreeMap<MetricKey, QueryOutcome>,
    /// A Freeze holding the run's placement: in words, and when it lifts (None: when deleted).
    pub freeze: Option<(String, Option<Timestamp>)>,
    /// Now.
    pub now: Timestamp,
}

/// A write that moves the run on. All are idempotent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Point the cluster's Binding at the run's snapshot index (state Bound), provided the
    /// Binding is still at `resource_version` or, read again, still selects the cluster: a
    /// Binding the placement deleted or marked Unscheduled is never bound.
    Bind {
        /// The MemberCluster.
        cluster: String,
        /// The Binding's resourceVersion as the plan saw it.
        resource_version: String,
        /// The resource snapshot index.
        index: i64,
        /// The override snapshots the run fixed when it started.
        overrides: fleethub_crds::binding::OverrideSnapshots,
    },
    /// Create the ApprovalRequest `name` for `stage` unless it exists.
    CreateApproval {
        /// `<run>-<stage>`.
        name: String,
        /// The stage it gates.
        stage: String,
        /// The task's approval policy.
        policy: Option<fleethub_crds::approval::ApprovalPolicy>,
        /// The snapshot index the run rolls out (what an approval is given for).
        index: Option<String>,
    },
    /// Set `ApprovalAccepted=True` on an approved request.
    AcceptApproval {
        /// The request.
        name: String,
    },
    /// Remove the placement's workload from a cluster it no longer selects (delete its Binding).
    Unbind {
        /// The MemberCluster.
        cluster: String,
    },
    /// Create the rollback run `name` of this failed run unless it exists: the run's placement
    /// at `index`, over the clusters `rollback` names.
    CreateRollbackRun {
        /// `<run>-rollback`.
        name: String,
        /// The snapshot index the clusters ran before.
        index: i64,
        /// What it reverts.
        rollback: fleethub_crds::update_run::RollbackSpec,
    },
}

/// Something worth a Kubernetes Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanEvent {
    /// A Warning rather than Normal event.
    pub warning: bool,
    /// CamelCase reason.
    pub reason: &'static str,
    /// A sentence.
    pub message: String,
    /// How long what just finished took (a cluster update, a stage, an approval wait).
    pub seconds: Option<i64>,
    /// For a rollback: the reason of the failure that caused it (a metric label).
    pub cause: Option<&'static str>,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The run's new status.
    pub status: UpdateRunStatus,
    /// Writes to perform before the status is written.
    pub actions: Vec<Action>,
    /// Reconcile again after this long at the latest (a timer is pending).
    pub requeue_after: Option<Duration>,
    /// Transitions to record as events.
    pub events: Vec<PlanEvent>,
    /// Metric checks that are due: when not empty, make these queries and plan again with
    /// their outcomes in [`Observed::metric_results`] (this plan's other parts are provisional).
    pub queries: Vec<MetricQuery>,
}

/// Plans the run's next step as the controller does: its status taken out of the run (the
/// tests' runs keep it).
#[cfg(test)]
pub fn plan(o: &Observed<'_>) -> Plan {
    let mut bare = o.run.clone();
    let status = bare.status.take().unwrap_or_default();
    let o = Observed {
        run: &bare,
        ..o.clone()
    };
    plan_from(&o, status)
}

/// Plans the run's next step from `status`, the run's status taken out of it: the planner reads
/// no other (`o.run`'s is empty). At 10,000 clusters a copy of the status to plan from was a
/// third of planning.
pub fn plan_from(o: &Observed<'_>, status: UpdateRunStatus) -> Plan {
    let this = SiblingRun::with_status(o.run, Some(&status));
    let (earlier, later) = siblings::order(&this, &o.siblings);
    let index = match o.run.snapshot_index_with(Some(&status)) {
        Some(parsed) => parsed.ok(),
        None => o.latest_snapshot_index,
    };
    let mut p = Planner {
        o,
        bindings: o
            .bindings
            .iter()
            .map(|b| (b.cluster.as_str(), b.as_ref()))
            .collect(),
        index,
        earlier: earlier.first().map(|s| s.to_string()),
        later: later.first().map(|s| s.to_string()),
        generation: o.run.metadata.generation,
        status,
        actions: Vec::new(),
        requeue: None,
        events: Vec::new(),
        queries: Vec::new(),
        held: None,
    };
    p.run();
    Plan {
        status: p.status,
        actions: p.actions,
        requeue_after: p.requeue,
        events: p.events,
        queries: p.queries,
    }
}

struct Planner<'a, 'o> {
    o: &'a Observed<'o>,
    /// The placement's Bindings by cluster name (a run may have 10,000 clusters).
    bindings: HashMap<&'a str, &'a BindingView>,
    /// The run's snapshot index (None: unreadable, which fails initialization).
    index: Option<i64>,
    /// The oldest earlier run of the placement this run waits for.
    earlier: Option<String>,
    /// The oldest later run of the placement that supersedes this one.
    later: Option<String>,
    generation: Option<i64>,
    status: UpdateRunStatus,
    actions: Vec<Action>,
    requeue: Option<Duration>,
    events: Vec<PlanEvent>,
    queries: Vec<MetricQuery>,
    /// What holds the run this reconcile: a cluster it updated is regressed.
    held: Option<String>,
}

impl Planner<'_, '_> {
    /// The placement's Binding of `cluster`.
    fn binding(&self, cluster: &str) -> Option<&BindingView> {
        self.bindings.get(cluster).copied()
    }

    fn run_name(&self) -> &str {
        self.o.run.metadata.name.as_deref().unwrap_or_default()
    }

    /// Whether `cluster`'s binding already points at `index` for this run (with its health
    /// timeout).
    fn bound_by_this_run(&self, cluster: &str, index: i64) -> bool {
        self.binding(cluster).is_some_and(|b| {
            b.state == BindingState::Bound
                && b.resource_snapshot_index == Some(index)
                && b.update_run_name.as_deref() == Some(self.run_name())
                && b.health_timeout == self.o.run.spec.health_timeout
        })
    }

    /// The snapshot index of an initialized run (initialization refuses an unreadable one).
    fn index(&self) -> i64 {
        self.index.unwrap_or(-1)
    }

    fn cond(
        &self,
        type_: &'static str,
        status: &'static str,
        reason: &'static str,
        message: String,
    ) -> NewCondition<'static> {
        NewCondition::new(type_, status, reason, message, self.generation)
    }

    fn set_run(
        &mut self,
        type_: &'static str,
        status: &'static str,
        reason: &'static str,
        message: String,
    ) {
        let c = self.cond(type_, status, reason, message);
        set_condition(&mut self.status.conditions, c, self.o.now);
    }

    fn event(&mut self, warning: bool, reason: &'static str, message: String) {
        self.events.push(PlanEvent {
            warning,
            reason,
            message,
            seconds: None,
            cause: None,
        });
    }

    /// An event about something that finished, having started at `since`.
    fn timed_event(&mut self, reason: &'static str, message: String, since: Option<Timestamp>) {
        let seconds = since.map(|t| self.o.now.as_second() - t.as_second());
        self.events.push(PlanEvent {
            warning: false,
            reason,
            message,
            seconds,
            cause: None,
        });
    }

    fn requeue_at(&mut self, at: Timestamp) {
        let secs = at.as_second().saturating_sub(self.o.now.as_second()).max(1) as u64;
        let d = Duration::from_secs(secs);
        self.requeue = Some(self.requeue.map_or(d, |r| r.min(d)));
    }

    fn run(&mut self) {
        if find(&self.status.conditions, SUCCEEDED).is_some() {
            return; // finished, one way or the other
        }
        if let Some(later) = self.later.clone() {
            // A newer run of the same placement supersedes this one: stop where we are, write
            // nothing more, and end, so the newer run starts from what the clusters run now.
            let message = format!(
                "superseded by UpdateRun {later}, created later for Placement {}; clusters keep what they run, and {later} continues from there",
                self.o.run.spec.placement_name
            );
            self.set_run(PROGRESSING, FALSE, reason::SUPERSEDED, message.clone());
            self.set_run(SUCCEEDED, FALSE, reason::SUPERSEDED, message.clone());
            self.status.end_time = Some(Time(self.o.now));
            self.event(false, reason::SUPERSEDED, message);
            return;
        }
        // The index in use is recorded first, so a run that names none keeps the one it chose.
        if self.status.resource_snapshot_index_used.is_none() {
            self.status.resource_snapshot_index_used = self.index.map(|i| i.to_string());
        }
        let initialize_only = self.o.run.spec.state == Some(UpdateRunState::Initialize);
        if !is_true(&self.status.conditions, INITIALIZED) {
            match self.initialize(initialize_only) {
                Ok(()) => {}
                Err((
                    why @ (reason::WAITING_FOR_PREVIOUS_RUN | reason::WAITING_FOR_SCHEDULING),
                    message,
                )) => {
                    return self.wait_to_initialize(why, message);
                }
                Err((why, message)) => {
                    self.set_run(INITIALIZED, FALSE, why, message.clone());
                    self.set_run(
                        PROGRESSING,
                        FALSE,
                        reason::INITIALIZATION_FAILED,
                        message.clone(),
                    );
                    self.set_run(SUCCEEDED, FALSE, reason::FAILED, message.clone());
                    self.status.end_time = Some(Time(self.o.now));
                    self.event(true, why, message);
                    return;
                }
            }
        }
        self.status.observed_generation = self.generation;
        if self.o.placement_deleted {
            let message = format!(
                "Placement {} was deleted while this run rolled it out; the run ends here (the placement's objects leave its clusters with it)",
                self.o.run.spec.placement_name
            );
            self.set_run(
                PROGRESSING,
                FALSE,
                reason::PLACEMENT_DELETED,
                message.clone(),
            );
            self.set_run(SUCCEEDED, FALSE, reason::PLACEMENT_DELETED, message.clone());
            self.status.end_time = Some(Time(self.o.now));
            self.event(true, reason::PLACEMENT_DELETED, message);
            return;
        }
        if let Some(why) = &self.o.plan_lost {
            let message = format!(
                "{why}: the run cannot go on without the order of its clusters (they keep what they run); start a new UpdateRun"
            );
            self.set_run(PROGRESSING, FALSE, reason::PLAN_LOST, message.clone());
            self.set_run(SUCCEEDED, FALSE, reason::PLAN_LOST, message.clone());
            self.status.end_time = Some(Time(self.o.now));
            self.event(true, reason::PLAN_LOST, message);
            return;
        }
        self.count_clusters_not_in_run();
        if initialize_only {
            let message = format!(
                "planned (spec.state is Initialize): {}; nothing starts until spec.state is Run",
                plan_summary(&self.status)
            );
            self.set_run(PROGRESSING, FALSE, reason::NOT_STARTED, message);
            return;
        }
        if let Some(earlier) = &self.earlier {
            // Initialized while it was only planned: the earlier run yields to it now that it
            // may run, and this run waits for it to stop.
            let message = format!(
                "waiting for UpdateRun {earlier}, which this newer run supersedes, to stop rolling out Placement {}",
                self.o.run.spec.placement_name
            );
            return self.wait(reason::WAITING_FOR_PREVIOUS_RUN, message);
        }
        self.execute();
    }

    /// Waits (not final) to initialize, for the reason `why` gives: an earlier run of the
    /// placement has to end, or the placement's scheduling has to settle.
    fn wait_to_initialize(&mut self, why: &'static str, message: String) {
        self.set_run(INITIALIZED, FALSE, why, message.clone());
        self.wait(why, message);
    }

    /// Progressing=False (not final) for `why`, with an event when the run starts waiting.
    fn wait(&mut self, why: &'static str, message: String) {
        let first = find(&self.status.conditions, PROGRESSING).is_none_or(|c| c.reason != why);
        self.set_run(PROGRESSING, FALSE, why, message.clone());
        if first {
            self.event(false, why, message);
        }
    }

    /// Counts the clusters the placement selects now that the run's plan does not update:
    /// they joined after it initialized (or left and came back).
    fn count_clusters_not_in_run(&mut self) {
        if self
            .o
            .run
            .spec
            .rollback
            .as_ref()
            .is_some_and(|r| !r.clusters.is_empty())
        {
            return; // reverts only the clusters a failed run updated
        }
        let in_run: std::collections::HashSet<&str> = self
            .status
            .stages_status
            .iter()
            .flat_map(|s| &s.clusters)
            .filter(|c| !skipped_as(c, reason::CLUSTER_UNSELECTED))
            .map(|c| c.cluster_name.as_str())
            .collect();
        let mut outside: Vec<String> = self
            .o
            .bindings
            .iter()
            .filter(|b| {
                b.state != BindingState::Unscheduled && !in_run.contains(b.cluster.as_str())
            })
            .map(|b| b.cluster.clone())
            .collect();
        outside.sort();
        self.status.clusters_not_in_run = (!outside.is_empty()).then(|| ClustersNotInRun {
            count: outside.len() as i32,
            names: outside
                .into_iter()
                .take(MAX_CLUSTERS_NOT_IN_RUN_NAMES)
                .collect(),
        });
    }
}

/// Whether the run passed `cluster` over for `why`.
pub(super) fn skipped_as(cluster: &ClusterUpdatingStatus, why: &str) -> bool {
    find(&cluster.conditions, CLUSTER_SKIPPED).is_some_and(|c| c.status == TRUE && c.reason == why)
}

/// The most items a condition's message lists (a stage may have thousands of clusters).
const MAX_LISTED: usize = 10;

/// `items` joined by `separator`, the first [`MAX_LISTED`] of them and how many more.
pub(super) fn listed(items: &[String], separator: &str) -> String {
    let mut text = items
        .iter()
        .take(MAX_LISTED)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(separator);
    if items.len() > MAX_LISTED {
        text.push_str(&format!(" and {} more", items.len() - MAX_LISTED));
    }
    text
}

/// The clusters of `stages` the run passed over or that failed within their stage's budget,
/// as a sentence ("skipped member-2 (ClusterUnselected); failed within maxFailedClusters:
/// member-3"), or None when every cluster succeeded.
pub(super) fn exceptions(
    stages: &[fleethub_crds::update_run::StageUpdatingStatus],
) -> Option<String> {
    let mut skipped = Vec::new();
    let mut failed = Vec::new();
    for c in stages.iter().flat_map(|s| &s.clusters) {
        if let Some(s) = find(&c.conditions, CLUSTER_SKIPPED).filter(|s| s.status == TRUE) {
            skipped.push(format!("{} ({})", c.cluster_name, s.reason));
        } else if fleethub_crds::conditions::is_false(&c.conditions, SUCCEEDED) {
            failed.push(c.cluster_name.clone());
        }
    }
    let mut parts = Vec::new();
    if !skipped.is_empty() {
        parts.push(format!("skipped {}", listed(&skipped, ", ")));
    }
    if !failed.is_empty() {
        parts.push(format!(
            "failed within maxFailedClusters: {}",
            listed(&failed, ", ")
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// "5 clusters in 3 stages, 1 to remove afterwards".
pub(super) fn plan_summary(status: &UpdateRunStatus) -> String {
    let clusters: usize = status.stages_status.iter().map(|s| s.clusters.len()).sum();
    let removed = status
        .deletion_stage_status
        .as_ref()
        .map_or(0, |d| d.clusters.len());
    format!(
        "{clusters} clusters in {} stages, {removed} to remove afterwards",
        status.stages_status.len()
    )
}
