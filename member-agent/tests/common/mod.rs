//! What the member agent's integration tests share: an agent running in-process against the
//! real local fleet (hub + member cluster `member-1`), a MemberCluster of the test's own, Works,
//! and deadline-bounded waits.
//!
//! The agent runs in the test process (not as the binary) so a test can stop it like a crash —
//! the task is dropped wherever it is — and start a new one; dropping a [`TestAgent`] stops it, so
//! nothing outlives a failing test.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fleethub_crds::applied_work::{AppliedWork, applied_work_name};
use fleethub_crds::conditions::Condition;
use fleethub_crds::{MemberCluster, Work};
use fleethub_member_agent::metrics::Metrics;
use fleethub_member_agent::{Agent, AgentConfig, DEFAULT_RESYNC_PERIOD, clock, readiness};
use fleethub_runtime::Health;
use fleethub_testkit::{
    Cleanup, Fleet, free_port, http_get, poll_until, unique_name, wait_deleted, wait_for,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long any single wait may take.
pub const TIMEOUT: Duration = Duration::from_secs(120);
/// The field manager of the tests' own writes.
pub const TEST_MANAGER: &str = "fleethub-test";

/// Shows the agent's logs in a failing test's output.
pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .with_test_writer()
        .try_init();
}

/// A member agent running in this process, with its own `/readyz` and `/metrics` server.
pub struct TestAgent {
    /// Address of its health server.
    pub addr: SocketAddr,
    shutdown: CancellationToken,
    agent: JoinHandle<()>,
    server: JoinHandle<Result<(), fleethub_runtime::Error>>,
}

impl TestAgent {
    /// Starts an agent for MemberCluster `member_name`, applying to member cluster `member-1`.
    pub async fn start(fleet: &Fleet, member_name: &str) -> TestAgent {
        init_logs();
        let mut registry = Registry::with_prefix("fleethub_member_agent");
        let metrics = Metrics::register(&mut registry);
        let health = Health::new(registry, readiness::ALL);
        let addr: SocketAddr = ([127, 0, 0, 1], free_port().unwrap()).into();
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(fleethub_runtime::serve(
            addr,
            health.router(),
            shutdown.clone(),
        ));
        let agent = Agent {
            config: AgentConfig {
                member_name: member_name.to_string(),
                heartbeat_period: None,
                resync_period: DEFAULT_RESYNC_PERIOD,
            },
            hub: fleet.hub().await.unwrap(),
            member: fleet.member(1).await.unwrap(),
            health,
            metrics,
            clock: Arc::new(clock::SystemClock),
        };
        let agent = tokio::spawn(agent.run(shutdown.clone()));
        TestAgent {
            addr,
            shutdown,
            agent,
            server,
        }
    }

    /// Stops the agent the way a crash would: its task is dropped wherever it is.
    pub fn kill(self) {
        drop(self);
    }

    /// `/readyz`: the status code and body.
    pub async fn readyz(&self) -> (u16, String) {
        http_get(self.addr, "/readyz")
            .await
            .unwrap_or((0, String::new()))
    }

    /// Waits until `/readyz` answers 200.
    pub async fn wait_ready(&self) {
        poll_until("the agent's /readyz to answer 200", TIMEOUT, || async {
            (self.readyz().await.0 == 200).then_some(())
        })
        .await
        .unwrap();
    }

    /// The value of metric line `series` (e.g. `…_reconciles_total{result="success"}`), if any.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let (_, body) = http_get(self.addr, "/metrics").await.ok()?;
        body.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
    }

    /// Waits until the agent has finished `n` Work reconciliations.
    pub async fn wait_reconciled(&self, n: f64) {
        let series = "fleethub_member_agent_reconciles_total{result=\"success\"} ";
        poll_until("the agent to reconcile", TIMEOUT, || async {
            self.metric(series).await.filter(|v| *v >= n)
        })
        .await
        .unwrap();
    }
}

impl Drop for TestAgent {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.agent.abort();
        self.server.abort();
    }
}

/// A MemberCluster of the test's own (applying to member cluster `member-1`) and its Works
/// namespace on the hub; dropping it deletes them, its Works and what they applied to
/// `member-1` (declare it before the [`TestAgent`], so the agent is stopped first).
pub struct TestMember {
    /// The MemberCluster's name.
    pub name: String,
    /// Its Works namespace on the hub.
    pub namespace: String,
    /// Admin client of the hub.
    pub hub: Client,
    /// Admin client of member cluster `member-1`.
    pub member: Client,
    /// Everything created for this member, on the hub and on `member-1`.
    pub cleanup: Cleanup,
}

impl TestMember {
    /// A name for a new test member (no object is created).
    pub async fn named(fleet: &Fleet) -> TestMember {
        let name = unique_name("m");
        let namespace = fleethub_crds::names::member_namespace(&name);
        let cleanup = Cleanup::new(fleet);
        cleanup.track::<Namespace>("hub", None, &namespace);
        cleanup.track::<MemberCluster>("hub", None, &name);
        TestMember {
            namespace,
            name,
            hub: fleet.hub().await.unwrap(),
            member: fleet.member(1).await.unwrap(),
            cleanup,
        }
    }

    /// Creates a new MemberCluster (heartbeat every `heartbeat_seconds`) and its namespace.
    pub async fn create(fleet: &Fleet, heartbeat_seconds: Option<i32>) -> TestMember {
        let m = Self::named(fleet).await;
        m.create_objects(heartbeat_seconds).await;
        m
    }

