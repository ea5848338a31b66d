//! How a member's object differs from what the agent applies for the hub, and whose each
//! difference is: pure, from the object to apply, the member's object (with its managed fields)
//! and whether the hub's object changed since the agent last applied it.
//!
//! Field ownership decides (see [`fleethub_crds::apply_strategy`]):
//! - a field the agent owns, or a field nobody owns while the hub's object changed: the hub's
//!   new value, applied as usual ([`Difference::Hub`]);
//! - a field a person last set with kubectl (`kubectl`, `kubectl-*` field managers), or a field
//!   of the hub's object nobody owns any more while the hub's object did not change (someone
//!   removed it): drift ([`Difference::Drift`]);
//! - a field another controller or applier owns: theirs, never reported and never forced back
//!   ([`Difference::Foreign`]; left out of what the agent applies).

use fleethub_crds::applied_work::WORK_ANNOTATION;
use fleethub_crds::apply_strategy::{
    ApplyStrategy, DriftType, FieldDiff, MAX_FIELDS, MAX_VALUE_CHARS, WhenToApply, WhenToTakeOver,
};
use fleethub_crds::field_manager::MEMBER_AGENT;
use fleethub_crds::names::PLACEMENT_LABEL;
use serde_json::{Map, Value};

/// What to do with one manifest.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Apply `body` (the prepared object without the fields others own). `correction`: the
    /// drift this undoes.
    Apply {
        /// What to apply.
        body: Value,
        /// The member's drifted values being replaced, if any.
        correction: Option<Vec<FieldDiff>>,
    },
    /// Nothing: the member's object already is the hub's.
    Unchanged,
    /// Leave the member's object as it is and report how it differs.
    Leave {
        /// Why.
        why: DriftType,
        /// How many fields differ.
        count: usize,
        /// The first of them.
        fields: Vec<FieldDiff>,
    },
}

/// The member's object, as the decision sees it.
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    /// The object (`None`: not on the member).
    pub object: Option<&'a Value>,
    /// Whether the fleet created it or took it over (its owner reference names the Work's
    /// AppliedWork, or the agent is among its field managers).
    pub fleet_managed: bool,
}

/// Decides what to do with the prepared object `body` given the member's object, the strategy,
/// whether the hub's object changed since it was last applied, and whether it was ever applied.
pub fn decide(
    strategy: &ApplyStrategy,
    mut body: Value,
    member: Member<'_>,
    hub_changed: bool,
    applied_before: bool,
) -> Decision {
    let full = strategy.full_comparison();
    let Some(live) = member.object else {
        if strategy.report_only() {
            let diff = [Diff {
                path: Vec::new(),
                member: None,
                hub: Some(Value::String("the object".into())),
                owner: Difference::Drift,
            }];
            return Decision::Leave {
                why: DriftType::Diffed,
                count: 1,
                fields: field_diffs(&diff),
            };
        }
        // Deleted on the member after it was applied: recreating it is a correction.
        let correction = (applied_before && !hub_changed).then(|| {
            vec![FieldDiff {
                path: ".".into(),
                member_value: None,
                hub_value: None,
            }]
        });
        return Decision::Apply { body, correction };
    };
    let leave = |why, diffs: Vec<Diff>| Decision::Leave {
        why,
        count: diffs.len(),
        fields: field_diffs(&diffs),
    };
    if strategy.report_only() {
        let diffs: Vec<Diff> = compare(&body, live, false, full)
            .into_iter()
            .filter(|d| d.owner != Difference::Foreign)
            .collect();
        return if diffs.is_empty() {
            Decision::Unchanged
        } else {
            leave(DriftType::Diffed, diffs)
        };
    }
    if !member.fleet_managed {
        match strategy.when_to_take_over() {
            WhenToTakeOver::Always => {
                return Decision::Apply {
                    body,
                    correction: None,
                };
            }
            WhenToTakeOver::IfNoDiff => {
                let diffs = compare_all(&body, live, full);
                if diffs.is_empty() {
                    return Decision::Apply {
                        body,
                        correction: None,
                    };
                }
                return leave(DriftType::TakeoverRefused, diffs);
            }
            WhenToTakeOver::Never => {
                return leave(DriftType::TakeoverRefused, compare_all(&body, live, full));
            }
        }
    }
    let diffs = compare(&body, live, hub_changed, false);
    let (drift, rest): (Vec<Diff>, Vec<Diff>) = diffs
        .into_iter()
        .partition(|d| d.owner == Difference::Drift);
    if !drift.is_empty() && strategy.when_to_apply() == WhenToApply::IfNotDrifted {
        return leave(DriftType::Drifted, drift);
    }
    let foreign: Vec<&Path> = rest
        .iter()
        .filter(|d| d.owner == Difference::Foreign)
        .map(|d| &d.path)
        .collect();
    let hub = rest.iter().any(|d| d.owner == Difference::Hub);
    if drift.is_empty() && !hub && !hub_changed {
        return Decision::Unchanged;
    }
    strip(&mut body, &foreign);
    Decision::Apply {
        body,
        correction: (!drift.is_empty()).then(|| field_diffs(&drift)),
    }
}

