//! A stage's background analysis: a Prometheus query checked for as long as the stage runs
//! (its clusters updating, then its after-stage tasks, the soak included), not only as a gate
//! after it. `failureLimit` consecutive checks without data fail the stage at once, even
//! mid-stage, before its remaining clusters are updated. The state machine is
//! [`fleethub_crds::metric_check::analysis_step`], shared semantics with the metric gates: data
//! passes, an empty result fails.

use fleethub_crds::conditions::{FALSE, NewCondition, set_condition};
use fleethub_crds::metric_check::{AnalysisStep, MetricCheckResult, Settings, analysis_step};
use fleethub_crds::update_run::{PROGRESSING, SUCCEEDED, reason};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{MetricKey, MetricQuery, Planner};

impl Planner<'_, '_> {
    /// Advances stage `i`'s background analysis, if it has one. Returns why it failed, once
    /// failureLimit consecutive checks returned no data (the stage is marked failed).
    pub(super) fn analyze(&mut self, i: usize) -> Option<String> {
        let now = self.o.now;
        let stage_name = self.status.stages_status[i].stage_name.clone();
        let spec = self
            .status
            .staged_update_strategy_snapshot
            .as_ref()?
            .stages
            .get(i)?
            .analysis
            .clone()?;
        // Checked at initialization: only a strategy snapshot edited since can fail here.
        let settings = Settings::of(&spec.metric_check).ok()?;
        let limit = spec.failure_limit.unwrap_or(1);
        let stage_start = self.status.stages_status[i].start_time.clone();
        let status = self.status.stages_status[i]
            .analysis
            .get_or_insert_with(Default::default);
        status.start_time = status
            .start_time
            .clone()
            .or(stage_start)
            .or(Some(Time(now)));
        let key = MetricKey {
            stage: stage_name.clone(),
            side: None,
        };
        let outcome = self.o.metric_results.get(&key);
        match analysis_step(&settings, limit, status, now, outcome) {
            AnalysisStep::Query => {
                let query = status.query.clone();
                self.queries.push(MetricQuery {
                    key,
                    url: spec.metric_check.url.clone(),
                    query,
                    secret: spec
                        .metric_check
                        .secret_ref
                        .as_ref()
                        .map(|r| r.name.clone()),
                });
                None
            }
            AnalysisStep::Wait { until } => {
                self.requeue_at(until);
                None
            }
            AnalysisStep::Failed => {
                let last = match (&status.last_result, &status.last_value) {
                    (Some(MetricCheckResult::Error), Some(e)) => format!("; last check: {e}"),
                    _ => String::new(),
                };
                let message = format!(
                    "stage {stage_name}: background analysis failed: {} consecutive checks returned no data (failureLimit {limit}){last}: {}",
                    status.consecutive_failures, status.query
                );
                let stage = &mut self.status.stages_status[i];
                for type_ in [PROGRESSING, SUCCEEDED] {
                    let c = NewCondition::new(
                        type_,
                        FALSE,
                        reason::ANALYSIS_FAILED,
                        message.clone(),
                        self.generation,
                    );
                    set_condition(&mut stage.conditions, c, now);
                }
                stage.end_time = Some(Time(now));
                Some(message)
            }
        }
    }
}
