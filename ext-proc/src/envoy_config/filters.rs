//! The HTTP filters: mvp's router (wasm or native), ext_proc for `/apis`,
//! Envoy's router; and mvp's refresher, which runs as a bootstrap extension
//! beside them.

use std::time::Duration;

use mvp_contract::envoy::{
    EXT_PROC_CLUSTER, EXT_PROC_FALLBACK_CLUSTER, EXT_PROC_FALLBACK_FILTER, EXT_PROC_FILTER, FILTER_STATS_NAMESPACE, NATIVE_REFRESHER_NAME, NATIVE_ROUTER_NAME, REFRESHER_ROOT_ID, ROUTER_ROOT_ID, VM_ID,
};
use mvp_contract::headers::DISCOVERY_RESULT;
use mvp_contract::plugin::{HoldConfig, IdentityConfig, PluginConfig, RefresherConfig, RouterConfig};
use serde_json::{Value, json};

use super::{EnvoyConfigOptions, FilterBuild};

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

/// The native build's module: loaded once per process (the same file for
/// the filter and the refresher, so they share the published table), and
/// never unloaded — the refresher's table outlives a filter reconfiguration.
fn native_module(path: &str) -> Value {
    json!({"module": {"local": {"filename": path}}, "metrics_namespace": FILTER_STATS_NAMESPACE, "do_not_close": true})
}

fn string_value(configuration: &PluginConfig) -> Value {
    json!({"@type": "type.googleapis.com/google.protobuf.StringValue", "value": configuration.to_json()})
}

/// The router HTTP filter, in the build asked for.
fn router_filter(o: &EnvoyConfigOptions, router: &PluginConfig) -> Value {
    match &o.filter {
        FilterBuild::Wasm(wasm) => json!({
            "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
            // FAIL_OPEN: should the VM ever fail, requests keep flowing
            // with plain load balancing (the pre-mvp behaviour) instead
            // of every request on that worker getting a 503. Safe
            // because the route header is already stripped.
            "config": wasm_plugin(ROUTER_ROOT_ID, router, wasm, "FAIL_OPEN"),
        }),
        // No failure policy to set: a panic in the module is caught at its
        // hooks and the request goes on load balanced, as FAIL_OPEN.
        FilterBuild::Native(module) => json!({
            "@type": "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter",
            "dynamic_module_config": native_module(module),
            "filter_name": NATIVE_ROUTER_NAME,
            "filter_config": string_value(router),
        }),
    }
}

fn large_body_timeout() -> Duration {
    Duration::from_millis(mvp_contract::limits::EXT_PROC_LARGE_BODY_TIMEOUT_MS)
}

fn seconds(d: Duration) -> String {
    format!("{}s", d.as_millis().max(1) as f64 / 1000.0)
}

/// ext_proc for the merged documents, on `cluster`; its statistics under
/// `stat_prefix` when given.
fn ext_proc(o: &EnvoyConfigOptions, cluster: &str, stat_prefix: Option<&str>) -> Value {
    json!({
        "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
        "stat_prefix": stat_prefix,
        "grpc_service": {
            "envoy_grpc": {"cluster_name": cluster},
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
        // mvp-ext-proc down or slow: the next filter (the fallback on
        // another replica) or, with none left, the client gets the
        // apiserver's own document, never an error.
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
    })
}

/// With replicas, a second ext_proc on [`EXT_PROC_FALLBACK_CLUSTER`] (the
/// replicas in another order) for an exchange the first could not finish:
/// a replica that hangs (SIGSTOP, a partition) holds every exchange sent
/// to it until the message timeout, and Envoy cannot send an exchange again
/// once it went out — without a second filter each fell open to one
/// apiserver's document until the health check failed the replica (12 in
/// 1.4 s under six clients). Every answer of mvp-ext-proc carries
/// [`DISCOVERY_RESULT`], so the second filter runs only when the first
/// failed open. It sits before the first in the list: responses pass the
/// filters in reverse order. Off by default and on only for the merged
/// documents' routes ([`super::routes`]): no other request creates it.
fn ext_proc_fallback(o: &EnvoyConfigOptions) -> Value {
    let answered = json!({
        "single_predicate": {
            "input": {
                "name": "answered",
                "typed_config": {"@type": "type.googleapis.com/envoy.type.matcher.v3.HttpResponseHeaderMatchInput", "header_name": DISCOVERY_RESULT},
            },
            "value_match": {"safe_regex": {"google_re2": {}, "regex": ".*"}},
        },
    });
    json!({
        "name": EXT_PROC_FALLBACK_FILTER,
        "disabled": true,
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.common.matching.v3.ExtensionWithMatcher",
            "extension_config": {"name": "envoy.filters.http.ext_proc", "typed_config": ext_proc(o, EXT_PROC_FALLBACK_CLUSTER, Some("fallback"))},
            "xds_matcher": {"matcher_list": {"matchers": [{
                "predicate": answered,
                "on_match": {"action": {
                    "name": "skip",
                    "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.common.matcher.action.v3.SkipFilter"},
                }},
            }]}},
        },
    })
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
        // Requests for skewed APIs marked for the skew log.
        record_skew: o.record_skew,
        // A Warning for what only older releases serve.
        warn_on_skew: o.warn_on_skew,
        // Requests only closed apiservers serve wait (bounded) for the
        // table that opens one, asking the first replica like the refresher.
        hold: (!o.hold_unavailable.is_zero()).then(|| HoldConfig {
            max_ms: u32::try_from(o.hold_unavailable.as_millis()).unwrap_or(u32::MAX),
            max_held: o.hold_max_per_worker,
            max_held_per_client: o.hold_max_per_client,
            max_held_body_bytes: o.hold_max_body_bytes,
            ..HoldConfig::default()
        }),
        ..RouterConfig::default()
    });
    let fallback = (o.ext_proc.len() > 1).then(|| ext_proc_fallback(o));
    let filters = [
        Some(json!({
            "name": "mvp.route",
            "typed_config": router_filter(o, &router),
        })),
        fallback,
        // Off by default, on for the merged documents' routes only
        // (`super::routes`): Envoy creates it for no other request.
        Some(json!({"name": EXT_PROC_FILTER, "disabled": true, "typed_config": ext_proc(o, EXT_PROC_CLUSTER, None)})),
        Some(json!({
            "name": "envoy.filters.http.router",
            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
        })),
    ];
    filters.into_iter().flatten().collect()
}

/// The singleton refresher on Envoy's main thread.
pub fn refresher_extension(o: &EnvoyConfigOptions) -> Value {
    let config = PluginConfig::Refresher(RefresherConfig {
        poll_interval_ms: u32::try_from(o.table_poll_interval.as_millis().max(1)).unwrap_or(u32::MAX),
        ..RefresherConfig::default()
    });
    match &o.filter {
        FilterBuild::Wasm(wasm) => json!({
            "name": "envoy.bootstrap.wasm",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.wasm.v3.WasmService",
                "singleton": true,
                // A failed refresher VM is reloaded: it carries no requests, and
                // without it the table would stop updating.
                "config": wasm_plugin(REFRESHER_ROOT_ID, &config, wasm, "FAIL_RELOAD"),
            },
        }),
        FilterBuild::Native(module) => json!({
            "name": "envoy.bootstrap.dynamic_modules",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.bootstrap.dynamic_modules.v3.DynamicModuleBootstrapExtension",
                "dynamic_module_config": native_module(module),
                "extension_name": NATIVE_REFRESHER_NAME,
                "extension_config": string_value(&config),
            },
        }),
    }
}
