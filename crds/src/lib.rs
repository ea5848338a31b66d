//! fleethub's API (group `fleethub.dev`, version `v1alpha1`): the custom resource types, their
//! admission rules, and the pure logic that the hub, the member agent and the dashboard share.
#![forbid(unsafe_code)]
// `#[kube(printcolumn(type_ = "string", …))]` repeats `type_ = "string"` by design; clippy reads
// the repeated key as a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

pub mod admission_policy;
pub mod applied_work;
pub mod apply;
pub mod apply_strategy;
pub mod approval;
pub mod auto_update;
pub mod binding;
pub mod cluster_phase;
pub mod concurrency;
pub mod conditions;
pub mod drift;
pub mod duration;
pub mod field_manager;
pub mod freeze;
pub mod member_cluster;
pub mod metric_check;
pub mod names;
pub mod override_apply;
pub mod overrides;
pub mod phased_rollout;
pub mod placement;
pub mod render;
pub mod resource_snapshot;
pub mod rollback;
pub mod run_progress;
mod schema;
pub mod stored_stage;
pub mod strategy;
pub mod update_run;
pub mod update_run_plan;
pub mod work;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use approval::ApprovalRequest;
pub use auto_update::AutoUpdatePolicy;
pub use binding::Binding;
pub use freeze::Freeze;
pub use member_cluster::MemberCluster;
pub use phased_rollout::PhasedRollout;
pub use placement::Placement;
pub use resource_snapshot::ResourceSnapshot;
pub use strategy::StagedUpdateStrategy;
pub use update_run::UpdateRun;
pub use update_run_plan::UpdateRunPlan;
pub use work::Work;

/// The API group of every fleethub resource.
pub const GROUP: &str = "fleethub.dev";
/// The API version of every fleethub resource.
pub const VERSION: &str = "v1alpha1";

/// Every fleethub CustomResourceDefinition, in a stable order.
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    vec![
        MemberCluster::crd(),
        Placement::crd(),
        ResourceSnapshot::crd(),
        Binding::crd(),
        Work::crd(),
        StagedUpdateStrategy::crd(),
        UpdateRun::crd(),
        UpdateRunPlan::crd(),
        ApprovalRequest::crd(),
        AutoUpdatePolicy::crd(),
        Freeze::crd(),
        PhasedRollout::crd(),
        overrides::ClusterResourceOverride::crd(),
        overrides::ResourceOverride::crd(),
        overrides::ClusterResourceOverrideSnapshot::crd(),
        overrides::ResourceOverrideSnapshot::crd(),
    ]
}

/// The CustomResourceDefinitions a member cluster needs (installed there by the member agent),
/// in a stable order. Not part of [`all_crds`], which is what the hub installs.
pub fn member_crds() -> Vec<CustomResourceDefinition> {
    vec![applied_work::AppliedWork::crd(), PhasedRollout::crd()]
}
