//! Drift and takeover on real members (member-1..3: each its own API server, controller manager
//! and kwok nodes, with the real member agent): objects edited or deleted on a member with the
//! real `kubectl` are restored and the correction recorded; a second field manager's `replicas`
//! is not fought; `whenToApply: IfNotDrifted` leaves the edit, reports it and fails a later run
//! naming the field; `whenToTakeOver` decides about a pre-existing object; `ReportDiff` applies
//! nothing; invalid values are refused at admission.

mod common;

use std::time::Duration;

use common::TIMEOUT;
use common::real::{Rollout, kubectl_apply};
use fleethub_crds::apply_strategy::DriftType;
use fleethub_crds::work::ManifestCondition;
use fleethub_crds::{UpdateRun, Work, names};
use fleethub_testkit::{Cleanup, Fleet, unique_name, wait_for};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::{Value, json};

/// Runs the real kubectl against member `i`; asserts it succeeded.
fn kubectl_member(fleet: &Fleet, i: usize, args: &[&str]) -> String {
    common::kubectl_on(fleet, &format!("member-{i}"), args)
}

/// Namespace `<id>` on the hub with ConfigMap `web` (greeting hello) and Deployment `web`
/// (2 replicas), placed with `RollingUpdate` on `clusters` with `apply_strategy`; dropping the
/// returned guard removes it from the hub and (through the placement) from the members.
struct Placed {
    id: String,
    hub: Client,
    _cleanup: Cleanup,
}

impl Placed {
    async fn new(fleet: &Fleet, prefix: &str, clusters: &[&str], apply_strategy: Value) -> Self {
        let hub = fleet.hub().await.unwrap();
        let id = unique_name(prefix);
        let cleanup = Cleanup::new(fleet);
        cleanup.track::<Namespace>("hub", None, &id);
        cleanup.track::<fleethub_crds::Placement>("hub", None, &id);
        Api::<Namespace>::all(hub.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": id}})).unwrap(),
            )
            .await
            .unwrap();
        kubectl_apply(
            fleet,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web", "namespace": id},
                    "data": {"greeting": "hello"}}),
        );
        kubectl_apply(
            fleet,
            &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": id},
                    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                             "template": {"metadata": {"labels": {"app": "web"}},
                                          "spec": {"containers": [{"name": "web", "image": "registry.invalid/web:1"}]}}}}),
        );
        kubectl_apply(
            fleet,
            &json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "Placement", "metadata": {"name": id},
                    "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Namespace", "name": id}],
                             "policy": {"placementType": "PickFixed", "clusterNames": clusters},
                             "strategy": {"type": "RollingUpdate", "applyStrategy": apply_strategy}}}),
        );
        Placed {
            id,
            hub,
            _cleanup: cleanup,
        }
    }

    fn works(&self, cluster: &str) -> Api<Work> {
        Api::namespaced(self.hub.clone(), &names::member_namespace(cluster))
    }

    /// Waits until the Work on `cluster` satisfies `check` on its ConfigMap's manifest status.
    async fn wait_manifest(
        &self,
        cluster: &str,
        kind: &str,
        what: &str,
        check: impl Fn(&ManifestCondition) -> bool,
    ) -> Work {
        let work = names::work_name(&self.id);
        wait_for(
            &self.works(cluster),
            &work,
            what,
            TIMEOUT,
            |w: Option<&Work>| {
                w.and_then(|w| w.status.as_ref()).is_some_and(|s| {
                    s.manifest_conditions
                        .iter()
                        .any(|m| m.identifier.kind == kind && check(m))
                })
            },
        )
        .await
        .unwrap()
    }
}

/// Waits until ConfigMap `ns/web` on `member` has `greeting`.
async fn wait_greeting(member: &Client, ns: &str, greeting: &str) {
    let cms: Api<ConfigMap> = Api::namespaced(member.clone(), ns);
    wait_for(
        &cms,
        "web",
        &format!("greeting {greeting}"),
        TIMEOUT,
        |c: Option<&ConfigMap>| {
            c.and_then(|c| c.data.as_ref())
                .is_some_and(|d| d.get("greeting").map(String::as_str) == Some(greeting))
        },
    )
    .await
    .unwrap();
}

