//! The overrides the work generator applies to a Binding's manifests: which override snapshots
//! count for the binding, and the `Overridden` condition that reports what they did.

use std::collections::BTreeMap;
use std::sync::Arc;

use fleethub_crds::binding::{NamespacedName, OVERRIDDEN, reason};
use fleethub_crds::conditions::{FALSE, NewCondition, TRUE};
use fleethub_crds::override_apply::{self, Applied, ClusterInfo, Override, OverrideError};
use fleethub_crds::overrides::{ClusterResourceOverrideSnapshot, ResourceOverrideSnapshot};
use fleethub_crds::{Binding, MemberCluster};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

pub use fleethub_crds::overrides::WORK_OVERRIDES_ANNOTATION as OVERRIDES_ANNOTATION;

/// Annotation on a Work: the override snapshots that changed it (comma separated; empty when
/// none did), from which the binding's `Overridden` condition is restated without applying the
/// overrides again.
pub const APPLIED_ANNOTATION: &str = "fleethub.dev/overrides-applied";

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

/// The override snapshots that count for one binding.
#[derive(Debug, Default)]
pub struct Chosen {
    cluster: Vec<Arc<ClusterResourceOverrideSnapshot>>,
    namespaced: Vec<Arc<ResourceOverrideSnapshot>>,
}

/// Whether a binding's overrides are fixed (a run bound it, naming its snapshots) rather than
/// followed (the newest snapshot of every override, for placements the hub rolls out itself).
pub fn fixed(binding: &Binding) -> bool {
    binding.spec.update_run_name.is_some()
}

/// The newest snapshot per override among `all`.
fn newest<S: Clone>(all: Vec<Arc<S>>, key: impl Fn(&S) -> (String, i64)) -> Vec<Arc<S>> {
    let mut by: BTreeMap<String, Arc<S>> = BTreeMap::new();
    for s in all {
        let (name, index) = key(&s);
        if by.get(&name).is_none_or(|b| key(b).1 < index) {
            by.insert(name, s);
        }
    }
    by.into_values().collect()
}

impl OverrideStores {
    /// The snapshots that count for `binding`: those it names, when it names any; otherwise the
    /// newest snapshot of every override.
    pub fn chosen(&self, binding: &Binding) -> Chosen {
        let spec = &binding.spec;
        if fixed(binding) {
            return Chosen {
                cluster: spec
                    .cluster_resource_override_snapshots
                    .iter()
                    .filter_map(|n| self.cluster.get(&ObjectRef::new(n)))
                    .collect(),
                namespaced: spec
                    .resource_override_snapshots
                    .iter()
                    .filter_map(|NamespacedName { name, namespace }| {
                        self.namespaced.get(&ObjectRef::new(name).within(namespace))
                    })
                    .collect(),
            };
        }
        Chosen {
            cluster: newest(self.cluster.state(), |s| {
                (s.spec.override_name.clone(), s.spec.index)
            }),
            namespaced: newest(self.namespaced.state(), |s| {
                (
                    format!(
                        "{}/{}",
                        s.namespace().unwrap_or_default(),
                        s.spec.override_name
                    ),
                    s.spec.index,
                )
            }),
        }
    }

    /// `manifests` of `binding` with the `chosen` overrides applied for its cluster.
    pub fn apply(
        &self,
        chosen: &Chosen,
        binding: &Binding,
        manifests: &[serde_json::Value],
    ) -> Result<Applied, OverrideError> {
        let cluster = &binding.spec.target_cluster;
        let labels = self
            .members
            .get(&ObjectRef::new(cluster))
            .map(|m| m.labels().clone())
            .unwrap_or_default();
        let info = ClusterInfo {
            name: cluster.clone(),
            labels,
        };
        let mut overrides: Vec<Override<'_>> = chosen
            .cluster
            .iter()
            .map(|s| Override::cluster(s))
            .chain(chosen.namespaced.iter().map(|s| Override::namespaced(s)))
            .collect();
        override_apply::order(&mut overrides);
        override_apply::apply(manifests, &overrides, &binding.spec.placement_name, &info)
    }
}

impl Chosen {
    /// The snapshots' names as [`fleethub_crds::binding::OverrideSnapshots::key`] writes them.
    pub fn key(&self) -> String {
        fleethub_crds::binding::OverrideSnapshots {
            cluster_resource_override_snapshots: self
                .cluster
                .iter()
                .map(|s| s.name_any())
                .collect(),
            resource_override_snapshots: self
                .namespaced
                .iter()
                .map(|s| NamespacedName {
                    name: s.name_any(),
                    namespace: s.namespace().unwrap_or_default(),
                })
                .collect(),
        }
        .key()
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
    match result {
        Ok(applied) if applied.used.is_empty() => NewCondition::new(
            OVERRIDDEN,
            TRUE,
            reason::NO_OVERRIDE_SPECIFIED,
            format!("no override changes what cluster {cluster} gets"),
            generation,
        ),
        Ok(applied) => NewCondition::new(
            OVERRIDDEN,
            TRUE,
            reason::OVERRIDDEN_SUCCEEDED,
            format!("applied override snapshots: {}", applied.used.join(", ")),
            generation,
        ),
        Err(e) => NewCondition::new(
            OVERRIDDEN,
            FALSE,
            reason::OVERRIDDEN_FAILED,
            format!("{e}; nothing was written to cluster {cluster}'s Work"),
            generation,
        ),
    }
}
