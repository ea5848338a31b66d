//! What the fleet-version metrics ([`crate::metrics::fleet_versions`]) read of a placement: each
//! selected cluster's Binding (what its member runs, what it is pointed at), the Work of a
//! cluster that is moving (how the move ended, judged as an UpdateRun judges a cluster), and the
//! image each AutoUpdatePolicy's target has in the snapshots the clusters run.

use std::sync::Arc;

use fleethub_crds::auto_update::UpdateTarget;
use fleethub_crds::binding::{BindingState, OVERRIDDEN};
use fleethub_crds::conditions::{FALSE, TRUE, find};
use fleethub_crds::work::{APPLIED, AVAILABLE, reason as work_reason};
use fleethub_crds::{AutoUpdatePolicy, Binding, ResourceSnapshot, Work, names};
use kube::api::ListParams;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;

use crate::metrics::fleet_versions::{ClusterReading, FleetVersions, Outcome, PolicyTarget};

/// A selected cluster as its Binding shows it; None for a cluster no longer selected
/// (`Unscheduled`: its workload is being removed).
pub fn reading(binding: &Binding) -> Option<ClusterReading<'_>> {
    let spec = &binding.spec;
    let status = binding.status.as_ref();
    match spec.state {
        BindingState::Unscheduled => None,
        BindingState::Scheduled | BindingState::Bound => Some(ClusterReading {
            cluster: &spec.target_cluster,
            running: status.and_then(|s| s.applied_resource_snapshot_index),
            bound: spec
                .resource_snapshot_index
                .filter(|_| spec.state == BindingState::Bound),
            overrides_failed: status
                .and_then(|s| find(&s.conditions, OVERRIDDEN))
                .is_some_and(|c| {
                    c.status == FALSE && c.observed_generation == binding.metadata.generation
                }),
            health_timeout: spec.health_timeout.as_deref(),
        }),
    }
}

/// How the move of `reading`'s cluster to snapshot `to` ended, from its `work` (its member's
/// report on the Work as it is now), if it did: as the UpdateRun judges a cluster, available
/// once applied and available at `to`; failed when the overrides or the apply failed, or when
/// the member gave up waiting for availability (its health timeout).
pub fn verdict(reading: &ClusterReading<'_>, to: i64, work: Option<&Work>) -> Option<Outcome> {
    if reading.overrides_failed && reading.bound == Some(to) {
        return Some(Outcome::Failed);
    }
    let work = work.filter(|w| w.spec.resource_snapshot_index == to)?;
    let status = work.status.as_ref()?;
    let current = |type_| {
        find(&status.conditions, type_)
            .filter(|c| c.observed_generation == work.metadata.generation)
    };
    let applied = current(APPLIED)?;
    if applied.status == FALSE {
        return Some(Outcome::Failed);
    }
    let available = current(AVAILABLE)?;
    if available.status == TRUE
        && applied.status == TRUE
        && status.applied_resource_snapshot_index == Some(to)
    {
        return Some(Outcome::Available);
    }
    (available.status == FALSE && available.reason == work_reason::HEALTH_TIMEOUT)
        .then_some(Outcome::Failed)
}

/// Takes in the placement's Bindings (those not being deleted) at `now`: the snapshot each
/// selected cluster runs, and the moves that ended (the Work of a moving cluster read from
/// `works`).
pub fn observe_clusters(
    versions: &FleetVersions,
    placement: &str,
    bindings: &[Arc<Binding>],
    works: &Store<Work>,
    now: jiff::Timestamp,
) {
    let work_name = names::work_name(placement);
    let judge = |r: &ClusterReading<'_>, to: i64| {
        let key = ObjectRef::new(&work_name).within(&names::member_namespace(r.cluster));
        verdict(r, to, works.get(&key).as_deref())
    };
    let readings = bindings.iter().filter_map(|b| reading(b));
    versions.observe(placement, readings, now, judge);
}

/// `target` as the metrics tell targets apart.
fn target_key(target: &UpdateTarget) -> String {
    format!(
        "{}/{}/{}/{}",
        target.kind.as_str(),
        target.namespace,
        target.name,
        target.container
    )
}

