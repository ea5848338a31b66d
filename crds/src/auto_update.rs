//! `AutoUpdatePolicy`: a workload that follows its registry. On a cron schedule the hub lists the
//! repository's tags, picks the highest semver version the constraint allows, puts it on the hub
//! object and rolls it out with an UpdateRun through the staged strategy; a run that fails is
//! rolled back everywhere it reached, and repeated rollbacks open a circuit breaker.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
#[allow(unused_imports)]
use kube::core::{ListMerge, Rule};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Condition type: the policy can be acted on (its schedule, constraint, target and registry
/// are usable). False with a reason naming the field or the cause.
pub const READY: &str = "Ready";
/// Condition type: a version is being rolled out or rolled back.
pub const UPDATING: &str = "Updating";
/// Condition type: too many consecutive rollbacks; nothing is applied until a person resets it.
pub const CIRCUIT_OPEN: &str = "CircuitOpen";

/// Annotation a person sets (any new value, e.g. a timestamp) to ask for a check now.
pub const CHECK_REQUESTED_ANNOTATION: &str = "fleethub.dev/check-requested";
/// Annotation a person sets (any new value) to close an open circuit.
pub const RESET_REQUESTED_ANNOTATION: &str = "fleethub.dev/reset-requested";
/// Annotation a person sets to forget one failed version, so it may be picked again:
/// `VERSION@NONCE` (a new nonce for each request, e.g. a timestamp).
pub const RETRY_REQUESTED_ANNOTATION: &str = "fleethub.dev/retry-requested";
/// How long a new image may wait on the target for its placement's snapshot before the step
/// fails (the placement does not select the target, or cannot snapshot it).
pub const APPLYING_DEADLINE_SECONDS: i64 = 600;
/// Label on the UpdateRuns a policy creates, naming the policy.
pub const POLICY_LABEL: &str = "fleethub.dev/auto-update-policy";
/// How many history entries and failed versions the status keeps (oldest dropped).
pub const MAX_HISTORY: usize = 50;
/// Default `maxRollbacks`.
pub const DEFAULT_MAX_ROLLBACKS: i32 = 3;

/// Reasons of a policy's conditions and events.
pub mod reason {
    /// Ready=True.
    pub const READY: &str = "PolicyReady";
    /// Ready=False: `spec.schedule` or `spec.timeZone` cannot be used.
    pub const INVALID_SCHEDULE: &str = "InvalidSchedule";
    /// Ready=False: `spec.versionConstraint` is not a semver requirement.
    pub const INVALID_VERSION_CONSTRAINT: &str = "InvalidVersionConstraint";
    /// Ready=False: the target object or container does not exist.
    pub const TARGET_NOT_FOUND: &str = "TargetNotFound";
    /// Ready=False: the target container's image is pinned by digest; it is never updated.
    pub const DIGEST_PINNED: &str = "DigestPinned";
    /// Ready=False: the Placement does not exist or is not External.
    pub const PLACEMENT_NOT_USABLE: &str = "PlacementNotUsable";
    /// Ready=False: listing the repository's tags failed (the message says why).
    pub const REGISTRY_ERROR: &str = "RegistryError";
    /// Ready=False: `spec.secretRef` cannot be read.
    pub const SECRET_ERROR: &str = "SecretError";
    /// Ready=True: `spec.suspend` is set; nothing is checked or applied.
    pub const SUSPENDED: &str = "Suspended";
    /// Updating=False: nothing in flight.
    pub const IDLE: &str = "Idle";
    /// Updating=True: the new image is on the hub; waiting for the placement's snapshot.
    pub const APPLYING: &str = "Applying";
    /// Updating=True: the UpdateRun of the new version is rolling.
    pub const ROLLING_OUT: &str = "RollingOut";
    /// Updating=True: the previous image is back; the rollback run is rolling.
    pub const ROLLING_BACK: &str = "RollingBack";
    /// Updating=False: another change of the placement is rolling; the policy waits for it.
    pub const WAITING_FOR_PLACEMENT: &str = "WaitingForPlacement";
    /// Updating=False: a Freeze holds the placement; a newer version waits until it lifts.
    pub const FROZEN: &str = "Frozen";
    /// CircuitOpen=False.
    pub const CIRCUIT_CLOSED: &str = "CircuitClosed";
    /// CircuitOpen=True: maxRollbacks consecutive rollbacks.
    pub const TOO_MANY_ROLLBACKS: &str = "TooManyRollbacks";
    /// CircuitOpen=True: a rollback run itself failed.
    pub const ROLLBACK_FAILED: &str = "RollbackFailed";
    /// CircuitOpen=False after a person's reset.
    pub const RESET: &str = "CircuitReset";
    /// Event: a person asked to try a failed version again.
    pub const RETRY_ALLOWED: &str = "RetryAllowed";
    /// Updating=False and event: the placement did not snapshot the new image in time.
    pub const NOT_SNAPSHOTTED: &str = "NotSnapshotted";
    /// CircuitOpen=False: a version a person set by hand rolled out everywhere.
    pub const MANUAL_VERSION_SUCCEEDED: &str = "ManualVersionSucceeded";
    /// Event: a version was found and its rollout started.
    pub const UPDATE_STARTED: &str = "UpdateStarted";
    /// Event: a version rolled out everywhere.
    pub const UPDATE_SUCCEEDED: &str = "UpdateSucceeded";
    /// Event (Warning): a version's run failed; it is being rolled back.
    pub const ROLLED_BACK: &str = "RolledBack";
}

/// Follows a container image's registry: new semver versions are rolled out through a staged
/// strategy by themselves, failing ones are rolled back and never retried, and repeated
/// rollbacks open a circuit breaker.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fleethub.dev",
    version = "v1alpha1",
    kind = "AutoUpdatePolicy",
    plural = "autoupdatepolicies",
    shortname = "aup",
    category = "fleethub",
    status = "AutoUpdatePolicyStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "Rolls a workload's new image versions out from its registry through a staged strategy, with rollback and a circuit breaker.",
    validation = Rule::new("self.metadata.name.size() <= 40 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("metadata.name must be a DNS label of at most 40 characters (its UpdateRuns are named <policy>-<version>)"),
    printcolumn(name = "Placement", type_ = "string", json_path = ".spec.placementName"),
    printcolumn(name = "Current", type_ = "string", json_path = ".status.currentVersion"),
    printcolumn(name = "Available", type_ = "string", json_path = ".status.availableVersion"),
    printcolumn(name = "Updating", type_ = "string", json_path = ".status.conditions[?(@.type==\"Updating\")].reason"),
    printcolumn(name = "Circuit-Open", type_ = "string", json_path = ".status.conditions[?(@.type==\"CircuitOpen\")].status"),
    printcolumn(name = "Next-Check", type_ = "date", json_path = ".status.nextCheckTime", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct AutoUpdatePolicySpec {
    /// The Placement that places the target on the members. Its strategy type must be External
    /// (only UpdateRuns move it).
    #[schemars(length(min = 1, max = 63))]
    pub placement_name: String,
    /// The hub object whose container image is updated; the placement must select it.
    pub target: UpdateTarget,
    /// The repository to watch, e.g. `registry.example.com:5000/team/web` (no tag). Default: the
    /// repository of the target container's current image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 512),
        regex(pattern = r"^[^\s:@]+(:[0-9]+)?(/[^\s:@]+)*$")
    )]
    pub repository: Option<String>,
    /// When to check the registry: a cron expression of 5 fields (minute hour day month weekday)
    /// or 6 with seconds first, e.g. `0 */10 * * * *` (every ten minutes).
    #[schemars(
        length(min = 9, max = 200),
        regex(pattern = r"^\s*\S+(\s+\S+){4,5}\s*$")
    )]
    pub schedule: String,
    /// The IANA time zone the schedule is read in, e.g. `Europe/Berlin` (default UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: Option<String>,
    /// Which versions may be rolled out: a semver requirement, e.g. `>=1.0.0, <2`. Tags that
    /// are not semver versions (`latest`, `sha-…`) are never picked; pre-releases only when the
    /// requirement names a pre-release of the same version.
    #[schemars(length(min = 1, max = 256))]
    pub version_constraint: String,
    /// The StagedUpdateStrategy new versions roll out with; every gate of it applies.
    #[schemars(length(min = 1, max = 253))]
    pub staged_rollout_strategy_name: String,
    /// Deprecated and ignored: a failed version's run rolls itself back (`onFailure: Rollback`),
    /// the clusters it updated newest first, a quarter at a time, without gates (clusters it did
    /// not reach already run the previous version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub rollback_strategy_name: Option<String>,
    /// How long each cluster may take to become available with a new version before the run
    /// fails and the version is rolled back (e.g. `5m`; default 5m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 20),
        regex(pattern = crate::duration::DURATION_PATTERN)
    )]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s')").message("healthTimeout must be longer than 0s"))]
    pub health_timeout: Option<String>,
    /// How many consecutive rollbacks open the circuit (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub max_rollbacks: Option<i32>,
    /// Stops checking and updating; a rollout or rollback in flight still finishes.
    #[serde(default)]
    pub suspend: bool,
    /// A Secret in the hub's own namespace (`fleethub-system` unless the hub runs elsewhere)
    /// with registry credentials: `token` (a bearer token), or `username` and `password`, or a
    /// `.dockerconfigjson` entry for the registry. Default: anonymous.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
}

