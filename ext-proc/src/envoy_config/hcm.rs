//! The HTTP connection manager: strips what clients must not send, then the
//! filters and routes, and turns Envoy's own error replies into `metav1.Status`.

use mvp_contract::envoy::{HELD_FILTER_STATE, LISTED_FILTER_STATE, ROUTE_KEY_FILTER_STATE};
use mvp_contract::headers::{IDENTITY_REFUSED, ROUTE, STRIPPED, STRIPPED_PREFIXES, UNAVAILABLE};
use mvp_contract::limits::RETRY_BODY_BUFFER_BYTES;
use serde_json::{Value, json};

use super::{EnvoyConfigOptions, FilterBuild, filters, routes};
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

/// A `metav1.Status` body for a reply Envoy generates itself, so every
/// Kubernetes client reads it as it reads an apiserver's errors, never
/// Envoy's plain text. Local replies only: an apiserver's own errors pass
/// through untouched. What Envoy says went wrong upstream (its response
/// flags and details) goes in `details.causes`, for an operator.
fn status(filter: Value, code: Option<u16>, reason: Option<&str>, message: &str) -> Value {
    status_with(filter, code, reason, message, true)
}

/// [`status`], with the cause only where `cause`: the filter's own answers
/// carry none (their message says it all; the flags would say `-
/// direct_response`).
fn status_with(filter: Value, code: Option<u16>, reason: Option<&str>, message: &str, cause: bool) -> Value {
    let mut body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        // Rendered as a number.
        "code": "%RESPONSE_CODE%",
    });
    if cause {
        body["details"] = json!({"causes": [{"reason": "UnexpectedServerResponse", "message": "%RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS%"}]});
    }
    if let Some(r) = reason {
        body["reason"] = json!(r);
    }
    let mut mapper = json!({
        "filter": filter,
        "body_format_override": {"json_format": body, "content_type": "application/json"},
    });
    if let Some(c) = code {
        mapper["status_code"] = json!(c);
    }
    mapper
}

/// The message of the filter's 503: every apiserver that serves the request
/// is closed, or none is known to serve it while one's API set is not.
/// The message of the filter's 401 for a client certificate whose user or
/// group it cannot forward exactly (`filter-core/src/identity.rs`; which
/// attribute and what it holds: the access log's `details`).
pub const IDENTITY_REFUSED_MESSAGE: &str = "Unauthorized: the client certificate's user (CN) or a group (O) cannot be forwarded to the apiserver exactly: it holds a control character, a space at either end, or bytes that are not UTF-8";

/// The message of Envoy's 503 when its overload manager refuses a request.
pub const OVERLOADED_MESSAGE: &str = "the front door is overloaded (its memory is past envoy-config --max-heap); retry";

pub const UNAVAILABLE_MESSAGE: &str = "unavailable: every apiserver that serves this request is restarting, draining or not read yet (or none is known to serve it while one is); retry";

fn code_is(op: &str, code: u16) -> Value {
    json!({"status_code_filter": {"comparison": {"op": op, "value": {"default_value": code, "runtime_key": format!("mvp.local_reply.{}_{code}", op.to_lowercase())}}}})
}

/// Envoy's local replies, as kube would answer: the first matching mapper
/// applies.
fn local_replies() -> Vec<Value> {
    // The filter's answer for a request only closed apiservers serve (its
    // route header says `unavailable…`, which only the filter can set):
    // why, in kube's words — not Envoy's `- direct_response`.
    let filter_answered = json!({"and_filter": {"filters": [
        code_is("EQ", 503),
        {"header_filter": {"header": {"name": ROUTE, "string_match": {"prefix": UNAVAILABLE}}}},
    ]}});
    let identity_refused = json!({"and_filter": {"filters": [
        code_is("EQ", 401),
        {"header_filter": {"header": {"name": ROUTE, "string_match": {"exact": IDENTITY_REFUSED}}}},
    ]}});
    // Envoy's overload manager turned the request away (its heap past
    // --max-heap: edge.rs): why, not an apiserver's fault. It sets no
    // response flag, only the details.
    let overloaded = json!({"extension_filter": {
        "name": "envoy.access_loggers.extension_filters.cel",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter",
            "expression": "response.code_details == 'overload'",
        },
    }});
    vec![
        status_with(filter_answered, None, Some("ServiceUnavailable"), UNAVAILABLE_MESSAGE, false),
        status_with(overloaded, None, Some("ServiceUnavailable"), OVERLOADED_MESSAGE, false),
        status_with(identity_refused, None, Some("Unauthorized"), IDENTITY_REFUSED_MESSAGE, false),
        // The apiserver failed and the body was too large to keep for a
        // resend (more than kube accepts anyway): retryable, as any
        // unreachable apiserver, instead of Envoy's plain-text 507.
        status(code_is("EQ", 507), Some(503), Some("ServiceUnavailable"), "the apiserver that serves this request is unavailable, and the request body is too large to resend to another one"),
        status(code_is("EQ", 503), None, Some("ServiceUnavailable"), "the apiserver that serves this request is unavailable"),
        status(code_is("EQ", 504), None, Some("Timeout"), "the apiserver that serves this request did not answer in time"),
        status(code_is("EQ", 413), None, Some("RequestEntityTooLarge"), "the request is too large"),
        status(code_is("EQ", 400), None, Some("BadRequest"), "the request is malformed"),
        status(code_is("GE", 400), None, None, "the front door could not forward this request"),
    ]
}

