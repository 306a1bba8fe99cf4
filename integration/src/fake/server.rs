//! HTTP behaviour of a fake kube-apiserver: discovery with kube's content
//! negotiation and caching headers, `/version`, health endpoints, and
//! resource requests answered with JSON that names the server and what it
//! understood — or kube's 404 Status when it does not serve the API.
//!
//! Request parsing here is written independently of the wasm filter's
//! classifier on purpose: a test oracle that shared the code under test
//! would agree with its bugs.

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::control::*;
use super::discovery::*;
use super::resources::*;
pub use super::responses::status_json;
use super::responses::{json_response, not_found, unauthorized};
pub use super::state::{AGGREGATED_V2, FakeState, Stats};
use super::upgrade::*;

/// kube-apiserver's `WithCacheControl` filter: every response without a
/// Cache-Control gets `no-cache, private` (everything is behind authn/authz).
async fn cache_control(mut resp: Response) -> Response {
    if !resp.headers().contains_key(header::CACHE_CONTROL) {
        resp.headers_mut().insert(header::CACHE_CONTROL, axum::http::HeaderValue::from_static("no-cache, private"));
    }
    resp
}

pub fn router(state: FakeState) -> axum::Router {
    axum::Router::new()
        .route("/__fake/release", axum::routing::post(set_release))
        .route("/__fake/documents", axum::routing::post(set_documents))
        .route("/__fake/stats", axum::routing::get(stats))
        .route("/__fake/apis-body", axum::routing::post(set_apis_body).delete(clear_apis_body))
        .route("/__fake/hang-discovery", axum::routing::post(hang_discovery).delete(answer_discovery))
        .route("/__fake/unavailable", axum::routing::post(make_unavailable).delete(make_available))
        .route("/__fake/fail-next", axum::routing::post(fail_next))
        .route("/__fake/started", axum::routing::post(started))
        .fallback(handle)
        .layer(axum::middleware::map_response(cache_control))
        // Tests post multi-MiB discovery documents to the control endpoints.
        .layer(axum::extract::DefaultBodyLimit::max(256 << 20))
        .with_state(state)
}

