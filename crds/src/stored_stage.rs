//! How a stage's status is stored in the UpdateRun. Readers and the planner see every cluster of
//! the stage as a [`ClusterUpdatingStatus`], in update order; the stored form keeps that for
//! stages of at most [`DETAILED_STAGE_CLUSTERS`] clusters, and a compact form above:
//!
//! - the plan, the stage's clusters in update order: in the run's UpdateRunPlan
//!   (`clustersInPlan`), written once when the run initializes. Each status write sends the
//!   whole status again, and a 10,000-cluster run's names were 110 of its 128 KB (and a third
//!   of the API server's CPU per write). Runs initialized before UpdateRunPlans keep the names
//!   in the status, comma-separated in `clusterNameList` (or, older still, as the list
//!   `clusterNames`); both still read;
//! - `succeededClusters`: which of them succeeded, as index ranges into the plan
//!   (`0-833,835`), without their times (their Work status has them);
//! - `updatingClusters`: which of them are updating and since when, as index ranges each with
//!   its start time (`834-900@2026-11-27T01:02:03Z,905@2026-11-27T01:02:04Z`);
//! - `clusters`: only the updating clusters that keep their progress (the first
//!   [`PROGRESS_KEPT`]: name, start time, progress), and those that failed or were passed over.
//!   A list item costs the API server far more on every status write than a few bytes of a
//!   string: the 833 updating clusters of a 10,000-cluster run's stage as items were two thirds
//!   of its status write's CPU (measured on a quiet hub API server: 67 ms a write as items,
//!   23 ms as ranges).
//!
//! A cluster in none of these has not started. Both forms carry `clusterCounts`, the stage's
//! clusters counted by state, for a reader at a glance (`kubectl get -o jsonpath`).
//!
//! The compact form keeps everything the planner decides on (which clusters succeeded, which
//! are in flight and since when, which failed or were passed over and why), so a restarted hub
//! resumes a stage of 10,000 clusters exactly where it was, in an object far below etcd's limit.

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::KubeSchema;
#[allow(unused_imports)]
use kube::core::{ListMerge, Rule};
use serde::{Deserialize, Serialize};

use crate::cluster_phase::{ClusterPhase, phase};
use crate::conditions::{find, is_true};
use crate::update_run::{
    CLUSTER_SKIPPED, CLUSTER_STARTED, ClusterList, ClusterUpdatingStatus, REGRESSED, SUCCEEDED,
    StageTaskStatus, StageUpdatingStatus, reason,
};

/// Stages of more clusters than this are stored compact.
pub const DETAILED_STAGE_CLUSTERS: usize = 100;
/// In a compact stage, how many updating clusters keep their progress text: the first in update
/// order, so the longest in flight. Each kept item costs the API server about 0.1 ms on every
/// status write (100 of them were half of a 10,000-cluster run's status write: 17–21 against
/// 9–11 ms with 20, on a quiet hub API server); the others' progress is their Work's conditions.
pub const PROGRESS_KEPT: usize = 10;

/// A stage's clusters counted by state.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCounts {
    /// All the stage's clusters.
    pub total: i32,
    /// Not started yet.
    pub pending: i32,
    /// Started, not finished.
    pub updating: i32,
    /// Run the snapshot and are available (or, in the deletion stage, the workload is gone).
    pub succeeded: i32,
    /// Failed.
    pub failed: i32,
    /// Updated, then unhealthy again (the run holds).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub regressed: i32,
    /// Passed over by the run.
    pub skipped: i32,
}

impl ClusterCounts {
    /// Counts `clusters`.
    pub fn of(clusters: &[ClusterUpdatingStatus]) -> Self {
        Self::of_phases(clusters.iter().map(phase))
    }