    /// Creates the MemberCluster and its namespace (the hub's membership controller, when it
    /// runs, creates the namespace too; applying it is harmless).
    pub async fn create_objects(&self, heartbeat_seconds: Option<i32>) {
        let ssa = PatchParams::apply(TEST_MANAGER).force();
        let spec = match heartbeat_seconds {
            Some(s) => json!({"heartbeatPeriodSeconds": s}),
            None => json!({}),
        };
        Api::<MemberCluster>::all(self.hub.clone())
            .patch(
                &self.name,
                &ssa,
                &Patch::Apply(json!({
                    "apiVersion": "fleethub.dev/v1alpha1", "kind": "MemberCluster",
                    "metadata": {"name": self.name}, "spec": spec,
                })),
            )
            .await
            .unwrap();
        Api::<Namespace>::all(self.hub.clone())
            .patch(
                &self.namespace,
                &ssa,
                &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}})),
            )
            .await
            .unwrap();
    }

    /// The Works API of this member's namespace.
    pub fn works(&self) -> Api<Work> {
        Api::namespaced(self.hub.clone(), &self.namespace)
    }

    /// The name of the AppliedWork of Work `work`.
    pub fn applied_work_name(&self, work: &str) -> String {
        applied_work_name(&self.namespace, work)
    }

    /// The AppliedWorks API of member cluster `member-1`.
    pub fn applied_works(&self) -> Api<AppliedWork> {
        Api::all(self.member.clone())
    }

    /// Creates or updates Work `name` (server-side apply).
    pub async fn apply_work(&self, name: &str, spec: Value) -> Work {
        // The agent that would remove the Work's finalizer is stopped before the clean-up runs;
        // deleting the AppliedWork on the member removes what the Work applied (it owns it).
        self.cleanup
            .track_forced::<AppliedWork>("member-1", None, &self.applied_work_name(name));
        self.cleanup
            .track_forced::<Work>("hub", Some(&self.namespace), name);
        self.works()
            .patch(
                name,
                &PatchParams::apply(TEST_MANAGER).force(),
                &Patch::Apply(json!({
                    "apiVersion": "fleethub.dev/v1alpha1", "kind": "Work",
                    "metadata": {"name": name, "namespace": self.namespace},
                    "spec": spec,
                })),
            )
            .await
            .unwrap()
    }

    /// Waits until Work `name` reports on its current generation and `check` holds.
    pub async fn wait_work(&self, name: &str, what: &str, check: impl Fn(&Work) -> bool) -> Work {
        wait_for(
            &self.works(),
            name,
            what,
            TIMEOUT,
            move |w: Option<&Work>| w.is_some_and(|w| reports_on_current_generation(w) && check(w)),
        )
        .await
        .unwrap()
    }

    /// Deletes every Work of this member and waits until they are gone (the agent must run:
    /// it removes its finalizer).
    pub async fn delete_works(&self) {
        let works = self.works();
        for w in works.list(&ListParams::default()).await.unwrap() {
            let _ = works.delete(&w.name_any(), &DeleteParams::default()).await;
            wait_deleted(&works, &w.name_any(), TIMEOUT).await.unwrap();
        }
    }

    /// Deletes the MemberCluster and its namespace (call after [`TestMember::delete_works`]).
    pub async fn delete(&self) {
        let _ = Api::<MemberCluster>::all(self.hub.clone())
            .delete(&self.name, &DeleteParams::default())
            .await;
        let _ = Api::<Namespace>::all(self.hub.clone())
            .delete(&self.namespace, &DeleteParams::default())
            .await;
    }
}

/// The condition `type_` of the Work, if reported.
pub fn condition<'a>(work: &'a Work, type_: &str) -> Option<&'a Condition> {
    fleethub_crds::conditions::find(&work.status.as_ref()?.conditions, type_)
}

/// Whether both of the Work's conditions describe its current generation.
pub fn reports_on_current_generation(work: &Work) -> bool {
    ["Applied", "Available"].iter().all(|t| {
        condition(work, t).is_some_and(|c| c.observed_generation == work.metadata.generation)
    })
}

/// Whether condition `type_` has `status` and `reason`.
pub fn has(work: &Work, type_: &str, status: &str, reason: &str) -> bool {
    condition(work, type_).is_some_and(|c| c.status == status && c.reason == reason)
}

/// A Namespace manifest.
pub fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// A ConfigMap manifest.
pub fn config_map(namespace: &str, name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": namespace}, "data": data})
}

/// A Deployment manifest; `pod_labels` are added to the pod template's.
pub fn deployment(
    namespace: &str,
    name: &str,
    replicas: i32,
    pod_labels: Value,
    rev: &str,
) -> Value {
    let mut labels = json!({"app": name});
    if let Some(extra) = pod_labels.as_object() {
        labels.as_object_mut().unwrap().extend(extra.clone());
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "namespace": namespace},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": labels, "annotations": {"rev": rev}},
                                 "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}}})
}

/// A Work spec.
pub fn work_spec(placement: &str, index: i64, manifests: Vec<Value>) -> Value {
    json!({"placementName": placement, "resourceSnapshotIndex": index,
           "workload": {"manifests": manifests}})
}
