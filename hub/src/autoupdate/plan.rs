//! An AutoUpdatePolicy's next step, as a pure function of what the controller observed: the
//! policy, the target's image on the hub, the placement, the runs in flight and (when a check was
//! due) what the registry offered. The plan is the new status plus idempotent actions derived
//! from it; the controller writes the status **first** and acts after, so a hub killed between
//! the two repeats an action instead of losing it, and a count made in a status write (with a
//! resourceVersion precondition) is never made twice.

use std::time::Duration;

use fleethub_crds::auto_update::{
    APPLYING_DEADLINE_SECONDS, AutoUpdatePolicySpec, AutoUpdatePolicyStatus, CIRCUIT_OPEN,
    DEFAULT_MAX_ROLLBACKS, InFlightPhase, InFlightUpdate, MAX_HISTORY, READY, UPDATING,
    VersionHistory, VersionOutcome, reason,
};
use fleethub_crds::conditions::{FALSE, NewCondition, TRUE, set_condition};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::image::ImageRef;
use super::versions::parse_tag;

mod in_flight;

/// How often an update in flight is looked at even without a watch event.
pub const IN_FLIGHT_RECHECK: Duration = Duration::from_secs(5);
/// The longest an idle policy sleeps (a changed schedule is seen at least this often).
pub const MAX_IDLE_SLEEP: Duration = Duration::from_secs(300);

/// The target container's image on the hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetView {
    /// The image, as written in the container.
    pub image: String,
    /// Its tag, when it has one and no digest.
    pub tag: Option<String>,
    /// Whether it is pinned by digest (`@sha256:…`).
    pub digest_pinned: bool,
}

/// The placement, as far as the policy cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementView {
    /// Its newest snapshot index.
    pub latest_index: Option<i64>,
    /// Every selected cluster that is bound at all is bound to the newest snapshot, and no
    /// UpdateRun of the placement is in progress: nothing else is rolling.
    pub settled: bool,
    /// Settled, and every selected cluster reports the workload available.
    pub available: bool,
    /// Why it is not settled (for the condition).
    pub unsettled_because: String,
    /// A Freeze holding it, in words: no new version is applied meanwhile.
    pub frozen: Option<String>,
}

/// How an UpdateRun stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// It does not exist (not created yet, or deleted).
    Missing,
    /// Initializing or rolling (or stopped by a person).
    Running,
    /// Succeeded=True.
    Succeeded,
    /// Succeeded=False because a newer run of the placement took over.
    Superseded,
    /// Succeeded=False: the reason and message.
    Failed(String),
    /// Stopped at a cluster that failed (a run that holds on failure): the reason and message.
    Blocked(String),
}

/// Everything one step decides on.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The policy's name (runs are named after it).
    pub name: &'a str,
    /// Its generation.
    pub generation: Option<i64>,
    /// Its spec.
    pub spec: &'a AutoUpdatePolicySpec,
    /// Its status as read.
    pub status: &'a AutoUpdatePolicyStatus,
    /// The value of the check-request annotation.
    pub check_request: Option<&'a str>,
    /// The value of the reset-request annotation.
    pub reset_request: Option<&'a str>,
    /// The value of the retry-request annotation (`VERSION@NONCE`).
    pub retry_request: Option<&'a str>,
    /// Now.
    pub now: Timestamp,
    /// The schedule's next tick after the last check (or after now when never checked); `Err`
    /// names the field when the schedule cannot be used.
    pub next_tick: Result<Option<Timestamp>, String>,
    /// Whether `spec.versionConstraint` reads (`Err` says why).
    pub constraint: Result<(), String>,
    /// The target's image, or why it cannot be read.
    pub target: Result<TargetView, String>,
    /// The placement, or why it cannot be used.
    pub placement: Result<PlacementView, String>,
    /// While applying: the newest snapshot index, when it holds the new image.
    pub snapshot_with_image: Option<i64>,
    /// The in-flight update's run.
    pub update_run: RunOutcome,
    /// The rollback run the in-flight update's run names (`status.rollbackRun`) once it failed:
    /// the run rolls its own clusters back (`onFailure: Rollback`), and the policy follows it.
    pub update_run_rollback: Option<String>,
    /// The in-flight rollback's run.
    pub rollback_run: RunOutcome,
    /// After a check: the version the registry offers (`Ok(None)`: nothing newer eligible), or
    /// the registry's error.
    pub registry: Option<Result<Option<String>, String>>,
}

