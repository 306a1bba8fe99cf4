//! One bounded GET of a discovery document.

use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, ETAG, IF_NONE_MATCH};

use super::DiscoveryOptions;

#[derive(Debug)]
pub enum Fetched {
    Ok { body: Vec<u8>, content_type: String, etag: Option<String> },
    NotModified,
    NotFound,
}

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("request failed: {0}")]
    Transport(String),
    #[error("answered HTTP {0}")]
    Status(u16),
    /// `/readyz` failed: `shutting_down` is what its `shutdown` check says
    /// (kube lists every check when one fails: `[-]shutdown failed` while
    /// it drains, `[+]shutdown ok` while it starts), `None` when the
    /// answer names no such check.
    #[error("answered HTTP {status}{}", match shutting_down { Some(true) => " (shutting down)", Some(false) => " (not shutting down: starting, or a check failing)", None => "" })]
    NotReady { status: u16, shutting_down: Option<bool> },
    #[error("document is larger than {0} bytes")]
    TooLarge(usize),
    #[error("answered 304 to a request without If-None-Match")]
    UnexpectedNotModified,
    #[error("document does not parse: {0}")]
    Invalid(String),
}

fn transport(e: reqwest::Error, base: &str, h2c: bool) -> FetchError {
    // reqwest's Display omits the cause ("error sending request"); the chain
    // says what actually happened (connection refused, timeout, TLS).
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    if refused_h2c(&msg, base, h2c) {
        msg.push_str(H2C_HINT);
    }
    FetchError::Transport(msg)
}

/// Whether a plaintext server's failure looks like an HTTP/1.1-only server
/// refusing HTTP/2 (spoken in plaintext only with `serve --apiserver-h2c`):
/// it answers the preface with a 400 and closes — the client reads either
/// the garbage (an HTTP/2 error) or, when the close comes first, a closed
/// or reset connection.
fn refused_h2c(msg: &str, base: &str, h2c: bool) -> bool {
    h2c && base.starts_with("http://") && ["http2 error", "connection closed", "connection reset"].iter().any(|m| msg.to_ascii_lowercase().contains(m))
}

/// What a plaintext server's HTTP/2 failure most likely means.
const H2C_HINT: &str = " (this plaintext apiserver does not take HTTP/2 with prior knowledge, h2c: \
    drop --apiserver-h2c if it speaks HTTP/1.1 only)";

pub async fn get(
    client: &reqwest::Client,
    base: &str,
    path: &str,
    accept: &str,
    etag: Option<&str>,
    options: &DiscoveryOptions,
) -> Result<Fetched, FetchError> {
    let mut req = client.get(format!("{base}{path}")).header(ACCEPT, accept).timeout(options.timeout);
    if let Some(e) = etag {
        req = req.header(IF_NONE_MATCH, e);
    }
    let mut resp = req.send().await.map_err(|e| transport(e, base, options.plaintext_h2c))?;
    match resp.status() {
        StatusCode::OK => {}
        StatusCode::NOT_MODIFIED if etag.is_some() => return Ok(Fetched::NotModified),
        StatusCode::NOT_MODIFIED => return Err(FetchError::UnexpectedNotModified),
        StatusCode::NOT_FOUND => return Ok(Fetched::NotFound),
        s => return Err(FetchError::Status(s.as_u16())),
    }
    let header = |name| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let content_type = header(CONTENT_TYPE).unwrap_or_default();
    let etag = header(ETAG);
    let max = options.max_document_bytes;
    if resp.content_length().is_some_and(|l| l > max as u64) {
        return Err(FetchError::TooLarge(max));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| transport(e, base, options.plaintext_h2c))? {
        if body.len() + chunk.len() > max {
            return Err(FetchError::TooLarge(max));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Fetched::Ok { body, content_type, etag })
}

/// The most of a failed `/readyz` answer read for its checks (kube's lists
/// a line per check: ~2 KiB).
const READYZ_BODY_BYTES: usize = 16 << 10;

/// `/readyz`: `Ok` when it answers 200 — or says nothing about readiness
/// (401/403: these credentials may not ask; 404: no such endpoint), so a
/// server is never closed for how it is asked — else why not.
pub async fn readyz(client: &reqwest::Client, base: &str, options: &DiscoveryOptions) -> Result<(), FetchError> {
    let req = client.get(format!("{base}/readyz")).header(ACCEPT, "text/plain").timeout(options.timeout);
    let mut resp = req.send().await.map_err(|e| transport(e, base, options.plaintext_h2c))?;
    let status = resp.status();
    if status.is_success() || matches!(status.as_u16(), 401 | 403 | 404) {
        return Ok(());
    }
    let mut body = Vec::new();
    // The answer's checks, if they come within the probe's deadline; the
    // status alone says "not ready" either way.
    while body.len() < READYZ_BODY_BYTES
        && let Ok(Some(chunk)) = resp.chunk().await
    {
        body.extend_from_slice(&chunk);
    }
    Err(FetchError::NotReady { status: status.as_u16(), shutting_down: shutdown_check(&body) })
}

/// What a failed `/readyz` answer's `shutdown` check says: kube-apiserver
/// fails it from SIGTERM on (`[-]shutdown failed: reason withheld`) and
/// passes it while it starts (`[+]shutdown ok`, other checks failing).
fn shutdown_check(body: &[u8]) -> Option<bool> {
    body.split(|b| *b == b'\n').find_map(|line| match line.trim_ascii() {
        l if l.starts_with(b"[-]shutdown failed") => Some(true),
        l if l.starts_with(b"[+]shutdown ok") => Some(false),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::{refused_h2c, shutdown_check};

    /// Read off a real v1.37 kube-apiserver (`tests/real_restart.rs`) and
    /// the fake's drain.
    #[test]
    fn a_failed_readyz_says_whether_it_is_shutting_down() {
        let draining = b"[-]shutdown failed: reason withheld\nreadyz check failed\n";
        let starting = b"[+]ping ok\n[-]etcd failed: reason withheld\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\n[+]shutdown ok\nreadyz check failed\n";
        let fake = b"[-]shutdown failed: process is shutting down\nreadyz check failed\n";
        assert_eq!(shutdown_check(draining), Some(true));
        assert_eq!(shutdown_check(fake), Some(true));
        assert_eq!(shutdown_check(starting), Some(false));
        for other in [&b"readyz check failed\n"[..], b"", b"[-]shutdown-hook failed", b"[+]shutdownish ok"] {
            assert_eq!(shutdown_check(other), None, "{}", String::from_utf8_lossy(other));
        }
    }

    /// Either way an HTTP/1.1-only server's refusal reads (the race the
    /// `plaintext_http1` suite once lost), and only with h2c on, only in
    /// plaintext.
    #[test]
    fn a_refused_preface_is_named_whichever_way_it_reads() {
        let h2 = "error sending request for url (http://127.0.0.1:1/readyz): http2 error: connection error detected: frame with invalid size";
        let closed = "error sending request for url (http://127.0.0.1:1/readyz): client error (Canceled): operation was canceled: connection closed";
        let reset = "error sending request: client error (SendRequest): Connection reset by peer (os error 104)";
        for msg in [h2, closed, reset] {
            assert!(refused_h2c(msg, "http://127.0.0.1:1", true), "{msg}");
            assert!(!refused_h2c(msg, "http://127.0.0.1:1", false), "HTTP/1.1 spoken: {msg}");
            assert!(!refused_h2c(msg, "https://127.0.0.1:1", true), "TLS: {msg}");
        }
        assert!(!refused_h2c("error trying to connect: tcp connect error: Connection refused (os error 111)", "http://127.0.0.1:1", true));
    }
}
