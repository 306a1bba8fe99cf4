//! The HTTP connection manager: strips what clients must not send, then the
//! filters and routes, and turns Envoy's own 503s into `metav1.Status`.

use mvp_contract::headers::{STRIPPED, STRIPPED_PREFIXES};
use serde_json::{Value, json};

use super::{EnvoyConfigOptions, filters, routes};
use crate::tls::RequestHeaderNames;

/// HCM early header mutation: the route header, the peer-proxied loop guard
/// and every requestheader identity header are removed from client requests
/// before any filter runs, so nothing a client sends can pick an upstream or
/// claim an identity, even when the wasm filter fails open.
fn early_mutations(names: &RequestHeaderNames) -> Vec<Value> {
    let mut removed: Vec<&str> = STRIPPED.to_vec();
    removed.extend(names.username.iter().chain(&names.group).map(String::as_str));
    removed.sort_unstable();
    removed.dedup();
    let mut prefixes: Vec<&str> = STRIPPED_PREFIXES.to_vec();
    prefixes.extend(names.extra_prefix.iter().map(String::as_str));
    prefixes.sort_unstable();
    prefixes.dedup();
    let mut out: Vec<Value> = removed.iter().map(|h| json!({"remove": h})).collect();
    out.extend(prefixes.iter().map(|p| json!({"remove_on_match": {"key_matcher": {"prefix": p, "ignore_case": true}}})));
    out
}

/// The 503 a client gets when the chosen apiserver cannot be reached, as the
/// `metav1.Status` every Kubernetes client understands instead of Envoy's
/// plain-text body. Local replies only: an apiserver's own 503 passes through.
fn status_503() -> Value {
    json!({
        "filter": {"status_code_filter": {"comparison": {"op": "EQ", "value": {"default_value": 503, "runtime_key": "mvp.local_reply.status_503"}}}},
        "body_format_override": {
            "json_format": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "the apiserver that serves this request is unavailable: %RESPONSE_CODE_DETAILS%",
                "reason": "ServiceUnavailable",
                "details": {"causes": [{"reason": "UnexpectedServerResponse", "message": "%RESPONSE_FLAGS%"}]},
                "code": 503,
            },
            "content_type": "application/json",
        },
    })
}

pub fn http_connection_manager(o: &EnvoyConfigOptions, forwards_identity: bool) -> Value {
    json!({
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "apiserver_front_door",
        "codec_type": "AUTO",
        // Watches are long-lived and can be quiet for minutes; the apiserver
        // ends them itself (its --min-request-timeout), so Envoy must not.
        "stream_idle_timeout": "0s",
        "request_timeout": "0s",
        "upgrade_configs": [{"upgrade_type": "websocket"}, {"upgrade_type": "spdy/3.1"}],
        "use_remote_address": true,
        "early_header_mutation_extensions": [{
            "name": "envoy.http.early_header_mutation.header_mutation",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.http.early_header_mutation.header_mutation.v3.HeaderMutation",
                "mutations": early_mutations(&o.requestheader),
            },
        }],
        "route_config": {
            "name": "apiservers",
            "virtual_hosts": [{"name": "apiservers", "domains": ["*"], "routes": routes::routes(o.apiservers.len(), forwards_identity.then(|| o.requestheader.username_header()))}],
        },
        "http_filters": filters::http_filters(o, forwards_identity),
        "local_reply_config": {"mappers": [status_503()]},
    })
}