/// What the controller does after writing [`Plan::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Put `image` on the target container (server-side apply of just that field).
    SetImage(String),
    /// Make sure UpdateRun `name` exists, rolling `snapshot_index` with `strategy` and
    /// `onFailure: Rollback`.
    EnsureRun {
        /// The run's name.
        name: String,
        /// The snapshot index it rolls.
        snapshot_index: i64,
        /// The StagedUpdateStrategy.
        strategy: String,
    },
    /// Set `onFailure: Rollback` on UpdateRun `name`, stopped at a failed cluster: it fails and
    /// rolls its clusters back at once.
    RollBackRun(String),
}

/// An event to record on the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Warning rather than Normal.
    pub warning: bool,
    /// CamelCase reason.
    pub reason: &'static str,
    /// What happened.
    pub message: String,
}

/// One step: write `status`, then act, then look again after `requeue` at the latest.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The new status.
    pub status: AutoUpdatePolicyStatus,
    /// Idempotent actions, in order.
    pub actions: Vec<Action>,
    /// Events.
    pub notes: Vec<Note>,
    /// When to look again at the latest.
    pub requeue: Duration,
}

/// The step decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// A check is due: ask the registry and plan again with [`Observed::registry`] set.
    CheckRegistry,
    /// Write the status, then act.
    Step(Box<Step>),
}

/// The UpdateRun rolling `version` out for `policy`: `<policy>-<version>` with the version's
/// dots and plus signs as dashes (admission keeps policy names to 40 characters).
pub fn run_name(policy: &str, version: &str) -> String {
    format!("{policy}-{}", dns_version(version))
}

fn dns_version(version: &str) -> String {
    let mut s: String = version
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    s.truncate(22);
    s.trim_end_matches('-').to_string()
}

/// Whether `version` is eligible now: greater than the current version and never failed.
fn eligible(version: &str, status: &AutoUpdatePolicyStatus) -> bool {
    let Some(v) = parse_tag(version) else {
        return false;
    };
    let newer = match status.current_version.as_deref().and_then(parse_tag) {
        Some(current) => v.cmp_precedence(&current).is_gt(),
        None => true,
    };
    newer
        && !status
            .failed_versions
            .iter()
            .any(|f| parse_tag(f) == Some(v.clone()))
}

/// Decides the policy's next step.
pub fn plan(o: &Observed<'_>) -> Plan {
    let mut status = o.status.clone();
    status.observed_generation = o.generation;
    let mut step = Stepper {
        o,
        actions: Vec::new(),
        notes: Vec::new(),
        requeue: MAX_IDLE_SLEEP,
    };
    step.reset_if_asked(&mut status);
    step.retry_if_asked(&mut status);
    match status.in_flight.clone() {
        Some(flight) => step.in_flight(&mut status, flight),
        None => {
            if let Some(plan) = step.idle(&mut status) {
                return plan;
            }
        }
    }
    set_circuit(&mut status, o);
    Plan::Step(Box::new(Step {
        status,
        actions: step.actions,
        notes: step.notes,
        requeue: step.requeue,
    }))
}

struct Stepper<'a, 'o> {
    o: &'a Observed<'o>,
    actions: Vec<Action>,
    notes: Vec<Note>,
    requeue: Duration,
}

impl Stepper<'_, '_> {
    fn condition(&self, status: &mut AutoUpdatePolicyStatus, c: (&str, &str, &str, String)) {
        let (type_, value, reason, message) = c;
        set_condition(
            &mut status.conditions,
            NewCondition::new(type_, value, reason, message, self.o.generation),
            self.o.now,
        );
    }

    fn note(&mut self, warning: bool, reason: &'static str, message: String) {
        self.notes.push(Note {
            warning,
            reason,
            message,
        });
    }

