//! The pages: Leptos components rendered on the server (complete HTML, no JavaScript needed)
//! and hydrated in the browser, where they refetch their data (as the signed-in user, through
//! server functions) whenever the hub reports a change.
//!
//! Every state-changing action is a plain HTML form posting to an axum handler with the
//! session's CSRF token, so it works the same with and without JavaScript.

use leptos::prelude::*;
use leptos_router::components::{A, Route, Router, Routes};
use leptos_router::hooks::use_params_map;
use leptos_router::{SsrMode, path};

use crate::model::*;

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
    fn new() -> Self {
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
    fn connect(self) {
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

fn live() -> Live {
    expect_context::<Live>()
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

// ---------------------------------------------------------------------------------------------
// server functions: run on the server with the session's own token

#[cfg(feature = "ssr")]
async fn session() -> Result<crate::server::session::Session, ServerFnError> {
    // Missing only outside a request (e.g. while the route list is generated).
    let state = use_context::<crate::server::AppState>()
        .ok_or_else(|| server_error("no request context"))?;
    let headers: axum::http::HeaderMap = leptos_axum::extract()
        .await
        .map_err(|e| server_error(e.to_string()))?;
    state
        .sessions
        .from_headers(&headers)
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
// Each server function has a fixed endpoint (`/api/<name>`). Leptos would otherwise suffix a
// hash of the crate's directory at build time, so a client built in one checkout and a server
// built in another (or an image built elsewhere) would miss each other with a 404.
#[server(endpoint = "get_me")]
pub async fn get_me() -> Result<Me, ServerFnError> {
    let s = session().await?;
    Ok(crate::server::hub::me(&s.client, &s.user, &s.csrf).await)
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
pub async fn get_run(name: String) -> Result<RunView, ServerFnError> {
    let s = session().await?;
    crate::server::hub::run(&s.client, &name)
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
    Ok(ApprovalRow {
        name,
        run: ar.spec.parent_stage_rollout.clone(),
        stage: ar.spec.target_stage.clone(),
        created: ar
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second()),
        approved_by,
    })
}

// ---------------------------------------------------------------------------------------------
// building blocks

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
fn Problem(error: ServerFnError) -> impl IntoView {
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
fn badge(s: &State) -> impl IntoView + use<> {
    view! {
        <span class=s.tone.class() title=s.message.clone()>
            {s.label.clone()}
        </span>
    }
}

fn loading() -> impl IntoView {
    view! { <p class="muted">"Loading…"</p> }
}

fn me_now() -> Option<Me> {
    expect_context::<Resource<Result<Me, ServerFnError>>>()
        .get()
        .and_then(Result::ok)
}

fn ago(t: Option<i64>) -> impl IntoView {
    let live = live();
    view! { <span title=clock(t)>{move || age(t, live.now.get())}</span> }
}

// ---------------------------------------------------------------------------------------------
// Fleet

#[component]
fn FleetPage() -> impl IntoView {
    let live = live();
    let data = Resource::new(move || live.members.get(), |_| get_fleet());
    view! {
        <h1>"Fleet"</h1>
        <p class="muted">"Every member cluster of the hub, with its labels and health."</p>
        <Transition fallback=loading>
            {move || {
                data.get()
                    .map(|r| match r {
                        Err(e) => view! { <Problem error=e /> }.into_any(),
                        Ok(v) if v.members.is_empty() => {
                            view! { <p>"No member clusters have joined this hub yet."</p> }
                                .into_any()
                        }
                        Ok(v) => fleet_table(v).into_any(),
                    })
            }}
        </Transition>
    }
}

fn fleet_table(v: FleetView) -> impl IntoView {
    view! {
        <table id="fleet">
            <thead>
                <tr>
                    <th>"Cluster"</th>
                    <th>"Labels"</th>
                    <th>"Joined"</th>
                    <th>"Health"</th>
                    <th>"Last heartbeat"</th>
                    <th>"Kubernetes"</th>
                    <th class="num">"Nodes"</th>
                    <th>"Agent"</th>
                </tr>
            </thead>
            <tbody>
                {v
                    .members
                    .into_iter()
                    .map(|m| {
                        view! {
                            <tr data-cluster=m.name.clone()>
                                <td class="name">
                                    <b>{m.name.clone()}</b>
                                </td>
                                <td class="labels">
                                    {m
                                        .labels
                                        .iter()
                                        .map(|l| view! { <code class="label">{l.clone()}</code> " " })
                                        .collect_view()}
                                </td>
                                <td>{badge(&m.joined)}</td>
                                <td>{badge(&m.healthy)}</td>
                                <td>{ago(m.last_heartbeat)}</td>
                                <td>{m.kubernetes_version.clone()}</td>
                                <td class="num">
                                    {m.node_count.map(|n| n.to_string()).unwrap_or_else(|| "—".into())}
                                </td>
                                <td>{m.agent_version.clone()}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
}

// ---------------------------------------------------------------------------------------------
// Placements

#[component]
fn PlacementsPage() -> impl IntoView {
    let live = live();
    let data = Resource::new(move || live.rollouts.get(), |_| get_placements());
    view! {
        <h1>"Placements"</h1>
        <p class="muted">
            "What goes where: the clusters each placement selected, its snapshots, and which snapshot each cluster runs."
        </p>
        <Transition fallback=loading>
            {move || {
                let me = me_now();
                data.get()
                    .map(|r| match r {
                        Err(e) => view! { <Problem error=e /> }.into_any(),
                        Ok(v) if v.placements.is_empty() => {
                            view! { <p>"There are no placements on this hub."</p> }.into_any()
                        }
                        Ok(v) => {
                            let strategies = v.strategies.clone();
                            v.placements
                                .into_iter()
                                .map(|p| placement_section(p, &strategies, me.clone()))
                                .collect_view()
                                .into_any()
                        }
                    })
            }}
        </Transition>
    }
}

fn placement_section(
    p: PlacementRow,
    strategies: &[String],
    me: Option<Me>,
) -> impl IntoView + use<> {
    let default_strategy = p
        .last_strategy
        .clone()
        .or_else(|| strategies.first().cloned())
        .unwrap_or_default();
    // Runs drive External placements only (the hub refuses others).
    let external = p.strategy_type == "External";
    let start_form = me
        .filter(|m| m.can_create_runs && external && !strategies.is_empty())
        .map(|me| {
        let options = |selected: &str| {
            strategies
                .iter()
                .map(|s| {
                    view! {
                        <option value=s.clone() selected={s == selected}>
                            {s.clone()}
                        </option>
                    }
                })
                .collect_view()
        };
        let rollback = p.rollback_index.map(|idx| {
            view! {
                <form class="inline" method="post" action="/runs">
                    <input type="hidden" name="csrf" value=me.csrf.clone() />
                    <input type="hidden" name="placement" value=p.name.clone() />
                    <input type="hidden" name="index" value=idx.to_string() />
                    <input type="hidden" name="strategy" value=default_strategy.clone() />
                    <button type="submit" class="button warn">
                        {format!("Roll back to snapshot {idx}")}
                    </button>
                </form>
            }
        });
        view! {
            <div class="actions">
                <form class="inline" method="post" action="/runs">
                    <input type="hidden" name="csrf" value=me.csrf.clone() />
                    <input type="hidden" name="placement" value=p.name.clone() />
                    <label>
                        "Snapshot "
                        <select name="index">
                            {p
                                .snapshots
                                .iter()
                                .map(|s| {
                                    view! {
                                        <option value=s.index.to_string()>{s.index.to_string()}</option>
                                    }
                                })
                                .collect_view()}
                        </select>
                    </label>
                    <label>"Strategy " <select name="strategy">{options(&default_strategy)}</select></label>
                    <button type="submit" class="button primary">
                        "Start run"
                    </button>
                </form>
                {rollback}
            </div>
        }
    });
    view! {
        <section class="card" data-placement=p.name.clone()>
            <h2>
                {p.name.clone()} " "
                <span class="muted small">
                    {format!(
                        "{} · latest snapshot {}",
                        p.strategy_type,
                        p.latest_index.map(|i| i.to_string()).unwrap_or_else(|| "—".into()),
                    )}
                </span>
            </h2>
            {start_form}
            <div class="cols">
                <div>
                    <h3>"Selected clusters"</h3>
                    <table>
                        <thead>
                            <tr>
                                <th>"Cluster"</th>
                                <th class="num">"Should run"</th>
                                <th class="num">"Runs"</th>
                                <th>"Applied"</th>
                                <th>"Available"</th>
                            </tr>
                        </thead>
                        <tbody>
                            {p
                                .clusters
                                .iter()
                                .map(|c| {
                                    let idx = |i: Option<i64>| {
                                        i.map(|i| i.to_string()).unwrap_or_else(|| "—".into())
                                    };
                                    view! {
                                        <tr>
                                            <td>{c.cluster.clone()}</td>
                                            <td class="num">{idx(c.target_index)}</td>
                                            <td class="num">{idx(c.applied_index)}</td>
                                            <td>{badge(&c.applied)}</td>
                                            <td>{badge(&c.available)}</td>
                                        </tr>
                                    }
                                })
                                .collect_view()}
                        </tbody>
                    </table>
                </div>
                <div>
                    <h3>"Snapshots"</h3>
                    <table>
                        <thead>
                            <tr>
                                <th class="num">"Index"</th>
                                <th>"Created"</th>
                                <th class="num">"Objects"</th>
                            </tr>
                        </thead>
                        <tbody>
                            {p
                                .snapshots
                                .iter()
                                .map(|s| {
                                    view! {
                                        <tr>
                                            <td class="num">{s.index.to_string()}</td>
                                            <td>{clock(s.created)} " (" {ago(s.created)} ")"</td>
                                            <td class="num">{s.object_count.to_string()}</td>
                                        </tr>
                                    }
                                })
                                .collect_view()}
                        </tbody>
                    </table>
                </div>
            </div>
        </section>
    }
}

// ---------------------------------------------------------------------------------------------
// Runs

#[component]
fn RunsPage() -> impl IntoView {
    let live = live();
    let data = Resource::new(move || live.rollouts.get(), |_| get_runs());
    view! {
        <h1>"Runs"</h1>
        <p class="muted">"Staged update runs, newest first. Start one from the Placements page."</p>
        <Transition fallback=loading>
            {move || {
                data.get()
                    .map(|r| match r {
                        Err(e) => view! { <Problem error=e /> }.into_any(),
                        Ok(v) if v.runs.is_empty() => {
                            view! { <p>"No update runs yet."</p> }.into_any()
                        }
                        Ok(v) => {
                            view! {
                                <table id="runs">
                                    <thead>
                                        <tr>
                                            <th>"Run"</th>
                                            <th>"State"</th>
                                            <th>"Placement"</th>
                                            <th class="num">"Snapshot"</th>
                                            <th>"Strategy"</th>
                                            <th>"Stage"</th>
                                            <th>"Progress"</th>
                                            <th>"Created"</th>
                                        </tr>
                                    </thead>
                                    <tbody>
                                        {v
                                            .runs
                                            .into_iter()
                                            .map(|r| {
                                                view! {
                                                    <tr data-run=r.name.clone()>
                                                        <td>
                                                            <a href=format!("/runs/{}", r.name)>{r.name.clone()}</a>
                                                        </td>
                                                        <td>{badge(&r.state)}</td>
                                                        <td>{r.placement.clone()}</td>
                                                        <td class="num">{r.index.clone()}</td>
                                                        <td>{r.strategy.clone()}</td>
                                                        <td>{r.current_stage.clone()}</td>
                                                        <td>{progress(r.done, r.total)}</td>
                                                        <td>{ago(r.created)}</td>
                                                    </tr>
                                                }
                                            })
                                            .collect_view()}
                                    </tbody>
                                </table>
                            }
                                .into_any()
                        }
                    })
            }}
        </Transition>
    }
}

fn progress(done: usize, total: usize) -> impl IntoView {
    view! {
        <span class="progress">
            <progress max={total.max(1).to_string()} value={done.to_string()}></progress>
            " "
            {format!("{done} of {total} clusters")}
        </span>
    }
}

#[component]
fn RunPage() -> impl IntoView {
    let live = live();
    let params = use_params_map();
    let name = move || params.read().get("name").unwrap_or_default();
    let data = Resource::new(move || (name(), live.rollouts.get()), |(n, _)| get_run(n));
    view! {
        <Transition fallback=loading>
            {move || {
                let me = me_now();
                data.get()
                    .map(|r| match r {
                        Err(e) => {
                            view! {
                                <h1>{format!("Run {}", name())}</h1>
                                <Problem error=e />
                            }
                                .into_any()
                        }
                        Ok(v) => run_view(v, me).into_any(),
                    })
            }}
        </Transition>
    }
}

fn run_view(v: RunView, me: Option<Me>) -> impl IntoView {
    let name = v.row.name.clone();
    let actions = me
        .clone()
        .filter(|m| m.can_update_runs && !v.finished)
        .map(|me| {
            let (path, label, class) = if v.stopped {
                ("resume", "Resume run", "button primary")
            } else {
                ("stop", "Stop run", "button warn")
            };
            view! {
                <form class="inline" method="post" action=format!("/runs/{name}/{path}")>
                    <input type="hidden" name="csrf" value=me.csrf.clone() />
                    <button type="submit" class=class>
                        {label}
                    </button>
                </form>
            }
        });
    let can_approve = me.as_ref().is_some_and(|m| m.can_approve);
    view! {
        <h1>
            {format!("Run {name} ")}
            <span id="run-state">{badge(&v.row.state)}</span>
        </h1>
        <p class="summary">
            {format!(
                "Rolls placement {} out to snapshot {} with strategy {}. ",
                v.row.placement,
                v.row.index,
                v.row.strategy,
            )} "Started " {clock(v.started)}
            {v.ended.map(|e| format!(", ended {}", clock(Some(e))))} ". "
            {(!v.row.state.message.is_empty()).then(|| v.row.state.message.clone())}
        </p>
        <div class="actions">{progress(v.row.done, v.row.total)} {actions}</div>
        {(!v.problems.is_empty())
            .then(|| {
                view! {
                    <div class="error" role="alert">
                        <p>
                            <b>"This run needs attention:"</b>
                        </p>
                        <ul>{v.problems.iter().map(|p| view! { <li>{p.clone()}</li> }).collect_view()}</ul>
                    </div>
                }
            })}
        <ol class="stages">
            {v
                .stages
                .into_iter()
                .map(|s| stage_view(s, can_approve))
                .collect_view()}
        </ol>
    }
}

fn stage_view(s: StageView, can_approve: bool) -> impl IntoView {
    view! {
        <li class="stage card" data-stage=s.name.clone()>
            <h2>
                {s.name.clone()} " " {badge(&s.state)} " "
                <span class="muted small">
                    {format!(
                        "started {} · clusters done {} · ended {}",
                        clock(s.started),
                        clock(s.clusters_completed),
                        clock(s.ended),
                    )}
                </span>
            </h2>
            <table>
                <thead>
                    <tr>
                        <th class="num">"#"</th>
                        <th>"Cluster"</th>
                        <th>"State"</th>
                        <th>"Started"</th>
                        <th>"Finished"</th>
                        <th>"Details"</th>
                    </tr>
                </thead>
                <tbody>
                    {s
                        .clusters
                        .iter()
                        .enumerate()
                        .map(|(i, c)| {
                            view! {
                                <tr data-cluster=c.name.clone()>
                                    <td class="num">{(i + 1).to_string()}</td>
                                    <td>{c.name.clone()}</td>
                                    <td>{badge(&c.state)}</td>
                                    <td>{clock(c.started)}</td>
                                    <td>{clock(c.ended)}</td>
                                    <td class="detail">{c.state.message.clone()}</td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
            {(!s.before_tasks.is_empty())
                .then(|| {
                    view! {
                        <ul class="tasks before">
                            <li class="caption">"Before the clusters start:"</li>
                            {s
                                .before_tasks
                                .into_iter()
                                .map(|t| task_view(t, can_approve))
                                .collect_view()}
                        </ul>
                    }
                })}
            {(!s.tasks.is_empty())
                .then(|| {
                    view! {
                        <ul class="tasks">
                            {s.tasks.into_iter().map(|t| task_view(t, can_approve)).collect_view()}
                        </ul>
                    }
                })}
        </li>
    }
}

fn task_view(t: TaskView, can_approve: bool) -> impl IntoView {
    let live = live();
    match t {
        TaskView::TimedWait {
            wait,
            until,
            elapsed,
        } => {
            let status = move || {
                if elapsed {
                    until
                        .map(|u| format!("ended {}", clock(Some(u))))
                        .unwrap_or_default()
                } else {
                    match until {
                        Some(u) => countdown(u, live.now.get()),
                        None => "starts when the stage's clusters are done".into(),
                    }
                }
            };
            view! {
                <li class="task" data-task="TimedWait">
                    <b>"Wait " {wait}</b>
                    " — "
                    <span class={if elapsed { "badge good" } else { "badge wait" }}>
                        {if elapsed { "Elapsed" } else { "Waiting" }}
                    </span>
                    " "
                    <span class="countdown">{status}</span>
                </li>
            }
            .into_any()
        }
        TaskView::Approval {
            request,
            approved,
            approved_by,
            note,
            approved_at,
            accepted,
            pending,
        } => {
            let state = match (approved, pending) {
                (true, _) => view! {
                    <span class="badge good">"Approved"</span>
                    " "
                    <span class="approved-by">
                        {approved_by.map(|who| format!("by {who} "))}
                        {format!("at {}", clock(approved_at))}
                        {(!accepted).then_some(" (the run has not picked it up yet)")}
                    </span>
                    {note.map(|n| view! { " " <q class="note">{n}</q> })}
                }
                .into_any(),
                (false, true) => {
                    view! { <span class="badge wait">"Waiting for approval"</span> }.into_any()
                }
                (false, false) if accepted => {
                    view! { <span class="badge good">"Approved"</span> }.into_any()
                }
                (false, false) => view! {
                    <span class="badge idle">"Not reached yet"</span>
                }
                .into_any(),
            };
            let button = request.filter(|_| pending && can_approve).map(|r| {
                view! {
                    <a class="button primary" href=format!("/approvals/{r}/approve")>
                        "Approve…"
                    </a>
                }
            });
            view! {
                <li class="task" data-task="Approval">
                    <b>"Approval"</b>
                    " — "
                    {state}
                    " "
                    {button}
                </li>
            }
            .into_any()
        }
        TaskView::MetricCheck {
            url,
            query,
            passes,
            threshold,
            last,
            next_check,
            reached,
            passed,
            message,
        } => {
            let state = match (passed, reached) {
                (true, _) => view! { <span class="badge good">"Passed"</span> }.into_any(),
                (false, true) => view! { <span class="badge wait">"Checking"</span> }.into_any(),
                (false, false) => {
                    view! { <span class="badge idle">"Not reached yet"</span> }.into_any()
                }
            };
            let last = last.map(|(value, ok)| {
                view! {
                    " last: "
                    <span class={if ok { "badge good" } else { "badge bad" }}>{value}</span>
                }
            });
            let next = next_check.filter(|_| !passed).map(|n| {
                view! { " next check " <span class="countdown">{move || countdown(n, live.now.get())}</span> }
            });
            view! {
                <li class="task" data-task="MetricCheck" title=message>
                    <b>"Metric check"</b>
                    " — "
                    {state}
                    " "
                    <span class="passes">{format!("{passes}/{threshold} passes")}</span>
                    {last}
                    {next}
                    <div class="detail"><code class="query">{query}</code> " at " {url}</div>
                </li>
            }
            .into_any()
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Approvals

#[component]
fn ApprovalsPage() -> impl IntoView {
    let live = live();
    let data = Resource::new(move || live.rollouts.get(), |_| get_approvals());
    view! {
        <h1>"Approvals"</h1>
        <p class="muted">"Stage gates waiting for a person, across all runs, oldest first."</p>
        <Transition fallback=loading>
            {move || {
                let can_approve = me_now().is_some_and(|m| m.can_approve);
                data.get()
                    .map(|r| match r {
                        Err(e) => view! { <Problem error=e /> }.into_any(),
                        Ok(v) if v.pending.is_empty() => {
                            view! { <p id="no-approvals">"Nothing is waiting for approval."</p> }
                                .into_any()
                        }
                        Ok(v) => {
                            view! {
                                <table id="approvals">
                                    <thead>
                                        <tr>
                                            <th>"Run"</th>
                                            <th>"Stage"</th>
                                            <th>"Waiting since"</th>
                                            <th>"Request"</th>
                                            <th></th>
                                        </tr>
                                    </thead>
                                    <tbody>
                                        {v
                                            .pending
                                            .into_iter()
                                            .map(|a| {
                                                view! {
                                                    <tr data-approval=a.name.clone()>
                                                        <td>
                                                            <a href=format!("/runs/{}", a.run)>{a.run.clone()}</a>
                                                        </td>
                                                        <td>{a.stage.clone()}</td>
                                                        <td>{ago(a.created)}</td>
                                                        <td>
                                                            <code>{a.name.clone()}</code>
                                                        </td>
                                                        <td>
                                                            {can_approve
                                                                .then(|| {
                                                                    view! {
                                                                        <a
                                                                            class="button primary"
                                                                            href=format!("/approvals/{}/approve", a.name)
                                                                        >
                                                                            "Approve…"
                                                                        </a>
                                                                    }
                                                                })}
                                                        </td>
                                                    </tr>
                                                }
                                            })
                                            .collect_view()}
                                    </tbody>
                                </table>
                            }
                                .into_any()
                        }
                    })
            }}
        </Transition>
    }
}

#[component]
fn ConfirmApprovalPage() -> impl IntoView {
    let params = use_params_map();
    let name = move || params.read().get("name").unwrap_or_default();
    let data = Resource::new(name, get_approval);
    view! {
        <h1>"Approve a stage"</h1>
        <Transition fallback=loading>
            {move || {
                let me = me_now();
                data.get()
                    .map(|r| match r {
                        Err(e) => view! { <Problem error=e /> }.into_any(),
                        Ok(a) => confirm_view(a, me).into_any(),
                    })
            }}
        </Transition>
    }
}

fn confirm_view(a: ApprovalRow, me: Option<Me>) -> impl IntoView {
    let back = format!("/runs/{}", a.run);
    if let Some(by) = a.approved_by {
        return view! {
            <div class="card">
                <p>{format!("Stage {} of run {} is already approved ({by}).", a.stage, a.run)}</p>
                <a class="button" href=back>"Back to the run"</a>
            </div>
        }
        .into_any();
    }
    let Some(me) = me.filter(|m| m.can_approve) else {
        return view! {
            <div class="error" role="alert">
                <p>
                    {format!(
                        "You are not allowed to approve stage {} of run {}: the hub's RBAC does not let your identity change approval requests. Ask a fleet admin.",
                        a.stage,
                        a.run,
                    )}
                </p>
                <a class="button" href=back>"Back to the run"</a>
            </div>
        }
        .into_any();
    };
    view! {
        <form class="card confirm" method="post" action=format!("/approvals/{}/approve", a.name)>
            <p>
                "Approve stage " <b>{a.stage.clone()}</b> " of run " <b>{a.run.clone()}</b>
                "? The run then continues with its next stage. This is recorded on the hub as approved by "
                <b>{me.user.clone()}</b> "."
            </p>
            <input type="hidden" name="csrf" value=me.csrf.clone() />
            <label>
                "Note (optional) " <input type="text" name="message" maxlength="200" size="40" />
            </label>
            <div class="actions">
                <button type="submit" class="button primary" id="confirm-approve">
                    {format!("Approve stage {}", a.stage)}
                </button>
                <a class="button" href=back>"Cancel"</a>
            </div>
        </form>
    }
    .into_any()
}
