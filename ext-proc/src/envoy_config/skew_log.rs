//! The skew access log: Envoy's gRPC access log service, to mvp-ext-proc over
//! the control channel, for the requests the filter marked as asking for a
//! skewed API (`mvp_contract::envoy::SKEW_PROPERTY`) — and no other: its
//! filter is one metadata (native) or filter-state (wasm) lookup per request, so a
//! request every apiserver serves costs no log entry. mvp-ext-proc counts the
//! entries per API and client (`crate::usage`).

use mvp_contract::envoy::{EXT_PROC_AUTHORITY, EXT_PROC_CLUSTER, SKEW_FILTER_STATE, SKEW_LOG_NAME, SKEW_METADATA_KEY, SKEW_METADATA_NAMESPACE};
use serde_json::{Value, json};

use super::{EnvoyConfigOptions, FilterBuild};

/// How long Envoy buffers entries before it sends them, at most.
const FLUSH_INTERVAL: &str = "1s";
/// Entries buffered past this are sent at once.
const BUFFER_BYTES: u32 = 16 << 10;

/// Which requests are logged — those with the record and no other, so no
/// other request's token leaves Envoy: the native build marks them with
/// dynamic metadata; the wasm build cannot (proxy-wasm sets none), so its
/// log asks, in CEL, whether the record's filter state is there. (Before:
/// every request it pinned, by its route header — while any member was
/// closed that was every request, each with its token.)
fn selection(o: &EnvoyConfigOptions) -> Value {
    match o.filter {
        FilterBuild::Native(_) => json!({"metadata_filter": {
            "matcher": {"filter": SKEW_METADATA_NAMESPACE, "path": [{"key": SKEW_METADATA_KEY}], "value": {"present_match": true}},
            "match_if_key_not_found": false,
        }}),
        FilterBuild::Wasm(_) => json!({"extension_filter": {
            "name": "envoy.access_loggers.extension_filters.cel",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter",
                "expression": format!("'{SKEW_FILTER_STATE}' in filter_state"),
            },
        }}),
    }
}

pub fn skew_log(o: &EnvoyConfigOptions) -> Value {
    json!({
        "name": "envoy.access_loggers.http_grpc",
        "filter": selection(o),
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig",
            "common_config": {
                "log_name": SKEW_LOG_NAME,
                "transport_api_version": "V3",
                "grpc_service": {"envoy_grpc": {"cluster_name": EXT_PROC_CLUSTER, "authority": EXT_PROC_AUTHORITY}},
                "filter_state_objects_to_log": [SKEW_FILTER_STATE],
                "buffer_flush_interval": FLUSH_INTERVAL,
                "buffer_size_bytes": BUFFER_BYTES,
            },
            // The identity the front door forwards for a verified client
            // certificate (clients cannot send these: stripped at the edge),
            // and the bearer token, which mvp-ext-proc has the cluster
            // review (`usage::verify`; over the control channel's mTLS, kept
            // only while reviewed).
            "additional_request_headers_to_log": [o.requestheader.username_header(), o.requestheader.group_header(), crate::usage::als::AUTHORIZATION],
        },
    })
}
