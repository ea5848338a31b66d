//! The pages served without Leptos: sign-in, errors of actions, and what a cluster gets. Plain HTML with the same
//! stylesheet; everything interpolated is escaped.

use std::borrow::Cow;

use axum::response::Html;
use fleethub_crds::render::Render;

/// Escapes text for HTML content and (quoted) attribute values: `& < > " '`.
pub fn escape(s: &str) -> Cow<'_, str> {
    html_escape::encode_quoted_attribute(s)
}

pub use crate::model::url_encode;

/// Where to go after signing in: only paths of this site (no `//host`, no scheme).
pub fn safe_next(next: &str) -> String {
    if next.starts_with('/') && !next.starts_with("//") && !next.contains('\\') {
        next.to_string()
    } else {
        "/".to_string()
    }
}

fn page(title: &str, header_right: &str, body: &str) -> Html<String> {
    Html(format!(
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · fleethub dashboard</title><link rel="stylesheet" href="/style.css"></head>
<body><header class="top"><a class="brand" href="/">fleethub</a>{header_right}</header>
<main>{body}</main></body></html>"#,
        title = escape(title),
    ))
}

/// The sign-in page, with an error sentence after a failed attempt.
pub fn login_page(error: Option<&str>, next: &str) -> Html<String> {
    let error = error
        .map(|e| {
            format!(
                r#"<div class="error" role="alert"><p>{}</p></div>"#,
                escape(e)
            )
        })
        .unwrap_or_default();
    page(
        "Sign in",
        "",
        &format!(
            r#"<h1>Sign in</h1>
{error}
<form class="card signin" method="post" action="/login">
<p>Sign in with your Kubernetes bearer token for the hub. The dashboard checks it with the hub
(TokenReview) and then acts with your identity only: what you may see and change is what the hub's RBAC allows you.</p>
<label for="token">Bearer token</label>
<input id="token" type="password" name="token" autocomplete="off" required autofocus>
<input type="hidden" name="next" value="{next}">
<div class="actions"><button type="submit" class="button primary">Sign in</button></div>
<p class="muted small">Local fleet: the tokens are in <code>$FLEET_DIR/admin.token</code> (may approve and start runs)
and <code>$FLEET_DIR/viewer.token</code> (read-only); <code>deploy/local/fleet up</code> prints where.</p>
</form>"#,
            next = escape(&safe_next(next)),
        ),
    )
}

/// A failed action, explained.
pub fn error_page(message: &str, user: Option<&str>, sign_in: bool) -> Html<String> {
    let who = user
        .map(|u| {
            format!(
                r#"<span class="user">Signed in as <b>{}</b></span>"#,
                escape(u)
            )
        })
        .unwrap_or_default();
    let action = if sign_in {
        r#"<a class="button primary" href="/login">Sign in</a>"#
    } else {
        r#"<a class="button" href="javascript:history.back()">Go back</a> <a class="button" href="/">Fleet overview</a>"#
    };
    page(
        "Something went wrong",
        &who,
        &format!(
            r#"<h1>That did not work</h1><div class="error" role="alert"><p>{}</p></div><p class="actions">{action}</p>"#,
            escape(message)
        ),
    )
}

/// The page of what one cluster gets from a placement ([`fleethub_crds::render`], as
/// `kubectl fleet render` prints it): what it was rendered from, the differences from the hub's
/// template, and the manifests; or the override rule that cannot apply.
pub fn render_page(r: &Render, user: &str) -> Html<String> {
    let notes: String = r
        .notes()
        .iter()
        .map(|n| format!("<li>{}</li>", escape(n)))
        .collect();
    let body = match (r.diff(), r.yaml()) {
        (Ok(diff), Ok(yaml)) => {
            let diff = if diff.is_empty() {
                r#"<p class="muted">None: this cluster gets the hub's template as it is.</p>"#
                    .to_string()
            } else {
                let lines: String = diff
                    .lines()
                    .map(|l| {
                        let class = match l.as_bytes().first() {
                            Some(b'@') => "hunk",
                            _ if l.starts_with("+++") || l.starts_with("---") => "file",
                            Some(b'+') => "add",
                            Some(b'-') => "del",
                            _ => "same",
                        };
                        format!(r#"<span class="{class}">{}</span>"#, escape(l))
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                format!(r#"<pre class="diff" data-diff>{lines}</pre>"#)
            };
            format!(
                r#"<h2>Differences from the hub's template</h2>{diff}<h2>The manifests</h2><pre class="manifests" data-manifests>{}</pre>"#,
                escape(&yaml)
            )
        }
        (Err(e), _) | (_, Err(e)) => format!(
            r#"<div class="error" role="alert"><p>An override cannot be applied for this cluster, so the hub leaves its Work as it was: {}</p></div>"#,
            escape(&e.to_string())
        ),
    };
    let title = format!("What {} gets from {}", r.cluster, r.placement);
    page(
        &title,
        &format!(
            r#"<span class="user">Signed in as <b>{}</b></span>"#,
            escape(user)
        ),
        &format!(
            r#"<h1>{}</h1><p><a href="/placements">Placements</a></p><ul class="card notes">{notes}</ul>{body}<p class="muted small">The same as <code>kubectl fleet render {} --cluster {} --snapshot {} [--diff]</code>.</p>"#,
            escape(&title),
            escape(&r.placement),
            escape(&r.cluster),
            r.index
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_text_is_escaped_and_next_stays_on_this_site() {
        assert_eq!(
            escape(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#x27;"
        );
        assert_eq!(safe_next("/runs/a?b=c"), "/runs/a?b=c");
        assert_eq!(safe_next("//evil.example"), "/");
        assert_eq!(safe_next("https://evil.example"), "/");
        assert_eq!(url_encode("/runs/a?b=c d"), "/runs/a%3Fb%3Dc%20d");
        assert_eq!(url_encode("/runs/é~x_y-z.1"), "/runs/%C3%A9~x_y-z.1");
    }

    #[test]
    fn the_render_page_shows_the_diff_line_by_line_escaped() {
        use fleethub_crds::override_apply::{Applied, OverrideError};
        use serde_json::json;
        let template = vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": "c", "namespace": "app"}, "data": {"a": "<hub>"}})];
        let mut changed = template.clone();
        changed[0]["data"]["a"] = json!("member");
        let mut r = Render {
            placement: "web".into(),
            cluster: "member-3".into(),
            index: 2,
            index_source: "asked for".into(),
            override_source: "the newest snapshot of every override".into(),
            considered: vec!["app/names-0".into()],
            missing: vec![],
            template,
            result: Ok(Applied {
                manifests: changed,
                used: vec!["names-0".into()],
            }),
        };
        let html = render_page(&r, "alice").0;
        assert!(
            html.contains("<h1>What member-3 gets from web</h1>"),
            "{html}"
        );
        assert!(html.contains("<li>applied: names-0</li>"), "{html}");
        assert!(
            html.contains(r#"<span class="del">-  a: &lt;hub&gt;</span>"#),
            "{html}"
        );
        assert!(
            html.contains(r#"<span class="add">+  a: member</span>"#),
            "{html}"
        );
        assert!(html.contains(r#"<span class="hunk">@@ "#), "{html}");
        r.result = Err(OverrideError {
            override_: "ResourceOverride app/bad".into(),
            rule: 0,
            object: "ConfigMap app/c".into(),
            reason: "replace /x: the object has no such path".into(),
        });
        let html = render_page(&r, "alice").0;
        assert!(
            html.contains("the hub leaves its Work as it was: ResourceOverride app/bad rule 0 on ConfigMap app/c"),
            "{html}"
        );
    }
}
