//! The Fleet page: every member cluster with its labels and health.

use leptos::prelude::*;

use super::skeleton::{Empty, Page};
use crate::api::get_fleet;
use crate::components::{ago, badge, number_or_dash};
use crate::live::live;
use crate::model::FleetView;

/// `/`: the member clusters.
#[component]
pub fn FleetPage() -> impl IntoView {
    let live = live();
    // Member heartbeats change only this page.
    let data = Resource::new(move || live.members.get(), |_| get_fleet());
    view! {
        <Page
            heading="Fleet"
            intro="Every member cluster of the hub, with its labels and health."
            data
            empty=Empty {
                when: |v: &FleetView| v.members.is_empty(),
                text: "No member clusters have joined this hub yet.",
                id: None,
            }
            render=|v, _| fleet_table(v)
        />
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
                    <th>"Reported"</th>
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
                                <td class="num">{number_or_dash(m.node_count)}</td>
                                <td>{m.agent_version.clone()}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
}
