//! apiservers → discover: reads what each apiserver itself serves.
//!
//! Aggregated discovery (`/api`, `/apis`, with `profile=nopeer` so an
//! apiserver that peer-aggregates answers with its own view only) when the
//! server has it; otherwise the unaggregated documents of servers older than
//! Kubernetes 1.26, where a group-version counts only if its own
//! `/apis/{g}/{v}` answers 200 (the `/apis` group list comes from
//! cluster-wide APIService objects and can name group-versions this server
//! does not serve).

pub mod aggregated;
pub mod capabilities;
mod fetch;
pub mod known;
pub mod openapi;
pub mod release;
pub mod transport;
pub mod unaggregated;

use std::collections::HashMap;

use sha2::Digest;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use aggregated::{Root, RootView};
pub use crate::discover::capabilities::Capabilities;
pub use fetch::{FetchError, Fetched};
pub use known::KnownGroupVersions;
pub use transport::Transport;

use crate::apidiscovery::SharedGroup;

/// Everything one read of a server's discovery yields.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServerView {
    pub capabilities: Capabilities,
    /// Its `/apis` groups as it serves them (its own view: `profile=nopeer`),
    /// shared with the discovery cache and the merger.
    pub groups: Arc<Vec<SharedGroup>>,
}

use crate::apiservers::ApiserverSpec;

/// Exactly client-go's `AcceptV2NoPeer` list, plus v2beta1 for 1.26–1.29
/// servers that lack v2 (1.30–1.32 serve both, 1.33+ only v2), then
/// unaggregated JSON for servers older than 1.26.
pub const DISCOVERY_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

/// How long `/readyz` may take: Envoy's own health check of the same path
/// (`xds::clusters`: 1 s timeout, unhealthy after 2 failures) — a hung
/// apiserver is closed in the table as soon as Envoy stops sending it
/// traffic, not after the discovery read deadline (10 s).
pub const READYZ_TIMEOUT: Duration = Duration::from_secs(2);

/// One apiserver's `/readyz`, under [`READYZ_TIMEOUT`].
pub struct ReadyProbe {
    client: reqwest::Client,
    base: String,
    options: DiscoveryOptions,
}

impl ReadyProbe {
    /// Whether the apiserver wants new requests: `/readyz` answers 200.
    /// kube fails it from SIGTERM on, through `--shutdown-delay-duration`
    /// (while it still serves), until its listener closes — and while it
    /// starts; the failure says which ([`FetchError::NotReady`]). See
    /// [`fetch::readyz`] for answers that count as ready.
    pub async fn check(&self) -> Result<(), DiscoveryError> {
        fetch::readyz(&self.client, &self.base, &self.options).await.map_err(|source| DiscoveryError::Fetch { path: "/readyz".into(), source })
    }
}

#[derive(Debug, Clone)]
pub struct DiscoveryOptions {
    pub timeout: Duration,
    pub max_document_bytes: usize,
    /// `serve --apiserver-h2c`: plaintext apiservers are asked in HTTP/2
    /// (a failure says when one seems to speak HTTP/1.1 only).
    pub plaintext_h2c: bool,
}

impl Default for DiscoveryOptions {
    fn default() -> Self {
        DiscoveryOptions { timeout: Duration::from_secs(10), max_document_bytes: 64 << 20, plaintext_h2c: false }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("{path}: {source}")]
    Fetch { path: String, source: FetchError },
    #[error("{path}: {source}")]
    Document { path: String, source: aggregated::DocumentError },
}

