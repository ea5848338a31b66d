//! `PhasedRollout`: rolls one StatefulSet on a member one pod at a time, each step only after the
//! last rolled pod runs the new revision, every pod is available, and a Prometheus check passed
//! `successThreshold` times in a row. The member agent holds the StatefulSet's
//! `updateStrategy.rollingUpdate.partition` and lowers it step by step. Installed on the hub (so
//! it can be placed with the StatefulSet like any object) and on members (where it acts).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
#[allow(unused_imports)]
use kube::core::{ListMerge, Rule};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration;
use crate::metric_check::{DEFAULT_INTERVAL, MetricCheckStatus, Settings};
use crate::strategy::MetricCheckSecretRef;

/// Condition type: the StatefulSet runs its update revision on every pod (True), or why not.
pub const ROLLED_OUT: &str = "RolledOut";

/// Reasons of a PhasedRollout's conditions.
pub mod reason {
    /// RolledOut=True: every pod runs the update revision; the partition holds the next one.
    pub const COMPLETE: &str = "RolloutComplete";
    /// RolledOut=False: rolling, a pod at a time.
    pub const ROLLING: &str = "Rolling";
    /// RolledOut=False: waiting for the rolled pod to run the new revision and every pod to be
    /// available.
    pub const WAITING_FOR_PODS: &str = "WaitingForPods";
    /// RolledOut=False: waiting for the check to pass before the next pod.
    pub const WAITING_FOR_CHECK: &str = "WaitingForCheck";
    /// RolledOut=False: the StatefulSet does not exist.
    pub const TARGET_NOT_FOUND: &str = "TargetNotFound";
    /// RolledOut=False: the StatefulSet's update strategy is OnDelete; nothing is done.
    pub const ON_DELETE: &str = "OnDeleteNotSupported";
    /// RolledOut=Unknown: `standardRollingUpdate` handed the partition back to the StatefulSet
    /// controller.
    pub const HANDED_BACK: &str = "StandardRollingUpdate";
    /// RolledOut=False: the check cannot be used (the message names the field).
    pub const INVALID_CHECK: &str = "InvalidCheck";
}

/// Rolls a StatefulSet one pod at a time, gated by a Prometheus check between pods.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fleethub.dev",
    version = "v1alpha1",
    kind = "PhasedRollout",
    plural = "phasedrollouts",
    shortname = "phased",
    category = "fleethub",
    namespaced,
    status = "PhasedRolloutStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "Rolls a StatefulSet one pod at a time on a member, each step gated by a Prometheus check.",
    printcolumn(name = "Target", type_ = "string", json_path = ".spec.targetRef"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Rolled",
        type_ = "integer",
        json_path = ".status.rolledReplicas"
    ),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.replicas"),
    printcolumn(
        name = "Partition",
        type_ = "integer",
        json_path = ".status.partition",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PhasedRolloutSpec {
    /// The StatefulSet (in the same namespace) to roll. Its update strategy must be
    /// RollingUpdate; the member agent owns its `rollingUpdate.partition`.
    #[schemars(length(min = 1, max = 253))]
    pub target_ref: String,
    /// The Prometheus check between pods: after `initialDelay` from when the last rolled pod is
    /// available, every `interval`, `successThreshold` consecutive checks must return data.
    /// `$statefulset` and `$namespace` in the query are expanded. An unreachable Prometheus or
    /// an empty result holds the rollout. Takes fleethub's names or the reference design's
    /// (`initialDelaySeconds`, `periodSeconds`, `query: {expr, url, secretRef}`), one of each.
    pub check: PhasedRolloutCheck,
    /// Hands the StatefulSet back to its own rolling update: the agent gives up the partition
    /// (it is removed, so every pod rolls at once as usual).
    #[serde(default)]
    pub standard_rolling_update: bool,
}

/// The RE2 pattern of a check's `url`: `http://…` or `https://…`, or `host:port/path` without a
/// scheme (the reference design's form, read as `http://`).
pub const URL_PATTERN: &str =
    r"^(https?://[^\s]+|(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+)(:[0-9]+)?(/[^\s]*)?)$";

/// A phased rollout's check. Each setting has fleethub's name and the reference design's
/// (sts-phased-rollout): `initialDelay` or `initialDelaySeconds`, `interval` or `periodSeconds`,
/// `url` or `query.url`, `secretRef` or `query.secretRef`; the API server refuses both names of
/// one setting where its rules can see them, and the member agent reads them as one through
/// [`PhasedRolloutCheck::effective`] (a conflict it finds holds the rollout, naming the fields).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.initialDelay) && has(self.initialDelaySeconds))").message("initialDelay and initialDelaySeconds are the same setting: set one").field_path(".initialDelaySeconds"))]
#[x_kube(validation = Rule::new("!(has(self.interval) && has(self.periodSeconds))").message("interval and periodSeconds are the same setting: set one").field_path(".periodSeconds"))]
pub struct PhasedRolloutCheck {
    /// The Prometheus base URL (without `/api/v1/query`), e.g.
    /// `http://prometheus.monitoring:9090`; without a scheme (`prometheus.monitoring:9090/prom`)
    /// it is `http://`. Same as `query.url` (the reference design's place for it): set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048), regex(pattern = URL_PATTERN))]
    pub url: Option<String>,
    /// The PromQL instant query: either its text (`query: 'up{job="db"} == 1'`), or, as in the
    /// reference design, an object with `expr` (the text, required), `url` (the Prometheus base
    /// URL, as `check.url`) and `secretRef` (the name of the Secret with the credentials, as
    /// `check.secretRef.name`). A query that returns data passes. `$statefulset` and
    /// `$namespace` are expanded. The API server cannot check this field's shape (text or
    /// object); the member agent does, and holds a rollout whose query it cannot read
    /// (`InvalidCheck`, naming the field).
    #[schemars(schema_with = "crate::schema::any_json")]
    pub query: CheckQuery,
    /// How long to wait after the last rolled pod is available before the first check (default
    /// `0s`). Same as `initialDelaySeconds`: set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 20),
        regex(pattern = crate::duration::DURATION_PATTERN)
    )]
    pub initial_delay: Option<String>,
    /// Same as `initialDelay`, in seconds (the reference design's name): set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub initial_delay_seconds: Option<i32>,
    /// How long between checks (default `30s`). Same as `periodSeconds`: set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 20),
        regex(pattern = crate::duration::DURATION_PATTERN)
    )]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s')").message("interval must be longer than 0s"))]
    pub interval: Option<String>,
    /// Same as `interval`, in seconds (the reference design's name): set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub period_seconds: Option<i32>,
    /// How many consecutive checks must pass before the next pod (default 1); a failing check
    /// starts the count again. (The reference design's name too.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub success_threshold: Option<i32>,
    /// Not used: a held rollout waits until the check passes. Accepted so a check written for a
    /// stage's MetricCheck applies here as is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 20),
        regex(pattern = crate::duration::DURATION_PATTERN)
    )]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s')").message("timeout must be longer than 0s"))]
    pub timeout: Option<String>,
    /// Credentials for a Prometheus that wants them: a Secret in the rollout's own namespace on
    /// the member, with key `token` (sent as `Authorization: Bearer`), or keys `username` and
    /// `password` (basic auth). Read at every check. A Secret that is missing or has neither
    /// fails the check, naming it: the rollout holds. Same as `query.secretRef`: set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<MetricCheckSecretRef>,
}

