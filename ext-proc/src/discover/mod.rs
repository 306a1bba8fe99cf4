//! apiservers → discover: reads what each apiserver itself serves.
//!
//! Aggregated discovery (`/api`, `/apis`, with `profile=nopeer` so an
//! apiserver that peer-aggregates answers with its own view only) when the
//! server has it; otherwise the unaggregated documents of servers older than
//! Kubernetes 1.26, where a group-version counts only if its own
//! `/apis/{g}/{v}` answers 200 (the `/apis` group list comes from
//! cluster-wide APIService objects and can name group-versions this server
//! does not serve).

pub mod capabilities;
pub mod documents;
mod fetch;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use capabilities::Capabilities;
use documents::{ApiGroupList, ApiVersions, Root, RootView};
pub use fetch::{FetchError, Fetched};

use crate::apidiscovery::{APIGroupDiscovery, version_from_resource_list};

/// Everything one read of a server's discovery yields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerView {
    pub capabilities: Capabilities,
    /// Its `/apis` groups as it serves them (its own view: `profile=nopeer`).
    pub groups: Vec<APIGroupDiscovery>,
}

use crate::apiservers::ApiserverSpec;

/// Exactly client-go's `AcceptV2NoPeer` list, plus v2beta1 for 1.26–1.32
/// servers that lack v2, then unaggregated JSON for older ones.
pub const DISCOVERY_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

#[derive(Debug, Clone)]
pub struct DiscoveryOptions {
    pub timeout: Duration,
    pub max_document_bytes: usize,
}

impl Default for DiscoveryOptions {
    fn default() -> Self {
        DiscoveryOptions { timeout: Duration::from_secs(10), max_document_bytes: 64 << 20 }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("{path}: {source}")]
    Fetch { path: String, source: FetchError },
    #[error("{path}: {source}")]
    Document { path: String, source: documents::DocumentError },
}

/// How discovery requests reach apiservers.
#[derive(Clone)]
pub enum Transport {
    Plain(reqwest::Client),
    /// mTLS like Envoy's: connect to the apiserver's resolved address, send
    /// SNI `server_name` and require a certificate for it from the peer CA.
    Tls {
        config: Arc<rustls::ClientConfig>,
        server_name: String,
        /// (header, user) naming who asks, when the proxy client certificate
        /// makes the apiserver trust requestheaders.
        identity: Option<(String, String)>,
        headers: reqwest::header::HeaderMap,
    },
}

/// Discovery of one apiserver, keeping the ETag of each aggregated document
/// so an unchanged poll costs a 304.
pub struct Discoverer {
    spec: ApiserverSpec,
    transport: Transport,
    /// The TLS client for the address it was built for.
    connected: Option<(SocketAddr, reqwest::Client)>,
    base: String,
    options: DiscoveryOptions,
    cache: HashMap<&'static str, (String, RootView)>,
}

impl Discoverer {
    pub fn new(spec: &ApiserverSpec, transport: Transport, options: DiscoveryOptions) -> Discoverer {
        Discoverer { spec: spec.clone(), transport, connected: None, base: spec.base(), options, cache: HashMap::new() }
    }

    fn client(&mut self, address: Option<SocketAddr>) -> Result<reqwest::Client, DiscoveryError> {
        let fail = |msg: String| DiscoveryError::Fetch { path: "/".into(), source: FetchError::Transport(msg) };
        match &self.transport {
            Transport::Plain(c) => Ok(c.clone()),
            Transport::Tls { config, server_name, identity, headers } => {
                let addr = address.ok_or_else(|| fail("no resolved address yet".into()))?;
                if let Some((a, c)) = &self.connected
                    && *a == addr
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
                    .use_preconfigured_tls((**config).clone())
                    .resolve(server_name, addr)
                    .default_headers(headers)
                    .no_proxy()
                    .connect_timeout(Duration::from_secs(3))
                    .build()
                    .map_err(|e| fail(e.to_string()))?;
                self.base = format!("https://{server_name}:{}", self.spec.port());
                self.connected = Some((addr, client.clone()));
                Ok(client)
            }
        }
    }