/// Discovery of one apiserver, keeping the ETag of each aggregated document
/// so an unchanged poll costs a 304.
pub struct Discoverer {
    spec: ApiserverSpec,
    transport: Transport,
    /// The TLS client for the address and credentials it was built with.
    connected: Option<(SocketAddr, Arc<rustls::ClientConfig>, reqwest::Client)>,
    base: String,
    options: DiscoveryOptions,
    /// Each aggregated root's ETag and view: a 304 hands back the same `Arc`.
    cache: HashMap<&'static str, (String, Arc<RootView>)>,
    /// The last read's roots and the view built from them: when both roots
    /// come back unchanged, so does the view (same `Arc`, nothing rebuilt).
    last: Option<(Arc<RootView>, Arc<RootView>, Arc<ServerView>)>,
    /// Group-versions every discoverer asks servers without aggregated
    /// discovery about.
    known: KnownGroupVersions,
    /// When this server's view was last recorded in `known`.
    recorded_at: Option<std::time::Instant>,
    /// A server without aggregated discovery: per root, the list it was
    /// probed for and the result (see [`Discoverer::probe_again`]).
    probed: HashMap<&'static str, Probed>,
    /// Set by the caller after a health transition: probe in full.
    force_probe: bool,
    /// The last read of its OpenAPI documents ([`openapi`]).
    openapi: Option<openapi::OpenApiRead>,
    /// Set after a health transition: read OpenAPI again.
    force_openapi: bool,
}

/// An old server's full probe of one root, reused while nothing suggests a
/// change: its list answers the same bytes, no group-version became known,
/// and [`FULL_PROBE_EVERY`] has not passed.
struct Probed {
    list_digest: [u8; 32],
    /// [`KnownGroupVersions::generation`] when probed.
    known: u64,
    at: std::time::Instant,
    view: Arc<RootView>,
    /// Group-versions whose documents failed: asked again every round,
    /// alone, while the rest is reused.
    failing: Vec<(String, String)>,
}

/// How often an old server is probed in full even when nothing suggests a
/// change (a restart between two polls with the same list, say).
pub const FULL_PROBE_EVERY: Duration = Duration::from_secs(30);

impl Discoverer {
    pub fn new(spec: &ApiserverSpec, transport: Transport, options: DiscoveryOptions, known: KnownGroupVersions) -> Discoverer {
        Discoverer { spec: spec.clone(), transport, connected: None, base: spec.base(), options, cache: HashMap::new(), last: None, known, recorded_at: None, probed: HashMap::new(), force_probe: true, openapi: None, force_openapi: true }
    }