/// The hub object and container an AutoUpdatePolicy updates.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UpdateTarget {
    /// `Deployment`, `StatefulSet` or `DaemonSet` (group `apps`).
    pub kind: TargetKind,
    /// The object's namespace.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// The object's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The container (in `spec.template.spec.containers`) whose image is updated.
    #[schemars(length(min = 1, max = 63))]
    pub container: String,
}

/// The workload kinds an AutoUpdatePolicy can update.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TargetKind {
    /// `apps/v1` Deployment.
    #[default]
    Deployment,
    /// `apps/v1` StatefulSet.
    StatefulSet,
    /// `apps/v1` DaemonSet.
    DaemonSet,
}

impl TargetKind {
    /// The kind's name, as in `kind:`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deployment => "Deployment",
            Self::StatefulSet => "StatefulSet",
            Self::DaemonSet => "DaemonSet",
        }
    }
}

/// A Secret by name.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// What the policy saw and did. Everything it decides on is here, so a restarted hub resumes an
/// update, a rollback or a count exactly where it was.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AutoUpdatePolicyStatus {
    /// `Ready`, `Updating`, `CircuitOpen`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The generation of the spec last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The version running everywhere the placement reaches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<String>,
    /// The highest version the last check found eligible (also when not applied: circuit open,
    /// an update in flight).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_version: Option<String>,
    /// When the registry was last checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_check_time: Option<Time>,
    /// When the next scheduled check is due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_check_time: Option<Time>,
    /// Versions rolled back; never picked again (the newest 50).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_versions: Vec<String>,
    /// Consecutive rollbacks; reset by a version that succeeds or by a person.
    #[serde(default)]
    pub rollback_count: i32,
    /// Whether the circuit is open: checks go on, nothing is applied.
    #[serde(default)]
    pub circuit_open: bool,
    /// The update or rollback in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<InFlightUpdate>,
    /// The last check request (annotation value) acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_check_request: Option<String>,
    /// The last reset request (annotation value) acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_reset_request: Option<String>,
    /// The last retry request (annotation value) acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_retry_request: Option<String>,
    /// The versions rolled out, newest last (the newest 50).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<VersionHistory>,
}

