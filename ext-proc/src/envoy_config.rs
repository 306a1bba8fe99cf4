//! Renders the complete Envoy bootstrap for a set of apiservers, so the front
//! door is two processes: `mvp-ext-proc serve …` and `envoy -c <file>`.
//!
//! The safety of routing rests on three pieces of this config:
//! - HCM `early_header_mutation_extensions` strip the route header, the
//!   peer-proxied loop guard and every requestheader identity header from
//!   client requests before any filter runs, so nothing a client sends can
//!   pick an upstream or claim an identity, even when the wasm filter fails
//!   open.
//! - The `apiservers` cluster's override-host policy only ever selects one
//!   of its own members; an address outside the set falls back to round
//!   robin, so no request can reach a host outside the configured apiservers.
//! - Retries on connect failure walk the override-host list, which is how a
//!   request fails over to another apiserver that serves the same API.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};

use crate::apiservers::ApiserverSpec;

/// Header the wasm filter sets and the override-host policy reads.
pub const ROUTE_HEADER: &str = "x-mvp-route";

/// Headers removed from every client request before routing. `x-remote-*`
/// are kube-apiserver's requestheader identity headers; `x-envoy-*` would let
/// a client steer Envoy's retries and timeouts (the filter sets
/// `x-envoy-max-retries` itself).
pub const STRIPPED_HEADERS: &[&str] = &[ROUTE_HEADER, "x-kubernetes-peer-proxied"];
pub const STRIPPED_PREFIXES: &[&str] = &["x-remote-", "x-envoy-"];

#[derive(Debug, Clone)]
pub struct EnvoyConfigOptions {
    pub apiservers: Vec<ApiserverSpec>,
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    pub wasm: String,
    /// mvp-ext-proc's gRPC address, `IP:port` or `host:port`.
    pub ext_proc: String,
    pub table_poll_interval: Duration,
    /// Longest Envoy waits for mvp-ext-proc per `/apis` phase before serving
    /// the apiserver's own document.
    pub ext_proc_message_timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--ext-proc {0:?}: expected HOST:PORT")]
    ExtProc(String),
    #[error(
        "--apiserver {0}: https apiservers need the TLS flags, which this version does not render yet; use an http:// URL"
    )]
    Tls(String),
    #[error("{0}")]
    Apiservers(String),
}

/// `socket_address` for an IP literal or a hostname (resolved by Envoy when
/// the cluster is STRICT_DNS).
fn socket_address(host: &str, port: u16) -> Value {
    json!({"socket_address": {"address": host.trim_start_matches('[').trim_end_matches(']'), "port_value": port}})
}

fn split_host_port(s: &str) -> Option<(String, u16)> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Some((a.ip().to_string(), a.port()));
    }
    let (host, port) = s.rsplit_once(':')?;
    if host.is_empty() || host.contains(':') {
        return None;
    }
    Some((host.to_string(), port.parse().ok()?))
}

fn is_ip(host: &str) -> bool {
    host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>().is_ok()
}