fn replicas(d: Option<&Deployment>) -> Option<i32> {
    d?.spec.as_ref()?.replicas
}

#[tokio::test]
async fn objects_changed_or_deleted_on_a_member_are_restored_and_the_correction_recorded() {
    let fleet = Fleet::get().unwrap();
    let p = Placed::new(fleet, "drift", &["member-1"], json!({})).await;
    let member = fleet.member(1).await.unwrap();
    wait_greeting(&member, &p.id, "hello").await;
    let deployments: Api<Deployment> = Api::namespaced(member.clone(), &p.id);
    wait_for(
        &deployments,
        "web",
        "the Deployment",
        TIMEOUT,
        |d: Option<&Deployment>| replicas(d) == Some(2),
    )
    .await
    .unwrap();

    // A person edits the ConfigMap and scales the Deployment with kubectl.
    kubectl_member(
        fleet,
        1,
        &[
            "-n",
            &p.id,
            "patch",
            "configmap",
            "web",
            "-p",
            r#"{"data":{"greeting":"hi"}}"#,
        ],
    );
    kubectl_member(
        fleet,
        1,
        &["-n", &p.id, "scale", "deployment", "web", "--replicas=5"],
    );
    wait_greeting(&member, &p.id, "hello").await;
    wait_for(
        &deployments,
        "web",
        "replicas restored to 2",
        TIMEOUT,
        |d: Option<&Deployment>| replicas(d) == Some(2),
    )
    .await
    .unwrap();
    let corrected = |path: &'static str, member: &'static str| {
        move |m: &ManifestCondition| {
            m.last_correction.as_ref().is_some_and(|c| {
                c.fields
                    .iter()
                    .any(|f| f.path == path && f.member_value.as_deref() == Some(member))
            })
        }
    };
    let work = p
        .wait_manifest(
            "member-1",
            "ConfigMap",
            "the ConfigMap's correction",
            corrected("data.greeting", "\"hi\""),
        )
        .await;
    let cm = work
        .status
        .unwrap()
        .manifest_conditions
        .into_iter()
        .find(|m| m.identifier.kind == "ConfigMap")
        .unwrap();
    assert_eq!(
        cm.last_correction.unwrap().fields[0].hub_value.as_deref(),
        Some("\"hello\"")
    );
    p.wait_manifest(
        "member-1",
        "Deployment",
        "the Deployment's correction",
        corrected("spec.replicas", "5"),
    )
    .await;

    // Deleted on the member: created again.
    kubectl_member(fleet, 1, &["-n", &p.id, "delete", "configmap", "web"]);
    p.wait_manifest("member-1", "ConfigMap", "the deletion's correction", |m| {
        m.last_correction
            .as_ref()
            .is_some_and(|c| c.fields.iter().any(|f| f.path == "."))
    })
    .await;
    wait_greeting(&member, &p.id, "hello").await;
}