/// A check's `query`: the PromQL text, or the reference design's object.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(untagged)]
pub enum CheckQuery {
    /// The PromQL text (fleethub's form).
    Text(String),
    /// `{expr, url, secretRef}` (the reference design's form).
    Object(ReferenceQuery),
    /// Anything else: the API server cannot refuse it (the field's schema is any JSON), so it is
    /// kept, for the object to still read, and [`PhasedRolloutCheck::effective`] reports it.
    Unreadable(serde_json::Value),
}

impl Default for CheckQuery {
    fn default() -> Self {
        CheckQuery::Text(String::new())
    }
}

/// The reference design's `query` object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReferenceQuery {
    /// The PromQL text.
    pub expr: String,
    /// The Prometheus base URL, as `check.url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The name of the Secret with the credentials, as `check.secretRef.name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<String>,
}

/// A check as the member agent runs it, whichever names its spec used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectiveCheck {
    /// The Prometheus base URL, with its scheme.
    pub url: String,
    /// The PromQL text, its placeholders not expanded yet.
    pub query: String,
    /// The Secret with the credentials, in the rollout's namespace.
    pub secret_name: Option<String>,
    /// When and how often to check, and how many passes open the next step (no timeout: a
    /// held rollout waits).
    pub settings: Settings,
}

