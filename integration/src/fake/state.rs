//! What every handler of a fake apiserver shares: its state (documents,
//! authentication, counters). kube's response shapes: [`super::responses`].

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};

use axum::body::Bytes;

use super::fixtures::Documents;

/// kube's aggregated discovery media type (written here, not taken from
/// the product the fakes check).
pub const AGGREGATED_V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

#[derive(Clone)]
pub struct FakeState {
    pub name: String,
    /// Old servers (< 1.26) have no aggregated discovery at all.
    pub aggregated: bool,
    pub fixtures: std::path::PathBuf,
    pub docs: Arc<RwLock<Arc<Documents>>>,
    /// `group/version`s the unaggregated `/apis` lists without serving them,
    /// as kube-aggregator does for APIService objects served elsewhere.
    pub listed_only: Vec<String>,
    /// Group-versions it serves but leaves out of its `/apis` list.
    pub unlisted: Vec<String>,
    /// `v2`, or `v2beta1` to act as a Kubernetes 1.26–1.29 server (1.30–1.32
    /// served both; 1.33+ only v2).
    pub aggregated_version: String,
    pub stats: Arc<Stats>,
    /// When set, served verbatim as the aggregated `/apis` body (tests of
    /// broken and oversized documents).
    pub apis_override: Arc<RwLock<Option<ApisOverride>>>,
    /// When set, discovery requests (`/api`, `/apis`) are accepted and never
    /// answered: a hung apiserver.
    pub hang_discovery: Arc<std::sync::atomic::AtomicBool>,
    /// `group/version`s whose backend is down (an aggregated APIService
    /// such as metrics-server): still listed, every request under them —
    /// their discovery document too — answers kube-aggregator's 503.
    pub unavailable: Arc<RwLock<Vec<String>>>,
    /// The next resource requests fail this way (`/__fake/fail-next`).
    pub fail_next: Arc<std::sync::Mutex<(u64, FailHow)>>,
    /// Who may call: API requests (not health, not test control) that no
    /// configured authenticator accepts get kube's 401 Status.
    pub auth: super::auth::AuthConfig,
    /// The control plane's shared membership objects (`--cluster-state`).
    pub cluster: Option<Arc<super::membership::ClusterState>>,
    /// Set at SIGTERM: `/readyz` fails while requests are still served for
    /// the shutdown delay, as kube-apiserver does.
    pub shutting_down: Arc<std::sync::atomic::AtomicBool>,
    /// `/readyz` fails when asked with this header (name, value).
    pub readyz_fails_with_header: Option<(String, String)>,
    /// `/readyz` fails until then (`--starting-for`): a server starting;
    /// `POST /__fake/started` ends it at once.
    pub starting_until: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
}

/// A broken `/apis` answer a test asked for (`POST /__fake/apis-body`).
#[derive(Clone, Debug)]
pub struct ApisOverride {
    pub body: Bytes,
    pub status: u16,
    pub content_type: String,
    /// Sent as `Content-Encoding` whether or not the client asked for it.
    pub content_encoding: Option<String>,
    /// A new ETag on every answer for the same body.
    pub flapping_etag: bool,
}

/// How `/__fake/fail-next` fails a request.
#[derive(Clone, Copy, Debug, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailHow {
    /// The connection is dropped before any response byte (a server that
    /// dies with the request in flight).
    #[default]
    Reset,
    /// kube's 429 while it shuts down (`--shutdown-send-retry-after`).
    ShuttingDown,
}

/// What the fake counted, at `GET /__fake/stats`.
#[derive(Default)]
pub struct Stats {
    pub aggregated_ok: AtomicU64,
    pub not_modified: AtomicU64,
    pub resource_requests: AtomicU64,
    /// Unaggregated discovery: `/api` and `/apis` lists…
    pub list_requests: AtomicU64,
    /// …and per-group-version documents (`/api/v1`, `/apis/{g}/{v}`).
    pub group_version_requests: AtomicU64,
    /// Discovery requests left hanging (`/__fake/hang-discovery`).
    pub hung: AtomicU64,
    /// TCP connections accepted, and open now ([`super::connections`]).
    pub connections_accepted: AtomicU64,
    pub connections_open: AtomicU64,
    /// Events sent on held watches (`?events_every_ms=N`).
    pub watch_events: AtomicU64,
    /// Profiler requests (`/debug/pprof/…`).
    pub profile_requests: AtomicU64,
}

impl FakeState {
    /// Still starting (`--starting-for`): `/readyz` fails.
    pub fn starting(&self) -> bool {
        self.starting_until.lock().unwrap_or_else(|p| p.into_inner()).is_some_and(|until| std::time::Instant::now() < until)
    }

    pub(super) fn docs(&self) -> Arc<Documents> {
        self.docs.read().map(|d| d.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }
}
