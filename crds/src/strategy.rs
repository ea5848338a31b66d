//! `StagedUpdateStrategy`: a reusable, ordered list of stages.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
#[allow(unused_imports)]
use kube::core::{ListMerge, Rule};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema::int_or_percent;

/// The most stages a strategy may have.
pub const MAX_STAGES: usize = 31;

/// A reusable, ordered list of stages that an UpdateRun walks: each stage selects member clusters
/// by label, updates them in the order of an integer sorting label (else by name), at most
/// maxConcurrency at a time, and is gated by tasks before it starts and after its clusters are done.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fleethub.dev",
    version = "v1alpha1",
    kind = "StagedUpdateStrategy",
    plural = "stagedupdatestrategies",
    shortname = "sus",
    shortname = "strategy",
    category = "fleethub",
    status = "StagedUpdateStrategyStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "A reusable, ordered list of stages that UpdateRuns walk when rolling a Placement out.",
    printcolumn(name = "Stages", type_ = "string", json_path = ".spec.stages[*].name"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct StagedUpdateStrategySpec {
    /// The stages, walked in this order. At most 31; names must be unique.
    #[schemars(length(min = 1, max = 31))]
    #[x_kube(validation = Rule::new("self.all(s, self.exists_one(t, t.name == s.name))").message("stage names must be unique"))]
    pub stages: Vec<StageConfig>,
    /// What a run of this strategy does when it fails (a cluster fails or stays regressed past
    /// its stage's maxFailedClusters, or a gate can never pass), unless the run sets its own
    /// `onFailure`: `Hold` (default) stops and waits for a person, and the run resumes by itself
    /// if the cluster recovers; `Rollback` ends the run failed and rolls every cluster it
    /// updated back to the snapshot index they ran before, newest first, through one rollback
    /// UpdateRun it creates and names in `status.rollbackRun`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<OnFailure>,
    /// How long a run keeps watching every cluster after its last stage before it succeeds
    /// (e.g. `10m`), unless the run sets its own: a regression meanwhile holds the run (or,
    /// past its healthTimeout, fails it and, with `onFailure: Rollback`, rolls it back). An
    /// AutoUpdatePolicy marks a version healthy only after it. At most a week.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 20),
        regex(pattern = crate::duration::DURATION_PATTERN)
    )]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s') && duration(self) <= duration('168h')").message("bake must be longer than 0s and at most 168h (a week)"))]
    pub bake: Option<String>,
    /// When any stage of a run of this strategy may start, beside each stage's own windows.
    #[serde(flatten)]
    pub windows: Windows,
}

/// When a stage may start (after its before-stage tasks): only inside one of its allowed
/// windows, where any are given, and outside every blocked one. A run that reaches it otherwise
/// waits, naming the next opening; a stage already started finishes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Windows {
    /// Only inside one of these (unset: at any time).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub allowed_windows: Vec<TimeWindow>,
    /// Never inside one of these: a run that reaches the stage meanwhile waits for its end.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub blocked_windows: Vec<TimeWindow>,
}

/// A recurring stretch of time: it opens at each firing of `schedule` and lasts `duration`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TimeWindow {
    /// When it opens, as a cron expression: 5 fields (minute hour day-of-month month
    /// day-of-week), e.g. `0 9 * * 1-5` for 09:00 on weekdays, or 6 with seconds first. An
    /// expression that does not parse fails the run at initialization, naming it.
    #[schemars(length(min = 9, max = 100), regex(pattern = r"^\S+(\s+\S+){4,5}$"))]
    pub schedule: String,
    /// How long each opening lasts, e.g. `8h`; at most 168h (a week).
    #[schemars(
        length(min = 2, max = 20),
        regex(pattern = crate::duration::DURATION_PATTERN)
    )]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s') && duration(self) <= duration('168h')").message("duration must be longer than 0s and at most 168h (a week)"))]
    pub duration: String,
    /// The IANA time zone `schedule` is read in, e.g. `Europe/Berlin` (default UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: Option<String>,
}

