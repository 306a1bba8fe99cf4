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
use std::time::Duration;

pub use capabilities::Capabilities;
use documents::{ApiGroupList, ApiVersions, Root};
pub use fetch::{FetchError, Fetched};

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

/// Discovery of one apiserver, keeping the ETag of each aggregated document
/// so an unchanged poll costs a 304.
pub struct Discoverer {
    base: String,
    client: reqwest::Client,
    options: DiscoveryOptions,
    cache: HashMap<&'static str, (String, Capabilities)>,
}

impl Discoverer {
    pub fn new(spec: &ApiserverSpec, client: reqwest::Client, options: DiscoveryOptions) -> Discoverer {
        Discoverer { base: spec.base(), client, options, cache: HashMap::new() }
    }

    /// One full read of the server's discovery. Any failure fails the whole
    /// read: a partial view would make the table claim less than the server
    /// serves and reroute its own requests away from it.
    pub async fn discover(&mut self) -> Result<Capabilities, DiscoveryError> {
        let mut caps = self.root("/api", Root::Core).await?;
        caps.merge(self.root("/apis", Root::Groups).await?);
        Ok(caps)
    }

    async fn root(&mut self, path: &'static str, root: Root) -> Result<Capabilities, DiscoveryError> {
        let etag = self.cache.get(path).map(|(e, _)| e.as_str());
        let fetched = self.get(path, DISCOVERY_ACCEPT, etag).await?;
        match fetched {
            Fetched::NotModified => match self.cache.get(path) {
                Some((_, caps)) => Ok(caps.clone()),
                None => Err(DiscoveryError::Fetch { path: path.into(), source: FetchError::UnexpectedNotModified }),
            },
            Fetched::Ok { body, content_type, etag } => {
                if content_type.contains("as=APIGroupDiscoveryList") {
                    let caps = documents::from_aggregated(root, &body)
                        .map_err(|source| DiscoveryError::Document { path: path.into(), source })?;
                    match etag {
                        Some(e) => {
                            self.cache.insert(path, (e, caps.clone()));
                        }
                        None => {
                            self.cache.remove(path);
                        }
                    }
                    Ok(caps)
                } else {
                    self.cache.remove(path);
                    self.unaggregated(path, root, &body).await
                }
            }
            Fetched::NotFound => Err(DiscoveryError::Fetch { path: path.into(), source: FetchError::Status(404) }),
        }
    }

    async fn unaggregated(&self, path: &str, root: Root, body: &[u8]) -> Result<Capabilities, DiscoveryError> {
        let doc_err = |path: &str| {
            let path = path.to_string();
            move |source| DiscoveryError::Document { path, source }
        };
        let mut caps = Capabilities::default();
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
            match self.get(&gv_path, "application/json", None).await? {
                Fetched::Ok { body, .. } => {
                    documents::resource_list_into(&mut caps, &group, &version, &body).map_err(doc_err(&gv_path))?
                }
                // Listed (cluster-wide APIService) but not served here.
                Fetched::NotFound => {}
                Fetched::NotModified => {}
            }
        }
        Ok(caps)
    }

    async fn get(&self, path: &str, accept: &str, etag: Option<&str>) -> Result<Fetched, DiscoveryError> {
        fetch::get(&self.client, &self.base, path, accept, etag, &self.options)
            .await
            .map_err(|source| DiscoveryError::Fetch { path: path.into(), source })
    }
}
