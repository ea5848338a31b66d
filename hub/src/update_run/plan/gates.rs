//! Stage tasks: the gates before a stage's clusters start and after they are done. Each task
//! type is one function that updates its task's status and says whether it passed; adding a
//! type adds a variant to `StageTaskType` (crds), one arm in [`Planner::run_gates`] and one in
//! the shared run model (`fleethub_crds::run_progress`).

use std::time::Duration;

use fleethub_crds::conditions::{FALSE, NewCondition, TRUE, find, is_true, set_condition};
use fleethub_crds::metric_check::{self, Settings, Step};
use fleethub_crds::strategy::{MetricCheck, StageTask, StageTaskType};
use fleethub_crds::update_run::{
    APPROVAL_REQUEST_APPROVED, APPROVAL_REQUEST_CREATED, METRIC_CHECK_PASSED, MetricCheckResult,
    PROGRESSING, SUCCEEDED, StageTaskStatus, WAIT_TIME_ELAPSED, reason, resume_wait, wait_end,
};
use fleethub_crds::{duration, names};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{Action, MetricKey, MetricQuery, Planner, Side};

/// What a gate (or all of a stage's gates on one side) came to.
pub(super) enum Gate {
    /// Passed.
    Passed,
    /// Not yet: what it waits for.
    Waiting(String),
    /// Never will (the run fails): the reason of the run's conditions, which names the task type
    /// and what went wrong, and why.
    Failed(&'static str, String),
}

/// An ApprovalRequest as the planner needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ApprovalView {
    /// The gate is open: `Approved=True` (or an approval) without a policy, `minApprovals`
    /// distinct approvals under one.
    pub approved: bool,
    /// The hub set `ApprovalAccepted=True`.
    pub accepted: bool,
    /// Distinct approvals given so far.
    pub approvals: usize,
    /// How many its policy needs (None: no policy).
    pub needed: Option<usize>,
}

impl ApprovalView {
    /// The planner's view of an ApprovalRequest.
    pub fn from_request(a: &fleethub_crds::ApprovalRequest) -> Self {
        let conditions = a
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        Self {
            approved: a.is_approved(),
            accepted: is_true(conditions, fleethub_crds::approval::APPROVAL_ACCEPTED),
            approvals: a.approvers().len(),
            needed: a.spec.policy.as_ref().map(|p| p.needed()),
        }
    }
}

