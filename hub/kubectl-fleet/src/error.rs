//! The plugin's errors: each says what failed, on which object, and what to do next.

/// Everything `kubectl fleet` can fail with. Every variant leads to exit code 1.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A kubeconfig could not be read or used.
    #[error("kubeconfig {path}: {why}")]
    Kubeconfig {
        /// The file (or `$KUBECONFIG`).
        path: String,
        /// What went wrong.
        why: String,
    },
    /// An object the command needs does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The command would not do what was asked, and says why.
    #[error("{0}")]
    Refused(String),
    /// Invalid input.
    #[error("{0}")]
    Invalid(String),
    /// A bounded wait ran out.
    #[error("{0}")]
    Timeout(String),
    /// An API call failed.
    #[error("{doing}: {}", describe(source))]
    Api {
        /// What the call was for, naming the object.
        doing: String,
        /// The client's error.
        source: kube::Error,
    },
    /// A local file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

impl Error {
    /// A closure turning a `kube::Error` into [`Error::Api`] with `doing` as context.
    pub fn api(doing: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let doing = doing.into();
        move |source| Error::Api { doing, source }
    }
}

/// The API server's own message for its errors (without the status object's dump), the
/// client's description for anything else.
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.message.is_empty() => format!("{} ({})", s.message, s.reason),
        other => other.to_string(),
    }
}

/// Whether `e` is the API server's 404.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Whether `e` is the API server's 409: the object changed since it was read.
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