    /// Counts clusters in these phases.
    pub fn of_phases(phases: impl IntoIterator<Item = ClusterPhase>) -> Self {
        let mut counts = ClusterCounts::default();
        for p in phases {
            counts.total += 1;
            match p {
                ClusterPhase::Pending => counts.pending += 1,
                ClusterPhase::Updating => counts.updating += 1,
                ClusterPhase::Succeeded => counts.succeeded += 1,
                ClusterPhase::Failed => counts.failed += 1,
                ClusterPhase::Regressed => counts.regressed += 1,
                ClusterPhase::Skipped => counts.skipped += 1,
            }
        }
        counts
    }
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// The stored form of one stage's plan and progress (see the module's documentation).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StoredStage {
    /// The stage.
    pub stage_name: String,
    /// The stage's clusters counted by state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_counts: Option<ClusterCounts>,
    /// Stages of over 100 clusters: the stage's clusters, in update order, are in the run's
    /// UpdateRunPlan (`status.planRef`), under this stage's name.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clusters_in_plan: bool,
    /// Stages of over 100 clusters, as runs initialized before UpdateRunPlans stored them: the
    /// stage's clusters, in update order, comma-separated. Read, never written for new runs.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster_name_list: String,
    /// Stages of over 100 clusters, as runs stored them before `clusterNameList`: the stage's
    /// clusters, in update order. Read, never written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,
    /// Stages of over 100 clusters: which of the stage's clusters succeeded, as comma-separated
    /// 0-based indexes into its plan and index ranges (`0-833,835`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(regex(pattern = r"^([0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*)?$"))]
    pub succeeded_clusters: String,
    /// Stages of over 100 clusters: which of the stage's clusters are updating, as
    /// comma-separated 0-based indexes into its plan and index ranges, each with the time its
    /// clusters started
    /// (`834-900@2026-11-27T01:02:03Z,905@2026-11-27T01:02:04Z`). Those keeping their progress
    /// are in `clusters` instead.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(regex(
        pattern = r"^([0-9]+(-[0-9]+)?@[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z(,[0-9]+(-[0-9]+)?@[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z)*)?$"
    ))]
    pub updating_clusters: String,
    /// Stages of at most 100 clusters: every cluster, in update order. Larger stages: only the
    /// updating clusters that keep their progress (name, start time, progress), and those that
    /// failed or were passed over.
    #[serde(default)]
    pub clusters: Vec<ClusterUpdatingStatus>,
    /// The stage's before-stage tasks and their progress (the stage's clusters start once
    /// they all passed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub before_stage_task_status: Vec<StageTaskStatus>,
    /// The stage's after-stage tasks and their progress.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after_stage_task_status: Vec<StageTaskStatus>,
    /// `Progressing` (False with reason StageUpdatingWaiting while gates are pending) and
    /// `Succeeded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// When the stage's first cluster started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the stage's clusters were all done; TimedWait is measured from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters_completed_time: Option<Time>,
    /// When the stage (including its after-stage tasks) finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    /// The stage's background analysis: its checks so far (kept here so a restarted hub
    /// continues the count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<crate::metric_check::MetricCheckStatus>,
}

impl StoredStage {
    /// The stored form of `stage`. Only what is stored is copied: a large stage's clusters are
    /// read in place (at 10,000 clusters, copying them for every status write was a tenth of
    /// the run's reconcile).
    pub fn of(stage: &StageUpdatingStatus) -> Self {
        let (names, compact) = match &stage.cluster_list {
            // Written back as it was read.
            ClusterList::Unread(unread) => (
                Names::InPlan,
                Compact {
                    names: Vec::new(),
                    succeeded: unread.succeeded.clone(),
                    updating: unread.updating.clone(),
                    detail: unread.detail.clone(),
                },
            ),
            ClusterList::InPlan => (Names::InPlan, compact(&stage.clusters, false)),
            ClusterList::InStatus if stage.clusters.len() > DETAILED_STAGE_CLUSTERS => {
                (Names::InStatus, compact(&stage.clusters, true))
            }
            ClusterList::InStatus => (
                Names::InStatus,
                Compact {
                    detail: stage.clusters.clone(),
                    ..Compact::default()
                },
            ),
        };
        StoredStage {
            stage_name: stage.stage_name.clone(),
            cluster_counts: Some(stage.counts()),
            clusters_in_plan: names == Names::InPlan,
            cluster_name_list: match names {
                Names::InPlan => String::new(),
                Names::InStatus => compact.names.join(","),
            },
            cluster_names: Vec::new(),
            succeeded_clusters: compact.succeeded,
            updating_clusters: compact.updating,
            clusters: compact.detail,
            before_stage_task_status: stage.before_stage_task_status.clone(),
            after_stage_task_status: stage.after_stage_task_status.clone(),
            conditions: stage.conditions.clone(),
            start_time: stage.start_time.clone(),
            clusters_completed_time: stage.clusters_completed_time.clone(),
            end_time: stage.end_time.clone(),
            analysis: stage.analysis.clone(),
        }
    }
}

