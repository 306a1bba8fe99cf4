//! mvp-ext-proc's HTTP admin surface on `--metrics-listen`: `/metrics`
//! (Prometheus), `/healthz`, `/readyz` (after the first discovery round) and
//! `/table` (the current table and each apiserver's state, for operators and
//! tests).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::metrics::Metrics;
use crate::sync::Published;

#[derive(Clone)]
struct AdminState {
    metrics: Arc<Metrics>,
    published: Published,
}

pub fn router(metrics: Arc<Metrics>, published: Published) -> axum::Router {
    axum::Router::new()
        .route("/", get(status_page))
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/table", get(table_handler))
        .route("/debug/route", get(debug_route))
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

/// `GET /`: the status page.
async fn status_page(State(s): State<AdminState>) -> Response {
    let p = &s.published;
    let (table, changed, states, merged, openapi) =
        (p.table.borrow().clone(), *p.table_changed.borrow(), p.states.borrow().clone(), p.merged.borrow().clone(), p.openapi.borrow().clone());
    let html = crate::status_page::render(&crate::status_page::Snapshot {
        table: &table,
        table_changed: changed,
        states: &states,
        merged: merged.as_deref(),
        openapi: &openapi,
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
    match crate::explain::explain(&table, q.method.as_deref().unwrap_or("GET"), &q.path) {
        Ok(e) => axum::Json(e).into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("no routing table to explain with: {e}\n")).into_response(),
    }
}

/// The current table and each apiserver's health, for operators and tests.
async fn table_handler(State(s): State<AdminState>) -> Response {
    let table = s.published.table.borrow().clone();
    let states = s.published.states.borrow().clone();
    let merged = s.published.merged.borrow().clone();
    let openapi = s.published.openapi.borrow().clone();
    let apiservers: Vec<serde_json::Value> = states
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
                "departed": st.departed.is_some(),
                "release": st.version,
                "resources": st.view.as_ref().map(|v| v.capabilities.resource_count()),
                "openapiV3Keys": st.openapi.as_ref().filter(|o| o.v3_index.is_some()).map(|o| o.v3_keys().count()),
                "lastError": st.last_error,
            })
        })
        .collect();
    axum::Json(serde_json::json!({
        "version": table.version.to_string(),
        "resources": crate::routing_table::resource_count(&table),
        "bytes": prost::Message::encoded_len(&*table),
        "apiservers": apiservers,
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
