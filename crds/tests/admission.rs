//! The fleethub CRDs on a real hub API server: installed and established, valid objects
//! accepted, invalid ones rejected at admission with a message naming the offending field, and
//! immutable fields kept immutable.

use fleethub_crds::strategy::OnFailure;
use fleethub_crds::{
    ApprovalRequest, Binding, MemberCluster, Placement, ResourceSnapshot, StagedUpdateStrategy,
    UpdateRun, Work,
};
use fleethub_testkit::{Cleanup, Fleet, unique_name};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use serde_json::{Value, json};

fn api_for<K: Resource<DynamicType = ()>>(
    client: &Client,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let ar = ApiResource::erase::<K>(&());
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// A guard that deletes hub object `name` of kind `K` when the test ends, however it ends.
fn cleanup<K: Resource<DynamicType = ()>>(name: &str) -> Cleanup {
    let cleanup = Cleanup::new(Fleet::get().unwrap());
    cleanup.track::<K>("hub", None, name);
    cleanup
}

fn object(kind: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "fleethub.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

/// The three-stage strategy of the reference design, in fleethub's group.
fn reference_strategy() -> Value {
    json!({"stages": [
        {"name": "staging", "labelSelector": {"matchLabels": {"environment": "staging"}},
         "afterStageTasks": [{"type": "TimedWait", "waitTime": "1h"}]},
        {"name": "canary", "labelSelector": {"matchLabels": {"environment": "canary"}},
         "afterStageTasks": [{"type": "Approval"}]},
        {"name": "production", "labelSelector": {"matchLabels": {"environment": "production"}},
         "sortingLabelKey": "order", "maxConcurrency": "50%",
         "afterStageTasks": [{"type": "Approval"}, {"type": "TimedWait", "waitTime": "1h"}]}
    ]})
}

fn stage(extra: Value) -> Value {
    let mut s = json!({"name": "staging"});
    s.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    json!({"stages": [s]})
}

fn run_spec() -> Value {
    json!({"placementName": "web", "resourceSnapshotIndex": "1", "stagedRolloutStrategyName": "three-stages"})
}

#[tokio::test]
async fn every_crd_is_established_on_the_hub() {
    let hub = Fleet::get().unwrap().hub().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(hub);
    for want in fleethub_crds::all_crds() {
        let name = want.metadata.name.clone().unwrap();
        let got = crds
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("CRD {name} is not installed: {e}"));
        let established = got
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Established" && c.status == "True");
        assert!(established, "CRD {name} is not Established");
        assert_eq!(got.spec.names.kind, want.spec.names.kind);
        assert_eq!(got.spec.versions[0].name, "v1alpha1");
        // A kind with a status must have the status subresource (writes to it are what the
        // controllers' RBAC allows); a kind without one (overrides, their snapshots) has none.
        let has_status = want.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .and_then(|s| s.properties.as_ref())
            .is_some_and(|p| p.contains_key("status"));
        let status_subresource = |crd: &CustomResourceDefinition| {
            crd.spec.versions[0]
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        };
        assert_eq!(
            status_subresource(&got),
            has_status,
            "{name}: status subresource installed = {}, but the kind has a status = {has_status}",
            status_subresource(&got)
        );
        assert_eq!(
            status_subresource(&want),
            has_status,
            "{name}: the generated CRD's status subresource disagrees with its schema"
        );
    }
}

#[tokio::test]
async fn the_reference_three_stage_strategy_is_accepted_and_round_trips() {
    let hub = Fleet::get().unwrap().hub().await.unwrap();
    let api: Api<StagedUpdateStrategy> = Api::all(hub);
    let name = unique_name("three-stages");
    let _cleanup = cleanup::<StagedUpdateStrategy>(&name);
    let strategy: StagedUpdateStrategy = serde_json::from_value(json!({
        "apiVersion": "fleethub.dev/v1alpha1", "kind": "StagedUpdateStrategy",
        "metadata": {"name": name}, "spec": reference_strategy(),
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &strategy).await.unwrap();
    assert_eq!(
        created.spec, strategy.spec,
        "the API server changed the strategy"
    );
    let stages: Vec<_> = created
        .spec
        .stages
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(stages, ["staging", "canary", "production"]);
    api.delete(&name, &Default::default()).await.unwrap();
}

#[tokio::test]
async fn gates_before_a_stage_and_metric_checks_are_accepted_and_round_trip() {
    let hub = Fleet::get().unwrap().hub().await.unwrap();
    let api: Api<StagedUpdateStrategy> = Api::all(hub);
    let name = unique_name("gated");
    let strategy: StagedUpdateStrategy = serde_json::from_value(json!({
        "apiVersion": "fleethub.dev/v1alpha1", "kind": "StagedUpdateStrategy",
        "metadata": {"name": name}, "spec": {"stages": [
            {"name": "canary", "labelSelector": {"matchLabels": {"environment": "canary"}},
             "beforeStageTasks": [
                 {"type": "Approval"},
                 {"type": "MetricCheck", "metricCheck": {"url": "http://127.0.0.1:17310", "query": "up"}}],
             "afterStageTasks": [
                 {"type": "MetricCheck", "metricCheck": {
                     "url": "https://prometheus.monitoring:9090",
                     "query": "sum(rate(http_errors_total{cluster=~\"$clusters\"}[5m])) < 0.01",
                     "initialDelay": "30s", "interval": "15s", "successThreshold": 3, "timeout": "10m",
                     "secretRef": {"name": "prometheus-credentials"}}},
                 {"type": "Approval"},
                 {"type": "TimedWait", "waitTime": "1m"}]}
        ]},
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &strategy).await;
    let _ = api.delete(&name, &Default::default()).await;
    assert_eq!(
        created.unwrap().spec,
        strategy.spec,
        "the API server changed the strategy"
    );
}

/// Each case: a description, the kind, the object's name, its spec, and the texts the API
/// server's rejection must contain (the first one is the offending field's path).
fn invalid_cases() -> Vec<(&'static str, &'static str, String, Value, Vec<&'static str>)> {
    let n = || unique_name("bad");
    let mut many = Vec::new();
    for i in 0..32 {
        many.push(json!({"name": format!("s{i}")}));
    }
    vec![
        (
            "duplicate stage names",
            "StagedUpdateStrategy",
            n(),
            json!({"stages": [{"name": "a"}, {"name": "a"}]}),
            vec!["spec.stages", "stage names must be unique"],
        ),
        (
            "stage name not a DNS label",
            "StagedUpdateStrategy",
            n(),
            stage(json!({"name": "Canary_1"})),
            vec!["spec.stages[0].name", "should match"],
        ),
        (
            "32 stages",
            "StagedUpdateStrategy",
            n(),
            json!({"stages": many}),
            vec!["spec.stages", "at most 31 items"],
        ),
        (
            "no stages",
            "StagedUpdateStrategy",
            n(),
            json!({"stages": []}),
            vec!["spec.stages", "at least 1 items"],
        ),
        (
            "four after-stage tasks",
            "StagedUpdateStrategy",
            n(),
            stage(
                json!({"afterStageTasks": [{"type": "Approval"}, {"type": "TimedWait", "waitTime": "1m"}, {"type": "Approval"}, {"type": "Approval"}]}),
            ),
            vec!["spec.stages[0].afterStageTasks", "at most 3 items"],
        ),
        (
            "a soak before a stage",
            "StagedUpdateStrategy",
            n(),
            stage(json!({"beforeStageTasks": [{"type": "TimedWait", "waitTime": "1m"}]})),
            vec![
                "spec.stages[0].beforeStageTasks",
                "beforeStageTasks may hold Approval and MetricCheck tasks only",
            ],
        ),
        (
            "two approvals before a stage",
            "StagedUpdateStrategy",
            n(),
            stage(json!({"beforeStageTasks": [{"type": "Approval"}, {"type": "Approval"}]})),
            vec![
                "spec.stages[0]",
                "beforeStageTasks may hold at most one task of each type",
            ],
        ),
        (
            "MetricCheck without metricCheck",
            "StagedUpdateStrategy",
            n(),
            stage(json!({"afterStageTasks": [{"type": "MetricCheck"}]})),
            vec![
                "spec.stages[0].afterStageTasks[0]",
                "metricCheck is required for a MetricCheck task",
            ],
        ),
        (
            "metricCheck on an Approval",
            "StagedUpdateStrategy",
            n(),
            stage(
                json!({"beforeStageTasks": [{"type": "Approval", "metricCheck": {"url": "http://p:9090", "query": "up"}}]}),
            ),
            vec![
                "spec.stages[0].beforeStageTasks[0]",
                "forbidden for other task types",
            ],
        ),
        (
            "metricCheck without a query",
            "StagedUpdateStrategy",
            n(),
            stage(
                json!({"afterStageTasks": [{"type": "MetricCheck", "metricCheck": {"url": "http://p:9090"}}]}),
            ),
            vec![
                "spec.stages[0].afterStageTasks[0].metricCheck.query",
                "Required value",
            ],
        ),
        (
            "metricCheck URL without a scheme",
            "StagedUpdateStrategy",
            n(),
            stage(
                json!({"afterStageTasks": [{"type": "MetricCheck", "metricCheck": {"url": "prometheus:9090", "query": "up"}}]}),
            ),
            vec![
                "spec.stages[0].afterStageTasks[0].metricCheck.url",
                "should match",
            ],
        ),
        (
            "metricCheck secretRef naming no possible Secret",
            "StagedUpdateStrategy",
            n(),
            stage(
                json!({"afterStageTasks": [{"type": "MetricCheck", "metricCheck": {"url": "http://p:9090", "query": "up", "secretRef": {"name": "Prometheus_Credentials"}}}]}),
            ),
            vec![
                "spec.stages[0].afterStageTasks[0].metricCheck.secretRef.name",
                "should match",
            ],
        ),
        (
            "metricCheck with a zero interval and no passes",
            "StagedUpdateStrategy",
            n(),
            stage(
                json!({"afterStageTasks": [{"type": "MetricCheck", "metricCheck": {"url": "http://p:9090", "query": "up", "interval": "0s", "successThreshold": 0}}]}),
            ),
            vec![
                "spec.stages[0].afterStageTasks[0].metricCheck.interval",
                "interval must be longer than 0s",
                "spec.stages[0].afterStageTasks[0].metricCheck.successThreshold",
            ],
        ),
        (
            "two TimedWait tasks",
            "StagedUpdateStrategy",
            n(),
            stage(
                json!({"afterStageTasks": [{"type": "TimedWait", "waitTime": "1m"}, {"type": "TimedWait", "waitTime": "2m"}]}),
            ),
            vec!["spec.stages[0]", "at most one task of each type"],
        ),
        (
            "TimedWait without waitTime",
            "StagedUpdateStrategy",
            n(),
            stage(json!({"afterStageTasks": [{"type": "TimedWait"}]})),
            vec![
                "spec.stages[0].afterStageTasks[0]",
                "waitTime is required for a TimedWait task",
            ],
        ),
        (
            "Approval with waitTime",
            "StagedUpdateStrategy",
            n(),
            stage(json!({"afterStageTasks": [{"type": "Approval", "waitTime": "1h"}]})),
            vec![
                "spec.stages[0].afterStageTasks[0]",
                "forbidden for an Approval task",
            ],
        ),
        (
            "waitTime in words",
            "StagedUpdateStrategy",
            n(),
            stage(json!({"afterStageTasks": [{"type": "TimedWait", "waitTime": "1 hour"}]})),
            vec!["spec.stages[0].afterStageTasks[0].waitTime", "should match"],
        ),
        (
            "waitTime without a unit",
            "StagedUpdateStrategy",
            n(),
            stage(json!({"afterStageTasks": [{"type": "TimedWait", "waitTime": "1.5"}]})),
            vec!["spec.stages[0].afterStageTasks[0].waitTime", "should match"],
        ),
        (
            "zero waitTime",
            "StagedUpdateStrategy",
            n(),
            stage(json!({"afterStageTasks": [{"type": "TimedWait", "waitTime": "0s"}]})),
            vec![
                "spec.stages[0].afterStageTasks[0].waitTime",
                "waitTime must be longer than 0s",
            ],
        ),
        (
            "unknown task type",
            "StagedUpdateStrategy",
            n(),
            stage(json!({"afterStageTasks": [{"type": "Sleep"}]})),
            vec![
                "spec.stages[0].afterStageTasks[0].type",
                "Unsupported value",
            ],
        ),
        (
            "maxConcurrency 0",
            "StagedUpdateStrategy",
            n(),
            stage(json!({"maxConcurrency": 0})),
            vec![
                "spec.stages[0].maxConcurrency",
                "at least 1 or a percentage",
            ],
        ),
        (
            "maxConcurrency 150%",
            "StagedUpdateStrategy",
            n(),
            stage(json!({"maxConcurrency": "150%"})),
            vec!["spec.stages[0].maxConcurrency", "should match"],
        ),
        (
            "maxConcurrency 0%",
            "StagedUpdateStrategy",
            n(),
            stage(json!({"maxConcurrency": "0%"})),
            vec!["spec.stages[0].maxConcurrency", "should match"],
        ),
        (
            "maxConcurrency not a number",
            "StagedUpdateStrategy",
            n(),
            stage(json!({"maxConcurrency": "half"})),
            vec!["spec.stages[0].maxConcurrency", "should match"],
        ),
        (
            "sorting label key with spaces",
            "StagedUpdateStrategy",
            n(),
            stage(json!({"sortingLabelKey": "the order"})),
            vec!["spec.stages[0].sortingLabelKey", "should match"],
        ),
        (
            "run without placementName",
            "UpdateRun",
            n(),
            json!({"resourceSnapshotIndex": "1", "stagedRolloutStrategyName": "s"}),
            vec!["spec.placementName", "Required value"],
        ),
        (
            "run index not a number",
            "UpdateRun",
            n(),
            json!({"placementName": "web", "resourceSnapshotIndex": "latest", "stagedRolloutStrategyName": "s"}),
            vec!["spec.resourceSnapshotIndex", "should match"],
        ),
        (
            "run name too long for approval names",
            "UpdateRun",
            "r".repeat(64),
            run_spec(),
            vec!["metadata.name", "at most 63 characters"],
        ),
        (
            "run state unknown",
            "UpdateRun",
            n(),
            json!({"placementName": "web", "resourceSnapshotIndex": "1", "stagedRolloutStrategyName": "s", "state": "Pause"}),
            vec!["spec.state", "Unsupported value"],
        ),
        (
            "run healthTimeout in words",
            "UpdateRun",
            n(),
            json!({"placementName": "web", "resourceSnapshotIndex": "1", "stagedRolloutStrategyName": "s", "healthTimeout": "5 minutes"}),
            vec!["spec.healthTimeout", "should match"],
        ),
        (
            "member name too long for its namespace",
            "MemberCluster",
            "m".repeat(51),
            json!({}),
            vec!["metadata.name", "at most 50 characters"],
        ),
        (
            "heartbeat period 0",
            "MemberCluster",
            n(),
            json!({"heartbeatPeriodSeconds": 0}),
            vec!["spec.heartbeatPeriodSeconds", "greater than or equal to 1"],
        ),
        (
            "PickFixed without clusterNames",
            "Placement",
            n(),
            json!({"resourceSelectors": [{"version": "v1", "kind": "Namespace", "name": "app"}], "policy": {"placementType": "PickFixed"}}),
            vec!["spec.policy", "clusterNames is required"],
        ),
        (
            "selector by name and labels",
            "Placement",
            n(),
            json!({"resourceSelectors": [{"version": "v1", "kind": "Namespace", "name": "app", "labelSelector": {"matchLabels": {"a": "b"}}}]}),
            vec!["spec.resourceSelectors[0]", "mutually exclusive"],
        ),
        (
            "no resource selectors",
            "Placement",
            n(),
            json!({"resourceSelectors": []}),
            vec!["spec.resourceSelectors", "at least 1 items"],
        ),
        (
            "unknown strategy type",
            "Placement",
            n(),
            json!({"resourceSelectors": [{"version": "v1", "kind": "Namespace", "name": "app"}], "strategy": {"type": "Canary"}}),
            vec!["spec.strategy.type", "Unsupported value"],
        ),
        (
            "approval without targetStage",
            "ApprovalRequest",
            n(),
            json!({"parentStageRollout": "run"}),
            vec!["spec.targetStage", "Required value"],
        ),
        (
            "bound binding without index",
            "Binding",
            n(),
            json!({"placementName": "web", "targetCluster": "member-1", "state": "Bound"}),
            vec![
                "spec",
                "resourceSnapshotIndex is required when state is Bound",
            ],
        ),
        (
            "work manifest without kind",
            "Work",
            n(),
            json!({"placementName": "web", "resourceSnapshotIndex": 0,
                "workload": {"manifests": [{"apiVersion": "v1", "metadata": {"name": "x"}}]}}),
            vec!["spec.workload.manifests[0].kind", "Required value"],
        ),
        (
            "an approval policy of no approvals",
            "StagedUpdateStrategy",
            n(),
            stage(
                json!({"afterStageTasks": [{"type": "Approval", "approvalPolicy": {"minApprovals": 0}}]}),
            ),
            vec![
                "spec.stages[0].afterStageTasks[0].approvalPolicy.minApprovals",
                "greater than or equal to 1",
            ],
        ),
        (
            "an approval policy on a TimedWait",
            "StagedUpdateStrategy",
            n(),
            stage(
                json!({"afterStageTasks": [{"type": "TimedWait", "waitTime": "1m", "approvalPolicy": {"minApprovals": 2}}]}),
            ),
            vec![
                "spec.stages[0].afterStageTasks[0]",
                "approvalPolicy is allowed only on an Approval task",
            ],
        ),
        (
            "approvers naming nobody",
            "StagedUpdateStrategy",
            n(),
            stage(
                json!({"beforeStageTasks": [{"type": "Approval", "approvalPolicy": {"approvers": {"users": [], "groups": []}}}]}),
            ),
            vec![
                "spec.stages[0].beforeStageTasks[0].approvalPolicy.approvers",
                "approvers must name at least one user or group",
            ],
        ),
        (
            "a window whose schedule has four fields",
            "StagedUpdateStrategy",
            n(),
            stage(json!({"allowedWindows": [{"schedule": "0,30 9-17 * *", "duration": "8h"}]})),
            vec!["spec.stages[0].allowedWindows[0].schedule", "should match"],
        ),
        (
            "a window longer than a week",
            "StagedUpdateStrategy",
            n(),
            json!({"stages": [{"name": "staging"}],
                   "blockedWindows": [{"schedule": "0 15 * * 5", "duration": "200h"}]}),
            vec![
                "spec.blockedWindows[0].duration",
                "duration must be longer than 0s and at most 168h",
            ],
        ),
        (
            "snapshot part beyond parts",
            "ResourceSnapshot",
            n(),
            json!({"placementName": "web", "resourceIndex": 0, "part": 2, "parts": 2, "contentHash": "h", "objectCount": 0}),
            vec!["spec", "part must be below parts"],
        ),
    ]
}

#[tokio::test]
async fn invalid_objects_are_rejected_with_the_offending_field_named() {
    let hub = Fleet::get().unwrap().hub().await.unwrap();
    let cases = invalid_cases();
    assert!(cases.len() >= 15);
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let mut failures = Vec::new();
    for (what, kind, name, spec, expected) in cases {
        let api = match kind {
            "StagedUpdateStrategy" => api_for::<StagedUpdateStrategy>(&hub, None),
            "UpdateRun" => api_for::<UpdateRun>(&hub, None),
            "MemberCluster" => api_for::<MemberCluster>(&hub, None),
            "Placement" => api_for::<Placement>(&hub, None),
            "ApprovalRequest" => api_for::<ApprovalRequest>(&hub, None),
            "Binding" => api_for::<Binding>(&hub, None),
            "ResourceSnapshot" => api_for::<ResourceSnapshot>(&hub, None),
            "Work" => api_for::<Work>(&hub, Some("default")),
            other => panic!("no API for {other}"),
        };
        match api.create(&dry_run, &object(kind, &name, spec)).await {
            Ok(_) => failures.push(format!("{what}: accepted")),
            Err(kube::Error::Api(status)) => {
                let missing: Vec<_> = expected
                    .iter()
                    .filter(|e| !status.message.contains(*e))
                    .collect();
                if status.code != 422 || !missing.is_empty() {
                    failures.push(format!(
                        "{what}: got {} {:?}, missing {missing:?}",
                        status.code, status.message
                    ));
                }
            }
            Err(e) => failures.push(format!("{what}: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "admission did not behave:\n{}",
        failures.join("\n")
    );
}

async fn patch_spec(
    api: &Api<DynamicObject>,
    name: &str,
    spec: Value,
) -> Result<DynamicObject, kube::Error> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": spec})),
    )
    .await
}

fn rejected_with(result: Result<DynamicObject, kube::Error>, field: &str, text: &str) {
    match result {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422, "{s:?}");
            assert!(
                s.message.contains(field) && s.message.contains(text),
                "{field}/{text} not in {:?}",
                s.message
            );
        }
        other => panic!("expected a rejection naming {field}, got {other:?}"),
    }
}

#[tokio::test]
async fn update_run_targets_are_immutable_but_state_is_not() {
    let hub = Fleet::get().unwrap().hub().await.unwrap();
    let api = api_for::<UpdateRun>(&hub, None);
    let name = unique_name("run");
    let _cleanup = cleanup::<UpdateRun>(&name);
    api.create(
        &PostParams::default(),
        &object("UpdateRun", &name, run_spec()),
    )
    .await
    .unwrap();

    rejected_with(
        patch_spec(&api, &name, json!({"placementName": "other"})).await,
        "spec.placementName",
        "placementName is immutable",
    );
    rejected_with(
        patch_spec(&api, &name, json!({"resourceSnapshotIndex": "2"})).await,
        "spec.resourceSnapshotIndex",
        "immutable",
    );
    rejected_with(
        patch_spec(&api, &name, json!({"stagedRolloutStrategyName": "other"})).await,
        "spec.stagedRolloutStrategyName",
        "immutable",
    );
    let stopped = patch_spec(&api, &name, json!({"state": "Stop"}))
        .await
        .unwrap();
    assert_eq!(stopped.data["spec"]["state"], "Stop");
    assert_eq!(stopped.data["spec"]["placementName"], "web");
    rejected_with(
        patch_spec(&api, &name, json!({"state": "Initialize"})).await,
        "spec",
        "state cannot go back to Initialize",
    );
    rejected_with(
        patch_spec(&api, &name, json!({"resourceSnapshotIndex": null})).await,
        "spec",
        "resourceSnapshotIndex is immutable",
    );
    api.delete(&name, &Default::default()).await.unwrap();
}

/// A dry-run create: admission runs in full, nothing is stored.
fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..Default::default()
    }
}

/// `onFailure`, on a run or a strategy, is `Hold` or `Rollback`.
#[tokio::test]
async fn on_failure_other_than_hold_or_rollback_is_rejected() {
    let hub = Fleet::get().unwrap().hub().await.unwrap();
    for (kind, api, mut spec) in [
        ("UpdateRun", api_for::<UpdateRun>(&hub, None), run_spec()),
        (
            "StagedUpdateStrategy",
            api_for::<StagedUpdateStrategy>(&hub, None),
            reference_strategy(),
        ),
    ] {
        spec["onFailure"] = json!("Sometimes");
        rejected_with(
            api.create(&dry_run(), &object(kind, &unique_name("on-failure"), spec))
                .await,
            "spec.onFailure",
            "Unsupported value: \"Sometimes\"",
        );
    }
}

/// `bake`, on a run or a strategy, is a duration longer than 0s and at most a week.
#[tokio::test]
async fn bake_must_be_a_duration_longer_than_0s_and_at_most_a_week() {
    let hub = Fleet::get().unwrap().hub().await.unwrap();
    for (kind, api, spec) in [
        ("UpdateRun", api_for::<UpdateRun>(&hub, None), run_spec()),
        (
            "StagedUpdateStrategy",
            api_for::<StagedUpdateStrategy>(&hub, None),
            reference_strategy(),
        ),
    ] {
        for (bake, text) in [
            ("0s", "bake must be longer than 0s and at most 168h"),
            ("200h", "bake must be longer than 0s and at most 168h"),
            ("soon", "should match"),
        ] {
            let mut spec = spec.clone();
            spec["bake"] = json!(bake);
            rejected_with(
                api.create(&dry_run(), &object(kind, &unique_name("bake"), spec))
                    .await,
                "spec.bake",
                text,
            );
        }
    }
}

#[tokio::test]
async fn on_failure_rollback_and_a_bake_are_accepted_and_round_trip() {
    let hub = Fleet::get().unwrap().hub().await.unwrap();
    let strategies: Api<StagedUpdateStrategy> = Api::all(hub.clone());
    let name = unique_name("rollback-bake");
    let _strategy = cleanup::<StagedUpdateStrategy>(&name);
    let mut spec = reference_strategy();
    spec["onFailure"] = json!("Rollback");
    spec["bake"] = json!("10m");
    let strategy: StagedUpdateStrategy = serde_json::from_value(json!({
        "apiVersion": "fleethub.dev/v1alpha1", "kind": "StagedUpdateStrategy",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    let created = strategies
        .create(&PostParams::default(), &strategy)
        .await
        .unwrap();
    assert_eq!(
        created.spec, strategy.spec,
        "the API server changed the strategy"
    );
    assert_eq!(created.spec.on_failure, Some(OnFailure::Rollback));
    assert_eq!(created.spec.bake.as_deref(), Some("10m"));

    let runs: Api<UpdateRun> = Api::all(hub);
    let run = unique_name("rollback-bake-run");
    let _run = cleanup::<UpdateRun>(&run);
    // The run's placement does not exist, so it fails and updates no cluster; should it ever
    // roll back anyway, its rollback run goes too.
    _run.track::<UpdateRun>("hub", None, &format!("{run}-rollback"));
    let update_run: UpdateRun = serde_json::from_value(json!({
        "apiVersion": "fleethub.dev/v1alpha1", "kind": "UpdateRun",
        "metadata": {"name": run},
        "spec": {"placementName": "web", "resourceSnapshotIndex": "1",
                 "stagedRolloutStrategyName": name, "onFailure": "Rollback", "bake": "10m"},
    }))
    .unwrap();
    let created = runs
        .create(&PostParams::default(), &update_run)
        .await
        .unwrap();
    assert_eq!(
        created.spec, update_run.spec,
        "the API server changed the run"
    );
    assert_eq!(created.spec.on_failure, Some(OnFailure::Rollback));
    assert_eq!(created.spec.bake.as_deref(), Some("10m"));
}

#[tokio::test]
async fn rollback_of_is_immutable() {
    let hub = Fleet::get().unwrap().hub().await.unwrap();
    let api = api_for::<UpdateRun>(&hub, None);
    let name = unique_name("rollback-of");
    let _cleanup = cleanup::<UpdateRun>(&name);
    let mut spec = run_spec();
    spec["rollback"] = json!({"of": "a", "clusters": ["x"]});
    let created = api
        .create(&PostParams::default(), &object("UpdateRun", &name, spec))
        .await
        .unwrap();
    assert_eq!(
        created.data["spec"]["rollback"],
        json!({"of": "a", "clusters": ["x"]})
    );
    rejected_with(
        patch_spec(&api, &name, json!({"rollback": {"of": "b"}})).await,
        "spec.rollback",
        "rollback.of is immutable",
    );
    let current = api.get(&name).await.unwrap();
    assert_eq!(current.data["spec"]["rollback"]["of"], "a");
    api.delete(&name, &Default::default()).await.unwrap();
}

/// KubeFleet's manifests carry over: Go durations, a run that names no index and starts as a
/// plan, a gate-only stage without a labelSelector.
#[tokio::test]
async fn kubefleet_style_runs_and_strategies_are_accepted() {
    let hub = Fleet::get().unwrap().hub().await.unwrap();
    let strategies = api_for::<StagedUpdateStrategy>(&hub, None);
    let name = unique_name("kf");
    let _strategy = cleanup::<StagedUpdateStrategy>(&name);
    let spec = json!({"stages": [
        {"name": "staging", "labelSelector": {"matchLabels": {"environment": "staging"}},
         "afterStageTasks": [{"type": "TimedWait", "waitTime": "1.5h"}]},
        {"name": "canary", "labelSelector": {"matchLabels": {"environment": "canary"}},
         "afterStageTasks": [{"type": "TimedWait", "waitTime": "90m"}]},
        {"name": "sign-off", "afterStageTasks": [{"type": "Approval"}]},
        {"name": "production", "labelSelector": {"matchLabels": {"environment": "production"}},
         "maxFailedClusters": 2,
         "afterStageTasks": [{"type": "TimedWait", "waitTime": "1h30m"}]},
        {"name": "last", "labelSelector": {},
         "afterStageTasks": [{"type": "TimedWait", "waitTime": "300s"}]}]});
    let created = strategies
        .create(
            &PostParams::default(),
            &object("StagedUpdateStrategy", &name, spec),
        )
        .await
        .unwrap();
    assert_eq!(
        created.data["spec"]["stages"][0]["afterStageTasks"][0]["waitTime"],
        "1.5h"
    );
    for bad in ["1.5", "1d", "-5m", "5 m"] {
        let mut s = reference_strategy();
        s["stages"][0]["afterStageTasks"][0]["waitTime"] = json!(bad);
        rejected_with(
            strategies
                .create(
                    &PostParams::default(),
                    &object("StagedUpdateStrategy", &unique_name("kf-bad"), s),
                )
                .await,
            "waitTime",
            "should match",
        );
    }

    let runs = api_for::<UpdateRun>(&hub, None);
    let run = unique_name("kf-run");
    let _run = cleanup::<UpdateRun>(&run);
    let created = runs
        .create(
            &PostParams::default(),
            &object(
                "UpdateRun",
                &run,
                json!({"placementName": "web", "stagedRolloutStrategyName": name, "state": "Initialize"}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(created.data["spec"]["state"], "Initialize");
    rejected_with(
        patch_spec(&runs, &run, json!({"resourceSnapshotIndex": "3"})).await,
        "spec",
        "resourceSnapshotIndex is immutable",
    );
    let running = patch_spec(&runs, &run, json!({"state": "Run"}))
        .await
        .unwrap();
    assert_eq!(running.data["spec"]["state"], "Run");
}

#[tokio::test]
async fn a_placement_cannot_switch_away_from_external() {
    let hub = Fleet::get().unwrap().hub().await.unwrap();
    let api = api_for::<Placement>(&hub, None);
    let name = unique_name("ext");
    let _cleanup = cleanup::<Placement>(&name);
    let spec = |strategy: Value| {
        json!({"resourceSelectors": [{"group": "", "version": "v1", "kind": "Namespace", "name": "nothing"}],
               "strategy": strategy})
    };
    api.create(
        &PostParams::default(),
        &object("Placement", &name, spec(json!({"type": "External"}))),
    )
    .await
    .unwrap();
    rejected_with(
        patch_spec(&api, &name, json!({"strategy": {"type": "RollingUpdate"}})).await,
        "spec",
        "spec.strategy.type cannot change from External",
    );
    rejected_with(
        patch_spec(&api, &name, json!({"strategy": null})).await,
        "spec",
        "cannot change from External",
    );
    // The other way is allowed: a RollingUpdate placement may hand its rollouts to runs.
    let other = unique_name("ext");
    let _other = cleanup::<Placement>(&other);
    api.create(
        &PostParams::default(),
        &object("Placement", &other, spec(json!({}))),
    )
    .await
    .unwrap();
    patch_spec(&api, &other, json!({"strategy": {"type": "External"}}))
        .await
        .unwrap();
}

#[tokio::test]
async fn approval_request_spec_is_immutable_and_approval_goes_through_status() {
    let hub = Fleet::get().unwrap().hub().await.unwrap();
    let api = api_for::<ApprovalRequest>(&hub, None);
    let name = unique_name("run-canary");
    let _cleanup = cleanup::<ApprovalRequest>(&name);
    api.create(
        &PostParams::default(),
        &object(
            "ApprovalRequest",
            &name,
            json!({"parentStageRollout": "run", "targetStage": "canary"}),
        ),
    )
    .await
    .unwrap();
    rejected_with(
        patch_spec(&api, &name, json!({"targetStage": "production"})).await,
        "spec",
        "spec is immutable",
    );

    // Approving is a status change, allowed through the status subresource only.
    let approval = json!({"status": {"conditions": [{
        "type": "Approved", "status": "True", "reason": "LGTM", "message": "approved by the test",
        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}});
    let patched = api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&approval))
        .await
        .unwrap();
    assert_eq!(patched.data["status"]["conditions"][0]["type"], "Approved");
    // A status written through the main resource is ignored (status subresource is enabled).
    let ignored = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": []}})),
        )
        .await
        .unwrap();
    assert_eq!(ignored.data["status"]["conditions"][0]["status"], "True");
    api.delete(&name, &Default::default()).await.unwrap();
}

#[tokio::test]
async fn resource_snapshots_are_immutable() {
    let hub = Fleet::get().unwrap().hub().await.unwrap();
    let api = api_for::<ResourceSnapshot>(&hub, None);
    let name = unique_name("web-0-snapshot");
    let _cleanup = cleanup::<ResourceSnapshot>(&name);
    let spec = json!({"placementName": "web", "resourceIndex": 0, "parts": 1, "contentHash": "abc", "objectCount": 1,
                      "resources": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}]});
    api.create(
        &PostParams::default(),
        &object("ResourceSnapshot", &name, spec),
    )
    .await
    .unwrap();
    rejected_with(
        patch_spec(&api, &name, json!({"contentHash": "def"})).await,
        "spec",
        "ResourceSnapshot is immutable",
    );
    api.delete(&name, &Default::default()).await.unwrap();
}

#[tokio::test]
async fn kubectl_explains_fields_and_prints_columns() {
    let fleet = Fleet::get().unwrap();
    let kubectl = |args: &[&str]| {
        let out = std::process::Command::new(
            std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()),
        )
        .arg("--kubeconfig")
        .arg(fleet.kubeconfig("hub"))
        .args(args)
        .output()
        .expect("kubectl runs");
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let explained = kubectl(&[
        "explain",
        "stagedupdatestrategies.spec.stages.afterStageTasks.waitTime",
    ]);
    assert!(explained.contains("how long to wait"), "{explained}");
    let explained = kubectl(&[
        "explain",
        "stagedupdatestrategies.spec.stages.afterStageTasks.metricCheck.secretRef",
    ]);
    assert!(explained.contains("hub's own"), "{explained}");
    let explained = kubectl(&["explain", "updateruns.spec.resourceSnapshotIndex"]);
    assert!(explained.contains("Immutable"), "{explained}");

    let hub = fleet.hub().await.unwrap();
    let api = api_for::<UpdateRun>(&hub, None);
    let name = unique_name("columns");
    let _cleanup = cleanup::<UpdateRun>(&name);
    api.create(
        &PostParams::default(),
        &object("UpdateRun", &name, run_spec()),
    )
    .await
    .unwrap();
    // The kinds are grouped under one category.
    let all = kubectl(&["get", "fleethub", "-o", "name"]);
    assert!(
        all.contains(&format!("updaterun.fleethub.dev/{name}")),
        "{all}"
    );
    let table = kubectl(&["get", "ur", &name]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "PLACEMENT",
            "INDEX",
            "STAGE",
            "PROGRESSING",
            "SUCCEEDED",
            "AGE"
        ]
    );
    assert!(table.lines().nth(1).unwrap().contains(" web "), "{table}");
    api.delete(&name, &Default::default()).await.unwrap();
}

/// The reference design's PhasedRollout (`data/reference-phased-rollout.yaml`: its names,
/// `initialDelaySeconds`, `periodSeconds` and `query: {expr, url, secretRef}` with the URL as
/// `host:port/path`) applies as written and is stored as written; both names of one setting are
/// refused, naming the field; `kubectl explain` documents each reference name as the same
/// setting as fleethub's.
#[tokio::test]
async fn the_reference_phased_rollout_applies_and_both_names_of_a_setting_are_refused() {
    let fleet = Fleet::get().unwrap();
    let hub = fleet.hub().await.unwrap();
    let api = api_for::<fleethub_crds::PhasedRollout>(&hub, Some("default"));
    let named = |mut v: Value| {
        v["metadata"]["name"] = json!(unique_name("phased"));
        serde_json::from_value::<DynamicObject>(v).unwrap()
    };
    let reference: Value =
        serde_norway::from_str(include_str!("data/reference-phased-rollout.yaml")).unwrap();
    let created = api
        .create(&dry_run(), &named(reference.clone()))
        .await
        .unwrap_or_else(|e| panic!("the reference PhasedRollout was refused: {e}"));
    assert_eq!(created.data["spec"], reference["spec"], "stored as written");

    // fleethub's names, the URL without a scheme, are accepted too.
    let mut ours = reference.clone();
    ours["spec"]["check"] = json!({"url": "prom:9000/xx", "query": "up{}", "initialDelay": "30s",
        "interval": "30s", "successThreshold": 3, "secretRef": {"name": "prom-secret"}});
    api.create(&dry_run(), &named(ours.clone()))
        .await
        .unwrap_or_else(|e| panic!("fleethub's names were refused: {e}"));

    for (extra, field, text) in [
        (
            json!({"initialDelay": "30s"}),
            "spec.check.initialDelaySeconds",
            "initialDelay and initialDelaySeconds are the same setting",
        ),
        (
            json!({"interval": "30s"}),
            "spec.check.periodSeconds",
            "interval and periodSeconds are the same setting",
        ),
    ] {
        let mut both = reference.clone();
        both["spec"]["check"]
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        rejected_with(api.create(&dry_run(), &named(both)).await, field, text);
    }
    let mut ftp = ours;
    ftp["spec"]["check"]["url"] = json!("ftp://prom:21");
    rejected_with(
        api.create(&dry_run(), &named(ftp)).await,
        "spec.check.url",
        "should match",
    );

    let explain = |field: &str| {
        let out = std::process::Command::new(
            std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()),
        )
        .arg("--kubeconfig")
        .arg(fleet.kubeconfig("hub"))
        .args(["explain", &format!("phasedrollouts.spec.check.{field}")])
        .output()
        .expect("kubectl runs");
        assert!(
            out.status.success(),
            "kubectl explain {field}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    for (field, names) in [
        ("initialDelaySeconds", "`initialDelay`"),
        ("periodSeconds", "`interval`"),
        ("query", "`expr`"),
        ("url", "`query.url`"),
        ("secretRef", "`query.secretRef`"),
    ] {
        let explained = explain(field);
        assert!(explained.contains(names), "{field}: {explained}");
    }
}
