//! The fleethub hub controller manager: connects to the hub cluster, waits until the fleethub CRDs
//! are served, then runs the controllers (the staged-update engine and the work generator) while
//! it holds the leader-election Lease (see `leader.rs`), and serves `/healthz`, `/readyz` and
//! `/metrics` until SIGTERM. A standby replica is ready: it is healthy and able to take over.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use fleethub_hub::caches::SharedCaches;
use fleethub_hub::clock::{Clock, SystemClock};
use fleethub_hub::leader::{LeaderElectionArgs, LeaderElector};
use fleethub_hub::metrics::Metrics;
use fleethub_hub::{
    autoupdate, membership, override_snapshots, placement, update_run, work_generator,
};
use fleethub_runtime::logging;
use fleethub_runtime::process::{ProcessArgs, register_build_info};
use fleethub_runtime::{Health, kubeconfig, probe};
use kube::Api;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

/// mimalloc instead of glibc's malloc: the hub parses and writes objects of hundreds of kilobytes
/// (a 1,000-cluster run) on several threads, and glibc kept the freed memory in per-thread
/// arenas: 425 MiB resident, nearly all of it in 64 MiB arenas, half-way through a
/// 1,000-cluster run.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long controllers may take to finish in-flight reconciles after SIGTERM, before the lease
/// is released. Short, because a standby waits for the release to lead (a rolling update or a
/// deleted leader pod stalls every run until then); a reconcile cut short is no worse than a
/// crash, which every controller survives (what was written is in the API server, and the next
/// leader reconciles everything again). Was 5 s: a deleted leader pod then took up to 7.6 s to
/// hand over.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(1);
/// How long controllers may take to stop after this hub lost the leader-election lease.
const LOST_LEASE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Kinds the hub needs served by the hub API server.
const KINDS: &[&str] = &[
    "MemberCluster",
    "Placement",
    "ResourceSnapshot",
    "Binding",
    "Work",
    "StagedUpdateStrategy",
    "UpdateRun",
    "ApprovalRequest",
    "AutoUpdatePolicy",
    "Freeze",
];

/// The fleethub hub controller manager.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Kubeconfig of the hub cluster (default: in-cluster configuration, then $KUBECONFIG).
    #[arg(long, env = "FLEETHUB_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// A member is marked Healthy=False once its agent missed this many heartbeat periods.
    #[arg(long, env = "FLEETHUB_HEARTBEAT_STALE_MULTIPLE", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    heartbeat_stale_multiple: u32,
    /// The hub's own namespace (in a cluster, its Pod's): metric checks' Secrets
    /// (`metricCheck.secretRef`) are read from here.
    #[arg(long, env = "FLEETHUB_NAMESPACE", default_value = "fleethub-system")]
    namespace: String,
    /// A registry (`host` or `host:port`, as AutoUpdatePolicy repositories name it) whose tags
    /// are listed over plain HTTP instead of HTTPS; repeat the flag or separate with commas.
    /// Loopback registries (`localhost`, `127.0.0.1`, `[::1]`) always are.
    #[arg(
        long = "insecure-registry",
        env = "FLEETHUB_INSECURE_REGISTRIES",
        value_delimiter = ','
    )]
    insecure_registries: Vec<String>,
    /// Cluster updates written at once: Bindings a run binds together, and Bindings whose Works
    /// are written together. Lower keeps the hub API server responsive during large runs
    /// (members' reports, approvals, the dashboard); higher starts a large stage's clusters
    /// sooner on a hub API server with cores to spare.
    #[arg(long, env = "FLEETHUB_CONCURRENT_CLUSTER_UPDATES", default_value_t = fleethub_hub::CONCURRENT_CLUSTER_UPDATES, value_parser = clap::value_parser!(u16).range(1..=1024))]
    concurrent_cluster_updates: u16,
    #[command(flatten)]
    leader_election: LeaderElectionArgs,
    #[command(flatten)]
    process: ProcessArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    logging::init(args.process.log_format);
    // Bad leader-election flags are refused at once, before connecting.
    let lease = match args.leader_election.leader_elect {
        true => Some(
            args.leader_election
                .config()
                .map_err(|e| anyhow::anyhow!("leader election: {e}"))?,
        ),
        false => None,
    };
    let shutdown = fleethub_runtime::shutdown_on_signal();
    fleethub_runtime::set_retry_wait_max(fleethub_hub::RETRY_WAIT_MAX);

    let client = kubeconfig::client(args.kubeconfig.as_deref())
        .await
        .context("connecting to the hub cluster")?;

    let mut registry = Registry::with_prefix("fleethub_hub");
    register_build_info(&mut registry, "Build information of the running hub", &[]);
    let metrics = Metrics::new(&mut registry);
    registry.register_collector(Box::new(fleethub_runtime::WatchFailureMetrics));
    let health = Health::new(registry, &["hub-api"]);

    let server = tokio::spawn(fleethub_runtime::serve(
        args.process.listen,
        health.router(),
        shutdown.clone(),
    ));

    let gv = format!("{}/{}", fleethub_crds::GROUP, fleethub_crds::VERSION);
    if let Some(version) = probe::until_ready(&health, "hub-api", &shutdown, || {
        probe::api_server(&client, Some((&gv, KINDS)))
    })
    .await
    {
        tracing::info!(hub_version = %version, "connected to the hub; fleethub API is served; starting controllers");
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let controllers = |stop: CancellationToken| {
            run_controllers(
                client.clone(),
                clock.clone(),
                Settings {
                    heartbeat_stale_multiple: args.heartbeat_stale_multiple,
                    namespace: &args.namespace,
                    insecure_registries: &args.insecure_registries,
                    concurrent_cluster_updates: args.concurrent_cluster_updates,
                },
                metrics.clone(),
                stop,
            )
        };
        if let Some(config) = lease {
            // The elector has connections of its own: a renewal must not queue behind the
            // controllers' requests (a 1,000-cluster run's status is half a megabyte).
            let lease_client = kubeconfig::client(args.kubeconfig.as_deref())
                .await
                .context("connecting to the hub cluster for leader election")?;
            let mut elector =
                LeaderElector::new(lease_client, config, clock.clone(), metrics.leader.clone());
            lead_while_elected(&mut elector, &metrics, &shutdown, controllers).await;
        } else {
            tracing::info!("leader election is off: running the controllers");
            metrics.leader.set(1);
            metrics.zero_fleet_state();
            let stop = shutdown.child_token();
            fleethub_runtime::stop_within(SHUTDOWN_GRACE, controllers(stop.clone()), &shutdown)
                .await;
        }
    }

    shutdown.cancelled().await;
    server.await.context("health server task")??;
    tracing::info!("stopped");
    Ok(())
}

