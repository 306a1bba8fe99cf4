//! The client side's protections: what Envoy's "Configuring Envoy as an edge
//! proxy" page recommends, fitted to Kubernetes clients. Each bound is here
//! once, with why it is the value it is.
//!
//! Kept from the page: per-connection buffer limits, HTTP/2 stream and
//! window limits, header count and size limits, a request-headers timeout
//! (slowloris), the overload manager on heap as well as on connections, a
//! connection idle timeout. Not kept, and why: the page's 5-minute stream
//! idle and request timeouts (a watch is quiet for minutes and lives until
//! the apiserver ends it, `--min-request-timeout`), its 100 streams per
//! HTTP/2 connection (a kubelet multiplexes hundreds of watches on one;
//! kube-apiserver's own `--http2-max-streams-per-connection` default is
//! 1000), and path normalization (the apiserver must see the client's path
//! as sent: kube classifies it itself).

use std::time::Duration;

use serde_json::{Value, json};

/// Bytes Envoy buffers per client connection before it stops reading from
/// it (the page's 32 KiB): a slow reader or a fast writer is pushed back,
/// not buffered. Request bodies kept for a resend have their own bound
/// (`RETRY_BODY_BUFFER_BYTES`, on the route).
pub const CONNECTION_BUFFER_BYTES: u32 = 32 << 10;

/// Concurrent streams per client HTTP/2 connection: more than
/// kube-apiserver's own (100; 250 before 1.29), so a client that works
/// directly works through the front door — a kubelet's hundreds of watches
/// fit one connection (the door spreads them over its apiserver
/// connections, `xds::clusters::APISERVER_HTTP2_MAX_STREAMS` each).
pub const MAX_CONCURRENT_STREAMS: u32 = 1000;

/// HTTP/2 flow-control windows (the page's): per stream 64 KiB, per
/// connection 1 MiB — what one connection can make Envoy hold, whatever its
/// number of streams.
pub const STREAM_WINDOW_BYTES: u32 = 64 << 10;
pub const CONNECTION_WINDOW_BYTES: u32 = 1 << 20;

/// Request header limits: Envoy's defaults, written down (kube's
/// `MaxHeaderBytes` is 1 MiB, but no Kubernetes client sends more than a few
/// KiB: a bearer token, impersonation, an audit ID).
pub const MAX_HEADERS_COUNT: u32 = 100;
pub const MAX_REQUEST_HEADERS_KB: u32 = 60;

/// A client connection with no request for this long is closed (the
/// page's hour). A watch is a request: a connection carrying one is never
/// idle.
pub const CONNECTION_IDLE_TIMEOUT: &str = "3600s";

/// The overload manager's heap thresholds (the page's): past 95 % of
/// `--max-heap` Envoy returns freed memory to the system, past 98 % it
/// answers new requests with a 503 Status (retryable) instead of growing
/// until the OOM killer ends every stream at once.
const SHRINK_HEAP_AT: f64 = 0.95;
const STOP_ACCEPTING_REQUESTS_AT: f64 = 0.98;

/// The same against the container's memory limit, which Envoy reads from
/// its cgroup at run time (`cgroup_memory`, v1 or v2; no limit, no
/// pressure): what the OOM killer acts on counts more than the heap —
/// sockets' buffers, the wasm VMs, page cache — so it acts earlier. Before,
/// only `--max-heap` (2Gi by default) was watched, and the manifests cap
/// Envoy at 1Gi: the OOM killer came first.
const SHRINK_HEAP_AT_CONTAINER: f64 = 0.85;
const STOP_ACCEPTING_REQUESTS_AT_CONTAINER: f64 = 0.90;

/// Client connections Envoy keeps at most (each watch holds one stream;
/// Envoy warns at start without a bound).
pub const MAX_DOWNSTREAM_CONNECTIONS: u64 = 50_000;

/// The HTTP connection manager's part.
pub fn hcm_options(request_headers_timeout: Duration) -> Value {
    json!({
        // A client that does not finish its headers in time is cut off: a
        // slowloris holds no connection (zero turns it off).
        "request_headers_timeout": format!("{:.3}s", request_headers_timeout.as_secs_f64()),
        "max_request_headers_kb": MAX_REQUEST_HEADERS_KB,
        "common_http_protocol_options": {
            // `x_remote_user`, `x_mvp_route`: a header some hop might read as
            // its dashed twin never reaches an apiserver (HTTP/1.1 and h2).
            "headers_with_underscores_action": "DROP_HEADER",
            "max_headers_count": MAX_HEADERS_COUNT,
            "idle_timeout": CONNECTION_IDLE_TIMEOUT,
        },
        "http2_protocol_options": {
            "max_concurrent_streams": MAX_CONCURRENT_STREAMS,
            "initial_stream_window_size": STREAM_WINDOW_BYTES,
            "initial_connection_window_size": CONNECTION_WINDOW_BYTES,
        },
    })
}

