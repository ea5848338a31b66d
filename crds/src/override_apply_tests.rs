use serde_json::json;

use super::*;
use crate::overrides::{
    ClusterResourceOverrideSnapshotSpec, ClusterResourceOverrideSpec, ResourceOverrideSnapshotSpec,
    ResourceOverrideSpec,
};

fn cluster(name: &str, labels: &[(&str, &str)]) -> ClusterInfo {
    ClusterInfo {
        name: name.into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn deployment() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "app"},
           "spec": {"replicas": 3, "template": {"spec": {"containers": [
               {"name": "web", "image": "hub.example/web:1"}]}}}})
}

fn config_map() -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "settings", "namespace": "app"}, "data": {"a": "1"}})
}

fn namespace() -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}})
}

/// A ResourceOverride snapshot in `app` from its spec as JSON.
fn ro(name: &str, spec: Value) -> ResourceOverrideSnapshot {
    let spec: ResourceOverrideSpec = serde_json::from_value(spec).unwrap();
    let mut s = ResourceOverrideSnapshot::new(
        &format!("{name}-0"),
        ResourceOverrideSnapshotSpec {
            override_name: name.into(),
            index: 0,
            override_spec: spec,
        },
    );
    s.metadata.namespace = Some("app".into());
    s
}

fn cro(name: &str, spec: Value) -> ClusterResourceOverrideSnapshot {
    let spec: ClusterResourceOverrideSpec = serde_json::from_value(spec).unwrap();
    ClusterResourceOverrideSnapshot::new(
        &format!("{name}-0"),
        ClusterResourceOverrideSnapshotSpec {
            override_name: name.into(),
            index: 0,
            override_spec: spec,
        },
    )
}

fn deployment_selector() -> Value {
    json!([{"group": "apps", "version": "v1", "kind": "Deployment", "name": "web"}])
}

fn production_image() -> ResourceOverrideSnapshot {
    ro(
        "image",
        json!({"resourceSelectors": deployment_selector(), "policy": {"overrideRules": [
            {"clusterSelector": {"clusterSelectorTerms": [{"labelSelector": {"matchLabels": {"environment": "production"}}}]},
             "jsonPatchOverrides": [{"op": "replace", "path": "/spec/template/spec/containers/0/image",
                                     "value": "${MEMBER-CLUSTER-LABEL-KEY-region}.example/web:1"}]}]}}),
    )
}

#[test]
fn a_rule_changes_only_the_clusters_its_selector_matches() {
    let snap = production_image();
    let overrides = [Override::namespaced(&snap)];
    let manifests = [namespace(), deployment(), config_map()];
    let prod = cluster("prod-1", &[("environment", "production"), ("region", "eu")]);
    let applied = apply(&manifests, &overrides, "web", &prod).unwrap();
    assert_eq!(
        applied.manifests[1]["spec"]["template"]["spec"]["containers"][0]["image"],
        "eu.example/web:1"
    );
    assert_eq!(applied.manifests[0], manifests[0]);
    assert_eq!(applied.manifests[2], manifests[2]);
    assert_eq!(applied.used, ["image-0"]);

    let staging = cluster("staging-1", &[("environment", "staging")]);
    let untouched = apply(&manifests, &overrides, "web", &staging).unwrap();
    assert_eq!(untouched.manifests, manifests);
    assert!(untouched.used.is_empty());
    // Limited to another placement: nothing changes.
    let mut other = production_image();
    other.spec.override_spec.placement = Some(crate::overrides::PlacementRef {
        name: "other".into(),
    });
    let scoped = [Override::namespaced(&other)];
    assert_eq!(
        apply(&manifests, &scoped, "web", &prod).unwrap().manifests,
        manifests
    );
}

#[test]
fn variables_become_each_clusters_own_values() {
    let snap = ro(
        "names",
        json!({"resourceSelectors": [{"group": "", "version": "v1", "kind": "ConfigMap", "name": "settings"}],
               "policy": {"overrideRules": [{"jsonPatchOverrides": [
                   {"op": "add", "path": "/data/cluster", "value": "${MEMBER-CLUSTER-NAME}"},
                   {"op": "add", "path": "/data/where", "value": {"region": "in ${MEMBER-CLUSTER-LABEL-KEY-region}"}}]}]}}),
    );
    let overrides = [Override::namespaced(&snap)];
    let eu = cluster("member-1", &[("region", "eu")]);
    let applied = apply(&[config_map()], &overrides, "web", &eu).unwrap();
    assert_eq!(applied.manifests[0]["data"]["cluster"], "member-1");
    assert_eq!(applied.manifests[0]["data"]["where"]["region"], "in eu");
    assert_eq!(applied.manifests[0]["data"]["a"], "1");

    let unlabelled = cluster("member-2", &[]);
    let err = apply(&[config_map()], &overrides, "web", &unlabelled).unwrap_err();
    assert_eq!(err.override_, "ResourceOverride app/names");
    assert_eq!(err.rule, 0);
    assert!(
        err.to_string().contains("add /data/where") && err.reason.contains("\"region\""),
        "{err}"
    );
}