/// One step of a path into an object.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A field of an object.
    Field(String),
    /// An element of a list (its position, and the element, to match list keys).
    Index(usize, Value),
}

/// A path into an object.
pub type Path = Vec<Step>;

/// Whose a difference is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Difference {
    /// The hub's new value: apply it.
    Hub,
    /// Changed (or removed) on the member: drift.
    Drift,
    /// Another controller's or applier's: leave it.
    Foreign,
}

/// One field whose member value differs from the value to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Diff {
    /// Where.
    pub path: Path,
    /// The member's value (`None`: absent).
    pub member: Option<Value>,
    /// The hub's value (`None`: the hub's object does not set it; full comparison only).
    pub hub: Option<Value>,
    /// Whose it is.
    pub owner: Difference,
}

/// Every difference between `desired` (the object to apply) and `live` (the member's), on the
/// fields `desired` sets (and, with `full`, the fields only `live` has), classified by whose
/// they are. `hub_changed`: the hub's object is not the one the agent last applied.
pub fn compare(desired: &Value, live: &Value, hub_changed: bool, full: bool) -> Vec<Diff> {
    let owners = Owners::of(live);
    let mut raw = Vec::new();
    let root = |name: &str| Step::Field(name.to_string());
    if let (Some(d), Some(l)) = (desired.as_object(), live.as_object()) {
        for (key, dv) in d {
            match key.as_str() {
                "apiVersion" | "kind" | "status" => {}
                "metadata" => {
                    for field in ["labels", "annotations"] {
                        let path = vec![root("metadata"), root(field)];
                        let lv = &live["metadata"][field];
                        if let Some(dm) = dv[field].as_object() {
                            let empty = Map::new();
                            let lm = lv.as_object().unwrap_or(&empty);
                            diff_map(dm, lm, &path, false, &mut raw);
                        }
                    }
                }
                _ => diff_value(dv, l.get(key), &[root(key)], full, &mut raw),
            }
        }
        if full {
            for (key, lv) in l {
                if !d.contains_key(key) && !matches!(key.as_str(), "metadata" | "status") {
                    raw.push((vec![root(key)], Some(lv.clone()), None));
                }
            }
        }
    }
    raw.into_iter()
        .map(|(path, member, hub)| {
            let owner = match owners.owner(&path) {
                Owner::Agent => Difference::Hub,
                Owner::Person => Difference::Drift,
                Owner::Other => Difference::Foreign,
                Owner::Nobody if hub_changed => Difference::Hub,
                Owner::Nobody => Difference::Drift,
            };
            Diff {
                path,
                member,
                hub,
                owner,
            }
        })
        .collect()
}

/// Every difference between `desired` and `live` whoever made it: for deciding whether a
/// pre-existing object already matches the hub's (`whenToTakeOver: IfNoDiff`) and for
/// `ReportDiff`.
pub fn compare_all(desired: &Value, live: &Value, full: bool) -> Vec<Diff> {
    compare(desired, live, false, full)
        .into_iter()
        .filter(|d| !is_fleet_marker(&d.path))
        .map(|d| Diff {
            owner: Difference::Drift,
            ..d
        })
        .collect()
}

/// The placement label and Work annotation the agent adds: not part of the hub's object.
fn is_fleet_marker(path: &Path) -> bool {
    let field = |i: usize| match path.get(i) {
        Some(Step::Field(f)) => f.as_str(),
        _ => "",
    };
    path.len() == 3
        && field(0) == "metadata"
        && matches!(
            (field(1), field(2)),
            ("labels", PLACEMENT_LABEL) | ("annotations", WORK_ANNOTATION)
        )
}

type RawDiff = (Path, Option<Value>, Option<Value>);

fn diff_value(
    desired: &Value,
    live: Option<&Value>,
    path: &[Step],
    full: bool,
    out: &mut Vec<RawDiff>,
) {
    let Some(live) = live else {
        out.push((path.to_vec(), None, Some(desired.clone())));
        return;
    };
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => diff_map(d, l, path, full, out),
        (Value::Array(d), Value::Array(l))
            if d.len() == l.len() && d.iter().all(Value::is_object) =>
        {
            for (i, (dv, lv)) in d.iter().zip(l).enumerate() {
                let mut p = path.to_vec();
                p.push(Step::Index(i, dv.clone()));
                diff_value(dv, Some(lv), &p, full, out);
            }
        }
        _ if same(desired, live) => {}
        _ => out.push((path.to_vec(), Some(live.clone()), Some(desired.clone()))),
    }
}

fn diff_map(
    desired: &Map<String, Value>,
    live: &Map<String, Value>,
    path: &[Step],
    full: bool,
    out: &mut Vec<RawDiff>,
) {
    for (key, dv) in desired {
        let mut p = path.to_vec();
        p.push(Step::Field(key.clone()));
        diff_value(dv, live.get(key), &p, full, out);
    }
    if full {
        for (key, lv) in live {
            if !desired.contains_key(key) {
                let mut p = path.to_vec();
                p.push(Step::Field(key.clone()));
                out.push((p, Some(lv.clone()), None));
            }
        }
    }
}

