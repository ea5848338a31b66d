//! fleethub installed the way users install it, on the fleet's in-cluster fleet: `real-hub` runs
//! `deploy/crds`, `deploy/hub` and `deploy/dashboard` as written (images built by
//! `deploy/local/build-images`, pulled from the fleet's registry by a real kubelet and
//! containerd), and `real-1` … `real-N` run the agent as a pod installed by `kubectl fleet join`.
//! A staged run moves the demo app's real pods from 1.0.0 to 1.1.0, seen with HTTP; a missing
//! image and a broken release fail their cluster naming the image and the pod state, and the
//! next cluster keeps what it ran.
//!
//! The tests skip (pass, saying so) on a fleet without real nodes (`FLEET_REAL_MEMBERS=0`).

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::real::{auto_approve, image_of};
use fleethub_crds::conditions::{find, is_true};
use fleethub_crds::{
    ApprovalRequest, MemberCluster, Placement, ResourceSnapshot, StagedUpdateStrategy, UpdateRun,
    names,
};
use fleethub_testkit::{
    Cleanup, Fleet, demo_deployment, http_get, poll_until, unique_name, wait_for,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Pods start on a real node (image pulls from the local registry included) within seconds;
/// generous for a loaded CI machine.
const TIMEOUT: Duration = Duration::from_secs(240);

fn in_cluster_fleet() -> Option<&'static Fleet> {
    let fleet = Fleet::get().unwrap();
    if fleet.real_member_count() == 0 {
        eprintln!("skipped: this fleet has no in-cluster fleet (FLEET_REAL_MEMBERS=0)");
        return None;
    }
    Some(fleet)
}

/// `http://ADDR/PATH` answered 200 within 2 s: its body. (A Service's rules may still lead to
/// a pod that is gone for a moment after a rollout: such a connection never answers.)
async fn get_ok(addr: SocketAddr, path: &str) -> Option<String> {
    match tokio::time::timeout(Duration::from_secs(2), http_get(addr, path)).await {
        Ok(Ok((200, body))) => Some(body),
        _ => None,
    }
}

/// The ClusterIP address of Service `ns/name`, port `port` (routed from the host to the
/// cluster's real node).
async fn service_addr(client: &Client, ns: &str, name: &str, port: u16) -> SocketAddr {
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let ip = services
        .get(name)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.cluster_ip)
        .unwrap_or_else(|| panic!("Service {ns}/{name} has no ClusterIP"));
    SocketAddr::new(ip.parse().unwrap(), port)
}

/// The hub pods that run and are not being deleted; each runs on real-hub's node with a read-only
/// root as uid 65532.
async fn running_hub_pods(hub: &Client) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(hub.clone(), "fleethub-system");
    let Ok(list) = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=fleethub-hub"))
        .await
    else {
        return Vec::new();
    };
    list.items
        .iter()
        .filter(|p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && p.metadata.deletion_timestamp.is_none()
        })
        .map(|p| {
            let spec = p.spec.as_ref().unwrap();
            assert_eq!(spec.node_name.as_deref(), Some("real-hub-node"));
            let pod_sc = spec.security_context.as_ref().unwrap();
            assert_eq!(pod_sc.run_as_user, Some(65532));
            let sc = spec.containers[0].security_context.as_ref().unwrap();
            assert_eq!(sc.read_only_root_filesystem, Some(true));
            p.metadata.name.clone().unwrap()
        })
        .collect()
}

/// The pod holding the hub's Lease.
async fn lease_holder(hub: &Client) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(hub.clone(), "fleethub-system");
    leases
        .get_opt("fleethub-hub")
        .await
        .ok()??
        .spec?
        .holder_identity
}

