//! What a Work reconcile works with: the clients of the hub and the member, the caches of Works,
//! AppliedWorks and the member's objects, the event recorders, and the per-Work retry and
//! status-write pacing. [`work_applier`](crate::work_applier) runs over it; the modules that
//! apply, clean up, correct and write status take it.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use fleethub_crds::Work;
use fleethub_crds::applied_work::{AppliedWork, WORK_ANNOTATION};
use fleethub_runtime::retry::{ERROR_BACKOFF, FailureBackoff};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::kind_resolver::KindResolver;
use crate::last_written::LastWritten;
use crate::member_objects::MemberObjects;
use crate::metrics::Metrics;
use crate::status_writes::StatusWrites;

/// Everything a Work reconcile needs.
pub struct Context {
    /// Client of the hub (Works).
    pub hub: Client,
    /// Client of the member cluster (everything applied).
    pub member: Client,
    /// The hub namespace of this member's Works.
    pub namespace: String,
    /// The time source.
    pub clock: Arc<dyn Clock>,
    /// Where applies and errors are counted.
    pub metrics: Metrics,
    /// The member's discovery, cached.
    pub kinds: KindResolver,
    /// How often every Work is applied again even if nothing changed, to correct drift.
    pub resync_period: Duration,
    /// Consecutive failures per Work, for retry backoff only (nothing is decided from it).
    pub(crate) failures: FailureBackoff<String>,
    /// The member's fleet-managed objects, watched per kind.
    pub objects: Arc<MemberObjects>,
    /// Changes of those objects, as their Works: taken by [`run`](crate::work_applier::run).
    pub(crate) changes: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<ObjectRef<Work>>>>,
    /// The controller's cache of this member's Works (set by [`run`](crate::work_applier::run)).
    pub(crate) works: OnceLock<Store<Work>>,
    /// What the agent's writes of Works (status, finalizer) returned, until the cache has them.
    pub(crate) written_works: LastWritten<Work>,
    /// The AppliedWorks of this namespace's Works, watched on the member.
    pub(crate) applied_works: Store<AppliedWork>,
    /// Fills [`Self::applied_works`]: taken by [`run`](crate::work_applier::run).
    pub(crate) applied_works_writer: Mutex<Option<Writer<AppliedWork>>>,
    /// What the agent's writes of AppliedWorks returned, until the cache has them.
    pub(crate) written_applied_works: LastWritten<AppliedWork>,
    /// Events on the member's objects (a drift corrected or left).
    pub(crate) member_events: Recorder,
    /// Events on the hub's Works.
    pub(crate) hub_events: Recorder,
    /// Stops the member object watches.
    pub(crate) stop_watches: CancellationToken,
    /// When each Work's status was last written (progress is written at most once per
    /// [`crate::status_writes::PROGRESS_WRITE_INTERVAL`]).
    pub(crate) status_writes: StatusWrites,
}

impl Context {
    /// A context for the Works of the hub namespace `namespace`.
    pub fn new(
        hub: Client,
        member: Client,
        namespace: String,
        clock: Arc<dyn Clock>,
        metrics: Metrics,
        resync_period: Duration,
    ) -> Self {
        let stop_watches = CancellationToken::new();
        let ns = namespace.clone();
        let (objects, changes) = MemberObjects::new(
            member.clone(),
            move |o| work_of(&o.metadata, &ns),
            stop_watches.clone(),
        );
        let applied_works_writer = Writer::default();
        let reporter = Reporter {
            controller: "fleethub-member-agent".into(),
            instance: Some(namespace.clone()),
        };
        Self {
            kinds: KindResolver::new(member.clone()),
            member_events: Recorder::new(member.clone(), reporter.clone()),
            hub_events: Recorder::new(hub.clone(), reporter),
            hub,
            member,
            namespace,
            clock,
            metrics,
            resync_period,
            failures: FailureBackoff::new(ERROR_BACKOFF),
            objects,
            changes: Mutex::new(Some(changes)),
            works: OnceLock::new(),
            written_works: LastWritten::default(),
            applied_works: applied_works_writer.as_reader(),
            applied_works_writer: Mutex::new(Some(applied_works_writer)),
            written_applied_works: LastWritten::default(),
            stop_watches,
            status_writes: StatusWrites::default(),
        }
    }
}

/// The Work that applied object `meta` belongs to, if it is one of `namespace`'s.
pub(crate) fn work_of(meta: &ObjectMeta, namespace: &str) -> Option<ObjectRef<Work>> {
    let (ns, name) = meta
        .annotations
        .as_ref()?
        .get(WORK_ANNOTATION)?
        .split_once('/')?;
    (ns == namespace).then(|| ObjectRef::new(name).within(ns))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn workload_events_map_to_their_work_in_this_namespace_only() {
        let meta = |annotation: Option<&str>| ObjectMeta {
            annotations: annotation
                .map(|a| BTreeMap::from([(WORK_ANNOTATION.to_string(), a.to_string())])),
            ..Default::default()
        };
        assert_eq!(
            work_of(&meta(Some("fleet-member-a/web")), "fleet-member-a"),
            Some(ObjectRef::new("web").within("fleet-member-a"))
        );
        assert_eq!(
            work_of(&meta(Some("fleet-member-b/web")), "fleet-member-a"),
            None
        );
        assert_eq!(work_of(&meta(Some("garbage")), "fleet-member-a"), None);
        assert_eq!(work_of(&meta(None), "fleet-member-a"), None);
    }
}