impl Planner<'_, '_> {
    /// Runs the tasks on `side` of stage `i`. After a stage, its clusters are all done; before
    /// it, none has started.
    pub(super) fn run_gates(&mut self, i: usize, side: Side) -> Gate {
        let stage_name = self.status.stages_status[i].stage_name.clone();
        let reached = match side {
            Side::After => {
                self.status.stages_status[i]
                    .clusters_completed_time
                    .get_or_insert(Time(self.o.now))
                    .0
            }
            Side::Before => self.o.now,
        };
        let configs: Vec<StageTask> = self
            .status
            .staged_update_strategy_snapshot
            .as_ref()
            .and_then(|s| s.stages.get(i))
            .map(|cfg| match side {
                Side::Before => cfg.before_stage_tasks.clone(),
                Side::After => cfg.after_stage_tasks.clone(),
            })
            .unwrap_or_default();

        let mut pending = Vec::new();
        let mut failed = Vec::new();
        for t in 0..self.tasks(i, side).len() {
            let mut task = self.tasks(i, side)[t].clone();
            let config = configs.iter().find(|c| c.type_ == task.type_);
            let gate = match task.type_ {
                StageTaskType::TimedWait => {
                    let wait = config
                        .and_then(|c| duration::parse(c.wait_time.as_deref()?).ok())
                        .unwrap_or_default();
                    self.timed_wait(&stage_name, &mut task, wait, reached)
                }
                StageTaskType::Approval => {
                    let policy = config.and_then(|c| c.approval_policy.clone());
                    self.approval(&stage_name, side, &mut task, policy)
                }
                StageTaskType::MetricCheck => {
                    let key = MetricKey {
                        stage: stage_name.clone(),
                        side: Some(side),
                    };
                    let spec = config.and_then(|c| c.metric_check.as_ref());
                    self.metric_check(key, &mut task, spec)
                }
            };
            match gate {
                Gate::Passed => {}
                Gate::Waiting(w) => pending.push(w),
                Gate::Failed(why, f) => failed.push((why, f)),
            }
            self.tasks_mut(i, side)[t] = task;
        }

        let now = self.o.now;
        let what = match side {
            Side::Before => "before its clusters start",
            Side::After => "all clusters updated",
        };
        if let Some(&(why, _)) = failed.first() {
            let what: Vec<&str> = failed.iter().map(|(_, f)| f.as_str()).collect();
            let message = format!("stage {stage_name}: {}", what.join("; "));
            let stage = &mut self.status.stages_status[i];
            for type_ in [PROGRESSING, SUCCEEDED] {
                let c = NewCondition::new(
                    type_,
                    FALSE,
                    reason::STAGE_FAILED,
                    message.clone(),
                    self.generation,
                );
                set_condition(&mut stage.conditions, c, now);
            }
            stage.end_time = Some(Time(now));
            return Gate::Failed(why, message);
        }
        if let Some(held) = &self.held {
            // No gate passes while a cluster the run updated is regressed.
            pending.insert(0, held.clone());
        }
        if !pending.is_empty() {
            let message = format!("stage {stage_name}: {what}; {}", pending.join(" and "));
            let c = self.cond(PROGRESSING, FALSE, reason::STAGE_WAITING, message.clone());
            set_condition(&mut self.status.stages_status[i].conditions, c, now);
            let why = match self.held {
                Some(_) => reason::CLUSTER_REGRESSED,
                None => reason::WAITING,
            };
            self.set_run(PROGRESSING, FALSE, why, message.clone());
            return Gate::Waiting(message);
        }
        Gate::Passed
    }

    fn tasks(&self, i: usize, side: Side) -> &[StageTaskStatus] {
        let stage = &self.status.stages_status[i];
        match side {
            Side::Before => &stage.before_stage_task_status,
            Side::After => &stage.after_stage_task_status,
        }
    }

    fn tasks_mut(&mut self, i: usize, side: Side) -> &mut [StageTaskStatus] {
        let stage = &mut self.status.stages_status[i];
        match side {
            Side::Before => &mut stage.before_stage_task_status,
            Side::After => &mut stage.after_stage_task_status,
        }
    }

    /// A soak: passes `wait` after the stage's clusters completed, not counting the time the run
    /// was held by a regressed cluster (the soak is paused meanwhile).
    fn timed_wait(
        &mut self,
        stage: &str,
        task: &mut StageTaskStatus,
        wait: Duration,
        completed: Timestamp,
    ) -> Gate {
        let now = self.o.now;
        if is_true(&task.conditions, WAIT_TIME_ELAPSED) {
            return Gate::Passed;
        }
        let waited = duration::format(wait);
        let paused = task.paused_seconds.unwrap_or(0);
        if let Some(held) = &self.held {
            // Only healthy time counts: the soak stands still while a cluster is regressed.
            let since = task.paused_since.get_or_insert(Time(now)).0;
            let counted = (since.as_second() - completed.as_second() - paused).max(0) as u64;
            let counted = duration::format(Duration::from_secs(counted));
            let c = self.cond(
                WAIT_TIME_ELAPSED,
                FALSE,
                reason::SOAK_PAUSED,
                format!("soak paused at {counted} of {waited}: {held}"),
            );
            set_condition(&mut task.conditions, c, now);
            return Gate::Waiting(format!("soak paused at {counted} of {waited}"));
        }
        let paused = resume_wait(&mut task.paused_seconds, &mut task.paused_since, now);
        let until = wait_end(completed, wait, paused);
        if now >= until {
            let c = self.cond(
                WAIT_TIME_ELAPSED,
                TRUE,
                reason::WAIT_ELAPSED,
                format!("waited {waited}"),
            );
            set_condition(&mut task.conditions, c, now);
            self.event(
                false,
                reason::WAIT_ELAPSED,
                format!("stage {stage}: waited {waited}"),
            );
            return Gate::Passed;
        }
        let c = self.cond(
            WAIT_TIME_ELAPSED,
            FALSE,
            reason::WAIT_PENDING,
            format!("waiting {waited} after the stage's clusters finished, until {until}"),
        );
        set_condition(&mut task.conditions, c, now);
        self.requeue_at(until);
        Gate::Waiting(format!("waits until {until}"))
    }