/// Equal values; numbers by value (`1` and `1.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// Who owns a field on the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    Agent,
    Person,
    Other,
    Nobody,
}

/// A member object's managed fields: each manager with its field set.
struct Owners<'a> {
    entries: Vec<(&'a str, &'a Value)>,
}

impl<'a> Owners<'a> {
    fn of(live: &'a Value) -> Self {
        let entries = live["metadata"]["managedFields"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| Some((e["manager"].as_str()?, e.get("fieldsV1")?)))
                    .collect()
            })
            .unwrap_or_default();
        Owners { entries }
    }

    /// Who owns `path`: the agent if it is among the owners, else a person, else another
    /// manager.
    fn owner(&self, path: &Path) -> Owner {
        let owners: Vec<&str> = self
            .entries
            .iter()
            .filter(|(_, fields)| owns(fields, path))
            .map(|(m, _)| *m)
            .collect();
        if owners.contains(&MEMBER_AGENT) {
            Owner::Agent
        } else if owners.iter().any(|m| is_person(m)) {
            Owner::Person
        } else if owners.is_empty() {
            Owner::Nobody
        } else {
            Owner::Other
        }
    }
}

/// Field managers of kubectl: a person's edit.
pub fn is_person(manager: &str) -> bool {
    manager == "kubectl" || manager.starts_with("kubectl-")
}

/// Whether a `fieldsV1` set holds `path` (or a field above it, owned whole).
fn owns(fields: &Value, path: &Path) -> bool {
    let mut node = fields;
    for step in path {
        let Some(children) = node.as_object() else {
            return false;
        };
        if children.is_empty() {
            // An atomic field above the path: owned whole.
            return true;
        }
        let next = match step {
            Step::Field(name) => children.get(&format!("f:{name}")),
            Step::Index(i, element) => children
                .iter()
                .find(|(k, _)| element_matches(k, *i, element))
                .map(|(_, v)| v),
        };
        match next {
            Some(n) => node = n,
            None => return false,
        }
    }
    true
}

/// Whether a `fieldsV1` list key (`k:{"name":"web"}`, `v:…`, `i:0`) names this element.
fn element_matches(key: &str, index: usize, element: &Value) -> bool {
    if let Some(k) = key.strip_prefix("k:") {
        let Ok(Value::Object(keys)) = serde_json::from_str::<Value>(k) else {
            return false;
        };
        keys.iter()
            .all(|(f, v)| element.get(f).is_some_and(|e| same(e, v)))
    } else if let Some(v) = key.strip_prefix("v:") {
        serde_json::from_str::<Value>(v).is_ok_and(|v| same(&v, element))
    } else if let Some(i) = key.strip_prefix("i:") {
        i.parse::<usize>() == Ok(index)
    } else {
        false
    }
}

/// `spec.template.spec.containers[0].image`.
pub fn path_string(path: &Path) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Field(f) if f.contains('.') || f.contains('/') => out.push_str(&format!(
                "[{}]",
                serde_json::to_string(f).unwrap_or_default()
            )),
            Step::Field(f) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(f);
            }
            Step::Index(i, _) => out.push_str(&format!("[{i}]")),
        }
    }
    if out.is_empty() { ".".to_string() } else { out }
}

/// The recorded form of some differences: at most [`MAX_FIELDS`], values as short JSON.
pub fn field_diffs<'d>(diffs: impl IntoIterator<Item = &'d Diff>) -> Vec<FieldDiff> {
    diffs
        .into_iter()
        .take(MAX_FIELDS)
        .map(|d| FieldDiff {
            path: path_string(&d.path),
            member_value: d.member.as_ref().map(short),
            hub_value: d.hub.as_ref().map(short),
        })
        .collect()
}

/// A value as JSON, at most [`MAX_VALUE_CHARS`] characters.
pub fn short(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(MAX_VALUE_CHARS) {
        Some((end, _)) => format!("{}…", &s[..end]),
        None => s,
    }
}

/// Removes the fields at `paths` from `object` (the fields another manager owns, so the agent's
/// apply neither sets nor claims them). A list element keeps its other fields.
pub fn strip(object: &mut Value, paths: &[&Path]) {
    for path in paths {
        if let Some((Step::Field(last), parents)) = path.split_last()
            && let Some(parent) = walk(object, parents).and_then(Value::as_object_mut)
        {
            parent.remove(last);
        }
        // A whole list element is never someone else's alone: nothing to strip.
    }
}

fn walk<'v>(node: &'v mut Value, path: &[Step]) -> Option<&'v mut Value> {
    match path.split_first() {
        None => Some(node),
        Some((Step::Field(f), rest)) => walk(node.get_mut(f.as_str())?, rest),
        Some((Step::Index(i, _), rest)) => walk(node.get_mut(*i)?, rest),
    }
}

#[cfg(test)]
#[path = "drift_tests.rs"]
mod tests;
