//! The agent's one error type. Every message names the object it is about.

/// What can go wrong in the member agent.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The agent's MemberCluster is not on the hub. The agent waits for it; it never creates it.
    #[error(
        "MemberCluster {0} does not exist on the hub; create it there (the agent never creates its own MemberCluster)"
    )]
    MemberClusterMissing(String),
    /// A request to the hub failed.
    #[error("hub: {action}: {}", describe(.source))]
    Hub {
        /// What was being done, naming the object.
        action: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// A request to the member cluster failed.
    #[error("member cluster: {action}: {}", describe(.source))]
    Member {
        /// What was being done, naming the object.
        action: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// An object could not be turned into (or read from) JSON.
    #[error("{what}: {source}")]
    Json {
        /// The object.
        what: String,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
    /// A CustomResourceDefinition the agent installed did not become established.
    #[error("CustomResourceDefinition {name} is not established on the member: {why}")]
    CrdNotEstablished {
        /// The CRD.
        name: String,
        /// What happened.
        why: String,
    },
    /// Objects of manifests that left a Work could not be deleted (they are retried).
    #[error("Work {work}: cannot delete {failures}")]
    Prune {
        /// The Work, `namespace/name`.
        work: String,
        /// Each object and why.
        failures: String,
    },
}

impl Error {
    /// A hub error while doing `action`.
    pub fn hub(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let action = action.into();
        move |source| Self::Hub { action, source }
    }

    /// A member-cluster error while doing `action`.
    pub fn member(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let action = action.into();
        move |source| Self::Member { action, source }
    }

    /// A short, stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::MemberClusterMissing(_) => "member_cluster_missing",
            Self::Hub { .. } => "hub",
            Self::Member { .. } => "member",
            Self::Json { .. } => "json",
            Self::CrdNotEstablished { .. } => "crd_not_established",
            Self::Prune { .. } => "prune",
        }
    }
}

/// Whether `e` is the API server's 404.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Whether `e` is the API server's 403: the agent's identity may not do this.
pub fn is_forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403)
}

/// Whether `e` is the API server's 409: a write whose precondition (the version it was planned
/// from) no longer holds.
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// The API server's own message for API errors (e.g. `Deployment.apps "web" is invalid: …`),
/// else the client's description.
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        other => other.to_string(),
    }
}
