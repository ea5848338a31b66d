//! `fleethub-dashboard`: serves the dashboard for one hub.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use fleethub_dashboard::server::{AppState, hub::Hub, router, session::Sessions};
use leptos::prelude::LeptosOptions;

/// The fleethub web dashboard.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Address to serve the dashboard on.
    #[arg(
        long,
        env = "FLEETHUB_DASHBOARD_LISTEN",
        default_value = "127.0.0.1:8443"
    )]
    listen: SocketAddr,
    /// Kubeconfig of the hub: only its server address and CA are used; users sign in with
    /// their own tokens. Without it, the dashboard runs in the hub cluster and uses the pod's
    /// in-cluster configuration (and its ServiceAccount for TokenReviews).
    #[arg(long, env = "FLEETHUB_HUB_KUBECONFIG")]
    hub_kubeconfig: Option<PathBuf>,
    /// File with the token of the dashboard's own identity, used only to create TokenReviews
    /// (e.g. a ServiceAccount bound to `system:auth-delegator`). Without it, the kubeconfig's
    /// credentials are used for TokenReviews.
    #[arg(long, env = "FLEETHUB_DASHBOARD_REVIEWER_TOKEN_FILE")]
    reviewer_token_file: Option<PathBuf>,
    /// Directory with the browser bundle (`pkg/fleethub-dashboard.js` and `…_bg.wasm`), as
    /// `dashboard/build` writes it.
    #[arg(
        long,
        env = "FLEETHUB_DASHBOARD_SITE_ROOT",
        default_value = "target/site"
    )]
    site_root: String,
    /// Mark the session cookie `Secure` (set when served over https, e.g. behind an ingress).
    #[arg(long, env = "FLEETHUB_DASHBOARD_SECURE_COOKIES")]
    secure_cookies: bool,
    /// Log line format.
    #[arg(long, env = "FLEETHUB_LOG_FORMAT", value_enum, default_value_t)]
    log_format: fleethub_runtime::logging::LogFormat,
}

/// The longest a page's request to the hub, answered 429/503/504, waits before it is sent
/// again: someone is waiting for the page (the agents' 5 s spreads thousands of clients).
const RETRY_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(1);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    fleethub_runtime::logging::init(args.log_format);
    fleethub_runtime::set_retry_wait_max(RETRY_WAIT_MAX);
    let reviewer_token = match &args.reviewer_token_file {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .with_context(|| format!("reading the reviewer token {}", p.display()))?
                .trim()
                .to_string(),
        ),
        None => None,
    };
    let hub = match &args.hub_kubeconfig {
        Some(path) => Hub::from_kubeconfig(path, reviewer_token)
            .await
            .with_context(|| format!("loading hub kubeconfig {}", path.display()))?,
        None if reviewer_token.is_some() => anyhow::bail!(
            "--reviewer-token-file needs --hub-kubeconfig (in-cluster, the pod's ServiceAccount reviews tokens)"
        ),
        None => Hub::in_cluster().context(
            "no --hub-kubeconfig and no in-cluster configuration (KUBERNETES_SERVICE_HOST is not set)",
        )?,
    };
    let wasm = PathBuf::from(&args.site_root).join("pkg/fleethub-dashboard_bg.wasm");
    if !wasm.exists() {
        tracing::warn!(
            path = %wasm.display(),
            "the browser bundle is missing (run dashboard/build): pages work, live updates do not"
        );
    }
    let leptos = LeptosOptions::builder()
        .output_name("fleethub-dashboard")
        .site_root(args.site_root.clone())
        .site_pkg_dir("pkg")
        .site_addr(args.listen)
        .build();
    let state = AppState {
        leptos,
        sessions: Sessions::default(),
        hub,
        secure_cookies: args.secure_cookies,
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    tracing::info!(listen = %args.listen, hub = %state.hub.url(), "dashboard serving");
    let shutdown = fleethub_runtime::shutdown::shutdown_on_signal();
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .context("serving the dashboard")?;
    Ok(())
}
