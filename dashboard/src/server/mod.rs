//! The axum server: sign-in, sessions, CSRF, the Leptos pages, the actions and the change feed.

pub mod error;
pub mod events;
pub mod hub;
pub mod pages;
pub mod session;
pub mod views;

use axum::extract::{Form, FromRef, Path, Request, State};
use axum::http::header::LOCATION;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use axum_extra::extract::cookie::CookieJar;
use fleethub_crds::update_run::UpdateRunState;
use leptos::prelude::*;
use leptos_axum::{LeptosRoutes, generate_route_list};
use serde::Deserialize;

use crate::app::{App, shell};
use error::Error;
use hub::Hub;
use session::{Session, Sessions};

/// Everything a request handler needs.
#[derive(Clone)]
pub struct AppState {
    /// Leptos settings (where the client bundle is).
    pub leptos: LeptosOptions,
    /// Sessions of this process.
    pub sessions: Sessions,
    /// The hub.
    pub hub: Hub,
    /// Whether the dashboard is served over https (sets `Secure` on the cookie).
    pub secure_cookies: bool,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(s: &AppState) -> Self {
        s.leptos.clone()
    }
}

/// The whole HTTP interface.
pub fn router(state: AppState) -> Router {
    let routes = generate_route_list(App);
    let pkg = tower_http::services::ServeDir::new(format!(
        "{}/{}",
        state.leptos.site_root, state.leptos.site_pkg_dir
    ));
    let ctx = state.clone();
    Router::new()
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/events", get(events::events))
        .route("/runs", post(start_run))
        .route("/runs/{name}/stop", post(stop_run))
        .route("/runs/{name}/resume", post(resume_run))
        .route("/approvals/{name}/approve", post(approve))
        .route(
            "/placements/{placement}/clusters/{cluster}/render",
            get(render_page),
        )
        .route("/autoupdates/{name}/check", post(check_policy))
        .route("/autoupdates/{name}/reset", post(reset_policy))
        .route("/style.css", get(style))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .nest_service("/pkg", pkg)
        .leptos_routes_with_context(&state, routes, move || provide_context(ctx.clone()), {
            let options = state.leptos.clone();
            move || shell(options.clone())
        })
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            require_session,
        ))
        .layer(middleware::from_fn(security_headers))
        .layer(middleware::from_fn(timed))
        .with_state(state)
}

/// Paths anyone may fetch; server functions (`/api/…`) check the session themselves and
/// answer with a sentence, so a page open when a session ends explains itself.
fn is_public(path: &str) -> bool {
    matches!(
        path,
        "/login" | "/style.css" | "/healthz" | "/readyz" | "/favicon.ico"
    ) || path.starts_with("/pkg/")
        || path.starts_with("/api/")
}

/// Pages need a session: without one, GET goes to the sign-in page and anything else is
/// refused. The session is handed to handlers as an `Extension`.
async fn require_session(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    if is_public(&path) {
        return next.run(req).await;
    }
    match state.sessions.from_headers(req.headers()) {
        Some(s) => {
            req.extensions_mut().insert(s);
            next.run(req).await
        }
        None if req.method() == Method::GET || req.method() == Method::HEAD => {
            let next_path = req
                .uri()
                .path_and_query()
                .map(|p| p.as_str().to_string())
                .unwrap_or_else(|| "/".into());
            redirect(&format!("/login?next={}", pages::url_encode(&next_path)))
        }
        None => error_response(Error::NotSignedIn, None),
    }
}

/// Logs (at debug level) each request with the time to its response's head: for a server-side
/// rendered page, the time to its first byte.
async fn timed(req: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let res = next.run(req).await;
    tracing::debug!(
        %method,
        path,
        status = res.status().as_u16(),
        ms = started.elapsed().as_secs_f64() * 1e3,
        "served"
    );
    res
}

async fn security_headers(req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    res
}

fn redirect(to: &str) -> Response {
    let mut res = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        res.headers_mut().insert(LOCATION, v);
    }
    res
}

/// An error as a complete page with a sentence and a way forward (never JSON, never blank).
fn error_response(e: Error, user: Option<&str>) -> Response {
    let status = e.status();
    if status.is_server_error() {
        tracing::warn!(error = %e, "request failed");
    } else {
        tracing::info!(error = %e, status = status.as_u16(), "request refused");
    }
    let sign_in = matches!(e, Error::NotSignedIn | Error::TokenRejected);
    (status, pages::error_page(&e.to_string(), user, sign_in)).into_response()
}

async fn not_found(req: Request) -> Response {
    let user = req.extensions().get::<Session>().map(|s| s.user.clone());
    (
        StatusCode::NOT_FOUND,
        pages::error_page("There is no such page.", user.as_deref(), false),
    )
        .into_response()
}

async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../../style.css"),
    )
        .into_response()
}

#[derive(Deserialize)]
struct LoginQuery {
    next: Option<String>,
}

async fn login_page(axum::extract::Query(q): axum::extract::Query<LoginQuery>) -> Response {
    pages::login_page(None, q.next.as_deref().unwrap_or("/")).into_response()
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
    #[serde(default)]
    next: String,
}

