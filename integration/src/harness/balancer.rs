//! A TCP load balancer in front of the front door — kubeadm's HA guide puts
//! HAProxy in TCP mode there, a Service's SNAT does the same: every client
//! connection reaches the door from the balancer's address. Optionally it
//! sends the PROXY protocol v2 first (HAProxy's `send-proxy-v2`), which the
//! door takes with `envoy-config --proxy-protocol`. Here a second Envoy
//! (`tcp_proxy`, one upstream connection per client connection, as HAProxy
//! in TCP mode), from the same PyPI build the tests run.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use serde_json::json;

use super::process::{Proc, arg, free_ports, wait_for};
use super::tools::envoy_bin;

pub struct TcpBalancer {
    pub port: u16,
    pub proc: Proc,
}

impl TcpBalancer {
    /// Listens on a free port, forwarding every connection to
    /// `127.0.0.1:door_port`, with the PROXY protocol v2 if `proxy_protocol`.
    pub async fn start(dir: &Path, door_port: u16, proxy_protocol: bool) -> Result<TcpBalancer> {
        let ports = free_ports(2);
        let (port, admin) = (ports.first().copied().unwrap_or(0), ports.get(1).copied().unwrap_or(0));
        let address = |port: u16| json!({"socket_address": {"address": "127.0.0.1", "port_value": port}});
        let raw = json!({"name": "envoy.transport_sockets.raw_buffer", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer"}});
        let mut cluster = json!({
            "name": "door",
            "type": "STATIC",
            "connect_timeout": "2s",
            "load_assignment": {"cluster_name": "door", "endpoints": [{"lb_endpoints": [{"endpoint": {"address": address(door_port)}}]}]},
            "circuit_breakers": {"thresholds": [{"max_connections": 100000, "max_pending_requests": 100000}]},
        });
        if proxy_protocol {
            cluster["transport_socket"] = json!({
                "name": "envoy.transport_sockets.upstream_proxy_protocol",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.transport_sockets.proxy_protocol.v3.ProxyProtocolUpstreamTransport",
                    "config": {"version": "V2"},
                    "transport_socket": raw,
                },
            });
        }
        let config = json!({
            "admin": {"address": address(admin)},
            "static_resources": {
                "listeners": [{
                    "name": "balancer",
                    "address": address(port),
                    "filter_chains": [{"filters": [{
                        "name": "envoy.filters.network.tcp_proxy",
                        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy", "stat_prefix": "balancer", "cluster": "door"},
                    }]}],
                }],
                "clusters": [cluster],
            },
        });
        let file = dir.join(format!("balancer-{port}.yaml"));
        std::fs::write(&file, serde_json::to_string(&config)?)?;
        let args = vec!["-c".into(), arg(&file), "--concurrency".into(), "1".into(), "--disable-hot-restart".into(), "--base-id".into(), port.to_string(), "--log-level".into(), "warn".into()];
        let proc = Proc::spawn(&format!("balancer-{port}"), dir, &envoy_bin()?, &args)?;
        let http = reqwest::Client::builder().no_proxy().build()?;
        let ready = format!("http://127.0.0.1:{admin}/ready");
        wait_for("the TCP balancer to be ready", Duration::from_secs(30), || async { http.get(&ready).send().await.ok().filter(|r| r.status().is_success()) }).await?;
        Ok(TcpBalancer { port, proc })
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}
