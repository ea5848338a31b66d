//! The Runs page: every staged update run, newest first.

use leptos::prelude::*;

use super::skeleton::{Empty, Page};
use crate::api::get_runs;
use crate::components::{ago, badge, progress};
use crate::live::live;
use crate::model::RunsView;

/// `/runs`: the runs table.
#[component]
pub fn RunsPage() -> impl IntoView {
    let live = live();
    let data = Resource::new(move || live.rollouts.get(), |_| get_runs());
    view! {
        <Page
            heading="Runs"
            intro="Staged update runs, newest first. Start one from the Placements page."
            data
            empty=Empty {
                when: |v: &RunsView| v.runs.is_empty(),
                text: "No update runs yet.",
                id: None,
            }
            render=|v, _| runs_table(v)
        />
    }
}

fn runs_table(v: RunsView) -> impl IntoView {
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
}
