//! A stopped run, and the final stage that removes the workload from clusters no longer
//! selected.

use fleethub_crds::binding::BindingState;
use fleethub_crds::conditions::{FALSE, NewCondition, TRUE, find, is_true, set_condition};
use fleethub_crds::update_run::{
    CLUSTER_SKIPPED, CLUSTER_STARTED, DELETION_STAGE, PROGRESSING, SUCCEEDED, StageUpdatingStatus,
    reason,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{Action, Planner};

impl Planner<'_, '_> {
    /// The run is stopped; `meanwhile`: what its current stage still waits for.
    pub(super) fn stopped(&mut self, meanwhile: Option<String>) {
        let mut message =
            "stopped by spec.state=Stop: no new cluster starts; set spec.state to Run to resume"
                .to_string();
        if let Some(m) = meanwhile {
            message = format!("{message} (meanwhile {m})");
        }
        self.set_run(PROGRESSING, FALSE, reason::STOPPED, message);
    }

    /// After the last stage: removes the workload from the clusters the placement no longer
    /// selects, then the run succeeds.
    pub(super) fn deletion_stage(&mut self, stopped: bool) {
        let now = self.o.now;
        let mut del =
            self.status
                .deletion_stage_status
                .take()
                .unwrap_or_else(|| StageUpdatingStatus {
                    stage_name: DELETION_STAGE.to_string(),
                    ..Default::default()
                });
        self.status.current_stage = Some(DELETION_STAGE.to_string());
        let mut remaining = Vec::new();
        if !del.clusters.is_empty() && stopped && del.start_time.is_none() {
            self.status.deletion_stage_status = Some(del);
            self.stopped(None);
            return;
        }
        del.start_time.get_or_insert(Time(now));
        for cluster in &mut del.clusters {
            if is_true(&cluster.conditions, SUCCEEDED)
                || is_true(&cluster.conditions, CLUSTER_SKIPPED)
            {
                continue;
            }
            let name = cluster.cluster_name.clone();
            let selected_again = self
                .binding(&name)
                .is_some_and(|b| b.state != BindingState::Unscheduled);
            if selected_again && find(&cluster.conditions, CLUSTER_STARTED).is_none() {
                // The placement selects it again: its Binding is no longer this stage's to
                // delete (a new run updates it).
                let message = format!(
                    "cluster {name} is selected by Placement {} again; its workload is kept (a new run updates it)",
                    self.o.run.spec.placement_name
                );
                let c = NewCondition::new(
                    CLUSTER_SKIPPED,
                    TRUE,
                    reason::CLUSTER_SELECTED_AGAIN,
                    message.clone(),
                    self.generation,
                );
                set_condition(&mut cluster.conditions, c, now);
                cluster.end_time = Some(Time(now));
                self.events.push(super::PlanEvent {
                    warning: false,
                    reason: reason::CLUSTER_SELECTED_AGAIN,
                    message,
                    seconds: None,
                    cause: None,
                });
                continue;
            }
            if find(&cluster.conditions, CLUSTER_STARTED).is_none() {
                let c = NewCondition::new(
                    CLUSTER_STARTED,
                    TRUE,
                    reason::CLUSTER_STARTED,
                    format!("removing the workload from cluster {name}"),
                    self.generation,
                );
                set_condition(&mut cluster.conditions, c, now);
                cluster.start_time = Some(Time(now));
            }
            let still_bound = self.binding(&name).is_some();
            if still_bound || self.o.works.contains_key(&name) {
                self.actions.push(Action::Unbind {
                    cluster: name.clone(),
                });
                remaining.push(name);
            } else {
                let c = NewCondition::new(
                    SUCCEEDED,
                    TRUE,
                    reason::CLUSTER_SUCCEEDED,
                    format!("the workload was removed from cluster {name}"),
                    self.generation,
                );
                set_condition(&mut cluster.conditions, c, now);
                cluster.end_time = Some(Time(now));
            }
        }
        if !remaining.is_empty() {
            let message = format!(
                "removing the workload from {}",
                super::listed(&remaining, ", ")
            );
            self.status.deletion_stage_status = Some(del);
            self.set_run(PROGRESSING, TRUE, reason::STARTED, message);
            return;
        }
        for (type_, status) in [(PROGRESSING, FALSE), (SUCCEEDED, TRUE)] {
            let c = NewCondition::new(
                type_,
                status,
                reason::STAGE_SUCCEEDED,
                "deletion stage succeeded".to_string(),
                self.generation,
            );
            set_condition(&mut del.conditions, c, now);
        }
        del.end_time.get_or_insert(Time(now));
        self.status.deletion_stage_status = Some(del);
        self.status.current_stage = None;
        if !self.baked() {
            return;
        }
        self.status.end_time = Some(Time(now));
        let message = match super::exceptions(&self.status.stages_status) {
            None => format!(
                "every cluster runs resource snapshot {} of Placement {}",
                self.index(),
                self.o.run.spec.placement_name
            ),
            Some(e) => format!(
                "the run's clusters run resource snapshot {} of Placement {}, except: {e}",
                self.index(),
                self.o.run.spec.placement_name
            ),
        };
        self.set_run(PROGRESSING, FALSE, reason::SUCCEEDED, message.clone());
        self.set_run(SUCCEEDED, TRUE, reason::SUCCEEDED, message.clone());
        self.event(false, reason::SUCCEEDED, message);
    }
}
