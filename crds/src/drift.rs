//! How a cluster differs from the hub, read off its member's Work report: the objects left
//! different (drifted, diffed, not taken over) and the last correction. The hub copies this into
//! the Binding and the Placement; `kubectl fleet drift` and the dashboard show it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::apply_strategy::{DriftType, FieldDiff};
use crate::work::{ManifestIdentifier, WorkStatus};

/// Condition type (Binding, a Placement's cluster, the Placement): objects on the member differ
/// from the hub's and are left so. `True` is the case to look at.
pub const DRIFTED: &str = "Drifted";

/// Reasons of the `Drifted` condition. When it is `True`, the reason is the kind of difference
/// (`Drifted`, `Diffed` or `TakeoverRefused`; a refused takeover names first, then a drift).
pub mod reason {
    /// `Drifted=False`: every object on the member matches the hub (as far as the member
    /// reported).
    pub const IN_SYNC: &str = "InSync";
    /// `Drifted=True` on a placement: clusters differ (the clusters' conditions say how).
    pub const CLUSTERS_DIFFER: &str = "ClustersDiffer";
}

/// Objects listed per Binding (the count says how many there are in all).
pub const MAX_OBJECTS: usize = 20;
/// Fields listed per object on a Binding.
pub const MAX_FIELDS: usize = 5;

/// One member object that differs from the hub's and is left so.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DriftedObject {
    /// The object: `Kind namespace/name` (`Kind name` for a cluster-scoped one).
    pub object: String,
    /// `Drifted` (changed on the member, left as is under `whenToApply: IfNotDrifted`), `Diffed`
    /// (`type: ReportDiff`) or `TakeoverRefused` (existed on the member before the fleet).
    #[serde(rename = "type")]
    pub type_: DriftType,
    /// When the member's agent first saw it differ.
    pub first_seen_time: Time,
    /// How many fields differ.
    pub field_count: i32,
    /// The first differing fields, with the member's and the hub's values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldDiff>,
}

/// The member agent's newest restoration of the hub's values on a cluster.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectCorrection {
    /// The object: `Kind namespace/name`.
    pub object: String,
    /// When the hub's values were restored.
    pub time: Time,
    /// What the member had instead (`.` when the object had been deleted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldDiff>,
}

/// `Kind namespace/name`, or `Kind name` for a cluster-scoped object.
pub fn object_name(id: &ManifestIdentifier) -> String {
    match &id.namespace {
        Some(ns) => format!("{} {ns}/{}", id.kind, id.name),
        None => format!("{} {}", id.kind, id.name),
    }
}

/// The objects a Work report lists as different (at most `max_objects`, each with at most
/// `max_fields` fields), and how many there are in all.
pub fn drifted_objects(
    status: &WorkStatus,
    max_objects: usize,
    max_fields: usize,
) -> (Vec<DriftedObject>, usize) {
    let all: Vec<DriftedObject> = status
        .manifest_conditions
        .iter()
        .filter_map(|m| {
            let d = m.drift.as_ref()?;
            Some(DriftedObject {
                object: object_name(&m.identifier),
                type_: d.type_,
                first_seen_time: d.first_seen_time.clone(),
                field_count: d.field_count,
                fields: d.fields.iter().take(max_fields).cloned().collect(),
            })
        })
        .collect();
    let count = all.len();
    (trim(all, max_objects, max_fields), count)
}

/// At most `max_objects` of `objects`, each with at most `max_fields` fields.
pub fn trim(
    objects: Vec<DriftedObject>,
    max_objects: usize,
    max_fields: usize,
) -> Vec<DriftedObject> {
    objects
        .into_iter()
        .take(max_objects)
        .map(|mut o| {
            o.fields.truncate(max_fields);
            o
        })
        .collect()
}

/// The newest correction a Work report records.
pub fn last_correction(status: &WorkStatus) -> Option<ObjectCorrection> {
    status
        .manifest_conditions
        .iter()
        .filter_map(|m| {
            let c = m.last_correction.as_ref()?;
            Some(ObjectCorrection {
                object: object_name(&m.identifier),
                time: c.time.clone(),
                fields: c.fields.iter().take(MAX_FIELDS).cloned().collect(),
            })
        })
        .max_by_key(|c| c.time.0)
}

/// The reason of a `Drifted=True` condition over `objects`: a refused takeover first, then a
/// drift, then a reported difference.
pub fn worst(objects: &[DriftedObject]) -> Option<DriftType> {
    [
        DriftType::TakeoverRefused,
        DriftType::Drifted,
        DriftType::Diffed,
    ]
    .into_iter()
    .find(|t| objects.iter().any(|o| o.type_ == *t))
}

/// One field as people read it: `data.v: member "x", hub "y"`.
pub fn describe_field(f: &FieldDiff) -> String {
    let value = |v: &Option<String>| v.clone().unwrap_or_else(|| "(unset)".to_string());
    if f.path == "." {
        return match (&f.member_value, &f.hub_value) {
            (None, _) => "missing on the member".to_string(),
            (_, None) => "not the hub's".to_string(),
            _ => "differs".to_string(),
        };
    }
    format!(
        "{}: member {}, hub {}",
        f.path,
        value(&f.member_value),
        value(&f.hub_value)
    )
}