/// What a run does when it fails.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnFailure {
    /// Stop where it is and wait for a person (the run resumes by itself if the failed cluster
    /// recovers).
    #[default]
    Hold,
    /// End the run failed and roll the clusters it updated back, newest first, through a
    /// rollback UpdateRun.
    Rollback,
}

/// One stage of a strategy.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.afterStageTasks) || self.afterStageTasks.all(t, self.afterStageTasks.exists_one(u, u.type == t.type))").message("afterStageTasks may hold at most one task of each type"))]
#[x_kube(validation = Rule::new("!has(self.beforeStageTasks) || self.beforeStageTasks.all(t, self.beforeStageTasks.exists_one(u, u.type == t.type))").message("beforeStageTasks may hold at most one task of each type"))]
pub struct StageConfig {
    /// The stage's name: a DNS label (lower-case letters, digits, '-'), unique in the strategy.
    /// ApprovalRequests are named `<run>-<stage>`.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,
    /// Selects the member clusters of this stage by their labels. Every cluster a placement
    /// selects must match exactly one stage. Without a labelSelector the stage selects no
    /// cluster (a stage of gates only, as in KubeFleet); `labelSelector: {}` selects every
    /// cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// A label whose integer value orders the clusters within the stage (lowest first; ties and
    /// clusters without the label by name). Without it, clusters go in name order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 317),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
        )
    )]
    pub sorting_label_key: Option<String>,
    /// How many of the stage's clusters update at once: an integer ≥ 1 or a percentage from 1%
    /// to 100% of the stage's clusters (rounded down, at least 1). Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_percent")]
    #[x_kube(validation = Rule::new("type(self) != int || self >= 1").message("maxConcurrency must be an integer of at least 1 or a percentage from 1% to 100%"))]
    pub max_concurrency: Option<IntOrString>,
    /// How many of the stage's clusters may fail (or be skipped because their member is not
    /// healthy when their turn comes) while the stage goes on; default 0: the first failure
    /// stops the run. A cluster that fails within the budget is left as it is and reported;
    /// past the budget the run stops at the stage and says which clusters failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub max_failed_clusters: Option<i32>,
    /// Tasks that must all pass before the stage's first cluster starts: `Approval`
    /// (ApprovalRequest `<run>-before-<stage>`) and `MetricCheck`, at most one of each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2))]
    #[x_kube(validation = Rule::new("self.all(t, t.type != 'TimedWait')").message("beforeStageTasks may hold Approval and MetricCheck tasks only (a soak belongs after a stage)"))]
    pub before_stage_tasks: Vec<StageTask>,
    /// Tasks that must all pass after the stage's clusters are done and before the next stage
    /// starts: `TimedWait`, `Approval` (ApprovalRequest `<run>-<stage>`) and `MetricCheck`, at
    /// most one of each type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 3))]
    pub after_stage_tasks: Vec<StageTask>,
    /// Background analysis: a Prometheus query checked every `interval` (after
    /// `initialDelay`) for as long as the stage runs, from its first cluster's start to the end
    /// of its after-stage tasks (its soak included). `failureLimit` consecutive checks without
    /// data fail the stage at once, even mid-stage, and the run with it (reason
    /// `AnalysisFailed`; `onFailure` says what then happens). An unreachable Prometheus is
    /// recorded and counts neither way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<StageAnalysis>,
    /// When the stage may start, beside its strategy's windows.
    #[serde(flatten)]
    pub windows: Windows,
}

/// A stage's background analysis.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StageAnalysis {
    /// The query, as a MetricCheck task's (`url`, `query` with `$clusters`, `$stage` and
    /// `$run`, `initialDelay`, `interval`, `secretRef`; `successThreshold` and `timeout` do not
    /// apply).
    pub metric_check: MetricCheck,
    /// How many consecutive checks without data fail the stage (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub failure_limit: Option<i32>,
}

/// The kinds of stage task (a gate before or after a stage).
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
pub enum StageTaskType {
    /// After a stage only: wait for waitTime, measured from when the stage's clusters finished.
    TimedWait,
    /// Wait for a person to approve the ApprovalRequest `<run>-<stage>` (after the stage) or
    /// `<run>-before-<stage>` (before it).
    Approval,
    /// Wait until a Prometheus query returns data for successThreshold consecutive checks.
    MetricCheck,
}