    fn sleep_at_most(&mut self, d: Duration) {
        self.requeue = self.requeue.min(d);
    }

    /// A person's reset (a new annotation value) closes the circuit and forgets the count.
    fn reset_if_asked(&mut self, status: &mut AutoUpdatePolicyStatus) {
        let Some(asked) = self.o.reset_request else {
            return;
        };
        if status.observed_reset_request.as_deref() == Some(asked) {
            return;
        }
        status.observed_reset_request = Some(asked.to_string());
        if status.circuit_open || status.rollback_count > 0 {
            self.note(
                false,
                reason::RESET,
                format!(
                    "circuit closed by request after {} rollbacks; failed versions stay skipped",
                    status.rollback_count
                ),
            );
        }
        status.circuit_open = false;
        status.rollback_count = 0;
        self.condition(
            status,
            (
                CIRCUIT_OPEN,
                FALSE,
                reason::RESET,
                "closed by a person's reset request".into(),
            ),
        );
    }

    /// A person's retry request (`VERSION@NONCE`, a new value): the version leaves
    /// `failedVersions`, recorded in the history, and may be picked again.
    fn retry_if_asked(&mut self, status: &mut AutoUpdatePolicyStatus) {
        let Some(asked) = self.o.retry_request else {
            return;
        };
        if status.observed_retry_request.as_deref() == Some(asked) {
            return;
        }
        status.observed_retry_request = Some(asked.to_string());
        let version = asked.split_once('@').map_or(asked, |(v, _)| v);
        let before = status.failed_versions.len();
        status.failed_versions.retain(|f| f != version);
        if status.failed_versions.len() == before {
            self.note(
                true,
                reason::RETRY_ALLOWED,
                format!("retry of {version} asked, but it is not among the failed versions"),
            );
            return;
        }
        push_history(
            status,
            VersionHistory {
                version: version.to_string(),
                outcome: VersionOutcome::RetryAllowed,
                update_run: None,
                start_time: None,
                end_time: Some(Time(self.o.now)),
                message: Some("a person asked to try it again".into()),
            },
        );
        self.note(
            false,
            reason::RETRY_ALLOWED,
            format!("{version} may be picked again: a person asked to retry it"),
        );
    }

    /// Nothing in flight: adopt a version a person rolled out, check when due, start an update
    /// when one is eligible and the placement is quiet. `Some` asks for a registry check first.
    fn idle(&mut self, status: &mut AutoUpdatePolicyStatus) -> Option<Plan> {
        let o = self.o;
        self.condition(
            status,
            (UPDATING, FALSE, reason::IDLE, "no update in flight".into()),
        );
        if let Err(why) = &o.constraint {
            self.not_ready(status, reason::INVALID_VERSION_CONSTRAINT, why.clone());
            return None;
        }
        let next_tick = match &o.next_tick {
            Ok(t) => *t,
            Err(why) => {
                self.not_ready(status, reason::INVALID_SCHEDULE, why.clone());
                return None;
            }
        };
        let target = match &o.target {
            Ok(t) => t,
            Err(why) => {
                self.not_ready(status, reason::TARGET_NOT_FOUND, why.clone());
                self.sleep_at_most(IN_FLIGHT_RECHECK * 6);
                return None;
            }
        };
        let placement = match &o.placement {
            Ok(p) => p,
            Err(why) => {
                self.not_ready(status, reason::PLACEMENT_NOT_USABLE, why.clone());
                self.sleep_at_most(IN_FLIGHT_RECHECK * 6);
                return None;
            }
        };
        self.adopt_manual_version(status, target, placement);
        if o.spec.suspend {
            status.next_check_time = None;
            self.condition(
                status,
                (
                    READY,
                    TRUE,
                    reason::SUSPENDED,
                    "suspended: no checks, no updates".into(),
                ),
            );
            return None;
        }
        if target.digest_pinned {
            status.next_check_time = None;
            self.not_ready(
                status,
                reason::DIGEST_PINNED,
                format!(
                    "target image {} is pinned by digest; it is never updated (set a tag to follow the registry)",
                    target.image
                ),
            );
            return None;
        }
        let asked = o
            .check_request
            .filter(|r| status.observed_check_request.as_deref() != Some(*r));
        let due = status.next_check_time.as_ref().is_none_or(|t| t.0 <= o.now) || asked.is_some();
        if due {
            match &o.registry {
                None => return Some(Plan::CheckRegistry),
                Some(result) => {
                    status.observed_check_request = o.check_request.map(str::to_string);
                    status.last_check_time = Some(Time(o.now));
                    status.next_check_time = next_tick.map(Time);
                    match result {
                        Ok(found) => {
                            status.available_version = found.clone();
                            self.condition(
                                status,
                                (READY, TRUE, reason::READY, ready_message(status)),
                            );
                        }
                        Err(why) => {
                            self.not_ready(status, reason::REGISTRY_ERROR, why.clone());
                        }
                    }
                }
            }
        }
        if let Some(next) = &status.next_check_time {
            let until = next.0.duration_since(o.now);
            self.sleep_at_most(until.try_into().unwrap_or_default());
        }
        self.start_if_eligible(status, target, placement);
        None
    }

