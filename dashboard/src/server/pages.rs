//! The pages served without Leptos: sign-in and errors of actions. Plain HTML with the same
//! stylesheet; everything interpolated is escaped.

use std::borrow::Cow;

use axum::response::Html;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// Escapes text for HTML content and (quoted) attribute values: `& < > " '`.
pub fn escape(s: &str) -> Cow<'_, str> {
    html_escape::encode_quoted_attribute(s)
}

/// What a query parameter value keeps unencoded: RFC 3986's unreserved characters and `/`, so
/// a path stays readable (`/login?next=/runs/r1`).
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

/// Percent-encodes a query parameter value.
pub fn url_encode(s: &str) -> String {
    utf8_percent_encode(s, QUERY_VALUE).to_string()
}

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
}
