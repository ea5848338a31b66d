//! Applying override snapshots to a placement's manifests for one cluster: pure, shared by the
//! hub's work generator and `kubectl fleet render`.
//!
//! The order is fixed: ClusterResourceOverrides first, then ResourceOverrides by namespace, each
//! kind by name; within an override its rules in order, within a rule its patches in order. A
//! `Delete` rule keeps the object off the cluster. String values may use
//! `${MEMBER-CLUSTER-NAME}` and `${MEMBER-CLUSTER-LABEL-KEY-<key>}`.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};
use serde_json::Value;

use crate::MemberCluster;
use crate::binding::{BindingSpec, NamespacedName, OVERRIDDEN, OverrideSnapshots, reason};
use crate::conditions::{Condition, FALSE, NewCondition, TRUE, find};
use crate::overrides::{
    ClusterResourceOverrideSnapshot, JsonPatchOp, JsonPatchOverride, OverrideRule,
    OverrideSelector, OverrideType, ResourceOverrideSnapshot,
};

/// The cluster the manifests are for: its name and labels.
#[derive(Debug, Clone, Default)]
pub struct ClusterInfo {
    /// The MemberCluster's name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
}

impl ClusterInfo {
    /// The cluster `member` describes.
    pub fn of(member: &MemberCluster) -> Self {
        ClusterInfo {
            name: member.name_any(),
            labels: member.labels().clone(),
        }
    }
}

/// One override snapshot, as the application needs it.
#[derive(Debug, Clone)]
pub struct Override<'a> {
    /// `None` for a ClusterResourceOverride; the namespace of a ResourceOverride.
    pub namespace: Option<&'a str>,
    /// The override's name.
    pub name: &'a str,
    /// The snapshot's name.
    pub snapshot: String,
    /// The placement it is limited to, if any.
    pub placement: Option<&'a str>,
    /// The objects it changes.
    pub selectors: &'a [OverrideSelector],
    /// Its rules.
    pub rules: &'a [OverrideRule],
}

impl<'a> Override<'a> {
    /// A ClusterResourceOverride's snapshot.
    pub fn cluster(s: &'a ClusterResourceOverrideSnapshot) -> Self {
        let spec = &s.spec.override_spec;
        Override {
            namespace: None,
            name: &s.spec.override_name,
            snapshot: kube::ResourceExt::name_any(s),
            placement: spec.placement.as_ref().map(|p| p.name.as_str()),
            selectors: &spec.cluster_resource_selectors,
            rules: &spec.policy.override_rules,
        }
    }

    /// A ResourceOverride's snapshot (its namespace is the snapshot's).
    pub fn namespaced(s: &'a ResourceOverrideSnapshot) -> Self {
        let spec = &s.spec.override_spec;
        Override {
            namespace: Some(s.metadata.namespace.as_deref().unwrap_or_default()),
            name: &s.spec.override_name,
            snapshot: kube::ResourceExt::name_any(s),
            placement: spec.placement.as_ref().map(|p| p.name.as_str()),
            selectors: &spec.resource_selectors,
            rules: &spec.policy.override_rules,
        }
    }

    /// `ClusterResourceOverride NAME` or `ResourceOverride NAMESPACE/NAME`.
    pub fn label(&self) -> String {
        match self.namespace {
            None => format!("ClusterResourceOverride {}", self.name),
            Some(ns) => format!("ResourceOverride {ns}/{}", self.name),
        }
    }

    /// Whether it may change what `placement` sends.
    pub fn allows(&self, placement: &str) -> bool {
        self.placement.is_none_or(|p| p == placement)
    }

