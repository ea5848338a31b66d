//! Applying override snapshots to a placement's manifests for one cluster: pure, shared by the
//! hub's work generator and `kubectl fleet render`.
//!
//! The order is fixed: ClusterResourceOverrides first, then ResourceOverrides by namespace, each
//! kind by name; within an override its rules in order, within a rule its patches in order. A
//! `Delete` rule keeps the object off the cluster. String values may use
//! `${MEMBER-CLUSTER-NAME}` and `${MEMBER-CLUSTER-LABEL-KEY-<key>}`.

use std::collections::BTreeMap;

use kube::core::{Selector, SelectorExt};
use serde_json::Value;

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

#[cfg(test)]
#[path = "override_apply_tests.rs"]
mod tests;
