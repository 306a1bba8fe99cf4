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
use crate::tls::{FrontTls, PeerTls};

/// Header the wasm filter sets and the override-host policy reads.
pub const ROUTE_HEADER: &str = "x-mvp-route";

/// Headers removed from every client request before routing. `x-remote-*`
/// are kube-apiserver's default requestheader identity headers (configured
/// names are stripped too); `x-envoy-*` would let a client steer Envoy's
/// retries and timeouts, which the route table sets per routed request.
pub const STRIPPED_HEADERS: &[&str] = &[ROUTE_HEADER, "x-kubernetes-peer-proxied"];
pub const STRIPPED_PREFIXES: &[&str] = &["x-remote-", "x-envoy-"];

/// Lower-case header names of kube's requestheader authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeaderNames {
    pub username: Vec<String>,
    pub group: Vec<String>,
    pub extra_prefix: Vec<String>,
}

impl Default for RequestHeaderNames {
    fn default() -> Self {
        RequestHeaderNames {
            username: vec!["x-remote-user".into()],
            group: vec!["x-remote-group".into()],
            extra_prefix: vec!["x-remote-extra-".into()],
        }
    }
}

/// All apiservers speak the same scheme, and https ones are verified.
pub fn check_schemes(apiservers: &[ApiserverSpec], peer: Option<&PeerTls>) -> Result<(), ConfigError> {
    let tls = apiservers.iter().filter(|a| a.is_tls()).count();
    if tls != 0 && tls != apiservers.len() {
        return Err(ConfigError::Apiservers("--apiserver URLs mix http:// and https://; use one scheme for all".into()));
    }
    match (tls != 0, peer.is_some()) {
        (true, false) => Err(ConfigError::Tls(
            apiservers.first().map(|a| a.name.clone()).unwrap_or_default(),
        )),
        (false, true) => Err(ConfigError::Apiservers(
            "--peer-ca-file is set but the apiservers are http://; use https:// URLs".into(),
        )),
        _ => Ok(()),
    }
}

#[derive(Clone)]
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
    pub front_tls: Option<FrontTls>,
    pub peer_tls: Option<PeerTls>,
    pub requestheader: RequestHeaderNames,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--ext-proc {0:?}: expected HOST:PORT")]
    ExtProc(String),
    #[error("--apiserver {0}: https:// apiservers need --peer-ca-file (they are never contacted unverified)")]
    Tls(String),
    #[error(
        "--client-ca-file forwards client identities as requestheaders, which apiservers trust only from the front door's --proxy-client-cert-file"
    )]
    IdentityNeedsProxyCert,
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

