//! `kubectl fleet render PLACEMENT --cluster NAME [--snapshot N] [--diff]` against the real
//! fleet: for each of member-1..3 (staging, canary, production, each with its real agent) the
//! render is exactly the Work the hub wrote for it and what the member runs, with the override
//! snapshots the run fixed even after the override was edited; `--diff` shows only what the
//! overrides changed; errors name the missing object.

#[path = "../../tests/common/mod.rs"]
mod common;
mod support;

use common::TIMEOUT;
use common::real::{Rollout, kubectl_apply};
use fleethub_crds::overrides::ResourceOverrideSnapshot;
use fleethub_crds::{Work, names};
use fleethub_testkit::{Fleet, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde::Deserialize;
use serde_json::{Value, json};
use support::{plugin, plugin_err, plugin_ok};

/// ResourceOverride `name` of the rollout's object `web` of `kind` (group, kind).
fn resource_override(ns: &str, name: &str, kind: (&str, &str), rules: Value) -> Value {
    let (group, kind) = kind;
    json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "ResourceOverride",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"resourceSelectors": [{"group": group, "version": "v1", "kind": kind, "name": "web"}],
                    "policy": {"overrideRules": rules}}})
}

fn image_override(ns: &str, image: &str) -> Value {
    resource_override(
        ns,
        "image",
        ("apps", "Deployment"),
        json!([{"clusterSelector": {"clusterSelectorTerms": [{"labelSelector": {"matchLabels": {"environment": "production"}}}]},
                "jsonPatchOverrides": [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": image}]}]),
    )
}

/// The YAML documents of a render (its comment lines are YAML comments).
fn documents(yaml: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(yaml)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

fn find<'a>(manifests: &'a [Value], kind: &str) -> &'a Value {
    manifests
        .iter()
        .find(|m| m["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {manifests:?}"))
}

async fn wait_snapshot(hub: &kube::Client, ns: &str, name: &str) {
    wait_for(
        &Api::<ResourceOverrideSnapshot>::namespaced(hub.clone(), ns),
        name,
        name,
        TIMEOUT,
        |s: Option<&ResourceOverrideSnapshot>| s.is_some(),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn the_render_is_what_each_member_got() {
    let fleet = Fleet::get().unwrap();
    let r = Rollout::new(
        fleet,
        "kfrender",
        "hub.invalid/web:1",
        [json!([]), json!([]), json!([])],
    )
    .await;
    kubectl_apply(fleet, &image_override(&r.ns, "prod.invalid/web:1"));
    kubectl_apply(
        fleet,
        &resource_override(
            &r.ns,
            "names",
            ("", "ConfigMap"),
            json!([{"jsonPatchOverrides": [
                {"op": "add", "path": "/data/cluster", "value": "${MEMBER-CLUSTER-NAME}"}]}]),
        ),
    );
    wait_snapshot(&r.hub, &r.ns, "image-0").await;
    wait_snapshot(&r.hub, &r.ns, "names-0").await;

    // Before any run: the newest snapshots, and the render says why.
    let before = plugin_ok(fleet, &["render", &r.placement, "--cluster", "member-3"]);
    assert!(
        before.contains("# overrides: the newest snapshot of every override (no UpdateRun fixed cluster member-3's overrides)"),
        "{before}"
    );

    let run = r.run_to_success("a", 0).await;
    let run_name = kube::ResourceExt::name_any(&run);
    // Edited after the run: the clusters keep image-0, and so does the render.
    kubectl_apply(fleet, &image_override(&r.ns, "prod.invalid/web:2"));
    wait_snapshot(&r.hub, &r.ns, "image-1").await;

    for (i, member) in ["member-1", "member-2", "member-3"].iter().enumerate() {
        let out = plugin_ok(fleet, &["render", &r.placement, "--cluster", member]);
        assert!(
            out.starts_with(&format!(
                "# placement {}, cluster {member}: resource snapshot 0 (the one cluster {member}'s Binding points at)\n",
                r.placement
            )),
            "{out}"
        );
        assert!(
            out.contains(&format!("UpdateRun {run_name} bound cluster {member} to")),
            "{out}"
        );
        let rendered = documents(&out);
        // Exactly the Work the hub wrote for the cluster.
        let work = Api::<Work>::namespaced(r.hub.clone(), &names::member_namespace(member))
            .get(&names::work_name(&r.placement))
            .await
            .unwrap();
        assert_eq!(rendered, work.spec.workload.manifests, "{member}: {out}");
        // The overrides are the hub's instructions: they are not sent with the namespace.
        assert!(
            !rendered
                .iter()
                .any(|m| m["kind"].as_str().is_some_and(|k| k.contains("Override"))),
            "{member}: {out}"
        );
        // And what the member runs.
        let want_image = if *member == "member-3" {
            "prod.invalid/web:1"
        } else {
            "hub.invalid/web:1"
        };
        let deployment = find(&rendered, "Deployment");
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"][0]["image"],
            want_image
        );
        assert_eq!(find(&rendered, "ConfigMap")["data"]["cluster"], *member);
        let client = fleet.member(i + 1).await.unwrap();
        let on_member = wait_for(
            &Api::<Deployment>::namespaced(client.clone(), &r.ns),
            "web",
            &format!("web with {want_image} on {member}"),
            TIMEOUT,
            |d: Option<&Deployment>| {
                d.and_then(common::real::image_of).as_deref() == Some(want_image)
            },
        )
        .await;
        assert!(on_member.is_ok(), "{member}: {on_member:?}");
        let cm = Api::<ConfigMap>::namespaced(client, &r.ns)
            .get("web")
            .await
            .unwrap();
        assert_eq!(cm.data.unwrap()["cluster"], *member);
    }

    // --diff: what the overrides changed, against the hub's template.
    let diff = plugin_ok(
        fleet,
        &["render", &r.placement, "--cluster", "member-3", "--diff"],
    );
    assert!(
        diff.contains(&format!(
            "--- hub/{} (snapshot 0)\n+++ member-3/{}\n",
            r.placement, r.placement
        )),
        "{diff}"
    );
    assert!(
        diff.contains("\n-      - image: hub.invalid/web:1\n")
            && diff.contains("\n+      - image: prod.invalid/web:1\n")
            && diff.contains("\n+  cluster: member-3\n"),
        "{diff}"
    );
    let staging = plugin_ok(
        fleet,
        &[
            "render",
            &r.placement,
            "--cluster",
            "member-1",
            "--snapshot",
            "0",
            "--diff",
        ],
    );
    assert!(
        !staging.contains("image:") && staging.contains("\n+  cluster: member-1\n"),
        "{staging}"
    );

    // Errors name the object (exit 1); bad usage exits 2.
    let err = plugin_err(
        fleet,
        &[
            "render",
            &r.placement,
            "--cluster",
            "member-1",
            "--snapshot",
            "7",
        ],
    );
    assert!(
        err.contains(&format!(
            "ResourceSnapshot {} (snapshot 7 of placement {}) not found",
            names::resource_snapshot_name(&r.placement, 7),
            r.placement
        )),
        "{err}"
    );
    let err = plugin_err(
        fleet,
        &["render", "no-such-placement", "--cluster", "member-1"],
    );
    assert!(
        err.contains("placement no-such-placement not found"),
        "{err}"
    );
    let err = plugin_err(
        fleet,
        &["render", &r.placement, "--cluster", "no-such-member"],
    );
    assert!(
        err.contains("membercluster no-such-member not found"),
        "{err}"
    );
    let usage = plugin(fleet, &["render", &r.placement]);
    assert_eq!(usage.status.code(), Some(2));
}