fn wasm_plugin(name: &str, configuration: Value, wasm: &str, failure_policy: &str) -> Value {
    json!({
        "name": name,
        "root_id": name,
        "vm_config": {
            // One vm_id for filter and refresher: shared data is per vm_id.
            "vm_id": "mvp",
            "runtime": "envoy.wasm.runtime.v8",
            "code": {"local": {"filename": wasm}},
        },
        "configuration": {
            "@type": "type.googleapis.com/google.protobuf.StringValue",
            "value": configuration.to_string(),
        },
        "failure_policy": failure_policy,
    })
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

pub fn render(o: &EnvoyConfigOptions) -> Result<Value, ConfigError> {
    crate::apiservers::validate_set(&o.apiservers).map_err(ConfigError::Apiservers)?;
    if let Some(a) = o.apiservers.iter().find(|a| a.is_tls()) {
        return Err(ConfigError::Tls(a.name.clone()));
    }
    let (ext_host, ext_port) = split_host_port(&o.ext_proc).ok_or_else(|| ConfigError::ExtProc(o.ext_proc.clone()))?;

    let all_ip = o.apiservers.iter().all(|a| is_ip(a.host()));
    let endpoints: Vec<Value> = o
        .apiservers
        .iter()
        .map(|a| json!({"endpoint": {"address": socket_address(a.host(), a.port()), "hostname": a.name}}))
        .collect();
    let retries = o.apiservers.len().saturating_sub(1).max(1);

    let mut early_mutations: Vec<Value> = STRIPPED_HEADERS.iter().map(|h| json!({"remove": h})).collect();
    early_mutations.extend(
        STRIPPED_PREFIXES
            .iter()
            .map(|p| json!({"remove_on_match": {"key_matcher": {"prefix": p, "ignore_case": true}}})),
    );

    let router_config = json!({"role": "router", "route_header": ROUTE_HEADER});
    let refresher_config = json!({
        "role": "refresher",
        "cluster": "mvp_ext_proc",
        "poll_interval_ms": o.table_poll_interval.as_millis().max(1) as u64,
        "timeout_ms": 2000,
    });

    let route_action = json!({
        "cluster": "apiservers",
        "timeout": "0s",
        "retry_policy": {
            // Only failures where the request never reached an apiserver:
            // safe for every verb.
            "retry_on": "connect-failure,refused-stream,reset-before-request",
            "num_retries": retries,
            "retry_host_predicate": [{
                "name": "envoy.retry_host_predicates.previous_hosts",
                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"},
            }],
            "host_selection_retry_max_attempts": 5,
        },
    });
    // `/apis` (kubectl also sends `/apis?timeout=32s`; the query is not part
    // of the match) goes through ext_proc; every other route has no
    // ext_proc stream at all.
    let discovery_route = |path: &str| json!({"match": {"path": path}, "route": route_action.clone()});
    let ext_proc_ms = o.ext_proc_message_timeout.as_millis().max(1) as u64;

    let hcm = json!({
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
                "mutations": early_mutations,
            },
        }],
        "route_config": {
            "name": "apiservers",
            "virtual_hosts": [{
                "name": "apiservers",
                "domains": ["*"],
                "routes": [
                    discovery_route("/apis"),
                    discovery_route("/apis/"),
                    {
                        "match": {"prefix": "/"},
                        "route": route_action,
                        "typed_per_filter_config": {
                            "envoy.filters.http.ext_proc": {
                                "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute",
                                "disabled": true,
                            },
                        },
                    },
                ],
            }],
        },
        "http_filters": [
            {
                "name": "mvp.route",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
                    // FAIL_OPEN: should the VM ever fail, requests keep flowing
                    // with plain load balancing (the pre-mvp behaviour) instead
                    // of every request on that worker getting a 503. Safe
                    // because the route header is already stripped above.
                    "config": wasm_plugin("mvp_router", router_config, &o.wasm, "FAIL_OPEN"),
                },
            },
            {
                "name": "envoy.filters.http.ext_proc",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
                    "grpc_service": {"envoy_grpc": {"cluster_name": "mvp_ext_proc"}, "timeout": format!("{}s", (ext_proc_ms * 2) as f64 / 1000.0)},
                    // mvp-ext-proc down or slow: the client gets the
                    // apiserver's own document, never an error.
                    "failure_mode_allow": true,
                    "message_timeout": format!("{}s", ext_proc_ms as f64 / 1000.0),
                    "allow_mode_override": true,
                    "processing_mode": {
                        "request_header_mode": "SEND",
                        "response_header_mode": "SEND",
                        "request_body_mode": "NONE",
                        "response_body_mode": "NONE",
                        "request_trailer_mode": "SKIP",
                        "response_trailer_mode": "SKIP",
                    },
                },
            },
            {
                "name": "envoy.filters.http.router",
                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
            },
        ],
        "local_reply_config": {"mappers": [status_503()]},
    });

    let override_host = json!({
        "policies": [{
            "typed_extension_config": {
                "name": "envoy.load_balancing_policies.override_host",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost",
                    "override_host_sources": [{"header": ROUTE_HEADER}],
                    "fallback_policy": {"policies": [{"typed_extension_config": {
                        "name": "envoy.load_balancing_policies.round_robin",
                        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin"},
                    }}]},
                },
            },
        }],
    });

    Ok(json!({
        "node": {"id": "mvp-envoy", "cluster": "mvp-envoy"},
        "admin": {"address": socket_address(&o.admin.ip().to_string(), o.admin.port())},
        "bootstrap_extensions": [{
            "name": "envoy.bootstrap.wasm",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.wasm.v3.WasmService",
                "singleton": true,
                // A failed refresher VM is reloaded: it carries no requests,
                // and without it the table would stop updating.
                "config": wasm_plugin("mvp_table_refresher", refresher_config, &o.wasm, "FAIL_RELOAD"),
            },
        }],
        "static_resources": {
            "listeners": [{
                "name": "apiserver_front_door",
                "address": socket_address(&o.listen.ip().to_string(), o.listen.port()),
                "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}]}],
            }],
            "clusters": [
                {
                    "name": "apiservers",
                    "type": if all_ip { "STATIC" } else { "STRICT_DNS" },
                    "dns_lookup_family": "V4_PREFERRED",
                    "connect_timeout": "2s",
                    "load_balancing_policy": override_host,
                    "load_assignment": {"cluster_name": "apiservers", "endpoints": [{"lb_endpoints": endpoints}]},
                    "typed_extension_protocol_options": {
                        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                            "explicit_http_config": {"http_protocol_options": {}},
                        },
                    },
                },
                {
                    "name": "mvp_ext_proc",
                    "type": if is_ip(&ext_host) { "STATIC" } else { "STRICT_DNS" },
                    "dns_lookup_family": "V4_PREFERRED",
                    "connect_timeout": "1s",
                    "load_assignment": {"cluster_name": "mvp_ext_proc", "endpoints": [{"lb_endpoints": [{"endpoint": {"address": socket_address(&ext_host, ext_port)}}]}]},
                    "typed_extension_protocol_options": {
                        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                            "explicit_http_config": {"http2_protocol_options": {}},
                        },
                    },
                },
            ],
        },
        "layered_runtime": {"layers": [{"name": "static", "static_layer": {
            // Envoy's default overload protections, stated explicitly.
            "overload.global_downstream_max_connections": 50000,
        }}]},
    }))
}

