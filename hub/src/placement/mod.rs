//! Placements: what goes where. Snapshots of the selected hub objects, and bindings of the
//! selected member clusters.

pub mod clusters;
pub mod content;
mod content_marks;
pub mod controller;
mod gather;
pub mod plan;
mod snapshot_cache;
pub mod status;
mod status_pace;
pub(crate) mod triggers;
pub mod version_metrics;

#[cfg(test)]
mod plan_tests;
