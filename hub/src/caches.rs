//! The caches the hub's controllers share: MemberClusters, Bindings and Works are each listed
//! and watched once, and every controller that follows them gets its own stream of their events
//! (filtered as it needs) over the one store. Each kind's objects are kept once, trimmed to what
//! the controllers reading them need.

use fleethub_crds::{Binding, MemberCluster, Work};
use fleethub_runtime::shared::{SharedWatch, Subscription};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

/// The shared watches; subscribe every controller before [`SharedCaches::spawn`].
pub struct SharedCaches {
    /// Every MemberCluster, without managed fields.
    pub members: SharedWatch<MemberCluster>,
    /// Every Binding, without managed fields.
    pub bindings: SharedWatch<Binding>,
    /// Every Work without its manifests, keeping who writes its spec (the work generator reads
    /// that; the run controller reads the status).
    pub works: SharedWatch<Work>,
}

impl SharedCaches {
    /// The watches of the hub `client` talks to; nothing is listed until they are spawned.
    pub fn new(client: &Client) -> Self {
        SharedCaches {
            members: SharedWatch::new(
                Api::all(client.clone()),
                fleethub_runtime::strip_managed_fields::<MemberCluster>,
            ),
            bindings: SharedWatch::new(
                Api::all(client.clone()),
                fleethub_runtime::strip_managed_fields::<Binding>,
            ),
            works: SharedWatch::new(Api::all(client.clone()), crate::work_generator::slim_work),
        }
    }

    /// A controller's shares of all three (every share is read: an unread one would queue every
    /// event).
    pub fn subscribe_all(&mut self) -> Shared {
        Shared {
            members: self.members.subscribe(),
            bindings: self.bindings.subscribe(),
            works: self.works.subscribe(),
        }
    }

    /// Runs every watch on a task of its own until `stop`.
    pub fn spawn(self, stop: &CancellationToken) -> Vec<tokio::task::JoinHandle<()>> {
        vec![
            tokio::spawn(self.members.run(stop.clone())),
            tokio::spawn(self.bindings.run(stop.clone())),
            tokio::spawn(self.works.run(stop.clone())),
        ]
    }
}

/// A controller's shares of the members, Bindings and Works.
pub struct Shared {
    /// The MemberClusters.
    pub members: Subscription<MemberCluster>,
    /// The Bindings.
    pub bindings: Subscription<Binding>,
    /// The Works.
    pub works: Subscription<Work>,
}