fn path(p: &std::path::Path) -> String {
    p.to_string_lossy().into_owned()
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
    check_schemes(&o.apiservers, o.peer_tls.as_ref())?;
    let forwards_identity = o.front_tls.as_ref().is_some_and(|f| f.client_ca_file.is_some());
    if forwards_identity && o.peer_tls.as_ref().is_none_or(|p| p.client.is_none()) {
        return Err(ConfigError::IdentityNeedsProxyCert);
    }
    let (ext_host, ext_port) = split_host_port(&o.ext_proc).ok_or_else(|| ConfigError::ExtProc(o.ext_proc.clone()))?;

    let all_ip = o.apiservers.iter().all(|a| is_ip(a.host()));
    let endpoints: Vec<Value> = o
        .apiservers
        .iter()
        .map(|a| json!({"endpoint": {"address": socket_address(a.host(), a.port()), "hostname": a.name}}))
        .collect();
    let retries = o.apiservers.len().saturating_sub(1).max(1);

    let names = &o.requestheader;
    let mut removed: Vec<&str> = STRIPPED_HEADERS.to_vec();
    removed.extend(names.username.iter().chain(&names.group).map(String::as_str));
    removed.sort_unstable();
    removed.dedup();
    let mut prefixes: Vec<&str> = STRIPPED_PREFIXES.to_vec();
    prefixes.extend(names.extra_prefix.iter().map(String::as_str));
    prefixes.sort_unstable();
    prefixes.dedup();
    let mut early_mutations: Vec<Value> = removed.iter().map(|h| json!({"remove": h})).collect();
    early_mutations.extend(
        prefixes.iter().map(|p| json!({"remove_on_match": {"key_matcher": {"prefix": p, "ignore_case": true}}})),
    );

    let mut router_config = json!({"role": "router", "route_header": ROUTE_HEADER});
    if forwards_identity {
        // The verified client certificate's CN and O, as kube's x509
        // authenticator reads them, forwarded under the first configured names.
        router_config["identity"] = json!({
            "username_header": names.username.first().cloned().unwrap_or_default(),
            "group_header": names.group.first().cloned().unwrap_or_default(),
        });
    }
    let refresher_config = json!({
        "role": "refresher",
        "cluster": "mvp_ext_proc",
        "poll_interval_ms": o.table_poll_interval.as_millis().max(1) as u64,
        "timeout_ms": 2000,
    });

    let route_action = |retries: usize| {
        json!({
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
        })
    };
    let no_ext_proc = json!({
        "envoy.filters.http.ext_proc": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute",
            "disabled": true,
        },
    });
    // `/apis` (kubectl also sends `/apis?timeout=32s`; the query is not part
    // of the match) goes through ext_proc; every other route has no
    // ext_proc stream at all.
    let discovery_route = |path: &str| json!({"match": {"path": path}, "route": route_action(retries)});
    // Requests the filter routed (it sets only the route header; setting it
    // clears the route cache, so Envoy matches again): one route per number
    // of listed apiservers k, retrying at most k-1 times so a failover never
    // leaves the capable set, and marking the request peer-proxied.
    let routed_routes: Vec<Value> = (1..o.apiservers.len())
        .map(|k| {
            let regex = if k == 1 { "^[^,]+$".to_string() } else { format!("^[^,]+(,[^,]+){{{}}}$", k - 1) };
            json!({
                "match": {"prefix": "/", "headers": [{"name": ROUTE_HEADER, "string_match": {"safe_regex": {"regex": regex}}}]},
                "route": route_action(k - 1),
                "request_headers_to_add": [{
                    "header": {"key": "x-kubernetes-peer-proxied", "value": "true"},
                    "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
                }],
                "typed_per_filter_config": no_ext_proc.clone(),
            })
        })
        .collect();
    let mut routes = vec![discovery_route("/apis"), discovery_route("/apis/")];
    routes.extend(routed_routes);
    routes.push(json!({"match": {"prefix": "/"}, "route": route_action(retries), "typed_per_filter_config": no_ext_proc}));
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
                "routes": routes,
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
                    // One round trip per /apis request: the response-headers
                    // message carries the three request headers the rewrite
                    // needs (CEL; Envoy cannot send the whole header map).
                    "response_attributes": crate::rewrite::processor::REQUEST_ATTRIBUTES,
                    "processing_mode": {
                        "request_header_mode": "SKIP",
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

    // Upstream mTLS: apiservers must present a certificate from
    // --peer-ca-file for the peer server name (kube: kubernetes.default.svc);
    // the front door presents its proxy client certificate. HTTP/1.1 only, so
    // exec/attach/port-forward upgrades pass through as they are.
    let upstream_tls = match &o.peer_tls {
        None => Value::Null,
        Some(p) => {
            let mut common = json!({
                "validation_context": {
                    "trusted_ca": {"filename": path(&p.ca_file)},
                    "match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": p.server_name}}],
                },
                "alpn_protocols": ["http/1.1"],
            });
            if let Some((cert, key, _)) = &p.client {
                common["tls_certificates"] =
                    json!([{"certificate_chain": {"filename": path(cert)}, "private_key": {"filename": path(key)}}]);
            }
            json!({
                "name": "envoy.transport_sockets.tls",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                    "sni": p.server_name,
                    "common_tls_context": common,
                },
            })
        }
    };

    let mut filter_chain = json!({"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}]});
    if let Some(t) = &o.front_tls {
        let mut common = json!({
            "tls_certificates": [{"certificate_chain": {"filename": path(&t.cert_file)}, "private_key": {"filename": path(&t.key_file)}}],
            "alpn_protocols": ["h2", "http/1.1"],
        });
        if let Some(ca) = &t.client_ca_file {
            // Client certificates are optional (bearer tokens work too), but
            // one that is presented must chain to --client-ca-file or the
            // handshake fails.
            common["validation_context"] = json!({"trusted_ca": {"filename": path(ca)}});
        }
        filter_chain["transport_socket"] = json!({
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
                "common_tls_context": common,
                "require_client_certificate": false,
            },
        });
    }

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
                "filter_chains": [filter_chain],
            }],
            "clusters": [
                {
                    "name": "apiservers",
                    "type": if all_ip { "STATIC" } else { "STRICT_DNS" },
                    "dns_lookup_family": "V4_PREFERRED",
                    "connect_timeout": "2s",
                    // Every watch holds an upstream HTTP/1.1 connection; Envoy's
                    // defaults (1,024) would cap a cluster's watchers.
                    "circuit_breakers": {"thresholds": [{
                        "max_connections": 1_000_000,
                        "max_pending_requests": 1_000_000,
                        "max_requests": 1_000_000,
                        "max_retries": 10_000,
                    }]},
                    "transport_socket": upstream_tls,
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
        // A bound on client connections (each watch holds one): Envoy warns
        // at start without one.
        "overload_manager": {"resource_monitors": [{
            "name": "envoy.resource_monitors.global_downstream_max_connections",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig",
                "max_active_downstream_connections": 50000,
            },
        }]},
    }))
}

/// Optional parts are rendered as null; Envoy wants them absent.
fn drop_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(drop_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// YAML for humans; the header says how it was made so nobody edits it by hand.
pub fn render_yaml(o: &EnvoyConfigOptions, command: &str) -> Result<String, ConfigError> {
    let mut v = render(o)?;
    drop_nulls(&mut v);
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
            front_tls: None,
            peer_tls: None,
            requestheader: RequestHeaderNames::default(),
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
        assert!(render(&opts(&["a=https://127.0.0.1:1", "b=http://127.0.0.1:2"])).is_err());
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