#[tokio::test]
async fn deploy_installs_as_written_and_join_runs_the_agent_as_a_pod() {
    let Some(fleet) = in_cluster_fleet() else {
        return;
    };
    let hub = fleet.real_hub().await.unwrap();

    // Two hub replicas Ready, as real containers under PodSecurity `restricted`.
    let namespaces: Api<Namespace> = Api::all(hub.clone());
    let ns = namespaces.get("fleethub-system").await.unwrap();
    assert_eq!(
        ns.metadata.labels.unwrap()["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    let deployments: Api<Deployment> = Api::namespaced(hub.clone(), "fleethub-system");
    let registry = fleet.registry().unwrap();
    for (name, replicas) in [("fleethub-hub", 2), ("fleethub-dashboard", 2)] {
        let d = wait_for(
            &deployments,
            name,
            "every replica ready",
            TIMEOUT,
            move |d: Option<&Deployment>| {
                d.and_then(|d| d.status.as_ref())
                    .is_some_and(|s| s.ready_replicas == Some(replicas))
            },
        )
        .await
        .unwrap();
        // The image deploy/ names, from the fleet's registry, by digest.
        let image = image_of(&d).unwrap();
        assert!(
            image.starts_with(&format!("{registry}/{name}@sha256:")),
            "{name} runs {image}"
        );
    }
    // Two Running pods on the real node, locked down, one of which holds the Lease (the other
    // test deletes the leader pod mid-run: its replacement may be starting).
    let leader = poll_until(
        "two running hub pods, one holding the lease",
        TIMEOUT,
        || {
            let hub = hub.clone();
            async move {
                let running = running_hub_pods(&hub).await;
                let leases: Api<Lease> = Api::namespaced(hub, "fleethub-system");
                let holder = leases
                    .get_opt("fleethub-hub")
                    .await
                    .ok()??
                    .spec?
                    .holder_identity?;
                (running.len() == 2 && running.contains(&holder)).then_some(holder)
            }
        },
    )
    .await
    .unwrap();
    let metrics = service_addr(&hub, "fleethub-system", "fleethub-hub-metrics", 8080).await;
    poll_until(
        "/metrics through the Service to show a leader",
        TIMEOUT,
        || async move {
            // The Service balances over both replicas: ask until the leader answers.
            let body = get_ok(metrics, "/metrics").await?;
            body.lines()
                .any(|l| l == "fleethub_hub_leader 1")
                .then_some(())
        },
    )
    .await
    .unwrap();
    eprintln!("the hub pod {leader} leads; /metrics answers at {metrics}");
    let dashboard = service_addr(&hub, "fleethub-system", "fleethub-dashboard", 80).await;
    poll_until(
        "the dashboard through its Service",
        TIMEOUT,
        || async move { get_ok(dashboard, "/healthz").await },
    )
    .await
    .unwrap();

    // Every real member joined with its agent as a pod on its real node.
    let members: Api<MemberCluster> = Api::all(hub.clone());
    for i in 1..=fleet.real_member_count() {
        let name = format!("real-{i}");
        wait_for(
            &members,
            &name,
            "the member to be joined and healthy",
            TIMEOUT,
            |m: Option<&MemberCluster>| {
                m.and_then(|m| m.status.as_ref()).is_some_and(|s| {
                    is_true(&s.conditions, "Joined") && is_true(&s.conditions, "Healthy")
                })
            },
        )
        .await
        .unwrap();
        let member = fleet.real_member(i).await.unwrap();
        let agents: Api<Deployment> = Api::namespaced(member.clone(), "fleethub-system");
        let agent = agents.get("fleethub-member-agent").await.unwrap();
        assert_eq!(agent.status.unwrap().ready_replicas, Some(1), "{name}");
        let agent_pods: Api<Pod> = Api::namespaced(member, "fleethub-system");
        let on_node: Vec<_> = agent_pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=fleethub-member-agent"))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|p| p.spec?.node_name)
            .collect();
        assert!(
            on_node.contains(&format!("{name}-node")),
            "{name}'s agent runs on {on_node:?}"
        );
    }
}

/// One test's demo workload on real-hub: namespace `<id>` with Deployment and Service `demo`, an
/// External placement on every real member, and a strategy with a stage per member (by `order`,
/// which `fleet up`'s join set), each but the last followed by an approval.
struct Demo {
    hub: Client,
    cleanup: Cleanup,
    id: String,
    members: usize,
}

impl Demo {
    async fn new(fleet: &Fleet) -> Self {
        let hub = fleet.real_hub().await.unwrap();
        let id = unique_name("demo");
        let demo = Demo {
            hub: hub.clone(),
            cleanup: Cleanup::new(fleet),
            id,
            members: fleet.real_member_count(),
        };
        // Deleted newest first: runs, placement (so the agents remove the workload), strategy,
        // the namespace on the hub.
        demo.cleanup.track::<Namespace>("real-hub", None, &demo.id);
        demo.cleanup
            .track::<StagedUpdateStrategy>("real-hub", None, &demo.id);
        demo.cleanup.track::<Placement>("real-hub", None, &demo.id);
        let namespaces: Api<Namespace> = Api::all(hub.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": demo.id}})).unwrap(),
            )
            .await
            .unwrap();
        let service: Service = serde_json::from_value(json!({"metadata": {"name": "demo"},
            "spec": {"selector": {"app": "demo"}, "ports": [{"port": 80, "targetPort": 8080}]}}))
        .unwrap();
        Api::<Service>::namespaced(hub.clone(), &demo.id)
            .create(&PostParams::default(), &service)
            .await
            .unwrap();
        demo.set_image(&fleet.demo_image("1.0.0").unwrap()).await;
        let stages: Vec<_> = (1..=demo.members)
            .map(|i| {
                let tasks = if i < demo.members {
                    json!([{"type": "Approval"}])
                } else {
                    json!([])
                };
                json!({"name": format!("stage-{i}"),
                       "labelSelector": {"matchLabels": {"order": i.to_string()}},
                       "afterStageTasks": tasks})
            })
            .collect();
        let strategy: StagedUpdateStrategy = serde_json::from_value(json!({
            "apiVersion": "fleethub.dev/v1alpha1", "kind": "StagedUpdateStrategy",
            "metadata": {"name": demo.id}, "spec": {"stages": stages}}))
        .unwrap();
        Api::<StagedUpdateStrategy>::all(hub.clone())
            .create(&PostParams::default(), &strategy)
            .await
            .unwrap();
        let clusters: Vec<String> = (1..=demo.members).map(|i| format!("real-{i}")).collect();
        let placement: Placement = serde_json::from_value(json!({
            "apiVersion": "fleethub.dev/v1alpha1", "kind": "Placement", "metadata": {"name": demo.id},
            "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Namespace", "name": demo.id}],
                     "policy": {"placementType": "PickFixed", "clusterNames": clusters},
                     "strategy": {"type": "External"}}}))
        .unwrap();
        Api::<Placement>::all(hub.clone())
            .create(&PostParams::default(), &placement)
            .await
            .unwrap();
        demo.wait_snapshot(0).await;
        demo
    }

    /// The hub's Deployment `demo` ([`demo_deployment`]) with `image`.
    async fn set_image(&self, image: &str) {
        Api::<Deployment>::namespaced(self.hub.clone(), &self.id)
            .patch(
                "demo",
                &PatchParams::apply("in-cluster-test").force(),
                &Patch::Apply(&demo_deployment(image)),
            )
            .await
            .unwrap();
    }

    async fn wait_snapshot(&self, index: u64) {
        let snapshots: Api<ResourceSnapshot> = Api::all(self.hub.clone());
        wait_for(
            &snapshots,
            &names::resource_snapshot_name(&self.id, index),
            "the snapshot",
            TIMEOUT,
            |s: Option<&ResourceSnapshot>| s.is_some(),
        )
        .await
        .unwrap();
    }

    /// Starts run `<id>-<suffix>` of snapshot `index`.
    async fn start_run(&self, suffix: &str, index: u64, health_timeout: &str) -> String {
        let name = format!("{}-{suffix}", self.id);
        let run: UpdateRun = serde_json::from_value(json!({
            "apiVersion": "fleethub.dev/v1alpha1", "kind": "UpdateRun", "metadata": {"name": name},
            "spec": {"placementName": self.id, "resourceSnapshotIndex": index.to_string(),
                     "stagedRolloutStrategyName": self.id, "healthTimeout": health_timeout}}))
        .unwrap();
        self.cleanup.track::<UpdateRun>("real-hub", None, &name);
        Api::<UpdateRun>::all(self.hub.clone())
            .create(&PostParams::default(), &run)
            .await
            .unwrap();
        name
    }

    /// What member `i`'s demo Service answers, asked `times` times: every answer's version.
    async fn versions(&self, fleet: &Fleet, i: usize, times: usize) -> Vec<String> {
        let member = fleet.real_member(i).await.unwrap();
        let addr = service_addr(&member, &self.id, "demo", 80).await;
        let mut out = Vec::new();
        for _ in 0..times {
            if let Some(body) = get_ok(addr, "/").await {
                // "demo-app 1.1.0 on demo-…"
                out.push(
                    body.split_whitespace()
                        .nth(1)
                        .unwrap_or_default()
                        .to_string(),
                );
            }
        }
        out
    }

    /// Waits until every answer of member `i`'s demo Service is `version`.
    async fn wait_serving(&self, fleet: &Fleet, i: usize, version: &str) {
        poll_until(
            &format!("real-{i} to serve demo-app {version} only"),
            TIMEOUT,
            || async move {
                let seen = self.versions(fleet, i, 6).await;
                (seen.len() == 6 && seen.iter().all(|v| v == version)).then_some(())
            },
        )
        .await
        .unwrap();
    }

    /// Approves `gate` (after `stage` of `run`) by clicking in real Chromium on the in-cluster
    /// dashboard, reached as a person tries it: `kubectl port-forward` to its Service. The person
    /// is ServiceAccount `default/<id>-approver` (outside the placed namespace, which every
    /// object in it would change), bound to the `fleethub:admin` role `deploy/hub` ships, signed
    /// in with a token from the TokenRequest API. Returns the person's user name.
    async fn approve_in_dashboard(
        &self,
        fleet: &Fleet,
        run: &str,
        stage: &str,
        gate: &str,
    ) -> String {
        let person = format!("{}-approver", self.id);
        let accounts: Api<ServiceAccount> = Api::namespaced(self.hub.clone(), "default");
        self.cleanup
            .track::<ServiceAccount>("real-hub", Some("default"), &person);
        accounts
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": person}})).unwrap(),
            )
            .await
            .unwrap();
        self.cleanup
            .track::<ClusterRoleBinding>("real-hub", None, &person);
        Api::<ClusterRoleBinding>::all(self.hub.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": person},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "fleethub:admin"},
                    "subjects": [{"kind": "ServiceAccount", "name": person, "namespace": "default"}]}))
                .unwrap(),
            )
            .await
            .unwrap();
        let request: TokenRequest =
            serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 600}}))
                .unwrap();
        let token = accounts
            .create_token_request(&person, &PostParams::default(), &request)
            .await
            .unwrap()
            .status
            .unwrap()
            .token;

        let mut forward = tokio::process::Command::new(
            std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()),
        )
        .arg("--kubeconfig")
        .arg(fleet.kubeconfig("real-hub"))
        .args([
            "-n",
            "fleethub-system",
            "port-forward",
            "svc/fleethub-dashboard",
            ":80",
        ])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
        // "Forwarding from 127.0.0.1:PORT -> 8080"
        let mut lines = BufReader::new(forward.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(TIMEOUT, lines.next_line())
            .await
            .expect("kubectl port-forward to the dashboard did not start")
            .unwrap()
            .unwrap_or_default();
        let port = first
            .strip_prefix("Forwarding from 127.0.0.1:")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected kubectl port-forward output: {first:?}"));
        // Drain what it prints later, so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

        let script = fleethub_testkit::repo_root().join("playwright/lib/approve-in-browser.js");
        let out = tokio::time::timeout(
            TIMEOUT,
            tokio::process::Command::new("node")
                .arg(&script)
                .args([run, stage, gate])
                .env("DASHBOARD_URL", format!("http://127.0.0.1:{port}"))
                .env("APPROVER_TOKEN", token)
                .kill_on_drop(true)
                .output(),
        )
        .await
        .expect("approving in Chromium did not finish")
        .expect("node is required (and `npm ci` in playwright/)");
        assert!(
            out.status.success(),
            "approving {gate} in Chromium failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprint!("{}", String::from_utf8_lossy(&out.stdout));
        drop(forward);
        format!("system:serviceaccount:default:{person}")
    }

    /// The image of member `i`'s demo Deployment.
    async fn member_image(&self, fleet: &Fleet, i: usize) -> Option<String> {
        let member = fleet.real_member(i).await.unwrap();
        let d: Api<Deployment> = Api::namespaced(member, &self.id);
        d.get_opt("demo").await.unwrap().as_ref().and_then(image_of)
    }
}

