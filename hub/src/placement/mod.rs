//! Placements: what goes where. Snapshots of the selected hub objects, and bindings of the
//! selected member clusters.

pub mod clusters;
pub mod content;
pub mod controller;
