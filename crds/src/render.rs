//! What one cluster gets from a placement: the placement's resource snapshot with the override
//! snapshots that count for the cluster applied, exactly as the hub's work generator applies
//! them ([`crate::override_apply`]). `kubectl fleet render` and the dashboard's render page
//! both show it through [`load`] (reads the hub) and [`render`] (pure).
//!
//! Which resource snapshot: the one asked for, else the one the cluster's Binding points at,
//! else the placement's newest. Which override snapshots: those a run bound the cluster to,
//! else (a placement the hub rolls out itself, or no Binding yet) the newest of every override.

use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde_json::Value;

use crate::override_apply::{self, Applied, ClusterInfo, OverrideError};
use crate::overrides::{ClusterResourceOverrideSnapshot, ResourceOverrideSnapshot};
use crate::{Binding, MemberCluster, Placement, ResourceSnapshot, names};

/// Why a render cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// An object the render needs does not exist; the message names it.
    #[error("{0}")]
    NotFound(String),
    /// A hub object is not what it should be (e.g. a snapshot part missing).
    #[error("{0}")]
    Invalid(String),
    /// A read from the hub failed.
    #[error("{doing}: {source}")]
    Api {
        /// What the read was for, naming the object.
        doing: String,
        /// The client's error.
        source: kube::Error,
    },
}

fn api_error(doing: impl Into<String>) -> impl FnOnce(kube::Error) -> RenderError {
    let doing = doing.into();
    move |source| RenderError::Api { doing, source }
}

/// Everything a render reads from the hub.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The placement.
    pub placement: Placement,
    /// The cluster (its name and labels feed the rules and variables).
    pub cluster: MemberCluster,
    /// The cluster's Binding for the placement, if it has one.
    pub binding: Option<Binding>,
    /// The resource snapshot's index.
    pub index: i64,
    /// Why that snapshot (a phrase: "the one its Binding points at").
    pub index_source: String,
    /// The snapshot's manifests (every part, in order): the hub's template.
    pub template: Vec<Value>,
    /// Every ClusterResourceOverrideSnapshot.
    pub cluster_overrides: Vec<ClusterResourceOverrideSnapshot>,
    /// Every ResourceOverrideSnapshot.
    pub namespaced_overrides: Vec<ResourceOverrideSnapshot>,
}

/// What one cluster gets.
#[derive(Debug, Clone)]
pub struct Render {
    /// The placement's name.
    pub placement: String,
    /// The cluster's name.
    pub cluster: String,
    /// The resource snapshot's index.
    pub index: i64,
    /// Why that snapshot.
    pub index_source: String,
    /// Which override snapshots count, and why (a sentence).
    pub override_source: String,
    /// The override snapshots considered (those that may change this placement), in the order
    /// they apply: `name` or `namespace/name`.
    pub considered: Vec<String>,
    /// Snapshots the Binding names that no longer exist.
    pub missing: Vec<String>,
    /// The hub's template: the snapshot's manifests as the hub holds them.
    pub template: Vec<Value>,
    /// The manifests the cluster gets and the snapshots that changed them, or the rule that
    /// cannot apply (then the cluster gets nothing new: its Work is left as it was).
    pub result: Result<Applied, OverrideError>,
}

/// Which resource snapshot to render and why: `asked`, else the one `binding` points at, else
/// the placement's newest.
pub fn snapshot_index(
    asked: Option<i64>,
    binding: Option<&Binding>,
    placement: &Placement,
    cluster: &str,
) -> Result<(i64, String), RenderError> {
    if let Some(i) = asked {
        return Ok((i, "asked for".to_string()));
    }
    if let Some(i) = binding.and_then(|b| b.spec.resource_snapshot_index) {
        return Ok((i, format!("the one cluster {cluster}'s Binding points at")));
    }
    let latest = placement
        .status
        .as_ref()
        .and_then(|s| s.latest_resource_snapshot_index);
    match (latest, binding) {
        (Some(i), Some(_)) => Ok((
            i,
            format!("the placement's newest; cluster {cluster}'s Binding points at none yet"),
        )),
        (Some(i), None) => Ok((
            i,
            format!("the placement's newest; cluster {cluster} has no Binding for it"),
        )),
        (None, _) => Err(RenderError::NotFound(format!(
            "placement {} has no resource snapshot yet (kubectl get resourcesnapshots -l {}={})",
            placement.name_any(),
            names::PLACEMENT_LABEL,
            placement.name_any()
        ))),
    }
}

