//! The dashboard's side of the benchmark: how long a signed-in person waits for the first byte
//! of a run page (server-side rendered from the hub, with every cluster of the run). Plain
//! HTTP/1.1 over a TCP socket, one request per connection, as a browser's first visit.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The local fleet's dashboard, signed in as its admin.
pub struct Dashboard {
    addr: SocketAddr,
    cookie: String,
}

/// One page load.
pub struct PageLoad {
    /// Request sent → first byte of the response.
    pub first_byte: Duration,
    /// Request sent → last byte.
    pub complete: Duration,
    pub bytes: usize,
}

impl Dashboard {
    /// Signs in with `$FLEET_DIR/admin.token` at `FLEET_PORT_BASE`+200; `None` when that fleet
    /// runs no dashboard.
    pub async fn sign_in(fleet_dir: &Path) -> anyhow::Result<Option<Self>> {
        let Ok(token) = std::fs::read_to_string(fleet_dir.join("admin.token")) else {
            return Ok(None);
        };
        let base = std::fs::read_to_string(fleet_dir.join("fleet.env"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                l.strip_prefix("FLEET_PORT_BASE=")?
                    .trim()
                    .parse::<u16>()
                    .ok()
            })
            .unwrap_or(17000);
        let addr = SocketAddr::from(([127, 0, 0, 1], base + 200));
        if TcpStream::connect(addr).await.is_err() {
            return Ok(None);
        }
        let body = format!("token={}&next=%2F", form_encode(token.trim()));
        let request = format!(
            "POST /login HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let (response, _) = exchange(addr, &request).await?;
        let head = String::from_utf8_lossy(&response);
        let cookie = head
            .lines()
            .take_while(|l| !l.is_empty())
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("set-cookie").then(|| {
                    value
                        .trim()
                        .split(';')
                        .next()
                        .unwrap_or_default()
                        .to_string()
                })
            })
            .with_context(|| {
                format!(
                    "signing in to the dashboard at {addr} gave no session: {}",
                    head.lines().next().unwrap_or_default()
                )
            })?;
        Ok(Some(Self { addr, cookie }))
    }

    /// Loads `path` once; fails unless the answer is 200.
    pub async fn load(&self, path: &str) -> anyhow::Result<PageLoad> {
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nCookie: {}\r\nAccept: text/html\r\nConnection: close\r\n\r\n",
            self.addr, self.cookie
        );
        let started = Instant::now();
        let (response, first_byte) = exchange(self.addr, &request).await?;
        let complete = started.elapsed();
        let status = String::from_utf8_lossy(&response[..response.len().min(64)])
            .lines()
            .next()
            .unwrap_or_default()
            .to_string();
        if !status.contains(" 200 ") {
            bail!("GET {path} from the dashboard: {status}");
        }
        Ok(PageLoad {
            first_byte: first_byte.saturating_duration_since(started),
            complete,
            bytes: response.len(),
        })
    }
}

/// Sends `request` on a new connection; returns the whole response and when its first byte came.
async fn exchange(addr: SocketAddr, request: &str) -> anyhow::Result<(Vec<u8>, Instant)> {
    let mut conn = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to the dashboard at {addr}"))?;
    conn.write_all(request.as_bytes()).await?;
    let mut response = Vec::with_capacity(64 * 1024);
    let mut buf = [0u8; 16 * 1024];
    let n = conn.read(&mut buf).await?;
    let first = Instant::now();
    response.extend_from_slice(&buf[..n]);
    loop {
        let n = conn.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        response.extend_from_slice(&buf[..n]);
    }
    Ok((response, first))
}

fn form_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::form_encode;

    #[test]
    fn tokens_are_form_encoded() {
        assert_eq!(form_encode("a.b-c_d~e"), "a.b-c_d~e");
        assert_eq!(form_encode("x+y/z= "), "x%2By%2Fz%3D%20");
    }
}