fn run_succeeded(r: Option<&UpdateRun>) -> bool {
    common::succeeded(r)
}

/// The message of the run's failed cluster, once the run stopped on one.
fn failed_cluster(run: &UpdateRun) -> Option<(String, String)> {
    let status = run.status.as_ref()?;
    status
        .stages_status
        .iter()
        .flat_map(|s| &s.clusters)
        .find_map(|c| {
            let failed = find(&c.conditions, "Succeeded")
                .filter(|cond| cond.status == "False")?
                .clone();
            Some((c.cluster_name.clone(), failed.message))
        })
}

#[tokio::test]
async fn real_pods_move_stage_by_stage_and_bad_images_fail_their_cluster() {
    let Some(fleet) = in_cluster_fleet() else {
        return;
    };
    let demo = Demo::new(fleet).await;
    let n = demo.members;
    let runs: Api<UpdateRun> = Api::all(demo.hub.clone());
    let approvals: Api<ApprovalRequest> = Api::all(demo.hub.clone());

    // 1.0.0 everywhere.
    let first = demo.start_run("v100", 0, "3m").await;
    let approver = auto_approve(demo.hub.clone(), first.clone());
    wait_for(&runs, &first, "1.0.0 rolled out", TIMEOUT, run_succeeded)
        .await
        .unwrap();
    approver.abort();
    for i in 1..=n {
        demo.wait_serving(fleet, i, "1.0.0").await;
    }

    // 1.1.0 stage by stage: real-1 serves it while the next member, behind the approval,
    // still serves 1.0.0; after the approval, every member serves 1.1.0.
    demo.set_image(&fleet.demo_image("1.1.0").unwrap()).await;
    demo.wait_snapshot(1).await;
    let second = demo.start_run("v110", 1, "3m").await;
    // The agent pod on real-1 is deleted as the run reaches it: its replacement applies the
    // Work (the member converges).
    let agent_pods: Api<Pod> =
        Api::namespaced(fleet.real_member(1).await.unwrap(), "fleethub-system");
    agent_pods
        .delete_collection(
            &Default::default(),
            &ListParams::default().labels("app.kubernetes.io/name=fleethub-member-agent"),
        )
        .await
        .unwrap();
    if n > 1 {
        wait_for(
            &approvals,
            &format!("{second}-stage-1"),
            "the gate after the first stage",
            TIMEOUT,
            |a: Option<&ApprovalRequest>| a.is_some(),
        )
        .await
        .unwrap();
        demo.wait_serving(fleet, 1, "1.1.0").await;
        let later = demo.versions(fleet, 2, 6).await;
        assert!(
            !later.is_empty() && later.iter().all(|v| v == "1.0.0"),
            "real-2 changed before its stage: {later:?}"
        );
        // The leading hub pod is deleted mid-run: the other replica leads and finishes the run.
        let leader = lease_holder(&demo.hub).await.unwrap();
        Api::<Pod>::namespaced(demo.hub.clone(), "fleethub-system")
            .delete(&leader, &Default::default())
            .await
            .unwrap();
        let started = std::time::Instant::now();
        let next = poll_until("another hub pod to lead", TIMEOUT, || {
            let hub = demo.hub.clone();
            let leader = leader.clone();
            async move { lease_holder(&hub).await.filter(|h| *h != leader) }
        })
        .await
        .unwrap();
        eprintln!(
            "hub leader {leader} deleted; {next} leads after {:?}",
            started.elapsed()
        );
    }
    if n > 1 {
        // The gate is approved as a person does: in Chromium, on the dashboard that runs as pods.
        let gate = format!("{second}-stage-1");
        let approver = demo
            .approve_in_dashboard(fleet, &second, "stage-1", &gate)
            .await;
        let approved = wait_for(
            &approvals,
            &gate,
            "the approval clicked in the dashboard",
            TIMEOUT,
            |a: Option<&ApprovalRequest>| {
                a.and_then(|a| a.status.as_ref())
                    .is_some_and(|s| is_true(&s.conditions, "Approved"))
            },
        )
        .await
        .unwrap();
        let message = find(&approved.status.unwrap().conditions, "Approved")
            .unwrap()
            .message
            .clone();
        assert!(
            message.contains(&approver),
            "the approval names who clicked ({approver}): {message}"
        );
    }
    let approver = auto_approve(demo.hub.clone(), second.clone());
    wait_for(&runs, &second, "1.1.0 rolled out", TIMEOUT, run_succeeded)
        .await
        .unwrap();
    approver.abort();
    for i in 1..=n {
        demo.wait_serving(fleet, i, "1.1.0").await;
    }
    // One write of each member's Work per snapshot, whoever led: generation 2 after two
    // snapshots.
    let works: Api<fleethub_crds::Work> = Api::all(demo.hub.clone());
    for w in works
        .list(&ListParams::default().labels(&format!("{}={}", names::PLACEMENT_LABEL, demo.id)))
        .await
        .unwrap()
        .items
    {
        assert_eq!(
            w.metadata.generation,
            Some(2),
            "Work {:?} was written more than once per snapshot",
            w.metadata.namespace
        );
    }

    // A missing image, then the broken release: each fails real-1 naming the image and the pod
    // state; no later member changes; the old pods keep serving 1.1.0.
    let good = fleet.demo_image("1.1.0").unwrap();
    for (index, version, states) in [
        (2, "9.9.9", &["ErrImagePull", "ImagePullBackOff"][..]),
        // Its container exits at start: the last report before the run's deadline names the
        // back-off or the exit itself (an agent reports a pod's progress at most once a second).
        (3, "1.2.0", &["CrashLoopBackOff", "exits with code 1"][..]),
    ] {
        let image = fleet.demo_image(version).unwrap();
        demo.set_image(&image).await;
        demo.wait_snapshot(index).await;
        let run = demo
            .start_run(&format!("v{}", version.replace('.', "")), index, "25s")
            .await;
        let stopped = wait_for(
            &runs,
            &run,
            "the run to fail its first cluster",
            TIMEOUT,
            |r: Option<&UpdateRun>| r.is_some_and(|r| failed_cluster(r).is_some()),
        )
        .await
        .unwrap();
        let (cluster, message) = failed_cluster(&stopped).unwrap();
        assert_eq!(cluster, "real-1", "{message}");
        assert!(message.contains(&image), "the image is named: {message}");
        assert!(
            states.iter().any(|s| message.contains(s)),
            "the pod state ({states:?}) is named: {message}"
        );
        assert_eq!(
            demo.member_image(fleet, 1).await.as_deref(),
            Some(image.as_str())
        );
        for i in 2..=n {
            assert_eq!(
                demo.member_image(fleet, i).await.as_deref(),
                Some(good.as_str()),
                "real-{i} changed after real-1 failed"
            );
            demo.wait_serving(fleet, i, "1.1.0").await;
        }
        // The old replicas keep serving on the failed cluster (maxUnavailable keeps them).
        assert!(
            demo.versions(fleet, 1, 3)
                .await
                .iter()
                .all(|v| v == "1.1.0"),
            "real-1 stopped serving 1.1.0"
        );
        eprintln!("{run} stopped at {cluster}: {message}");
    }
}

