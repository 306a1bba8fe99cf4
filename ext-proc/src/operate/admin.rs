//! mvp-ext-proc's HTTP admin surface on `--metrics-listen`: `/metrics`
//! (Prometheus), `/healthz`, `/readyz` (after the first discovery round) and
//! `/table` (the current table, each apiserver's state and the connected
//! Envoys with the filter build each runs, for operators and tests),
//! `/debug/route` (`explain`), `/readiness` (`readiness`) and `/usage` (the
//! skew log's counts, for the other replicas: `usage::replicas`).

use std::sync::{Arc, Mutex, Weak};

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use tokio::sync::watch;

use crate::discover::ServerView;
use crate::merge::MergedDocument;
use crate::metrics::Metrics;
use crate::openapi::MergedOpenApi;
use crate::sync::States;
use crate::xds::ConnectedEnvoys;
use mvp_protos::routing::v1 as pb;

/// What operators see: the member states and what each plane made of them.
#[derive(Clone)]
pub struct Published {
    /// The member states the current table was built from.
    pub states: States,
    pub table: watch::Receiver<Arc<pb::RoutingTable>>,
    /// When the table last changed.
    pub table_changed: watch::Receiver<std::time::SystemTime>,
    /// The peer-aggregated `/apis` (none before the first merge).
    pub merged: watch::Receiver<Option<Arc<MergedDocument>>>,
    /// The merged `/openapi/v2` and `/openapi/v3` index.
    pub openapi: watch::Receiver<Arc<MergedOpenApi>>,
}

#[derive(Clone)]
struct AdminState {
    metrics: Arc<Metrics>,
    published: Published,
    envoys: ConnectedEnvoys,
    counted: Arc<Counted>,
    usage: Arc<crate::usage::Usage>,
    replicas: Arc<crate::usage::replicas::Replicas>,
}

impl AdminState {
    /// The skew log's counts of every replica (this one's alone without
    /// `--replica`), which replicas they are, and which did not answer.
    async fn all_usage(&self) -> (Arc<crate::usage::Usage>, Vec<String>, Vec<String>) {
        let me = self.replicas.me.clone();
        let gathered = self.replicas.gather().await;
        if gathered.counts.is_empty() {
            return (self.usage.clone(), vec![me], gathered.unanswered);
        }
        let mut counts = self.usage.snapshot();
        let mut ids = vec![me];
        for c in gathered.counts {
            ids.push(c.replica);
            counts.absorb(c.counts);
        }
        (Arc::new(crate::usage::Usage::restored(counts)), ids, gathered.unanswered)
    }
}

/// The sizes `/table` reports, each a walk over a CRD-heavy table or view
/// (a millisecond or so): counted once per table version and per view, not
/// per request — tests and benchmarks poll `/table` every 25 ms, and did so
/// on the core a merge was running on.
#[derive(Default)]
struct Counted {
    /// Table version → (resources, encoded bytes).
    table: Mutex<Option<(u64, usize, usize)>>,
    /// Views still in use → resources. A view's address identifies it while
    /// its `Weak` can still be upgraded (no other view can have it then).
    views: Mutex<Vec<(Weak<ServerView>, usize)>>,
}

impl Counted {
    fn table(&self, t: &pb::RoutingTable) -> (usize, usize) {
        let mut cached = self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match *cached {
            Some((version, resources, bytes)) if version == t.version => (resources, bytes),
            _ => {
                let (resources, bytes) = (crate::table::build::resource_count(t), prost::Message::encoded_len(t));
                *cached = Some((t.version, resources, bytes));
                (resources, bytes)
            }
        }
    }

    fn view(&self, v: &Arc<ServerView>) -> usize {
        let mut views = self.views.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        views.retain(|(w, _)| w.strong_count() > 0);
        if let Some((_, n)) = views.iter().find(|(w, _)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(v))) {
            return *n;
        }
        let n = v.capabilities.resource_count();
        views.push((Arc::downgrade(v), n));
        n
    }
}

/// With `delegated`, every path but `/healthz` and `/readyz` needs a
/// bearer token whose user the cluster lets get it ([`super::delegated`]).
/// `replicas`: the others to ask for their counts (none: this one alone).
pub fn router(
    metrics: Arc<Metrics>,
    published: Published,
    envoys: ConnectedEnvoys,
    usage: Arc<crate::usage::Usage>,
    replicas: Arc<crate::usage::replicas::Replicas>,
    delegated: Option<Arc<super::delegated::Delegated>>,
) -> axum::Router {
    let router = axum::Router::new()
        .route("/", get(status_page))
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/table", get(table_handler))
        .route("/debug/route", get(debug_route))
        .route("/readiness", get(readiness))
        .route("/usage", get(usage_handler))
        .with_state(AdminState { metrics, published, envoys, counted: Arc::default(), usage, replicas });
    match delegated {
        Some(d) => router.layer(axum::middleware::from_fn_with_state(d, super::delegated::guard)),
        None => router,
    }
}

