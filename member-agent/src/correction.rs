//! Reporting what the agent does about a member's object that differs from the hub's (decided
//! by [`drift::decide`](crate::drift::decide)): the messages that name the fields and both values,
//! and the `DriftCorrected` Events on the member's object and the hub's Work.

use fleethub_crds::Work;
use fleethub_crds::apply_strategy::{ApplyStrategy, DriftType, FieldDiff};
use fleethub_crds::work::reason as work_reason;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::api::DynamicObject;
use kube::runtime::events::{Event, EventType};

use crate::context::Context;

/// How many corrected fields a correction's note names.
const NAMED_IN_NOTE: usize = 3;

/// `spec.replicas is 5 on the member, 2 on the hub`.
pub fn describe_diff(d: &FieldDiff) -> String {
    let value = |v: &Option<String>| v.clone().unwrap_or_else(|| "absent".to_string());
    if d.path == "." {
        return "the object was deleted".to_string();
    }
    format!(
        "{} is {} on the member, {} on the hub",
        d.path,
        value(&d.member_value),
        value(&d.hub_value)
    )
}

/// Why `object` is left differing from the hub (`why`, `count` fields, the first of them in
/// `fields`): the manifest's refusal reason (`Drifted`, `TakeoverRefused`; `None` under
/// `ReportDiff`, which refuses nothing) and the message naming the object and the first field.
pub fn left_message(
    why: DriftType,
    object: &str,
    strategy: &ApplyStrategy,
    count: usize,
    fields: &[FieldDiff],
) -> (Option<&'static str>, String) {
    let first = fields.first().map_or(String::new(), describe_diff);
    let more = if count > 1 {
        format!(" (and {} more fields)", count - 1)
    } else {
        String::new()
    };
    match why {
        DriftType::Drifted => (
            Some(work_reason::DRIFTED),
            format!(
                "{object} was changed on the member and is left so (whenToApply: IfNotDrifted): {first}{more}"
            ),
        ),
        DriftType::TakeoverRefused => (
            Some(work_reason::TAKEOVER_REFUSED),
            format!(
                "{object} existed on the member before the fleet and is not taken over (whenToTakeOver: {:?}){}{first}{more}",
                strategy.when_to_take_over(),
                if first.is_empty() { "" } else { ": " }
            ),
        ),
        DriftType::Diffed => (None, String::new()),
    }
}

/// The note of a correction of `object`: the first corrected fields.
pub fn restored_note(object: &str, fields: &[FieldDiff]) -> String {
    let what = fields
        .iter()
        .take(NAMED_IN_NOTE)
        .map(describe_diff)
        .collect::<Vec<_>>()
        .join("; ");
    format!("restored the hub's values of {object} (changed on the member: {what})")
}

/// Raises a `DriftCorrected` Event on the member's object and on the hub's Work `work`
/// (`namespace/name`), best effort: the Work's status records the correction too.
pub async fn record(ctx: &Context, applied: &DynamicObject, work: &str, note: &str) {
    let event = Event {
        type_: EventType::Normal,
        reason: "DriftCorrected".into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Restore".into(),
        secondary: None,
    };
    let member_ref = ObjectReference {
        api_version: applied.types.as_ref().map(|t| t.api_version.clone()),
        kind: applied.types.as_ref().map(|t| t.kind.clone()),
        name: applied.metadata.name.clone(),
        namespace: applied.metadata.namespace.clone(),
        uid: applied.metadata.uid.clone(),
        ..Default::default()
    };
    if let Err(e) = ctx.member_events.publish(&event, &member_ref).await {
        tracing::debug!(error = %e, "recording a member event");
    }
    let Some((namespace, name)) = work.split_once('/') else {
        return;
    };
    let work_ref = ObjectReference {
        api_version: Some(Work::api_version(&()).into_owned()),
        kind: Some(Work::kind(&()).into_owned()),
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        ..Default::default()
    };
    if let Err(e) = ctx.hub_events.publish(&event, &work_ref).await {
        tracing::debug!(error = %e, "recording a hub event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleethub_crds::apply_strategy::WhenToTakeOver;

    fn diff(path: &str, member: Option<&str>, hub: Option<&str>) -> FieldDiff {
        FieldDiff {
            path: path.into(),
            member_value: member.map(str::to_string),
            hub_value: hub.map(str::to_string),
        }
    }

    #[test]
    fn messages_name_the_object_the_field_and_both_values() {
        let replicas = diff("spec.replicas", Some("5"), Some("2"));
        assert_eq!(
            describe_diff(&replicas),
            "spec.replicas is 5 on the member, 2 on the hub"
        );
        assert_eq!(
            describe_diff(&diff("data.extra", Some("x"), None)),
            "data.extra is x on the member, absent on the hub"
        );
        assert_eq!(
            describe_diff(&diff(".", None, Some("{}"))),
            "the object was deleted"
        );

        let strategy = ApplyStrategy::default();
        let (reason, message) = left_message(
            DriftType::Drifted,
            "Deployment app/web",
            &strategy,
            3,
            std::slice::from_ref(&replicas),
        );
        assert_eq!(reason, Some(work_reason::DRIFTED));
        assert_eq!(
            message,
            "Deployment app/web was changed on the member and is left so (whenToApply: IfNotDrifted): spec.replicas is 5 on the member, 2 on the hub (and 2 more fields)"
        );

        let never = ApplyStrategy {
            when_to_take_over: Some(WhenToTakeOver::Never),
            ..Default::default()
        };
        let (reason, message) = left_message(
            DriftType::TakeoverRefused,
            "ConfigMap app/c",
            &never,
            0,
            &[],
        );
        assert_eq!(reason, Some(work_reason::TAKEOVER_REFUSED));
        assert_eq!(
            message,
            "ConfigMap app/c existed on the member before the fleet and is not taken over (whenToTakeOver: Never)"
        );
        assert_eq!(
            left_message(
                DriftType::Diffed,
                "ConfigMap app/c",
                &strategy,
                1,
                &[replicas]
            )
            .0,
            None
        );
    }

    #[test]
    fn a_correction_note_names_at_most_three_fields() {
        let fields: Vec<FieldDiff> = (0..5)
            .map(|i| diff(&format!("data.k{i}"), Some("x"), Some("y")))
            .collect();
        let note = restored_note("ConfigMap app/c", &fields);
        assert!(note.starts_with("restored the hub's values of ConfigMap app/c (changed on the member: data.k0 is x on the member, y on the hub; "));
        assert!(note.contains("data.k2"));
        assert!(!note.contains("data.k3"));
    }
}