    fn client(&mut self, address: Option<SocketAddr>) -> Result<reqwest::Client, DiscoveryError> {
        let fail = |msg: String| DiscoveryError::Fetch { path: "/".into(), source: FetchError::Transport(msg) };
        match &self.transport {
            Transport::Plain(c) => Ok(c.clone()),
            Transport::Tls { config, server_name, identity, headers } => {
                let addr = address.ok_or_else(|| fail("no resolved address yet".into()))?;
                let config = config.borrow().clone();
                if let Some((a, with, c)) = &self.connected
                    && *a == addr
                    && Arc::ptr_eq(with, &config)
                {
                    return Ok(c.clone());
                }
                let mut headers = headers.clone();
                if let Some((name, user)) = identity {
                    let name = reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|e| fail(e.to_string()))?;
                    let value = reqwest::header::HeaderValue::from_str(user).map_err(|e| fail(e.to_string()))?;
                    headers.insert(name, value);
                }
                let client = reqwest::Client::builder()
                    .use_preconfigured_tls((*config).clone())
                    .resolve(server_name, addr)
                    .default_headers(headers)
                    .no_proxy()
                    .connect_timeout(Duration::from_secs(3))
                    .build()
                    .map_err(|e| fail(e.to_string()))?;
                self.base = format!("https://{server_name}:{}", self.spec.port());
                self.connected = Some((addr, config, client.clone()));
                Ok(client)
            }
        }
    }

    /// Asks for a full read next time (after a health transition: a server
    /// that comes back may be another release).
    pub fn force_full_read(&mut self) {
        self.force_probe = true;
        self.force_openapi = true;
    }

    /// Whether an old server's root must be probed in full again. A steady
    /// round costs its two list GETs only; the probe (one GET per known
    /// group-version) runs when something may have changed.
    fn probe_again(&self, p: &Probed, digest: &[u8; 32]) -> bool {
        self.force_probe || p.list_digest != *digest || p.known != self.known.generation() || p.at.elapsed() >= FULL_PROBE_EVERY
    }

    /// One full read of the server's discovery. Any failure fails the whole
    /// read: a partial view would make the table claim less than the server
    /// serves and reroute its own requests away from it — except one old
    /// server's group-version whose backend fails, which keeps what was
    /// read of it before (see [`Discoverer::unaggregated`]).
    ///
    /// An unchanged server (304 on both roots) costs O(1): the previous view
    /// is returned as it is, so nothing downstream compares or rebuilds.
    pub async fn discover(&mut self, address: Option<SocketAddr>) -> Result<Arc<ServerView>, DiscoveryError> {
        let client = self.client(address)?;
        let core = self.root(&client, "/api", Root::Core).await?;
        let groups = self.root(&client, "/apis", Root::Groups).await?;
        self.force_probe = false;
        if let Some((c, g, view)) = &self.last
            && Arc::ptr_eq(c, &core)
            && Arc::ptr_eq(g, &groups)
        {
            // What it serves stays known while it serves it (`known`
            // forgets what nobody listed or served for an hour).
            if self.recorded_at.is_none_or(|at| at.elapsed() >= known::FORGET_AFTER / 4) {
                self.known.record(g.groups.iter().flat_map(|g| g.versions.iter().map(move |v| (g.name(), v.version.as_str()))));
                self.recorded_at = Some(std::time::Instant::now());
            }
            return Ok(view.clone());
        }
        // A kube-apiserver always serves core v1 and some named groups; a
        // valid but empty answer is a broken one (a misconfigured proxy, a
        // server mid-start), not "it serves nothing now": the last good view
        // is kept instead of routing its APIs away to 404s.
        let empty = |path: &str, what: &str| DiscoveryError::Document {
            path: path.into(),
            source: aggregated::DocumentError::Invalid(format!("lists no {what}; a kube-apiserver always serves some, so this answer is treated as broken")),
        };
        if core.capabilities.groups.get("").is_none_or(|v| v.is_empty()) {
            return Err(empty("/api", "core version"));
        }
        if groups.capabilities.groups.is_empty() {
            return Err(empty("/apis", "API group"));
        }
        self.known.record(groups.groups.iter().flat_map(|g| g.versions.iter().map(move |v| (g.name(), v.version.as_str()))));
        self.recorded_at = Some(std::time::Instant::now());
        let mut capabilities = core.capabilities.clone();
        capabilities.merge(groups.capabilities.clone());
        let view = Arc::new(ServerView { capabilities, groups: groups.groups.clone() });
        self.last = Some((core, groups, view.clone()));
        Ok(view)
    }

    /// Whether the apiserver wants new requests (see [`ReadyProbe::check`]).
    pub async fn read_ready(&mut self, address: Option<SocketAddr>) -> Result<(), DiscoveryError> {
        self.ready_probe(address)?.check().await
    }

    /// A `/readyz` probe of this apiserver that can run while one of its
    /// reads is in flight (the same client and connections).
    pub fn ready_probe(&mut self, address: Option<SocketAddr>) -> Result<ReadyProbe, DiscoveryError> {
        let options = DiscoveryOptions { timeout: self.options.timeout.min(READYZ_TIMEOUT), ..self.options.clone() };
        Ok(ReadyProbe { client: self.client(address)?, base: self.base.clone(), options })
    }

    /// The apiserver's release (`/version`'s `gitVersion`), for operators;
    /// with ` (emulating X.Y)` when it runs as an older release
    /// (`--emulated-version`: kube 1.31+'s `emulationMajor`/`emulationMinor`)
    /// — the release whose APIs it serves, what an upgrade moves.
    pub async fn read_version(&mut self, address: Option<SocketAddr>) -> Result<String, DiscoveryError> {
        let client = self.client(address)?;
        match self.get(&client, "/version", "application/json", None).await? {
            Fetched::Ok { body, .. } => aggregated::parse::<Version>("version.Info", &body)
                .map(Version::release)
                .map_err(|source| DiscoveryError::Document { path: "/version".into(), source }),
            _ => Err(DiscoveryError::Fetch { path: "/version".into(), source: FetchError::Status(404) }),
        }
    }

    async fn root(&mut self, client: &reqwest::Client, path: &'static str, root: Root) -> Result<Arc<RootView>, DiscoveryError> {
        let etag = self.cache.get(path).map(|(e, _)| e.as_str());
        let fetched = self.get(client, path, DISCOVERY_ACCEPT, etag).await?;
        match fetched {
            Fetched::NotModified => match self.cache.get(path) {
                Some((_, view)) => Ok(view.clone()),
                None => Err(DiscoveryError::Fetch { path: path.into(), source: FetchError::UnexpectedNotModified }),
            },
            Fetched::Ok { body, content_type, etag } => {
                if content_type.contains("as=APIGroupDiscoveryList") {
                    let previous = self.last.as_ref().map(|(core, groups, _)| if root == Root::Core { core.clone() } else { groups.clone() });
                    // Parsed on the blocking pool: a CRD-heavy document takes
                    // 70–80 ms, which on the runtime would hold up ext_proc
                    // answers queued behind it.
                    let parsed = tokio::task::spawn_blocking(move || aggregated::from_aggregated(root, &body, previous.as_deref()))
                        .await
                        .unwrap_or_else(|e| Err(aggregated::DocumentError::Invalid(format!("parsing did not complete: {e}"))));
                    let view = Arc::new(parsed.map_err(|source| DiscoveryError::Document { path: path.into(), source })?);
                    match etag {
                        Some(e) => {
                            self.cache.insert(path, (e, view.clone()));
                        }
                        None => {
                            self.cache.remove(path);
                        }
                    }
                    Ok(view)
                } else {
                    self.cache.remove(path);
                    let digest: [u8; 32] = sha2::Sha256::digest(&body).into();
                    let mut at = std::time::Instant::now();
                    let only = match self.probed.get(path) {
                        Some(p) if !self.probe_again(p, &digest) => {
                            if p.failing.is_empty() {
                                return Ok(p.view.clone());
                            }
                            at = p.at;
                            Some(p.failing.clone())
                        }
                        _ => None,
                    };
                    let probe = self.unaggregated(client, path, root, &body, only.as_deref()).await?;
                    // An unchanged re-ask hands back the same view.
                    let view = match self.probed.get(path) {
                        Some(p) if only.is_some() && *p.view == probe.view => p.view.clone(),
                        _ => Arc::new(probe.view),
                    };
                    let probed = Probed { list_digest: digest, known: self.known.generation(), at, view: view.clone(), failing: probe.failing };
                    self.probed.insert(path, probed);
                    Ok(view)
                }
            }
            Fetched::NotFound => Err(DiscoveryError::Fetch { path: path.into(), source: FetchError::Status(404) }),
        }
    }

    async fn get(&self, client: &reqwest::Client, path: &str, accept: &str, etag: Option<&str>) -> Result<Fetched, DiscoveryError> {
        fetch::get(client, &self.base, path, accept, etag, &self.options)
            .await
            .map_err(|source| DiscoveryError::Fetch { path: path.into(), source })
    }
}

