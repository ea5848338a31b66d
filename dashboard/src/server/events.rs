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
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::session::Session;

/// Changes that arrive this close together are sent as one event.
const COALESCE: Duration = Duration::from_millis(40);

/// Sends `kind` on `tx` whenever an object of kind `K` changes, until `stop`: a metadata watch
/// from the present, with the user's token. No object is listed: the page already shows what
/// there is, and a feed that listed every object of seven kinds at each page open (10,000
/// MemberClusters and Bindings are tens of megabytes, read from etcd) loaded the hub's API
/// server with each browser tab. Whenever the watch starts or starts again from the present
/// (at first, after an error, after its resource version expired), `kind` is sent too: a change
/// may have come in between.
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
        let feed = async {
            // The page went away when the channel is closed: the feed ends.
            // The resource version to watch from; none: from the present.
            let mut version: Option<String> = None;
            let mut failures = 0;
            loop {
                if failures > 0 {
                    tokio::time::sleep(fleethub_runtime::WATCH_BACKOFF.delay(failures)).await;
                }
                let from = match version.take() {
                    Some(v) => v,
                    None => match present(&api).await {
                        Ok(v) => {
                            if tx.send(kind).await.is_err() {
                                return;
                            }
                            v
                        }
                        Err(e) => {
                            tracing::debug!(kind, error = %e, "change feed cannot read the present resource version; retrying");
                            failures += 1;
                            continue;
                        }
                    },
                };
                // Bookmarks are on by default: they keep the version to resume from current.
                let params =
                    WatchParams::default().timeout(fleethub_runtime::WATCH_TIMEOUT_SECONDS);
                let mut events = match api.watch_metadata(&params, &from).await {
                    Ok(events) => events.boxed(),
                    Err(e) => {
                        tracing::debug!(kind, error = %e, "change feed watch failed; retrying");
                        version = (!is_gone(&e)).then_some(from);
                        failures += 1;
                        continue;
                    }
                };
                version = Some(from);
                failures = 0;
                while let Some(event) = events.next().await {
                    match event {
                        Ok(
                            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o),
                        ) => {
                            version = o.metadata.resource_version.or(version);
                            if tx.send(kind).await.is_err() {
                                return;
                            }
                        }
                        Ok(WatchEvent::Bookmark(b)) => {
                            version = Some(b.metadata.resource_version);
                        }
                        Ok(WatchEvent::Error(e)) => {
                            // 410: the version is too old to resume from: start from the present.
                            if e.code == 410 {
                                version = None;
                            } else {
                                failures += 1;
                            }
                            break;
                        }
                        Err(e) => {
                            tracing::debug!(kind, error = %e, "change feed watch failed; retrying");
                            failures += 1;
                            break;
                        }
                    }
                }
            }
        };
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = feed => {}
        }
    });
}

/// The hub API server's present resource version, from a list of at most one object's
/// metadata.
async fn present<K>(api: &Api<K>) -> Result<String, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let list = api.list_metadata(&ListParams::default().limit(1)).await?;
    Ok(list.metadata.resource_version.unwrap_or_default())
}

fn is_gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 410)
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
