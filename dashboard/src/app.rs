//! The app: the HTML document, the navigation and the routes. The pages themselves are in
//! [`crate::pages`], each drawn in the one skeleton of [`crate::pages::skeleton`].
//!
//! Pages are rendered on the server (complete HTML, no JavaScript needed) and hydrated in the
//! browser, where they refetch their data (as the signed-in user, through the server functions
//! of [`crate::api`]) whenever the hub reports a change. Every state-changing action is a plain
//! HTML form posting to an axum handler with the session's CSRF token, so it works the same
//! with and without JavaScript.

use leptos::prelude::*;
use leptos_router::components::{A, Route, Router, Routes};
use leptos_router::{SsrMode, path};

use crate::api::get_me;
use crate::live::Live;
use crate::pages::{
    approvals::ApprovalsPage, auto_updates::AutoUpdatesPage, confirm_approval::ConfirmApprovalPage,
    fleet::FleetPage, placements::PlacementsPage, run::RunPage, runs::RunsPage,
};

/// The HTML document around the app.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <title>"fleethub dashboard"</title>
                <link rel="stylesheet" href="/style.css" />
                <HydrationScripts options />
            </head>
            <body>
                <App />
            </body>
        </html>
    }
}

/// The app: navigation and routes.
#[component]
pub fn App() -> impl IntoView {
    let live = Live::new();
    provide_context(live);
    let me = Resource::new(|| (), |_| get_me());
    provide_context(me);
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| live.connect());

    view! {
        <Router>
            <header class="top">
                <a class="brand" href="/">
                    "fleethub"
                </a>
                <nav aria-label="Main">
                    <A href="/">"Fleet"</A>
                    <A href="/placements">"Placements"</A>
                    <A href="/runs">"Runs"</A>
                    <A href="/approvals">"Approvals"</A>
                    <A href="/autoupdates">"Auto-updates"</A>
                </nav>
                <span
                    class="live"
                    data-live={move || if live.connected.get() { "on" } else { "off" }}
                    title="Whether changes on the hub appear here as they happen"
                >
                    {move || if live.connected.get() { "● live" } else { "○ not live" }}
                </span>
                <Transition fallback=|| ()>
                    {move || {
                        me.get()
                            .and_then(Result::ok)
                            .map(|me| {
                                view! {
                                    <form class="user" method="post" action="/logout">
                                        <span>"Signed in as " <b>{me.user.clone()}</b></span>
                                        <input type="hidden" name="csrf" value=me.csrf.clone() />
                                        <button type="submit" class="link">
                                            "Sign out"
                                        </button>
                                    </form>
                                }
                            })
                    }}
                </Transition>
            </header>
            <main>
                <Routes fallback=|| view! { <p class="error">"There is no such page."</p> }>
                    <Route path=path!("/") view=FleetPage ssr=SsrMode::Async />
                    <Route path=path!("/placements") view=PlacementsPage ssr=SsrMode::Async />
                    <Route path=path!("/runs") view=RunsPage ssr=SsrMode::Async />
                    <Route path=path!("/runs/:name") view=RunPage ssr=SsrMode::Async />
                    <Route path=path!("/approvals") view=ApprovalsPage ssr=SsrMode::Async />
                    <Route path=path!("/autoupdates") view=AutoUpdatesPage ssr=SsrMode::Async />
                    <Route
                        path=path!("/approvals/:name/approve")
                        view=ConfirmApprovalPage
                        ssr=SsrMode::Async
                    />
                </Routes>
            </main>
        </Router>
    }
}
