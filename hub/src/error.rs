//! The hub's errors.

/// Everything a hub reconciler can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// An object the hub needs is malformed in a way admission could not catch.
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    /// A write lost an optimistic-concurrency race (HTTP 409): retry soon.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(e)) if e.code == 409)
    }

    /// A short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(e)) if e.code == 409 => "conflict",
            Error::Kube(_) => "kube",
            Error::Invalid(_) => "invalid",
        }
    }
}