/// Where a stored stage's cluster names go.
#[derive(PartialEq)]
enum Names {
    InStatus,
    InPlan,
}

impl From<StoredStage> for StageUpdatingStatus {
    fn from(stored: StoredStage) -> Self {
        let (clusters, cluster_list) = if stored.clusters_in_plan {
            let unread = UnreadClusters {
                counts: stored.cluster_counts.unwrap_or_default(),
                succeeded: stored.succeeded_clusters,
                updating: stored.updating_clusters,
                detail: stored.clusters,
            };
            (Vec::new(), ClusterList::Unread(Box::new(unread)))
        } else {
            let names = if stored.cluster_name_list.is_empty() {
                stored.cluster_names
            } else {
                stored
                    .cluster_name_list
                    .split(',')
                    .map(str::to_string)
                    .collect()
            };
            let clusters = if names.is_empty() {
                stored.clusters
            } else {
                expand(
                    names,
                    &stored.succeeded_clusters,
                    &stored.updating_clusters,
                    stored.clusters,
                    stored.start_time.as_ref(),
                )
            };
            (clusters, ClusterList::InStatus)
        };
        StageUpdatingStatus {
            stage_name: stored.stage_name,
            clusters,
            before_stage_task_status: stored.before_stage_task_status,
            after_stage_task_status: stored.after_stage_task_status,
            conditions: stored.conditions,
            start_time: stored.start_time,
            clusters_completed_time: stored.clusters_completed_time,
            end_time: stored.end_time,
            analysis: stored.analysis,
            cluster_list,
        }
    }
}

/// A stage whose clusters are in the run's UpdateRunPlan, as its status stores it, until the
/// plan is read: the stage's counts, and its progress by index into the plan.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UnreadClusters {
    /// The stage's clusters counted by state.
    pub counts: ClusterCounts,
    /// `succeededClusters`.
    pub succeeded: String,
    /// `updatingClusters`.
    pub updating: String,
    /// `clusters`: the detail kept.
    pub detail: Vec<ClusterUpdatingStatus>,
}

impl UnreadClusters {
    /// Every cluster of the stage, from `names` (comma-separated, in update order).
    pub fn expand(self, names: &str, stage_start: Option<&Time>) -> Vec<ClusterUpdatingStatus> {
        let names = names
            .split(',')
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect();
        expand(
            names,
            &self.succeeded,
            &self.updating,
            self.detail,
            stage_start,
        )
    }
}

/// A large stage's compact form (see the module's documentation).
#[derive(Default)]
struct Compact {
    /// The clusters in update order.
    names: Vec<String>,
    /// The succeeded ones, as index ranges.
    succeeded: String,
    /// The updating ones without progress kept, as index ranges with their start times.
    updating: String,
    /// The detail kept of the others.
    detail: Vec<ClusterUpdatingStatus>,
}

