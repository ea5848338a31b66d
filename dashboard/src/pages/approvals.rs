//! The Approvals page: stage gates waiting for a person, across all runs, oldest first.

use leptos::prelude::*;

use super::skeleton::{Empty, Page};
use crate::api::get_approvals;
use crate::components::ago;
use crate::live::live;
use crate::model::ApprovalsView;

/// `/approvals`: the pending approval requests.
#[component]
pub fn ApprovalsPage() -> impl IntoView {
    let live = live();
    let data = Resource::new(move || live.rollouts.get(), |_| get_approvals());
    view! {
        <Page
            heading="Approvals"
            intro="Stage gates waiting for a person, across all runs, oldest first."
            data
            empty=Empty {
                when: |v: &ApprovalsView| v.pending.is_empty(),
                text: "Nothing is waiting for approval.",
                id: Some("no-approvals"),
            }
            render=|v, me| approvals_table(v, me.is_some_and(|m| m.can_approve))
        />
    }
}

fn approvals_table(v: ApprovalsView, can_approve: bool) -> impl IntoView {
    view! {
        <table id="approvals">
            <thead>
                <tr>
                    <th>"Run"</th>
                    <th>"Stage"</th>
                    <th>"Waiting since"</th>
                    <th>"Request"</th>
                    <th>"Approvals"</th>
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
                                <td class="approvals">{a.progress().unwrap_or_default()}</td>
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
}
