//! Renders the complete Envoy bootstrap for a set of apiservers, so the front
//! door is two processes: `mvp-ext-proc serve …` and `envoy -c <file>`.
//!
//! One file per part, in the order a request meets them: [`listener`] (TLS
//! from clients), [`hcm`] (header stripping, local replies), [`filters`]
//! (the wasm router, ext_proc for `/apis`; the wasm refresher beside them),
//! [`routes`] (retries and the peer-proxied header for pinned requests),
//! [`static_cluster`] (mvp-ext-proc). The apiserver clusters and their members
//! come from mvp-ext-proc over ADS ([`crate::xds`]), so membership changes
//! without restarting Envoy.
//!
//! The safety of routing rests on three pieces:
//! - HCM early header mutation strips the route header, the peer-proxied
//!   loop guard and every requestheader identity header from client
//!   requests before any filter runs ([`hcm`]).
//! - The apiservers cluster's override-host policy only ever selects one of
//!   its own members ([`crate::xds::clusters`]).
//! - Retries on connect failure walk the override-host list, which is how a
//!   request fails over to another apiserver that serves the same API, and
//!   never past it ([`routes`]).

mod static_cluster;
pub mod control_tls;
pub mod edge;
pub mod filter_choice;
mod filters;
mod hcm;
mod listener;
mod routes;
mod skew_log;

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};

use mvp_contract::envoy::{EXT_PROC_AUTHORITY, EXT_PROC_CLUSTER, NODE_FILTER_BUILD, NODE_NATIVE_MODULE};

use crate::apiservers::ApiserverSpec;
use crate::tls::{FrontTls, PeerTls, RequestHeaderNames};

pub use filter_choice::FilterBuild;

#[derive(Clone)]
pub struct EnvoyConfigOptions {
    pub apiservers: Vec<ApiserverSpec>,
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    /// The routing filter's build and where Envoy finds it.
    pub filter: FilterBuild,
    /// mvp-ext-proc's gRPC address, `IP:port`, `host:port` or
    /// `unix:/path`: one per replica, the preferred first.
    pub ext_proc: Vec<String>,
    pub table_poll_interval: Duration,
    /// Longest the filter holds a request only closed apiservers serve,
    /// waiting for a table that opens one, before its 503 (0: the 503 at once).
    pub hold_unavailable: Duration,
    /// Requests one worker holds at once, and of those one client's.
    pub hold_max_per_worker: u32,
    pub hold_max_per_client: u32,
    /// What one worker's held requests may buffer of their bodies in all.
    pub hold_max_body_bytes: u64,
    /// The listener takes the PROXY protocol from peers in these ranges
    /// only ([`listener`]); empty: no PROXY protocol.
    pub proxy_protocol_from: Vec<ipnet::IpNet>,
    /// Longest Envoy waits for mvp-ext-proc per `/apis` phase before serving
    /// the apiserver's own document.
    pub ext_proc_message_timeout: Duration,
    pub front_tls: Option<FrontTls>,
    pub peer_tls: Option<PeerTls>,
    pub requestheader: RequestHeaderNames,
    /// Envoy's per-request access log (JSON lines on stdout) on or off.
    pub access_log: bool,
    /// Requests for skewed APIs marked and logged to mvp-ext-proc
    /// ([`skew_log`]), for `readiness`'s clients.
    pub record_skew: bool,
    /// A `Warning` on responses for resources only apiservers older than
    /// the newest release serve.
    pub warn_on_skew: bool,
    /// Longest a client may take to send its request headers
    /// ([`edge::hcm_options`]; zero: no bound).
    pub request_headers_timeout: Duration,
    /// Envoy's heap bound for the overload manager ([`edge::overload_manager`]).
    pub max_heap_bytes: u64,
    /// The overload manager also watches the container's memory limit
    /// ([`edge::overload_manager`]); Envoy refuses to start with it where it
    /// finds no cgroup memory files.
    pub cgroup_memory_monitor: bool,
    /// Longest a request that is not long-running may take (zero: no bound).
    pub request_timeout: Duration,
    /// Longest a read that is not long-running waits for a byte from one
    /// apiserver before it is tried on another capable one (zero: no bound).
    pub read_idle_timeout: Duration,
    /// Mutual TLS to mvp-ext-proc ([`control_tls`]); `None`: plaintext h2c
    /// (a Unix socket, or loopback).
    pub control_tls: Option<control_tls::ControlTls>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--ext-proc {0:?}: expected HOST:PORT or unix:/ABSOLUTE/PATH")]
    ExtProc(String),
    #[error("--ext-proc: at least one mvp-ext-proc address is needed")]
    NoExtProc,
    #[error("--ext-proc-cert-file: mvp-ext-proc serves TLS on TCP only; a Unix socket (unix:PATH) is authenticated by who can open it: drop the TLS flags or give TCP addresses")]
    ControlTlsOverPipe,
    #[error(
        "--ext-proc: Unix sockets and host names cannot be mixed (Envoy resolves every address of a cluster with host names)"
    )]
    ExtProcKinds,
    #[error(
        "--client-ca-file forwards client identities as requestheaders, which apiservers trust only from the front door's --proxy-client-cert-file"
    )]
    IdentityNeedsProxyCert,
    #[error("--hold-unavailable {0:?}: at most {max}s", max = mvp_contract::limits::MAX_TABLE_WAIT_MS / 1000)]
    HoldTooLong(Duration),
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