/// Whether the run is held by a regressed cluster, with its message.
fn held(r: Option<&UpdateRun>) -> Option<String> {
    let c = find(&r?.status.as_ref()?.conditions, "Progressing")?;
    (c.reason == fleethub_crds::update_run::reason::CLUSTER_REGRESSED).then(|| c.message.clone())
}

#[tokio::test]
async fn a_release_that_fails_in_its_soak_is_held_in_staging_and_rolled_back() {
    let Some(fleet) = in_cluster_fleet() else {
        return;
    };
    let demo = Demo::new(fleet).await;
    let n = demo.members;
    let runs: Api<UpdateRun> = Api::all(demo.hub.clone());
    let first = demo.start_run("v100", 0, "3m").await;
    let approver = auto_approve(demo.hub.clone(), first.clone());
    wait_for(&runs, &first, "1.0.0 rolled out", TIMEOUT, run_succeeded)
        .await
        .unwrap();
    approver.abort();
    for i in 1..=n {
        demo.wait_serving(fleet, i, "1.0.0").await;
    }

    // The first stage soaks a minute; 1.3.0 turns ready, then exits 20 s later, every time.
    let soak = json!({"spec": {"stages": [{"name": "stage-1",
        "labelSelector": {"matchLabels": {"order": "1"}},
        "afterStageTasks": [{"type": "TimedWait", "waitTime": "60s"}]}]}});
    let mut strategy = Api::<StagedUpdateStrategy>::all(demo.hub.clone())
        .get(&demo.id)
        .await
        .unwrap();
    strategy.spec.stages[0] = serde_json::from_value(soak["spec"]["stages"][0].clone()).unwrap();
    Api::<StagedUpdateStrategy>::all(demo.hub.clone())
        .replace(&demo.id, &PostParams::default(), &strategy)
        .await
        .unwrap();
    let late = fleet.demo_image("1.3.0").unwrap();
    demo.set_image(&late).await;
    demo.wait_snapshot(1).await;
    let name = format!("{}-v130", demo.id);
    let rollback = format!("{name}-rollback");
    demo.cleanup.track::<UpdateRun>("real-hub", None, &rollback);
    demo.cleanup.track::<UpdateRun>("real-hub", None, &name);
    let run: UpdateRun = serde_json::from_value(json!({
        "apiVersion": "fleethub.dev/v1alpha1", "kind": "UpdateRun", "metadata": {"name": name},
        "spec": {"placementName": demo.id, "resourceSnapshotIndex": "1",
                 "stagedRolloutStrategyName": demo.id, "healthTimeout": "40s",
                 "onFailure": "Rollback"}}))
    .unwrap();
    runs.create(&PostParams::default(), &run).await.unwrap();

    // real-1 runs 1.3.0, passes its update, then regresses in its soak: the run holds, naming
    // what its pods do.
    let holding = wait_for(
        &runs,
        &name,
        "the run to hold on real-1",
        TIMEOUT,
        |r: Option<&UpdateRun>| held(r).is_some(),
    )
    .await
    .unwrap();
    let message = held(Some(&holding)).unwrap();
    assert!(message.contains("real-1 regressed"), "{message}");
    assert!(
        [
            "restarted",
            "exits with code 1",
            "CrashLoopBackOff",
            "replicas"
        ]
        .iter()
        .any(|s| message.contains(s)),
        "the pods' state is named: {message}"
    );
    for i in 2..=n {
        assert_eq!(
            demo.member_image(fleet, i).await.as_deref(),
            Some(fleet.demo_image("1.0.0").unwrap().as_str()),
            "real-{i} got the release while real-1 was regressed"
        );
        demo.wait_serving(fleet, i, "1.0.0").await;
    }

    // It stays regressed past the run's health timeout: the run fails and rolls back; real-1
    // answers 1.0.0 again, and the next members never ran 1.3.0.
    let failed = wait_for(&runs, &name, "the run to fail", TIMEOUT, common::ended)
        .await
        .unwrap();
    let status = failed.status.as_ref().unwrap();
    assert!(!is_true(&status.conditions, "Succeeded"));
    assert_eq!(status.rollback_run.as_deref(), Some(rollback.as_str()));
    wait_for(
        &runs,
        &rollback,
        "the rollback to finish",
        TIMEOUT,
        run_succeeded,
    )
    .await
    .unwrap();
    demo.wait_serving(fleet, 1, "1.0.0").await;
    for i in 2..=n {
        demo.wait_serving(fleet, i, "1.0.0").await;
        assert_eq!(
            demo.member_image(fleet, i).await.as_deref(),
            Some(fleet.demo_image("1.0.0").unwrap().as_str())
        );
    }
}