/// The controllers' settings from the command line.
struct Settings<'a> {
    heartbeat_stale_multiple: u32,
    namespace: &'a str,
    insecure_registries: &'a [String],
    concurrent_cluster_updates: u16,
}

/// Runs every controller until `stop` is cancelled.
async fn run_controllers(
    client: kube::Client,
    clock: Arc<dyn Clock>,
    settings: Settings<'_>,
    metrics: Metrics,
    stop: CancellationToken,
) {
    let Settings {
        heartbeat_stale_multiple,
        namespace,
        insecure_registries,
        concurrent_cluster_updates,
    } = settings;
    // Each controller on a task of its own, so they use every core and none of them (nor the
    // lease renewal, polled beside this future) waits while another works: joined in one task,
    // a reconcile parsing a large UpdateRun delayed renewals until the lease was lost.
    // MemberClusters, Bindings and Works are listed and watched once for all the controllers
    // (each share taken before the watches start).
    let mut caches = SharedCaches::new(&client);
    let mut tasks = AbortOnDrop(vec![
        tokio::spawn(membership::run(
            client.clone(),
            clock.clone(),
            heartbeat_stale_multiple,
            metrics.clone(),
            caches.members.subscribe(),
            stop.clone(),
        )),
        tokio::spawn(placement::controller::run(
            client.clone(),
            clock.clone(),
            metrics.clone(),
            caches.members.subscribe(),
            caches.bindings.subscribe(),
            caches.works.store(),
            stop.clone(),
        )),
        tokio::spawn(update_run::controller::run(
            client.clone(),
            Api::namespaced(client.clone(), namespace),
            clock.clone(),
            metrics.clone(),
            caches.subscribe_all(),
            concurrent_cluster_updates,
            stop.clone(),
        )),
        tokio::spawn(autoupdate::controller::run(
            client.clone(),
            namespace.to_string(),
            insecure_registries.to_vec(),
            clock.clone(),
            metrics.clone(),
            stop.clone(),
        )),
        tokio::spawn(override_snapshots::run(
            client.clone(),
            metrics.clone(),
            stop.clone(),
        )),
        tokio::spawn(work_generator::run(
            client,
            clock,
            metrics,
            caches.subscribe_all(),
            concurrent_cluster_updates,
            stop.clone(),
        )),
    ]);
    tasks.0.extend(caches.spawn(&stop));
    while !tasks.0.is_empty() {
        let (ended, i, _) = futures::future::select_all(tasks.0.iter_mut()).await;
        tasks.0.swap_remove(i);
        if let Err(e) = ended {
            // A panicked controller must not leave the others leading without it: return,
            // which aborts the rest; the caller gives up the lease.
            tracing::error!(error = %e, "a controller failed; stopping the others");
            return;
        }
    }
}

/// Tasks aborted when dropped: dropping the controllers' future (they did not stop in time)
/// cancels them as dropping a joined future did.
struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Leader election: stands by until this process holds the lease, runs the controllers while it
/// does, stops them at once when it loses the lease (and stands by again), and releases the lease
/// on shutdown so a standby takes over without waiting for it to expire.
async fn lead_while_elected<F, Fut>(
    elector: &mut LeaderElector,
    metrics: &Metrics,
    shutdown: &CancellationToken,
    controllers: F,
) where
    F: Fn(CancellationToken) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    while elector.acquire(shutdown).await {
        metrics.zero_fleet_state();
        let stop = CancellationToken::new();
        let term = controllers(stop.clone());
        tokio::pin!(term);
        tokio::select! {
            _ = &mut term => {
                // Controllers only return when stopped; never keep the lease without them.
                tracing::error!("controllers stopped unexpectedly; giving up the lease");
                elector.release().await;
            }
            lost = elector.hold() => {
                // Stop before anyone else may take over: the renew deadline is shorter than the
                // lease duration by more than this grace.
                stop.cancel();
                fleethub_runtime::stop_within(LOST_LEASE_GRACE, &mut term, &stop).await;
                tracing::warn!(reason = %lost, "stopped reconciling; standing by to lead again");
            }
            _ = shutdown.cancelled() => {
                stop.cancel();
                fleethub_runtime::stop_within(SHUTDOWN_GRACE, &mut term, &stop).await;
                elector.release().await;
            }
        }
        metrics.forget_fleet_state();
        if shutdown.is_cancelled() {
            break;
        }
    }
}
