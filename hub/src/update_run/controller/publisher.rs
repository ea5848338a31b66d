//! The runs' events, published by one task in their order. Events that queue up while an earlier
//! one is being written are combined: those of the same run, reason and type become one Event
//! whose note lists them (as client-go's event correlator combines similar events). A
//! 1,000-cluster run made about 2,000 Event writes (a start and a success per cluster), a fifth
//! of the hub API server's writes for the run; under load they now come a few dozen at a time,
//! while a quiet hub still publishes each event as it happens.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType};

/// The events queued before a publisher task gives up on keeping up: beyond this, new ones are
/// dropped (and logged): the run's status, not its events, is the record.
pub const BACKLOG: usize = 10_000;
/// Events taken off the queue at once, at most.
const BATCH: usize = 1_000;
/// An Event's note is at most 1 KiB (events.k8s.io/v1).
const NOTE_BYTES: usize = 1024;
/// Who publishes (`reportingController`, `reportingInstance`).
const REPORTER: &str = "fleethub-hub";

/// The queue of events to publish.
pub type Sender = tokio::sync::mpsc::Sender<(Event, ObjectReference)>;

/// Starts the publisher task; it ends when every [`Sender`] is dropped.
pub fn spawn(client: Client) -> (Sender, tokio::task::JoinHandle<()>) {
    let (events, mut queued) = tokio::sync::mpsc::channel::<(Event, ObjectReference)>(BACKLOG);
    let task = tokio::spawn(async move {
        let mut batch = Vec::new();
        while queued.recv_many(&mut batch, BATCH).await > 0 {
            for (event, regarding) in combine(std::mem::take(&mut batch)) {
                if let Err(err) = publish(&client, &event, &regarding).await {
                    tracing::debug!(error = %err, reason = %event.reason, "cannot record event");
                }
            }
        }
    });
    (events, task)
}

/// `events` with those of the same object, reason and type combined into the first of them,
/// whose note then lists each note in order; otherwise in their order.
pub fn combine(events: Vec<(Event, ObjectReference)>) -> Vec<(Event, ObjectReference)> {
    let mut groups: Vec<((Event, ObjectReference), Vec<String>)> = Vec::new();
    for (event, regarding) in events {
        let note = event.note.clone().unwrap_or_default();
        let same = groups.iter_mut().find(|((e, r), _)| {
            e.reason == event.reason && e.type_ == event.type_ && same_object(r, &regarding)
        });
        match same {
            Some((_, notes)) => notes.push(note),
            None => groups.push(((event, regarding), vec![note])),
        }
    }
    groups
        .into_iter()
        .map(|((mut event, regarding), notes)| {
            if notes.len() > 1 {
                event.note = Some(listed(&notes));
            }
            (event, regarding)
        })
        .collect()
}

fn same_object(a: &ObjectReference, b: &ObjectReference) -> bool {
    a.uid == b.uid && a.name == b.name && a.namespace == b.namespace && a.kind == b.kind
}

/// `notes` joined, as many as fit in a note, then how many more there were.
fn listed(notes: &[String]) -> String {
    let mut out = format!("{} events: ", notes.len());
    for (i, note) in notes.iter().enumerate() {
        let more = format!(" … and {} more", notes.len() - i);
        let separator = if i == 0 { "" } else { "; " };
        if out.len() + separator.len() + note.len() + more.len() > NOTE_BYTES {
            out.push_str(&more);
            return out;
        }
        out.push_str(separator);
        out.push_str(note);
    }
    out
}

/// Creates `event` about `regarding` (a new Event each time: a combined note is its own record,
/// where a series would keep repeating the first note).
async fn publish(
    client: &Client,
    event: &Event,
    regarding: &ObjectReference,
) -> Result<(), kube::Error> {
    let now = jiff::Timestamp::now();
    let namespace = regarding
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let body = K8sEvent {
        metadata: ObjectMeta {
            name: Some(format!(
                "{}.{:x}",
                regarding.name.as_deref().unwrap_or(REPORTER),
                now.as_nanosecond()
            )),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        action: Some(event.action.clone()),
        reason: Some(event.reason.clone()),
        note: event.note.clone(),
        regarding: Some(regarding.clone()),
        related: event.secondary.clone(),
        reporting_controller: Some(REPORTER.into()),
        reporting_instance: Some(REPORTER.into()),
        type_: Some(
            match event.type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .into(),
        ),
        ..K8sEvent::default()
    };
    Api::<K8sEvent>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &body)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(reason: &str, note: &str, warning: bool) -> Event {
        Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note.into()),
            action: "Reconcile".into(),
            secondary: None,
        }
    }

    fn run(name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("UpdateRun".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        }
    }

    #[test]
    fn events_of_one_run_reason_and_type_are_combined_in_order() {
        let queued = vec![
            (event("Started", "cluster a", false), run("r1")),
            (event("Succeeded", "cluster x", false), run("r1")),
            (event("Started", "cluster b", false), run("r1")),
            (event("Started", "cluster c", false), run("r2")),
            (event("Started", "cluster d", true), run("r1")),
            (event("Started", "cluster e", false), run("r1")),
        ];
        let combined = combine(queued);
        let seen: Vec<(String, String, Option<String>)> = combined
            .iter()
            .map(|(e, r)| (e.reason.clone(), r.name.clone().unwrap(), e.note.clone()))
            .collect();
        assert_eq!(
            seen,
            vec![
                (
                    "Started".into(),
                    "r1".into(),
                    Some("3 events: cluster a; cluster b; cluster e".into())
                ),
                ("Succeeded".into(), "r1".into(), Some("cluster x".into())),
                ("Started".into(), "r2".into(), Some("cluster c".into())),
                ("Started".into(), "r1".into(), Some("cluster d".into())),
            ]
        );
        assert_eq!(combined[3].0.type_, EventType::Warning);
    }

    #[test]
    fn a_long_list_fits_in_a_note_and_says_how_many_it_left_out() {
        let queued: Vec<_> = (0..500)
            .map(|i| {
                (
                    event("Started", &format!("cluster bench-{i:04} started"), false),
                    run("r"),
                )
            })
            .collect();
        let combined = combine(queued);
        assert_eq!(combined.len(), 1);
        let note = combined[0].0.note.clone().unwrap();
        assert!(note.len() <= NOTE_BYTES, "{} bytes", note.len());
        assert!(
            note.starts_with("500 events: cluster bench-0000 started; "),
            "{note}"
        );
        let listed = note.matches("started").count();
        assert!(
            note.ends_with(&format!(" … and {} more", 500 - listed)),
            "{note}"
        );
    }
}