async fn metrics_handler(State(s): State<AdminState>) -> Response {
    // What finishing the upgrade would take away, for the alert on its
    // use: per scrape (an API-set walk), not per request.
    let states = s.published.states.borrow().clone();
    let members = super::readiness::MemberApis::of(&states);
    if let Ok(r) = super::readiness::report(&members, &super::readiness::Scenario::FinishUpgrade) {
        s.metrics.set_only_older(r.lost.iter().map(|a| a.routed_by.as_str()));
    }
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

/// `GET /`: the status page.
async fn status_page(State(s): State<AdminState>) -> Response {
    let p = &s.published;
    let (table, changed, states, merged, openapi) =
        (p.table.borrow().clone(), *p.table_changed.borrow(), p.states.borrow().clone(), p.merged.borrow().clone(), p.openapi.borrow().clone());
    let (usage, _, _) = s.all_usage().await;
    let html = crate::operate::status_page::render(&crate::operate::status_page::Snapshot {
        table: &table,
        table_changed: changed,
        states: &states.members,
        merged: merged.as_deref(),
        openapi: &openapi,
        usage: Some(&usage),
    });
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

#[derive(serde::Deserialize)]
struct RouteQuery {
    path: String,
    method: Option<String>,
}

/// `GET /debug/route?path=…&method=…`: what the filter does with that
/// request on the current table, and why (`mvp-ext-proc explain`).
async fn debug_route(State(s): State<AdminState>, axum::extract::Query(q): axum::extract::Query<RouteQuery>) -> Response {
    let table = s.published.table.borrow().clone();
    match crate::table::explain::explain(&table, q.method.as_deref().unwrap_or("GET"), &q.path) {
        Ok(e) => axum::Json(e).into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("no routing table to explain with: {e}\n")).into_response(),
    }
}

/// How far back `readiness` looks for clients unless asked.
const DEFAULT_USAGE_WINDOW: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

#[derive(serde::Deserialize)]
struct ReadinessQuery {
    /// Members to remove, comma-separated.
    remove: Option<String>,
    /// `X.Y`: every member on that release.
    release: Option<String>,
    /// Usage counted within this long (`1h`, `7d`); 24h unless set.
    window: Option<String>,
}

/// `GET /readiness?remove=a,b` | `?release=1.37` | (nothing: the upgrade in
/// progress finishes): the APIs that would be served by no apiserver
/// (`mvp-ext-proc readiness`).
async fn readiness(State(s): State<AdminState>, axum::extract::Query(q): axum::extract::Query<ReadinessQuery>) -> Response {
    use super::readiness::{MemberApis, Release, Scenario, report};
    let scenario = match (q.remove.as_deref(), q.release.as_deref()) {
        (Some(_), Some(_)) => return (StatusCode::BAD_REQUEST, "remove and release are two questions: ask one\n").into_response(),
        (Some(r), None) => {
            let names: Vec<String> = r.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_string).collect();
            if names.is_empty() {
                return (StatusCode::BAD_REQUEST, "remove names no member\n").into_response();
            }
            Scenario::Remove(names)
        }
        (None, Some(r)) => match Release::parse(r) {
            Some(r) => Scenario::Release(r),
            None => return (StatusCode::BAD_REQUEST, format!("release {r:?}: not MAJOR.MINOR\n")).into_response(),
        },
        (None, None) => Scenario::FinishUpgrade,
    };
    let states = s.published.states.borrow().clone();
    if !states.complete {
        return (StatusCode::SERVICE_UNAVAILABLE, "the first discovery round is still running\n").into_response();
    }
    let window = match q.window.as_deref().map(humantime::parse_duration) {
        None => DEFAULT_USAGE_WINDOW,
        Some(Ok(w)) => w,
        Some(Err(e)) => return (StatusCode::BAD_REQUEST, format!("window: {e}\n")).into_response(),
    };
    let r = match report(&MemberApis::of(&states), &scenario) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    let (usage, replicas, unanswered) = s.all_usage().await;
    let mut r = r.with_usage(&usage, std::time::SystemTime::now(), window);
    r.replicas = replicas;
    r.replicas_unanswered = unanswered;
    axum::Json(r).into_response()
}

