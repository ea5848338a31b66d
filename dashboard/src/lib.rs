//! The fleethub dashboard: a Leptos app rendered on the server (`ssr`, axum) and hydrated in the
//! browser (`hydrate`, wasm32). Every hub read and write is made with the signed-in user's own
//! Kubernetes token, so the dashboard never holds more privilege than its user.

mod api;
pub mod app;
mod components;
mod live;
pub mod model;
mod pages;
#[cfg(feature = "ssr")]
pub mod server;

/// The browser entry point: hydrates the server-rendered page.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(app::App);
}
