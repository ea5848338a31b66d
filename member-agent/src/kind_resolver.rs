//! Which resource serves a kind on the member cluster, and whether it is namespaced: the member's
//! discovery, cached. A kind the member does not serve is looked up again every time, because a
//! CustomResourceDefinition applied a moment ago may start serving it.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use kube::Client;
use kube::api::{ApiResource, GroupVersionKind};
use kube::discovery::{self, Scope};

use crate::Error;
use crate::error::is_not_found;

/// How a kind is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedKind {
    /// The resource (group, version, plural).
    pub resource: ApiResource,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
}

/// Discovery of the member cluster's kinds, cached per group/version/kind.
pub struct KindResolver {
    client: Client,
    cache: Mutex<HashMap<GroupVersionKind, ResolvedKind>>,
}

impl KindResolver {
    /// A resolver asking the API server behind `client`.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// How `gvk` is served, or `None` when the member does not serve it.
    pub async fn resolve(&self, gvk: &GroupVersionKind) -> Result<Option<ResolvedKind>, Error> {
        if let Some(hit) = self.lock().get(gvk) {
            return Ok(Some(hit.clone()));
        }
        match discovery::pinned_kind(&self.client, gvk).await {
            Ok((resource, caps)) => {
                let resolved = ResolvedKind {
                    resource,
                    namespaced: caps.scope == Scope::Namespaced,
                };
                self.lock().insert(gvk.clone(), resolved.clone());
                Ok(Some(resolved))
            }
            Err(kube::Error::Discovery(_)) => Ok(None),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(Error::member(format!(
                "discovering kind {} of {}",
                gvk.kind,
                gvk.api_version()
            ))(e)),
        }
    }

    /// Drops what is known about `gvk` (e.g. after the API server said its resource is gone).
    pub fn forget(&self, gvk: &GroupVersionKind) {
        self.lock().remove(gvk);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<GroupVersionKind, ResolvedKind>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
