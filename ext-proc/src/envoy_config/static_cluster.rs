//! The static clusters: mvp-ext-proc (gRPC: ADS, `GetTable`, ext_proc), and
//! with replicas the same replicas in another order for the fallback
//! ext_proc filter. The apiserver clusters come over ADS
//! ([`crate::xds::clusters`]).

use mvp_contract::envoy::{EXT_PROC_CLUSTER, EXT_PROC_FALLBACK_CLUSTER};
use serde_json::{Value, json};

use super::control_tls::ControlTls;
use super::{ConfigError, is_ip, socket_address};

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

/// The `mvp_ext_proc` cluster: every replica, in the order given, one
/// priority each — active/standby, not spread. Every Envoy keeps its ADS
/// stream, its ext_proc streams and its `GetTable` calls on the first
/// replica that is healthy, so the endpoints it was sent and the tables it
/// routes by come from the same process (a replica opens a joining member
/// only once the Envoys connected to *it* acknowledged its endpoint). List
/// the replica on the Envoy's own node first to keep it local.
///
/// With more than one replica, Envoy health-checks them over
/// `grpc.health.v1` (NOT_SERVING until a replica's first table and from its
/// graceful stop; `crate::grpc::health`) and fails over within about a
/// second; with one there is nothing to fail over to.
///
/// With replicas, [`EXT_PROC_FALLBACK_CLUSTER`] too: the same replicas, the
/// second preferred (`super::filters`' fallback ext_proc filter).
///
/// With `tls`, both present Envoy's client certificate and verify
/// mvp-ext-proc's ([`super::control_tls`]).
pub fn ext_proc(mut replicas: Vec<Address>, tls: Option<&ControlTls>) -> Result<Vec<Value>, ConfigError> {
    let mut clusters = vec![cluster(EXT_PROC_CLUSTER, &replicas)?];
    if replicas.len() > 1 {
        replicas.rotate_left(1);
        clusters.push(cluster(EXT_PROC_FALLBACK_CLUSTER, &replicas)?);
    }
    if let Some(tls) = tls {
        for c in &mut clusters {
            c["transport_socket"] = tls.transport_socket();
        }
    }
    Ok(clusters)
}

/// One cluster of the replicas, one priority each in the order given.
fn cluster(name: &str, replicas: &[Address]) -> Result<Value, ConfigError> {
    let hostnames = replicas.iter().any(|a| matches!(a, Address::HostPort(host, _) if !is_ip(host)));
    let pipes = replicas.iter().any(|a| matches!(a, Address::Pipe(_)));
    if hostnames && pipes {
        // STRICT_DNS resolves every address; a pipe has none to resolve.
        return Err(ConfigError::ExtProcKinds);
    }
    let several = replicas.len() > 1;
    let endpoints: Vec<Value> = replicas
        .iter()
        .enumerate()
        .map(|(priority, at)| {
            let address = match at {
                Address::HostPort(host, port) => socket_address(host, *port),
                Address::Pipe(path) => json!({"pipe": {"path": path}}),
            };
            json!({"priority": priority, "lb_endpoints": [{"endpoint": {"address": address}}]})
        })
        .collect();
    let mut cluster = json!({
        "name": name,
        "type": if hostnames { "STRICT_DNS" } else { "STATIC" },
        "dns_lookup_family": "V4_PREFERRED",
        "connect_timeout": "1s",
        "load_assignment": {"cluster_name": name, "endpoints": endpoints},
        // Every `/apis` request opens an ext_proc stream; when a replica
        // dies, each of those in the moment before its health check fails
        // is retried on the next one. Envoy's default allows 3 retries in
        // flight per cluster: the rest would fail open (one apiserver's
        // `/apis`) — measured: 50 of 213 in a kill under load.
        "circuit_breakers": {"thresholds": [{"max_retries": 1024}]},
        // HTTP/2 keepalive from Envoy's side too: a held `GetTable` long
        // poll or ADS stream on a connection to an mvp-ext-proc that vanished
        // without a reset (its machine powered off, a partition) is given up
        // within interval + timeout and asked again, not after the poll's
        // whole wait or when TCP gives up.
        "typed_extension_protocol_options": protocol(json!({"http2_protocol_options": {
            "connection_keepalive": {"interval": "10s", "timeout": "5s"},
        }})),
    });
    if several {
        // A hung replica (SIGSTOP, a partition) is failed within about
        // 0.5 s + 0.25 s + 0.5 s; until then the `/apis` exchanges sent to
        // it time out (message timeout) and fall open. A replica answers
        // its check in microseconds, so 500 ms is no hair trigger.
        cluster["health_checks"] = json!([{
            "grpc_health_check": {},
            "interval": "0.25s",
            "timeout": "0.5s",
            // The standby carries no requests: without this it would be
            // checked once a minute.
            "no_traffic_interval": "0.25s",
            "unhealthy_threshold": 2,
            "healthy_threshold": 2,
        }]);
    }
    Ok(cluster)
}
