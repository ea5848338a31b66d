//! The confirmation before approving a stage gate: what approving does and who it is recorded
//! as, with an optional note. Posting it approves as the signed-in user.

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use super::skeleton::Page;
use crate::api::get_approval;
use crate::model::{ApprovalRow, Me};

/// `/approvals/:name/approve`: confirm one approval.
#[component]
pub fn ConfirmApprovalPage() -> impl IntoView {
    let params = use_params_map();
    let name = move || params.read().get("name").unwrap_or_default();
    let data = Resource::new(name, get_approval);
    view! { <Page heading="Approve a stage" data render=confirm_view /> }
}

fn confirm_view(a: ApprovalRow, me: Option<Me>) -> AnyView {
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
            {a
                .progress()
                .map(|p| {
                    view! {
                        <p class="approvals">
                            {format!(
                                "This gate has an approval policy: {p} so far; yours counts once.",
                            )}
                        </p>
                    }
                })}
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
