//! The HTTP filters: the wasm router, ext_proc for `/apis`, the router; and
//! the wasm refresher, which runs as a bootstrap extension beside them.

use std::time::Duration;

use mvp_contract::envoy::{EXT_PROC_CLUSTER, REFRESHER_ROOT_ID, ROUTER_ROOT_ID, VM_ID};
use mvp_contract::plugin::{IdentityConfig, PluginConfig, RefresherConfig, RouterConfig};
use serde_json::{Value, json};

use super::EnvoyConfigOptions;

fn wasm_plugin(name: &str, configuration: &PluginConfig, wasm: &str, failure_policy: &str) -> Value {
    json!({
        "name": name,
        "root_id": name,
        "vm_config": {
            // One vm_id for filter and refresher: shared data is per vm_id.
            "vm_id": VM_ID,
            "runtime": "envoy.wasm.runtime.v8",
            "code": {"local": {"filename": wasm}},
        },
        "configuration": {
            "@type": "type.googleapis.com/google.protobuf.StringValue",
            "value": configuration.to_json(),
        },
        "failure_policy": failure_policy,
    })
}

fn large_body_timeout() -> Duration {
    Duration::from_millis(mvp_contract::limits::EXT_PROC_LARGE_BODY_TIMEOUT_MS)
}

fn seconds(d: Duration) -> String {
    format!("{}s", d.as_millis().max(1) as f64 / 1000.0)
}

pub fn http_filters(o: &EnvoyConfigOptions, forwards_identity: bool) -> Vec<Value> {
    let router = PluginConfig::Router(RouterConfig {
        // The verified client certificate's CN and O, as kube's x509
        // authenticator reads them, forwarded under the first configured names.
        identity: forwards_identity.then(|| IdentityConfig {
            username_header: o.requestheader.username_header().to_string(),
            group_header: o.requestheader.group_header().to_string(),
        }),
        // What each request was routed by, for the access log's `routedBy`.
        export_route_key: o.access_log,
        ..RouterConfig::default()
    });
    vec![
        json!({
            "name": "mvp.route",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
                // FAIL_OPEN: should the VM ever fail, requests keep flowing
                // with plain load balancing (the pre-mvp behaviour) instead
                // of every request on that worker getting a 503. Safe
                // because the route header is already stripped.
                "config": wasm_plugin(ROUTER_ROOT_ID, &router, &o.wasm, "FAIL_OPEN"),
            },
        }),
        json!({
            "name": "envoy.filters.http.ext_proc",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
                "grpc_service": {
                    "envoy_grpc": {"cluster_name": EXT_PROC_CLUSTER},
                    "timeout": seconds(o.ext_proc_message_timeout.max(large_body_timeout()) * 2),
                    // A stream that cannot be opened (a replica just killed,
                    // not yet failed by its health check; one restarting) is
                    // opened again on another replica, quickly: it all fits
                    // in the message timeout. Another priority first; and
                    // never the host that just failed — also when a
                    // loaded machine's slow health checks have put the
                    // cluster in panic mode, where the load balancer picks
                    // any host (measured: 52 of ~320 `/apis` fell open in
                    // one such run without the host predicate).
                    "retry_policy": {
                        "retry_on": "connect-failure,refused-stream,reset,unavailable",
                        "num_retries": 3,
                        "retry_back_off": {"base_interval": "0.01s", "max_interval": "0.05s"},
                        "retry_host_predicate": [{
                            "name": "envoy.retry_host_predicates.previous_hosts",
                            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"},
                        }],
                        "host_selection_retry_max_attempts": 5,
                        "retry_priority": {
                            "name": "envoy.retry_priorities.previous_priorities",
                            "typed_config": {
                                "@type": "type.googleapis.com/envoy.extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig",
                                "update_frequency": 1,
                            },
                        },
                    },
                },
                // mvp-ext-proc down or slow: the client gets the apiserver's
                // own document, never an error.
                "failure_mode_allow": true,
                "message_timeout": seconds(o.ext_proc_message_timeout),
                // mvp-ext-proc extends the timeout for a multi-MiB answer
                // (`override_message_timeout`) up to this.
                "max_message_timeout": seconds(large_body_timeout().max(o.ext_proc_message_timeout)),
                "allow_mode_override": true,
                // One round trip per /apis request: the response-headers
                // message carries the request headers the rewrite needs (CEL;
                // Envoy cannot send the whole header map).
                "response_attributes": crate::rewrite::REQUEST_ATTRIBUTES,
                "processing_mode": {
                    "request_header_mode": "SKIP",
                    "response_header_mode": "SEND",
                    "request_body_mode": "NONE",
                    "response_body_mode": "NONE",
                    "request_trailer_mode": "SKIP",
                    "response_trailer_mode": "SKIP",
                },
            },
        }),
        json!({
            "name": "envoy.filters.http.router",
            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
        }),
    ]
}

/// The singleton refresher on Envoy's main thread.
pub fn refresher_extension(o: &EnvoyConfigOptions) -> Value {
    let config = PluginConfig::Refresher(RefresherConfig {
        poll_interval_ms: u32::try_from(o.table_poll_interval.as_millis().max(1)).unwrap_or(u32::MAX),
        ..RefresherConfig::default()
    });
    json!({
        "name": "envoy.bootstrap.wasm",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.wasm.v3.WasmService",
            "singleton": true,
            // A failed refresher VM is reloaded: it carries no requests, and
            // without it the table would stop updating.
            "config": wasm_plugin(REFRESHER_ROOT_ID, &config, &o.wasm, "FAIL_RELOAD"),
        },
    })
}