    fn not_ready(&self, status: &mut AutoUpdatePolicyStatus, reason: &str, message: String) {
        self.condition(status, (READY, FALSE, reason, message));
    }

    /// The target runs a semver tag other than the current version, and it rolled out
    /// everywhere: a person's own change, which becomes the current version (and closes an open
    /// circuit: a version they chose succeeded).
    fn adopt_manual_version(
        &mut self,
        status: &mut AutoUpdatePolicyStatus,
        target: &TargetView,
        placement: &PlacementView,
    ) {
        let Some(tag) = target.tag.as_deref() else {
            return;
        };
        if parse_tag(tag).is_none() || status.current_version.as_deref() == Some(tag) {
            return;
        }
        if status.current_version.is_none() {
            // The version the policy starts from.
            status.current_version = Some(tag.to_string());
            return;
        }
        if !placement.available {
            return;
        }
        status.current_version = Some(tag.to_string());
        push_history(
            status,
            VersionHistory {
                version: tag.to_string(),
                outcome: VersionOutcome::Healthy,
                update_run: None,
                start_time: None,
                end_time: Some(Time(self.o.now)),
                message: Some("rolled out by hand".into()),
            },
        );
        if status.circuit_open || status.rollback_count > 0 {
            status.circuit_open = false;
            status.rollback_count = 0;
            self.condition(
                status,
                (
                    CIRCUIT_OPEN,
                    FALSE,
                    reason::MANUAL_VERSION_SUCCEEDED,
                    format!("version {tag}, set by hand, rolled out everywhere"),
                ),
            );
        }
    }

    fn start_if_eligible(
        &mut self,
        status: &mut AutoUpdatePolicyStatus,
        target: &TargetView,
        placement: &PlacementView,
    ) {
        let Some(version) = status.available_version.clone() else {
            return;
        };
        if status.circuit_open || !eligible(&version, status) {
            return;
        }
        if let Some(frozen) = &placement.frozen {
            self.condition(
                status,
                (
                    UPDATING,
                    FALSE,
                    reason::FROZEN,
                    format!("{version} is available; waiting: {frozen}"),
                ),
            );
            self.sleep_at_most(IN_FLIGHT_RECHECK);
            return;
        }
        if !placement.settled {
            self.condition(
                status,
                (
                    UPDATING,
                    FALSE,
                    reason::WAITING_FOR_PLACEMENT,
                    format!(
                        "{version} is available; waiting until the placement is quiet: {}",
                        placement.unsettled_because
                    ),
                ),
            );
            self.sleep_at_most(IN_FLIGHT_RECHECK);
            return;
        }
        let Some(previous_snapshot_index) = placement.latest_index else {
            self.condition(
                status,
                (
                    UPDATING,
                    FALSE,
                    reason::WAITING_FOR_PLACEMENT,
                    "the placement has no resource snapshot yet".into(),
                ),
            );
            self.sleep_at_most(IN_FLIGHT_RECHECK);
            return;
        };
        let image = match ImageRef::parse(&target.image) {
            Ok(i) => i.with_tag(&version),
            Err(why) => {
                self.not_ready(status, reason::TARGET_NOT_FOUND, why);
                return;
            }
        };
        status.in_flight = Some(InFlightUpdate {
            phase: InFlightPhase::Applying,
            version: version.clone(),
            image: image.clone(),
            previous_image: target.image.clone(),
            previous_snapshot_index,
            previous_version: status.current_version.clone(),
            snapshot_index: None,
            update_run: None,
            rollback_run: None,
            start_time: Time(self.o.now),
        });
        self.condition(
            status,
            (
                UPDATING,
                TRUE,
                reason::APPLYING,
                format!("setting {image} on the target; the placement's new snapshot follows"),
            ),
        );
        self.actions.push(Action::SetImage(image.clone()));
        self.note(
            false,
            reason::UPDATE_STARTED,
            format!(
                "updating {} from {} to {version}",
                self.o.spec.target.name,
                status
                    .current_version
                    .as_deref()
                    .unwrap_or("an unknown version")
            ),
        );
        self.sleep_at_most(IN_FLIGHT_RECHECK);
    }
}

