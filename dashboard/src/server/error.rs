//! Errors, each turned into a sentence a person can act on (never raw JSON) and an HTTP status.

use axum::http::StatusCode;

/// What went wrong while serving a request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No (valid) session: the person must sign in.
    #[error("You are not signed in, or your session has ended. Sign in again.")]
    NotSignedIn,
    /// A state-changing request without the session's CSRF token.
    #[error(
        "This request was refused because it did not come from a dashboard page (its security token is missing or wrong). Reload the page and try again."
    )]
    Csrf,
    /// The input of a form was invalid.
    #[error("{0}")]
    BadInput(String),
    /// The hub did not accept the user's token.
    #[error(
        "The hub did not accept your token: it has expired or been revoked. Sign in again with a current token."
    )]
    TokenRejected,
    /// The hub's RBAC refused the action.
    #[error("You are not allowed to {action}. The hub said: {message}")]
    Forbidden {
        /// What the user tried, e.g. "approve stage canary of run r1".
        action: String,
        /// The hub's message.
        message: String,
    },
    /// The object does not exist.
    #[error("{what} does not exist on the hub (it may have been deleted).")]
    NotFound {
        /// e.g. "UpdateRun r1".
        what: String,
    },
    /// Something a page needs does not exist; the sentence names it.
    #[error("{0}")]
    Missing(String),
    /// The hub refused the change (validation, conflict).
    #[error("The hub refused to {action}: {message}")]
    Refused {
        /// What the user tried.
        action: String,
        /// The hub's message.
        message: String,
    },
    /// The hub could not be reached or answered strangely.
    #[error(
        "The dashboard could not {action}, because the hub API server did not answer properly ({detail}). Check that the hub is running, then reload."
    )]
    Unavailable {
        /// What the dashboard tried.
        action: String,
        /// The transport error.
        detail: String,
    },
}

impl Error {
    /// The error of hub call `action` (e.g. "list member clusters") that failed with `e`;
    /// `what` names the object for a 404.
    pub fn from_kube(e: kube::Error, action: &str, what: &str) -> Self {
        match e {
            kube::Error::Api(status) => match status.code {
                401 => Error::TokenRejected,
                403 => Error::Forbidden {
                    action: action.to_string(),
                    message: status.message,
                },
                404 => Error::NotFound {
                    what: what.to_string(),
                },
                400 | 409 | 422 => Error::Refused {
                    action: action.to_string(),
                    message: status.message,
                },
                _ => Error::Unavailable {
                    action: action.to_string(),
                    detail: format!("{} {}", status.code, status.message),
                },
            },
            other => Error::Unavailable {
                action: action.to_string(),
                detail: other.to_string(),
            },
        }
    }

    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            Error::NotSignedIn | Error::TokenRejected => StatusCode::UNAUTHORIZED,
            Error::Csrf | Error::Forbidden { .. } => StatusCode::FORBIDDEN,
            Error::BadInput(_) => StatusCode::BAD_REQUEST,
            Error::NotFound { .. } | Error::Missing(_) => StatusCode::NOT_FOUND,
            Error::Refused { .. } => StatusCode::CONFLICT,
            Error::Unavailable { .. } => StatusCode::BAD_GATEWAY,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(message, "Forbidden")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn hub_errors_become_sentences_with_the_right_status() {
        let e = Error::from_kube(api(403, "cannot patch"), "approve stage canary", "x");
        assert_eq!(e.status(), StatusCode::FORBIDDEN);
        assert_eq!(
            e.to_string(),
            "You are not allowed to approve stage canary. The hub said: cannot patch"
        );
        let e = Error::from_kube(api(401, "Unauthorized"), "list runs", "x");
        assert_eq!(e.status(), StatusCode::UNAUTHORIZED);
        assert!(e.to_string().contains("expired or been revoked"));
        let e = Error::from_kube(api(404, "not found"), "load the run", "UpdateRun r9");
        assert_eq!(
            e.to_string(),
            "UpdateRun r9 does not exist on the hub (it may have been deleted)."
        );
    }
}
