//! What the agent reads of a workload's pods, only when it needs to say more than the workload's
//! own status: why a workload that is not ready is stuck, and whether a ready one's containers
//! restarted since the update.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use serde_json::Value;

use super::Context;
use crate::availability;

/// A workload that is not ready says why its pods are not (the image and state of a stuck
/// container, an unschedulable pod), read from the member's pods. A failed read leaves the
/// message as it was: the workload's own status still says what is missing.
pub(super) async fn with_pod_problems(
    readiness: availability::Readiness,
    object: &Value,
    ctx: &Context,
) -> availability::Readiness {
    let availability::Readiness::NotReady(message) = readiness else {
        return readiness;
    };
    let problems = pods_of(object, ctx)
        .await
        .map_or_else(Vec::new, |pods| availability::pod_problems(&pods));
    if problems.is_empty() {
        availability::Readiness::NotReady(message)
    } else {
        availability::Readiness::NotReady(format!("{message} ({})", problems.join("; ")))
    }
}

/// The pods of a workload (those its `spec.selector` selects), read from the member; None
/// for an object that runs no pods, or when the read fails (logged).
async fn pods_of(object: &Value, ctx: &Context) -> Option<Vec<Value>> {
    let selector = availability::pod_selector(object)?;
    let ns = object["metadata"]["namespace"].as_str()?;
    let pods: Api<Pod> = Api::namespaced(ctx.member.clone(), ns);
    ctx.metrics.object_read();
    match pods.list(&ListParams::default().labels(&selector)).await {
        Ok(list) => Some(
            list.items
                .iter()
                .filter_map(|p| serde_json::to_value(p).ok())
                .collect(),
        ),
        Err(e) => {
            tracing::debug!(namespace = ns, %selector, error = %e, "cannot read the pods of a workload");
            None
        }
    }
}

/// A ready workload whose containers restarted after `since` is not ready: read from its pods.
/// A failed read leaves it ready (its own status says so).
pub(super) async fn with_restarts(
    readiness: availability::Readiness,
    object: &Value,
    since: jiff::Timestamp,
    ctx: &Context,
) -> (availability::Readiness, bool) {
    let restarts = pods_of(object, ctx)
        .await
        .map_or_else(Vec::new, |pods| availability::restarts_since(&pods, since));
    if restarts.is_empty() {
        return (readiness, false);
    }
    let message = format!("{}: {}", availability::label(object), restarts.join("; "));
    (availability::Readiness::NotReady(message), true)
}
