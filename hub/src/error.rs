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
    /// A reconcile did not finish within [`RECONCILE_TIMEOUT`]; it was abandoned and is retried.
    #[error("reconcile did not finish within {}s: abandoned, retrying", RECONCILE_TIMEOUT.as_secs())]
    Timeout,
}

/// The longest one reconcile may take. Every request already has a read timeout; this bounds
/// everything else a reconcile might wait on, so nothing can halt a controller silently: a
/// reconcile past it is dropped (releasing what it held), logged with its object, and retried.
pub const RECONCILE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// `reconcile`, abandoned with [`Error::Timeout`] after [`RECONCILE_TIMEOUT`].
pub(crate) async fn bounded<T>(
    reconcile: impl std::future::Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    tokio::time::timeout(RECONCILE_TIMEOUT, reconcile)
        .await
        .unwrap_or(Err(Error::Timeout))
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
            Error::Timeout => "timeout",
        }
    }
}

/// HTTP 404: deleting something already gone is done.
pub(crate) const GONE: u16 = 404;
/// HTTP 409: creating something that exists is done.
pub(crate) const EXISTS: u16 = 409;

/// `result` with an API error of HTTP status `code` taken as success, for idempotent writes
/// (e.g. [`GONE`] on delete, [`EXISTS`] on create).
pub(crate) fn ok_if<T>(result: Result<T, kube::Error>, code: u16) -> Result<(), Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == code => Ok(()),
        Err(e) => Err(e.into()),
    }
}
