//! `onFailure: Rollback`: a run that fails returns every cluster it updated to the snapshot
//! index they ran before, newest first, through one rollback run it creates (named
//! `<run>-rollback`) and names in its status. The rollback run is an ordinary UpdateRun with
//! `spec.rollback` set: one stage of exactly those clusters, in that order, without gates, so a
//! hub restarted mid-rollback resumes it as any run (no cluster skipped, none reverted twice).

use std::collections::HashMap;

use fleethub_crds::binding::BindingState;
use fleethub_crds::concurrency::MaxConcurrency;
use fleethub_crds::strategy::{OnFailure, StageConfig, StagedUpdateStrategySpec};
use fleethub_crds::update_run::{RollbackSpec, reason};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::initialize::Refusal;
use super::{Action, PlanEvent, Planner, regression};

/// The name of the one stage of a rollback run.
pub const ROLLBACK_STAGE: &str = "rollback";

/// How many clusters a rollback run reverts at once.
const ROLLBACK_CONCURRENCY: &str = "25%";

/// The name of the rollback run of `run` (a DNS label of at most 63 characters).
pub fn rollback_run_name(run: &str) -> String {
    const SUFFIX: &str = "-rollback";
    let mut base: String = run.chars().take(63 - SUFFIX.len()).collect();
    while base.ends_with('-') {
        base.pop();
    }
    format!("{base}{SUFFIX}")
}

/// The strategy a rollback run freezes: one stage, no gates, a quarter of its clusters at once.
pub fn rollback_strategy() -> StagedUpdateStrategySpec {
    StagedUpdateStrategySpec {
        stages: vec![StageConfig {
            name: ROLLBACK_STAGE.to_string(),
            max_concurrency: Some(IntOrString::String(ROLLBACK_CONCURRENCY.to_string())),
            ..Default::default()
        }],
        on_failure: Some(OnFailure::Hold),
        ..Default::default()
    }
}

impl Planner<'_, '_> {
    /// What the run does when it fails: its own `onFailure`, else its strategy's, else Hold. A
    /// rollback run never rolls back itself.
    pub(super) fn on_failure(&self) -> OnFailure {
        if self.o.run.spec.rollback.is_some() {
            return OnFailure::Hold;
        }
        self.o
            .run
            .spec
            .on_failure
            .or_else(|| {
                self.status
                    .staged_update_strategy_snapshot
                    .as_ref()
                    .and_then(|s| s.on_failure)
            })
            .unwrap_or_default()
    }

    /// The run just failed for `cause`: creates its rollback run (once: the run is over
    /// afterwards, and the create is idempotent) and names it in the status.
    pub(super) fn roll_back(&mut self, cause: &'static str) {
        if self.status.rollback_run.is_some() {
            return;
        }
        let run = self.run_name().to_string();
        let clusters = regression::updated_newest_first(&self.status.stages_status);
        let previous = self
            .status
            .previous_resource_snapshot_index
            .as_deref()
            .and_then(|p| p.parse::<i64>().ok());
        let Some(index) = previous.filter(|p| *p != self.index() && !clusters.is_empty()) else {
            let why = if clusters.is_empty() {
                "it updated no cluster".to_string()
            } else {
                "its clusters ran no other snapshot when it started".to_string()
            };
            self.event(
                true,
                reason::RUN_ROLLED_BACK,
                format!("onFailure is Rollback, but there is nothing to roll back: {why}"),
            );
            return;
        };
        let name = rollback_run_name(&run);
        self.actions.push(Action::CreateRollbackRun {
            name: name.clone(),
            index,
            rollback: RollbackSpec {
                of: run,
                clusters: clusters.clone(),
            },
        });
        self.status.rollback_run = Some(name.clone());
        self.events.push(PlanEvent {
            warning: true,
            reason: reason::RUN_ROLLED_BACK,
            message: format!(
                "the run failed ({cause}); UpdateRun {name} rolls its {} updated clusters back to resource snapshot {index}, newest first",
                clusters.len()
            ),
            seconds: None,
            cause: Some(cause),
        });
    }

    /// A rollback run's plan: the clusters `rollback` names that the placement still selects,
    /// in its order, in one stage without gates.
    pub(super) fn rollback_plan(
        &self,
        rollback: &RollbackSpec,
    ) -> Result<(StagedUpdateStrategySpec, Vec<Vec<String>>), Refusal> {
        let strategy = rollback_strategy();
        for stage in &strategy.stages {
            MaxConcurrency::parse(stage.max_concurrency.as_ref())
                .map_err(|e| (reason::INVALID_STRATEGY, e.to_string()))?;
        }
        let clusters = rollback
            .clusters
            .iter()
            .filter(|c| {
                self.binding(c)
                    .is_some_and(|b| b.state != BindingState::Unscheduled)
            })
            .cloned()
            .collect();
        Ok((strategy, vec![clusters]))
    }
}

/// The snapshot index most of `indexes` are at, ignoring `index` itself. Ties go to the older
/// index: a rollout that failed part-way leaves its newer index on the fewer clusters, and the
/// older one is the known version.
pub(super) fn most_common_other(indexes: impl Iterator<Item = i64>, index: i64) -> Option<i64> {
    let mut counts: HashMap<i64, usize> = HashMap::new();
    for i in indexes.filter(|i| *i != index) {
        *counts.entry(i).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by_key(|(i, n)| (*n, std::cmp::Reverse(*i)))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollback_names_stay_dns_labels() {
        assert_eq!(rollback_run_name("web-2"), "web-2-rollback");
        let long = "a".repeat(60) + "-b";
        let name = rollback_run_name(&long);
        assert!(name.len() <= 63, "{name}");
        assert!(!name.contains("--"), "{name}");
    }

    #[test]
    fn the_previous_index_is_the_one_most_clusters_ran() {
        assert_eq!(
            most_common_other([1, 2, 2, 3, 3, 3].into_iter(), 3),
            Some(2)
        );
        assert_eq!(most_common_other([4, 4].into_iter(), 4), None);
        assert_eq!(
            most_common_other([1, 2].into_iter(), 5),
            Some(1),
            "ties: the older"
        );
    }
}
