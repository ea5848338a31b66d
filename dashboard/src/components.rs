//! Small pieces every page draws with: state badges, ages, progress bars, and a failure as a
//! sentence with a way forward.

use leptos::prelude::*;

use crate::live::live;
use crate::model::{Me, OverridesView, State, age, clock};

/// The text of a failed load: the server's sentence, or what the person can do about it.
fn error_text(e: &ServerFnError) -> String {
    match e {
        ServerFnError::ServerError(m) => m.clone(),
        // The server answered with something that is not this page's data: most likely the
        // dashboard was upgraded since the page was opened.
        ServerFnError::Deserialization(_) => {
            "The dashboard's server has changed since this page was opened (probably an upgrade). Reload the page.".into()
        }
        other => format!("The dashboard could not load this page: {other}. Reload to try again."),
    }
}

/// A failure, as a sentence, with a way forward.
#[component]
pub fn Problem(error: ServerFnError) -> impl IntoView {
    let text = error_text(&error);
    let sign_in = text.contains("Sign in again");
    view! {
        <div class="error" role="alert">
            <p>{text}</p>
            {sign_in.then(|| view! { <p><a class="button" href="/login">"Sign in"</a></p> })}
        </div>
    }
}

/// A coloured badge that always carries its label (colour is never the only signal).
pub fn badge(s: &State) -> impl IntoView + use<> {
    view! {
        <span class=s.tone.class() title=s.message.clone()>
            {s.label.clone()}
        </span>
    }
}

/// Which overrides change what a cluster gets: a badge, the snapshots' names, and a link to
/// the page showing exactly what it gets (a server page, so the link leaves the app's router).
pub fn overrides(o: &OverridesView) -> impl IntoView + use<> {
    let names = (!o.snapshots.is_empty()).then(|| format!(" {}", o.snapshots.join(", ")));
    view! {
        <span class="overrides" data-overrides=o.state.label.clone()>
            {badge(&o.state)}
            {names}
            " "
            <a href=o.render.clone() rel="external">
                "what it gets"
            </a>
        </span>
    }
}

/// The signed-in user, once known (`None` while loading or signed out).
pub fn me_now() -> Option<Me> {
    expect_context::<Resource<Result<Me, ServerFnError>>>()
        .get()
        .and_then(Result::ok)
}

/// How long ago `t` was, kept current by the live clock; the exact time on hover.
pub fn ago(t: Option<i64>) -> impl IntoView {
    let live = live();
    view! { <span title=clock(t)>{move || age(t, live.now.get())}</span> }
}

/// A run's progress: a bar and "n of m clusters".
pub fn progress(done: usize, total: usize) -> impl IntoView {
    view! {
        <span class="progress">
            <progress max={total.max(1).to_string()} value={done.to_string()}></progress>
            " "
            {format!("{done} of {total} clusters")}
        </span>
    }
}

/// A missing number as a dash.
pub fn number_or_dash(n: Option<impl ToString>) -> String {
    n.map(|n| n.to_string()).unwrap_or_else(|| "—".into())
}