#[tokio::test]
async fn replicas_owned_by_a_second_field_manager_are_not_fought() {
    let fleet = Fleet::get().unwrap();
    let p = Placed::new(fleet, "autoscaled", &["member-2"], json!({})).await;
    let member = fleet.member(2).await.unwrap();
    wait_greeting(&member, &p.id, "hello").await;
    let deployments: Api<Deployment> = Api::namespaced(member.clone(), &p.id);
    wait_for(
        &deployments,
        "web",
        "the Deployment",
        TIMEOUT,
        |d: Option<&Deployment>| replicas(d) == Some(2),
    )
    .await
    .unwrap();
    // An autoscaler takes replicas over with its own server-side apply.
    let scaled = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                        "spec": {"replicas": 4}});
    deployments
        .patch(
            "web",
            &PatchParams::apply("autoscaler-test").force(),
            &Patch::Apply(&scaled),
        )
        .await
        .unwrap();
    // A change on the hub is still applied (the image), but replicas stay the autoscaler's.
    kubectl_apply(
        fleet,
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": p.id},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                         "template": {"metadata": {"labels": {"app": "web"}},
                                      "spec": {"containers": [{"name": "web", "image": "registry.invalid/web:2"}]}}}}),
    );
    let image = |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| s.containers[0].image.clone())
    };
    wait_for(
        &deployments,
        "web",
        "the new image",
        TIMEOUT,
        |d: Option<&Deployment>| d.and_then(image).as_deref() == Some("registry.invalid/web:2"),
    )
    .await
    .unwrap();
    // Observed for a while: replicas never go back to 2 (every change is seen by the watch).
    let mut changes = watcher(
        deployments.clone(),
        watcher::Config::default().fields("metadata.name=web"),
    )
    .applied_objects()
    .boxed();
    let observe = async {
        while let Some(Ok(d)) = changes.next().await {
            assert_eq!(
                replicas(Some(&d)),
                Some(4),
                "the agent fought the autoscaler"
            );
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(15), observe).await;
    let work = p
        .works("member-2")
        .get(&names::work_name(&p.id))
        .await
        .unwrap();
    let status = work.status.unwrap();
    assert!(
        status
            .manifest_conditions
            .iter()
            .all(|m| m.drift.is_none() && m.last_correction.is_none()),
        "an autoscaler's replicas are not drift: {:?}",
        status.manifest_conditions
    );
}

#[tokio::test]
async fn if_not_drifted_leaves_the_edit_reports_it_and_a_later_run_fails_naming_the_field() {
    let fleet = Fleet::get().unwrap();
    let r = Rollout::new(
        fleet,
        "ifnotdrifted",
        "registry.invalid/web:1",
        [json!([]), json!([]), json!([])],
    )
    .await;
    // The same placement, now with whenToApply: IfNotDrifted (same field manager as Rollout's).
    kubectl_apply(
        fleet,
        &json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "Placement", "metadata": {"name": r.placement},
                "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Namespace", "name": r.ns}],
                         "policy": {"placementType": "PickFixed", "clusterNames": ["member-1", "member-2", "member-3"]},
                         "strategy": {"type": "External", "applyStrategy": {"whenToApply": "IfNotDrifted"}}}}),
    );
    r.run_to_success("v1", 0).await;
    let member = fleet.member(1).await.unwrap();
    wait_greeting(&member, &r.ns, "hello").await;
    kubectl_member(
        fleet,
        1,
        &[
            "-n",
            &r.ns,
            "patch",
            "configmap",
            "web",
            "-p",
            r#"{"data":{"greeting":"hi"}}"#,
        ],
    );
    let works: Api<Work> = Api::namespaced(r.hub.clone(), &names::member_namespace("member-1"));
    let work = wait_for(
        &works,
        &names::work_name(&r.placement),
        "the drift reported",
        TIMEOUT,
        |w: Option<&Work>| {
            w.and_then(|w| w.status.as_ref()).is_some_and(|s| {
                s.manifest_conditions.iter().any(|m| {
                    m.drift.as_ref().is_some_and(|d| {
                        d.type_ == DriftType::Drifted
                            && d.fields.iter().any(|f| {
                                f.path == "data.greeting"
                                    && f.member_value.as_deref() == Some("\"hi\"")
                                    && f.hub_value.as_deref() == Some("\"hello\"")
                            })
                    })
                })
            })
        },
    )
    .await
    .unwrap();
    let applied = fleethub_crds::conditions::find(&work.status.unwrap().conditions, "Applied")
        .cloned()
        .unwrap();
    assert_eq!(
        (applied.status.as_str(), applied.reason.as_str()),
        ("False", "Drifted"),
        "{applied:?}"
    );
    // The edit stays.
    let cms: Api<ConfigMap> = Api::namespaced(member.clone(), &r.ns);
    let cm = cms.get("web").await.unwrap();
    assert_eq!(cm.data.unwrap()["greeting"], "hi");

    // A new version: the run marks the drifted cluster failed, naming the object and field.
    let hub_cms: Api<ConfigMap> = Api::namespaced(r.hub.clone(), &r.ns);
    hub_cms
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"greeting": "v2"}})),
        )
        .await
        .unwrap();
    r.wait_snapshot(1).await;
    let run = r.start_run("v2", 1, None).await;
    let runs: Api<UpdateRun> = Api::all(r.hub.clone());
    let failed = wait_for(
        &runs,
        &run,
        "the staging cluster to fail",
        TIMEOUT,
        |u: Option<&UpdateRun>| {
            u.and_then(|u| u.status.as_ref())
                .and_then(|s| s.stages_status.first())
                .and_then(|s| s.clusters.first())
                .and_then(|c| fleethub_crds::conditions::find(&c.conditions, "Succeeded"))
                .is_some_and(|c| c.status == "False")
        },
    )
    .await
    .unwrap();
    let c = &failed.status.unwrap().stages_status[0].clusters[0];
    let message = &fleethub_crds::conditions::find(&c.conditions, "Succeeded")
        .unwrap()
        .message;
    assert!(
        message.contains("Drifted")
            && message.contains("data.greeting")
            && message.contains(&format!("ConfigMap {}/web", r.ns)),
        "{message}"
    );
    assert_eq!(
        cms.get("web").await.unwrap().data.unwrap()["greeting"],
        "hi"
    );
}