/// The manifests of a snapshot from its first object and its other parts (any order): every
/// part in order, or which part is missing.
pub fn snapshot_manifests(
    first: &ResourceSnapshot,
    mut parts: Vec<ResourceSnapshot>,
) -> Result<Vec<Value>, RenderError> {
    parts.sort_by_key(|p| p.spec.part);
    let mut manifests = first.spec.resources.clone();
    for part in 1..first.spec.parts.max(1) {
        let Some(p) = parts.iter().find(|p| p.spec.part == part) else {
            return Err(RenderError::Invalid(format!(
                "ResourceSnapshot {} (part {part} of {} of snapshot {}) is missing",
                names::resource_snapshot_part_name(
                    &first.spec.placement_name,
                    first.spec.resource_index as u64,
                    part as u32
                ),
                first.spec.parts,
                first.spec.resource_index
            )));
        };
        manifests.extend(p.spec.resources.iter().cloned());
    }
    Ok(manifests)
}

/// The render of `inputs`: the overrides chosen and applied as the work generator does.
pub fn render(inputs: &Inputs) -> Render {
    let placement = inputs.placement.name_any();
    let cluster = ClusterInfo::of(&inputs.cluster);
    let binding = inputs.binding.as_ref().map(|b| &b.spec);
    let chosen = override_apply::choose(
        binding,
        inputs.cluster_overrides.iter(),
        inputs.namespaced_overrides.iter(),
    );
    let override_source = match binding {
        Some(b) if override_apply::fixed(b) => format!(
            "the override snapshots UpdateRun {} bound cluster {} to",
            b.update_run_name.as_deref().unwrap_or_default(),
            cluster.name
        ),
        Some(_) => format!(
            "the newest snapshot of every override (no UpdateRun fixed cluster {}'s overrides)",
            cluster.name
        ),
        None => format!(
            "the newest snapshot of every override (cluster {} has no Binding for placement {placement})",
            cluster.name
        ),
    };
    let considered = chosen
        .overrides()
        .iter()
        .filter(|o| o.allows(&placement))
        .map(|o| match o.namespace {
            Some(ns) => format!("{ns}/{}", o.snapshot),
            None => o.snapshot.clone(),
        })
        .collect();
    Render {
        result: chosen.apply(&inputs.template, &placement, &cluster),
        placement,
        cluster: cluster.name,
        index: inputs.index,
        index_source: inputs.index_source.clone(),
        override_source,
        considered,
        missing: chosen.missing.clone(),
        template: inputs.template.clone(),
    }
}

/// Manifests as one YAML stream (`---` between documents).
pub fn yaml(manifests: &[Value]) -> String {
    manifests
        .iter()
        .map(|m| serde_norway::to_string(m).unwrap_or_else(|e| format!("# cannot show: {e}\n")))
        .collect::<Vec<_>>()
        .join("---\n")
}