/// YAML for humans; the header says how it was made so nobody edits it by hand.
pub fn render_yaml(o: &EnvoyConfigOptions, command: &str) -> Result<String, ConfigError> {
    let v = render(o)?;
    let body = serde_yaml_ng::to_string(&v).unwrap_or_else(|e| format!("# serialization failed: {e}\n"));
    Ok(format!(
        "# Envoy bootstrap for the mvp-envoy front door. Generated by:\n#   {command}\n# Do not edit: change the flags and render it again.\n{body}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(apiservers: &[&str]) -> EnvoyConfigOptions {
        EnvoyConfigOptions {
            apiservers: apiservers.iter().map(|s| s.parse().unwrap()).collect(),
            listen: "127.0.0.1:8443".parse().unwrap(),
            admin: "127.0.0.1:9901".parse().unwrap(),
            wasm: "/w.wasm".into(),
            ext_proc: "127.0.0.1:18000".into(),
            table_poll_interval: Duration::from_millis(200),
            ext_proc_message_timeout: Duration::from_millis(250),
        }
    }

    #[test]
    fn renders_static_and_dns_clusters() {
        let v = render(&opts(&["a=http://127.0.0.1:1", "b=http://127.0.0.1:2"])).unwrap();
        let c = &v["static_resources"]["clusters"][0];
        assert_eq!(c["type"], "STATIC");
        assert_eq!(c["load_assignment"]["endpoints"][0]["lb_endpoints"].as_array().unwrap().len(), 2);
        let v = render(&opts(&["a=http://apiserver-a:6443", "b=http://127.0.0.1:2"])).unwrap();
        assert_eq!(v["static_resources"]["clusters"][0]["type"], "STRICT_DNS");
    }

    #[test]
    fn rejects_what_it_cannot_render() {
        assert!(render(&opts(&[])).is_err());
        assert!(render(&opts(&["a=https://127.0.0.1:1"])).is_err());
        let mut o = opts(&["a=http://127.0.0.1:1"]);
        o.ext_proc = "nonsense".into();
        assert!(render(&o).is_err());
    }

    #[test]
    fn strips_routing_and_identity_headers_first() {
        let v = render(&opts(&["a=http://127.0.0.1:1"])).unwrap();
        let hcm = &v["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
        let muts = hcm["early_header_mutation_extensions"][0]["typed_config"]["mutations"].to_string();
        for h in [ROUTE_HEADER, "x-kubernetes-peer-proxied", "x-remote-"] {
            assert!(muts.contains(h), "{h} not stripped: {muts}");
        }
    }
}
