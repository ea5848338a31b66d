//! The router, driven with `oneshot` against a hub that does not answer: sign-in, sessions,
//! CSRF, and that every failure is a page with a sentence (never JSON, never blank).

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use tower::ServiceExt;

use super::*;

/// Leptos keeps process-wide rendering state; each `#[tokio::test]` has a runtime of its own,
/// and rendering on several of them at once sometimes never finishes. The router tests take
/// turns (the server itself runs one runtime).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A hub address nothing listens on.
const NOWHERE: &str = "https://127.0.0.1:9";

fn state() -> AppState {
    AppState {
        leptos: LeptosOptions::builder()
            .output_name("fleethub-dashboard")
            .site_root("target/site")
            .build(),
        sessions: Sessions::default(),
        hub: Hub::unreachable_for_tests(NOWHERE).unwrap(),
        secure_cookies: false,
    }
}

/// A signed-in session (as if a TokenReview had said "alice"); returns (cookie, csrf).
fn sign_in(state: &AppState) -> (String, String) {
    let client = state.hub.user_client("token-of-alice").unwrap();
    let id = state
        .sessions
        .create("alice".into(), "token-of-alice".into(), client);
    let mut h = axum::http::HeaderMap::new();
    h.insert(
        header::COOKIE,
        format!("fleethub_session={id}").parse().unwrap(),
    );
    let csrf = state.sessions.from_headers(&h).unwrap().csrf;
    (format!("fleethub_session={id}"), csrf)
}