/// The compact form of a large stage's `clusters` (their `names` too, when `with_names`). Only
/// the clusters kept in detail are copied.
fn compact(clusters: &[ClusterUpdatingStatus], with_names: bool) -> Compact {
    let mut names = Vec::new();
    let mut succeeded = Ranges::default();
    let mut updating = Ranges::default();
    let mut detail = Vec::new();
    let mut with_progress = 0;
    for (i, c) in clusters.iter().enumerate() {
        if with_names {
            names.push(c.cluster_name.clone());
        }
        match phase(c) {
            ClusterPhase::Pending => {}
            // A cluster also passed over keeps its entry (the planner reads why), and so does
            // one that regressed and recovered (when and why is kept).
            ClusterPhase::Succeeded
                if !is_true(&c.conditions, CLUSTER_SKIPPED)
                    && find(&c.conditions, REGRESSED).is_none() =>
            {
                succeeded.push(i, ())
            }
            ClusterPhase::Updating => {
                // Its Started condition is rebuilt from its start time on reading.
                let only_started = c.start_time.is_some()
                    && matches!(c.conditions.as_slice(),
                        [only] if is_started_message(&c.cluster_name, &only.message));
                let keeps_progress = c.progress.is_some() && {
                    with_progress += 1;
                    with_progress <= PROGRESS_KEPT
                };
                match &c.start_time {
                    // Nothing but its start time to keep.
                    Some(start)
                        if (c.conditions.is_empty() || only_started)
                            && !keeps_progress
                            && c.end_time.is_none() =>
                    {
                        updating.push(i, format_time(start))
                    }
                    _ => {
                        let mut kept = c.clone();
                        if only_started {
                            kept.conditions.clear();
                        }
                        if !keeps_progress {
                            kept.progress = None;
                        }
                        detail.push(kept)
                    }
                }
            }
            ClusterPhase::Succeeded
            | ClusterPhase::Regressed
            | ClusterPhase::Failed
            | ClusterPhase::Skipped => detail.push(c.clone()),
        }
    }
    Compact {
        names,
        succeeded: succeeded.text(|_| String::new()),
        updating: updating.text(|at| format!("@{at}")),
        detail,
    }
}

/// The full list back from the compact form.
fn expand(
    names: Vec<String>,
    succeeded: &str,
    updating: &str,
    detail: Vec<ClusterUpdatingStatus>,
    stage_start: Option<&Time>,
) -> Vec<ClusterUpdatingStatus> {
    let succeeded = parse_ranges(succeeded, names.len());
    let mut updating = parse_timed_ranges(updating, names.len());
    let mut detail: HashMap<String, ClusterUpdatingStatus> = detail
        .into_iter()
        .map(|c| (c.cluster_name.clone(), c))
        .collect();
    names
        .into_iter()
        .enumerate()
        .map(|(i, name)| match detail.remove(&name) {
            Some(mut c) => {
                if c.conditions.is_empty()
                    && let Some(start) = &c.start_time
                {
                    c.conditions = vec![started(&name, start.clone())];
                }
                c
            }
            None if succeeded.get(i).copied().unwrap_or(false) => {
                // Its times are not kept; the stage started before it did.
                let at = stage_start
                    .cloned()
                    .unwrap_or(Time(jiff::Timestamp::UNIX_EPOCH));
                ClusterUpdatingStatus {
                    conditions: vec![
                        started(&name, at.clone()),
                        condition(
                            SUCCEEDED,
                            reason::CLUSTER_SUCCEEDED,
                            format!("cluster {name} succeeded"),
                            at,
                        ),
                    ],
                    cluster_name: name,
                    ..Default::default()
                }
            }
            None if let Some(start) = updating.get_mut(i).and_then(Option::take) => {
                ClusterUpdatingStatus {
                    conditions: vec![started(&name, start.clone())],
                    start_time: Some(start),
                    cluster_name: name,
                    ..Default::default()
                }
            }
            None => ClusterUpdatingStatus {
                cluster_name: name,
                ..Default::default()
            },
        })
        .collect()
}

/// The Started condition of an updating cluster, as the run writes it.
pub fn started(name: &str, at: Time) -> Condition {
    condition(
        CLUSTER_STARTED,
        reason::CLUSTER_STARTED,
        started_message(name),
        at,
    )
}

