//! Simulated member agents: lightweight stand-ins for `fleethub-member-agent`, one per bench
//! member, inside this process, talking to the hub API server as the real agent does:
//!
//! - a heartbeat every `heartbeatPeriodSeconds`, spread evenly over the period across members,
//!   with the real agent's requests: a renewal of its Lease `member-agent`, and a server-side
//!   apply of its status (`Joined=True`, `lastHeartbeatTime`, versions, nodes) the first time
//!   and every 5 minutes;
//! - a watch on the member's Works (one watch per member, as real agents have, or one shared
//!   watch over all bench members' namespaces); every new Work generation is reported at once
//!   with `Applied=True` and `Available=True` (observedGeneration = the Work's generation) and
//!   `appliedResourceSnapshotIndex`, as `work_status.rs` writes them, under the agent's field
//!   manager. Nothing is applied to a member cluster: the simulation measures the hub.
//!
//! Also here: watches of the hub's answers (UpdateRun status, provisioned ServiceAccounts) that
//! feed the [`Timeline`].

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fleethub_crds::conditions::{find, is_true};
use fleethub_crds::member_cluster::{AGENT_LEASE, STATUS_REPORT_PERIOD, agent_lease};
use fleethub_crds::update_run::SUCCEEDED;
use fleethub_crds::update_run_plan::{self, UpdateRunPlan};
use fleethub_crds::work::{APPLIED, AVAILABLE};
use fleethub_crds::{MemberCluster, UpdateRun, Work, names};
use fleethub_runtime::retry::{self, Backoff};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::timeline::Timeline;

/// How a simulated agent retries a status write the hub did not take: 200 ms doubling.
const STATUS_RETRY: Backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(2));

/// The field manager of the real member agent (the simulation writes what it writes).
use fleethub_crds::field_manager::MEMBER_AGENT as AGENT_FIELD_MANAGER;
/// Prefix of every bench member's name.
pub const MEMBER_PREFIX: &str = "bench-";
/// Label on every object the bench creates (so clean-up finds them).
pub const BENCH_LABEL: &str = "fleethub.dev/bench";
/// Hub API calls the heartbeats may have in flight at once (a burst of joins is spread out).
const HEARTBEAT_CONCURRENCY: usize = 32;

/// Work generations whose report is being written: (namespace/name, generation).
type InFlight = Arc<Mutex<HashSet<(String, i64)>>>;
/// Images whose pods never become ready: a Work holding one is reported applied but not
/// available, so the hub's health timeout fails it (a bad version, for the auto-update bench).
pub type Unready = Arc<Mutex<HashSet<String>>>;

/// How simulated members watch their Works.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum WatchMode {
    /// One watch per member on its own namespace, like real agents (N watch connections).
    PerMember,
    /// One watch over all Works, filtered to bench members' namespaces (one connection).
    Shared,
}

/// What every simulated member shares.
#[derive(Clone)]
struct Sims {
    in_flight: InFlight,
    unready: Unready,
}

/// The running simulation.
pub struct Simulation {
    client: Client,
    timeline: Arc<Timeline>,
    mode: WatchMode,
    period: Duration,
    heartbeat_slots: Arc<Semaphore>,
    in_flight: InFlight,
    unready: Unready,
    tasks: Vec<JoinHandle<()>>,
    members: usize,
}

impl Simulation {
    /// A simulation with no members yet; in `Shared` mode its one Work watch starts now.
    pub fn new(client: Client, timeline: Arc<Timeline>, mode: WatchMode, period: Duration) -> Self {
        let mut sim = Simulation {
            client,
            timeline,
            mode,
            period,
            heartbeat_slots: Arc::new(Semaphore::new(HEARTBEAT_CONCURRENCY)),
            in_flight: Arc::new(Mutex::new(HashSet::new())),
            unready: Arc::new(Mutex::new(HashSet::new())),
            tasks: Vec::new(),
            members: 0,
        };
        if mode == WatchMode::Shared {
            let api = Api::<Work>::all(sim.client.clone());
            let (client, timeline, sims) = sim.parts();
            sim.tasks.push(tokio::spawn(async move {
                let mut works = work_changes(api);
                while let Some(next) = works.next().await {
                    let Ok(work) = next else { continue };
                    let is_bench = work.namespace().is_some_and(|ns| {
                        names::cluster_of_namespace(&ns)
                            .is_some_and(|c| c.starts_with(MEMBER_PREFIX))
                    });
                    if is_bench {
                        // Each member reacts on its own: do not serialize them on one stream.
                        let (c, t, f) = (client.clone(), timeline.clone(), sims.clone());
                        tokio::spawn(async move { report(&c, &t, &f, work).await });
                    }
                }
            }));
        }
        sim
    }