async fn send(state: &AppState, req: Request<Body>) -> (StatusCode, axum::http::HeaderMap, String) {
    let res = router(state.clone()).oneshot(req).await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

fn post(uri: &str, cookie: Option<&str>, body: &str) -> Request<Body> {
    let mut b =
        Request::post(uri).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(c) = cookie {
        b = b.header(header::COOKIE, c);
    }
    b.body(Body::from(body.to_string())).unwrap()
}

fn assert_is_a_page_with(body: &str, sentence: &str) {
    assert!(
        body.starts_with("<!DOCTYPE html>"),
        "not an HTML page: {body}"
    );
    assert!(body.contains(sentence), "{sentence:?} not in {body}");
    assert!(!body.trim_start().starts_with('{'), "raw JSON: {body}");
}

#[tokio::test]
async fn without_a_session_pages_redirect_to_sign_in_and_posts_are_refused() {
    let _turn = SERIAL.lock().await;
    let st = state();
    let (status, headers, _) =
        send(&st, Request::get("/runs/r1").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers[header::LOCATION], "/login?next=/runs/r1");

    let (status, _, body) = send(&st, post("/approvals/r1-canary/approve", None, "csrf=x")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_is_a_page_with(&body, "not signed in");

    // A cookie of a session that does not exist (e.g. after a restart) is no session.
    let (status, _, _) = send(
        &st,
        Request::get("/")
            .header(header::COOKIE, "fleethub_session=forged")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);

    let (status, headers, body) =
        send(&st, Request::get("/login").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert_is_a_page_with(&body, "Bearer token");
    assert_eq!(headers["x-frame-options"], "DENY");
}

#[tokio::test]
async fn sign_in_failures_are_explained() {
    let _turn = SERIAL.lock().await;
    let st = state();
    let (status, headers, body) = send(&st, post("/login", None, "token=&next=%2F")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(headers.get(header::SET_COOKIE).is_none());
    assert_is_a_page_with(&body, "Paste a Kubernetes bearer token");

    // The hub cannot review the token: say so, set no cookie.
    let (status, headers, body) = send(&st, post("/login", None, "token=abc&next=%2F")).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert!(headers.get(header::SET_COOKIE).is_none());
    assert_is_a_page_with(&body, "could not check your token");
}

#[tokio::test]
async fn state_changing_requests_need_the_sessions_csrf_token() {
    let _turn = SERIAL.lock().await;
    let st = state();
    let (cookie, csrf) = sign_in(&st);
    for (uri, body) in [
        ("/approvals/r1-canary/approve", "message=hi".to_string()),
        ("/approvals/r1-canary/approve", "csrf=wrong".to_string()),
        ("/runs/r1/stop", String::new()),
        ("/runs/r1/resume", "csrf=".to_string()),
        ("/runs", "placement=web&index=1&strategy=s".to_string()),
        ("/autoupdates/web/reset", String::new()),
        ("/autoupdates/web/check", "csrf=wrong".to_string()),
        ("/logout", String::new()),
    ] {
        let (status, _, page) = send(&st, post(uri, Some(&cookie), &body)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{uri} {body}");
        assert_is_a_page_with(&page, "security token is missing or wrong");
    }
    // The session survived the refused logout; a real one ends it.
    let (status, headers, _) =
        send(&st, post("/logout", Some(&cookie), &format!("csrf={csrf}"))).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(
        headers[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let removal = headers[header::SET_COOKIE].to_str().unwrap();
    assert!(
        removal.starts_with("fleethub_session=;") && removal.contains("Path=/"),
        "{removal}"
    );
    let (status, _, _) = send(
        &st,
        Request::get("/")
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn hub_failures_are_sentences_on_pages_and_actions() {
    let _turn = SERIAL.lock().await;
    let st = state();
    let (cookie, csrf) = sign_in(&st);
    // An action with a valid token reaches for the hub, which does not answer.
    let (status, _, body) = send(
        &st,
        post(
            "/approvals/r1-canary/approve",
            Some(&cookie),
            &format!("csrf={csrf}"),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_is_a_page_with(
        &body,
        "could not approve r1-canary, because the hub API server did not answer",
    );
    let (status, _, body) = send(
        &st,
        post(
            "/runs",
            Some(&cookie),
            &format!("csrf={csrf}&placement=web&index=x&strategy=s"),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_is_a_page_with(&body, "Snapshot index &quot;x&quot; is not a number.");
    let (status, _, body) = send(
        &st,
        post(
            "/autoupdates/web/reset",
            Some(&cookie),
            &format!("csrf={csrf}"),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_is_a_page_with(
        &body,
        "could not reset the circuit of web, because the hub API server did not answer",
    );

    // A Leptos page renders the sentence in place of the data.
    let (status, _, body) = send(
        &st,
        Request::get("/runs/r1")
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_is_a_page_with(
        &body,
        "could not load the run, because the hub API server did not answer",
    );
    assert!(body.contains("role=\"alert\""), "{body}");
}

#[tokio::test]
async fn server_functions_answer_at_fixed_endpoints() {
    let _turn = SERIAL.lock().await;
    let st = state();
    let (cookie, _) = sign_in(&st);
    for f in [
        "get_me",
        "get_fleet",
        "get_placements",
        "get_runs",
        "get_approvals",
        "get_auto_updates",
    ] {
        let req = Request::post(format!("/api/{f}"))
            .header(header::COOKIE, &cookie)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::empty())
            .unwrap();
        let (status, _, body) = send(&st, req).await;
        assert_ne!(status, StatusCode::NOT_FOUND, "/api/{f}: {body}");
    }
}

#[tokio::test]
async fn every_page_is_drawn_in_the_skeleton_heading_intro_and_the_problem() {
    let _turn = SERIAL.lock().await;
    let st = state();
    let (cookie, _) = sign_in(&st);
    for (path, heading, intro) in [
        ("/", "Fleet", Some("Every member cluster of the hub")),
        ("/placements", "Placements", Some("What goes where")),
        ("/runs", "Runs", Some("Staged update runs, newest first")),
        ("/runs/r1", "Run r1", None),
        (
            "/approvals",
            "Approvals",
            Some("Stage gates waiting for a person"),
        ),
        ("/approvals/r1-canary/approve", "Approve a stage", None),
        (
            "/autoupdates",
            "Auto-updates",
            Some("Workloads that follow their registry"),
        ),
    ] {
        let (status, _, body) = send(
            &st,
            Request::get(path)
                .header(header::COOKIE, &cookie)
                .body(Body::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{path}");
        let h1 = body.find("<h1>").map(|i| &body[i..]).unwrap_or_default();
        assert!(h1.starts_with(&format!("<h1>{heading}")), "{path}: {body}");
        if let Some(intro) = intro {
            assert!(body.contains(intro), "{path}: {body}");
        }
        // The hub does not answer: the data's place holds the sentence, not "Loading…".
        assert!(
            body.contains("the hub API server did not answer"),
            "{path}: {body}"
        );
        assert!(body.contains("role=\"alert\""), "{path}: {body}");
        assert!(!body.contains("Loading…"), "{path}: {body}");
    }
}
