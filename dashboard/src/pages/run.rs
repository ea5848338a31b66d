//! One run's page: its summary, the actions the signed-in user may take (stop, resume), what
//! needs attention, and every stage with its clusters and gates.

mod tasks;

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use super::skeleton::Page;
use crate::api::get_run;
use crate::components::{badge, overrides, progress};
use crate::live::live;
use crate::model::{Me, RunView, StageView, clock};

/// `/runs/:name`: one run.
#[component]
pub fn RunPage() -> impl IntoView {
    let live = live();
    let params = use_params_map();
    let name = move || params.read().get("name").unwrap_or_default();
    let data = Resource::new(move || (name(), live.rollouts.get()), |(n, _)| get_run(n));
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
        <ol class="stages">
            {v
                .stages
                .into_iter()
                .map(|s| stage_view(s, can_approve))
                .collect_view()}
        </ol>
    }
}

fn stage_view(s: StageView, can_approve: bool) -> AnyView {
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
                        .enumerate()
                        .map(|(i, c)| {
                            view! {
                                <tr data-cluster=c.name.clone()>
                                    <td class="num">{(i + 1).to_string()}</td>
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
