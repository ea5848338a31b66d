//! `autoupdates`, `autoupdate NAME`, `autoupdate check NAME` and `autoupdate reset NAME`: the
//! hub's AutoUpdatePolicies. A check or a reset is asked with an annotation (any new value) that
//! the hub's controller acts on once; the command waits to print what came of it.

use std::fmt::Write as _;
use std::time::Duration;

use fleethub_crds::auto_update::{
    AutoUpdatePolicy, CHECK_REQUESTED_ANNOTATION, CIRCUIT_OPEN, READY, RESET_REQUESTED_ANNOTATION,
    RETRY_REQUESTED_ANNOTATION, UPDATING,
};
use fleethub_crds::conditions::find;
use jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};

use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::render::{age, table};
use crate::runs::FIELD_MANAGER;

/// How long `check` and `reset` wait for the hub to act.
const ACT_TIMEOUT: Duration = Duration::from_secs(30);

async fn get(hub: &Cluster, name: &str) -> Result<AutoUpdatePolicy> {
    Api::<AutoUpdatePolicy>::all(hub.client.clone())
        .get_opt(name)
        .await
        .map_err(Error::api(format!("reading AutoUpdatePolicy {name}")))?
        .ok_or_else(|| {
            Error::NotFound(format!(
                "autoupdatepolicy {name} not found on the hub (kubectl fleet autoupdates lists them)"
            ))
        })
}

/// `kubectl fleet autoupdates`.
pub async fn list(hub: &Cluster) -> Result<()> {
    let list = Api::<AutoUpdatePolicy>::all(hub.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(Error::api("listing AutoUpdatePolicies"))?;
    print!("{}", policies_table(&list.items, Timestamp::now()));
    Ok(())
}

/// `kubectl fleet autoupdate NAME`.
pub async fn show(hub: &Cluster, name: &str) -> Result<()> {
    let policy = get(hub, name).await?;
    print!("{}", policy_detail(&policy, Timestamp::now()));
    Ok(())
}

/// What a request asks the controller for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// A registry check now.
    Check,
    /// Close the circuit.
    Reset,
    /// Forget one failed version, so it may be picked again.
    Retry(String),
}

