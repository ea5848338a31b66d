//! A cluster is never judged once: every cluster the run updated stays watched, by its Work,
//! until the run ends. One that loses its health afterwards (its Work no longer Applied or
//! Available) is marked `Regressed` and holds the run: no cluster starts and no gate passes
//! while it is so, and a soak does not count the time. It recovers by itself (the run goes on),
//! or, regressed for longer than the run's healthTimeout, it counts as failed against its
//! stage's maxFailedClusters; past that budget the run fails naming it (`onFailure` says what
//! then happens).

use std::time::Duration;

use fleethub_crds::conditions::{
    FALSE, NewCondition, TRUE, find, is_false, is_true, set_condition,
};
use fleethub_crds::duration;
use fleethub_crds::update_run::{
    ClusterUpdatingStatus, REGRESSED, SUCCEEDED, StageUpdatingStatus, reason,
};
use jiff::Timestamp;

use super::execute::skipped;
use super::{Planner, WorkView, listed};

/// What the Work of a cluster the run updated says of it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Health {
    /// Applied and available at the run's snapshot.
    Healthy,
    /// Not any more, in the member's words.
    Unhealthy(String),
    /// Nothing to judge by: the Work is not in view (the controller shows only the Works of
    /// clusters in flight or regressed, and every Work that is not healthy), carries another
    /// snapshot, or describes a generation the member has not reported on yet.
    Unknown,
}

/// The health of a cluster that runs snapshot `index`, from its Work.
pub(super) fn health(work: Option<&WorkView>, index: i64) -> Health {
    let Some(w) = work.filter(|w| w.index == index) else {
        return Health::Unknown;
    };
    let current = |c: &Option<super::ConditionView>| {
        c.as_ref()
            .filter(|c| c.observed_generation == w.generation)
            .cloned()
    };
    match (current(&w.applied), current(&w.available)) {
        (Some(a), _) if a.status == FALSE => {
            Health::Unhealthy(format!("not applied ({}): {}", a.reason, a.message))
        }
        (Some(a), Some(v))
            if a.status == TRUE && v.status == TRUE && w.applied_index == Some(index) =>
        {
            Health::Healthy
        }
        (Some(_), Some(v)) if v.status == FALSE => Health::Unhealthy(v.message),
        _ => Health::Unknown,
    }
}

/// Why the workload of a cluster that runs snapshot `index` is unhealthy, if it is: its Work
/// is applied and not available (the objects are there; their pods are not well).
pub(super) fn workload_unhealthy(work: Option<&WorkView>, index: i64) -> Option<String> {
    let w = work.filter(|w| w.index == index)?;
    let current = |c: &Option<super::ConditionView>| {
        c.as_ref()
            .filter(|c| c.observed_generation == w.generation)
            .cloned()
    };
    match (current(&w.applied), current(&w.available)) {
        (Some(a), Some(v)) if a.status == TRUE && v.status == FALSE => Some(v.message),
        _ => None,
    }
}

/// A cluster the run updated and watches: it succeeded, or it regressed since.
pub(super) fn watched(c: &ClusterUpdatingStatus) -> bool {
    !skipped(c) && (is_true(&c.conditions, SUCCEEDED) || regressed(c))
}

/// Regressed now (within its health timeout or past it).
pub(super) fn regressed(c: &ClusterUpdatingStatus) -> bool {
    is_true(&c.conditions, REGRESSED)
}

/// Regressed now and still within its health timeout: it holds the run.
fn holding(c: &ClusterUpdatingStatus) -> bool {
    regressed(c) && is_true(&c.conditions, SUCCEEDED)
}

/// Regressed for longer than the health timeout: failed, counted against its stage's budget.
pub(super) fn failed_by_regression(c: &ClusterUpdatingStatus) -> bool {
    regressed(c) && is_false(&c.conditions, SUCCEEDED)
}

/// "12s" from `since` to `now`.
fn ago(since: Timestamp, now: Timestamp) -> String {
    let secs = (now.as_second() - since.as_second()).max(0) as u64;
    duration::format(Duration::from_secs(secs))
}

impl Planner<'_, '_> {
    /// Judges again every cluster the run updated, by its Work. Returns what holds the run (a
    /// sentence naming the regressed clusters, how long ago and why) when a cluster is
    /// regressed and still within its health timeout.
    pub(super) fn watch_updated(&mut self, health_timeout: Duration) -> Option<String> {
        let now = self.o.now;
        let index = self.index();
        let mut holds = Vec::new();
        for i in 0..self.status.stages_status.len() {
            for j in 0..self.status.stages_status[i].clusters.len() {
                let cluster = &self.status.stages_status[i].clusters[j];
                if !watched(cluster) {
                    continue;
                }
                // At 10,000 clusters most are done and healthy, their Works out of view: they
                // cost a lookup, no copy.
                let health = health(self.o.works.get(cluster.cluster_name.as_str()), index);
                if health == Health::Unknown && !regressed(cluster) {
                    continue;
                }
                let name = cluster.cluster_name.clone();
                self.judge_again(i, j, health, health_timeout);
                let cluster = &self.status.stages_status[i].clusters[j];
                if holding(cluster)
                    && let Some(r) = find(&cluster.conditions, REGRESSED)
                {
                    holds.push(format!(
                        "{name} regressed {} ago: {}",
                        ago(r.last_transition_time.0, now),
                        why_of(&r.message)
                    ));
                }
            }
        }
        (!holds.is_empty()).then(|| listed(&holds, "; "))
    }

