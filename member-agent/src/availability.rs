//! When an applied object counts as available, and what the Work's `Available` condition says.
//!
//! A workload is available only when it runs the new template and is ready (the rule of
//! `reference/auto-update-circuit-breaker.txt`, made stricter: no old replicas left either):
//! - Deployment: its controller observed the current generation; updated, ready and available
//!   replicas all equal `spec.replicas` (default 1); and no old replicas remain
//!   (`status.replicas == spec.replicas`);
//! - StatefulSet: current generation observed, `currentRevision == updateRevision`, every replica
//!   ready and available (ready for `minReadySeconds`);
//! - PhasedRollout: its `RolledOut` condition is True for its current generation (until then
//!   its message says how many pods rolled and where the check is);
//! - DaemonSet: current generation observed; updated and available pods equal the desired count;
//! - Job: condition `Complete=True`.
//!
//! Every other kind (ConfigMap, Secret, Service, Namespace, RBAC, …) is available once applied.
//! Pure functions over the objects as JSON, so the API server's answer is used as is.
//!
//! A workload that is not available says why its pods are not ([`pod_problems`]): the container,
//! its image and the state it is stuck in (`ErrImagePull`, `ImagePullBackOff`,
//! `CrashLoopBackOff`, …), so a run that fails on it names the image that broke it.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use fleethub_crds::conditions;
use fleethub_crds::work::reason::{HEALTH_TIMEOUT, WORKLOADS_AVAILABLE, WORKLOADS_NOT_READY};

/// How many not-ready objects the Work's condition names before summarizing the rest.
const NAMED_IN_MESSAGE: usize = 3;

/// Whether one applied object is available.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Available.
    Ready,
    /// Not yet: what is missing, naming the object (e.g. `deployment app/web: 1/3 replicas ready`).
    NotReady(String),
}