    /// A person's approval: creates the ApprovalRequest, passes once it is approved (and has
    /// the approval accepted).
    fn approval(
        &mut self,
        stage: &str,
        side: Side,
        task: &mut StageTaskStatus,
        policy: Option<fleethub_crds::approval::ApprovalPolicy>,
    ) -> Gate {
        let now = self.o.now;
        let name = task
            .approval_request_name
            .clone()
            .unwrap_or_else(|| match side {
                Side::Before => names::before_stage_approval_request_name(self.run_name(), stage),
                Side::After => names::approval_request_name(self.run_name(), stage),
            });
        let request = self.o.approvals.get(&name).copied();
        let recorded = is_true(&task.conditions, APPROVAL_REQUEST_APPROVED);
        if recorded && request.is_none() {
            // The approval is in the run's status: a request deleted since (by a person, or a
            // clean-up) takes nothing back and is not asked for again.
            return Gate::Passed;
        }
        if request.is_none() {
            self.actions.push(Action::CreateApproval {
                name: name.clone(),
                stage: stage.to_string(),
                policy,
                index: self.status.resource_snapshot_index_used.clone(),
            });
        }
        if !is_true(&task.conditions, APPROVAL_REQUEST_CREATED) {
            let c = self.cond(
                APPROVAL_REQUEST_CREATED,
                TRUE,
                reason::APPROVAL_CREATED,
                format!("ApprovalRequest {name} created"),
            );
            set_condition(&mut task.conditions, c, now);
            self.event(
                false,
                reason::APPROVAL_CREATED,
                format!("stage {stage} waits for approval: ApprovalRequest {name}"),
            );
        }
        match request {
            Some(r) if r.approved || recorded => {
                if !r.accepted {
                    self.actions
                        .push(Action::AcceptApproval { name: name.clone() });
                }
                if !recorded {
                    let requested = find(&task.conditions, APPROVAL_REQUEST_CREATED)
                        .map(|c| c.last_transition_time.0);
                    let c = self.cond(
                        APPROVAL_REQUEST_APPROVED,
                        TRUE,
                        reason::APPROVAL_APPROVED,
                        format!("ApprovalRequest {name} approved"),
                    );
                    set_condition(&mut task.conditions, c, now);
                    let message = format!("stage {stage} approved (ApprovalRequest {name})");
                    self.timed_event(reason::APPROVAL_APPROVED, message, requested);
                }
                Gate::Passed
            }
            Some(ApprovalView {
                approvals,
                needed: Some(needed),
                ..
            }) => Gate::Waiting(format!(
                "waits for approval of ApprovalRequest {name} ({approvals} of {needed} approvals)"
            )),
            _ => Gate::Waiting(format!("waits for approval of ApprovalRequest {name}")),
        }
    }

