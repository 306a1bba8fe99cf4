//! Every replica's clients in one answer. Each Envoy sends its skew log to
//! the replica it prefers (its own pod's in the workload form), so a
//! replica counts only the clients of the Envoys that log to it; with
//! `serve --replica`, `readiness` and the status page of any replica ask the
//! others for their counts (`GET /usage` on their operator port, behind the
//! same delegated authorization as the rest) and add them. A name that
//! resolves to several addresses (a headless Service) is asked at each; a
//! replica finds itself among them by the id every answer carries, and
//! skips itself.
//!
//! Bounded: at most [`MAX_ADDRESSES`] replicas asked, each within
//! [`ASK_TIMEOUT`], an answer of at most [`MAX_BODY`] bytes; one that does
//! not answer is named in the report (its clients are missing), never
//! waited on longer.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use serde::{Deserialize, Serialize};

use super::Saved;

/// How long one replica may take to answer.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(5);
/// Addresses asked at most (every `--replica` name resolved).
pub const MAX_ADDRESSES: usize = 16;
/// The largest answer read (a replica's counts are bounded well below).
pub const MAX_BODY: usize = 64 << 20;

/// One replica's counts, as `/usage` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaCounts {
    /// Which replica ([`replica_id`]).
    pub replica: String,
    pub counts: Saved,
}

/// What `serve --replica…` says.
#[derive(Debug, Clone, Default)]
pub struct ReplicaOptions {
    /// The other replicas' operator endpoints (`http[s]://HOST:PORT`).
    pub urls: Vec<String>,
    /// A bearer token to show them (re-read at each use: projected tokens
    /// rotate).
    pub token_file: Option<PathBuf>,
    /// The CA (PEM) their HTTPS certificate is checked against.
    pub ca_file: Option<PathBuf>,
    /// The name their certificate carries (HTTPS; `mvp-ext-proc certs`'s
    /// default, as Envoy checks it).
    pub server_name: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReplicaError {
    #[error("--replica {0:?}: expected http://HOST:PORT or https://HOST:PORT")]
    Url(String),
    #[error("--replica {0:?}: --replica-token-file's token would cross the network in clear: use https:// (the operator port with --metrics-tls)")]
    TokenInClear(String),
}

/// The other replicas, to ask.
#[derive(Debug)]
pub struct Replicas {
    urls: Vec<reqwest::Url>,
    options: ReplicaOptions,
    /// This replica's id: its own answer is skipped.
    pub me: String,
}

/// What the replicas answered.
#[derive(Debug, Default)]
pub struct Gathered {
    pub counts: Vec<ReplicaCounts>,
    /// Addresses that did not answer, each with why.
    pub unanswered: Vec<String>,
}

/// This process's id among the replicas: its host name (a pod's name) and
/// a random part (a restarted replica is another).
pub fn replica_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default();
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    format!("{}-{:06x}", if host.is_empty() { "mvp-ext-proc" } else { &host }, random & 0xff_ffff)
}

impl Replicas {
    pub fn new(options: ReplicaOptions, me: String) -> Result<Replicas, ReplicaError> {
        let mut urls = Vec::new();
        for u in &options.urls {
            let url = reqwest::Url::parse(u).ok().filter(|url| matches!(url.scheme(), "http" | "https") && url.host_str().is_some() && url.port_or_known_default().is_some());
            let url = url.ok_or_else(|| ReplicaError::Url(u.clone()))?;
            if url.scheme() == "http" && options.token_file.is_some() {
                return Err(ReplicaError::TokenInClear(u.clone()));
            }
            urls.push(url);
        }
        Ok(Replicas { urls, options, me })
    }