    /// One watched cluster's transition, if its health changed.
    fn judge_again(&mut self, i: usize, j: usize, health: Health, health_timeout: Duration) {
        let now = self.o.now;
        let generation = self.generation;
        let stage_name = self.status.stages_status[i].stage_name.clone();
        let cluster = &mut self.status.stages_status[i].clusters[j];
        let name = cluster.cluster_name.clone();
        let since = find(&cluster.conditions, REGRESSED)
            .filter(|r| r.status == TRUE)
            .map(|r| (r.last_transition_time.0, r.message.clone()));
        match (health, since) {
            (Health::Unknown, _) | (Health::Healthy, None) => {}
            (Health::Unhealthy(why), None) => {
                let message = format!("{REGRESSED_PREFIX}{why}");
                let c = NewCondition::new(
                    REGRESSED,
                    TRUE,
                    reason::CLUSTER_REGRESSED,
                    message,
                    generation,
                );
                set_condition(&mut cluster.conditions, c, now);
                self.requeue_at(now.checked_add(health_timeout).unwrap_or(now));
                self.event(
                    true,
                    reason::CLUSTER_REGRESSED,
                    format!(
                        "stage {stage_name}: cluster {name} regressed after its update: {why}; the run holds until it recovers"
                    ),
                );
            }
            (Health::Unhealthy(why), Some((at, _))) => {
                // Still regressed: the member's latest words, the same first-seen time.
                let c = NewCondition::new(
                    REGRESSED,
                    TRUE,
                    reason::CLUSTER_REGRESSED,
                    format!("{REGRESSED_PREFIX}{why}"),
                    generation,
                );
                set_condition(&mut cluster.conditions, c, now);
                let deadline = at.checked_add(health_timeout).unwrap_or(at);
                if now < deadline {
                    self.requeue_at(deadline);
                    return;
                }
                if is_false(&cluster.conditions, SUCCEEDED) {
                    return; // failed already
                }
                let message = format!(
                    "cluster {name} regressed {} ago and did not recover within the run's healthTimeout {}: {why}",
                    ago(at, now),
                    duration::format(health_timeout)
                );
                let c = NewCondition::new(
                    SUCCEEDED,
                    FALSE,
                    reason::CLUSTER_REGRESSED,
                    message.clone(),
                    generation,
                );
                set_condition(&mut cluster.conditions, c, now);
                self.event(
                    true,
                    reason::CLUSTER_FAILED,
                    format!("stage {stage_name}: {message}"),
                );
            }
            (Health::Healthy, Some((at, message))) => {
                let lasted = ago(at, now);
                let recovered = format!(
                    "cluster {name} recovered after {lasted} regressed ({})",
                    why_of(&message)
                );
                let c = NewCondition::new(
                    REGRESSED,
                    FALSE,
                    reason::CLUSTER_RECOVERED,
                    recovered.clone(),
                    generation,
                );
                set_condition(&mut cluster.conditions, c, now);
                if is_false(&cluster.conditions, SUCCEEDED) {
                    let c = NewCondition::new(
                        SUCCEEDED,
                        TRUE,
                        reason::CLUSTER_SUCCEEDED,
                        format!(
                            "cluster {name} runs the run's resource snapshot and is available again"
                        ),
                        generation,
                    );
                    set_condition(&mut cluster.conditions, c, now);
                }
                self.event(
                    false,
                    reason::CLUSTER_RECOVERED,
                    format!("stage {stage_name}: {recovered}"),
                );
            }
        }
    }

    /// The first stage that started and whose clusters failed past its maxFailedClusters with
    /// at least one of them failed by a regression (the current stage's other failures are
    /// `track_clusters`' to judge): a sentence naming them.
    pub(super) fn regressions_over_budget(&self) -> Option<(usize, String)> {
        let strategy = self.status.staged_update_strategy_snapshot.as_ref()?;
        for (i, stage) in self.status.stages_status.iter().enumerate() {
            if stage.start_time.is_none() {
                break;
            }
            let failed: Vec<String> = stage
                .clusters
                .iter()
                .filter(|c| failed_by_regression(c))
                .map(|c| c.cluster_name.clone())
                .collect();
            if failed.is_empty() {
                continue;
            }
            let budget = strategy
                .stages
                .get(i)
                .and_then(|s| s.max_failed_clusters)
                .unwrap_or(0)
                .max(0) as usize;
            let spent = super::execute::spent(stage);
            if spent > budget {
                return Some((
                    i,
                    format!(
                        "stage {}: {} stayed regressed past the run's healthTimeout ({spent} clusters of the stage failed or were passed over, more than its maxFailedClusters {budget})",
                        stage.stage_name,
                        listed(&failed, ", ")
                    ),
                ));
            }
        }
        None
    }
}

/// How a Regressed condition's message starts; the rest is the member's words.
const REGRESSED_PREFIX: &str = "regressed after its update: ";

/// The member's words of a Regressed condition's message.
fn why_of(message: &str) -> &str {
    message.strip_prefix(REGRESSED_PREFIX).unwrap_or(message)
}

/// The clusters of `stages` the run updated, newest first: the order a rollback reverts them in
/// (clusters start in stage order, and within a stage in its order).
pub(super) fn updated_newest_first(stages: &[StageUpdatingStatus]) -> Vec<String> {
    stages
        .iter()
        .rev()
        .flat_map(|s| s.clusters.iter().rev())
        .filter(|c| {
            !skipped(c)
                && find(&c.conditions, fleethub_crds::update_run::CLUSTER_STARTED)
                    .is_some_and(|s| s.status == TRUE)
        })
        .map(|c| c.cluster_name.clone())
        .collect()
}
