//! Prometheus metrics, served on `/metrics` by [`crate::operate::admin`]. Names follow
//! kube-apiserver's where the concept is the same
//! (`apiserver_peer_discovery_sync_errors_total`).

use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SyncErrorLabels {
    apiserver: String,
    r#type: String,
}

/// A resource by the access log's `routedBy` (`apps/v1/deployments`):
/// bounded by the skewed resources the table knows (`usage::MAX_APIS`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiLabels {
    api: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiserverLabels {
    apiserver: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiserverResultLabels {
    apiserver: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabels {
    r#type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChangeLabels {
    change: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RewriteLabels {
    document: String,
    result: String,
}

pub struct Metrics {
    registry: Mutex<Registry>,
    sync_errors: Family<SyncErrorLabels, Counter>,
    healthy: Family<ApiserverLabels, Gauge>,
    resources: Family<ApiserverLabels, Gauge>,
    table_updates: Counter,
    table_resources: Gauge,
    table_changed_at: Gauge,
    table_requests: Family<ResultLabels, Counter>,
    peer_aggregated_hits: Counter,
    peer_aggregated_misses: Counter,
    peer_aggregated_builds: Histogram,
    openapi_merges: Family<ResultLabels, Counter>,
    openapi_reads: Family<ApiserverResultLabels, Counter>,
    nopeer_requests: Counter,
    rewrites: Family<RewriteLabels, Counter>,
    open: Family<ApiserverLabels, Gauge>,
    members: Gauge,
    member_changes: Family<ChangeLabels, Counter>,
    xds_streams: Gauge,
    xds_lagging_streams: Gauge,
    xds_pushes: Family<TypeLabels, Counter>,
    xds_nacks: Family<TypeLabels, Counter>,
    peer_tls_reloads: Family<ResultLabels, Counter>,
    grpc_tls_reloads: Family<ResultLabels, Counter>,
    skewed_requests: Family<ApiLabels, Counter>,
    skew_token_reviews: Family<ResultLabels, Counter>,
    only_older: Family<ApiLabels, Gauge>,
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
            table_changed_at: Gauge::default(),
            table_requests: Family::default(),
            peer_aggregated_hits: Counter::default(),
            peer_aggregated_misses: Counter::default(),
            // 5 ms … ~10 s: a small cluster's rebuild to a 60 MB document's.
            peer_aggregated_builds: Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(0.005, 2.0, 12)),
            openapi_merges: Family::default(),
            openapi_reads: Family::default(),
            nopeer_requests: Counter::default(),
            rewrites: Family::default(),
            open: Family::default(),
            members: Gauge::default(),
            member_changes: Family::default(),
            xds_streams: Gauge::default(),
            xds_lagging_streams: Gauge::default(),
            xds_pushes: Family::default(),
            xds_nacks: Family::default(),
            peer_tls_reloads: Family::default(),
            grpc_tls_reloads: Family::default(),
            skewed_requests: Family::default(),
            skew_token_reviews: Family::default(),
            only_older: Family::default(),
        };
        registry.register(
            "mvp_skewed_api_requests",
            "Requests for a resource only some apiservers serve, by resource (the skew log; who: mvp-ext-proc readiness)",
            m.skewed_requests.clone(),
        );
        registry.register(
            "mvp_skew_token_reviews",
            "TokenReviews of the bearer tokens clients of skewed resources sent, by result (reviewed, rejected, failed; skipped: too many at once, the claim shown unverified)",
            m.skew_token_reviews.clone(),
        );
        registry.register(
            "mvp_api_only_older_releases",
            "1 for each resource only apiservers older than the fleet's newest release serve: served by none once the upgrade finishes",
            m.only_older.clone(),
        );
        registry.register(
            "apiserver_peer_discovery_sync_errors",
            "Failed reads of an apiserver, by type (fetch_discovery, fetch_readyz: unreachable, fetch_openapi, hostport_resolution)",
            m.sync_errors.clone(),
        );
        registry.register("mvp_apiserver_healthy", "1 when the apiserver's last discovery read succeeded", m.healthy.clone());
        registry.register("mvp_apiserver_resources", "Group/version/resources the apiserver served at its last good read", m.resources.clone());
        registry.register("mvp_routing_table_updates", "Times the routing table changed", m.table_updates.clone());
        registry.register("mvp_routing_table_resources", "Group/version/resources in the current routing table", m.table_resources.clone());
        registry.register(
            "mvp_routing_table_last_change_timestamp_seconds",
            "When the routing table last changed (Unix time)",
            m.table_changed_at.clone(),
        );
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
            "mvp_peer_aggregated_build_duration_seconds",
            "Time to merge and encode the peer-aggregated /apis after a change (groups whose inputs did not change are reused)",
            m.peer_aggregated_builds.clone(),
        );
        registry.register(
            "mvp_openapi_merges",
            "Merged OpenAPI documents published after a change of the members' documents, by how (built: merged from scratch; recent: the same documents as one of the last merges, taken from it)",
            m.openapi_merges.clone(),
        );
        registry.register(
            "mvp_apiserver_openapi_reads",
            "Reads of an apiserver's OpenAPI documents, by result (changed: new documents, merged again; unchanged: the same as it had, nothing merged)",
            m.openapi_reads.clone(),
        );
        registry.register(
            "aggregator_discovery_nopeer_requests",
            "/apis requests for the answering apiserver's own view (profile=nopeer)",
            m.nopeer_requests.clone(),
        );
        registry.register(
            "mvp_discovery_rewrites",
            "Exchanges on the merged documents (document: apis, openapi_v2, openapi_v3) by outcome (merged, group_list, not_modified, identical, nopeer, passthrough, upstream_status, not_rewritable)",
            m.rewrites.clone(),
        );
        registry.register(
            "mvp_apiserver_open",
            "1 when the apiserver is sent new requests: ready, its discovery read since it became ready, and known to Envoy",
            m.open.clone(),
        );
        registry.register("mvp_membership_apiservers", "Apiservers in the control plane (departed ones not counted)", m.members.clone());
        registry.register(
            "mvp_membership_changes",
            "Membership changes by kind (joined, departed, restarted, forgotten)",
            m.member_changes.clone(),
        );
        registry.register("mvp_xds_streams", "Connected Envoy ADS streams", m.xds_streams.clone());
        registry.register(
            "mvp_xds_lagging_streams",
            "ADS streams that left endpoints unacknowledged past the grace (or rejected them): joining members do not wait for them",
            m.xds_lagging_streams.clone(),
        );
        registry.register("mvp_xds_pushes", "ADS responses sent, by resource type (cluster, endpoint)", m.xds_pushes.clone());
        registry.register(
            "mvp_xds_nacks",
            "ADS responses Envoy rejected (it keeps its last accepted configuration), by resource type",
            m.xds_nacks.clone(),
        );
        registry.register(
            "mvp_peer_tls_reloads",
            "Changes of the peer TLS files (CA, proxy client certificate and key), by result: loaded, or rejected (the last good credentials stay in use)",
            m.peer_tls_reloads.clone(),
        );
        registry.register(
            "mvp_grpc_tls_reloads",
            "Changes of the gRPC port's TLS files (serving certificate and key, client CA), by result: loaded, or rejected (the last good credentials stay in use)",
            m.grpc_tls_reloads.clone(),
        );
        // Present from the start, so an alert on them has a series to watch.
        for kind in ["cluster", "endpoint"] {
            let _ = m.xds_nacks.get_or_create(&TypeLabels { r#type: kind.into() });
        }
        let _ = m.peer_tls_reloads.get_or_create(&ResultLabels { result: "rejected".into() });
        let _ = m.grpc_tls_reloads.get_or_create(&ResultLabels { result: "rejected".into() });
        *m.registry.lock().unwrap_or_else(|p| p.into_inner()) = registry;
        Arc::new(m)
    }

    /// Every `type` of [`Metrics::sync_error`].
    pub const SYNC_ERROR_TYPES: [&str; 4] = ["hostport_resolution", "fetch_readyz", "fetch_discovery", "fetch_openapi"];

    /// `kind`: one of [`Metrics::SYNC_ERROR_TYPES`].
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

    /// A new table version with `resources` routed resources.
    pub fn table_changed(&self, resources: usize) {
        self.table_updates.inc();
        self.table_resources.set(i64::try_from(resources).unwrap_or(i64::MAX));
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        self.table_changed_at.set(i64::try_from(now).unwrap_or(i64::MAX));
    }

    /// A request the skew log counted for `api`.
    pub fn skewed_request(&self, api: &str) {
        self.skewed_requests.get_or_create(&ApiLabels { api: api.into() }).inc();
    }

    /// One TokenReview of a skewed resource's client, or one skipped.
    pub fn skew_token_review(&self, result: &str) {
        self.skew_token_reviews.get_or_create(&ResultLabels { result: result.into() }).inc();
    }

    /// The resources only older releases serve now (replacing the last set).
    pub fn set_only_older<'a>(&self, apis: impl Iterator<Item = &'a str>) {
        self.only_older.clear();
        for api in apis {
            self.only_older.get_or_create(&ApiLabels { api: api.into() }).set(1);
        }
    }

    pub fn table_request(&self, result: &str) {
        self.table_requests.get_or_create(&ResultLabels { result: result.into() }).inc();
    }

    pub fn peer_aggregated_cache_hit(&self) {
        self.peer_aggregated_hits.inc();
    }

    pub fn peer_aggregated_rebuilt(&self, took: std::time::Duration) {
        self.peer_aggregated_misses.inc();
        self.peer_aggregated_builds.observe(took.as_secs_f64());
    }

    /// A merged OpenAPI published: `built` from scratch, or a recent one.
    pub fn openapi_merged(&self, built: bool) {
        self.openapi_merges.get_or_create(&ResultLabels { result: if built { "built" } else { "recent" }.to_string() }).inc();
    }

    /// An apiserver's OpenAPI documents read: new ones, or the same.
    pub fn openapi_read(&self, apiserver: &str, changed: bool) {
        let result = if changed { "changed" } else { "unchanged" }.to_string();
        self.openapi_reads.get_or_create(&ApiserverResultLabels { apiserver: apiserver.to_string(), result }).inc();
    }

    pub fn nopeer_request(&self) {
        self.nopeer_requests.inc();
    }

    pub fn discovery_rewrite(&self, document: &str, result: &str) {
        self.rewrites.get_or_create(&RewriteLabels { document: document.into(), result: result.into() }).inc();
    }

    pub fn apiserver_open(&self, apiserver: &str, open: bool) {
        self.open.get_or_create(&ApiserverLabels { apiserver: apiserver.into() }).set(i64::from(open));
    }

    /// A member left for good: its per-apiserver series go with it.
    pub fn apiserver_forgotten(&self, apiserver: &str) {
        let l = ApiserverLabels { apiserver: apiserver.into() };
        self.open.remove(&l);
        self.healthy.remove(&l);
        self.resources.remove(&l);
        for kind in Self::SYNC_ERROR_TYPES {
            self.sync_errors.remove(&SyncErrorLabels { apiserver: apiserver.into(), r#type: kind.into() });
        }
    }

    pub fn membership(&self, members: usize) {
        self.members.set(members as i64);
    }

    pub fn membership_change(&self, change: &str) {
        self.member_changes.get_or_create(&ChangeLabels { change: change.into() }).inc();
    }

    pub fn xds_streams(&self, delta: i64) {
        self.xds_streams.inc_by(delta);
    }

    pub fn xds_lagging(&self, delta: i64) {
        self.xds_lagging_streams.inc_by(delta);
    }

    pub fn xds_push(&self, kind: &str) {
        self.xds_pushes.get_or_create(&TypeLabels { r#type: kind.into() }).inc();
    }

    pub fn xds_nack(&self, kind: &str) {
        self.xds_nacks.get_or_create(&TypeLabels { r#type: kind.into() }).inc();
    }

    pub fn grpc_tls_reload(&self, result: &str) {
        self.grpc_tls_reloads.get_or_create(&ResultLabels { result: result.into() }).inc();
    }

    pub fn peer_tls_reload(&self, result: &str) {
        self.peer_tls_reloads.get_or_create(&ResultLabels { result: result.into() }).inc();
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_change_sets_the_count_it_was_given() {
        let m = Metrics::new();
        m.table_changed(3);
        m.table_changed(5);
        let text = m.encode();
        assert!(text.lines().any(|l| l == "mvp_routing_table_resources 5"), "{text}");
        assert!(text.lines().any(|l| l == "mvp_routing_table_updates_total 2"), "{text}");
    }
}
