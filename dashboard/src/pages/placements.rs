//! The Placements page: what goes where — each placement's selected clusters, its snapshots,
//! which snapshot each cluster runs, and (for people allowed to) starting or rolling back a run.

use leptos::prelude::*;

use super::skeleton::{Empty, Page};
use crate::api::get_placements;
use crate::components::{ago, badge, number_or_dash, overrides};
use crate::live::live;
use crate::model::{Me, PlacementRow, PlacementsView, clock};

/// `/placements`: one card per placement.
#[component]
pub fn PlacementsPage() -> impl IntoView {
    let live = live();
    let data = Resource::new(move || live.rollouts.get(), |_| get_placements());
    view! {
        <Page
            heading="Placements"
            intro="What goes where: the clusters each placement selected, its snapshots, and which snapshot each cluster runs."
            data
            empty=Empty {
                when: |v: &PlacementsView| v.placements.is_empty(),
                text: "There are no placements on this hub.",
                id: None,
            }
            render=|v: PlacementsView, me| {
                v.placements
                    .into_iter()
                    .map(|p| placement_section(p, &v.strategies, me.clone()))
                    .collect_view()
            }
        />
    }
}

// The parts of a card are returned as `AnyView`: as one nested type, a card is deeper than the
// compiler's recursion limit allows when the browser build lays out its hydration.
fn placement_section(p: PlacementRow, strategies: &[String], me: Option<Me>) -> AnyView {
    let start_forms = me
        .filter(|m| {
            // Runs drive External placements only (the hub refuses others).
            m.can_create_runs && p.strategy_type == "External" && !strategies.is_empty()
        })
        .map(|me| start_forms(&p, strategies, &me));
    view! {
        <section class="card" data-placement=p.name.clone()>
            <h2>
                {p.name.clone()} " "
                <span class="muted small">
                    {format!(
                        "{} · latest snapshot {}",
                        p.strategy_type,
                        number_or_dash(p.latest_index),
                    )}
                </span>
            </h2>
            {start_forms}
            <div class="cols">
                <div>
                    <h3>"Selected clusters"</h3>
                    {clusters_table(&p)}
                </div>
                <div>
                    <h3>"Snapshots"</h3>
                    {snapshots_table(&p)}
                </div>
            </div>
        </section>
    }
    .into_any()
}

/// "Start run" (any snapshot, any strategy) and the one-click rollback.
fn start_forms(p: &PlacementRow, strategies: &[String], me: &Me) -> AnyView {
    let default_strategy = p
        .last_strategy
        .clone()
        .or_else(|| strategies.first().cloned())
        .unwrap_or_default();
    let strategy_options = strategies
        .iter()
        .map(|s| {
            view! {
                <option value=s.clone() selected={*s == default_strategy}>
                    {s.clone()}
                </option>
            }
        })
        .collect_view();
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
                <label>"Strategy " <select name="strategy">{strategy_options}</select></label>
                <button type="submit" class="button primary">
                    "Start run"
                </button>
            </form>
            {rollback}
        </div>
    }
    .into_any()
}

fn clusters_table(p: &PlacementRow) -> AnyView {
    view! {
        <table>
            <thead>
                <tr>
                    <th>"Cluster"</th>
                    <th class="num">"Should run"</th>
                    <th class="num">"Runs"</th>
                    <th>"Applied"</th>
                    <th>"Available"</th>
                    <th>"Drift"</th>
                    <th>"Overrides"</th>
                </tr>
            </thead>
            <tbody>
                {p
                    .clusters
                    .iter()
                    .map(|c| {
                        view! {
                            <tr data-cluster=c.cluster.clone()>
                                <td>{c.cluster.clone()}</td>
                                <td class="num">{number_or_dash(c.target_index)}</td>
                                <td class="num">{number_or_dash(c.applied_index)}</td>
                                <td>{badge(&c.applied)}</td>
                                <td>{badge(&c.available)}</td>
                                <td data-drift=c.drift.label.clone()>{badge(&c.drift)}</td>
                                <td>{overrides(&c.overrides)}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

fn snapshots_table(p: &PlacementRow) -> AnyView {
    view! {
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
    }
    .into_any()
}