/// `GET /usage`: this replica's own counts (the others add them up).
async fn usage_handler(State(s): State<AdminState>) -> Response {
    axum::Json(crate::usage::replicas::ReplicaCounts { replica: s.replicas.me.clone(), counts: s.usage.snapshot() }).into_response()
}

/// The current table and each apiserver's health, for operators and tests.
async fn table_handler(State(s): State<AdminState>) -> Response {
    let table = s.published.table.borrow().clone();
    let states = s.published.states.borrow().clone();
    let merged = s.published.merged.borrow().clone();
    let openapi = s.published.openapi.borrow().clone();
    let apiservers: Vec<serde_json::Value> = states
        .members
        .iter()
        .map(|st| {
            serde_json::json!({
                "name": st.spec.name,
                "url": st.spec.url.as_str(),
                "address": st.address.map(|a| a.to_string()),
                "healthy": st.healthy,
                "ready": st.ready,
                // Sent new requests (ready, read since, known to Envoy, a member).
                "open": st.open,
                "pending": st.pending,
                // Closed, shutting down and still serving: the last resort
                // for what only closed members serve.
                "draining": st.draining,
                // Closed and coming back (it answers, not read yet): what
                // only closed members serve is held for it; closed and not
                // returning, the 503 Status at once.
                "returning": st.returning,
                "departed": st.departed.is_some(),
                "release": st.version,
                "resources": st.view.as_ref().map(|v| s.counted.view(v)),
                "openapiV3Keys": st.openapi.as_ref().filter(|o| o.v3_index.is_some()).map(|o| o.v3_keys().count()),
                "lastError": st.last_error,
            })
        })
        .collect();
    let (resources, bytes) = s.counted.table(&table);
    axum::Json(serde_json::json!({
        "version": table.version.to_string(),
        "resources": resources,
        "bytes": bytes,
        "apiservers": apiservers,
        // Which routing filter build each connected Envoy runs.
        "envoys": s.envoys.to_json(),
        // The skew log's counts (`readiness` shows who).
        "skewUse": {"apis": s.usage.apis(), "clients": s.usage.entries(), "dropped": s.usage.dropped()},
        "discovery": merged.map(|m| serde_json::json!({
            "etag": m.etag,
            "groups": m.groups,
            "groupsEncoded": m.groups_encoded,
            "buildSeconds": m.build_time.as_secs_f64(),
            "buildCpuSeconds": m.build_cpu.as_secs_f64(),
            "bytes": m.json.identity.len(),
            "sources": m.sources,
        })),
        "openapi": {
            "sources": openapi.sources,
            "v2": openapi.v2_json.as_ref().map(|m| serde_json::json!({"etag": m.etag, "bytes": m.body.identity.len()})),
            "v2Protobuf": openapi.v2_protobuf.as_ref().map(|m| serde_json::json!({"etag": m.etag, "bytes": m.body.identity.len()})),
            "v3Index": openapi.v3_index.as_ref().map(|m| serde_json::json!({"etag": m.etag, "bytes": m.body.identity.len()})),
        },
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::capabilities::Capabilities;

    fn view(resources: &[&str]) -> Arc<ServerView> {
        let mut capabilities = Capabilities::default();
        for r in resources {
            capabilities.add_resource_name("apps", "v1", r);
        }
        Arc::new(ServerView { capabilities, groups: Arc::default() })
    }

    #[test]
    fn counts_once_per_table_version_and_per_view() {
        let counted = Counted::default();
        let mut table = pb::RoutingTable { version: 1, ..Default::default() };
        let first = counted.table(&table);
        assert_eq!(first, (0, prost::Message::encoded_len(&table)));
        // Same version: the cached sizes, not a new walk.
        table.apiservers.push(Default::default());
        assert_eq!(counted.table(&table), first);
        table.version = 2;
        assert_eq!(counted.table(&table), (0, prost::Message::encoded_len(&table)));

        let (a, b) = (view(&["deployments", "deployments/status"]), view(&["deployments", "replicasets", "daemonsets"]));
        assert_eq!((counted.view(&a), counted.view(&b), counted.view(&a)), (1, 3, 1));
        drop(a);
        let c = view(&["jobs", "cronjobs"]);
        assert_eq!(counted.view(&c), 2, "a new view is counted, even at a freed view's address");
        assert_eq!(counted.views.lock().unwrap().len(), 2, "dropped views are forgotten");
    }
}
