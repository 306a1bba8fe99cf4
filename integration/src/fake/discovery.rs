//! Discovery as a fake apiserver serves it: aggregated documents with
//! kube's negotiation and caching headers, and an old server's `/apis` list.


use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use std::sync::atomic::Ordering;

use super::state::{AGGREGATED_V2, FakeState};

/// True when a clause of `Accept` asks for aggregated discovery in the one
/// version this server speaks (v2 like 1.33+, or v2beta1 like 1.26–1.29).
pub(super) fn wants_aggregated(headers: &HeaderMap, version: &str) -> bool {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    let v = format!("v={version}");
    accept.split(',').any(|clause| {
        let params: Vec<&str> = clause.split(';').map(str::trim).collect();
        params.contains(&"g=apidiscovery.k8s.io") && params.contains(&v.as_str()) && params.contains(&"as=APIGroupDiscoveryList")
    })
}

pub(super) fn aggregated(s: &FakeState, headers: &HeaderMap, doc: &super::fixtures::Aggregated, is_apis: bool) -> Response {
    let overridden = if is_apis { s.apis_override.read().ok().and_then(|o| o.clone()) } else { None };
    if let Some(o) = overridden {
        s.stats.aggregated_ok.fetch_add(1, Ordering::Relaxed);
        let status = StatusCode::from_u16(o.status).unwrap_or(StatusCode::OK);
        let mut resp = (status, [(header::CONTENT_TYPE, o.content_type)], o.body).into_response();
        if let Some(e) = o.content_encoding.and_then(|e| HeaderValue::from_str(&e).ok()) {
            resp.headers_mut().insert(header::CONTENT_ENCODING, e);
        }
        if o.flapping_etag {
            let n = s.stats.aggregated_ok.load(Ordering::Relaxed);
            if let Ok(v) = HeaderValue::from_str(&format!("\"flap-{n}\"")) {
                resp.headers_mut().insert(header::ETAG, v);
            }
        }
        return resp;
    }
    let converted;
    let doc = if s.aggregated_version == "v2" {
        doc
    } else {
        let mut v: Value = serde_json::from_slice(&doc.body).unwrap_or_default();
        v["apiVersion"] = json!(format!("apidiscovery.k8s.io/{}", s.aggregated_version));
        converted = super::fixtures::Aggregated::new(&v);
        &converted
    };
    let mut h = HeaderMap::new();
    let etag = HeaderValue::from_str(&doc.etag).unwrap_or(HeaderValue::from_static("\"\""));
    h.insert(header::ETAG, etag);
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public"));
    // Exact string compare, as kube's ServeHTTPWithETag does.
    if headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) == Some(doc.etag.as_str()) {
        s.stats.not_modified.fetch_add(1, Ordering::Relaxed);
        return (StatusCode::NOT_MODIFIED, h).into_response();
    }
    s.stats.aggregated_ok.fetch_add(1, Ordering::Relaxed);
    let content_type = AGGREGATED_V2.replace("v=v2;", &format!("v={};", s.aggregated_version));
    h.insert(header::CONTENT_TYPE, HeaderValue::from_str(&content_type).unwrap_or(HeaderValue::from_static(AGGREGATED_V2)));
    (StatusCode::OK, h, doc.body.clone()).into_response()
}

/// An old server's `/apis` list as the cluster's APIService objects make
/// it: plus group-versions it does not serve, minus ones it serves but
/// whose APIService another server deleted.
pub(super) fn as_listed(list: &Value, extra: &[String], omitted: &[String]) -> Value {
    let mut list = list.clone();
    if let Some(groups) = list["groups"].as_array_mut() {
        for g in groups.iter_mut() {
            if let Some(vs) = g["versions"].as_array_mut() {
                vs.retain(|v| !omitted.iter().any(|o| v["groupVersion"] == o.as_str()));
            }
        }
        groups.retain(|g| g["versions"].as_array().is_some_and(|v| !v.is_empty()));
    }
    for gv in extra {
        let Some((group, version)) = gv.split_once('/') else { continue };
        let entry = json!({"groupVersion": gv, "version": version});
        let groups = list["groups"].as_array_mut();
        let Some(groups) = groups else { continue };
        match groups.iter_mut().find(|g| g["name"] == group) {
            Some(g) => {
                if let Some(vs) = g["versions"].as_array_mut() {
                    vs.push(entry);
                }
            }
            None => groups.push(json!({"name": group, "versions": [entry.clone()], "preferredVersion": entry})),
        }
    }
    list
}