    /// Every other replica's counts, asked at once.
    pub async fn gather(&self) -> Gathered {
        let mut gathered = Gathered::default();
        let mut targets = Vec::new();
        for url in &self.urls {
            let (host, port) = (url.host_str().unwrap_or_default(), url.port_or_known_default().unwrap_or_default());
            match tokio::time::timeout(ASK_TIMEOUT, tokio::net::lookup_host((host, port))).await {
                Ok(Ok(addrs)) => targets.extend(addrs.map(|a| (url.clone(), a))),
                Ok(Err(e)) => gathered.unanswered.push(format!("{url}: {e}")),
                Err(_) => gathered.unanswered.push(format!("{url}: resolving timed out")),
            }
        }
        targets.dedup_by(|a, b| a.1 == b.1);
        if targets.len() > MAX_ADDRESSES {
            gathered.unanswered.push(format!("{} addresses past the first {MAX_ADDRESSES} not asked", targets.len() - MAX_ADDRESSES));
            targets.truncate(MAX_ADDRESSES);
        }
        let token = match &self.options.token_file {
            Some(f) => match std::fs::read_to_string(f) {
                Ok(t) => Some(t.trim().to_string()),
                Err(e) => {
                    gathered.unanswered.push(format!("--replica-token-file {}: {e}: no replica asked", f.display()));
                    return gathered;
                }
            },
            None => None,
        };
        let token = token.as_deref();
        let asked = futures::future::join_all(targets.iter().map(|(url, addr)| async move {
            let answer = tokio::time::timeout(ASK_TIMEOUT, self.ask(url, *addr, token)).await.unwrap_or_else(|_| Err("timed out".into()));
            (url, addr, answer)
        }))
        .await;
        for (url, addr, answer) in asked {
            match answer {
                Ok(c) if c.replica == self.me || gathered.counts.iter().any(|o| o.replica == c.replica) => {}
                Ok(c) => gathered.counts.push(c),
                Err(why) => gathered.unanswered.push(format!("{url} ({addr}): {why}")),
            }
        }
        gathered
    }

    async fn ask(&self, url: &reqwest::Url, addr: SocketAddr, token: Option<&str>) -> Result<ReplicaCounts, String> {
        let mut target = url.join("/usage").map_err(|e| e.to_string())?;
        let mut client = reqwest::Client::builder().no_proxy().timeout(ASK_TIMEOUT);
        if url.scheme() == "https" {
            // Reached at this address, checked under the certificate's name.
            target.set_host(Some(&self.options.server_name)).map_err(|e| format!("--replica-server-name: {e}"))?;
            client = client.resolve(&self.options.server_name, addr);
            if let Some(f) = &self.options.ca_file {
                let pem = std::fs::read(f).map_err(|e| format!("--replica-ca-file {}: {e}", f.display()))?;
                client = client.tls_built_in_root_certs(false);
                for cert in reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| format!("--replica-ca-file {}: {e}", f.display()))? {
                    client = client.add_root_certificate(cert);
                }
            }
        } else {
            target.set_ip_host(addr.ip()).map_err(|()| "not an address".to_string())?;
        }
        let mut req = client.build().map_err(|e| e.to_string())?.get(target);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.map_err(|e| chain(&e))?;
        let status = resp.status();
        let mut body = Vec::new();
        let mut chunks = resp.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| e.to_string())?;
            if body.len() + chunk.len() > MAX_BODY {
                return Err(format!("answer larger than {MAX_BODY} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            return Err(format!("{status}: {}", String::from_utf8_lossy(&body).chars().take(200).collect::<String>()));
        }
        serde_json::from_slice(&body).map_err(|e| format!("not a replica's counts: {e}"))
    }
}

/// An error with its causes (reqwest's own says only "error sending
/// request").
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_urls_with_a_host() {
        for bad in ["mvp-ext-proc:9091", "ftp://x:1", "https://", "unix:/run/x"] {
            let o = ReplicaOptions { urls: vec![bad.into()], ..Default::default() };
            assert_eq!(Replicas::new(o, "me".into()).unwrap_err(), ReplicaError::Url(bad.into()), "{bad}");
        }
        let o = ReplicaOptions { urls: vec!["https://mvp-ext-proc.mvp-envoy.svc:9091".into(), "http://127.0.0.1:9090".into()], ..Default::default() };
        assert!(Replicas::new(o, "me".into()).is_ok());
        // A bearer token never goes over plain HTTP.
        let o = ReplicaOptions { urls: vec!["http://10.0.0.2:9091".into()], token_file: Some("/var/run/secrets/token".into()), ..Default::default() };
        assert_eq!(Replicas::new(o, "me".into()).unwrap_err(), ReplicaError::TokenInClear("http://10.0.0.2:9091".into()));
    }

    #[test]
    fn ids_differ_per_process_start() {
        assert_ne!(replica_id(), replica_id());
    }

    /// A replica that does not answer is named, not waited on.
    #[tokio::test]
    async fn an_unreachable_replica_is_named() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let o = ReplicaOptions { urls: vec![format!("http://{closed}")], ..Default::default() };
        let g = Replicas::new(o, "me".into()).unwrap().gather().await;
        assert!(g.counts.is_empty());
        assert_eq!(g.unanswered.len(), 1, "{:?}", g.unanswered);
        assert!(g.unanswered[0].starts_with(&format!("http://{closed}/ ({closed}): ")), "{:?}", g.unanswered);
    }
}
