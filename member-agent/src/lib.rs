//! The fleethub member agent: runs in (or beside) one member cluster and acts for its
//! MemberCluster on the hub.
//!
//! - [`heartbeat`]: joins the hub and heartbeats into the MemberCluster's status;
//! - [`work_applier`]: applies the Works of hub namespace `fleet-member-<member>` to the member
//!   with server-side apply, in dependency order ([`apply`], [`apply_order`]; drift decided by
//!   [`drift`] and reported by [`correction`]), and reports `Applied` / `Available`
//!   ([`availability`], [`work_status`]);
//! - [`cleanup`]: deletes what the agent created, and only that, when manifests or Works go
//!   (through the member-side `AppliedWork`, installed by [`member_crds`]).
//!
//! Nothing the agent decides on is kept in memory only: the health clock starts from the Work's
//! status, and what the agent created is recorded on the member (owner references and the
//! AppliedWork's status), so a restarted agent carries on where it was.
#![forbid(unsafe_code)]

pub mod apply;
pub mod apply_order;
pub mod availability;
pub mod cleanup;
pub mod context;
pub mod correction;
pub mod drift;
pub use fleethub_runtime::clock;
pub mod error;
pub mod heartbeat;
pub mod kind_resolver;
pub use fleethub_runtime::last_written;
pub mod manifest;
pub mod member_crds;
pub mod member_objects;
pub mod metrics;
pub mod phased;
pub mod quantity;
pub mod status_writes;
pub mod work_applier;
pub mod work_status;

use std::sync::Arc;
use std::time::Duration;

use fleethub_runtime::{Health, probe};
use kube::Client;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

pub use error::Error;

use clock::Clock;
use metrics::Metrics;

/// The agent's version, reported in its MemberCluster's status.
pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");
/// How often every Work is applied again when nothing changed, to correct drift.
pub const DEFAULT_RESYNC_PERIOD: Duration = Duration::from_secs(5 * 60);

/// The agent's readiness checks (`/readyz` names those not passed).
pub mod readiness {
    /// The hub's API server answers and serves the fleethub API.
    pub const HUB_API: &str = "hub-api";
    /// The member's API server answers.
    pub const MEMBER_API: &str = "member-api";
    /// The member CRDs (AppliedWork) are installed on the member.
    pub const MEMBER_CRDS: &str = "member-crds";
    /// The MemberCluster exists and the last heartbeat was written.
    pub const MEMBER_CLUSTER: &str = "member-cluster";
    /// The Work watcher has listed this member's Works.
    pub const WORKS_SYNCED: &str = "works-synced";
    /// Every check.
    pub const ALL: &[&str] = &[
        HUB_API,
        MEMBER_API,
        MEMBER_CRDS,
        MEMBER_CLUSTER,
        WORKS_SYNCED,
    ];
}

/// How the agent is set up.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The MemberCluster the agent acts for.
    pub member_name: String,
    /// A fixed heartbeat period instead of the MemberCluster's `heartbeatPeriodSeconds`.
    pub heartbeat_period: Option<Duration>,
    /// How often every Work is applied again when nothing changed.
    pub resync_period: Duration,
}

/// The member agent: clients, health, metrics and clock, wired together by [`Agent::run`].
pub struct Agent {
    /// How it is set up.
    pub config: AgentConfig,
    /// Client of the hub.
    pub hub: Client,
    /// Client of the member cluster.
    pub member: Client,
    /// Readiness checks ([`readiness::ALL`]) and the metrics registry.
    pub health: Health,
    /// The agent's metrics (registered in `health`'s registry).
    pub metrics: Metrics,
    /// The time source.
    pub clock: Arc<dyn Clock>,
}

impl Agent {
    /// Runs the agent until `shutdown`: waits for both API servers, installs the member CRDs,
    /// joins the hub (waiting for the MemberCluster to exist), then heartbeats and applies Works.
    pub async fn run(self, shutdown: CancellationToken) {
        let Agent {
            config,
            hub,
            member,
            health,
            metrics,
            clock,
        } = self;
        let member_name = config.member_name.clone();
        let gv = format!("{}/{}", fleethub_crds::GROUP, fleethub_crds::VERSION);
        let hub_probe = probe::until_ready(&health, readiness::HUB_API, &shutdown, || {
            probe::api_server(&hub, Some((&gv, &["Work", "MemberCluster"])))
        });
        let member_probe = probe::until_ready(&health, readiness::MEMBER_API, &shutdown, || {
            probe::api_server(&member, None)
        });
        let (Some(hub_version), Some(member_version)) = tokio::join!(hub_probe, member_probe)
        else {
            return;
        };
        tracing::info!(member = %member_name, %hub_version, %member_version, "connected to the hub and the member cluster");

        if probe::until_ready(&health, readiness::MEMBER_CRDS, &shutdown, || async {
            member_crds::install(&member)
                .await
                .map(|()| "AppliedWork".to_string())
                .map_err(|e| e.to_string())
        })
        .await
        .is_none()
        {
            return;
        }

        let (joined_tx, joined_rx) = oneshot::channel();
        let heartbeat = tokio::spawn(
            heartbeat::Heartbeat {
                hub: hub.clone(),
                member: member.clone(),
                member_name: member_name.clone(),
                period_override: config.heartbeat_period,
                clock: clock.clone(),
                metrics: metrics.clone(),
            }
            .run(health.clone(), shutdown.clone(), joined_tx),
        );
        health.set(
            readiness::WORKS_SYNCED,
            Err("waiting for the agent to join the hub".into()),
        );
        tokio::select! {
            _ = shutdown.cancelled() => {}
            joined = joined_rx => {
                if joined.is_ok() {
                    health.set(
                        readiness::WORKS_SYNCED,
                        Err("the Work watcher has not listed the Works yet".into()),
                    );
                    let phased = tokio::spawn(phased::run(
                        member.clone(),
                        clock.clone(),
                        shutdown.clone(),
                    ));
                    let ctx = Arc::new(context::Context::new(
                        hub,
                        member,
                        fleethub_crds::names::member_namespace(&member_name),
                        clock,
                        metrics,
                        config.resync_period,
                    ));
                    work_applier::run(ctx, health, shutdown.clone()).await;
                    let _ = phased.await;
                }
            }
        }
        let _ = heartbeat.await;
    }
}
