use super::*;
use fleethub_crds::apply_strategy::{ApplyStrategy, DriftType};
use serde_json::json;

fn deployment(replicas: i64, image: &str, managed: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "app", "labels": {"fleethub.dev/placement": "web"},
                     "managedFields": managed},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [
            {"name": "web", "image": image, "ports": [{"containerPort": 80}]}]}}},
        "status": {"replicas": replicas},
    })
}

fn desired(replicas: i64, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "app", "labels": {"fleethub.dev/placement": "web"}},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [
            {"name": "web", "image": image, "ports": [{"containerPort": 80}]}]}}},
    })
}

fn entry(manager: &str, operation: &str, fields: Value) -> Value {
    json!({"manager": manager, "operation": operation, "fieldsType": "FieldsV1", "fieldsV1": fields})
}

fn agent_owns_all() -> Value {
    entry(
        MEMBER_AGENT,
        "Apply",
        json!({"f:metadata": {"f:labels": {"f:fleethub.dev/placement": {}}},
               "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                   "k:{\"name\":\"web\"}": {".": {}, "f:name": {}, "f:image": {}, "f:ports": {}}}}}}}),
    )
}

fn paths(diffs: &[Diff]) -> Vec<(String, Difference)> {
    diffs
        .iter()
        .map(|d| (path_string(&d.path), d.owner))
        .collect()
}

#[test]
fn an_object_as_applied_has_no_difference() {
    let live = deployment(2, "web:1", json!([agent_owns_all()]));
    assert!(compare(&desired(2, "web:1"), &live, false, false).is_empty());
}

#[test]
fn the_hubs_new_values_on_fields_the_agent_owns_are_the_hubs() {
    let live = deployment(2, "web:1", json!([agent_owns_all()]));
    let diffs = compare(&desired(2, "web:2"), &live, true, false);
    assert_eq!(
        paths(&diffs),
        [(
            "spec.template.spec.containers[0].image".to_string(),
            Difference::Hub
        )]
    );
    assert_eq!(diffs[0].member, Some(json!("web:1")));
    assert_eq!(diffs[0].hub, Some(json!("web:2")));
}

#[test]
fn a_kubectl_edit_is_drift_and_an_autoscalers_replicas_are_not() {
    let mut agent = agent_owns_all();
    agent["fieldsV1"]["f:spec"]
        .as_object_mut()
        .unwrap()
        .remove("f:replicas");
    // kubectl scale moved replicas to kubectl: drift.
    let scaled = deployment(
        5,
        "web:1",
        json!([
            agent.clone(),
            entry("kubectl", "Update", json!({"f:spec": {"f:replicas": {}}}))
        ]),
    );
    assert_eq!(
        paths(&compare(&desired(2, "web:1"), &scaled, false, false)),
        [("spec.replicas".to_string(), Difference::Drift)]
    );
    // An autoscaler (kube-controller-manager through /scale) owns them: not drift.
    let autoscaled = deployment(
        5,
        "web:1",
        json!([
            agent,
            entry(
                "kube-controller-manager",
                "Update",
                json!({"f:spec": {"f:replicas": {}}})
            )
        ]),
    );
    assert_eq!(
        paths(&compare(&desired(2, "web:1"), &autoscaled, false, false)),
        [("spec.replicas".to_string(), Difference::Foreign)]
    );
}

#[test]
fn a_removed_field_is_drift_unless_the_hub_just_added_it() {
    let mut live = deployment(2, "web:1", json!([agent_owns_all()]));
    live["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("fleethub.dev/placement");
    let mut d = desired(2, "web:1");
    let diffs = compare(&d, &live, false, false);
    // The agent's managed fields still list the label (a stale entry): the agent's.
    assert_eq!(diffs[0].owner, Difference::Hub);
    live["metadata"]["managedFields"] = json!([]);
    d["metadata"]["labels"]["team"] = json!("a");
    let diffs = compare(&d, &live, false, false);
    assert_eq!(
        paths(&diffs),
        [
            (
                "metadata.labels[\"fleethub.dev/placement\"]".to_string(),
                Difference::Drift
            ),
            ("metadata.labels.team".to_string(), Difference::Drift)
        ]
    );
    assert!(
        compare(&d, &live, true, false)
            .iter()
            .all(|d| d.owner == Difference::Hub)
    );
}

#[test]
fn full_comparison_also_reports_fields_only_the_member_has() {
    let live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                      "data": {"a": "1", "extra": "x"}});
    let d = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
    assert!(compare_all(&d, &live, false).is_empty());
    let diffs = compare_all(&d, &live, true);
    assert_eq!(
        paths(&diffs),
        [("data.extra".to_string(), Difference::Drift)]
    );
    assert_eq!(diffs[0].hub, None);
    assert_eq!(
        field_diffs(&diffs)[0].member_value.as_deref(),
        Some("\"x\"")
    );
}

