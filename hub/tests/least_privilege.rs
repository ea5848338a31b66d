//! The hub's RBAC in `deploy/hub` is enough, proven on the real hub API server: the RBAC objects
//! of the kustomize base are applied, a hub process runs with a token of the manifest's
//! ServiceAccount (not as admin), and it leads, provisions members (including the agent RBAC,
//! which the API server lets it grant only because it holds those rights itself), snapshots a
//! namespace, and takes a staged run through a soak, a metric check with credentials from a
//! Secret in its namespace, and an approval to success, without a single Forbidden in its log.
//! The run's last stage is over 100 clusters, so the hub writes the run's UpdateRunPlan, and the
//! hub is killed while the run waits for its approval: the one started after it reads that plan
//! back. The fleet's own hub is stopped meanwhile (it would do the work) and started again
//! afterwards, also when the test fails. The base's FlowSchemas are applied too, and the API
//! server's own counters show the hub's requests dispatched under them: its leader Lease at the
//! `leader-election` priority, the rest at `workload-high`, not among the agents.

mod common;
mod hub_process;

use std::process::{Command, Stdio};

use common::{Scenario, TIMEOUT, simulate_members};
use fleethub_crds::stored_stage::DETAILED_STAGE_CLUSTERS;
use fleethub_crds::update_run_plan::UpdateRunPlan;
use fleethub_crds::{ApprovalRequest, UpdateRun};
use fleethub_testkit::{Cleanup, Fleet, poll_until, repo_root, unique_name, wait_for};
use futures::StreamExt;
use hub_process::HubProcess;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::Api;
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use serde_norway::Value;

const NAMESPACE: &str = "fleethub-system";
const SERVICE_ACCOUNT: &str = "fleethub-hub";