    /// A Prometheus query that must return data `successThreshold` times in a row. When a
    /// check is due and its outcome is not among the observations, the plan asks for the query
    /// (the controller makes it and plans again with the outcome).
    fn metric_check(
        &mut self,
        key: MetricKey,
        task: &mut StageTaskStatus,
        spec: Option<&MetricCheck>,
    ) -> Gate {
        let now = self.o.now;
        let stage = key.stage.clone();
        let Some(spec) = spec else {
            return Gate::Waiting(format!("stage {stage}: its MetricCheck has no metricCheck"));
        };
        let settings = match Settings::of(spec) {
            Ok(s) => s,
            Err(e) => {
                // Checked at initialization, so only a strategy snapshot edited since can get here.
                let c = self.cond(
                    METRIC_CHECK_PASSED,
                    FALSE,
                    reason::METRIC_CHECK_INVALID,
                    e.clone(),
                );
                set_condition(&mut task.conditions, c, now);
                return Gate::Failed(reason::METRIC_CHECK_INVALID, e);
            }
        };
        let status = task.metric_check.get_or_insert_with(Default::default);
        status.start_time.get_or_insert(Time(now));
        let query = status.query.clone();
        let outcome = self.o.metric_results.get(&key);
        let step = metric_check::step(&settings, status, now, outcome);
        let passes = format!(
            "{}/{}",
            status.consecutive_passes, settings.success_threshold
        );
        let last = match (&status.last_result, &status.last_value) {
            (Some(MetricCheckResult::Pass), Some(v)) => format!("last check returned {v}"),
            (Some(MetricCheckResult::NoData), _) => "last check returned no data".to_string(),
            (Some(MetricCheckResult::Error), Some(e)) => {
                format!("last check of {} failed: {e}", spec.url)
            }
            _ => "not checked yet".to_string(),
        };
        let (status_, why, message, gate) = match step {
            Step::Passed => {
                let message = format!("query passed {passes} consecutive checks");
                (TRUE, reason::METRIC_CHECK_SUCCEEDED, message, Gate::Passed)
            }
            Step::Query => {
                self.queries.push(MetricQuery {
                    key,
                    url: spec.url.clone(),
                    query,
                    secret: spec.secret_ref.as_ref().map(|r| r.name.clone()),
                });
                let message = format!("checking the query ({passes} passes)");
                let gate = Gate::Waiting(format!("waits for metric check ({passes} passes)"));
                (FALSE, reason::METRIC_CHECK_WAITING, message, gate)
            }
            Step::Wait { until, failing } => {
                self.requeue_at(until);
                let message = format!("{passes} passes; {last}; next check at {until}");
                let why = if failing {
                    reason::METRIC_CHECK_FAILING
                } else {
                    reason::METRIC_CHECK_WAITING
                };
                let gate = Gate::Waiting(format!("waits for metric check ({message})"));
                (FALSE, why, message, gate)
            }
            Step::TimedOut => {
                let message = format!(
                    "metric check did not pass within {} ({passes} passes; {last}): {query}",
                    spec.timeout.as_deref().unwrap_or("its timeout")
                );
                let gate = Gate::Failed(reason::METRIC_CHECK_TIMED_OUT, message.clone());
                (FALSE, reason::METRIC_CHECK_TIMED_OUT, message, gate)
            }
        };
        let first_pass =
            matches!(gate, Gate::Passed) && !is_true(&task.conditions, METRIC_CHECK_PASSED);
        let c = self.cond(METRIC_CHECK_PASSED, status_, why, message.clone());
        set_condition(&mut task.conditions, c, now);
        if first_pass {
            self.event(
                false,
                reason::METRIC_CHECK_SUCCEEDED,
                format!("stage {stage}: metric check {message}"),
            );
        }
        gate
    }

    /// Every gate of stage `i` passed: the stage succeeded.
    pub(super) fn stage_succeeded(&mut self, i: usize) {
        let now = self.o.now;
        let generation = self.generation;
        let stage = &mut self.status.stages_status[i];
        let exceptions = super::exceptions(std::slice::from_ref(stage));
        let message = match exceptions {
            Some(e) => format!("stage {} succeeded; {e}", stage.stage_name),
            None => format!("stage {} succeeded", stage.stage_name),
        };
        for (type_, status) in [(PROGRESSING, FALSE), (SUCCEEDED, TRUE)] {
            let c = NewCondition::new(
                type_,
                status,
                reason::STAGE_SUCCEEDED,
                message.clone(),
                generation,
            );
            set_condition(&mut stage.conditions, c, now);
        }
        stage.end_time = Some(Time(now));
        let started = stage.start_time.as_ref().map(|t| t.0);
        self.timed_event(reason::STAGE_SUCCEEDED, message, started);
    }
}