/// The message of a cluster's Started condition.
pub fn started_message(name: &str) -> String {
    format!("cluster {name}{STARTED_MESSAGE_END}")
}

const STARTED_MESSAGE_END: &str = " is being updated to the run's resource snapshot";

/// Whether `message` is [`started_message`] of `name` (without writing that message).
fn is_started_message(name: &str, message: &str) -> bool {
    message
        .strip_prefix("cluster ")
        .and_then(|rest| rest.strip_prefix(name))
        .is_some_and(|rest| rest == STARTED_MESSAGE_END)
}

fn condition(type_: &str, reason: &str, message: String, at: Time) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: crate::conditions::TRUE.to_string(),
        reason: reason.to_string(),
        message,
        last_transition_time: at,
        observed_generation: None,
    }
}

/// Indexes pushed in increasing order, each with a tag, written as ranges of consecutive
/// indexes with the same tag: `0-3,5` (no tag), or `0-3@2026-11-27T01:02:03Z,5@…` (a time).
struct Ranges<T = ()>(Vec<(usize, usize, T)>);

impl<T> Default for Ranges<T> {
    fn default() -> Self {
        Ranges(Vec::new())
    }
}

impl<T: PartialEq> Ranges<T> {
    fn push(&mut self, i: usize, tag: T) {
        match self.0.last_mut() {
            Some((_, end, last)) if *end + 1 == i && *last == tag => *end = i,
            _ => self.0.push((i, i, tag)),
        }
    }

    /// The ranges, each followed by what `suffix` makes of its tag.
    fn text(&self, suffix: impl Fn(&T) -> String) -> String {
        let ranges: Vec<String> = self
            .0
            .iter()
            .map(|(start, end, tag)| {
                if start == end {
                    format!("{start}{}", suffix(tag))
                } else {
                    format!("{start}-{end}{}", suffix(tag))
                }
            })
            .collect();
        ranges.join(",")
    }
}

/// `at` as the API server stores a time (RFC 3339, whole seconds, UTC).
fn format_time(at: &Time) -> String {
    jiff::fmt::strtime::format("%Y-%m-%dT%H:%M:%SZ", at.0).unwrap_or_default()
}

/// The time of each of `len` indexes that `text` names. Tokens that do not read (admission
/// refuses them) or point past the end name nothing, as in [`parse_ranges`].
fn parse_timed_ranges(text: &str, len: usize) -> Vec<Option<Time>> {
    let mut times = vec![None; len];
    for token in text.split(',').filter(|t| !t.is_empty()) {
        let Some((indexes, at)) = token.split_once('@') else {
            continue;
        };
        let Ok(at) = at.parse::<jiff::Timestamp>() else {
            continue;
        };
        let Some((start, end)) = parse_range(indexes) else {
            continue;
        };
        for slot in times.iter_mut().take(end.saturating_add(1)).skip(start) {
            *slot = Some(Time(at));
        }
    }
    times
}

/// Which of `len` indexes `text` names. Tokens that do not read (admission refuses them) or
/// point past the end name nothing: those clusters read as not started, and starting a cluster
/// that already runs the snapshot again only confirms it.
fn parse_ranges(text: &str, len: usize) -> Vec<bool> {
    let mut set = vec![false; len];
    for token in text.split(',').filter(|t| !t.is_empty()) {
        let Some((start, end)) = parse_range(token) else {
            continue;
        };
        for slot in set.iter_mut().take(end.saturating_add(1)).skip(start) {
            *slot = true;
        }
    }
    set
}

/// `3-7` or `5` (`5-5`), first and last included.
fn parse_range(token: &str) -> Option<(usize, usize)> {
    match token.split_once('-') {
        Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
        None => token.parse().ok().map(|i| (i, i)),
    }
}

#[cfg(test)]
#[path = "stored_stage_tests.rs"]
mod tests;
