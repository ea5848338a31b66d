//! One run's page: its summary, the actions the signed-in user may take (stop, resume), what
//! needs attention, and every stage with its clusters and gates.

mod tasks;

use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};

use super::skeleton::Page;
use crate::api::get_run;
use crate::components::{badge, overrides, progress};
use crate::live::live;
use crate::model::{Me, RUN_PAGE_ROWS, RunQuery, RunView, StageView, clock};

/// `/runs/:name`: one run.
#[component]
pub fn RunPage() -> impl IntoView {
    let live = live();
    let params = use_params_map();
    let query = use_query_map();
    let name = move || params.read().get("name").unwrap_or_default();
    // `?q=` finds clusters by name; `?stage=&page=` pages one stage's clusters.
    let run_query = move || {
        let q = query.read();
        RunQuery {
            search: q.get("q").unwrap_or_default().trim().to_string(),
            stage: q.get("stage").unwrap_or_default(),
            page: q.get("page").and_then(|p| p.parse().ok()).unwrap_or(0),
        }
    };
    let data = Resource::new(
        move || (name(), run_query(), live.rollouts.get()),
        |(n, q, _)| get_run(n, q),
    );
    view! {
        <Page
            heading=Signal::derive(move || format!("Run {}", name()))
            state=|v: &RunView| v.row.state.clone()
            data
            render=run_view
        />
    }
}

fn run_view(v: RunView, me: Option<Me>) -> impl IntoView {
    let name = v.row.name.clone();
    let actions = me
        .clone()
        .filter(|m| m.can_update_runs && !v.finished)
        .map(|me| {
            let (path, label, class) = if v.planned {
                ("resume", "Start run", "button primary")
            } else if v.stopped {
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
        {v.notice.clone().map(|n| view! { <p class="notice" role="status">{n}</p> })}
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
        <form class="search" method="get" action=format!("/runs/{}", v.row.name)>
            <input
                type="search"
                name="q"
                value=v.query.search.clone()
                placeholder="Find clusters by name"
                aria-label="Find clusters by name"
            />
            " "
            <button type="submit" class="button">
                "Find"
            </button>
            {(!v.query.search.is_empty())
                .then(|| {
                    view! {
                        " "
                        <a href=format!("/runs/{}", v.row.name)>"Show all"</a>
                    }
                })}
        </form>
        <ol class="stages">
            {v
                .stages
                .into_iter()
                .map(|s| stage_view(s, &v.row.name, &v.query, can_approve))
                .collect_view()}
        </ol>
    }
}

fn stage_view(s: StageView, run: &str, query: &RunQuery, can_approve: bool) -> AnyView {
    let clusters = clusters(&s, run, query);
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
            {(!s.before_tasks.is_empty())
                .then(|| {
                    view! {
                        <ul class="tasks before">
                            <li class="caption">"Before its clusters start:"</li>
                            {s
                                .before_tasks
                                .into_iter()
                                .map(|t| tasks::task_view(t, can_approve))
                                .collect_view()}
                        </ul>
                    }
                })}
            {clusters}
            {(!s.tasks.is_empty())
                .then(|| {
                    view! {
                        <ul class="tasks">
                            {s
                                .tasks
                                .into_iter()
                                .map(|t| tasks::task_view(t, can_approve))
                                .collect_view()}
                        </ul>
                    }
                })}
        </li>
    }
    .into_any()
}

/// A stage's clusters: its counts, collapsed for a large stage not in progress, and the page of
/// its clusters the query asks for.
fn clusters(s: &StageView, run: &str, query: &RunQuery) -> AnyView {
    view! {
            <details class="clusters" open=s.open>
            <summary>
                {s.counts.sentence()}
                {(!query.search.is_empty())
                    .then(|| format!(" ({} matching \"{}\")", s.matching, query.search))}
            </summary>
            <table>
                <thead>
                    <tr>
                        <th class="num">"#"</th>
                        <th>"Cluster"</th>
                        <th>"State"</th>
                        <th>"Started"</th>
                        <th>"Finished"</th>
                        <th>"Details"</th>
                        <th>"Overrides"</th>
                    </tr>
                </thead>
                <tbody>
                    {s
                        .clusters
                        .iter()
                        .map(|c| {
                            view! {
                                <tr data-cluster=c.name.clone()>
                                    <td class="num">{c.order.to_string()}</td>
                                    <td>{c.name.clone()}</td>
                                    <td>{badge(&c.state)}</td>
                                    <td>{clock(c.started)}</td>
                                    <td>{clock(c.ended)}</td>
                                    <td class="detail">
                                        {c.state.message.clone()}
                                        {c
                                            .drift
                                            .as_ref()
                                            .map(|d| {
                                                view! {
                                                    " "
                                                    <span class="drift">{badge(d)} " " {d.message.clone()}</span>
                                                }
                                            })}
                                    </td>
                                    <td>{c.overrides.as_ref().map(overrides)}</td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
            {pager(s, run, query)}
            </details>
    }
    .into_any()
}

/// "Clusters 51–100 of 3333" with links to the previous and next pages, when the stage's
/// matching clusters take more than a page.
fn pager(s: &StageView, run: &str, query: &RunQuery) -> Option<AnyView> {
    if s.matching <= RUN_PAGE_ROWS {
        return None;
    }
    let first = s.page * RUN_PAGE_ROWS + 1;
    let last = (first + s.clusters.len()).saturating_sub(1);
    let pages = s.matching.div_ceil(RUN_PAGE_ROWS);
    let link = |page: usize| query.link(run, &s.name, page);
    let previous = (s.page > 0).then(|| {
        view! { <a rel="prev" href=link(s.page - 1)>"‹ Previous"</a> " " }
    });
    let next = (s.page + 1 < pages).then(|| {
        view! { " " <a rel="next" href=link(s.page + 1)>"Next ›"</a> }
    });
    Some(
        view! {
            <p class="pager">
                {previous} {format!("Clusters {first}–{last} of {}", s.matching)} {next}
            </p>
        }
        .into_any(),
    )
}
