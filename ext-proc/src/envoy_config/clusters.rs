//! The two upstream clusters: the apiservers (override-host load balancing
//! on the route header, upstream mTLS) and mvp-ext-proc (gRPC).

use mvp_contract::envoy::{APISERVERS_CLUSTER, APISERVERS_REQUESTHEADER_CLUSTER, EXT_PROC_CLUSTER};
use mvp_contract::headers::ROUTE;
use serde_json::{Value, json};

use super::{EnvoyConfigOptions, is_ip, path, socket_address};
use crate::tls::PeerTls;

/// Upstream mTLS: apiservers must present a certificate from
/// `--peer-ca-file` for the peer server name (kube: kubernetes.default.svc);
/// with `proxy_certificate`, the front door presents its proxy client
/// certificate. HTTP/1.1 only, so exec/attach/port-forward upgrades pass
/// through as they are.
fn upstream_tls(p: &PeerTls, proxy_certificate: bool) -> Value {
    let mut common = json!({
        "validation_context": {
            "trusted_ca": {"filename": path(&p.ca_file)},
            "match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": p.server_name}}],
        },
        "alpn_protocols": ["http/1.1"],
    });
    if let Some((cert, key, _)) = p.client.as_ref().filter(|_| proxy_certificate) {
        common["tls_certificates"] = json!([{"certificate_chain": {"filename": path(cert)}, "private_key": {"filename": path(key)}}]);
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

/// The override-host policy only ever selects one of the cluster's own
/// members; an address outside the set falls back to round robin, so no
/// request can reach a host outside the configured apiservers.
fn override_host() -> Value {
    json!({
        "policies": [{
            "typed_extension_config": {
                "name": "envoy.load_balancing_policies.override_host",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost",
                    "override_host_sources": [{"header": ROUTE}],
                    "fallback_policy": {"policies": [{"typed_extension_config": {
                        "name": "envoy.load_balancing_policies.round_robin",
                        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin"},
                    }}]},
                },
            },
        }],
    })
}

fn protocol(options: Value) -> Value {
    json!({
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": options,
        },
    })
}

/// The apiserver clusters: one without a client certificate, and, when the
/// front door forwards identities, one that presents the proxy client
/// certificate (see `routes`).
pub fn apiservers(o: &EnvoyConfigOptions, forwards_identity: bool) -> Vec<Value> {
    let mut out = vec![apiserver_cluster(o, APISERVERS_CLUSTER, false)];
    if forwards_identity {
        out.push(apiserver_cluster(o, APISERVERS_REQUESTHEADER_CLUSTER, true));
    }
    out
}

fn apiserver_cluster(o: &EnvoyConfigOptions, name: &str, proxy_certificate: bool) -> Value {
    let all_ip = o.apiservers.iter().all(|a| is_ip(a.host()));
    let endpoints: Vec<Value> = o
        .apiservers
        .iter()
        .map(|a| json!({"endpoint": {"address": socket_address(a.host(), a.port()), "hostname": a.name}}))
        .collect();
    json!({
        "name": name,
        "type": if all_ip { "STATIC" } else { "STRICT_DNS" },
        "dns_lookup_family": "V4_PREFERRED",
        "connect_timeout": "2s",
        // Every watch holds an upstream HTTP/1.1 connection; Envoy's defaults
        // (1,024) would cap a cluster's watchers.
        "circuit_breakers": {"thresholds": [{
            "max_connections": 1_000_000,
            "max_pending_requests": 1_000_000,
            "max_requests": 1_000_000,
            "max_retries": 10_000,
        }]},
        "transport_socket": o.peer_tls.as_ref().map(|p| upstream_tls(p, proxy_certificate)),
        "load_balancing_policy": override_host(),
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": endpoints}]},
        "typed_extension_protocol_options": protocol(json!({"http_protocol_options": {}})),
    })
}

pub fn ext_proc(host: &str, port: u16) -> Value {
    json!({
        "name": EXT_PROC_CLUSTER,
        "type": if is_ip(host) { "STATIC" } else { "STRICT_DNS" },
        "dns_lookup_family": "V4_PREFERRED",
        "connect_timeout": "1s",
        "load_assignment": {"cluster_name": EXT_PROC_CLUSTER, "endpoints": [{"lb_endpoints": [{"endpoint": {"address": socket_address(host, port)}}]}]},
        "typed_extension_protocol_options": protocol(json!({"http2_protocol_options": {}})),
    })
}