/// One object as people read it: `ConfigMap ns/c (Drifted: data.v: member "x", hub "y")`.
pub fn describe(o: &DriftedObject) -> String {
    let mut fields: Vec<String> = o.fields.iter().map(describe_field).collect();
    let more = o.field_count as usize - o.fields.len().min(o.field_count as usize);
    if more > 0 {
        fields.push(format!("{more} more"));
    }
    format!("{} ({}: {})", o.object, o.type_.as_str(), fields.join("; "))
}

/// The message of a `Drifted=True` condition: how many objects, the first few described.
pub fn message(objects: &[DriftedObject], count: usize) -> String {
    let shown: Vec<String> = objects.iter().take(3).map(describe).collect();
    let rest = count.saturating_sub(shown.len());
    let tail = if rest > 0 {
        format!("; and {rest} more")
    } else {
        String::new()
    };
    let noun = if count == 1 {
        "object differs"
    } else {
        "objects differ"
    };
    format!("{count} {noun} from the hub: {}{tail}", shown.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply_strategy::{DriftCorrection, ManifestDrift};
    use crate::work::ManifestCondition;

    fn time(s: i64) -> Time {
        Time(jiff::Timestamp::from_second(s).unwrap())
    }

    fn field(path: &str, member: Option<&str>, hub: Option<&str>) -> FieldDiff {
        FieldDiff {
            path: path.into(),
            member_value: member.map(Into::into),
            hub_value: hub.map(Into::into),
        }
    }

    fn manifest(
        name: &str,
        drift: Option<(DriftType, usize)>,
        corrected: Option<i64>,
    ) -> ManifestCondition {
        ManifestCondition {
            identifier: ManifestIdentifier {
                kind: "ConfigMap".into(),
                version: "v1".into(),
                namespace: Some("app".into()),
                name: name.into(),
                ..Default::default()
            },
            drift: drift.map(|(type_, n)| ManifestDrift {
                type_,
                first_seen_time: time(100),
                field_count: n as i32,
                fields: (0..n)
                    .map(|i| field(&format!("data.k{i}"), Some("\"m\""), Some("\"h\"")))
                    .collect(),
            }),
            last_correction: corrected.map(|t| DriftCorrection {
                time: time(t),
                fields: vec![field(".", None, Some("{}"))],
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_objects_left_different_are_listed_within_the_limits() {
        let status = WorkStatus {
            manifest_conditions: vec![
                manifest("a", Some((DriftType::Drifted, 8)), None),
                manifest("b", None, Some(5)),
                manifest("c", Some((DriftType::TakeoverRefused, 1)), None),
                manifest("d", Some((DriftType::Drifted, 1)), None),
            ],
            ..Default::default()
        };
        let (objects, count) = drifted_objects(&status, 2, 3);
        assert_eq!(count, 3);
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[0].object, "ConfigMap app/a");
        assert_eq!(objects[0].fields.len(), 3);
        assert_eq!(objects[0].field_count, 8);
        assert_eq!(objects[1].object, "ConfigMap app/c");
        assert_eq!(worst(&objects), Some(DriftType::TakeoverRefused));
        assert_eq!(worst(&objects[..1]), Some(DriftType::Drifted));
        assert_eq!(worst(&[]), None);
    }

    #[test]
    fn the_newest_correction_is_the_last_one() {
        let status = WorkStatus {
            manifest_conditions: vec![
                manifest("a", None, Some(5)),
                manifest("b", None, Some(9)),
                manifest("c", None, None),
            ],
            ..Default::default()
        };
        let last = last_correction(&status).unwrap();
        assert_eq!(last.object, "ConfigMap app/b");
        assert_eq!(last.time, time(9));
        assert!(last_correction(&WorkStatus::default()).is_none());
    }

    #[test]
    fn messages_name_objects_fields_and_both_values() {
        let status = WorkStatus {
            manifest_conditions: (0..5)
                .map(|i| manifest(&format!("o{i}"), Some((DriftType::Drifted, 2)), None))
                .collect(),
            ..Default::default()
        };
        let (objects, count) = drifted_objects(&status, MAX_OBJECTS, 1);
        let text = message(&objects, count);
        assert!(
            text.starts_with("5 objects differ from the hub: ConfigMap app/o0 (Drifted: data.k0: member \"m\", hub \"h\"; 1 more)"),
            "{text}"
        );
        assert!(text.ends_with("; and 2 more"), "{text}");
        let deleted = field(".", None, Some("{}"));
        assert_eq!(describe_field(&deleted), "missing on the member");
        let unset = field("spec.x", None, Some("1"));
        assert_eq!(describe_field(&unset), "spec.x: member (unset), hub 1");
        let one = message(&objects[..1], 1);
        assert!(one.starts_with("1 object differs"), "{one}");
    }
}
