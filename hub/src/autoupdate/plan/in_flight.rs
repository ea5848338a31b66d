//! The half of an AutoUpdatePolicy's step that follows an update in flight: its image set on
//! the target, its run rolling out until it succeeds, is superseded or fails, and the rollback
//! to the last good version after a failure.

use super::*;

impl Stepper<'_, '_> {
    pub(super) fn in_flight(
        &mut self,
        status: &mut AutoUpdatePolicyStatus,
        mut flight: InFlightUpdate,
    ) {
        self.sleep_at_most(IN_FLIGHT_RECHECK);
        let o = self.o;
        let version = flight.version.clone();
        match flight.phase {
            InFlightPhase::Applying => {
                self.actions.push(Action::SetImage(flight.image.clone()));
                let Some(index) = o
                    .snapshot_with_image
                    .filter(|i| *i > flight.previous_snapshot_index)
                else {
                    self.condition(
                        status,
                        (
                            UPDATING,
                            TRUE,
                            reason::APPLYING,
                            format!(
                                "{} is on the target; waiting for placement {} to snapshot it",
                                flight.image, o.spec.placement_name
                            ),
                        ),
                    );
                    status.in_flight = Some(flight);
                    return;
                };
                let name = run_name(o.name, &version);
                flight.phase = InFlightPhase::RollingOut;
                flight.snapshot_index = Some(index);
                flight.update_run = Some(name.clone());
                self.actions.push(Action::EnsureRun {
                    name: name.clone(),
                    snapshot_index: index,
                    strategy: o.spec.staged_rollout_strategy_name.clone(),
                    rollback_of: None,
                });
                self.rolling_out(status, &flight, &name);
                status.in_flight = Some(flight);
            }
            InFlightPhase::RollingOut => {
                let name = flight
                    .update_run
                    .clone()
                    .unwrap_or_else(|| run_name(o.name, &version));
                match &o.update_run {
                    RunOutcome::Missing | RunOutcome::Running => {
                        if o.update_run == RunOutcome::Missing {
                            self.actions.push(Action::EnsureRun {
                                name: name.clone(),
                                snapshot_index: flight
                                    .snapshot_index
                                    .unwrap_or(flight.previous_snapshot_index),
                                strategy: o.spec.staged_rollout_strategy_name.clone(),
                                rollback_of: None,
                            });
                        }
                        self.rolling_out(status, &flight, &name);
                        status.in_flight = Some(flight);
                    }
                    RunOutcome::Succeeded => {
                        status.current_version = Some(version.clone());
                        status.rollback_count = 0;
                        status.in_flight = None;
                        push_history(
                            status,
                            history(&flight, VersionOutcome::Healthy, o.now, None),
                        );
                        self.condition(
                            status,
                            (
                                UPDATING,
                                FALSE,
                                reason::IDLE,
                                format!("{version} is healthy"),
                            ),
                        );
                        self.note(
                            false,
                            reason::UPDATE_SUCCEEDED,
                            format!("{version} rolled out everywhere by UpdateRun {name}"),
                        );
                    }
                    RunOutcome::Superseded => {
                        status.in_flight = None;
                        push_history(
                            status,
                            history(
                                &flight,
                                VersionOutcome::Superseded,
                                o.now,
                                Some("a newer UpdateRun of the placement took over".into()),
                            ),
                        );
                        self.condition(
                            status,
                            (
                                UPDATING,
                                FALSE,
                                reason::IDLE,
                                format!("{version}'s run was superseded by another run"),
                            ),
                        );
                    }
                    RunOutcome::Failed(why) => self.roll_back(status, flight, why),
                }
            }
            InFlightPhase::RollingBack => {
                let name = flight
                    .rollback_run
                    .clone()
                    .unwrap_or_else(|| rollback_run_name(o.name, &version));
                let Some(index) = flight.rollback_snapshot_index else {
                    // The previous image goes back on the hub first; the rollback rolls the
                    // snapshot the placement cuts of it.
                    self.actions
                        .push(Action::SetImage(flight.previous_image.clone()));
                    let after = flight
                        .snapshot_index
                        .unwrap_or(flight.previous_snapshot_index);
                    match o.snapshot_with_image.filter(|i| *i > after) {
                        Some(index) => {
                            flight.rollback_snapshot_index = Some(index);
                            flight.rollback_run = Some(name.clone());
                            self.rollback_run_actions(index, &name, flight.update_run.clone());
                            self.rolling_back(status, &flight, &name);
                        }
                        None => self.condition(
                            status,
                            (
                                UPDATING,
                                TRUE,
                                reason::ROLLING_BACK,
                                format!(
                                    "{} is back on the target; waiting for placement {} to snapshot it",
                                    flight.previous_image, o.spec.placement_name
                                ),
                            ),
                        ),
                    }
                    status.in_flight = Some(flight);
                    return;
                };
                match &o.rollback_run {
                    RunOutcome::Missing => {
                        self.rollback_run_actions(index, &name, flight.update_run.clone());
                        self.rolling_back(status, &flight, &name);
                        status.in_flight = Some(flight);
                    }
                    RunOutcome::Running => {
                        self.rolling_back(status, &flight, &name);
                        status.in_flight = Some(flight);
                    }
                    RunOutcome::Succeeded | RunOutcome::Superseded => {
                        status.in_flight = None;
                        self.condition(
                            status,
                            (
                                UPDATING,
                                FALSE,
                                reason::IDLE,
                                format!(
                                    "{version} was rolled back to {}",
                                    flight
                                        .previous_version
                                        .as_deref()
                                        .unwrap_or("the previous image")
                                ),
                            ),
                        );
                    }
                    RunOutcome::Failed(why) => {
                        status.in_flight = None;
                        status.circuit_open = true;
                        let message = format!(
                            "rolling {version} back failed ({why}); nothing is applied until a person resets the circuit"
                        );
                        self.condition(
                            status,
                            (CIRCUIT_OPEN, TRUE, reason::ROLLBACK_FAILED, message.clone()),
                        );
                        self.condition(status, (UPDATING, FALSE, reason::IDLE, message.clone()));
                        self.note(true, reason::ROLLBACK_FAILED, message);
                    }
                }
            }
        }
    }