async fn handle(State(s): State<FakeState>, req: Request) -> Response {
    let docs = s.docs();
    let path = req.uri().path().to_string();
    let health = matches!(path.as_str(), "/healthz" | "/readyz" | "/livez");
    if path.trim_end_matches('/') == "/readyz" && s.shutting_down.load(std::sync::atomic::Ordering::Relaxed) {
        return (StatusCode::INTERNAL_SERVER_ERROR, "[-]shutdown failed: process is shutting down\nreadyz check failed\n").into_response();
    }
    if path.trim_end_matches('/') == "/readyz" && s.starting() {
        return (StatusCode::INTERNAL_SERVER_ERROR, "[+]ping ok\n[+]shutdown ok\n[-]poststarthook/fake-starting failed: not finished\nreadyz check failed\n").into_response();
    }
    if path.trim_end_matches('/') == "/readyz" && s.readyz_fails_with_header.as_ref().is_some_and(|(h, v)| req.headers().get(h.as_str()).is_some_and(|got| got.as_bytes() == v.as_bytes())) {
        return (StatusCode::INTERNAL_SERVER_ERROR, "[-]requestheader failed\nreadyz check failed\n").into_response();
    }
    let user = s.auth.authenticate(req.extensions().get::<super::auth::ConnInfo>(), req.headers());
    let user = match (user, health) {
        (Some(u), _) => u,
        (None, true) => return "ok".into_response(),
        (None, false) => return unauthorized(),
    };
    if req.headers().contains_key(header::UPGRADE) {
        return upgrade(&s, user, req).await;
    }
    let query = req.uri().query().unwrap_or("").to_string();
    if let Some(cluster) = &s.cluster
        && let Some((kind, name)) = super::membership::route(&path)
    {
        return super::membership::serve(cluster.clone(), kind, name, &query).await;
    }
    let headers = req.headers().clone();
    let method = req.method().as_str().to_string();
    // kube-apiserver reads (decodes) a request's whole body before it
    // answers; answering first would make the client's proxy see a reset.
    let _ = axum::body::to_bytes(req.into_body(), 256 << 20).await;
    let agg = s.aggregated && wants_aggregated(&headers, &s.aggregated_version);
    if matches!(path.as_str(), "/api" | "/apis") && s.hang_discovery.load(std::sync::atomic::Ordering::Relaxed) {
        s.stats.hung.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::future::pending::<()>().await;
    }
    let trimmed = path.trim_end_matches('/');
    if path.starts_with("/debug/pprof/") {
        // A CPU profile: it takes `seconds` (kube-apiserver's
        // `--profiling`), then answers.
        s.stats.profile_requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let seconds = query.split('&').find_map(|kv| kv.strip_prefix("seconds=")?.parse::<u64>().ok()).unwrap_or(30).min(600);
        tokio::time::sleep(std::time::Duration::from_secs(seconds)).await;
        return ([(header::CONTENT_TYPE, "application/octet-stream")], format!("profile of {} over {seconds} s", s.name)).into_response();
    }
    match trimmed {
        "/healthz" | "/readyz" | "/livez" => return "ok".into_response(),
        "/version" => {
            return json_response(
                StatusCode::OK,
                &json!({"major": "1", "minor": docs.minor(), "gitVersion": format!("{}.0-fake+{}", docs.release, s.name), "platform": "linux/amd64"}),
            );
        }
        "/api" if agg => return aggregated(&s, &headers, &docs.api, false),
        "/apis" if agg => return aggregated(&s, &headers, &docs.apis, true),
        "/openapi/v3" if s.aggregated => return super::openapi::index(&docs),
        _ if s.aggregated && trimmed.starts_with("/openapi/v3/") => {
            return super::openapi::group_version(&s, &docs, path.trim_start_matches("/openapi/v3/"), &query);
        }
        "/api" | "/apis" => {
            s.stats.list_requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        "/api/v1" => {
            s.stats.group_version_requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        _ if trimmed.starts_with("/apis/") && trimmed.matches('/').count() == 3 => {
            s.stats.group_version_requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        _ => {}
    }
    if let Some(gv) = trimmed.strip_prefix("/apis/")
        && s.unavailable.read().unwrap_or_else(|p| p.into_inner()).iter().any(|down| gv == down || gv.starts_with(&format!("{down}/")))
    {
        // kube-aggregator's answer for an APIService whose backend is down.
        return json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "the server is currently unable to handle the request", "reason": "ServiceUnavailable", "code": 503}),
        );
    }
    match trimmed {
        "/api" => {
            return json_response(
                StatusCode::OK,
                &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": s.name}]}),
            );
        }
        "/apis" => return json_response(StatusCode::OK, &as_listed(&docs.group_list, &s.listed_only, &s.unlisted)),
        "/api/v1" => return json_response(StatusCode::OK, &docs.api_v1),
        _ => {}
    }
    let parts: Vec<&str> = trimmed.trim_start_matches('/').split('/').collect();
    // /apis/{g} and /apis/{g}/{v}: unaggregated per-group documents.
    if parts.first() == Some(&"apis") && (parts.len() == 2 || parts.len() == 3) {
        let group = parts[1];
        if parts.len() == 3 {
            return match docs.group_versions.get(&format!("{group}/{}", parts[2])) {
                Some(list) => json_response(StatusCode::OK, list),
                None => not_found(),
            };
        }
        return match docs.group_list["groups"].as_array().into_iter().flatten().find(|g| g["name"] == group) {
            Some(g) => json_response(StatusCode::OK, &json!({"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": g["versions"], "preferredVersion": g["preferredVersion"]})),
            None => not_found(),
        };
    }
    match parse_resource_path(&parts) {
        Some(p) => resource(&s, &docs, p, &method, &query, &headers, &path, &user).await,
        None => not_found(),
    }
}