/// A gate before a stage or between a stage and the next.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.type == 'TimedWait' ? has(self.waitTime) : !has(self.waitTime)").message("waitTime is required for a TimedWait task and forbidden for an Approval task or a MetricCheck task"))]
#[x_kube(validation = Rule::new("self.type == 'MetricCheck' ? has(self.metricCheck) : !has(self.metricCheck)").message("metricCheck is required for a MetricCheck task and forbidden for other task types"))]
#[x_kube(validation = Rule::new("self.type == 'Approval' || !has(self.approvalPolicy)").message("approvalPolicy is allowed only on an Approval task"))]
pub struct StageTask {
    /// `TimedWait`, `Approval` or `MetricCheck`.
    #[serde(rename = "type")]
    pub type_: StageTaskType,
    /// For TimedWait: how long to wait, like `30s`, `5m` or `1h30m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 20),
        regex(pattern = crate::duration::DURATION_PATTERN)
    )]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s')").message("waitTime must be longer than 0s"))]
    pub wait_time: Option<String>,
    /// For MetricCheck: the Prometheus query and how often it must pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric_check: Option<MetricCheck>,
    /// For Approval: who may approve and how many must (unset: one approval by anyone the
    /// hub's RBAC lets update the request's status, as `kubectl patch … --subresource=status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_policy: Option<crate::approval::ApprovalPolicy>,
}

/// A Prometheus query gating a stage, with alerting semantics: a query that returns data
/// passes, an empty result fails, an error never passes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MetricCheck {
    /// The Prometheus base URL, e.g. `http://prometheus.monitoring:9090`.
    #[schemars(length(min = 8, max = 2048), regex(pattern = r"^https?://[^\s]+$"))]
    pub url: String,
    /// A PromQL instant query, e.g. `sum(rate(http_errors_total{cluster=~"$clusters"}[5m])) <
    /// 0.01`. `$clusters` becomes a regex matching the stage's cluster names (`a|b|c`), `$stage`
    /// the stage's name and `$run` the UpdateRun's. A query that does not parse fails the run
    /// at initialization.
    #[schemars(length(min = 1, max = 4096))]
    pub query: String,
    /// How long to wait after the gate is reached before the first check (default `0s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 20),
        regex(pattern = crate::duration::DURATION_PATTERN)
    )]
    pub initial_delay: Option<String>,
    /// How long between checks (default `30s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 20),
        regex(pattern = crate::duration::DURATION_PATTERN)
    )]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s')").message("interval must be longer than 0s"))]
    pub interval: Option<String>,
    /// How many consecutive checks must pass (default 1); a failing check starts the count
    /// again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub success_threshold: Option<i32>,
    /// How long the gate may wait from when it was reached; still not passed then, the run
    /// fails (an auto-update then rolls back). Unset: it waits until it passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 20),
        regex(pattern = crate::duration::DURATION_PATTERN)
    )]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s')").message("timeout must be longer than 0s"))]
    pub timeout: Option<String>,
    /// Credentials for a Prometheus that wants them: a Secret in the hub's own namespace
    /// (`fleethub-system` unless the hub runs elsewhere; its `--namespace`), since a run has no
    /// namespace of its own. The hub reads it (get, nothing else) at every check, so a rotated
    /// credential is used from the next check on. A Secret that is missing, unreadable, or has
    /// neither key set fails that check with a message naming the Secret: the gate waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<MetricCheckSecretRef>,
}

/// The Secret holding a metric check's Prometheus credentials: key `token` (sent as
/// `Authorization: Bearer <token>`), or keys `username` and `password` (basic auth).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MetricCheckSecretRef {
    /// The Secret's name, in the hub's namespace.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
}

/// Observed state of a strategy (reserved; strategies are plain configuration).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StagedUpdateStrategyStatus {
    /// Conditions about the strategy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}
