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
                let Some(index) = o
                    .snapshot_with_image
                    .filter(|i| *i > flight.previous_snapshot_index)
                else {
                    let waited = o.now.as_second() - flight.start_time.0.as_second();
                    if waited >= APPLYING_DEADLINE_SECONDS {
                        return self.not_snapshotted(status, flight, waited);
                    }
                    self.actions.push(Action::SetImage(flight.image.clone()));
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
                self.actions.push(Action::SetImage(flight.image.clone()));
                let name = run_name(o.name, &version);
                flight.phase = InFlightPhase::RollingOut;
                flight.snapshot_index = Some(index);
                flight.update_run = Some(name.clone());
                self.actions.push(Action::EnsureRun {
                    name: name.clone(),
                    snapshot_index: index,
                    strategy: o.spec.staged_rollout_strategy_name.clone(),
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
                    RunOutcome::Blocked(why) => {
                        // A run that holds on a failed cluster (one made before its policy set
                        // onFailure) is asked to fail and roll back like any other.
                        self.actions.push(Action::RollBackRun(name.clone()));
                        self.condition(
                            status,
                            (
                                UPDATING,
                                TRUE,
                                reason::ROLLING_OUT,
                                format!(
                                    "UpdateRun {name} stopped at a failed cluster ({why}); asking it to roll back"
                                ),
                            ),
                        );
                        status.in_flight = Some(flight);
                    }
                    RunOutcome::Failed(why) => self.roll_back(status, flight, why),
                }
            }
            InFlightPhase::RollingBack => {
                // The previous image stays on the hub object, so the placement's next snapshot
                // holds the known-good version again.
                self.actions
                    .push(Action::SetImage(flight.previous_image.clone()));
                let failed = flight.update_run.clone().unwrap_or_default();
                let Some(name) = flight.rollback_run.clone() else {
                    status.in_flight = None;
                    self.condition(
                        status,
                        (
                            UPDATING,
                            FALSE,
                            reason::IDLE,
                            format!(
                                "{version} failed before UpdateRun {failed} updated any cluster: nothing to roll back; {} is back on the target",
                                flight.previous_image
                            ),
                        ),
                    );
                    return;
                };
                match &o.rollback_run {
                    RunOutcome::Running => {
                        self.rolling_back(status, &flight, &name);
                        status.in_flight = Some(flight);
                    }
                    RunOutcome::Succeeded | RunOutcome::Superseded | RunOutcome::Missing => {
                        status.in_flight = None;
                        let how = if o.rollback_run == RunOutcome::Missing {
                            format!(
                                "UpdateRun {name} no longer exists; clusters keep what they run"
                            )
                        } else {
                            format!(
                                "{version} was rolled back to {}",
                                flight
                                    .previous_version
                                    .as_deref()
                                    .unwrap_or("the previous image")
                            )
                        };
                        self.condition(status, (UPDATING, FALSE, reason::IDLE, how));
                    }
                    RunOutcome::Failed(why) | RunOutcome::Blocked(why) => {
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

    /// The placement cut no snapshot of the new image within the deadline: the previous image
    /// goes back, and the version counts as failed (a person may retry it) rather than being
    /// tried forever.
    fn not_snapshotted(
        &mut self,
        status: &mut AutoUpdatePolicyStatus,
        flight: InFlightUpdate,
        waited: i64,
    ) {
        let o = self.o;
        let message = format!(
            "placement {} cut no snapshot holding {} within {waited}s: does it select {} {}/{} (spec.placementName, spec.target)? {} is back on the target",
            o.spec.placement_name,
            flight.image,
            o.spec.target.kind.as_str(),
            o.spec.target.namespace,
            o.spec.target.name,
            flight.previous_image
        );
        self.actions
            .push(Action::SetImage(flight.previous_image.clone()));
        if !status.failed_versions.contains(&flight.version) {
            status.failed_versions.push(flight.version.clone());
            cap(&mut status.failed_versions);
        }
        push_history(
            status,
            history(
                &flight,
                VersionOutcome::NotSnapshotted,
                o.now,
                Some(message.clone()),
            ),
        );
        status.in_flight = None;
        self.condition(
            status,
            (UPDATING, FALSE, reason::NOT_SNAPSHOTTED, message.clone()),
        );
        self.note(true, reason::NOT_SNAPSHOTTED, message);
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
                    "UpdateRun {run} rolls the clusters {} reached back to {}, newest first",
                    flight.version, flight.previous_image,
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
        flight.rollback_run = o.update_run_rollback.clone();
        self.actions
            .push(Action::SetImage(flight.previous_image.clone()));
        match &flight.rollback_run {
            Some(run) => self.rolling_back(status, &flight, run),
            None => self.condition(
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
            ),
        }
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
}
