//! The install manifests in `deploy/` against the real hub API server: every kustomization
//! passes a server-side dry run (schema, defaulting, admission); the hub Deployment keeps its
//! promises (two replicas, probes, locked-down containers); the alert rules name only metrics
//! the running hub and agents export; and every exported metric is documented.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use fleethub_testkit::{Fleet, http_get, repo_root};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde::Deserialize;
use serde_json::json;
use serde_norway::Value;

/// The kustomizations validated here (deploy/member-agent is validated against a member by its
/// own tests; deploy/monitoring/prometheus-operator needs the Prometheus Operator's CRDs).
const KUSTOMIZATIONS: &[&str] = &[
    "deploy/crds",
    "deploy/hub",
    "deploy/dashboard",
    "deploy/monitoring",
];
const NAMESPACE: &str = "fleethub-system";

fn path(rel: &str) -> PathBuf {
    repo_root().join(rel)
}

fn kubectl(fleet: Option<&Fleet>, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()));
    if let Some(fleet) = fleet {
        cmd.arg("--kubeconfig").arg(fleet.kubeconfig("hub"));
    }
    cmd.args(args).output().unwrap()
}

/// The objects `kubectl kustomize dir` renders.
fn render(dir: &str) -> Vec<Value> {
    let out = kubectl(None, &["kustomize", path(dir).to_str().unwrap()]);
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

#[tokio::test]
async fn every_kustomization_passes_a_server_side_dry_run() {
    let fleet = Fleet::get().unwrap();
    // A dry run creates nothing, so the namespaced objects need their namespace to exist (the
    // local fleet creates it for the hub's lease; make sure).
    let namespaces: Api<Namespace> = Api::all(fleet.hub().await.unwrap());
    namespaces
        .patch(
            NAMESPACE,
            &PatchParams::apply("fleethub-local-fleet"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
            ),
        )
        .await
        .unwrap();
    for dir in KUSTOMIZATIONS {
        let rendered = render(dir);
        assert!(!rendered.is_empty(), "{dir} renders nothing");
        let out = kubectl(
            Some(fleet),
            &[
                "apply",
                "--server-side",
                "--dry-run=server",
                "--field-manager=fleethub-manifest-test",
                "-k",
                path(dir).to_str().unwrap(),
            ],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "server-side dry run of {dir} failed:\n{}{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        let applied = stdout
            .lines()
            .filter(|l| l.contains("(server dry run)"))
            .count();
        assert_eq!(
            applied,
            rendered.len(),
            "{dir}: every rendered object is checked:\n{stdout}"
        );
        println!("{dir}: {applied} objects pass a server-side dry run");
    }
}

#[test]
fn the_hub_runs_two_locked_down_replicas_with_probes() {
    let hub = render("deploy/hub");
    let deployment = find(&hub, "Deployment", "fleethub-hub");
    assert_eq!(deployment["metadata"]["namespace"], NAMESPACE);
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 2);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "fleethub-hub");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"][0], "ALL");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(container["resources"]["requests"]["memory"].is_string());
    // The leader-election identity is the pod name; the lease lives in the pod's namespace.
    let env = container["env"].as_sequence().unwrap();
    let from_field = |name: &str| {
        env.iter()
            .find(|e| e["name"] == name)
            .map(|e| e["valueFrom"]["fieldRef"]["fieldPath"].clone())
    };
    assert_eq!(from_field("POD_NAME"), Some(Value::from("metadata.name")));
    assert_eq!(
        from_field("FLEETHUB_LEADER_ELECTION_NAMESPACE"),
        Some(Value::from("metadata.namespace"))
    );
    let pdb = find(&hub, "PodDisruptionBudget", "fleethub-hub");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    // The leader-election Role is namespaced. Cluster-wide, the hub holds on leases only what
    // it grants each member agent: create, and get/update of Lease `member-agent` (it cannot
    // update any other Lease, a leader election's included).
    let role = find(&hub, "Role", "fleethub-hub-leader-election");
    assert_eq!(role["metadata"]["namespace"], NAMESPACE);
    let cluster_role = find(&hub, "ClusterRole", "fleethub-hub");
    let rules = cluster_role["rules"].as_sequence().unwrap();
    let groups: BTreeSet<String> = rules
        .iter()
        .flat_map(|r| r["apiGroups"].as_sequence().unwrap().clone())
        .map(|g| g.as_str().unwrap().to_string())
        .collect();
    assert!(!groups.contains("*"), "{groups:?}");
    let lease_rules: Vec<(Value, Value)> = rules
        .iter()
        .filter(|r| {
            r["apiGroups"]
                .as_sequence()
                .unwrap()
                .contains(&Value::from("coordination.k8s.io"))
        })
        .map(|r| (r["verbs"].clone(), r["resourceNames"].clone()))
        .collect();
    assert_eq!(
        lease_rules,
        vec![
            (Value::from(vec!["create"]), Value::Null),
            (
                Value::from(vec!["get", "update"]),
                Value::from(vec!["member-agent"])
            ),
        ],
        "the hub's cluster-wide rights on leases"
    );

    let dashboard = render("deploy/dashboard");
    let role = find(&dashboard, "ClusterRole", "fleethub-dashboard");
    let resources: Vec<&str> = role["rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|r| r["resources"].as_sequence().unwrap())
        .map(|r| r.as_str().unwrap())
        .collect();
    assert_eq!(resources, ["tokenreviews", "subjectaccessreviews"]);
}

fn rule_groups(file: &str) -> Value {
    let v: Value = serde_norway::from_str(&std::fs::read_to_string(path(file)).unwrap()).unwrap();
    v
}

#[test]
fn the_prometheus_rule_holds_the_same_rules_as_the_rule_file() {
    let file = rule_groups("deploy/monitoring/fleethub-alerts.yaml");
    let operator = rule_groups("deploy/monitoring/prometheus-operator/prometheusrule.yaml");
    assert_eq!(operator["kind"], "PrometheusRule");
    assert_eq!(operator["spec"]["groups"], file["groups"]);
    let alerts: Vec<&str> = file["groups"][0]["rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| r["alert"].as_str().unwrap())
        .collect();
    // Every expression is valid PromQL (the parser Prometheus-compatible databases use).
    for rule in file["groups"][0]["rules"].as_sequence().unwrap() {
        let expr = rule["expr"].as_str().unwrap();
        if let Err(e) = promql_parser::parser::parse(expr) {
            panic!("alert {:?}: invalid PromQL {expr:?}: {e}", rule["alert"]);
        }
    }
    assert!(promql_parser::parser::parse("sum(rate(x[5m]) > ").is_err());
    for wanted in [
        "FleethubUpdateRunStuck",
        "FleethubClusterUpdateFailed",
        "FleethubMemberUnhealthy",
        "FleethubApprovalWaitingTooLong",
    ] {
        assert!(alerts.contains(&wanted), "{wanted} missing from {alerts:?}");
    }
}

/// Metric names (`fleethub_…`) in a text.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("fleethub_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// Sample names and metric family names a `/metrics` answer exports.
fn exported(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| match l.strip_prefix("# TYPE ") {
            Some(t) => t.split_whitespace().next(),
            None if l.starts_with('#') => None,
            None => l.split(['{', ' ']).next(),
        })
        .map(str::to_string)
        .collect()
}

async fn scrape(fleet: &Fleet) -> (String, String) {
    let (code, hub) = http_get(fleet.hub_health_addr(), "/metrics").await.unwrap();
    assert_eq!(code, 200);
    let (code, agent) = http_get(fleet.agent_health_addr(1), "/metrics")
        .await
        .unwrap();
    assert_eq!(code, 200);
    (hub, agent)
}

#[tokio::test]
async fn alert_rules_name_only_metrics_the_hub_and_agents_export() {
    let fleet = Fleet::get().unwrap();
    let (hub, agent) = scrape(fleet).await;
    assert!(
        hub.contains("fleethub_hub_leader 1"),
        "the fleet's hub leads:\n{hub}"
    );
    let exported: BTreeSet<String> = exported(&hub).union(&exported(&agent)).cloned().collect();
    let rules = std::fs::read_to_string(path("deploy/monitoring/fleethub-alerts.yaml")).unwrap();
    let file = rule_groups("deploy/monitoring/fleethub-alerts.yaml");
    let exprs: String = file["groups"][0]["rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| format!("{}\n", r["expr"].as_str().unwrap()))
        .collect();
    let named = metric_names(&exprs);
    assert!(named.len() >= 6, "{named:?}");
    let missing: Vec<&String> = named.iter().filter(|n| !exported.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "alert rules name metrics nobody exports: {missing:?}\nexported: {exported:?}\n{rules}"
    );
}

#[tokio::test]
async fn every_exported_metric_is_documented() {
    let fleet = Fleet::get().unwrap();
    let (hub, agent) = scrape(fleet).await;
    let readme = std::fs::read_to_string(path("deploy/monitoring/README.md")).unwrap();
    let documented = metric_names(&readme);
    let families: BTreeSet<String> = [hub, agent]
        .iter()
        .flat_map(|t| {
            t.lines()
                .filter_map(|l| l.strip_prefix("# TYPE "))
                .filter_map(|t| t.split_whitespace().next())
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(families.len() >= 15, "{families:?}");
    let undocumented: Vec<&String> = families
        .iter()
        .filter(|f| {
            // Counters are exported as <family>_total; the README may name either.
            !documented.contains(*f) && !documented.contains(&format!("{f}_total"))
        })
        .collect();
    assert!(
        undocumented.is_empty(),
        "deploy/monitoring/README.md does not document {undocumented:?}"
    );
}

/// The Dockerfiles cannot be built here (no container engine); check what can go wrong
/// silently: the binary built is the one the image runs, it exists in the workspace, and the
/// image's user is the non-root UID the manifests run it as.
#[test]
fn dockerfiles_build_the_binaries_the_manifests_run() {
    let hub_uid = render("deploy/hub")
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .map(|d| d["spec"]["template"]["spec"]["securityContext"]["runAsUser"].clone())
        .unwrap();
    assert_eq!(hub_uid, 65532);
    for (dockerfile, package, bin) in [
        ("hub/Dockerfile", "hub/Cargo.toml", "fleethub-hub"),
        (
            "member-agent/Dockerfile",
            "member-agent/Cargo.toml",
            "fleethub-member-agent",
        ),
    ] {
        let text = std::fs::read_to_string(path(dockerfile)).unwrap();
        let manifest = std::fs::read_to_string(path(package)).unwrap();
        assert!(
            manifest.contains(&format!("name = \"{bin}\"")),
            "{package} has no binary {bin}"
        );
        assert!(
            text.contains(&format!(
                "cargo build --locked --release -p {bin} --bin {bin}"
            )),
            "{dockerfile} builds {bin}"
        );
        let last_from = text.lines().rfind(|l| l.starts_with("FROM ")).unwrap();
        assert!(
            last_from.contains("distroless") && last_from.contains(":nonroot"),
            "{dockerfile}: {last_from}"
        );
        assert!(text.contains("USER 65532:65532"), "{dockerfile}");
        assert!(
            text.contains(&format!("ENTRYPOINT [\"/usr/local/bin/{bin}\"]")),
            "{dockerfile}"
        );
    }
}

/// The image each Dockerfile says it builds (`-t NAME:TAG` in its usage comment) is the image the
/// matching `deploy/` base runs, and the one `deploy/local/build-images` pushes for the local
/// fleet (which runs these bases on real nodes): one name per component.
#[test]
fn dockerfiles_and_deploy_name_the_same_images() {
    let version = env!("CARGO_PKG_VERSION");
    let builder = std::fs::read_to_string(path("deploy/local/build-images")).unwrap();
    for (dockerfile, base, name) in [
        ("hub/Dockerfile", "deploy/hub", "fleethub-hub"),
        (
            "member-agent/Dockerfile",
            "deploy/member-agent",
            "fleethub-member-agent",
        ),
        (
            "dashboard/Dockerfile",
            "deploy/dashboard",
            "fleethub-dashboard",
        ),
    ] {
        let text = std::fs::read_to_string(path(dockerfile)).unwrap();
        assert!(
            text.contains(&format!("-t {name}:{version} .")),
            "{dockerfile} does not tag {name}:{version}"
        );
        let objects = render(base);
        let deployment = objects
            .iter()
            .find(|o| o["kind"] == "Deployment")
            .unwrap_or_else(|| panic!("{base} has no Deployment"));
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"][0]["image"],
            format!("{name}:{version}"),
            "{base}"
        );
        assert!(
            builder.contains(&format!("push \"{name}:$version\"")),
            "deploy/local/build-images does not push {name}"
        );
    }
}