    /// One full read of the server's discovery. Any failure fails the whole
    /// read: a partial view would make the table claim less than the server
    /// serves and reroute its own requests away from it.
    pub async fn discover(&mut self, address: Option<SocketAddr>) -> Result<ServerView, DiscoveryError> {
        let client = self.client(address)?;
        let core = self.root(&client, "/api", Root::Core).await?;
        let groups = self.root(&client, "/apis", Root::Groups).await?;
        let mut capabilities = core.capabilities;
        capabilities.merge(groups.capabilities);
        Ok(ServerView { capabilities, groups: groups.groups })
    }

    async fn root(&mut self, client: &reqwest::Client, path: &'static str, root: Root) -> Result<RootView, DiscoveryError> {
        let etag = self.cache.get(path).map(|(e, _)| e.as_str());
        let fetched = self.get(client, path, DISCOVERY_ACCEPT, etag).await?;
        match fetched {
            Fetched::NotModified => match self.cache.get(path) {
                Some((_, view)) => Ok(view.clone()),
                None => Err(DiscoveryError::Fetch { path: path.into(), source: FetchError::UnexpectedNotModified }),
            },
            Fetched::Ok { body, content_type, etag } => {
                if content_type.contains("as=APIGroupDiscoveryList") {
                    let view = documents::from_aggregated(root, &body)
                        .map_err(|source| DiscoveryError::Document { path: path.into(), source })?;
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
                    self.unaggregated(client, path, root, &body).await
                }
            }
            Fetched::NotFound => Err(DiscoveryError::Fetch { path: path.into(), source: FetchError::Status(404) }),
        }
    }

    /// Servers without aggregated discovery: every listed group-version's
    /// own document, converted to the aggregated form kube would serve.
    async fn unaggregated(&self, client: &reqwest::Client, path: &str, root: Root, body: &[u8]) -> Result<RootView, DiscoveryError> {
        let doc_err = |path: &str| {
            let path = path.to_string();
            move |source| DiscoveryError::Document { path, source }
        };
        let mut groups: Vec<APIGroupDiscovery> = Vec::new();
        let group_versions: Vec<(String, String)> = match root {
            Root::Core => documents::parse::<ApiVersions>("APIVersions", body)
                .map_err(doc_err(path))?
                .versions
                .into_iter()
                .map(|v| (String::new(), v))
                .collect(),
            Root::Groups => documents::parse::<ApiGroupList>("APIGroupList", body)
                .map_err(doc_err(path))?
                .groups
                .into_iter()
                .flat_map(|g| {
                    let name = g.name;
                    g.versions.into_iter().map(move |v| (name.clone(), v.version))
                })
                .collect(),
        };
        for (group, version) in group_versions {
            let gv_path = if group.is_empty() {
                format!("/api/{version}")
            } else {
                format!("/apis/{group}/{version}")
            };
            match self.get(client, &gv_path, "application/json", None).await? {
                Fetched::Ok { body, .. } => {
                    let list = documents::resource_list(&group, &version, &body).map_err(doc_err(&gv_path))?;
                    let v = version_from_resource_list(&version, &list);
                    match groups.iter_mut().find(|g| g.name() == group) {
                        Some(g) => g.versions.push(v),
                        None => groups.push(APIGroupDiscovery {
                            metadata: crate::apidiscovery::ObjectMeta { name: group.clone() },
                            versions: vec![v],
                        }),
                    }
                }
                // Listed (cluster-wide APIService) but not served here.
                Fetched::NotFound => {}
                Fetched::NotModified => {}
            }
        }
        let capabilities = documents::capabilities_of(root, &groups).map_err(doc_err(path))?;
        Ok(RootView { capabilities, groups: if root == Root::Groups { groups } else { vec![] } })
    }

    async fn get(&self, client: &reqwest::Client, path: &str, accept: &str, etag: Option<&str>) -> Result<Fetched, DiscoveryError> {
        fetch::get(client, &self.base, path, accept, etag, &self.options)
            .await
            .map_err(|source| DiscoveryError::Fetch { path: path.into(), source })
    }
}