/// mvp-ext-proc as Envoy reaches it: a Unix socket (`pipe`) or a host and
/// port.
fn ext_proc_address(s: &str) -> Option<static_cluster::Address> {
    if let Some(p) = s.strip_prefix(crate::grpc::listen::UNIX_PREFIX) {
        return crate::grpc::listen::unix_path(p).ok().map(|_| static_cluster::Address::Pipe(p.to_string()));
    }
    split_host_port(s).map(|(host, port)| static_cluster::Address::HostPort(host, port))
}

fn path(p: &std::path::Path) -> String {
    p.to_string_lossy().into_owned()
}

fn is_ip(host: &str) -> bool {
    host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>().is_ok()
}

pub fn render(o: &EnvoyConfigOptions) -> Result<Value, ConfigError> {
    if !o.apiservers.is_empty() {
        crate::apiservers::validate_set(&o.apiservers).map_err(ConfigError::Apiservers)?;
        crate::apiservers::check_schemes(&o.apiservers, o.peer_tls.as_ref()).map_err(ConfigError::Apiservers)?;
    }
    let forwards_identity = o.front_tls.as_ref().is_some_and(|f| f.client_ca_file.is_some());
    if forwards_identity && o.peer_tls.as_ref().is_none_or(|p| p.client.is_none()) {
        return Err(ConfigError::IdentityNeedsProxyCert);
    }
    if o.ext_proc.is_empty() {
        return Err(ConfigError::NoExtProc);
    }
    if o.hold_unavailable > Duration::from_millis(mvp_contract::limits::MAX_TABLE_WAIT_MS.into()) {
        return Err(ConfigError::HoldTooLong(o.hold_unavailable));
    }
    let replicas = o.ext_proc.iter().map(|a| ext_proc_address(a).ok_or_else(|| ConfigError::ExtProc(a.clone()))).collect::<Result<Vec<_>, _>>()?;
    if o.control_tls.is_some() && replicas.iter().any(|r| matches!(r, static_cluster::Address::Pipe(_))) {
        return Err(ConfigError::ControlTlsOverPipe);
    }
    let ext_proc_clusters = static_cluster::ext_proc(replicas, o.control_tls.as_ref())?;
    Ok(json!({
        "node": node(&o.filter),
        "admin": {"address": socket_address(&o.admin.ip().to_string(), o.admin.port())},
        "bootstrap_extensions": [filters::refresher_extension(o)],
        "static_resources": {
            "listeners": [listener::listener(o, forwards_identity)],
            "clusters": ext_proc_clusters,
        },
        // The apiserver clusters (CDS) and their members (EDS) from
        // mvp-ext-proc, state of the world on one ADS stream. Until the first
        // answer Envoy waits (initial_fetch_timeout) before it listens; after
        // that it keeps the last accepted configuration while mvp-ext-proc
        // is away.
        "dynamic_resources": {
            "ads_config": {
                "api_type": "GRPC",
                "transport_api_version": "V3",
                "grpc_services": [{"envoy_grpc": {"cluster_name": EXT_PROC_CLUSTER, "authority": EXT_PROC_AUTHORITY}}],
                "set_node_on_first_message_only": true,
            },
            "cds_config": {"ads": {}, "resource_api_version": "V3", "initial_fetch_timeout": "30s"},
        },
        // Client connections and heap (edge.rs).
        "overload_manager": edge::overload_manager(o.max_heap_bytes, o.cgroup_memory_monitor),
        // One new request per client connection per event-loop turn (edge.rs).
        "layered_runtime": edge::layered_runtime(),
    }))
}

/// Envoy's node. Its metadata says which filter build it runs (mvp-ext-proc's
/// `/table` lists connected Envoys by it); the native build's names its
/// module, so mvp-ext-proc serves it clusters with the module's balancer.
fn node(filter: &FilterBuild) -> Value {
    match filter {
        FilterBuild::Wasm(_) => json!({"id": "mvp-envoy", "cluster": "mvp-envoy", "metadata": {NODE_FILTER_BUILD: filter.name()}}),
        FilterBuild::Native(module) => {
            json!({"id": "mvp-envoy", "cluster": "mvp-envoy", "metadata": {NODE_FILTER_BUILD: filter.name(), NODE_NATIVE_MODULE: module}})
        }
    }
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

/// The command line recorded in the rendered file: argv[0] varies by install
/// path and the output file is not part of what was rendered.
pub fn rendering_command(args: impl Iterator<Item = String>) -> String {
    let mut out = vec!["mvp-ext-proc".to_string()];
    let mut skip_value = false;
    for a in args {
        if skip_value {
            skip_value = false;
        } else if a == "--output" || a == "-o" {
            skip_value = true;
        } else if !a.starts_with("--output=") {
            out.push(a);
        }
    }
    out.join(" ")
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