    /// Whether it changes `manifest`: a selector names its group, version, kind and name, and
    /// the object is cluster-scoped (ClusterResourceOverride) or in the override's namespace.
    pub fn selects(&self, manifest: &Value) -> bool {
        let (group, version) = match manifest["apiVersion"].as_str().unwrap_or_default() {
            gv if gv.contains('/') => gv.split_once('/').unwrap_or_default(),
            v => ("", v),
        };
        let kind = manifest["kind"].as_str().unwrap_or_default();
        let name = manifest["metadata"]["name"].as_str().unwrap_or_default();
        let namespace = manifest["metadata"]["namespace"].as_str();
        namespace == self.namespace
            && self.selectors.iter().any(|s| {
                s.group == group && s.version == version && s.kind == kind && s.name == name
            })
    }

    /// The sort key of the documented order.
    fn order_key(&self) -> (bool, &str, &str) {
        (
            self.namespace.is_some(),
            self.namespace.unwrap_or_default(),
            self.name,
        )
    }
}

/// Sorts overrides into the order they apply in: cluster-scoped first, then namespaced by
/// namespace, each by name.
pub fn order(overrides: &mut [Override<'_>]) {
    overrides.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
}

/// A rule that cannot be applied to an object for a cluster.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{override_} rule {rule} on {object}: {reason}")]
pub struct OverrideError {
    /// The override (`ResourceOverride ns/name`).
    pub override_: String,
    /// The rule's position in `policy.overrideRules` (0-based).
    pub rule: usize,
    /// The object (`Kind ns/name`).
    pub object: String,
    /// What went wrong, naming the path.
    pub reason: String,
}

/// The manifests for one cluster, and the overrides that changed them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Applied {
    /// The manifests, patched, without those a `Delete` rule keeps off the cluster.
    pub manifests: Vec<Value>,
    /// Snapshot names of the overrides that changed or removed something, in order.
    pub used: Vec<String>,
}

