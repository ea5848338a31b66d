//! The fleethub member agent binary: parses flags, connects to the hub and the member cluster,
//! serves `/healthz`, `/readyz` and `/metrics`, and runs the agent until SIGTERM.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use fleethub_member_agent::{Agent, AgentConfig, clock, metrics, readiness};
use fleethub_runtime::logging;
use fleethub_runtime::process::{ProcessArgs, register_build_info};
use fleethub_runtime::{Health, kubeconfig};
use prometheus_client::registry::Registry;

/// How long the agent may take to finish in-flight work after SIGTERM (a Pod's default grace
/// period is 30 s; the kubelet kills it after that anyway).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The fleethub member agent.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// The MemberCluster this agent acts for.
    #[arg(long, env = "FLEETHUB_MEMBER_NAME")]
    member_name: String,
    /// Kubeconfig for the hub, with this member's own identity.
    #[arg(long, env = "FLEETHUB_HUB_KUBECONFIG")]
    hub_kubeconfig: PathBuf,
    /// Kubeconfig of the member cluster (default: in-cluster configuration, then $KUBECONFIG).
    #[arg(long, env = "FLEETHUB_MEMBER_KUBECONFIG")]
    member_kubeconfig: Option<PathBuf>,
    /// Heartbeat period in seconds, overriding the MemberCluster's `heartbeatPeriodSeconds`.
    #[arg(long, env = "FLEETHUB_HEARTBEAT_PERIOD_SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    heartbeat_period_seconds: Option<u64>,
    /// How often every Work is applied again when nothing changed, to correct drift (e.g. 5m).
    #[arg(long, env = "FLEETHUB_RESYNC_PERIOD", value_parser = parse_duration, default_value = "5m")]
    resync_period: Duration,
    #[command(flatten)]
    process: ProcessArgs,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    match fleethub_crds::duration::parse(s) {
        Ok(d) if d.is_zero() => Err("must be longer than 0s".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    logging::init(args.process.log_format);
    if !fleethub_crds::names::is_dns_label(&args.member_name)
        || args.member_name.len() > fleethub_crds::names::MAX_MEMBER_CLUSTER_NAME
    {
        bail!(
            "--member-name {:?} is not a valid MemberCluster name (a DNS label of at most {} characters)",
            args.member_name,
            fleethub_crds::names::MAX_MEMBER_CLUSTER_NAME
        );
    }
    let shutdown = fleethub_runtime::shutdown_on_signal();

    let hub = kubeconfig::client(Some(&args.hub_kubeconfig))
        .await
        .context("connecting to the hub")?;
    let member = kubeconfig::client(args.member_kubeconfig.as_deref())
        .await
        .context("connecting to the member cluster")?;

    let mut registry = Registry::with_prefix("fleethub_member_agent");
    register_build_info(
        &mut registry,
        "Build information of the running member agent",
        &[("member", args.member_name.as_str())],
    );
    let metrics = metrics::Metrics::register(&mut registry);
    registry.register_collector(Box::new(fleethub_runtime::WatchFailureMetrics));
    let health = Health::new(registry, readiness::ALL);
    let server = tokio::spawn(fleethub_runtime::serve(
        args.process.listen,
        health.router(),
        shutdown.clone(),
    ));

    let agent = Agent {
        config: AgentConfig {
            member_name: args.member_name.clone(),
            heartbeat_period: args.heartbeat_period_seconds.map(Duration::from_secs),
            resync_period: args.resync_period,
        },
        hub,
        member,
        health,
        metrics,
        clock: Arc::new(clock::SystemClock),
    };
    fleethub_runtime::stop_within(SHUTDOWN_GRACE, agent.run(shutdown.clone()), &shutdown).await;
    // The agent returns on shutdown; make sure the server stops too.
    shutdown.cancel();
    server.await.context("health server task")??;
    tracing::info!(member = %args.member_name, "stopped");
    Ok(())
}
