//! Auto-update: AutoUpdatePolicies make workloads follow their registry through staged runs.

pub mod plan;
#[cfg(test)]
mod plan_tests;
