use serde_json::json;

use super::*;
use crate::binding::{BindingSpec, BindingState, NamespacedName};
use crate::member_cluster::MemberClusterSpec;
use crate::overrides::{ResourceOverrideSnapshotSpec, ResourceOverrideSpec};
use crate::placement::PlacementStatus;
use crate::resource_snapshot::ResourceSnapshotSpec;

fn member(name: &str, environment: &str) -> MemberCluster {
    let mut m = MemberCluster::new(name, MemberClusterSpec::default());
    m.metadata.labels = Some([("environment".to_string(), environment.to_string())].into());
    m
}

fn placement(latest: Option<i64>) -> Placement {
    let mut p = Placement::new("web", Default::default());
    p.status = Some(PlacementStatus {
        latest_resource_snapshot_index: latest,
        ..Default::default()
    });
    p
}

fn template() -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "app"},
               "spec": {"replicas": 3, "template": {"spec": {"containers": [
                   {"name": "web", "image": "hub.example/web:1"}]}}}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "debug", "namespace": "app"}, "data": {"level": "debug"}}),
    ]
}

/// Snapshot `index` of ResourceOverride `app/image`: production gets `image`.
fn image_override(index: i64, image: &str) -> ResourceOverrideSnapshot {
    let spec: ResourceOverrideSpec = serde_json::from_value(json!({
        "resourceSelectors": [{"group": "apps", "version": "v1", "kind": "Deployment", "name": "web"}],
        "policy": {"overrideRules": [
            {"clusterSelector": {"clusterSelectorTerms": [{"labelSelector": {"matchLabels": {"environment": "production"}}}]},
             "jsonPatchOverrides": [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": image}]}]}}))
    .unwrap();
    let mut s = ResourceOverrideSnapshot::new(
        &format!("image-{index}"),
        ResourceOverrideSnapshotSpec {
            override_name: "image".into(),
            index,
            override_spec: spec,
        },
    );
    s.metadata.namespace = Some("app".into());
    s
}

fn binding(run: Option<&str>, snapshots: &[&str]) -> Binding {
    Binding::new(
        "web-prod-1",
        BindingSpec {
            placement_name: "web".into(),
            target_cluster: "prod-1".into(),
            state: BindingState::Bound,
            resource_snapshot_index: Some(2),
            update_run_name: run.map(Into::into),
            resource_override_snapshots: snapshots
                .iter()
                .map(|n| NamespacedName {
                    name: n.to_string(),
                    namespace: "app".into(),
                })
                .collect(),
            ..Default::default()
        },
    )
}

fn inputs(binding: Option<Binding>, cluster: MemberCluster) -> Inputs {
    Inputs {
        placement: placement(Some(2)),
        cluster,
        binding,
        index: 2,
        index_source: "test".into(),
        template: template(),
        cluster_overrides: vec![],
        namespaced_overrides: vec![
            image_override(0, "prod.example/web:a"),
            image_override(1, "prod.example/web:b"),
        ],
    }
}

fn image(m: &Value) -> &str {
    m["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap()
}

#[test]
fn a_run_bound_cluster_gets_the_snapshots_its_binding_names() {
    let r = render(&inputs(
        Some(binding(Some("run-1"), &["image-0"])),
        member("prod-1", "production"),
    ));
    let applied = r.result.as_ref().unwrap();
    assert_eq!(image(&applied.manifests[1]), "prod.example/web:a");
    assert_eq!(applied.used, ["image-0"]);
    assert_eq!(r.considered, ["app/image-0"]);
    let notes = r.notes().join("\n");
    assert!(
        notes.contains("UpdateRun run-1 bound cluster prod-1 to"),
        "{notes}"
    );
    assert!(notes.contains("applied: image-0"), "{notes}");
}

#[test]
fn without_a_run_the_newest_snapshots_count_and_the_render_says_so() {
    for b in [Some(binding(None, &[])), None] {
        let no_binding = b.is_none();
        let r = render(&inputs(b, member("prod-1", "production")));
        let applied = r.result.as_ref().unwrap();
        assert_eq!(image(&applied.manifests[1]), "prod.example/web:b");
        let notes = r.notes().join("\n");
        assert!(
            notes.contains("the newest snapshot of every override"),
            "{notes}"
        );
        assert_eq!(notes.contains("has no Binding"), no_binding, "{notes}");
    }
}

#[test]
fn the_diff_shows_only_what_the_overrides_changed() {
    let mut i = inputs(None, member("prod-1", "production"));
    // A second override keeps the debug ConfigMap off production.
    let mut debug_off = image_override(0, "unused");
    debug_off.metadata.name = Some("debug-off-0".into());
    debug_off.spec.override_name = "debug-off".into();
    debug_off.spec.override_spec = serde_json::from_value(json!({
        "resourceSelectors": [{"group": "", "version": "v1", "kind": "ConfigMap", "name": "debug"}],
        "policy": {"overrideRules": [{
            "clusterSelector": {"clusterSelectorTerms": [{"labelSelector": {"matchLabels": {"environment": "production"}}}]},
            "overrideType": "Delete"}]}}))
    .unwrap();
    i.namespaced_overrides.push(debug_off);
    let r = render(&i);
    let diff = r.diff().unwrap();
    assert!(
        diff.starts_with("--- hub/web (snapshot 2)\n+++ prod-1/web\n"),
        "{diff}"
    );
    assert!(
        diff.contains("\n-      - image: hub.example/web:1\n"),
        "{diff}"
    );
    assert!(
        diff.contains("\n+      - image: prod.example/web:b\n"),
        "{diff}"
    );
    assert!(diff.contains("\n-  level: debug\n"), "{diff}");
    assert!(!diff.contains("\n-kind: Namespace"), "{diff}");
    assert!(r.notes().iter().any(|n| n.contains("1 object(s) kept off")));
    // The YAML is the manifests, documents separated.
    let yaml = r.yaml().unwrap();
    assert_eq!(yaml.matches("---\n").count(), 1, "{yaml}");
    assert!(yaml.contains("image: prod.example/web:b"), "{yaml}");

    // A staging cluster gets the template: an empty diff.
    let r = render(&inputs(None, member("staging-1", "staging")));
    assert_eq!(r.diff().unwrap(), "");
    assert_eq!(r.yaml().unwrap(), yaml_of(&template()));
}

fn yaml_of(manifests: &[Value]) -> String {
    super::yaml(manifests)
}

#[test]
fn a_rule_that_cannot_apply_is_the_render_s_error() {
    let mut i = inputs(None, member("prod-1", "production"));
    i.template[1]["spec"]["template"]["spec"]["containers"] = json!([]);
    let r = render(&i);
    let err = r.yaml().unwrap_err();
    assert!(
        err.to_string()
            .starts_with("ResourceOverride app/image rule 0 on Deployment app/web: replace /spec/template/spec/containers/0/image"),
        "{err}"
    );
}

#[test]
fn the_snapshot_is_the_one_asked_for_the_bindings_or_the_newest() {
    let b = binding(None, &[]);
    let p = placement(Some(5));
    assert_eq!(snapshot_index(Some(1), Some(&b), &p, "c").unwrap().0, 1);
    let (i, why) = snapshot_index(None, Some(&b), &p, "c").unwrap();
    assert_eq!(
        (i, why.as_str()),
        (2, "the one cluster c's Binding points at")
    );
    let (i, why) = snapshot_index(None, None, &p, "c").unwrap();
    assert_eq!(i, 5);
    assert!(why.contains("has no Binding"), "{why}");
    let err = snapshot_index(None, None, &placement(None), "c").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("placement web has no resource snapshot yet"),
        "{err}"
    );
}

#[test]
fn a_snapshot_in_parts_is_put_together_in_order_or_names_the_missing_part() {
    let part = |n: i32, name: &str| {
        ResourceSnapshot::new(
            &format!("web-2-{n}"),
            ResourceSnapshotSpec {
                placement_name: "web".into(),
                resource_index: 2,
                part: n,
                parts: 3,
                resources: vec![json!({"kind": "ConfigMap", "metadata": {"name": name}})],
                ..Default::default()
            },
        )
    };
    let manifests = snapshot_manifests(&part(0, "a"), vec![part(2, "c"), part(1, "b")]).unwrap();
    let names: Vec<&str> = manifests
        .iter()
        .map(|m| m["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b", "c"]);
    let err = snapshot_manifests(&part(0, "a"), vec![part(2, "c")]).unwrap_err();
    assert!(
        err.to_string().contains("part 1 of 3 of snapshot 2"),
        "{err}"
    );
}
