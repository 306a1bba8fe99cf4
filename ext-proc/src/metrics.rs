//! Prometheus metrics and the small HTTP admin surface (`/metrics`,
//! `/healthz`, `/readyz`, `/table`). Names follow kube-apiserver's where the
//! concept is the same (`apiserver_peer_discovery_sync_errors_total`).

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use mvp_protos::routing::v1 as pb;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::sync::Published;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SyncErrorLabels {
    apiserver: String,
    r#type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiserverLabels {
    apiserver: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

pub struct Metrics {
    registry: Mutex<Registry>,
    sync_errors: Family<SyncErrorLabels, Counter>,
    healthy: Family<ApiserverLabels, Gauge>,
    resources: Family<ApiserverLabels, Gauge>,
    table_updates: Counter,
    table_resources: Gauge,
    table_requests: Family<ResultLabels, Counter>,
    peer_aggregated_hits: Counter,
    peer_aggregated_misses: Counter,
    nopeer_requests: Counter,
    rewrites: Family<ResultLabels, Counter>,
}

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        let mut registry = Registry::default();
        let m = Metrics {
            registry: Mutex::new(Registry::default()),
            sync_errors: Family::default(),
            healthy: Family::default(),
            resources: Family::default(),
            table_updates: Counter::default(),
            table_resources: Gauge::default(),
            table_requests: Family::default(),
            peer_aggregated_hits: Counter::default(),
            peer_aggregated_misses: Counter::default(),
            nopeer_requests: Counter::default(),
            rewrites: Family::default(),
        };
        registry.register(
            "apiserver_peer_discovery_sync_errors",
            "Failed discovery reads of an apiserver, by type (fetch_discovery, hostport_resolution)",
            m.sync_errors.clone(),
        );
        registry.register("mvp_apiserver_healthy", "1 when the apiserver's last discovery read succeeded", m.healthy.clone());
        registry.register("mvp_apiserver_resources", "Group/version/resources the apiserver served at its last good read", m.resources.clone());
        registry.register("mvp_routing_table_updates", "Times the routing table changed", m.table_updates.clone());
        registry.register("mvp_routing_table_resources", "Group/version/resources in the current routing table", m.table_resources.clone());
        registry.register(
            "mvp_routing_table_requests",
            "GetTable calls from Envoy, by result (current, sent, unavailable)",
            m.table_requests.clone(),
        );
        // Named after kube-apiserver's aggregated discovery metrics.
        registry.register(
            "aggregator_discovery_peer_aggregated_cache_hits",
            "Peer-aggregated /apis responses served from the cached merged document",
            m.peer_aggregated_hits.clone(),
        );
        registry.register(
            "aggregator_discovery_peer_aggregated_cache_misses",
            "Times the peer-aggregated document was rebuilt",
            m.peer_aggregated_misses.clone(),
        );
        registry.register(
            "aggregator_discovery_nopeer_requests",
            "/apis requests for the answering apiserver's own view (profile=nopeer)",
            m.nopeer_requests.clone(),
        );
        registry.register(
            "mvp_discovery_rewrites",
            "/apis exchanges by outcome (merged, group_list, not_modified, nopeer, passthrough, upstream_status, not_rewritable)",
            m.rewrites.clone(),
        );
        *m.registry.lock().unwrap_or_else(|p| p.into_inner()) = registry;
        Arc::new(m)
    }

    pub fn sync_error(&self, apiserver: &str, kind: &str) {
        self.sync_errors
            .get_or_create(&SyncErrorLabels { apiserver: apiserver.into(), r#type: kind.into() })
            .inc();
    }

    pub fn apiserver_healthy(&self, apiserver: &str, healthy: bool) {
        self.healthy.get_or_create(&ApiserverLabels { apiserver: apiserver.into() }).set(i64::from(healthy));
    }

    pub fn apiserver_resources(&self, apiserver: &str, n: usize) {
        self.resources.get_or_create(&ApiserverLabels { apiserver: apiserver.into() }).set(n as i64);
    }

    pub fn table_changed(&self, t: &pb::RoutingTable) {
        self.table_updates.inc();
        self.table_resources.set(crate::table::resource_count(t) as i64);
    }

    pub fn table_request(&self, result: &str) {
        self.table_requests.get_or_create(&ResultLabels { result: result.into() }).inc();
    }

    pub fn peer_aggregated_cache_hit(&self) {
        self.peer_aggregated_hits.inc();
    }

    pub fn peer_aggregated_cache_miss(&self) {
        self.peer_aggregated_misses.inc();
    }

    pub fn nopeer_request(&self) {
        self.nopeer_requests.inc();
    }

    pub fn discovery_rewrite(&self, result: &str) {
        self.rewrites.get_or_create(&ResultLabels { result: result.into() }).inc();
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

#[derive(Clone)]
struct AdminState {
    metrics: Arc<Metrics>,
    published: Published,
}

pub fn admin_router(metrics: Arc<Metrics>, published: Published) -> axum::Router {
    axum::Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/table", get(table_handler))
        .with_state(AdminState { metrics, published })
}

async fn metrics_handler(State(s): State<AdminState>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        s.metrics.encode(),
    )
        .into_response()
}

/// Ready once the first discovery round has produced a table.
async fn readyz(State(s): State<AdminState>) -> Response {
    if s.published.table.borrow().version == 0 {
        (StatusCode::SERVICE_UNAVAILABLE, "first discovery round still running").into_response()
    } else {
        "ok".into_response()
    }
}

/// The current table and each apiserver's health, for operators and tests.
async fn table_handler(State(s): State<AdminState>) -> Response {
    let table = s.published.table.borrow().clone();
    let states = s.published.states.borrow().clone();
    let merged = s.published.merged.borrow().clone();
    let apiservers: Vec<serde_json::Value> = states
        .iter()
        .map(|st| {
            serde_json::json!({
                "name": st.spec.name,
                "url": st.spec.url.as_str(),
                "address": st.address.map(|a| a.to_string()),
                "healthy": st.healthy,
                "resources": st.view.as_ref().map(|v| v.capabilities.resource_count()),
                "lastError": st.last_error,
            })
        })
        .collect();
    axum::Json(serde_json::json!({
        "version": table.version.to_string(),
        "resources": crate::table::resource_count(&table),
        "bytes": prost::Message::encoded_len(&*table),
        "apiservers": apiservers,
        "discovery": merged.map(|m| serde_json::json!({
            "etag": m.etag,
            "groups": m.items.len(),
            "bytes": m.json.identity.len(),
            "sources": m.sources,
        })),
    }))
    .into_response()
}
