//! The fleethub hub controller manager's controllers.
#![forbid(unsafe_code)]

pub use fleethub_runtime::clock;
pub mod autoupdate;
pub mod caches;
mod error;
pub mod leader;
pub mod membership;
pub mod metrics;
pub mod override_snapshots;
pub mod placement;
mod provisioning_record;
pub mod update_run;
pub mod work_generator;
mod work_overrides;

pub use error::Error;

/// The longest a hub watch, or a hub request answered 429/503/504, waits before trying again (the
/// member agents keep 5 s, [`fleethub_runtime::WATCH_BACKOFF`]). The hub is one process with
/// about 40 watches: while its API server is down they try about 40 times a second, and each
/// tries again within a second of it being back.
pub const RETRY_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// Cluster updates the hub writes at once by default (`--concurrent-cluster-updates`): Bindings
/// a run binds together, and Bindings whose Works are written together. Both are writes to the
/// hub API server, which every member's report, approval and dashboard read shares; more of
/// them at once start a large stage sooner but make everything else wait (measured on two cores):
/// - unbounded, a 1,000-cluster run noticed a member's report in p99 1.1–1.5 s;
/// - at 32, as fast a run (21.5–22.7 s) and p99 0.9–1.0 s at 1,000 clusters, but 1.5–2.1 s at
///   10,000 (a 230–240 s run);
/// - at 16, p99 0.6 s at 1,000 clusters (a 27 s run) and 1.0 s at 10,000 (a 320 s run).
///
/// A hub API server with cores to spare takes more.
pub const CONCURRENT_CLUSTER_UPDATES: u16 = 16;