impl Render {
    /// What was rendered and from what, one sentence a line.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = vec![
            format!(
                "placement {}, cluster {}: resource snapshot {} ({})",
                self.placement, self.cluster, self.index, self.index_source
            ),
            format!("overrides: {}", self.override_source),
        ];
        notes.push(if self.considered.is_empty() {
            "override snapshots considered: none".to_string()
        } else {
            format!(
                "override snapshots considered: {}",
                self.considered.join(", ")
            )
        });
        if let Ok(applied) = &self.result {
            notes.push(if applied.used.is_empty() {
                "no override changes what this cluster gets".to_string()
            } else {
                format!("applied: {}", applied.used.join(", "))
            });
            let kept_off = self.template.len() - applied.manifests.len();
            if kept_off > 0 {
                notes.push(format!(
                    "{kept_off} object(s) kept off this cluster (Delete)"
                ));
            }
        }
        if !self.missing.is_empty() {
            notes.push(format!(
                "no longer on the hub (their override was deleted), left out: {}",
                self.missing.join(", ")
            ));
        }
        notes
    }

    /// The cluster's manifests as YAML, or the rule that cannot apply.
    pub fn yaml(&self) -> Result<String, &OverrideError> {
        self.result.as_ref().map(|a| yaml(&a.manifests))
    }

    /// A unified diff of the hub's template (`a/`) against what the cluster gets (`b/`); empty
    /// when they are the same.
    pub fn diff(&self) -> Result<String, &OverrideError> {
        let rendered = self.yaml()?;
        let template = yaml(&self.template);
        let diff = similar::TextDiff::from_lines(&template, &rendered);
        Ok(diff
            .unified_diff()
            .context_radius(3)
            .header(
                &format!("hub/{} (snapshot {})", self.placement, self.index),
                &format!("{}/{}", self.cluster, self.placement),
            )
            .to_string())
    }
}

/// Reads what rendering `placement` for `cluster` needs from the hub (snapshot `asked`, or as
/// [`snapshot_index`] picks), with `client`'s permissions.
pub async fn load(
    client: &Client,
    placement: &str,
    cluster: &str,
    asked: Option<i64>,
) -> Result<Inputs, RenderError> {
    let placements: Api<Placement> = Api::all(client.clone());
    let members: Api<MemberCluster> = Api::all(client.clone());
    let bindings: Api<Binding> = Api::all(client.clone());
    let placement_obj = placements
        .get_opt(placement)
        .await
        .map_err(api_error(format!("reading Placement {placement}")))?
        .ok_or_else(|| {
            RenderError::NotFound(format!(
                "placement {placement} not found on the hub (kubectl get placements lists them)"
            ))
        })?;
    let member = members
        .get_opt(cluster)
        .await
        .map_err(api_error(format!("reading MemberCluster {cluster}")))?
        .ok_or_else(|| {
            RenderError::NotFound(format!(
                "membercluster {cluster} not found on the hub (kubectl get memberclusters lists them)"
            ))
        })?;
    let binding_name = names::binding_name(placement, cluster);
    let binding = bindings
        .get_opt(&binding_name)
        .await
        .map_err(api_error(format!("reading Binding {binding_name}")))?;
    let (index, index_source) = snapshot_index(asked, binding.as_ref(), &placement_obj, cluster)?;
    if index < 0 {
        return Err(RenderError::Invalid(format!(
            "snapshot index {index} is negative"
        )));
    }
    let snapshots: Api<ResourceSnapshot> = Api::all(client.clone());
    let first_name = names::resource_snapshot_name(placement, index as u64);
    let first = snapshots
        .get_opt(&first_name)
        .await
        .map_err(api_error(format!("reading ResourceSnapshot {first_name}")))?
        .filter(|s| s.spec.placement_name == placement)
        .ok_or_else(|| {
            RenderError::NotFound(format!(
                "ResourceSnapshot {first_name} (snapshot {index} of placement {placement}) not found on the hub"
            ))
        })?;
    let mut parts = Vec::new();
    for part in 1..first.spec.parts.max(1) as u32 {
        let name = names::resource_snapshot_part_name(placement, index as u64, part);
        if let Some(s) = snapshots
            .get_opt(&name)
            .await
            .map_err(api_error(format!("reading ResourceSnapshot {name}")))?
        {
            parts.push(s);
        }
    }
    let template = snapshot_manifests(&first, parts)?;
    let cluster_overrides = Api::<ClusterResourceOverrideSnapshot>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(api_error("listing ClusterResourceOverrideSnapshots"))?
        .items;
    let namespaced_overrides = Api::<ResourceOverrideSnapshot>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(api_error("listing ResourceOverrideSnapshots"))?
        .items;
    Ok(Inputs {
        placement: placement_obj,
        cluster: member,
        binding,
        index,
        index_source,
        template,
        cluster_overrides,
        namespaced_overrides,
    })
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