/// Starts the fleet's hub again when the test ends, however it ends.
struct FleetHubBack(&'static Fleet);

impl Drop for FleetHubBack {
    fn drop(&mut self) {
        if let Err(e) = self.0.start_fleethub() {
            eprintln!("could not restart the fleet's hub: {e}");
        }
    }
}

fn kubectl(fleet: &Fleet, args: &[&str], stdin: Option<&str>) -> String {
    let mut child = Command::new(std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()))
        .arg("--kubeconfig")
        .arg(fleet.kubeconfig("hub"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut input = child.stdin.take().unwrap();
        input
            .write_all(stdin.unwrap_or_default().as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Applies the hub's identity, RBAC and FlowSchemas from the kustomize base (not its
/// Deployment: the hub runs here as a local process); `cleanup` deletes the objects that did not
/// exist before.
fn apply_hub_identity(fleet: &Fleet, cleanup: &Cleanup) {
    let dir = repo_root().join("deploy/hub");
    let rendered = kubectl(fleet, &["kustomize", dir.to_str().unwrap()], None);
    let wanted = [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "FlowSchema",
    ];
    let mut docs = Vec::new();
    for doc in serde_norway::Deserializer::from_str(&rendered) {
        let v = <Value as serde::Deserialize>::deserialize(doc).unwrap();
        if v["kind"].as_str().is_some_and(|k| wanted.contains(&k)) {
            track_if_new(fleet, cleanup, &v);
            docs.push(serde_norway::to_string(&v).unwrap());
        }
    }
    assert!(
        docs.len() >= 10,
        "the base has the hub's RBAC and FlowSchemas: {docs:?}"
    );
    kubectl(
        fleet,
        &[
            "apply",
            "--server-side",
            "--field-manager=fleethub-least-privilege-test",
            "-f",
            "-",
        ],
        Some(&docs.join("---\n")),
    );
}

/// Records manifest `v` in `cleanup` unless its object exists on the hub already (the fleet's
/// own `fleethub-system` namespace stays).
fn track_if_new(fleet: &Fleet, cleanup: &Cleanup, v: &Value) {
    let (kind, name) = (
        v["kind"].as_str().unwrap(),
        v["metadata"]["name"].as_str().unwrap(),
    );
    let namespace = v["metadata"]["namespace"].as_str();
    let api_version = v["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, kind),
        &format!("{}s", kind.to_lowercase()),
    );
    let object = if group.is_empty() {
        format!("{}/{name}", resource.plural)
    } else {
        format!("{}.{group}/{name}", resource.plural)
    };
    let mut get = vec!["get", "--ignore-not-found", "-o", "name", &object];
    if let Some(ns) = namespace {
        get.extend(["-n", ns]);
    }
    if kubectl(fleet, &get, None).trim().is_empty() {
        cleanup.track_dynamic("hub", &resource, namespace, name);
    }
}

/// A kubeconfig for the hub cluster that authenticates with a fresh token of the hub's
/// ServiceAccount (TokenRequest API).
fn service_account_kubeconfig(fleet: &Fleet) -> std::path::PathBuf {
    let token = kubectl(
        fleet,
        &[
            "create",
            "token",
            SERVICE_ACCOUNT,
            "-n",
            NAMESPACE,
            "--duration=1h",
        ],
        None,
    );
    let admin = std::fs::read_to_string(fleet.kubeconfig("hub")).unwrap();
    let mut config: Value = serde_norway::from_str(&admin).unwrap();
    config["users"] = serde_norway::from_str(&format!(
        "- name: hub-admin\n  user:\n    token: {}\n",
        token.trim()
    ))
    .unwrap();
    let path = std::env::temp_dir().join(format!("{}.kubeconfig", unique_name("fleethub-sa")));
    std::fs::write(&path, serde_norway::to_string(&config).unwrap()).unwrap();
    path
}

/// A hub process with the ServiceAccount's token, once it leads.
async fn start_hub(kubeconfig: &std::path::Path, lease: &str) -> HubProcess {
    let hub = HubProcess::start(
        kubeconfig,
        "least-privilege-test-hub",
        &[
            "--leader-election-namespace",
            NAMESPACE,
            "--leader-election-lease",
            lease,
        ],
    );
    poll_until("the ServiceAccount hub to lead", TIMEOUT, || async {
        (hub.metric("fleethub_hub_leader").await == Some(1.0)).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; log:\n{}", hub.log()));
    hub
}

#[tokio::test]
async fn the_hub_works_with_the_rbac_of_its_manifests() {
    let fleet = Fleet::get().unwrap();
    let cleanup = Cleanup::new(fleet);
    apply_hub_identity(fleet, &cleanup);
    let metrics_before = api_server_metrics(fleet);
    let kubeconfig = service_account_kubeconfig(fleet);

    // The token really is not admin.
    let whoami = Command::new(std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["auth", "can-i", "delete", "nodes"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&whoami.stdout).trim(), "no");

    let _restore = FleetHubBack(fleet);
    fleet.kill("hub").unwrap();
    let lease = unique_name("least-privilege");
    cleanup.track::<Lease>("hub", Some(NAMESPACE), &lease);
    let mut hub = start_hub(&kubeconfig, &lease).await;

    // Members: namespace, ServiceAccount, Role/RoleBinding and the member's own ClusterRole and
    // binding, all provisioned by the ServiceAccount hub.
    let s = Scenario::new(fleet, "lp").await;
    let stg = s.member("stg", json!({"env": s.env("staging")})).await;
    let prod = s.member("prod", json!({"env": s.env("production")})).await;
    let edge: Vec<String> = futures::stream::iter(0..=DETAILED_STAGE_CLUSTERS)
        .map(|i| {
            let s = &s;
            async move {
                s.member(&format!("edge{i:03}"), json!({"env": s.env("edge")}))
                    .await
            }
        })
        .buffered(10)
        .collect()
        .await;
    for m in [&stg, &prod, &edge[0]] {
        wait_for(
            &Api::<ClusterRoleBinding>::all(s.hub.clone()),
            &fleethub_hub::membership::cluster_role_name(m),
            "the member agent's ClusterRoleBinding",
            TIMEOUT,
            |b: Option<&ClusterRoleBinding>| b.is_some(),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}; log:\n{}", hub.log()));
    }

    // A namespace snapshot (the hub lists every kind in it), bindings, a three-stage run with a
    // soak, a metric check with credentials from a Secret, an approval, and a stage large
    // enough for an UpdateRunPlan.
    let selected: Vec<&String> = [&stg, &prod].into_iter().chain(&edge).collect();
    s.placement(&selected, false).await;
    let secret = format!("prometheus-{}", s.id);
    s.hub_secret(&secret, &[("token", "not-checked-by-the-fleet-prometheus")])
        .await;
    s.strategy(json!([
        {"name": "staging", "labelSelector": {"matchLabels": {"env": s.env("staging")}},
         "afterStageTasks": [{"type": "TimedWait", "waitTime": "1s"},
            {"type": "MetricCheck", "metricCheck": {"url": fleet.prometheus_url().unwrap(),
             "query": "vector(1)", "interval": "1s", "secretRef": {"name": secret}}}]},
        {"name": "production", "labelSelector": {"matchLabels": {"env": s.env("production")}},
         "afterStageTasks": [{"type": "Approval"}]},
        {"name": "edge", "labelSelector": {"matchLabels": {"env": s.env("edge")}},
         "maxConcurrency": "50%"}]))
        .await;
    s.cleanup.track::<UpdateRunPlan>("hub", None, &s.run);
    let (_updates, members_task) = simulate_members(s.hub.clone(), s.placement.clone(), 0);
    s.start_run(0).await;
    let approvals: Api<ApprovalRequest> = Api::all(s.hub.clone());
    let gate = format!("{}-production", s.run);
    wait_for(
        &approvals,
        &gate,
        "the production ApprovalRequest",
        TIMEOUT,
        |a: Option<&ApprovalRequest>| a.is_some(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; log:\n{}", hub.log()));
    let plan = Api::<UpdateRunPlan>::all(s.hub.clone())
        .get_opt(&s.run)
        .await
        .unwrap();
    assert!(
        plan.is_some_and(|p| p.spec.stages.iter().any(|st| st.stage_name == "edge")),
        "the hub wrote the run's UpdateRunPlan with the edge stage; log:\n{}",
        hub.log()
    );
    // A new hub process must read the plan back to go on with the edge stage.
    hub.sigkill();
    let mut log = hub.log();
    let hub = start_hub(&kubeconfig, &lease).await;
    common::approve(&approvals, &gate).await.unwrap();
    wait_for(
        &Api::<UpdateRun>::all(s.hub.clone()),
        &s.run,
        "the run to succeed",
        TIMEOUT,
        common::succeeded,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; log:\n{}", hub.log()));
    members_task.abort();

    log.push_str(&hub.log());
    let lower = log.to_lowercase();
    assert!(
        !lower.contains("forbidden") && !lower.contains(" 403"),
        "the hub was refused something its manifests should grant:\n{log}"
    );
    let errors = {
        let (_, text) = hub.get("/metrics").await.unwrap();
        text.lines()
            .filter(|l| l.starts_with("fleethub_hub_reconcile_errors_total{"))
            .filter(|l| !l.contains("error=\"conflict\"") && !l.ends_with(" 0"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert!(errors.is_empty(), "{errors:?}\n{log}");

    let metrics_after = api_server_metrics(fleet);
    for (schema, level) in [
        ("fleethub-hub-leader-election", "leader-election"),
        ("fleethub-hub", "workload-high"),
    ] {
        let labels = format!("flow_schema=\"{schema}\",priority_level=\"{level}\"");
        let before = hub_process::sum_with(&metrics_before, DISPATCHED, &labels);
        let after = hub_process::sum_with(&metrics_after, DISPATCHED, &labels);
        let counts: Vec<&str> = metrics_after
            .lines()
            .filter(|l| l.starts_with(DISPATCHED))
            .collect();
        assert!(
            after > before,
            "the hub's requests were dispatched under FlowSchema {schema} at priority {level} \
             ({before} before the test, {after} after); every count: {counts:#?}"
        );
    }
    let _ = std::fs::remove_file(&kubeconfig);
}

/// The API server's count of requests dispatched, by FlowSchema and priority level.
const DISPATCHED: &str = "apiserver_flowcontrol_dispatched_requests_total";

/// The hub API server's own metrics (in which [`DISPATCHED`] is read).
fn api_server_metrics(fleet: &Fleet) -> String {
    kubectl(fleet, &["get", "--raw", "/metrics"], None)
}
