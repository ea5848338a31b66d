//! Live updates shared by every page: the browser's connection to the change feed (`/events`)
//! and a clock ticking every second, as signals the pages' data and ages depend on.

use leptos::prelude::*;

use crate::model::now_unix;

/// Live-update state shared by all pages.
#[derive(Clone, Copy)]
pub struct Live {
    /// Bumped when member clusters change (heartbeats: only the Fleet page cares).
    pub members: RwSignal<u64>,
    /// Bumped when anything else of fleethub's changes on the hub.
    pub rollouts: RwSignal<u64>,
    /// Now, unix seconds, ticking every second in the browser (for ages and countdowns).
    pub now: RwSignal<i64>,
    /// Whether the browser is connected to the change feed.
    pub connected: RwSignal<bool>,
}

impl Live {
    /// Fresh state: nothing seen yet, not connected.
    pub fn new() -> Self {
        Self {
            members: RwSignal::new(0),
            rollouts: RwSignal::new(0),
            now: RwSignal::new(now_unix()),
            connected: RwSignal::new(false),
        }
    }

    /// In the browser: subscribe to `/events` (server-sent events fed by hub watches made as
    /// the user) and tick the clock.
    #[cfg(feature = "hydrate")]
    pub fn connect(self) {
        use wasm_bindgen::JsCast;
        use wasm_bindgen::closure::Closure;

        set_interval(
            move || self.now.set(now_unix()),
            std::time::Duration::from_secs(1),
        );
        let Ok(es) = web_sys::EventSource::new("/events") else {
            return;
        };
        let on_message =
            Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
                let kind = e.data().as_string().unwrap_or_default();
                if kind == "memberclusters" || kind == "all" {
                    self.members.update(|v| *v += 1);
                }
                if kind != "memberclusters" {
                    self.rollouts.update(|v| *v += 1);
                }
            });
        let on_open = Closure::<dyn FnMut()>::new(move || self.connected.set(true));
        let on_error = Closure::<dyn FnMut()>::new(move || self.connected.set(false));
        es.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        es.set_onopen(Some(on_open.as_ref().unchecked_ref()));
        es.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        // The feed lives as long as the page.
        on_message.forget();
        on_open.forget();
        on_error.forget();
        std::mem::forget(es);
    }
}

impl Default for Live {
    fn default() -> Self {
        Self::new()
    }
}

/// The live state the app provided.
pub fn live() -> Live {
    expect_context::<Live>()
}