impl PhasedRolloutCheck {
    /// The check's one reading: each setting from whichever of its two names is set. The error
    /// names the fields (`spec.check.…`): both names of one setting, a missing URL or query, a
    /// query that is neither text nor the reference's object, a duration that does not parse.
    pub fn effective(&self) -> Result<EffectiveCheck, String> {
        let (query, query_url, query_secret) = match &self.query {
            CheckQuery::Text(text) => (text.clone(), None, None),
            CheckQuery::Object(q) => (q.expr.clone(), q.url.clone(), q.secret_ref.clone()),
            CheckQuery::Unreadable(value) => {
                let why = serde_json::from_value::<ReferenceQuery>(value.clone())
                    .err()
                    .map_or_else(String::new, |e| format!(" ({e})"));
                return Err(format!(
                    "spec.check.query must be the PromQL text or an object with expr, url and secretRef{why}"
                ));
            }
        };
        if query.trim().is_empty() {
            let field = match self.query {
                CheckQuery::Object(_) => "spec.check.query.expr",
                CheckQuery::Text(_) | CheckQuery::Unreadable(_) => "spec.check.query",
            };
            return Err(format!("{field} is empty: write the PromQL query"));
        }
        let url = match (&self.url, query_url) {
            (Some(_), Some(_)) => return Err(both("url", "query.url")),
            (Some(url), None) => prometheus_url(url).map_err(|e| format!("spec.check.url {e}"))?,
            (None, Some(url)) => {
                prometheus_url(&url).map_err(|e| format!("spec.check.query.url {e}"))?
            }
            (None, None) => {
                return Err(
                    "spec.check.url (or spec.check.query.url) is required: the Prometheus base URL"
                        .to_string(),
                );
            }
        };
        let secret_name = match (&self.secret_ref, query_secret) {
            (Some(_), Some(_)) => return Err(both("secretRef", "query.secretRef")),
            (Some(r), None) => Some(r.name.clone()),
            (None, Some(name)) if name.is_empty() => {
                return Err("spec.check.query.secretRef is empty: name the Secret".to_string());
            }
            (None, name) => name,
        };
        let read = |field: &str, v: &Option<String>| {
            v.as_deref()
                .map(duration::parse)
                .transpose()
                .map_err(|e| format!("spec.check.{field}: {e}"))
        };
        // Negative seconds never pass admission; read as none.
        let seconds = |s: i32| std::time::Duration::from_secs(u64::try_from(s).unwrap_or(0));
        let initial_delay = match (
            read("initialDelay", &self.initial_delay)?,
            self.initial_delay_seconds,
        ) {
            (Some(_), Some(_)) => return Err(both("initialDelay", "initialDelaySeconds")),
            (Some(d), None) => d,
            (None, Some(s)) => seconds(s),
            (None, None) => std::time::Duration::ZERO,
        };
        let interval = match (read("interval", &self.interval)?, self.period_seconds) {
            (Some(_), Some(_)) => return Err(both("interval", "periodSeconds")),
            (Some(d), None) => d,
            (None, Some(s)) => seconds(s),
            (None, None) => DEFAULT_INTERVAL,
        };
        if interval.is_zero() {
            return Err("spec.check.interval (periodSeconds) must be longer than 0s".to_string());
        }
        Ok(EffectiveCheck {
            url,
            query,
            secret_name,
            settings: Settings {
                initial_delay,
                interval,
                success_threshold: self.success_threshold.unwrap_or(1).max(1),
                timeout: None,
            },
        })
    }
}

/// The error of a setting given under both its names.
fn both(ours: &str, reference: &str) -> String {
    format!(
        "spec.check.{ours} and spec.check.{reference} are the same setting (fleethub's name and the reference design's): set one"
    )
}

/// A check's Prometheus URL as the agent calls it: `http://…` and `https://…` as given;
/// without a scheme (`host:port/path`, the reference design's form) it is `http://`. The error
/// (for a field name to precede) says what is wrong.
pub fn prometheus_url(given: &str) -> Result<String, String> {
    let given = given.trim();
    if given.is_empty() {
        return Err("is empty".to_string());
    }
    if given.chars().any(char::is_whitespace) {
        return Err(format!("{given:?} holds a space"));
    }
    let scheme = given.split_once("://").map(|(s, _)| s).filter(|s| {
        s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    });
    match scheme {
        Some(s) if s.eq_ignore_ascii_case("http") || s.eq_ignore_ascii_case("https") => {
            Ok(given.to_string())
        }
        Some(s) => Err(format!(
            "{given:?}: scheme {s}:// is not supported; use http://, https://, or host:port/path (http)"
        )),
        None => Ok(format!("http://{given}")),
    }
}

/// Where a phased rollout is.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PhasedRolloutPhase {
    /// Every pod runs the update revision; the partition is held at `replicas`.
    #[default]
    Idle,
    /// A new revision is rolling a pod at a time.
    Rolling,
    /// The StatefulSet cannot be rolled this way (OnDelete, missing, an invalid check).
    Refused,
    /// `standardRollingUpdate` is set; the StatefulSet rolls itself.
    HandedBack,
}

/// Observed state of a phased rollout. The check's count lives here, so a restarted agent
/// continues it instead of passing early.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PhasedRolloutStatus {
    /// `RolledOut`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The generation of the spec last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Idle`, `Rolling`, `Refused`, `HandedBack`.
    #[serde(default)]
    pub phase: PhasedRolloutPhase,
    /// The StatefulSet's update revision being rolled (or rolled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_revision: Option<String>,
    /// The StatefulSet's replicas.
    #[serde(default)]
    pub replicas: i32,
    /// Pods running the update revision.
    #[serde(default)]
    pub rolled_replicas: i32,
    /// The partition the agent set: pods with an ordinal at or above it run the update
    /// revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<i32>,
    /// The check before the next pod (reset after each step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<MetricCheckStatus>,
}

#[cfg(test)]
#[path = "phased_rollout_tests.rs"]
mod tests;