/// kube's `version.Info`, what the front door reads of it.
#[derive(serde::Deserialize)]
struct Version {
    #[serde(rename = "gitVersion")]
    git_version: String,
    #[serde(rename = "emulationMajor", default)]
    emulation_major: Option<String>,
    #[serde(rename = "emulationMinor", default)]
    emulation_minor: Option<String>,
}

impl Version {
    fn release(self) -> String {
        let git = self.git_version.strip_prefix('v').unwrap_or(&self.git_version);
        match (self.emulation_major, self.emulation_minor) {
            (Some(major), Some(minor)) if !git.starts_with(&format!("{major}.{minor}.")) && git != format!("{major}.{minor}") => format!("{} (emulating {major}.{minor})", self.git_version),
            _ => self.git_version,
        }
    }
}

#[cfg(test)]
mod version_tests {
    use super::Version;

    #[test]
    fn an_emulated_release_is_named() {
        let v = |json: &str| serde_json::from_str::<Version>(json).unwrap().release();
        assert_eq!(v(r#"{"gitVersion":"v1.37.2","emulationMajor":"1","emulationMinor":"35"}"#), "v1.37.2 (emulating 1.35)");
        assert_eq!(v(r#"{"gitVersion":"v1.37.2","emulationMajor":"1","emulationMinor":"37"}"#), "v1.37.2");
        assert_eq!(v(r#"{"gitVersion":"v1.20.2"}"#), "v1.20.2");
    }
}