#[test]
fn numbers_compare_by_value_and_lists_of_scalars_whole() {
    let live = json!({"kind": "X", "spec": {"n": 1.0, "args": ["a", "b"]}});
    let d = json!({"kind": "X", "spec": {"n": 1, "args": ["a", "c"]}});
    let diffs = compare_all(&d, &live, false);
    assert_eq!(
        paths(&diffs),
        [("spec.args".to_string(), Difference::Drift)]
    );
}

#[test]
fn strip_leaves_out_foreign_fields_only() {
    let mut d = desired(2, "web:1");
    let path = vec![Step::Field("spec".into()), Step::Field("replicas".into())];
    let image = vec![
        Step::Field("spec".into()),
        Step::Field("template".into()),
        Step::Field("spec".into()),
        Step::Field("containers".into()),
        Step::Index(0, json!({})),
        Step::Field("image".into()),
    ];
    strip(&mut d, &[&path, &image]);
    assert_eq!(d["spec"].get("replicas"), None);
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0],
        json!({"name": "web", "ports": [{"containerPort": 80}]})
    );
}

#[test]
fn long_values_are_shortened() {
    let s = short(&json!("x".repeat(500)));
    assert_eq!(s.chars().count(), MAX_VALUE_CHARS + 1);
    assert!(s.ends_with('…'));
}

fn strategy(v: Value) -> ApplyStrategy {
    serde_json::from_value(v).unwrap()
}

fn managed(object: &Value) -> Member<'_> {
    Member {
        object: Some(object),
        fleet_managed: true,
    }
}

#[test]
fn an_unchanged_object_that_did_not_drift_is_not_applied() {
    let live = deployment(2, "web:1", json!([agent_owns_all()]));
    let d = desired(2, "web:1");
    let always = ApplyStrategy::default();
    assert_eq!(
        decide(&always, d.clone(), managed(&live), false, true),
        Decision::Unchanged
    );
    assert!(matches!(
        decide(&always, d, managed(&live), true, true),
        Decision::Apply {
            correction: None,
            ..
        }
    ));
}

