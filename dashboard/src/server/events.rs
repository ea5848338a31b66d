//! The change feed: server-sent events telling an open page *that* something changed on the
//! hub (and which kind), never *what*: the page refetches as its user. The watches behind it
//! are made with that user's token, so RBAC applies to the feed too; they end when the page
//! disconnects.

use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::response::sse::{Event, KeepAlive, Sse};
use fleethub_crds::{
    ApprovalRequest, AutoUpdatePolicy, Binding, MemberCluster, Placement, ResourceSnapshot,
    UpdateRun,
};
use futures::{Stream, StreamExt};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::session::Session;

/// Changes that arrive this close together are sent as one event.
const COALESCE: Duration = Duration::from_millis(40);

fn forward<K>(
    client: &Client,
    kind: &'static str,
    tx: mpsc::Sender<&'static str>,
    stop: CancellationToken,
) where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let api = Api::<K>::all(client.clone());
    tokio::spawn(async move {
        let mut stream = watcher(api, fleethub_runtime::watcher_config())
            .backoff(fleethub_runtime::watch_backoff())
            .boxed();
        loop {
            let item = tokio::select! {
                _ = stop.cancelled() => return,
                item = stream.next() => item,
            };
            match item {
                None => return,
                // The initial list (and a relist) ends with InitDone: a change may have been
                // missed in between, so it counts as one.
                Some(Ok(
                    watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone,
                )) => {
                    if tx.send(kind).await.is_err() {
                        return;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::debug!(kind, error = %e, "change feed watch failed; retrying");
                }
            }
        }
    });
}

/// `GET /events`: one `message` event per burst of changes, its data the kind that changed
/// (`memberclusters`, `updateruns`, …), `rollouts` for several kinds other than member
/// clusters, `all` for member clusters and others.
pub async fn events(
    Extension(s): Extension<Session>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let (tx, rx) = mpsc::channel::<&'static str>(256);
    let stop = CancellationToken::new();
    let c = &s.client;
    forward::<MemberCluster>(c, "memberclusters", tx.clone(), stop.clone());
    forward::<Placement>(c, "placements", tx.clone(), stop.clone());
    forward::<ResourceSnapshot>(c, "resourcesnapshots", tx.clone(), stop.clone());
    forward::<Binding>(c, "bindings", tx.clone(), stop.clone());
    forward::<UpdateRun>(c, "updateruns", tx.clone(), stop.clone());
    forward::<ApprovalRequest>(c, "approvalrequests", tx.clone(), stop.clone());
    forward::<AutoUpdatePolicy>(c, "autoupdatepolicies", tx, stop.clone());
    // Dropping the stream (the page went away) cancels the watches.
    let guard: DropGuard = stop.drop_guard();
    let stream = futures::stream::unfold((rx, guard), |(mut rx, guard)| async move {
        let first = rx.recv().await?;
        tokio::time::sleep(COALESCE).await;
        let mut kinds = vec![first];
        while let Ok(k) = rx.try_recv() {
            if !kinds.contains(&k) {
                kinds.push(k);
            }
        }
        // Member heartbeats only concern the Fleet page, so they are told apart.
        let members = kinds.contains(&"memberclusters");
        let kind = match (members, kinds.len()) {
            (true, 1) => "memberclusters",
            (true, _) => "all",
            (false, 1) => first,
            (false, _) => "rollouts",
        };
        Some((Ok(Event::default().data(kind)), (rx, guard)))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
