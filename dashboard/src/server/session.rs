//! Server-side sessions: the browser holds only a random session id in an HttpOnly,
//! SameSite=Strict cookie; the user's token, name and CSRF token stay on the server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use subtle::ConstantTimeEq;

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
    /// What the hub's access reviews last said the person may do, and when (shared by the
    /// session's clones: one request's answer serves the next requests).
    permissions: Arc<Mutex<Option<(Instant, crate::model::Me)>>>,
    last_used: Instant,
}

/// How long the answer of the access reviews is reused: a change of the person's RBAC shows
/// in the buttons this much later at most (the hub still decides every request).
pub const PERMISSIONS_TTL: Duration = Duration::from_secs(15);

impl Session {
    /// What the access reviews said within [`PERMISSIONS_TTL`], if they were asked.
    pub fn permissions(&self) -> Option<crate::model::Me> {
        let cached = self.permissions.lock().unwrap_or_else(|p| p.into_inner());
        cached
            .as_ref()
            .filter(|(at, _)| at.elapsed() < PERMISSIONS_TTL)
            .map(|(_, me)| me.clone())
    }

    /// Keeps what the access reviews said, for [`Self::permissions`].
    pub fn remember_permissions(&self, me: crate::model::Me) {
        self.remember_permissions_at(Instant::now(), me);
    }

    fn remember_permissions_at(&self, at: Instant, me: crate::model::Me) {
        *self.permissions.lock().unwrap_or_else(|p| p.into_inner()) = Some((at, me));
    }
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
            permissions: Arc::default(),
            last_used: Instant::now(),
        };
        let mut map = self.lock();
        map.retain(|_, s| s.last_used.elapsed() < IDLE_TIMEOUT);
        map.insert(id.clone(), session);
        id
    }

    /// The session of the request's cookie, if it is valid.
    pub fn from_headers(&self, headers: &HeaderMap) -> Option<Session> {
        self.get(&CookieJar::from_headers(headers))
    }

    /// The session of the jar's session cookie, if it is valid.
    pub fn get(&self, jar: &CookieJar) -> Option<Session> {
        let id = session_id(jar)?;
        let mut map = self.lock();
        let s = map.get_mut(&id)?;
        if s.last_used.elapsed() >= IDLE_TIMEOUT {
            map.remove(&id);
            return None;
        }
        s.last_used = Instant::now();
        Some(s.clone())
    }

    /// Ends the session of the jar's session cookie.
    pub fn remove(&self, jar: &CookieJar) {
        if let Some(id) = session_id(jar) {
            self.lock().remove(&id);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        // A poisoned lock only means another request panicked mid-update of a plain map.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The session id in the request's cookies.
pub fn session_id(jar: &CookieJar) -> Option<String> {
    jar.get(COOKIE_NAME)
        .map(|c| c.value().to_string())
        .filter(|v| !v.is_empty())
}

/// The cookie of a new session: script-proof (HttpOnly), never sent by another site's page
/// (SameSite=Strict), and `Secure` when served over https.
pub fn session_cookie(id: String, secure: bool) -> Cookie<'static> {
    Cookie::build((COOKIE_NAME, id))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure)
        .build()
}

/// The session cookie with the attributes it was set with: handed to [`CookieJar::remove`],
/// which turns it into a cookie that deletes it.
pub fn session_cookie_to_remove() -> Cookie<'static> {
    Cookie::build((COOKIE_NAME, ""))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .build()
}

/// Constant-time comparison, so the CSRF check does not leak the token through timing.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use axum::http::header::COOKIE;

    use super::*;

    #[test]
    fn the_session_id_is_read_from_the_cookie_header() {
        let mut h = HeaderMap::new();
        h.insert(COOKIE, "a=b; fleethub_session=abc123; c=d".parse().unwrap());
        assert_eq!(
            session_id(&CookieJar::from_headers(&h)).as_deref(),
            Some("abc123")
        );
        h.insert(COOKIE, "fleethub_session=".parse().unwrap());
        assert_eq!(session_id(&CookieJar::from_headers(&h)), None);
    }

    #[test]
    fn cookies_are_http_only_and_same_site_strict() {
        let c = session_cookie("x".into(), false).to_string();
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.contains("Path=/"));
        assert!(!c.contains("Secure"));
        assert!(
            session_cookie("x".into(), true)
                .to_string()
                .contains("; Secure")
        );
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
        assert_eq!(random_hex(16).len(), 32);
    }

    #[tokio::test]
    async fn permissions_are_reused_by_the_sessions_requests_for_a_while() {
        let sessions = Sessions::default();
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let id = sessions.create("ann".into(), "token".into(), client);
        let jar = CookieJar::new().add(session_cookie(id, false));
        let first = sessions.get(&jar).unwrap();
        assert_eq!(first.permissions(), None, "nothing asked yet");
        let me = crate::model::Me {
            user: "ann".into(),
            can_approve: true,
            ..Default::default()
        };
        first.remember_permissions(me.clone());
        // The next request's copy of the session has them.
        let next = sessions.get(&jar).unwrap();
        assert_eq!(next.permissions(), Some(me.clone()));
        // Older than the TTL: asked again.
        let long_ago = Instant::now().checked_sub(PERMISSIONS_TTL).unwrap();
        next.remember_permissions_at(long_ago, me);
        assert_eq!(sessions.get(&jar).unwrap().permissions(), None);
    }
}
