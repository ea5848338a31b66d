//! The field manager of every fleethub writer. Server-side apply records who owns each field by
//! this name, so a writer must always use its own, and a reader that asks "who wrote this?" (the
//! work generator reading a Work's managed fields) compares against the same constant.
//!
//! Field managers name programs, not kinds (one writer writes several kinds), so they live here
//! together rather than next to a kind.

/// The hub's placement controller: ResourceSnapshots, Bindings it creates, Placement status.
pub const PLACEMENT: &str = "fleethub/placement";
/// The hub's work generator: Works, and the Binding status it rolls up from them.
pub const WORK_GENERATOR: &str = "fleethub/work-generator";
/// The hub's membership controller: each member's namespace and RBAC, its `Healthy` condition.
pub const MEMBERSHIP: &str = "fleethub/membership";
/// The hub's update-run controller: UpdateRun status, the Bindings it moves, ApprovalRequests.
pub const UPDATE_RUN: &str = "fleethub/update-run";
/// The hub's auto-update controller: AutoUpdatePolicy status, the target container's image on
/// the hub, the UpdateRuns (and the rollback strategy) it creates.
pub const AUTO_UPDATE: &str = "fleethub/auto-update";
/// The member agent: Work status and finalizer, MemberCluster status, the objects it applies on
/// its member.
pub const MEMBER_AGENT: &str = "fleethub/member-agent";
/// The member agent's phased rollouts: the partition of the StatefulSets they roll, and their
/// status.
pub const PHASED_ROLLOUT: &str = "fleethub/phased-rollout";
/// The dashboard's actions (approve, stop, resume), made with the caller's own identity.
pub const DASHBOARD: &str = "fleethub/dashboard";
/// The `kubectl fleet` plugin.
pub const KUBECTL_FLEET: &str = "kubectl-fleet";
/// `fleethub-bench`, which creates a fleet's objects for a benchmark.
pub const BENCH: &str = "fleethub-bench";