    fn rolling_out(&self, status: &mut AutoUpdatePolicyStatus, flight: &InFlightUpdate, run: &str) {
        self.condition(
            status,
            (
                UPDATING,
                TRUE,
                reason::ROLLING_OUT,
                format!(
                    "UpdateRun {run} rolls {} (snapshot {}) out",
                    flight.version,
                    flight.snapshot_index.unwrap_or_default()
                ),
            ),
        );
    }

    fn rolling_back(
        &self,
        status: &mut AutoUpdatePolicyStatus,
        flight: &InFlightUpdate,
        run: &str,
    ) {
        self.condition(
            status,
            (
                UPDATING,
                TRUE,
                reason::ROLLING_BACK,
                format!(
                    "UpdateRun {run} rolls {} back to {} (snapshot {})",
                    flight.version,
                    flight.previous_image,
                    flight.rollback_snapshot_index.unwrap_or_default()
                ),
            ),
        );
    }

    /// The version's run failed: in one status write mark the version failed, count the
    /// rollback, maybe open the circuit, and move to RollingBack; the image and the rollback
    /// run follow.
    fn roll_back(
        &mut self,
        status: &mut AutoUpdatePolicyStatus,
        mut flight: InFlightUpdate,
        why: &str,
    ) {
        let o = self.o;
        let version = flight.version.clone();
        if !status.failed_versions.contains(&version) {
            status.failed_versions.push(version.clone());
            cap(&mut status.failed_versions);
        }
        status.rollback_count += 1;
        push_history(
            status,
            history(
                &flight,
                VersionOutcome::RolledBack,
                o.now,
                Some(why.to_string()),
            ),
        );
        flight.phase = InFlightPhase::RollingBack;
        self.actions
            .push(Action::SetImage(flight.previous_image.clone()));
        self.condition(
            status,
            (
                UPDATING,
                TRUE,
                reason::ROLLING_BACK,
                format!(
                    "{version} failed; putting {} back on the target",
                    flight.previous_image
                ),
            ),
        );
        let max = o.spec.max_rollbacks.unwrap_or(DEFAULT_MAX_ROLLBACKS);
        self.note(
            true,
            reason::ROLLED_BACK,
            format!(
                "{version} failed ({why}); rolling back to {} (rollback {} of {max})",
                flight.previous_image, status.rollback_count
            ),
        );
        if status.rollback_count >= max && !status.circuit_open {
            status.circuit_open = true;
            self.note(
                true,
                reason::TOO_MANY_ROLLBACKS,
                format!(
                    "circuit open after {} consecutive rollbacks: versions are still checked but not applied until a person resets it",
                    status.rollback_count
                ),
            );
        }
        status.in_flight = Some(flight);
    }

    /// The rollback run of the failed run `of`: an UpdateRun with `spec.rollback` (so it updates
    /// clusters whatever their health, and never rolls back itself).
    fn rollback_run_actions(&mut self, index: i64, name: &str, of: Option<String>) {
        let o = self.o;
        let strategy = match &o.spec.rollback_strategy_name {
            Some(s) => s.clone(),
            None => {
                let s = rollback_strategy_name(o.name);
                self.actions.push(Action::EnsureRollbackStrategy(s.clone()));
                s
            }
        };
        self.actions.push(Action::EnsureRun {
            name: name.to_string(),
            snapshot_index: index,
            strategy,
            rollback_of: of,
        });
    }
}
