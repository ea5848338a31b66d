//! The fleethub member agent. For now it connects to its member cluster and to the hub, checks
//! that the hub serves the Work API, and serves `/healthz`, `/readyz` and `/metrics` until
//! SIGTERM; joining, heartbeats and applying Works are added on this skeleton.
#![forbid(unsafe_code)]

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Parser;
use fleethub_runtime::logging;
use fleethub_runtime::process::{ProcessArgs, register_build_info};
use fleethub_runtime::{Health, kubeconfig, probe};
use prometheus_client::registry::Registry;

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
    #[command(flatten)]
    process: ProcessArgs,
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
    let health = Health::new(registry, &["hub-api", "member-api"]);
    let server = tokio::spawn(fleethub_runtime::serve(
        args.process.listen,
        health.router(),
        shutdown.clone(),
    ));

    let gv = format!("{}/{}", fleethub_crds::GROUP, fleethub_crds::VERSION);
    let hub_probe = probe::until_ready(&health, "hub-api", &shutdown, || {
        probe::api_server(&hub, Some((&gv, &["Work", "MemberCluster"])))
    });
    let member_probe = probe::until_ready(&health, "member-api", &shutdown, || {
        probe::api_server(&member, None)
    });
    let (hub_version, member_version) = tokio::join!(hub_probe, member_probe);
    if let (Some(hub_version), Some(member_version)) = (hub_version, member_version) {
        tracing::info!(member = %args.member_name, %hub_version, %member_version, "connected to the hub and the member cluster");
    }

    shutdown.cancelled().await;
    server.await.context("health server task")??;
    tracing::info!(member = %args.member_name, "stopped");
    Ok(())
}