/// `kubectl fleet autoupdate check|reset NAME` and `retry NAME VERSION`: sets the request's
/// annotation to a new value,
/// waits until the hub acted on it, and prints the policy.
pub async fn request(hub: &Cluster, name: &str, what: Request) -> Result<()> {
    let policy = get(hub, name).await?;
    let nonce = Timestamp::now().to_string();
    let (annotation, verb, value) = match &what {
        Request::Check => (CHECK_REQUESTED_ANNOTATION, "check", nonce),
        Request::Reset => (RESET_REQUESTED_ANNOTATION, "reset", nonce),
        Request::Retry(version) => {
            let failed = policy
                .status
                .as_ref()
                .map(|s| s.failed_versions.clone())
                .unwrap_or_default();
            if !failed.contains(version) {
                return Err(Error::Refused(format!(
                    "{version} is not among the failed versions of AutoUpdatePolicy {name} ({}); nothing to retry",
                    if failed.is_empty() {
                        "none".to_string()
                    } else {
                        failed.join(", ")
                    }
                )));
            }
            (
                RETRY_REQUESTED_ANNOTATION,
                "retry",
                format!("{version}@{nonce}"),
            )
        }
    };
    let patch = serde_json::json!({
        "apiVersion": "fleethub.dev/v1alpha1",
        "kind": "AutoUpdatePolicy",
        "metadata": {"name": name, "annotations": {annotation: value}},
    });
    let api = Api::<AutoUpdatePolicy>::all(hub.client.clone());
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(Error::api(format!(
        "asking AutoUpdatePolicy {name} for a {verb}"
    )))?;
    let deadline = tokio::time::Instant::now() + ACT_TIMEOUT;
    loop {
        let policy = get(hub, name).await?;
        let status = policy.status.clone().unwrap_or_default();
        let seen = match what {
            Request::Check => status.observed_check_request,
            Request::Reset => status.observed_reset_request,
            Request::Retry(_) => status.observed_retry_request,
        };
        if seen.as_deref() == Some(value.as_str()) {
            println!("autoupdatepolicy {name}: {verb} done");
            print!("{}", policy_detail(&policy, Timestamp::now()));
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Timeout(format!(
                "the hub has not acted on the {verb} of AutoUpdatePolicy {name} within {}s; is the hub running (kubectl -n fleethub-system get pods)? The request stays and is acted on when it is",
                ACT_TIMEOUT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn reason_of(policy: &AutoUpdatePolicy, type_: &str) -> String {
    policy
        .status
        .as_ref()
        .and_then(|s| find(&s.conditions, type_))
        .map_or("-".to_string(), |c| c.reason.clone())
}

/// One line per policy.
pub fn policies_table(policies: &[AutoUpdatePolicy], now: Timestamp) -> String {
    if policies.is_empty() {
        return "No AutoUpdatePolicies found on the hub.\n".to_string();
    }
    let rows: Vec<Vec<String>> = policies
        .iter()
        .map(|p| {
            let s = p.status.clone().unwrap_or_default();
            let t = &p.spec.target;
            vec![
                p.name_any(),
                p.spec.placement_name.clone(),
                format!("{}/{}/{}", t.kind.as_str(), t.namespace, t.name),
                s.current_version.unwrap_or_else(|| "-".into()),
                s.available_version.unwrap_or_else(|| "-".into()),
                reason_of(p, UPDATING),
                if s.circuit_open { "open" } else { "closed" }.to_string(),
                s.next_check_time
                    .map_or("-".to_string(), |t| format!("in {}", age(now, t.0))),
            ]
        })
        .collect();
    table(
        &[
            "NAME",
            "PLACEMENT",
            "TARGET",
            "CURRENT",
            "AVAILABLE",
            "UPDATING",
            "CIRCUIT",
            "NEXT-CHECK",
        ],
        &rows,
    )
}

/// A policy in full: what it follows, where it is, what is in flight, and its history.
pub fn policy_detail(policy: &AutoUpdatePolicy, now: Timestamp) -> String {
    let spec = &policy.spec;
    let s = policy.status.clone().unwrap_or_default();
    let t = &spec.target;
    let mut out = String::new();
    let _ = writeln!(out, "AutoUpdatePolicy {}", policy.name_any());
    let _ = writeln!(
        out,
        "  target:     {} {}/{} container {} (placement {})",
        t.kind.as_str(),
        t.namespace,
        t.name,
        t.container,
        spec.placement_name
    );
    let _ = writeln!(
        out,
        "  follows:    {} {} on \"{}\"{}{}",
        spec.repository
            .as_deref()
            .unwrap_or("the image's repository"),
        spec.version_constraint,
        spec.schedule,
        spec.time_zone
            .as_deref()
            .map(|z| format!(" ({z})"))
            .unwrap_or_default(),
        if spec.suspend { ", SUSPENDED" } else { "" }
    );
    let _ = writeln!(
        out,
        "  versions:   current {}, available {}",
        s.current_version.as_deref().unwrap_or("-"),
        s.available_version.as_deref().unwrap_or("-")
    );
    let when = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>, past: bool| {
        t.as_ref().map_or("-".to_string(), |t| {
            if past {
                format!("{} ago", age(t.0, now))
            } else {
                format!("in {}", age(now, t.0))
            }
        })
    };
    let _ = writeln!(
        out,
        "  checks:     last {}, next {}",
        when(&s.last_check_time, true),
        when(&s.next_check_time, false)
    );
    let max = spec
        .max_rollbacks
        .unwrap_or(fleethub_crds::auto_update::DEFAULT_MAX_ROLLBACKS);
    let _ = writeln!(
        out,
        "  circuit:    {} ({} of {max} consecutive rollbacks)",
        if s.circuit_open { "OPEN" } else { "closed" },
        s.rollback_count
    );
    if !s.failed_versions.is_empty() {
        let _ = writeln!(out, "  never again: {}", s.failed_versions.join(", "));
    }
    if let Some(f) = &s.in_flight {
        let _ = writeln!(
            out,
            "  in flight:  {} {:?} (run {}, rollback run {}, from {} at snapshot {})",
            f.version,
            f.phase,
            f.update_run.as_deref().unwrap_or("-"),
            f.rollback_run.as_deref().unwrap_or("-"),
            f.previous_image,
            f.previous_snapshot_index
        );
    }
    for type_ in [READY, UPDATING, CIRCUIT_OPEN] {
        if let Some(c) = find(&s.conditions, type_) {
            let _ = writeln!(
                out,
                "  {type_:<11} {} {}: {}",
                c.status, c.reason, c.message
            );
        }
    }
    if !s.history.is_empty() {
        let _ = writeln!(out, "  history (newest first):");
        for h in s.history.iter().rev() {
            let _ = writeln!(
                out,
                "    {:<14} {:<10} run {:<28} {}{}",
                h.version,
                format!("{:?}", h.outcome),
                h.update_run.as_deref().unwrap_or("-"),
                when(&h.end_time, true),
                h.message
                    .as_deref()
                    .map(|m| format!(" — {m}"))
                    .unwrap_or_default()
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(status: serde_json::Value) -> AutoUpdatePolicy {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "fleethub.dev/v1alpha1",
            "kind": "AutoUpdatePolicy",
            "metadata": {"name": "web"},
            "spec": {
                "placementName": "web",
                "target": {"kind": "Deployment", "namespace": "web", "name": "web", "container": "web"},
                "schedule": "*/10 * * * * *",
                "versionConstraint": ">=1.0.0, <2",
                "stagedRolloutStrategyName": "three-stage",
            },
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn the_table_and_the_detail_say_where_a_policy_is() {
        let now: Timestamp = "2026-11-23T10:00:00Z".parse().unwrap();
        let p = policy(serde_json::json!({
            "currentVersion": "1.1.0",
            "availableVersion": "1.5.0",
            "nextCheckTime": "2026-11-23T10:00:10Z",
            "lastCheckTime": "2026-11-23T09:59:55Z",
            "circuitOpen": true,
            "rollbackCount": 3,
            "failedVersions": ["1.2.0", "1.3.0", "1.4.0"],
            "conditions": [{"type": "CircuitOpen", "status": "True", "reason": "TooManyRollbacks",
                "message": "1.5.0 available; circuit open", "lastTransitionTime": "2026-11-23T09:00:00Z"}],
            "history": [{"version": "1.4.0", "outcome": "RolledBack", "updateRun": "web-1-4-0",
                "endTime": "2026-11-23T09:00:00Z", "message": "ClusterHealthTimeout: member-1"}],
        }));
        let table = policies_table(std::slice::from_ref(&p), now);
        let row = table.lines().nth(1).unwrap();
        for cell in [
            "web",
            "Deployment/web/web",
            "1.1.0",
            "1.5.0",
            "open",
            "in 10s",
        ] {
            assert!(row.contains(cell), "{cell} missing from {row:?}");
        }
        let detail = policy_detail(&p, now);
        for text in [
            "circuit:    OPEN (3 of 3 consecutive rollbacks)",
            "never again: 1.2.0, 1.3.0, 1.4.0",
            "CircuitOpen True TooManyRollbacks: 1.5.0 available; circuit open",
            "1.4.0",
            "RolledBack",
            "ClusterHealthTimeout: member-1",
        ] {
            assert!(detail.contains(text), "{text:?} missing from\n{detail}");
        }
        assert_eq!(
            policies_table(&[], now),
            "No AutoUpdatePolicies found on the hub.\n"
        );
    }
}
