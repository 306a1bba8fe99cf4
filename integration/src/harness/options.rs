//! How a test's front door is set up ([`Options`]) and where its processes
//! keep their logs and files ([`Workdir`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use super::tools::FilterBuild;
use super::topology::Ports;
use crate::pki::Pki;

#[derive(Clone, Debug)]
pub struct Options {
    pub refresh_interval: Duration,
    pub concurrency: u32,
    /// Edits the rendered bootstrap before Envoy starts (negative tests).
    pub edit_config: Option<fn(String) -> String>,
    /// Extra `mvp-ext-proc serve` flags.
    pub ext_proc_args: Vec<String>,
    /// Bearer token mvp-ext-proc sends with its discovery requests.
    pub discovery_token: Option<String>,
    /// TLS everywhere (see [`Topology::tls`]).
    pub tls: Option<Arc<Pki>>,
    /// Fixed ports (the demo's): the front door's, then one per fake in
    /// order. Free ones otherwise.
    pub fixed_ports: Option<(Ports, Vec<u16>)>,
    /// Where process logs go; a temporary directory otherwise.
    pub dir: Option<PathBuf>,
    /// Live membership: the fakes share membership objects (Endpoints,
    /// identity Leases) and mvp-ext-proc follows these sources
    /// (`endpoints`, `leases`, or `endpoints,leases`) besides its seed.
    pub membership: Option<&'static str>,
    /// With live membership: only the first this many fakes are
    /// `--apiserver` seeds; the others are members only while the cluster's
    /// objects name them (all fakes are seeds otherwise).
    pub seeds: Option<usize>,
    /// Envoy reaches mvp-ext-proc over a Unix socket in the work directory
    /// (see [`Topology::grpc_unix`]).
    pub grpc_over_unix: bool,
    /// mvp-ext-proc replicas (1: one process). Envoy lists them all, the
    /// first preferred ([`Topology::standbys`]).
    pub replicas: usize,
    /// `envoy-config --hold-unavailable` (the product's default otherwise).
    pub hold_unavailable: Option<Duration>,
    /// The routing filter build (`MVP_FILTER`'s otherwise).
    pub filter: Option<FilterBuild>,
    /// Extra `mvp-ext-proc envoy-config` flags.
    pub envoy_config_args: Vec<String>,
    /// When the front door counts as started: Envoy ready and routing by a
    /// table this accepts (by default one in which every apiserver is
    /// healthy).
    pub ready_when: Option<fn(&serde_json::Value) -> bool>,
    /// Envoy runs with a container's memory limit of this many bytes
    /// ([`super::container`]).
    pub envoy_memory_limit: Option<u64>,
    /// The bearer token the harness shows mvp-ext-proc's operator endpoints
    /// (`serve --authentication-kubeconfig` in `ext_proc_args`).
    pub operator_token: Option<String>,
    /// Every replica is told every replica's operator endpoint (`serve
    /// --replica`, itself among them): each adds the others' skew-log
    /// counts.
    pub replica_peers: bool,
}

impl Options {
    /// The harness's own client for Envoy's admin and mvp-ext-proc's
    /// operator endpoints (with [`Options::operator_token`]).
    pub fn harness_client(&self) -> anyhow::Result<reqwest::Client> {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(t) = &self.operator_token {
            headers.insert(reqwest::header::AUTHORIZATION, format!("Bearer {t}").parse()?);
        }
        Ok(reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(30)).default_headers(headers).build()?)
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            refresh_interval: Duration::from_secs(1),
            concurrency: 2,
            edit_config: None,
            ext_proc_args: vec![],
            operator_token: None,
            replica_peers: false,
            discovery_token: None,
            tls: None,
            fixed_ports: None,
            dir: None,
            membership: None,
            seeds: None,
            grpc_over_unix: false,
            replicas: 1,
            hold_unavailable: None,
            filter: None,
            envoy_config_args: vec![],
            ready_when: None,
            envoy_memory_limit: None,
        }
    }
}

/// The directory holding a front door's logs and files.
pub struct Workdir {
    path: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

impl Workdir {
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn new(options: &Options) -> Result<Workdir> {
        Ok(match &options.dir {
            Some(p) => {
                std::fs::create_dir_all(p)?;
                Workdir { path: p.clone(), _temp: None }
            }
            None => {
                let t = tempfile::Builder::new().prefix("mvp-e2e-").tempdir()?;
                Workdir { path: t.path().to_path_buf(), _temp: Some(t) }
            }
        })
    }
}

