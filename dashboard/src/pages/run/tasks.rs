//! A stage's gates on the run page: a timed wait with its countdown, an approval with who
//! approved it (or the button to approve, for people allowed to), a metric check with its
//! query, passes and next check.

use leptos::prelude::*;

use crate::live::live;
use crate::model::{MetricCheckView, TaskView, clock, countdown};

/// One stage task as a list item (`data-task` is its type).
pub(super) fn task_view(t: TaskView, can_approve: bool) -> AnyView {
    match t {
        TaskView::TimedWait {
            wait,
            until,
            elapsed,
            paused,
        } => timed_wait(wait, until, elapsed, paused),
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
        TaskView::MetricCheck(m) => metric_check(m),
    }
}

fn metric_check(m: MetricCheckView) -> AnyView {
    let live = live();
    let state = match (m.passed, m.reached) {
        (true, _) => view! { <span class="badge good">"Passed"</span> }.into_any(),
        (false, true) => view! { <span class="badge wait">"Checking"</span> }.into_any(),
        (false, false) => view! { <span class="badge idle">"Not reached yet"</span> }.into_any(),
    };
    let last = m.last.map(|(value, ok)| {
        view! {
            " last: "
            <span class={if ok { "badge good" } else { "badge bad" }}>{value}</span>
        }
    });
    let next = m.next_check.filter(|_| !m.passed).map(|n| {
        view! { " next check " <span class="countdown">{move || countdown(n, live.now.get())}</span> }
    });
    view! {
        <li class="task" data-task="MetricCheck" title=m.message>
            <b>"Metric check"</b>
            " — "
            {state}
            " "
            <span class="passes">{format!("{}/{} passes", m.passes, m.threshold)}</span>
            {last}
            {next}
            <div class="detail"><code class="query">{m.query}</code> " at " {m.url}</div>
        </li>
    }
    .into_any()
}

fn timed_wait(wait: String, until: Option<i64>, elapsed: bool, paused: Option<String>) -> AnyView {
    let live = live();
    let paused_now = paused.is_some();
    let status = move || {
        if let Some(why) = &paused {
            return why.clone();
        }
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
    let (badge, label) = match (elapsed, paused_now) {
        (true, _) => ("badge good", "Elapsed"),
        (false, true) => ("badge bad", "Paused"),
        (false, false) => ("badge wait", "Waiting"),
    };
    view! {
        <li class="task" data-task="TimedWait">
            <b>"Wait " {wait}</b>
            " — "
            <span class=badge>{label}</span>
            " "
            <span class="countdown">{status}</span>
        </li>
    }
    .into_any()
}
