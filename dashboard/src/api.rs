//! The server functions the pages load their data with. They run on the server with the
//! session's own token (so the hub's RBAC decides what each person sees) and answer a failure
//! with a sentence for the page.
//!
//! Each has a fixed endpoint (`/api/<name>`). Leptos would otherwise suffix a hash of the
//! crate's directory at build time, so a client built in one checkout and a server built in
//! another (or an image built elsewhere) would miss each other with a 404.

use leptos::prelude::*;

use crate::model::*;

/// The request's session, or the sentence telling the person to sign in.
#[cfg(feature = "ssr")]
async fn session() -> Result<crate::server::session::Session, ServerFnError> {
    // Missing only outside a request (e.g. while the route list is generated).
    let state = use_context::<crate::server::AppState>()
        .ok_or_else(|| server_error("no request context"))?;
    let cookies: axum_extra::extract::cookie::CookieJar = leptos_axum::extract()
        .await
        .map_err(|e| server_error(e.to_string()))?;
    state
        .sessions
        .get(&cookies)
        .ok_or_else(|| server_error(crate::server::error::Error::NotSignedIn.to_string()))
}

/// A server function error whose message is a sentence for the page.
#[cfg(feature = "ssr")]
fn server_error(message: impl Into<String>) -> ServerFnError {
    ServerFnError::ServerError(message.into())
}

#[cfg(feature = "ssr")]
fn sentence(e: crate::server::error::Error) -> ServerFnError {
    server_error(e.to_string())
}

/// The signed-in user and what they may do.
#[server(endpoint = "get_me")]
pub async fn get_me() -> Result<Me, ServerFnError> {
    let s = session().await?;
    if let Some(me) = s.permissions() {
        return Ok(me);
    }
    let (me, answered) = crate::server::hub::me(&s.client, &s.user, &s.csrf).await;
    // A review that failed hides its action: asked again on the next request, not reused.
    if answered {
        s.remember_permissions(me.clone());
    }
    Ok(me)
}

/// The Fleet page's data.
#[server(endpoint = "get_fleet")]
pub async fn get_fleet() -> Result<FleetView, ServerFnError> {
    let s = session().await?;
    crate::server::hub::fleet(&s.client).await.map_err(sentence)
}

/// The Placements page's data.
#[server(endpoint = "get_placements")]
pub async fn get_placements() -> Result<PlacementsView, ServerFnError> {
    let s = session().await?;
    crate::server::hub::placements(&s.client)
        .await
        .map_err(sentence)
}

/// The Runs page's data.
#[server(endpoint = "get_runs")]
pub async fn get_runs() -> Result<RunsView, ServerFnError> {
    let s = session().await?;
    crate::server::hub::runs(&s.client).await.map_err(sentence)
}

/// One run's page data.
#[server(endpoint = "get_run")]
pub async fn get_run(name: String, query: RunQuery) -> Result<RunView, ServerFnError> {
    let s = session().await?;
    crate::server::hub::run(&s.client, &name, &query)
        .await
        .map_err(sentence)
}

/// The Auto-updates page's data.
#[server(endpoint = "get_auto_updates")]
pub async fn get_auto_updates() -> Result<AutoUpdatesView, ServerFnError> {
    let s = session().await?;
    crate::server::hub::auto_updates(&s.client)
        .await
        .map_err(sentence)
}

/// The Approvals page's data.
#[server(endpoint = "get_approvals")]
pub async fn get_approvals() -> Result<ApprovalsView, ServerFnError> {
    let s = session().await?;
    crate::server::hub::approvals(&s.client)
        .await
        .map_err(sentence)
}

/// One ApprovalRequest (for the confirmation page).
#[server(endpoint = "get_approval")]
pub async fn get_approval(name: String) -> Result<ApprovalRow, ServerFnError> {
    use fleethub_crds::conditions::{TRUE, find};
    let s = session().await?;
    let ar = crate::server::hub::approval(&s.client, &name)
        .await
        .map_err(sentence)?;
    let approved_by = ar
        .status
        .as_ref()
        .and_then(|st| find(&st.conditions, fleethub_crds::approval::APPROVED))
        .filter(|c| c.status == TRUE)
        .map(|c| c.message.clone());
    Ok(crate::server::views::approval_row(&ar, approved_by))
}
