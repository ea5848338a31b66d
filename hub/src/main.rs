//! The fleethub hub controller manager: connects to the hub cluster, waits until the fleethub CRDs
//! are served, then runs the controllers (the staged-update engine and the work generator) and
//! serves `/healthz`, `/readyz` and `/metrics` until SIGTERM.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use fleethub_hub::clock::{Clock, SystemClock};
use fleethub_hub::metrics::Metrics;
use fleethub_hub::{membership, placement, update_run, work_generator};
use fleethub_runtime::logging;
use fleethub_runtime::process::{ProcessArgs, register_build_info};
use fleethub_runtime::{Health, kubeconfig, probe};
use prometheus_client::registry::Registry;

/// How long controllers may take to finish in-flight reconciles after SIGTERM.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

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
    #[command(flatten)]
    process: ProcessArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    logging::init(args.process.log_format);
    let shutdown = fleethub_runtime::shutdown_on_signal();

    let client = kubeconfig::client(args.kubeconfig.as_deref())
        .await
        .context("connecting to the hub cluster")?;

    let mut registry = Registry::with_prefix("fleethub_hub");
    register_build_info(&mut registry, "Build information of the running hub", &[]);
    let metrics = Metrics::new(&mut registry);
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
        let controllers = async {
            tokio::join!(
                membership::run(
                    client.clone(),
                    clock.clone(),
                    args.heartbeat_stale_multiple,
                    metrics.clone(),
                    shutdown.clone()
                ),
                placement::controller::run(
                    client.clone(),
                    clock.clone(),
                    metrics.clone(),
                    shutdown.clone()
                ),
                update_run::controller::run(
                    client.clone(),
                    clock.clone(),
                    metrics.clone(),
                    shutdown.clone()
                ),
                work_generator::run(
                    client.clone(),
                    clock.clone(),
                    metrics.clone(),
                    shutdown.clone()
                ),
            )
        };
        tokio::pin!(controllers);
        tokio::select! {
            _ = &mut controllers => {}
            _ = shutdown.cancelled() => {
                // Let in-flight reconciles finish, but do not hang: a controller whose caches
                // have not synced yet does not notice the shutdown (kube-runtime holds it until
                // its store is ready). Everything is in the API server, so nothing is lost.
                if tokio::time::timeout(SHUTDOWN_GRACE, &mut controllers).await.is_err() {
                    tracing::warn!(grace = ?SHUTDOWN_GRACE, "controllers did not stop in time; exiting anyway");
                }
            }
        }
    }

    shutdown.cancelled().await;
    server.await.context("health server task")??;
    tracing::info!("stopped");
    Ok(())
}