/// An update or a rollback in flight. Written before each step it describes, so a restart
/// repeats a step (each is idempotent) instead of skipping it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InFlightUpdate {
    /// `Applying`, `RollingOut` or `RollingBack`.
    pub phase: InFlightPhase,
    /// The version being rolled out.
    pub version: String,
    /// The image put on the target.
    pub image: String,
    /// The image the target had before, put back by a rollback.
    pub previous_image: String,
    /// The placement's newest snapshot index before the image changed.
    pub previous_snapshot_index: i64,
    /// The version running before (to report after a rollback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_version: Option<String>,
    /// The snapshot index holding the new image, once the placement cut it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_index: Option<i64>,
    /// The UpdateRun rolling the version out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_run: Option<String>,
    /// The UpdateRun rolling it back: the rollback run the failed run created (its
    /// `status.rollbackRun`), returning the clusters it updated to the snapshot they ran
    /// before, newest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_run: Option<String>,
    /// When the update started.
    pub start_time: Time,
}

/// The steps of an update in flight.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InFlightPhase {
    /// The new image is being put on the target; its snapshot and run follow.
    #[default]
    Applying,
    /// The version's UpdateRun is rolling.
    RollingOut,
    /// The run failed; the previous image is back and the rollback run is rolling.
    RollingBack,
}

/// One version's rollout.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VersionHistory {
    /// The version.
    pub version: String,
    /// `Healthy`, `RolledBack` or `Superseded`.
    pub outcome: VersionOutcome,
    /// The UpdateRun that rolled it out (none for a version a person rolled out by hand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_run: Option<String>,
    /// When its rollout started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    /// Why it ended so (for RolledBack: the failed run's reason and message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// How a version's rollout ended.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VersionOutcome {
    /// It rolled out everywhere.
    #[default]
    Healthy,
    /// Its run failed; the previous version was put back.
    RolledBack,
    /// Another run of the placement took over before it finished.
    Superseded,
    /// Its image was put on the target, but the placement cut no snapshot of it in time; the
    /// previous image was put back.
    NotSnapshotted,
    /// A failed version a person asked to try again (`kubectl fleet autoupdate retry`): no
    /// longer skipped.
    RetryAllowed,
}
