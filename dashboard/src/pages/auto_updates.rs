//! The Auto-updates page: every AutoUpdatePolicy with its target, versions, next check, what is
//! in flight, its circuit breaker, the versions never retried and its history, with Check now
//! and Reset for people allowed to change policies.

use leptos::prelude::*;

use super::skeleton::{Empty, Page};
use crate::api::get_auto_updates;
use crate::components::{ago, badge};
use crate::live::live;
use crate::model::{AutoUpdatesView, HistoryRow, InFlightView, Me, PolicyRow, clock, countdown};

/// `/autoupdates`: the auto-update policies.
#[component]
pub fn AutoUpdatesPage() -> impl IntoView {
    let live = live();
    let data = Resource::new(move || live.rollouts.get(), |_| get_auto_updates());
    view! {
        <Page
            heading="Auto-updates"
            intro="Workloads that follow their registry: new versions roll out through their staged strategy by themselves, failing ones are rolled back and never retried, and repeated rollbacks open a circuit breaker that only a person closes."
            data
            empty=Empty {
                when: |v: &AutoUpdatesView| v.policies.is_empty(),
                text: "No AutoUpdatePolicies on this hub.",
                id: Some("no-policies"),
            }
            render=|v, me| {
                let me = me.filter(|m| m.can_update_policies);
                v.policies.into_iter().map(|p| policy_card(p, me.clone())).collect_view()
            }
        />
    }
}

/// A version, or a dash.
fn version(v: Option<String>) -> String {
    v.unwrap_or_else(|| "—".into())
}

fn run_link(run: String) -> impl IntoView {
    view! { <a href=format!("/runs/{run}")>{run.clone()}</a> }
}

fn policy_card(p: PolicyRow, me: Option<Me>) -> impl IntoView {
    let live = live();
    let name = p.name.clone();
    let next_check = match p.next_check {
        Some(n) => view! {
            <span class="countdown" title=clock(Some(n))>
                {move || countdown(n, live.now.get())}
            </span>
        }
        .into_any(),
        None => view! { "—" }.into_any(),
    };
    let failed = if p.failed_versions.is_empty() {
        "none".to_string()
    } else {
        p.failed_versions.join(", ")
    };
    let actions = me.map(|me| actions(&p, &me));
    view! {
        <section class="card policy" id=format!("policy-{name}") data-policy=name.clone()>
            <h2>
                {name.clone()} " " <span data-field="circuit">{badge(&p.circuit)}</span> " "
                {badge(&p.ready)} " " {badge(&p.updating)}
            </h2>
            <dl class="facts">
                <dt>"Target"</dt>
                <dd>{p.target.clone()}</dd>
                <dt>"Placement"</dt>
                <dd>{format!("{}, strategy {}", p.placement, p.strategy)}</dd>
                <dt>"Follows"</dt>
                <dd>
                    {match p.repository.clone() {
                        Some(r) => view! { <code>{r}</code> }.into_any(),
                        None => view! { "the image's own repository" }.into_any(),
                    }} ", versions " <code>{p.constraint.clone()}</code> ", checked on "
                    <code>{p.schedule.clone()}</code>
                </dd>
                <dt>"Current version"</dt>
                <dd data-field="current">{version(p.current_version.clone())}</dd>
                <dt>"Available version"</dt>
                <dd data-field="available">{version(p.available_version.clone())}</dd>
                <dt>"Next check"</dt>
                <dd data-field="next-check">
                    {next_check}
                    " · last check " {ago(p.last_check)}
                    {p.check_requested.then_some(" · check requested, waiting for the hub")}
                </dd>
                <dt>"In flight"</dt>
                <dd data-field="in-flight">{in_flight(p.in_flight.clone())}</dd>
                <dt>"Circuit"</dt>
                <dd data-field="circuit-detail">
                    {if p.circuit_open { "open" } else { "closed" }}
                    {format!(" · rollbacks {} of {}", p.rollback_count, p.max_rollbacks)}
                    {p.reset_requested.then_some(" · reset requested, waiting for the hub")}
                    {(!p.circuit.message.is_empty())
                        .then(|| view! { <div class="muted small">{p.circuit.message.clone()}</div> })}
                </dd>
                <dt>"Never retried"</dt>
                <dd data-field="failed-versions">{failed}</dd>
            </dl>
            {actions}
            <h3>"History"</h3>
            {history(p.history)}
        </section>
    }
}

fn in_flight(f: Option<InFlightView>) -> AnyView {
    let Some(f) = f else {
        return view! { "nothing" }.into_any();
    };
    view! {
        {badge(&f.phase)}
        " "
        <b>{f.version.clone()}</b>
        {f.run.map(|r| view! { " · run " {run_link(r)} })}
        {f.rollback_run.map(|r| view! { " · rollback run " {run_link(r)} })}
        " · started "
        {ago(f.started)}
    }
    .into_any()
}

fn actions(p: &PolicyRow, me: &Me) -> impl IntoView + use<> {
    let form = |path: &str, label: &'static str, class: &'static str| {
        view! {
            <form class="inline" method="post" action=format!("/autoupdates/{}/{path}", p.name)>
                <input type="hidden" name="csrf" value=me.csrf.clone() />
                <button type="submit" class=class data-action=path.to_string()>
                    {label}
                </button>
            </form>
        }
    };
    let reset = p
        .resettable()
        .then(|| form("reset", "Reset circuit", "button primary"));
    view! { <div class="actions">{form("check", "Check now", "button")} {reset}</div> }
}

fn history(rows: Vec<HistoryRow>) -> AnyView {
    if rows.is_empty() {
        return view! { <p class="muted">"No version rolled out yet."</p> }.into_any();
    }
    view! {
        <table class="history">
            <thead>
                <tr>
                    <th>"Version"</th>
                    <th>"Outcome"</th>
                    <th>"Run"</th>
                    <th>"Started"</th>
                    <th>"Ended"</th>
                    <th>"Why"</th>
                </tr>
            </thead>
            <tbody>
                {rows
                    .into_iter()
                    .map(|h| {
                        view! {
                            <tr data-version=h.version.clone()>
                                <td>{h.version.clone()}</td>
                                <td>{badge(&h.outcome)}</td>
                                <td>{h.run.map(run_link)}</td>
                                <td>{clock(h.started)}</td>
                                <td>{clock(h.ended)}</td>
                                <td class="detail">{h.outcome.message.clone()}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}