    fn parts(&self) -> (Client, Arc<Timeline>, Sims) {
        (
            self.client.clone(),
            self.timeline.clone(),
            Sims {
                in_flight: self.in_flight.clone(),
                unready: self.unready.clone(),
            },
        )
    }

    /// The images simulated members never make ready.
    pub fn unready(&self) -> Unready {
        self.unready.clone()
    }

    /// Starts the agents of `members` (heartbeats, and Work watches in `PerMember` mode).
    pub fn add(&mut self, members: &[String]) {
        let n = members.len().max(1) as u32;
        for (k, member) in members.iter().enumerate() {
            // The first beat at once (that joins the member); later ones spread over the period.
            let offset = self.period * k as u32 / n;
            let (client, timeline, sims) = self.parts();
            let (member, period, slots) =
                (member.clone(), self.period, self.heartbeat_slots.clone());
            self.tasks.push(tokio::spawn(heartbeats(
                client.clone(),
                member.clone(),
                period,
                offset,
                slots,
            )));
            if self.mode == WatchMode::PerMember {
                let api =
                    Api::<Work>::namespaced(client.clone(), &names::member_namespace(&member));
                self.tasks.push(tokio::spawn(async move {
                    let mut works = work_changes(api);
                    while let Some(next) = works.next().await {
                        if let Ok(work) = next {
                            report(&client, &timeline, &sims, work).await;
                        }
                    }
                }));
            }
        }
        self.members += members.len();
    }

    /// How many members are simulated.
    pub fn members(&self) -> usize {
        self.members
    }

    /// Stops every agent.
    pub fn stop(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

impl Drop for Simulation {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The Works of `api` whose generation changed (a new spec, or their deletion): a status-only
/// change (the simulated agents' own reports) needs no reaction. (Their first sight passes, so
/// [`report`] still skips a generation that is already reported.)
fn work_changes(
    api: Api<Work>,
) -> futures::stream::BoxStream<'static, Result<Work, watcher::Error>> {
    fleethub_runtime::watch(api, fleethub_runtime::watcher_config())
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default())
        .boxed()
}

/// One member's heartbeats, forever.
async fn heartbeats(
    client: Client,
    member: String,
    period: Duration,
    offset: Duration,
    slots: Arc<Semaphore>,
) {
    let joined_at = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now());
    let mut first = true;
    let mut beats = Beats::default();
    loop {
        {
            let Ok(_permit) = slots.acquire().await else {
                return;
            };
            if let Err(e) = beat(&client, &member, period, joined_at, &mut beats).await {
                // Read the Lease again; the status stays reported (the first Lease write fails
                // until the hub has provisioned the member's namespace).
                beats.lease = None;
                tracing::debug!(member, error = %e, "simulated heartbeat failed");
            }
        }
        let wait = if first { period + offset } else { period };
        first = false;
        tokio::time::sleep(wait).await;
    }
}

/// What a simulated agent keeps between heartbeats, as the real one does.
#[derive(Default)]
struct Beats {
    /// Its Lease as the last renewal returned it.
    lease: Option<Lease>,
    /// Its MemberCluster's generation as last read or written, and when it last wrote its
    /// status.
    reported: Option<(Option<i64>, Instant)>,
}

