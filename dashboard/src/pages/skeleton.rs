//! The one skeleton every page is drawn in: a heading (with an optional state badge from the
//! data), an intro sentence, then the page's data as it loads — "Loading…", a failure as a
//! sentence with a way forward, a sentence when there is nothing to show, or the data itself.

use leptos::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::components::{Problem, badge, me_now};
use crate::model::{Me, State};

/// What a page says when its data holds nothing.
pub struct Empty<T> {
    /// Whether the data holds nothing to show.
    pub when: fn(&T) -> bool,
    /// The sentence shown instead.
    pub text: &'static str,
    /// The sentence's element id, for a page whose empty state is looked up.
    pub id: Option<&'static str>,
}

// By hand: derived impls would demand `T: Clone`, though only function pointers are held.
impl<T> Clone for Empty<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Empty<T> {}

/// The data one page loads, as the signed-in user.
pub type PageData<T> = Resource<Result<T, ServerFnError>>;

fn loading() -> impl IntoView {
    view! { <p class="muted">"Loading…"</p> }
}

/// A page: `heading`, `intro`, then `data` drawn by `render` (with the signed-in user, once
/// known, for the actions they may take).
#[component]
pub fn Page<T, R, V>(
    /// The page's heading.
    #[prop(into)]
    heading: Signal<String>,
    /// One sentence under the heading saying what the page shows.
    #[prop(optional)]
    intro: Option<&'static str>,
    /// A state badge after the heading, read from the data (e.g. a run's state).
    #[prop(optional)]
    state: Option<fn(&T) -> State>,
    /// The page's data.
    data: PageData<T>,
    /// What to say when the data holds nothing.
    #[prop(optional)]
    empty: Option<Empty<T>>,
    /// Draws the data.
    render: R,
) -> impl IntoView
where
    T: Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
    R: Fn(T, Option<Me>) -> V + Send + Sync + 'static,
    V: IntoView + 'static,
{
    let state = state.map(|state| {
        view! {
            " "
            <Transition fallback=|| ()>
                {move || {
                    data.get()
                        .and_then(Result::ok)
                        .map(|v| view! { <span class="page-state">{badge(&state(&v))}</span> })
                }}
            </Transition>
        }
    });
    view! {
        <h1>{move || heading.get()} {state}</h1>
        {intro.map(|text| view! { <p class="muted">{text}</p> })}
        <Transition fallback=loading>
            {move || {
                let me = me_now();
                data.get()
                    .map(|r| match r {
                        Err(e) => view! { <Problem error=e /> }.into_any(),
                        Ok(v) => match empty.filter(|e| (e.when)(&v)) {
                            Some(e) => view! { <p id=e.id>{e.text}</p> }.into_any(),
                            None => render(v, me).into_any(),
                        },
                    })
            }}
        </Transition>
    }
}