/// Sign-in: the token is checked with a TokenReview; on success a server-side session holds it.
async fn login(
    State(state): State<AppState>,
    jar: CookieJar,
    Form(f): Form<LoginForm>,
) -> Response {
    let token = f.token.trim().to_string();
    let next = pages::safe_next(&f.next);
    let fail = |status: StatusCode, msg: String| {
        (status, pages::login_page(Some(&msg), &next)).into_response()
    };
    if token.is_empty() {
        return fail(
            StatusCode::BAD_REQUEST,
            "Paste a Kubernetes bearer token to sign in.".into(),
        );
    }
    let user = match state.hub.review(&token).await {
        Ok(u) => u,
        Err(e @ Error::BadInput(_)) => return fail(StatusCode::UNAUTHORIZED, e.to_string()),
        Err(e) => return fail(e.status(), e.to_string()),
    };
    let client = match state.hub.user_client(&token) {
        Ok(c) => c,
        Err(e) => return fail(e.status(), e.to_string()),
    };
    tracing::info!(user, "signed in");
    let id = state.sessions.create(user, token, client);
    let cookie = session::session_cookie(id, state.secure_cookies);
    (jar.add(cookie), redirect(&next)).into_response()
}

#[derive(Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

fn check_csrf(s: &Session, token: &str) -> Result<(), Error> {
    if session::same_secret(&s.csrf, token) {
        Ok(())
    } else {
        Err(Error::Csrf)
    }
}

async fn logout(
    State(state): State<AppState>,
    Extension(s): Extension<Session>,
    jar: CookieJar,
    Form(f): Form<CsrfForm>,
) -> Response {
    if let Err(e) = check_csrf(&s, &f.csrf) {
        return error_response(e, Some(&s.user));
    }
    state.sessions.remove(&jar);
    let jar = jar.remove(session::session_cookie_to_remove());
    (jar, redirect("/login")).into_response()
}

#[derive(Deserialize)]
struct ApproveForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    message: String,
}

/// Approves a stage gate as the signed-in user (the hub's RBAC decides).
async fn approve(
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
    Form(f): Form<ApproveForm>,
) -> Response {
    let result = async {
        check_csrf(&s, &f.csrf)?;
        let message: String = f.message.trim().chars().take(200).collect();
        hub::approve(&s.client, &s.user, &name, &message).await
    }
    .await;
    match result {
        Ok(ar) => {
            tracing::info!(user = s.user, approval = name, "approved");
            redirect(&format!("/runs/{}", ar.spec.parent_stage_rollout))
        }
        Err(e) => error_response(e, Some(&s.user)),
    }
}

async fn stop_run(
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
    Form(f): Form<CsrfForm>,
) -> Response {
    set_state(s, name, f, UpdateRunState::Stop).await
}

async fn resume_run(
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
    Form(f): Form<CsrfForm>,
) -> Response {
    set_state(s, name, f, UpdateRunState::Run).await
}

async fn set_state(s: Session, name: String, f: CsrfForm, state: UpdateRunState) -> Response {
    let result = async {
        check_csrf(&s, &f.csrf)?;
        hub::set_run_state(&s.client, &name, state).await
    }
    .await;
    match result {
        Ok(()) => redirect(&format!("/runs/{name}")),
        Err(e) => error_response(e, Some(&s.user)),
    }
}

async fn check_policy(
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
    Form(f): Form<CsrfForm>,
) -> Response {
    request_policy(s, name, f, hub::PolicyRequest::Check).await
}

async fn reset_policy(
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
    Form(f): Form<CsrfForm>,
) -> Response {
    request_policy(s, name, f, hub::PolicyRequest::Reset).await
}

/// Asks a policy for a check or a reset as the signed-in user; the hub acts on it, and the
/// Auto-updates page shows the outcome as it happens.
async fn request_policy(
    s: Session,
    name: String,
    f: CsrfForm,
    what: hub::PolicyRequest,
) -> Response {
    let result = async {
        check_csrf(&s, &f.csrf)?;
        hub::request_policy(&s.client, &name, what).await
    }
    .await;
    match result {
        Ok(()) => {
            tracing::info!(user = s.user, policy = name, request = ?what, "asked an auto-update policy");
            redirect(&format!("/autoupdates#policy-{name}"))
        }
        Err(e) => error_response(e, Some(&s.user)),
    }
}

#[derive(Deserialize)]
struct RenderQuery {
    snapshot: Option<i64>,
}

/// What one cluster gets from a placement, read with the signed-in user's token and rendered
/// by the code `kubectl fleet render` and the hub's work generator use.
async fn render_page(
    Extension(s): Extension<Session>,
    Path((placement, cluster)): Path<(String, String)>,
    axum::extract::Query(q): axum::extract::Query<RenderQuery>,
) -> Response {
    use fleethub_crds::render::{self, RenderError};
    match render::load(&s.client, &placement, &cluster, q.snapshot).await {
        Ok(inputs) => pages::render_page(&render::render(&inputs), &s.user).into_response(),
        Err(e) => {
            let e = match e {
                RenderError::NotFound(m) => Error::Missing(m),
                RenderError::Invalid(m) => Error::BadInput(m),
                RenderError::Api { doing, source } => Error::from_kube(source, &doing, &doing),
            };
            error_response(e, Some(&s.user))
        }
    }
}

#[derive(Deserialize)]
struct StartRunForm {
    #[serde(default)]
    csrf: String,
    placement: String,
    index: String,
    strategy: String,
}

/// Starts a run (also the one-click rollback, which posts an older index).
async fn start_run(Extension(s): Extension<Session>, Form(f): Form<StartRunForm>) -> Response {
    let result = async {
        check_csrf(&s, &f.csrf)?;
        let index: i64 = f.index.trim().parse().map_err(|_| {
            Error::BadInput(format!("Snapshot index {:?} is not a number.", f.index))
        })?;
        hub::create_run(&s.client, &s.user, &f.placement, index, &f.strategy).await
    }
    .await;
    match result {
        Ok(name) => {
            tracing::info!(user = s.user, run = name, "started a run");
            redirect(&format!("/runs/{name}"))
        }
        Err(e) => error_response(e, Some(&s.user)),
    }
}

#[cfg(test)]
mod tests;