/// One heartbeat, with the real agent's requests: the MemberCluster's status written the first
/// time and then every [`STATUS_REPORT_PERIOD`] (a simulated member never changes), read first
/// only when the agent has no copy of it; and the Lease renewed (an update; created the first
/// time).
async fn beat(
    client: &Client,
    member: &str,
    period: Duration,
    joined_at: jiff::Timestamp,
    beats: &mut Beats,
) -> Result<(), kube::Error> {
    let api: Api<MemberCluster> = Api::all(client.clone());
    let now = jiff::Timestamp::now();
    // The status first: the first one joins the member (its namespace may not exist yet).
    let due = match beats.reported {
        Some((_, at)) => at.elapsed() >= STATUS_REPORT_PERIOD,
        None => true,
    };
    if due {
        let generation = match beats.reported {
            Some((generation, _)) => generation,
            None => match api.get_opt(member).await? {
                Some(mc) => mc.metadata.generation,
                None => return Ok(()),
            },
        };
        let written = write_status(&api, member, period, joined_at, generation, now).await?;
        beats.reported = Some((written.metadata.generation, Instant::now()));
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), &names::member_namespace(member));
    let previous = match beats.lease.take() {
        Some(lease) => Some(lease),
        None => leases.get_opt(AGENT_LEASE).await?,
    };
    let lease = agent_lease(previous, member, member, period, now);
    beats.lease = Some(if lease.metadata.resource_version.is_some() {
        leases
            .replace(AGENT_LEASE, &PostParams::default(), &lease)
            .await?
    } else {
        leases.create(&PostParams::default(), &lease).await?
    });
    Ok(())
}

