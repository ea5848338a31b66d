//! After-stage tasks: the gates between a stage and the next. Each task type is one function
//! that updates its task's conditions and says what it still waits for; adding a type adds a
//! variant to `AfterStageTaskType` (crds), one arm in [`Planner::gate_stage`] and one in the
//! shared run model (`fleethub_crds::run_progress`).

use std::time::Duration;

use fleethub_crds::conditions::{FALSE, NewCondition, TRUE, find, is_true, set_condition};
use fleethub_crds::strategy::{AfterStageTask, AfterStageTaskType};
use fleethub_crds::update_run::{
    APPROVAL_REQUEST_APPROVED, APPROVAL_REQUEST_CREATED, AfterStageTaskStatus, PROGRESSING,
    SUCCEEDED, WAIT_TIME_ELAPSED, reason,
};
use fleethub_crds::{duration, names};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{Action, Planner};

impl Planner<'_, '_> {
    /// Runs the after-stage tasks of a stage whose clusters are all done; true once they passed.
    pub(super) fn gate_stage(&mut self, i: usize) -> bool {
        let stage_name = self.status.stages_status[i].stage_name.clone();
        let completed = self.status.stages_status[i]
            .clusters_completed_time
            .get_or_insert(Time(self.o.now))
            .0;
        let configs: Vec<AfterStageTask> = self
            .status
            .staged_update_strategy_snapshot
            .as_ref()
            .and_then(|s| s.stages.get(i))
            .map(|cfg| cfg.after_stage_tasks.clone())
            .unwrap_or_default();

        let mut pending = Vec::new();
        for t in 0..self.status.stages_status[i].after_stage_task_status.len() {
            let mut task = self.status.stages_status[i].after_stage_task_status[t].clone();
            let config = configs.iter().find(|c| c.type_ == task.type_);
            let waiting = match task.type_ {
                AfterStageTaskType::TimedWait => {
                    let wait = config
                        .and_then(|c| duration::parse(c.wait_time.as_deref()?).ok())
                        .unwrap_or_default();
                    self.timed_wait(&stage_name, &mut task, wait, completed)
                }
                AfterStageTaskType::Approval => self.approval(&stage_name, &mut task),
            };
            pending.extend(waiting);
            self.status.stages_status[i].after_stage_task_status[t] = task;
        }

        if !pending.is_empty() {
            let message = format!(
                "stage {stage_name}: all clusters updated; {}",
                pending.join(" and ")
            );
            let c = self.cond(PROGRESSING, FALSE, reason::STAGE_WAITING, message.clone());
            set_condition(&mut self.status.stages_status[i].conditions, c, self.o.now);
            self.set_run(PROGRESSING, FALSE, reason::WAITING, message);
            return false;
        }
        self.stage_succeeded(i);
        true
    }

    /// A soak: passes `wait` after the stage's clusters completed. What it waits for, if it
    /// has not passed.
    fn timed_wait(
        &mut self,
        stage: &str,
        task: &mut AfterStageTaskStatus,
        wait: Duration,
        completed: Timestamp,
    ) -> Option<String> {
        let now = self.o.now;
        if is_true(&task.conditions, WAIT_TIME_ELAPSED) {
            return None;
        }
        let until = completed.checked_add(wait).unwrap_or(completed);
        let waited = duration::format(wait);
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
            return None;
        }
        let c = self.cond(
            WAIT_TIME_ELAPSED,
            FALSE,
            reason::WAIT_PENDING,
            format!("waiting {waited} after the stage's clusters finished, until {until}"),
        );
        set_condition(&mut task.conditions, c, now);
        self.requeue_at(until);
        Some(format!("waits until {until}"))
    }

    /// A person's approval: creates the ApprovalRequest, passes once it is approved (and has
    /// the approval accepted). What it waits for, if it has not passed.
    fn approval(&mut self, stage: &str, task: &mut AfterStageTaskStatus) -> Option<String> {
        let now = self.o.now;
        let name = task
            .approval_request_name
            .clone()
            .unwrap_or_else(|| names::approval_request_name(self.run_name(), stage));
        let request = self.o.approvals.get(&name).copied();
        if request.is_none() {
            self.actions.push(Action::CreateApproval {
                name: name.clone(),
                stage: stage.to_string(),
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
        let recorded = is_true(&task.conditions, APPROVAL_REQUEST_APPROVED);
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
                None
            }
            _ => Some(format!("waits for approval of ApprovalRequest {name}")),
        }
    }

    /// Every gate of stage `i` passed: the stage succeeded.
    fn stage_succeeded(&mut self, i: usize) {
        let now = self.o.now;
        let generation = self.generation;
        let stage = &mut self.status.stages_status[i];
        let message = format!("stage {} succeeded", stage.stage_name);
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