/// One JSON line per request on stdout: what an operator asks of a request
/// during an upgrade — where it went, why, and for whom. `routedBy` is what
/// the filter classified (group/version/resource[/subresource], a discovery
/// or OpenAPI document; null for paths it does not route), `route` the
/// override-host list for requests it pinned (null: load-balanced over
/// every apiserver); `held` for a request held for a newer table, how long
/// and how it ended (`312 routed`, `1000 unavailable`); `filter` the build
/// that routed it (`native`, `wasm`); `user` only when the front door
/// verified a client certificate.
fn access_log(o: &EnvoyConfigOptions) -> Value {
    let user = format!("%REQ({})%", o.requestheader.username_header());
    // The native build lists them in filter state, not in the route header.
    let listed = match o.filter {
        FilterBuild::Wasm(_) => format!("%REQ({ROUTE})%"),
        FilterBuild::Native(_) => format!("%FILTER_STATE({LISTED_FILTER_STATE}:PLAIN)%"),
    };
    json!([{
        "name": "envoy.access_loggers.stdout",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog",
            "log_format": {"json_format": {
                "time": "%START_TIME%",
                "method": "%REQ(:METHOD)%",
                "path": "%REQ(:PATH)%",
                "protocol": "%PROTOCOL%",
                "code": "%RESPONSE_CODE%",
                "flags": "%RESPONSE_FLAGS%",
                "details": "%RESPONSE_CODE_DETAILS%",
                "durationMs": "%DURATION%",
                "upstream": "%UPSTREAM_HOST%",
                "route": listed,
                "routedBy": format!("%FILTER_STATE({ROUTE_KEY_FILTER_STATE}:PLAIN)%"),
                "held": format!("%FILTER_STATE({HELD_FILTER_STATE}:PLAIN)%"),
                // Which build routed: fixed per bootstrap.
                "filter": o.filter.name(),
                "user": user,
                "userAgent": "%REQ(USER-AGENT)%",
                "client": "%DOWNSTREAM_REMOTE_ADDRESS%",
                "bytesReceived": "%BYTES_RECEIVED%",
                "bytesSent": "%BYTES_SENT%",
            }},
        },
    }])
}

/// The stdout log (when on) and the skew log (when on).
fn access_logs(o: &EnvoyConfigOptions) -> Value {
    let mut logs = match o.access_log {
        true => access_log(o),
        false => json!([]),
    };
    if o.record_skew
        && let Some(list) = logs.as_array_mut()
    {
        list.push(super::skew_log::skew_log(o));
    }
    if logs.as_array().is_some_and(Vec::is_empty) { Value::Null } else { logs }
}

pub fn http_connection_manager(o: &EnvoyConfigOptions, forwards_identity: bool) -> Value {
    let mut hcm = json!({
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
            // The apiserver clusters arrive over ADS after the listener is built.
            "validate_clusters": false,
            "virtual_hosts": [{
                "name": "apiservers",
                "domains": ["*"],
                "routes": routes::routes(
                    forwards_identity.then(|| o.requestheader.username_header()),
                    o.ext_proc.len() > 1,
                    matches!(o.filter, FilterBuild::Wasm(_)),
                    o.warn_on_skew,
                    &routes::Timeouts::new(o.request_timeout, o.read_idle_timeout),
                ),
                // Enough of a body to resend anything kube would accept to
                // another apiserver when the first cannot be reached.
                "request_body_buffer_limit": RETRY_BODY_BUFFER_BYTES,
            }],
        },
        "http_filters": filters::http_filters(o, forwards_identity),
        "local_reply_config": {"mappers": local_replies()},
        "access_log": access_logs(o),
    });
    // The edge protections: header and HTTP/2 limits, slowloris (edge.rs).
    if let (Some(h), Value::Object(edge)) = (hcm.as_object_mut(), super::edge::hcm_options(o.request_headers_timeout)) {
        h.extend(edge);
    }
    hcm
}