/// Server-side applies a simulated member's status, as the real agent writes it.
async fn write_status(
    api: &Api<MemberCluster>,
    member: &str,
    period: Duration,
    joined_at: jiff::Timestamp,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Result<MemberCluster, kube::Error> {
    let status = json!({
        "apiVersion": "fleethub.dev/v1alpha1",
        "kind": "MemberCluster",
        "metadata": {"name": member},
        "status": {
            "conditions": [{"type": "Joined", "status": "True", "reason": "AgentJoined",
                "message": format!("simulated agent heartbeats every {}s", period.as_secs()),
                "observedGeneration": generation,
                "lastTransitionTime": joined_at.to_string()}],
            "lastHeartbeatTime": now.round(jiff::Unit::Second).unwrap_or(now).to_string(),
            "agentVersion": "fleethub-bench-simulated",
            "kubernetesVersion": "v1.33.13",
            "nodeCount": 3,
            "allocatable": {"cpu": "24", "memory": "96Gi", "pods": "330"},
        },
    });
    api.patch_status(
        member,
        &PatchParams::apply(AGENT_FIELD_MANAGER).force(),
        &Patch::Apply(&status),
    )
    .await
}

/// Reports a new Work generation applied and available, as the real agent does once its
/// manifests are applied and ready.
async fn report(client: &Client, timeline: &Timeline, sims: &Sims, work: Work) {
    let in_flight = &sims.in_flight;
    let seen = Instant::now();
    let Some(ns) = work.namespace() else { return };
    let Some(cluster) = names::cluster_of_namespace(&ns).map(str::to_string) else {
        return;
    };
    if work.metadata.deletion_timestamp.is_some() {
        return;
    }
    let generation = work.metadata.generation.unwrap_or_default();
    let reported = work
        .status
        .as_ref()
        .and_then(|s| find(&s.conditions, AVAILABLE))
        .and_then(|c| c.observed_generation);
    if reported == Some(generation) {
        return;
    }
    let index = work.spec.resource_snapshot_index;
    let key = (work.spec.placement_name.clone(), cluster, index);
    timeline.work_seen(key.clone(), seen, resource_version(&work));
    let flight = (format!("{ns}/{}", work.name_any()), generation);
    let first = in_flight
        .lock()
        .map(|mut f| f.insert(flight.clone()))
        .unwrap_or(false);
    if !first {
        return; // this generation's report is already on its way
    }
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now())
        .to_string();
    let cond = |type_: &str, reason: &str, message: String| {
        json!({"type": type_, "status": "True", "reason": reason, "message": message,
               "observedGeneration": generation, "lastTransitionTime": now})
    };
    let n = work.spec.workload.manifests.len();
    let bad = bad_image(&work, &sims.unready);
    let available = match &bad {
        None => cond(
            AVAILABLE,
            "ManifestsAvailable",
            format!("{n} manifests available (simulated)"),
        ),
        Some(image) => {
            let mut c = cond(
                AVAILABLE,
                "WorkloadsNotReady",
                format!("pods of {image} are not ready (simulated)"),
            );
            c["status"] = json!("False");
            c
        }
    };
    let body = json!({
        "apiVersion": "fleethub.dev/v1alpha1",
        "kind": "Work",
        "metadata": {"name": work.name_any(), "namespace": ns},
        "status": {
            "conditions": [
                cond(APPLIED, "ManifestsApplied", format!("applied {n} manifests of resource snapshot {index} (simulated)")),
                available,
            ],
            "appliedResourceSnapshotIndex": index,
        },
    });
    let api: Api<Work> = Api::namespaced(client.clone(), &ns);
    let name = work.name_any();
    let write = || async {
        let sent = Instant::now();
        api.patch_status(
            &name,
            &PatchParams::apply(AGENT_FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .map(|_| (sent, Instant::now()))
    };
    let gone = |e: &kube::Error| matches!(e, kube::Error::Api(e) if e.code == 404);
    let written = retry::retry(
        STATUS_RETRY,
        5,
        write,
        |e| !gone(e),
        |e, retry_in| {
            tracing::debug!(work = %flight.0, error = %e, ?retry_in, "simulated status write failed");
        },
    )
    .await;
    match written {
        Ok((sent, answered)) => {
            if !timeline.was_reported(&key) {
                timeline.reported(key.clone(), sent);
                timeline.report_answered(key.clone(), answered);
            }
        }
        // The Work is gone, or the hub did not take the write.
        Err(_) => timeline.status_write_failed(),
    }
    if let Ok(mut f) = in_flight.lock() {
        f.remove(&flight);
    }
}

/// The first container image of `work`'s manifests that is in `unready`.
fn bad_image(work: &Work, unready: &Unready) -> Option<String> {
    let unready = unready.lock().ok()?;
    if unready.is_empty() {
        return None;
    }
    work.spec.workload.manifests.iter().find_map(|m| {
        m["spec"]["template"]["spec"]["containers"]
            .as_array()?
            .iter()
            .filter_map(|c| c["image"].as_str())
            .find(|i| unready.contains(*i))
            .map(str::to_string)
    })
}

/// Watches bench UpdateRuns and records each cluster the hub marks succeeded and each run's
/// outcome.
pub fn watch_runs(client: Client, timeline: Arc<Timeline>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<UpdateRun> = Api::all(client.clone());
        let cfg = fleethub_runtime::watcher_config().labels(&format!("{BENCH_LABEL}=true"));
        let mut runs = fleethub_runtime::watch(api, cfg).applied_objects().boxed();
        // The runs' UpdateRunPlans (the order of their large stages' clusters), each read once.
        let plans_api: Api<UpdateRunPlan> = Api::all(client);
        let mut plans: HashMap<String, UpdateRunPlan> = HashMap::new();
        while let Some(next) = runs.next().await {
            let Ok(mut run) = next else { continue };
            let at = Instant::now();
            let name = run.name_any();
            let version = resource_version(&run);
            if let Some(plan) = update_run_plan::plan_to_read(&run, plans.get(&name))
                && let Ok(Some(plan)) = plans_api.get_opt(plan).await
            {
                plans.insert(name.clone(), plan);
            }
            if let Err(e) = update_run_plan::read_into(&mut run, plans.get(&name)) {
                eprintln!("[bench] run {name}: {e}");
                continue;
            }
            let Some(status) = run.status.as_ref() else {
                continue;
            };
            for stage in &status.stages_status {
                for c in &stage.clusters {
                    if is_true(&c.conditions, SUCCEEDED) {
                        timeline.cluster_done(&name, &c.cluster_name, at, version);
                    }
                }
            }
            match find(&status.conditions, SUCCEEDED) {
                Some(c) if c.status == "True" => timeline.run_succeeded(&name, at),
                Some(c) => timeline.run_failed(&name, format!("{}: {}", c.reason, c.message)),
                None => {}
            }
        }
    })
}

/// Watches the agents' ServiceAccounts the hub provisions and records when each bench member's
/// appeared.
pub fn watch_provisioning(client: Client, timeline: Arc<Timeline>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<ServiceAccount> = Api::all(client);
        let cfg = fleethub_runtime::watcher_config().fields("metadata.name=member-agent");
        let mut accounts = fleethub_runtime::watch(api, cfg).applied_objects().boxed();
        while let Some(next) = accounts.next().await {
            let Ok(sa) = next else { continue };
            let at = Instant::now();
            if let Some(c) = sa
                .namespace()
                .as_deref()
                .and_then(names::cluster_of_namespace)
                && c.starts_with(MEMBER_PREFIX)
            {
                timeline.provisioned(c, at);
            }
        }
    })
}

/// An object's resourceVersion as the number the hub's etcd storage makes it (0 if it is not).
pub fn resource_version(object: &impl Resource) -> u64 {
    object
        .meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