/// The readiness of `object` (a full object as the API server returns it).
pub fn readiness(object: &Value) -> Readiness {
    let group = object["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/'))
        .map_or("", |(g, _)| g);
    let kind = object["kind"].as_str().unwrap_or_default();
    let check = match (group, kind) {
        ("apps", "Deployment") => deployment,
        ("apps", "StatefulSet") => stateful_set,
        ("apps", "DaemonSet") => daemon_set,
        ("batch", "Job") => job,
        (fleethub_crds::GROUP, "PhasedRollout") => phased_rollout,
        _ => return Readiness::Ready,
    };
    let label = label(object);
    match check(object) {
        None => Readiness::Ready,
        Some(missing) => Readiness::NotReady(format!("{label}: {missing}")),
    }
}

/// Whether `object` runs pods selected by `spec.selector` (whose states [`pod_problems`] reads).
pub fn pod_selector(object: &Value) -> Option<String> {
    let group = object["apiVersion"].as_str()?.split_once('/')?.0;
    let kind = object["kind"].as_str()?;
    if group != "apps" || !matches!(kind, "Deployment" | "StatefulSet" | "DaemonSet") {
        return None;
    }
    let labels = object["spec"]["selector"]["matchLabels"].as_object()?;
    let selector = labels
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join(",");
    (!selector.is_empty()).then_some(selector)
}

/// Container states that keep a pod from ever becoming ready without a change (`reason` of a
/// waiting container), as the kubelet reports them.
const STUCK_REASONS: [&str; 7] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// How long a container restart counts against its workload: a crash-looping container, whose
/// kubelet back-off grows to 5 minutes, never looks healthy between two crashes; a workload
/// whose containers last restarted longer ago than this is healthy again.
pub const RECENT_RESTARTS: Duration = Duration::from_secs(600);

/// The containers of `pods` that restarted after `since` (the update was applied, or
/// [`RECENT_RESTARTS`] ago if later), one sentence per container and reason: `container web
/// (image reg/demo:1.3.0) restarted 2 times since the update in 1 pod: last it exited with code
/// 1 (Error)`. A ready workload whose pods crash and come back is not healthy.
pub fn restarts_since(pods: &[Value], since: Timestamp) -> Vec<String> {
    // (container, image, reason) → (restarts, pods, exit code), in the order first seen.
    type Restarts = ((String, String, String), (i64, usize, Option<i64>));
    let mut seen: Vec<Restarts> = Vec::new();
    for pod in pods {
        if pod["metadata"]["deletionTimestamp"].is_string() {
            continue;
        }
        let statuses = pod["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten();
        for c in statuses {
            let restarts = c["restartCount"].as_i64().unwrap_or(0);
            let last = &c["lastState"]["terminated"];
            let finished = last["finishedAt"]
                .as_str()
                .and_then(|t| t.parse::<Timestamp>().ok());
            if restarts == 0 || finished.is_none_or(|f| f < since) {
                continue;
            }
            let name = c["name"].as_str().unwrap_or("?").to_string();
            let image = c["image"].as_str().unwrap_or("?").to_string();
            let reason = last["reason"].as_str().unwrap_or("Error").to_string();
            let code = last["exitCode"].as_i64();
            match seen.iter_mut().find(|(k, _)| k.0 == name && k.2 == reason) {
                Some((_, (r, n, _))) => {
                    *r += restarts;
                    *n += 1;
                }
                None => seen.push(((name, image, reason), (restarts, 1, code))),
            }
        }
    }
    seen.into_iter()
        .map(|((name, image, reason), (restarts, pods, code))| {
            let times = if restarts == 1 { "once".to_string() } else { format!("{restarts} times") };
            let pods = if pods == 1 { "1 pod".to_string() } else { format!("{pods} pods") };
            let exit = code.map_or(String::new(), |c| format!("exited with code {c} "));
            format!(
                "container {name} (image {image}) restarted {times} since the update in {pods}: last it {exit}({reason})"
            )
        })
        .collect()
}

/// `kind namespace/name` of an object, as readiness messages name it.
pub fn label(object: &Value) -> String {
    let kind = object["kind"].as_str().unwrap_or_default();
    format!("{} {}", kind.to_lowercase(), display_name(object))
}

/// How long a pod problem's message may be in the Work's condition.
const PROBLEM_MESSAGE_CHARS: usize = 300;

/// Why the `pods` of a workload are not ready, one sentence per distinct problem:
/// `container web (image reg/demo:9.9.9): ImagePullBackOff in 2 pods: Back-off pulling image …`.
/// Unschedulable pods say so with the scheduler's reason. Empty when no pod is stuck.
pub fn pod_problems(pods: &[Value]) -> Vec<String> {
    // (what, detail) → pods, in the order first seen.
    let mut seen: Vec<((String, String), usize)> = Vec::new();
    let mut note = |what: String, detail: String| match seen.iter_mut().find(|(k, _)| k.0 == what) {
        Some((_, n)) => *n += 1,
        None => seen.push(((what, detail), 1)),
    };
    for pod in pods {
        if pod["metadata"]["deletionTimestamp"].is_string() {
            continue;
        }
        let status = &pod["status"];
        let image_of = |name: &str| {
            pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .chain(pod["spec"]["initContainers"].as_array())
                .flatten()
                .find(|c| c["name"] == name)
                .and_then(|c| c["image"].as_str())
                .unwrap_or("?")
                .to_string()
        };
        let statuses = status["initContainerStatuses"]
            .as_array()
            .into_iter()
            .chain(status["containerStatuses"].as_array())
            .flatten();
        for c in statuses {
            let name = c["name"].as_str().unwrap_or("?");
            let terminated = &c["state"]["terminated"];
            if let Some(code) = terminated["exitCode"].as_i64().filter(|&c| c != 0) {
                // Between a crash and the kubelet's back-off (CrashLoopBackOff) it is terminated.
                note(
                    format!(
                        "container {name} (image {}): {}",
                        image_of(name),
                        terminated["reason"].as_str().unwrap_or("Error")
                    ),
                    format!("it exits with code {code}"),
                );
                continue;
            }
            let waiting = &c["state"]["waiting"];
            let Some(reason) = waiting["reason"].as_str() else {
                continue;
            };
            if !STUCK_REASONS.contains(&reason) {
                continue;
            }
            let mut detail = waiting["message"].as_str().unwrap_or_default().to_string();
            if reason == "CrashLoopBackOff" {
                let last = &c["lastState"]["terminated"];
                // Not the restart count: the message changes only when the state does.
                if let Some(code) = last["exitCode"].as_i64() {
                    detail = format!("it exits with code {code}");
                }
            }
            note(
                format!("container {name} (image {}): {reason}", image_of(name)),
                detail,
            );
        }
        let unschedulable = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "PodScheduled" && c["status"] == conditions::FALSE);
        if let Some(c) = unschedulable {
            note(
                format!(
                    "pod not scheduled ({})",
                    c["reason"].as_str().unwrap_or("Unschedulable")
                ),
                c["message"].as_str().unwrap_or_default().to_string(),
            );
        }
    }
    seen.into_iter()
        .map(|((what, detail), n)| {
            let pods = if n == 1 {
                "1 pod".to_string()
            } else {
                format!("{n} pods")
            };
            let detail: String = detail.chars().take(PROBLEM_MESSAGE_CHARS).collect();
            if detail.is_empty() {
                format!("{what} in {pods}")
            } else {
                format!("{what} in {pods}: {detail}")
            }
        })
        .collect()
}

/// `namespace/name`, or `name` for cluster-scoped objects.
fn display_name(object: &Value) -> String {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    match object["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

fn int(value: &Value) -> Option<i64> {
    value.as_i64()
}

/// `None` when the object's controller has seen its current spec, else what is missing.
fn generation_not_observed(object: &Value) -> Option<String> {
    let generation = int(&object["metadata"]["generation"]).unwrap_or(0);
    match int(&object["status"]["observedGeneration"]) {
        Some(observed) if observed >= generation => None,
        Some(observed) => Some(format!(
            "its controller has not yet observed generation {generation} (observed {observed})"
        )),
        None => Some(format!(
            "its controller has not yet observed generation {generation}"
        )),
    }
}

fn deployment(d: &Value) -> Option<String> {
    if let Some(missing) = generation_not_observed(d) {
        return Some(missing);
    }
    let desired = int(&d["spec"]["replicas"]).unwrap_or(1);
    let status = &d["status"];
    let count = |field: &str| int(&status[field]).unwrap_or(0);
    for (field, what) in [
        ("updatedReplicas", "updated"),
        ("readyReplicas", "ready"),
        ("availableReplicas", "available"),
    ] {
        if count(field) != desired {
            return Some(format!("{}/{desired} replicas {what}", count(field)));
        }
    }
    let running = count("replicas");
    (running != desired).then(|| {
        format!(
            "{running} replicas exist where {desired} are wanted (old replicas are still running)"
        )
    })
}

fn stateful_set(s: &Value) -> Option<String> {
    if let Some(missing) = generation_not_observed(s) {
        return Some(missing);
    }
    let desired = int(&s["spec"]["replicas"]).unwrap_or(1);
    let status = &s["status"];
    let count = |field: &str| int(&status[field]).unwrap_or(0);
    if status["currentRevision"] != status["updateRevision"] {
        return Some(format!(
            "rolling out revision {} ({}/{desired} replicas updated)",
            status["updateRevision"].as_str().unwrap_or("?"),
            count("updatedReplicas")
        ));
    }
    if count("readyReplicas") != desired {
        return Some(format!(
            "{}/{desired} replicas ready",
            count("readyReplicas")
        ));
    }
    // Available: ready for minReadySeconds (the same as ready when it is 0).
    (count("availableReplicas") != desired).then(|| {
        format!(
            "{}/{desired} replicas available (ready for minReadySeconds {})",
            count("availableReplicas"),
            int(&s["spec"]["minReadySeconds"]).unwrap_or(0)
        )
    })
}

/// A PhasedRollout is available once its StatefulSet runs the update revision on every pod;
/// until then it says how far the rollout is (pods rolled, the check before the next pod).
fn phased_rollout(p: &Value) -> Option<String> {
    let status = &p["status"];
    let rolled_out = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == fleethub_crds::phased_rollout::ROLLED_OUT);
    match rolled_out {
        Some(c)
            if c["status"] == conditions::TRUE
                && c["observedGeneration"] == p["metadata"]["generation"] =>
        {
            None
        }
        Some(c) => Some(format!(
            "{}/{} pods rolled: {}",
            int(&status["rolledReplicas"]).unwrap_or(0),
            int(&status["replicas"]).unwrap_or(0),
            c["message"].as_str().unwrap_or("rolling")
        )),
        None => Some("the member agent has not looked at it yet".into()),
    }
}

fn daemon_set(d: &Value) -> Option<String> {
    if let Some(missing) = generation_not_observed(d) {
        return Some(missing);
    }
    let status = &d["status"];
    let count = |field: &str| int(&status[field]).unwrap_or(0);
    let desired = count("desiredNumberScheduled");
    for (field, what) in [
        ("updatedNumberScheduled", "updated"),
        ("numberAvailable", "available"),
    ] {
        if count(field) != desired {
            return Some(format!("{}/{desired} pods {what}", count(field)));
        }
    }
    None
}

fn job(j: &Value) -> Option<String> {
    let conds = j["status"]["conditions"].as_array();
    let find = |type_: &str| {
        conds
            .into_iter()
            .flatten()
            .find(|c| c["type"] == type_ && c["status"] == conditions::TRUE)
    };
    if find("Complete").is_some() {
        return None;
    }
    if let Some(failed) = find("Failed") {
        return Some(format!(
            "failed ({}): {}",
            failed["reason"].as_str().unwrap_or("Failed"),
            failed["message"].as_str().unwrap_or("no message")
        ));
    }
    let completions = int(&j["spec"]["completions"]).unwrap_or(1);
    let succeeded = int(&j["status"]["succeeded"]).unwrap_or(0);
    Some(format!(
        "not complete yet ({succeeded}/{completions} pods succeeded)"
    ))
}

/// The Work's `Available` condition, as decided by [`verdict`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// `True` or `False`.
    pub status: &'static str,
    /// [`WORKLOADS_AVAILABLE`], [`WORKLOADS_NOT_READY`] or [`HEALTH_TIMEOUT`].
    pub reason: &'static str,
    /// A sentence naming what is not ready.
    pub message: String,
    /// When to look again even if nothing changes: the health deadline, while before it.
    pub recheck_after: Option<Duration>,
}

/// The Work's availability: `not_ready` are the messages of its objects that are not available
/// (of `manifests` in all); `applied_at` is when this generation of the Work was applied.
pub fn verdict(
    not_ready: &[String],
    manifests: usize,
    snapshot_index: i64,
    applied_at: Timestamp,
    health_timeout: Duration,
    now: Timestamp,
) -> Verdict {
    if not_ready.is_empty() {
        return Verdict {
            status: conditions::TRUE,
            reason: WORKLOADS_AVAILABLE,
            message: format!(
                "all {manifests} manifests of resource snapshot {snapshot_index} are available"
            ),
            recheck_after: None,
        };
    }
    let mut summary = not_ready
        .iter()
        .take(NAMED_IN_MESSAGE)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if not_ready.len() > NAMED_IN_MESSAGE {
        summary.push_str(&format!(
            "; and {} more",
            not_ready.len() - NAMED_IN_MESSAGE
        ));
    }
    let timeout = SignedDuration::try_from(health_timeout).unwrap_or(SignedDuration::MAX);
    let remaining = timeout.saturating_sub(now.duration_since(applied_at));
    if remaining.is_positive() {
        Verdict {
            status: conditions::FALSE,
            reason: WORKLOADS_NOT_READY,
            message: summary,
            recheck_after: Some(remaining.unsigned_abs()),
        }
    } else {
        Verdict {
            status: conditions::FALSE,
            reason: HEALTH_TIMEOUT,
            message: format!(
                "not available within the health timeout of {} after resource snapshot {snapshot_index} was applied: {summary}",
                fleethub_crds::duration::format(health_timeout)
            ),
            recheck_after: None,
        }
    }
}

#[cfg(test)]
#[path = "availability_tests.rs"]
mod tests;
