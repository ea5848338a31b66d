//! Server-side sessions: the browser holds only a random session id in an HttpOnly,
//! SameSite=Strict cookie; the user's token, name and CSRF token stay on the server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::http::header::COOKIE;

/// The session cookie's name.
pub const COOKIE_NAME: &str = "fleethub_session";
/// How long a session lives without use.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(8 * 3600);

/// One signed-in person.
#[derive(Clone)]
pub struct Session {
    /// User name from the TokenReview.
    pub user: String,
    /// The person's own bearer token: every hub call is made with it.
    pub token: String,
    /// The token every state-changing form must carry.
    pub csrf: String,
    /// A hub client authenticated with `token`.
    pub client: kube::Client,
    last_used: Instant,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token.
        f.debug_struct("Session").field("user", &self.user).finish()
    }
}

/// All sessions of this dashboard process.
#[derive(Clone, Default)]
pub struct Sessions {
    inner: Arc<Mutex<HashMap<String, Session>>>,
}

/// `len` random bytes, hex-encoded.
pub fn random_hex(len: usize) -> String {
    let mut bytes = vec![0u8; len];
    // The OS random source failing is not recoverable; an all-zero id would be guessable, so
    // refuse to continue.
    #[allow(clippy::expect_used)]
    getrandom::fill(&mut bytes).expect("the operating system's random source failed");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Sessions {
    /// Creates a session and returns its id.
    pub fn create(&self, user: String, token: String, client: kube::Client) -> String {
        let id = random_hex(32);
        let session = Session {
            user,
            token,
            csrf: random_hex(32),
            client,
            last_used: Instant::now(),
        };
        let mut map = self.lock();
        map.retain(|_, s| s.last_used.elapsed() < IDLE_TIMEOUT);
        map.insert(id.clone(), session);
        id
    }

    /// The session of the request's cookie, if it is valid.
    pub fn from_headers(&self, headers: &HeaderMap) -> Option<Session> {
        let id = session_id(headers)?;
        let mut map = self.lock();
        let s = map.get_mut(&id)?;
        if s.last_used.elapsed() >= IDLE_TIMEOUT {
            map.remove(&id);
            return None;
        }
        s.last_used = Instant::now();
        Some(s.clone())
    }

    /// Ends the request's session.
    pub fn remove(&self, headers: &HeaderMap) {
        if let Some(id) = session_id(headers) {
            self.lock().remove(&id);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        // A poisoned lock only means another request panicked mid-update of a plain map.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The session id in the request's `Cookie` header(s).
pub fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE_NAME)
        .map(|(_, v)| v.to_string())
        .filter(|v| !v.is_empty())
}

/// The `Set-Cookie` value for a new session (`secure` when served over https).
pub fn set_cookie(id: &str, secure: bool) -> String {
    format!(
        "{COOKIE_NAME}={id}; Path=/; HttpOnly; SameSite=Strict{}",
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that deletes the session cookie.
pub fn clear_cookie() -> String {
    format!("{COOKIE_NAME}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

/// Constant-time comparison, so the CSRF check does not leak the token through timing.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_id_is_read_from_the_cookie_header() {
        let mut h = HeaderMap::new();
        h.insert(COOKIE, "a=b; fleethub_session=abc123; c=d".parse().unwrap());
        assert_eq!(session_id(&h).as_deref(), Some("abc123"));
        h.insert(COOKIE, "fleethub_session=".parse().unwrap());
        assert_eq!(session_id(&h), None);
    }

    #[test]
    fn cookies_are_http_only_and_same_site_strict() {
        let c = set_cookie("x", false);
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict"));
        assert!(set_cookie("x", true).ends_with("; Secure"));
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
        assert_eq!(random_hex(16).len(), 32);
    }
}