#[tokio::test]
async fn a_pre_existing_object_is_taken_over_only_as_when_to_take_over_says() {
    let fleet = Fleet::get().unwrap();
    let id = unique_name("takeover");
    let member = fleet.member(3).await.unwrap();
    // A team's own namespace and ConfigMap on member-3, made before any placement.
    let cleanup = Cleanup::new(fleet);
    cleanup.track::<Namespace>("member-3", None, &id);
    Api::<Namespace>::all(member.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": id}})).unwrap(),
        )
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(member.clone(), &id);
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "web"}, "data": {"greeting": "ours"}}))
            .unwrap(),
    )
    .await
    .unwrap();

    // Never: left untouched and reported.
    let hub = fleet.hub().await.unwrap();
    let hub_cleanup = Cleanup::new(fleet);
    hub_cleanup.track::<Namespace>("hub", None, &id);
    hub_cleanup.track::<fleethub_crds::Placement>("hub", None, &id);
    Api::<Namespace>::all(hub.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": id}})).unwrap(),
        )
        .await
        .unwrap();
    kubectl_apply(
        fleet,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web", "namespace": id},
                "data": {"greeting": "hello"}}),
    );
    let placement = |when: &str| {
        json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "Placement", "metadata": {"name": id},
               "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Namespace", "name": id}],
                        "policy": {"placementType": "PickFixed", "clusterNames": ["member-3"]},
                        "strategy": {"type": "RollingUpdate", "applyStrategy": {"whenToTakeOver": when}}}})
    };
    kubectl_apply(fleet, &placement("Never"));
    let works: Api<Work> = Api::namespaced(hub.clone(), &names::member_namespace("member-3"));
    let refused = |greeting: &'static str| {
        move |w: Option<&Work>| {
            w.and_then(|w| w.status.as_ref()).is_some_and(|s| {
                s.manifest_conditions.iter().any(|m| {
                    m.identifier.kind == "ConfigMap"
                        && m.drift.as_ref().is_some_and(|d| {
                            d.type_ == DriftType::TakeoverRefused
                                && d.fields.iter().any(|f| {
                                    f.path == "data.greeting"
                                        && f.member_value.as_deref() == Some(greeting)
                                })
                        })
                })
            })
        }
    };
    wait_for(
        &works,
        &names::work_name(&id),
        "the takeover refused",
        TIMEOUT,
        refused("\"ours\""),
    )
    .await
    .unwrap();
    let cm = cms.get("web").await.unwrap();
    assert_eq!(cm.data.as_ref().unwrap()["greeting"], "ours");
    assert!(
        cm.metadata
            .labels
            .as_ref()
            .is_none_or(|l| !l.contains_key(names::PLACEMENT_LABEL)),
        "a refused object is not marked as the fleet's"
    );

    // IfNoDiff: still refused while it differs; taken once it matches the hub's.
    kubectl_apply(fleet, &placement("IfNoDiff"));
    wait_for(
        &works,
        &names::work_name(&id),
        "the takeover refused (IfNoDiff)",
        TIMEOUT,
        |w: Option<&Work>| {
            w.is_some_and(|w| {
                w.spec
                    .apply_strategy
                    .as_ref()
                    .and_then(|a| a.when_to_take_over)
                    .is_some_and(|t| format!("{t:?}") == "IfNoDiff")
            }) && refused("\"ours\"")(w)
        },
    )
    .await
    .unwrap();
    assert_eq!(
        cms.get("web").await.unwrap().data.unwrap()["greeting"],
        "ours"
    );
    cms.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"greeting": "hello"}})),
    )
    .await
    .unwrap();
    wait_for(
        &cms,
        "web",
        "the ConfigMap taken over",
        TIMEOUT,
        |c: Option<&ConfigMap>| {
            c.and_then(|c| c.metadata.labels.as_ref())
                .is_some_and(|l| l.get(names::PLACEMENT_LABEL) == Some(&id))
        },
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn report_diff_applies_nothing_and_reports_the_differences() {
    let fleet = Fleet::get().unwrap();
    let p = Placed::new(
        fleet,
        "reportdiff",
        &["member-2"],
        json!({"type": "ReportDiff"}),
    )
    .await;
    let work = p
        .wait_manifest("member-2", "ConfigMap", "the ConfigMap diffed", |m| {
            m.drift
                .as_ref()
                .is_some_and(|d| d.type_ == DriftType::Diffed)
        })
        .await;
    let applied =
        fleethub_crds::conditions::find(&work.status.as_ref().unwrap().conditions, "Applied")
            .cloned()
            .unwrap();
    assert_eq!(applied.reason, "DiffReported", "{applied:?}");
    let member = fleet.member(2).await.unwrap();
    assert!(
        Api::<Namespace>::all(member)
            .get_opt(&p.id)
            .await
            .unwrap()
            .is_none(),
        "ReportDiff created the namespace on the member"
    );
}

#[tokio::test]
async fn invalid_apply_strategy_values_are_refused_at_admission_naming_the_field() {
    let fleet = Fleet::get().unwrap();
    let hub = fleet.hub().await.unwrap();
    let cleanup = Cleanup::new(fleet);
    let api: Api<DynamicObject> =
        Api::all_with(hub, &ApiResource::erase::<fleethub_crds::Placement>(&()));
    for (field, value) in [
        ("whenToApply", "Sometimes"),
        ("whenToTakeOver", "Maybe"),
        ("type", "Replace"),
        ("comparisonOption", "Exact"),
    ] {
        let name = unique_name("badapply");
        cleanup.track::<fleethub_crds::Placement>("hub", None, &name);
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "fleethub.dev/v1alpha1", "kind": "Placement", "metadata": {"name": name},
            "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Namespace", "name": "x"}],
                     "strategy": {"applyStrategy": {field: value}}}}))
        .unwrap();
        let err = api
            .create(&PostParams::default(), &object)
            .await
            .expect_err("an invalid applyStrategy was admitted");
        let message = err.to_string();
        assert!(
            message.contains(&format!("spec.strategy.applyStrategy.{field}"))
                && message.contains(value),
            "{message}"
        );
    }
}
