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