fn object_of(manifest: &Value) -> String {
    let kind = manifest["kind"].as_str().unwrap_or("?");
    let name = manifest["metadata"]["name"].as_str().unwrap_or("?");
    match manifest["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// Whether `rule` selects `cluster` (no selector, no terms, or an empty term: every cluster;
/// terms are ORed).
fn rule_selects(rule: &OverrideRule, cluster: &ClusterInfo) -> Result<bool, String> {
    let Some(selector) = &rule.cluster_selector else {
        return Ok(true);
    };
    if selector.cluster_selector_terms.is_empty() {
        return Ok(true);
    }
    for term in &selector.cluster_selector_terms {
        let Some(ls) = &term.label_selector else {
            return Ok(true);
        };
        let s = Selector::try_from(ls.clone()).map_err(|e| format!("clusterSelector: {e}"))?;
        if s.matches(&cluster.labels) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `value` with the cluster variables replaced in every string.
fn substitute(value: &Value, cluster: &ClusterInfo) -> Result<Value, String> {
    Ok(match value {
        Value::String(s) => Value::String(substitute_str(s, cluster)?),
        Value::Array(a) => Value::Array(
            a.iter()
                .map(|v| substitute(v, cluster))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| Ok((k.clone(), substitute(v, cluster)?)))
                .collect::<Result<_, String>>()?,
        ),
        other => other.clone(),
    })
}

const NAME_VARIABLE: &str = "${MEMBER-CLUSTER-NAME}";
const LABEL_VARIABLE: &str = "${MEMBER-CLUSTER-LABEL-KEY-";

fn substitute_str(s: &str, cluster: &ClusterInfo) -> Result<String, String> {
    let mut out = s.replace(NAME_VARIABLE, &cluster.name);
    while let Some(start) = out.find(LABEL_VARIABLE) {
        let rest = &out[start + LABEL_VARIABLE.len()..];
        let Some(end) = rest.find('}') else {
            return Err(format!("unterminated {LABEL_VARIABLE}…}} in {s:?}"));
        };
        let key = &rest[..end];
        let value = cluster.labels.get(key).ok_or_else(|| {
            format!(
                "cluster {} has no label {key:?} (used in {s:?})",
                cluster.name
            )
        })?;
        out = format!("{}{}{}", &out[..start], value, &rest[end + 1..]);
    }
    Ok(out)
}

/// The reference tokens of JSON pointer `path` (RFC 6901).
fn tokens(path: &str) -> Vec<String> {
    path.split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// Applies one patch operation to `doc` (RFC 6902 add, remove, replace).
fn patch(doc: &mut Value, op: &JsonPatchOverride, value: Option<Value>) -> Result<(), String> {
    let tokens = tokens(&op.path);
    let Some((last, parents)) = tokens.split_last() else {
        return Err(format!(
            "{:?} {}: the path names the whole object",
            op.op, op.path
        ));
    };
    let what = |why: &str| format!("{} {}: {why}", name(op.op), op.path);
    let mut target = &mut *doc;
    for t in parents {
        target = match target {
            Value::Object(o) => o.get_mut(t),
            Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| what("the object has no such path"))?;
    }
    match (target, op.op) {
        (Value::Object(o), JsonPatchOp::Add) => {
            o.insert(last.clone(), value.unwrap_or(Value::Null));
        }
        (Value::Object(o), JsonPatchOp::Replace) => {
            let slot = o
                .get_mut(last)
                .ok_or_else(|| what("the object has no such path"))?;
            *slot = value.unwrap_or(Value::Null);
        }
        (Value::Object(o), JsonPatchOp::Remove) => {
            o.remove(last)
                .ok_or_else(|| what("the object has no such path"))?;
        }
        (Value::Array(a), JsonPatchOp::Add) => {
            let i = if last == "-" {
                a.len()
            } else {
                last.parse::<usize>()
                    .ok()
                    .filter(|i| *i <= a.len())
                    .ok_or_else(|| what("no such array index"))?
            };
            a.insert(i, value.unwrap_or(Value::Null));
        }
        (Value::Array(a), op) => {
            let i = last
                .parse::<usize>()
                .ok()
                .filter(|i| *i < a.len())
                .ok_or_else(|| what("no such array index"))?;
            if op == JsonPatchOp::Remove {
                a.remove(i);
            } else {
                a[i] = value.unwrap_or(Value::Null);
            }
        }
        _ => return Err(what("the parent is neither an object nor an array")),
    }
    Ok(())
}

fn name(op: JsonPatchOp) -> &'static str {
    match op {
        JsonPatchOp::Add => "add",
        JsonPatchOp::Remove => "remove",
        JsonPatchOp::Replace => "replace",
    }
}

/// The manifests `placement` sends to `cluster` once `overrides` (in [`order`]) are applied.
pub fn apply(
    manifests: &[Value],
    overrides: &[Override<'_>],
    placement: &str,
    cluster: &ClusterInfo,
) -> Result<Applied, OverrideError> {
    let mut out = Applied::default();
    let mut used = |snapshot: &str| {
        if !out.used.iter().any(|u| u == snapshot) {
            out.used.push(snapshot.to_string());
        }
    };
    let mut kept = Vec::with_capacity(manifests.len());
    'manifests: for manifest in manifests {
        let mut m = manifest.clone();
        for o in overrides
            .iter()
            .filter(|o| o.allows(placement) && o.selects(manifest))
        {
            for (i, rule) in o.rules.iter().enumerate() {
                let fail = |reason: String| OverrideError {
                    override_: o.label(),
                    rule: i,
                    object: object_of(manifest),
                    reason,
                };
                if !rule_selects(rule, cluster).map_err(fail)? {
                    continue;
                }
                used(&o.snapshot);
                if rule.override_type == OverrideType::Delete {
                    continue 'manifests;
                }
                for p in &rule.json_patch_overrides {
                    match (p.op, &p.value) {
                        (JsonPatchOp::Remove, Some(_)) => {
                            return Err(fail(format!(
                                "remove {}: a remove takes no value",
                                p.path
                            )));
                        }
                        (JsonPatchOp::Add | JsonPatchOp::Replace, None) => {
                            return Err(fail(format!(
                                "{} {}: a value is required",
                                name(p.op),
                                p.path
                            )));
                        }
                        _ => {}
                    }
                    let value = p
                        .value
                        .as_ref()
                        .map(|v| substitute(v, cluster))
                        .transpose()
                        .map_err(|e| fail(format!("{} {}: {e}", name(p.op), p.path)))?;
                    patch(&mut m, p, value).map_err(fail)?;
                }
            }
        }
        kept.push(m);
    }
    out.manifests = kept;
    Ok(out)
}

/// Whether a binding's overrides are fixed (a run bound it, naming its snapshots) rather than
/// followed (the newest snapshot of every override, for placements the hub rolls out itself).
pub fn fixed(binding: &BindingSpec) -> bool {
    binding.update_run_name.is_some()
}

/// The newest snapshot per override among `all`, by override name.
fn newest<T, S>(all: impl IntoIterator<Item = T>, key: impl Fn(&S) -> (String, i64)) -> Vec<T>
where
    T: Borrow<S>,
{
    let mut by: BTreeMap<String, T> = BTreeMap::new();
    for s in all {
        let (name, index) = key(s.borrow());
        if by.get(&name).is_none_or(|b| key(b.borrow()).1 < index) {
            by.insert(name, s);
        }
    }
    by.into_values().collect()
}

/// The newest snapshot of every ClusterResourceOverride among `all`.
pub fn newest_cluster<T: Borrow<ClusterResourceOverrideSnapshot>>(
    all: impl IntoIterator<Item = T>,
) -> Vec<T> {
    newest(all, |s: &ClusterResourceOverrideSnapshot| {
        (s.spec.override_name.clone(), s.spec.index)
    })
}

/// The newest snapshot of every ResourceOverride (per namespace) among `all`.
pub fn newest_namespaced<T: Borrow<ResourceOverrideSnapshot>>(
    all: impl IntoIterator<Item = T>,
) -> Vec<T> {
    newest(all, |s: &ResourceOverrideSnapshot| {
        (
            format!(
                "{}/{}",
                s.namespace().unwrap_or_default(),
                s.spec.override_name
            ),
            s.spec.index,
        )
    })
}

/// The override snapshots that count for one cluster of a placement (held as `C` and `N`: the
/// hub's caches hand out `Arc`s, the plugin lists owned objects).
#[derive(Debug, Clone)]
pub struct Chosen<C, N> {
    /// ClusterResourceOverrideSnapshots.
    pub cluster: Vec<C>,
    /// ResourceOverrideSnapshots.
    pub namespaced: Vec<N>,
    /// Snapshots the binding names that no longer exist (their override was deleted): the
    /// work generator goes on without them.
    pub missing: Vec<String>,
}

/// The snapshots that count for a cluster whose Binding is `binding` (if it has one), among
/// every snapshot there is: those a run bound it to, when a run did; otherwise the newest
/// snapshot of every override. The hub's work generator and `kubectl fleet render` both choose
/// with this.
pub fn choose<C, N>(
    binding: Option<&BindingSpec>,
    cluster: impl IntoIterator<Item = C>,
    namespaced: impl IntoIterator<Item = N>,
) -> Chosen<C, N>
where
    C: Borrow<ClusterResourceOverrideSnapshot>,
    N: Borrow<ResourceOverrideSnapshot>,
{
    let Some(binding) = binding.filter(|b| fixed(b)) else {
        return Chosen {
            cluster: newest_cluster(cluster),
            namespaced: newest_namespaced(namespaced),
            missing: Vec::new(),
        };
    };
    let mut by_name: BTreeMap<String, C> = cluster
        .into_iter()
        .map(|s| (s.borrow().name_any(), s))
        .collect();
    let mut by_ref: BTreeMap<(String, String), N> = namespaced
        .into_iter()
        .map(|s| {
            let s_ = s.borrow();
            ((s_.namespace().unwrap_or_default(), s_.name_any()), s)
        })
        .collect();
    let mut missing = Vec::new();
    let cluster = binding
        .cluster_resource_override_snapshots
        .iter()
        .filter_map(|n| {
            let found = by_name.remove(n);
            if found.is_none() {
                missing.push(n.clone());
            }
            found
        })
        .collect();
    let namespaced = binding
        .resource_override_snapshots
        .iter()
        .filter_map(|NamespacedName { name, namespace }| {
            let found = by_ref.remove(&(namespace.clone(), name.clone()));
            if found.is_none() {
                missing.push(format!("{namespace}/{name}"));
            }
            found
        })
        .collect();
    Chosen {
        cluster,
        namespaced,
        missing,
    }
}

impl<C, N> Chosen<C, N>
where
    C: Borrow<ClusterResourceOverrideSnapshot>,
    N: Borrow<ResourceOverrideSnapshot>,
{
    /// The chosen snapshots, in the order they apply in ([`order`]).
    pub fn overrides(&self) -> Vec<Override<'_>> {
        let mut overrides: Vec<Override<'_>> = self
            .cluster
            .iter()
            .map(|s| Override::cluster(s.borrow()))
            .chain(
                self.namespaced
                    .iter()
                    .map(|s| Override::namespaced(s.borrow())),
            )
            .collect();
        order(&mut overrides);
        overrides
    }

    /// The chosen snapshots by name, as a Binding and a run list them.
    pub fn names(&self) -> OverrideSnapshots {
        OverrideSnapshots {
            cluster_resource_override_snapshots: self
                .cluster
                .iter()
                .map(|s| s.borrow().name_any())
                .collect(),
            resource_override_snapshots: self
                .namespaced
                .iter()
                .map(|s| NamespacedName {
                    name: s.borrow().name_any(),
                    namespace: s.borrow().namespace().unwrap_or_default(),
                })
                .collect(),
        }
    }

    /// Their names as [`OverrideSnapshots::key`] writes them (the Work's annotation).
    pub fn key(&self) -> String {
        self.names().key()
    }

    /// `manifests` of `placement` with the chosen overrides applied for `cluster`.
    pub fn apply(
        &self,
        manifests: &[Value],
        placement: &str,
        cluster: &ClusterInfo,
    ) -> Result<Applied, OverrideError> {
        apply(manifests, &self.overrides(), placement, cluster)
    }
}

/// The start of an `OverriddenSucceeded` message, before the snapshots' names.
const APPLIED_PREFIX: &str = "applied override snapshots: ";

/// A Binding's `Overridden` condition for the outcome of applying its overrides for `cluster`.
pub fn overridden_condition(
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
            format!("{APPLIED_PREFIX}{}", applied.used.join(", ")),
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

/// What a Binding's `Overridden` condition says about its cluster: the one reading of it, for
/// the dashboard and the plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overridden {
    /// Not reported yet (no Work written since overrides exist).
    Unknown,
    /// No override changes what the cluster gets.
    None,
    /// These override snapshots changed it, in the order they applied.
    Applied(Vec<String>),
    /// A rule cannot apply; the message names the override, the rule and the path.
    Failed(String),
}

impl Overridden {
    /// The reading of `conditions` (a Binding's).
    pub fn of(conditions: &[Condition]) -> Self {
        let Some(c) = find(conditions, OVERRIDDEN) else {
            return Overridden::Unknown;
        };
        match c.reason.as_str() {
            reason::NO_OVERRIDE_SPECIFIED => Overridden::None,
            reason::OVERRIDDEN_SUCCEEDED => Overridden::Applied(
                c.message
                    .strip_prefix(APPLIED_PREFIX)
                    .unwrap_or(&c.message)
                    .split(", ")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect(),
            ),
            reason::OVERRIDDEN_FAILED => Overridden::Failed(c.message.clone()),
            _ => Overridden::Unknown,
        }
    }
}

#[cfg(test)]
#[path = "override_apply_tests.rs"]
mod tests;