/// New requests Envoy takes from one client connection per turn of its
/// event loop; the rest wait for the next turn (Envoy's mitigation of the
/// HTTP/2 rapid reset, CVE-2023-44487). Without it, one connection's burst
/// of HEADERS + RST_STREAM pairs was worked through in a single turn,
/// every other connection of that worker waiting behind it (measured,
/// `rapid_reset::a_rapid_reset_flood_is_cut_off_and_the_others_are_served`:
/// a legitimate client's p99 0.6–1.5 s under the flood on the wasm build,
/// and the flood kept its connections because its requests were answered
/// before their resets; with 1: 25–100 ms, every flood connection closed
/// by Envoy's premature-reset check). A kubelet's hundreds of watches on
/// one connection still all go through, one per turn.
pub const MAX_REQUESTS_PER_IO_CYCLE: u32 = 1;

/// The bootstrap's runtime: the values above Envoy takes from its runtime
/// rather than from configuration.
pub fn layered_runtime() -> Value {
    json!({"layers": [{"name": "edge", "static_layer": {"http.max_requests_per_io_cycle": MAX_REQUESTS_PER_IO_CYCLE}}]})
}

/// The bootstrap's overload manager: client connections, heap and (with
/// `cgroup_memory`) the container's memory.
pub fn overload_manager(max_heap_bytes: u64, cgroup_memory: bool) -> Value {
    const HEAP: &str = "envoy.resource_monitors.fixed_heap";
    const CONTAINER: &str = "envoy.resource_monitors.cgroup_memory";
    let at = |heap: f64, container: f64| {
        let mut t = vec![json!({"name": HEAP, "threshold": {"value": heap}})];
        if cgroup_memory {
            t.push(json!({"name": CONTAINER, "threshold": {"value": container}}));
        }
        Value::Array(t)
    };
    let mut manager = json!({
        "refresh_interval": "0.25s",
        "resource_monitors": [
            {
                "name": "envoy.resource_monitors.global_downstream_max_connections",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig",
                    "max_active_downstream_connections": MAX_DOWNSTREAM_CONNECTIONS,
                },
            },
            {
                "name": HEAP,
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig",
                    "max_heap_size_bytes": max_heap_bytes,
                },
            },
            {
                "name": CONTAINER,
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.resource_monitors.cgroup_memory.v3.CgroupMemoryConfig",
                },
            },
        ],
        "actions": [
            {"name": "envoy.overload_actions.shrink_heap", "triggers": at(SHRINK_HEAP_AT, SHRINK_HEAP_AT_CONTAINER)},
            {"name": "envoy.overload_actions.stop_accepting_requests", "triggers": at(STOP_ACCEPTING_REQUESTS_AT, STOP_ACCEPTING_REQUESTS_AT_CONTAINER)},
        ],
    });
    if !cgroup_memory && let Some(monitors) = manager["resource_monitors"].as_array_mut() {
        monitors.retain(|m| m["name"] != CONTAINER);
    }
    manager
}

/// Whether a process here finds cgroup memory files where Envoy's
/// `cgroup_memory` monitor reads them — its cgroup's, as a container sees
/// them: `/sys/fs/cgroup/memory.max` (v2) or
/// `/sys/fs/cgroup/memory/memory.limit_in_bytes` (v1). Envoy refuses to
/// start with the monitor where it finds neither: on a cgroup v2 host's root
/// (no `memory.max` there), or where `/sys` is another mount (`ip netns
/// exec`). `envoy-config --cgroup-memory-monitor auto` asks this of the
/// machine it renders on — in the manifests, Envoy's own pod.
pub fn cgroup_memory_files_here() -> bool {
    std::path::Path::new("/sys/fs/cgroup/memory.max").exists() || std::path::Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists()
}

/// `--max-heap`: bytes, or a Kubernetes-style binary quantity (`512Mi`,
/// `2Gi`).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let (digits, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, ""),
    };
    let shift = match unit {
        "" => 0,
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        _ => return Err(format!("{s:?}: expected bytes or a quantity in Ki, Mi or Gi (e.g. 2Gi)")),
    };
    let n: u64 = digits.parse().map_err(|_| format!("{s:?}: expected bytes or a quantity in Ki, Mi or Gi (e.g. 2Gi)"))?;
    n.checked_mul(1 << shift).filter(|b| *b > 0).ok_or_else(|| format!("{s:?}: out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_read_as_kube_writes_them() {
        for (s, want) in [("2Gi", Ok(2u64 << 30)), ("512Mi", Ok(512 << 20)), ("64Ki", Ok(64 << 10)), ("1048576", Ok(1 << 20))] {
            assert_eq!(parse_bytes(s), want, "{s}");
        }
        for bad in ["", "2G", "2gi", "-1Mi", "0", "Gi", "99999999999Gi"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }
}
