//! The one static cluster: mvp-ext-proc (gRPC: ADS, `GetTable`, ext_proc).
//! The apiserver clusters come over ADS ([`crate::xds::clusters`]).

use mvp_contract::envoy::EXT_PROC_CLUSTER;
use serde_json::{Value, json};

use super::{is_ip, socket_address};

fn protocol(options: Value) -> Value {
    json!({
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": options,
        },
    })
}

/// Where mvp-ext-proc listens, as Envoy reaches it.
pub enum Address {
    HostPort(String, u16),
    /// A Unix socket path (`--grpc-listen unix:PATH`).
    Pipe(String),
}

pub fn ext_proc(at: Address) -> Value {
    let (kind, address) = match at {
        Address::HostPort(host, port) => (if is_ip(&host) { "STATIC" } else { "STRICT_DNS" }, socket_address(&host, port)),
        Address::Pipe(path) => ("STATIC", json!({"pipe": {"path": path}})),
    };
    json!({
        "name": EXT_PROC_CLUSTER,
        "type": kind,
        "dns_lookup_family": "V4_PREFERRED",
        "connect_timeout": "1s",
        "load_assignment": {"cluster_name": EXT_PROC_CLUSTER, "endpoints": [{"lb_endpoints": [{"endpoint": {"address": address}}]}]},
        // HTTP/2 keepalive from Envoy's side too: a held `GetTable` long
        // poll or ADS stream on a connection to an mvp-ext-proc that vanished
        // without a reset (its machine powered off, a partition) is given up
        // within interval + timeout and asked again, not after the poll's
        // whole wait or when TCP gives up.
        "typed_extension_protocol_options": protocol(json!({"http2_protocol_options": {
            "connection_keepalive": {"interval": "10s", "timeout": "5s"},
        }})),
    })
}
