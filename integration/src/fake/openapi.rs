//! OpenAPI v3 as a fake apiserver serves it (kube-openapi `handler3`,
//! Kubernetes 1.27+; modelled only for fakes with aggregated discovery,
//! 1.26+): the index `/openapi/v3` lists one document per group-version it
//! serves plus `version`, each URL carrying the document's hash; a request
//! with another hash is redirected (301) to the server's own. A document
//! names its release, so two releases disagree on every shared hash.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::digest::sha512_upper_hex;

use super::fixtures::Documents;
use super::responses::not_found;
use super::state::FakeState;

/// The keys this server's index lists.
fn keys(docs: &Documents) -> Vec<String> {
    let mut keys: Vec<String> = docs.group_versions.keys().map(|gv| format!("apis/{gv}")).collect();
    keys.push("api/v1".into());
    keys.push("version".into());
    keys.sort();
    keys
}

fn serves(docs: &Documents, key: &str) -> bool {
    matches!(key, "api/v1" | "version") || key.strip_prefix("apis/").is_some_and(|gv| docs.group_versions.contains_key(gv))
}

fn document(docs: &Documents, key: &str) -> Option<Vec<u8>> {
    serves(docs, key).then(|| {
        let doc = json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": docs.release}, "paths": {format!("/{key}/"): {}}});
        serde_json::to_vec(&doc).unwrap_or_default()
    })
}

/// kube-openapi's hash: uppercase hex SHA-512 of the document (its ETag
/// without the quotes).
fn hash(body: &[u8]) -> String {
    sha512_upper_hex(body)
}

pub(super) fn index(docs: &Documents) -> Response {
    let paths: serde_json::Map<String, Value> = keys(docs)
        .into_iter()
        .filter_map(|k| {
            let h = hash(&document(docs, &k)?);
            Some((k.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{k}?hash={h}")})))
        })
        .collect();
    let body = serde_json::to_vec(&json!({"paths": paths})).unwrap_or_default();
    // As real 1.27+ servers send it: http.ServeContent with no type set
    // sniffs `text/plain`, and the index carries no ETag.
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

pub(super) fn group_version(s: &FakeState, docs: &Documents, key: &str, query: &str) -> Response {
    let Some(body) = document(docs, key) else { return not_found() };
    let own = hash(&body);
    let mut h = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&s.name) {
        h.insert("x-fake-apiserver", v);
    }
    let asked = query.split('&').find_map(|p| p.strip_prefix("hash="));
    if asked.is_some_and(|a| a != own)
        && let Ok(location) = HeaderValue::from_str(&format!("/openapi/v3/{key}?hash={own}"))
    {
        h.insert(header::LOCATION, location);
        return (StatusCode::MOVED_PERMANENTLY, h).into_response();
    }
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    (StatusCode::OK, h, body).into_response()
}