/// The AutoUpdatePolicies of `placement` among `policies`, with their targets.
pub fn policy_targets(
    policies: &[Arc<AutoUpdatePolicy>],
    placement: &str,
) -> Vec<(PolicyTarget, UpdateTarget)> {
    policies
        .iter()
        .filter(|p| p.spec.placement_name == placement && p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let target = PolicyTarget {
                policy: p.name_any(),
                target: target_key(&p.spec.target),
            };
            (target, p.spec.target.clone())
        })
        .collect()
}

/// The image of `target`'s container among a snapshot's objects, if they hold it.
pub fn target_image<'a>(
    resources: impl IntoIterator<Item = &'a Value>,
    target: &UpdateTarget,
) -> Option<String> {
    resources
        .into_iter()
        .filter(|o| {
            o["kind"] == target.kind.as_str()
                && o["metadata"]["name"] == target.name.as_str()
                && o["metadata"]["namespace"] == target.namespace.as_str()
        })
        .flat_map(|o| o["spec"]["template"]["spec"]["containers"].as_array())
        .flatten()
        .find(|c| c["name"] == target.container.as_str())
        .and_then(|c| c["image"].as_str())
        .map(str::to_string)
}

/// Sets the placement's newest snapshot and its AutoUpdatePolicies (from `policies`), and looks
/// up the images of the snapshots its clusters run that no policy looked up yet: one list of a
/// snapshot's parts per index and policy while this process leads. Metrics never fail the
/// reconcile: a look-up that fails is tried again at the next.
pub async fn record_images(
    client: &Client,
    versions: &FleetVersions,
    placement: &str,
    latest: Option<i64>,
    policies: &Store<AutoUpdatePolicy>,
) {
    versions.set_latest(placement, latest);
    let targets = policy_targets(&policies.state(), placement);
    let named: Vec<PolicyTarget> = targets.iter().map(|(t, _)| t.clone()).collect();
    versions.set_policies(placement, &named);
    let api: Api<ResourceSnapshot> = Api::all(client.clone());
    for (policy, index) in versions.images_wanted(placement) {
        let Some((_, target)) = targets.iter().find(|(t, _)| t.policy == policy) else {
            continue;
        };
        let selector = format!(
            "{}={placement},{}={index}",
            names::PLACEMENT_LABEL,
            names::SNAPSHOT_INDEX_LABEL
        );
        match api.list(&ListParams::default().labels(&selector)).await {
            // No parts: the snapshot was pruned from the history (a cluster ran it before).
            Ok(parts) => {
                let resources = parts.items.iter().flat_map(|s| &s.spec.resources);
                let image = target_image(resources, target);
                versions.set_image(placement, &policy, index, image);
            }
            Err(e) => {
                tracing::debug!(%policy, index, error = %e, "cannot read the snapshot's image for the version metrics");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleethub_crds::binding::{BindingSpec, BindingStatus};
    use fleethub_crds::work::{WorkSpec, WorkStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use serde_json::json;

    fn condition(type_: &str, status: &str, reason: &str, generation: i64) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
            observed_generation: Some(generation),
        }
    }

    fn binding(state: BindingState, index: Option<i64>, applied: Option<i64>) -> Binding {
        let mut b = Binding::new(
            "web-a",
            BindingSpec {
                placement_name: "web".into(),
                target_cluster: "a".into(),
                state,
                resource_snapshot_index: index,
                ..Default::default()
            },
        );
        b.metadata.generation = Some(4);
        b.status = Some(BindingStatus {
            applied_resource_snapshot_index: applied,
            ..Default::default()
        });
        b
    }

    #[test]
    fn a_binding_says_what_its_cluster_runs_and_is_pointed_at() {
        let bound = binding(BindingState::Bound, Some(3), Some(2));
        assert_eq!(
            reading(&bound),
            Some(ClusterReading {
                cluster: "a",
                running: Some(2),
                bound: Some(3),
                overrides_failed: false,
                health_timeout: None
            })
        );
        let scheduled = binding(BindingState::Scheduled, None, None);
        let r = reading(&scheduled).unwrap();
        assert_eq!((r.running, r.bound), (None, None));
        assert_eq!(
            reading(&binding(BindingState::Unscheduled, Some(3), Some(3))),
            None,
            "a cluster no longer selected is not the placement's"
        );
        let mut broken = binding(BindingState::Bound, Some(3), Some(2));
        let stale = condition(OVERRIDDEN, FALSE, "OverriddenFailed", 3);
        broken.status.as_mut().unwrap().conditions = vec![stale];
        assert!(
            !reading(&broken).unwrap().overrides_failed,
            "an earlier one"
        );
        let current = condition(OVERRIDDEN, FALSE, "OverriddenFailed", 4);
        broken.status.as_mut().unwrap().conditions = vec![current];
        assert!(reading(&broken).unwrap().overrides_failed);
    }

    fn work(index: i64, applied: Option<i64>, conditions: Vec<Condition>) -> Work {
        let mut w = Work::new(
            "web",
            WorkSpec {
                placement_name: "web".into(),
                resource_snapshot_index: index,
                ..Default::default()
            },
        );
        w.metadata.generation = Some(7);
        w.status = Some(WorkStatus {
            conditions,
            applied_resource_snapshot_index: applied,
            ..Default::default()
        });
        w
    }

    #[test]
    fn a_move_ends_as_the_update_run_judges_a_cluster() {
        let r = ClusterReading {
            cluster: "a",
            running: Some(2),
            bound: Some(3),
            overrides_failed: false,
            health_timeout: None,
        };
        let ok = |t| condition(t, TRUE, "Simulated", 7);
        let available = work(3, Some(3), vec![ok(APPLIED), ok(AVAILABLE)]);
        assert_eq!(verdict(&r, 3, Some(&available)), Some(Outcome::Available));
        assert_eq!(verdict(&r, 4, Some(&available)), None, "another index");
        assert_eq!(verdict(&r, 3, None), None, "no Work yet");
        let older = work(3, Some(3), vec![condition(APPLIED, TRUE, "x", 6)]);
        assert_eq!(
            verdict(&r, 3, Some(&older)),
            None,
            "a report on the Work before"
        );
        let waiting = condition(AVAILABLE, FALSE, work_reason::WORKLOADS_NOT_READY, 7);
        let not_yet = work(3, Some(3), vec![ok(APPLIED), waiting]);
        assert_eq!(verdict(&r, 3, Some(&not_yet)), None);
        let timed_out = condition(AVAILABLE, FALSE, work_reason::HEALTH_TIMEOUT, 7);
        let timed_out = work(3, Some(3), vec![ok(APPLIED), timed_out]);
        assert_eq!(verdict(&r, 3, Some(&timed_out)), Some(Outcome::Failed));
        let refused = condition(APPLIED, FALSE, work_reason::APPLY_FAILED, 7);
        let apply_failed = work(3, Some(2), vec![refused]);
        assert_eq!(verdict(&r, 3, Some(&apply_failed)), Some(Outcome::Failed));
        let broken = ClusterReading {
            overrides_failed: true,
            ..r
        };
        assert_eq!(verdict(&broken, 3, None), Some(Outcome::Failed));
    }

    #[test]
    fn the_targets_image_is_read_from_the_snapshots_objects() {
        let target = UpdateTarget {
            namespace: "shop".into(),
            name: "web".into(),
            container: "app".into(),
            ..Default::default()
        };
        let deployment = |ns: &str, image: &str| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "web", "namespace": ns},
                   "spec": {"template": {"spec": {"containers": [
                       {"name": "sidecar", "image": "proxy:1"},
                       {"name": "app", "image": image}]}}}})
        };
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": "web", "namespace": "shop"}});
        let objects = [
            config,
            deployment("other", "web:0.9"),
            deployment("shop", "web:1.2"),
        ];
        assert_eq!(target_image(&objects, &target).as_deref(), Some("web:1.2"));
        assert_eq!(target_image(&objects[..2], &target), None);
    }
}
