//! How discovery requests reach apiservers: plain HTTP, or mTLS exactly as
//! Envoy's apiservers cluster does it, with the credentials the flags give.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::tls::PeerTls;

/// The user mvp-ext-proc's discovery requests carry when it authenticates
/// with the proxy client certificate. Apiservers authorize it like any
/// authenticated user: kube's system:discovery role, bound to
/// system:authenticated, allows /api and /apis.
pub const DISCOVERY_USER: &str = "system:mvp-envoy:discovery";

#[derive(Clone)]
pub enum Transport {
    Plain(reqwest::Client),
    /// mTLS like Envoy's: connect to the apiserver's resolved address, send
    /// SNI `server_name` and require a certificate for it from the peer CA.
    Tls {
        /// The last good credentials: they follow rotated files (see
        /// [`crate::tls::reload`]).
        config: tokio::sync::watch::Receiver<Arc<rustls::ClientConfig>>,
        server_name: String,
        /// (header, user) naming who asks, when the proxy client certificate
        /// makes the apiserver trust requestheaders.
        identity: Option<(String, String)>,
        headers: reqwest::header::HeaderMap,
    },
}

impl Transport {
    /// `token_file`: a bearer token for every discovery request.
    /// `username_header`: the requestheader user name, sent with the proxy
    /// client certificate. `peer_tls`: the TLS settings and the client
    /// configuration to follow. `h2c`: plaintext apiservers are asked in
    /// HTTP/2 with prior knowledge, as Envoy then speaks to them
    /// (`serve --apiserver-h2c`): one that does not take it fails its reads
    /// here, and is never opened, instead of failing every request Envoy
    /// sends it.
    pub fn new(
        token_file: Option<&Path>,
        peer_tls: Option<(&PeerTls, tokio::sync::watch::Receiver<Arc<rustls::ClientConfig>>)>,
        username_header: &str,
        h2c: bool,
    ) -> anyhow::Result<Transport> {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(path) = token_file {
            let token = std::fs::read_to_string(path)
                .with_context(|| format!("--discovery-token-file {}: cannot read", path.display()))?;
            let token = token.trim();
            if token.is_empty() {
                anyhow::bail!("--discovery-token-file {}: the file is empty", path.display());
            }
            let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                .with_context(|| format!("--discovery-token-file {}: not a valid token", path.display()))?;
            value.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        Ok(match peer_tls {
            None => Transport::Plain({
                let builder = reqwest::Client::builder();
                let builder = if h2c { builder.http2_prior_knowledge() } else { builder.http1_only() };
                builder
                    .default_headers(headers)
                    .user_agent(concat!("mvp-ext-proc/", env!("CARGO_PKG_VERSION")))
                    .no_proxy()
                    .connect_timeout(Duration::from_secs(3))
                    .pool_idle_timeout(Duration::from_secs(90))
                    .build()
                    .context("building the discovery HTTP client")?
            }),
            Some((p, config)) => Transport::Tls {
                config,
                server_name: p.server_name.clone(),
                identity: p.client.as_ref().map(|_| (username_header.to_string(), DISCOVERY_USER.to_string())),
                headers,
            },
        })
    }
}