#[test]
fn drift_is_corrected_under_always_and_left_under_if_not_drifted() {
    let mut agent = agent_owns_all();
    agent["fieldsV1"]["f:spec"]
        .as_object_mut()
        .unwrap()
        .remove("f:replicas");
    let scaled = deployment(
        5,
        "web:1",
        json!([
            agent,
            entry(
                "kubectl-scale",
                "Update",
                json!({"f:spec": {"f:replicas": {}}})
            )
        ]),
    );
    let d = desired(2, "web:1");
    match decide(
        &ApplyStrategy::default(),
        d.clone(),
        managed(&scaled),
        false,
        true,
    ) {
        Decision::Apply {
            body,
            correction: Some(fields),
        } => {
            assert_eq!(body["spec"]["replicas"], 2);
            assert_eq!(fields[0].path, "spec.replicas");
            assert_eq!(fields[0].member_value.as_deref(), Some("5"));
            assert_eq!(fields[0].hub_value.as_deref(), Some("2"));
        }
        other => panic!("{other:?}"),
    }
    let if_not_drifted = strategy(json!({"whenToApply": "IfNotDrifted"}));
    // Even a new hub version is not applied over the drift.
    match decide(
        &if_not_drifted,
        desired(2, "web:2"),
        managed(&scaled),
        true,
        true,
    ) {
        Decision::Leave { why, count, fields } => {
            assert_eq!(why, DriftType::Drifted);
            assert_eq!(count, 1);
            assert_eq!(fields[0].path, "spec.replicas");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_autoscalers_replicas_are_left_out_of_the_apply() {
    let mut agent = agent_owns_all();
    agent["fieldsV1"]["f:spec"]
        .as_object_mut()
        .unwrap()
        .remove("f:replicas");
    let autoscaled = deployment(
        7,
        "web:1",
        json!([
            agent,
            entry("hpa-test", "Apply", json!({"f:spec": {"f:replicas": {}}}))
        ]),
    );
    let always = ApplyStrategy::default();
    assert_eq!(
        decide(
            &always,
            desired(2, "web:1"),
            managed(&autoscaled),
            false,
            true
        ),
        Decision::Unchanged,
        "not drift, nothing to apply"
    );
    match decide(
        &always,
        desired(2, "web:2"),
        managed(&autoscaled),
        true,
        true,
    ) {
        Decision::Apply { body, correction } => {
            assert_eq!(correction, None);
            assert_eq!(body["spec"].get("replicas"), None, "never forced back");
            assert_eq!(
                body["spec"]["template"]["spec"]["containers"][0]["image"],
                "web:2"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn takeover_follows_when_to_take_over() {
    let theirs = deployment(
        2,
        "web:0",
        json!([entry("kubectl-create", "Update", json!({"f:spec": {}}))]),
    );
    let d = desired(2, "web:1");
    let pre_existing = Member {
        object: Some(&theirs),
        fleet_managed: false,
    };
    assert!(matches!(
        decide(
            &ApplyStrategy::default(),
            d.clone(),
            pre_existing,
            true,
            false
        ),
        Decision::Apply { .. }
    ));
    let if_no_diff = strategy(json!({"whenToTakeOver": "IfNoDiff"}));
    match decide(&if_no_diff, d.clone(), pre_existing, true, false) {
        Decision::Leave { why, fields, .. } => {
            assert_eq!(why, DriftType::TakeoverRefused);
            assert_eq!(fields[0].path, "spec.template.spec.containers[0].image");
        }
        other => panic!("{other:?}"),
    }
    let mut same = deployment(2, "web:1", json!([]));
    same["metadata"]["labels"] = json!({});
    let mut d = d;
    d["metadata"]["annotations"] = json!({"fleethub.dev/work": "fleet-member-a/web"});
    let matching = Member {
        object: Some(&same),
        fleet_managed: false,
    };
    assert!(matches!(
        decide(&if_no_diff, d.clone(), matching, true, false),
        Decision::Apply { .. }
    ));
    let never = strategy(json!({"whenToTakeOver": "Never"}));
    assert!(matches!(
        decide(&never, d, matching, true, false),
        Decision::Leave {
            why: DriftType::TakeoverRefused,
            count: 0,
            ..
        }
    ));
}

#[test]
fn report_diff_applies_nothing() {
    let report = strategy(json!({"type": "ReportDiff"}));
    let live = deployment(2, "web:1", json!([agent_owns_all()]));
    assert_eq!(
        decide(&report, desired(2, "web:1"), managed(&live), true, true),
        Decision::Unchanged
    );
    assert!(matches!(
        decide(&report, desired(3, "web:1"), managed(&live), true, true),
        Decision::Leave {
            why: DriftType::Diffed,
            count: 1,
            ..
        }
    ));
    let absent = Member {
        object: None,
        fleet_managed: false,
    };
    assert!(matches!(
        decide(&report, desired(3, "web:1"), absent, true, false),
        Decision::Leave {
            why: DriftType::Diffed,
            ..
        }
    ));
}

#[test]
fn a_deleted_object_is_recreated_as_a_correction() {
    let absent = Member {
        object: None,
        fleet_managed: false,
    };
    match decide(
        &ApplyStrategy::default(),
        desired(2, "web:1"),
        absent,
        false,
        true,
    ) {
        Decision::Apply {
            correction: Some(fields),
            ..
        } => assert_eq!(fields[0].path, "."),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        decide(
            &ApplyStrategy::default(),
            desired(2, "web:1"),
            absent,
            true,
            false
        ),
        Decision::Apply {
            correction: None,
            ..
        }
    ));
}
