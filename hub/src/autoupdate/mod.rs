//! Auto-update: a workload follows its registry. AutoUpdatePolicies are reconciled by
//! [`controller`], which decides with the pure [`plan`]; it stands on listing a repository's tags
//! ([`registry`]), reading image references ([`image`]), choosing the version to move to
//! ([`versions`]) and the check schedule ([`schedule`]).

pub mod controller;
pub mod image;
pub mod plan;
#[cfg(test)]
mod plan_tests;
pub mod registry;
pub mod schedule;
pub mod versions;
