//! The overrides the work generator applies to a Binding's manifests: which override snapshots
//! count for the binding, and the `Overridden` condition that reports what they did.

use std::sync::Arc;

use fleethub_crds::conditions::NewCondition;
use fleethub_crds::override_apply::{self, Applied, ClusterInfo, OverrideError};
use fleethub_crds::overrides::{ClusterResourceOverrideSnapshot, ResourceOverrideSnapshot};
use fleethub_crds::{Binding, MemberCluster};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

pub use fleethub_crds::overrides::WORK_OVERRIDES_ANNOTATION as OVERRIDES_ANNOTATION;
pub use fleethub_crds::overrides::WORK_OVERRIDES_APPLIED_ANNOTATION as APPLIED_ANNOTATION;

/// The caches the choice and the application read.
#[derive(Clone)]
pub struct OverrideStores {
    /// Every ClusterResourceOverrideSnapshot.
    pub cluster: Store<ClusterResourceOverrideSnapshot>,
    /// Every ResourceOverrideSnapshot.
    pub namespaced: Store<ResourceOverrideSnapshot>,
    /// Every MemberCluster (names and labels for rules and variables).
    pub members: Store<MemberCluster>,
}

/// The override snapshots that count for one binding, as the hub's caches hold them.
pub type Chosen =
    override_apply::Chosen<Arc<ClusterResourceOverrideSnapshot>, Arc<ResourceOverrideSnapshot>>;

/// Whether a binding's overrides are fixed (a run bound it, naming its snapshots) rather than
/// followed (the newest snapshot of every override, for placements the hub rolls out itself).
pub fn fixed(binding: &Binding) -> bool {
    override_apply::fixed(&binding.spec)
}

impl OverrideStores {
    /// The snapshots that count for `binding` ([`override_apply::choose`]: those a run bound
    /// it to, otherwise the newest snapshot of every override).
    pub fn chosen(&self, binding: &Binding) -> Chosen {
        override_apply::choose(
            Some(&binding.spec),
            self.cluster.state(),
            self.namespaced.state(),
        )
    }

    /// `manifests` of `binding` with the `chosen` overrides applied for its cluster.
    pub fn apply(
        &self,
        chosen: &Chosen,
        binding: &Binding,
        manifests: &[serde_json::Value],
    ) -> Result<Applied, OverrideError> {
        let cluster = &binding.spec.target_cluster;
        let info = match self.members.get(&ObjectRef::new(cluster)) {
            Some(m) => ClusterInfo::of(&m),
            None => ClusterInfo {
                name: cluster.clone(),
                labels: Default::default(),
            },
        };
        chosen.apply(manifests, &binding.spec.placement_name, &info)
    }
}

/// The binding's `Overridden` condition as recorded on the Work the overrides were last applied
/// to, if they were.
pub fn recorded(
    cluster: &str,
    work: &fleethub_crds::Work,
    generation: Option<i64>,
) -> Option<NewCondition<'static>> {
    let used = work.annotations().get(APPLIED_ANNOTATION)?;
    let used: Vec<String> = used
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let applied = Applied {
        manifests: Vec::new(),
        used,
    };
    Some(overridden(cluster, &Ok(applied), generation))
}

/// The binding's `Overridden` condition for the outcome of applying its overrides.
pub fn overridden(
    cluster: &str,
    result: &Result<Applied, OverrideError>,
    generation: Option<i64>,
) -> NewCondition<'static> {
    override_apply::overridden_condition(cluster, result, generation)
}
