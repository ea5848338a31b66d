//! `kubectl fleet drift [PLACEMENT] [--corrections]` against the real fleet: a person's
//! `kubectl` edit on a real member is restored and listed as a correction (with an Event on the
//! hub's Placement); under `whenToApply: IfNotDrifted` the edit stays and is listed with both
//! values, and the Binding and the Placement status say which cluster differs and how.

#[path = "../../tests/common/mod.rs"]
mod common;
mod support;

use common::TIMEOUT;
use common::real::{Rollout, kubectl_apply};
use fleethub_crds::apply_strategy::WhenToApply;
use fleethub_crds::conditions::find;
use fleethub_crds::drift::DRIFTED;
use fleethub_crds::{Binding, Placement, Work, names};
use fleethub_testkit::{Fleet, poll_until, wait_for};
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;
use support::{plugin_err, plugin_ok};

/// Edits the rollout's ConfigMap on member-1 with the real kubectl, as a person would.
fn edit_on_member_1(fleet: &Fleet, r: &Rollout, greeting: &str) {
    let patch = json!({"data": {"greeting": greeting}}).to_string();
    common::kubectl_on(
        fleet,
        "member-1",
        &["-n", &r.ns, "patch", "configmap", "web", "-p", &patch],
    );
}

/// Waits until `kubectl fleet ARGS` prints a line containing every one of `parts`; returns
/// that line.
async fn wait_listed(fleet: &Fleet, args: &[&str], parts: &[&str]) -> String {
    poll_until(
        &format!("kubectl fleet {args:?} to list {parts:?}"),
        TIMEOUT,
        || {
            let out = plugin_ok(fleet, args);
            let line = out
                .lines()
                .find(|l| parts.iter().all(|p| l.contains(p)))
                .map(str::to_string);
            async move { line }
        },
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn drift_and_corrections_are_listed_and_reach_the_placement() {
    let fleet = Fleet::get().unwrap();
    let r = Rollout::new(
        fleet,
        "kfdrift",
        "registry.invalid/web:1",
        [json!([]), json!([]), json!([])],
    )
    .await;
    r.run_to_success("v1", 0).await;
    let object = format!("ConfigMap {}/web", r.ns);

    // whenToApply: Always (the default): the edit is undone and listed as a correction.
    edit_on_member_1(fleet, &r, "by hand");
    let line = wait_listed(
        fleet,
        &["drift", &r.placement, "--corrections"],
        &["member-1", &object],
    )
    .await;
    assert!(
        line.ends_with(r#"data.greeting: member "by hand", hub "hello""#),
        "{line}"
    );
    let events: Api<Event> = Api::namespaced(r.hub.clone(), "default");
    let selector = format!(
        "involvedObject.kind=Placement,involvedObject.name={}",
        r.placement
    );
    let event = poll_until("DriftCorrected on the Placement", TIMEOUT, || {
        let (events, selector) = (events.clone(), selector.clone());
        async move {
            let list = events
                .list(&ListParams::default().fields(&selector))
                .await
                .ok()?;
            list.items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("DriftCorrected"))
        }
    })
    .await
    .unwrap();
    let note = event.message.unwrap_or_default();
    assert!(
        note.contains("cluster member-1") && note.contains(&object),
        "{note}"
    );

    // whenToApply: IfNotDrifted. Once member-1's agent has taken in the new strategy, an edit
    // stays and is reported.
    kubectl_apply(
        fleet,
        &json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "Placement", "metadata": {"name": r.placement},
                "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Namespace", "name": r.ns}],
                         "policy": {"placementType": "PickFixed", "clusterNames": ["member-1", "member-2", "member-3"]},
                         "strategy": {"type": "External", "applyStrategy": {"whenToApply": "IfNotDrifted"}}}}),
    );
    let works: Api<Work> = Api::namespaced(r.hub.clone(), &names::member_namespace("member-1"));
    wait_for(
        &works,
        &names::work_name(&r.placement),
        "member-1's agent to report on the Work with IfNotDrifted",
        TIMEOUT,
        |w: Option<&Work>| {
            w.is_some_and(|w| {
                let strategy = w.spec.apply_strategy.as_ref();
                let applied = w
                    .status
                    .as_ref()
                    .and_then(|s| find(&s.conditions, "Applied"));
                strategy.is_some_and(|s| s.when_to_apply == Some(WhenToApply::IfNotDrifted))
                    && applied.is_some_and(|c| c.observed_generation == w.metadata.generation)
            })
        },
    )
    .await
    .unwrap();
    edit_on_member_1(fleet, &r, "kept");
    let line = wait_listed(
        fleet,
        &["drift", &r.placement],
        &["member-1", &object, "Drifted", "data.greeting"],
    )
    .await;
    assert!(
        line.contains(r#""kept""#) && line.contains(r#""hello""#),
        "{line}"
    );
    // Fleet-wide too.
    wait_listed(fleet, &["drift"], &[&r.placement, "data.greeting"]).await;

    let bindings: Api<Binding> = Api::all(r.hub.clone());
    let binding = wait_for(
        &bindings,
        &names::binding_name(&r.placement, "member-1"),
        "the Binding's Drifted condition",
        TIMEOUT,
        |b: Option<&Binding>| {
            b.and_then(|b| b.status.as_ref())
                .and_then(|s| find(&s.conditions, DRIFTED))
                .is_some_and(|c| c.status == "True")
        },
    )
    .await
    .unwrap();
    let status = binding.status.unwrap();
    let drifted = find(&status.conditions, DRIFTED).unwrap();
    assert_eq!(drifted.reason, "Drifted");
    assert!(
        drifted.message.contains(&object) && drifted.message.contains("data.greeting"),
        "{}",
        drifted.message
    );
    assert_eq!(status.drifted_object_count, Some(1));

    let placements: Api<Placement> = Api::all(r.hub.clone());
    let placement = wait_for(
        &placements,
        &r.placement,
        "the Placement to count the drifted cluster",
        TIMEOUT,
        |p: Option<&Placement>| {
            p.and_then(|p| p.status.as_ref())
                .is_some_and(|s| s.drifted_cluster_count == Some(1))
        },
    )
    .await
    .unwrap();
    let status = placement.status.unwrap();
    let overall = find(&status.conditions, DRIFTED).unwrap();
    assert_eq!(
        (overall.status.as_str(), overall.reason.as_str()),
        ("True", "ClustersDiffer")
    );
    let member_1 = status
        .placement_statuses
        .iter()
        .find(|c| c.cluster_name == "member-1")
        .unwrap();
    assert_eq!(member_1.drifted_objects[0].object, object);
    assert_eq!(member_1.drifted_objects[0].fields[0].path, "data.greeting");
    let member_2 = status
        .placement_statuses
        .iter()
        .find(|c| c.cluster_name == "member-2")
        .unwrap();
    assert_eq!(
        find(&member_2.conditions, DRIFTED).map(|c| c.reason.as_str()),
        Some("InSync")
    );

    let err = plugin_err(fleet, &["drift", "no-such-placement"]);
    assert!(
        err.contains("placement no-such-placement not found"),
        "{err}"
    );
}
