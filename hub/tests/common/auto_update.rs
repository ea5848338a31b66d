//! Set-up shared by the auto-update tests: a policy over a [`Rollout`]'s Deployment, its status,
//! what it creates (for clean-up), and asking it for a check or a reset as a person does.

use fleethub_crds::UpdateRun;
use fleethub_crds::auto_update::{AutoUpdatePolicy, AutoUpdatePolicyStatus};
use fleethub_testkit::Fleet;
use serde_json::json;

use super::kubectl;

/// Held by each test of a binary that uses [`Rollout`]: its members' labels are set and released
/// per rollout, so two at once would take each other's stages away.
pub static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
use super::real::Rollout;

/// Asks the policy's controller for a check or a reset the way a person does with kubectl
/// (what `kubectl fleet autoupdate check|reset` sets).
pub fn ask(fleet: &Fleet, name: &str, annotation: &str) {
    let value = format!("{annotation}={}", jiff::Timestamp::now().as_nanosecond());
    kubectl(
        fleet,
        &["annotate", "autoupdatepolicy", name, &value, "--overwrite"],
    );
}

pub fn policy(name: &str, r: &Rollout, extra: serde_json::Value) -> AutoUpdatePolicy {
    let mut spec = json!({
        "placementName": r.placement,
        "target": {"kind": "Deployment", "namespace": r.ns, "name": "web", "container": "web"},
        "schedule": "*/2 * * * * *",
        "versionConstraint": ">=1.0.0, <2",
        "stagedRolloutStrategyName": r.strategy,
        "healthTimeout": "15s",
        "maxRollbacks": 1,
    });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    serde_json::from_value(json!({
        "apiVersion": "fleethub.dev/v1alpha1", "kind": "AutoUpdatePolicy",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

pub fn status(p: Option<&AutoUpdatePolicy>) -> AutoUpdatePolicyStatus {
    p.and_then(|p| p.status.clone()).unwrap_or_default()
}

/// Tracks what a policy creates (its runs are also owned by it).
pub fn track_policy(r: &Rollout, name: &str, versions: &[&str]) {
    r.cleanup.track::<AutoUpdatePolicy>("hub", None, name);
    for v in versions {
        let v = v.replace('.', "-");
        r.cleanup
            .track::<UpdateRun>("hub", None, &format!("{name}-{v}"));
        r.cleanup
            .track::<UpdateRun>("hub", None, &format!("{name}-{v}-rollback"));
    }
}
