//! The staged-update engine: UpdateRuns walk a placement's clusters stage by stage.

pub mod controller;
pub mod plan;

#[cfg(test)]
mod plan_tests;