fn ready_message(status: &AutoUpdatePolicyStatus) -> String {
    match (&status.available_version, &status.current_version) {
        (Some(a), _) if status.circuit_open => format!("{a} available; circuit open"),
        (Some(a), Some(c)) if a != c => format!("{a} available (running {c})"),
        (_, Some(c)) => format!("up to date at {c}"),
        _ => "checked; no eligible version".into(),
    }
}

/// The CircuitOpen condition from the status (unless a step set a more specific reason).
fn set_circuit(status: &mut AutoUpdatePolicyStatus, o: &Observed<'_>) {
    let max = o.spec.max_rollbacks.unwrap_or(DEFAULT_MAX_ROLLBACKS);
    let current = status
        .conditions
        .iter()
        .find(|c| c.type_ == CIRCUIT_OPEN)
        .map(|c| (c.status.clone(), c.reason.clone()));
    let (value, reason, message) = if status.circuit_open {
        let keep = current
            .as_ref()
            .filter(|(s, r)| s == TRUE && r == reason::ROLLBACK_FAILED)
            .map(|(_, r)| r.clone());
        let available = status
            .available_version
            .as_deref()
            .map(|v| format!("{v} available; "))
            .unwrap_or_default();
        match keep {
            Some(_) => return,
            None => (
                TRUE,
                reason::TOO_MANY_ROLLBACKS,
                format!(
                    "{available}circuit open after {} consecutive rollbacks (maxRollbacks {max}): nothing is applied until a person resets it (kubectl fleet autoupdate reset {})",
                    status.rollback_count, o.name
                ),
            ),
        }
    } else {
        // A person's reset or own version names itself until the next rollback.
        let said_why = current.as_ref().is_some_and(|(s, r)| {
            s == FALSE && (r == reason::RESET || r == reason::MANUAL_VERSION_SUCCEEDED)
        });
        if said_why && status.rollback_count == 0 {
            return;
        }
        (
            FALSE,
            reason::CIRCUIT_CLOSED,
            format!(
                "{} consecutive rollbacks of at most {max}",
                status.rollback_count
            ),
        )
    };
    set_condition(
        &mut status.conditions,
        NewCondition::new(CIRCUIT_OPEN, value, reason, message, o.generation),
        o.now,
    );
}

fn history(
    flight: &InFlightUpdate,
    outcome: VersionOutcome,
    now: Timestamp,
    message: Option<String>,
) -> VersionHistory {
    VersionHistory {
        version: flight.version.clone(),
        outcome,
        update_run: flight.update_run.clone(),
        start_time: Some(flight.start_time.clone()),
        end_time: Some(Time(now)),
        message,
    }
}

fn push_history(status: &mut AutoUpdatePolicyStatus, entry: VersionHistory) {
    status.history.push(entry);
    cap(&mut status.history);
}

fn cap<T>(list: &mut Vec<T>) {
    if list.len() > MAX_HISTORY {
        let extra = list.len() - MAX_HISTORY;
        list.drain(..extra);
    }
}