#[test]
fn delete_keeps_the_object_off_the_selected_clusters_only() {
    let snap = ro(
        "no-settings-at-the-edge",
        json!({"resourceSelectors": [{"group": "", "version": "v1", "kind": "ConfigMap", "name": "settings"}],
               "policy": {"overrideRules": [{"overrideType": "Delete",
                   "clusterSelector": {"clusterSelectorTerms": [
                       {"labelSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["edge"]}]}}]}}]}}),
    );
    let overrides = [Override::namespaced(&snap)];
    let manifests = [deployment(), config_map()];
    let edge = cluster("e", &[("tier", "edge")]);
    let applied = apply(&manifests, &overrides, "web", &edge).unwrap();
    assert_eq!(applied.manifests, [deployment()]);
    assert_eq!(applied.used, ["no-settings-at-the-edge-0"]);
    let core = cluster("c", &[("tier", "core")]);
    assert_eq!(
        apply(&manifests, &overrides, "web", &core)
            .unwrap()
            .manifests,
        manifests
    );
}

#[test]
fn patches_add_append_remove_and_replace_with_escaped_paths() {
    let snap = ro(
        "ops",
        json!({"resourceSelectors": deployment_selector(), "policy": {"overrideRules": [{"jsonPatchOverrides": [
            {"op": "add", "path": "/metadata/annotations", "value": {}},
            {"op": "add", "path": "/metadata/annotations/example.com~1team", "value": "web"},
            {"op": "add", "path": "/spec/template/spec/containers/-", "value": {"name": "sidecar"}},
            {"op": "add", "path": "/spec/template/spec/containers/0/args", "value": ["--fast"]},
            {"op": "replace", "path": "/spec/replicas", "value": 1},
            {"op": "remove", "path": "/spec/template/spec/containers/0/image"}]}]}}),
    );
    let applied = apply(
        &[deployment()],
        &[Override::namespaced(&snap)],
        "web",
        &cluster("m", &[]),
    )
    .unwrap();
    let d = &applied.manifests[0];
    assert_eq!(d["metadata"]["annotations"]["example.com/team"], "web");
    assert_eq!(d["spec"]["replicas"], 1);
    let containers = d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(containers.len(), 2);
    assert_eq!(containers[1]["name"], "sidecar");
    assert_eq!(containers[0]["args"], json!(["--fast"]));
    assert!(containers[0].get("image").is_none());
}

#[test]
fn a_path_the_object_lacks_fails_naming_the_override_rule_and_path() {
    let snap = ro(
        "bad",
        json!({"resourceSelectors": deployment_selector(), "policy": {"overrideRules": [
            {"clusterSelector": {"clusterSelectorTerms": []},
             "jsonPatchOverrides": [{"op": "replace", "path": "/spec/replicas", "value": 2}]},
            {"jsonPatchOverrides": [{"op": "replace", "path": "/spec/template/spec/containers/5/image", "value": "x"}]}]}}),
    );
    let err = apply(
        &[deployment()],
        &[Override::namespaced(&snap)],
        "web",
        &cluster("m", &[]),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "ResourceOverride app/bad rule 1 on Deployment app/web: replace /spec/template/spec/containers/5/image: the object has no such path"
    );
    let remove = ro(
        "gone",
        json!({"resourceSelectors": deployment_selector(), "policy": {"overrideRules": [
            {"jsonPatchOverrides": [{"op": "remove", "path": "/spec/paused"}]}]}}),
    );
    let err = apply(
        &[deployment()],
        &[Override::namespaced(&remove)],
        "web",
        &cluster("m", &[]),
    )
    .unwrap_err();
    assert!(err.reason.starts_with("remove /spec/paused"), "{err}");
    let valueless = ro(
        "valueless",
        json!({"resourceSelectors": deployment_selector(), "policy": {"overrideRules": [
            {"jsonPatchOverrides": [{"op": "replace", "path": "/spec/replicas"}]}]}}),
    );
    let err = apply(
        &[deployment()],
        &[Override::namespaced(&valueless)],
        "web",
        &cluster("m", &[]),
    )
    .unwrap_err();
    assert_eq!(err.reason, "replace /spec/replicas: a value is required");
}

#[test]
fn cluster_scoped_overrides_apply_first_then_namespaced_by_name() {
    let label = |name: &str, value: &str| {
        ro(
            name,
            json!({"resourceSelectors": deployment_selector(), "policy": {"overrideRules": [
                {"jsonPatchOverrides": [{"op": "add", "path": "/metadata/labels", "value": {"last": value}}]}]}}),
        )
    };
    let (b, a) = (label("b", "b"), label("a", "a"));
    let ns = cro(
        "ns",
        json!({"clusterResourceSelectors": [{"group": "", "version": "v1", "kind": "Namespace", "name": "app"}],
               "policy": {"overrideRules": [{"jsonPatchOverrides": [
                   {"op": "add", "path": "/metadata/labels", "value": {"owner": "${MEMBER-CLUSTER-NAME}"}}]}]}}),
    );
    let mut overrides = vec![
        Override::namespaced(&b),
        Override::namespaced(&a),
        Override::cluster(&ns),
    ];
    order(&mut overrides);
    let names: Vec<&str> = overrides.iter().map(|o| o.name).collect();
    assert_eq!(names, ["ns", "a", "b"]);
    let applied = apply(
        &[namespace(), deployment()],
        &overrides,
        "web",
        &cluster("m1", &[]),
    )
    .unwrap();
    assert_eq!(applied.manifests[0]["metadata"]["labels"]["owner"], "m1");
    // b, applied after a, wins.
    assert_eq!(applied.manifests[1]["metadata"]["labels"]["last"], "b");
    assert_eq!(applied.used, ["ns-0", "a-0", "b-0"]);
    // A ClusterResourceOverride never selects a namespaced object, nor a ResourceOverride an
    // object in another namespace.
    assert!(!Override::cluster(&ns).selects(&config_map()));
    let mut elsewhere = deployment();
    elsewhere["metadata"]["namespace"] = json!("other");
    assert!(!Override::namespaced(&a).selects(&elsewhere));
}

fn indexed(name: &str, index: i64) -> ResourceOverrideSnapshot {
    let mut s = production_image();
    s.metadata.name = Some(format!("{name}-{index}"));
    s.spec.override_name = name.into();
    s.spec.index = index;
    s
}

fn bound_by_run(snapshots: &[(&str, &str)]) -> BindingSpec {
    BindingSpec {
        placement_name: "web".into(),
        target_cluster: "m".into(),
        update_run_name: Some("run-1".into()),
        resource_override_snapshots: snapshots
            .iter()
            .map(|(namespace, name)| NamespacedName {
                name: name.to_string(),
                namespace: namespace.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn a_run_bound_binding_keeps_its_snapshots_and_others_follow_the_newest() {
    let all = [
        indexed("image", 0),
        indexed("image", 1),
        indexed("other", 0),
    ];
    let fixed = bound_by_run(&[("app", "image-0"), ("app", "gone-3")]);
    let chosen = choose(
        Some(&fixed),
        std::iter::empty::<&ClusterResourceOverrideSnapshot>(),
        all.iter(),
    );
    let names: Vec<String> = chosen.namespaced.iter().map(|s| s.name_any()).collect();
    assert_eq!(names, ["image-0"]);
    assert_eq!(chosen.missing, ["app/gone-3"]);
    assert_eq!(chosen.key(), "app/image-0");

    let following = BindingSpec {
        update_run_name: None,
        ..fixed.clone()
    };
    for binding in [Some(&following), None] {
        let chosen = choose(
            binding,
            std::iter::empty::<&ClusterResourceOverrideSnapshot>(),
            all.iter(),
        );
        let mut names: Vec<String> = chosen.namespaced.iter().map(|s| s.name_any()).collect();
        names.sort();
        assert_eq!(names, ["image-1", "other-0"]);
        assert!(chosen.missing.is_empty());
    }
}

#[test]
fn the_overridden_condition_reads_back_as_written() {
    use crate::conditions::{Condition, set_condition};
    let read = |result: &Result<Applied, OverrideError>| {
        let mut conditions: Vec<Condition> = Vec::new();
        set_condition(
            &mut conditions,
            overridden_condition("m", result, Some(1)),
            jiff::Timestamp::UNIX_EPOCH,
        );
        Overridden::of(&conditions)
    };
    assert_eq!(read(&Ok(Applied::default())), Overridden::None);
    let used = Applied {
        manifests: vec![],
        used: vec!["ns-0".into(), "image-2".into()],
    };
    assert_eq!(
        read(&Ok(used)),
        Overridden::Applied(vec!["ns-0".into(), "image-2".into()])
    );
    let err = OverrideError {
        override_: "ResourceOverride app/bad".into(),
        rule: 1,
        object: "Deployment app/web".into(),
        reason: "replace /x: the object has no such path".into(),
    };
    let Overridden::Failed(message) = read(&Err(err)) else {
        panic!("a failure reads as one")
    };
    assert!(
        message.starts_with("ResourceOverride app/bad rule 1 on Deployment app/web"),
        "{message}"
    );
    assert_eq!(Overridden::of(&[]), Overridden::Unknown);
}
