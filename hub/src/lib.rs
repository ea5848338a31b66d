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
