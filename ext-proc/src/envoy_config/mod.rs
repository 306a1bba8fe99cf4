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
pub mod edge;
pub mod filter_choice;
mod filters;
mod hcm;
mod listener;
mod routes;

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};

use mvp_contract::envoy::{EXT_PROC_AUTHORITY, EXT_PROC_CLUSTER, NODE_FILTER_BUILD, NODE_NATIVE_MODULE};

use crate::apiservers::ApiserverSpec;
use crate::tls::{FrontTls, PeerTls, RequestHeaderNames};

/// The routing filter Envoy loads: the same router either way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FilterBuild {
    /// `mvp_wasm_filter.wasm` in Envoy's V8: any Envoy with wasm.
    Wasm(String),
    /// `libmvp_native_filter.so`, an Envoy dynamic module: past the
    /// proxy-wasm per-request floor, but built for one Envoy (1.40.x).
    Native(String),
}

impl FilterBuild {
    /// `native` or `wasm`: in the node metadata and the access log.
    pub fn name(&self) -> &'static str {
        match self {
            FilterBuild::Wasm(_) => "wasm",
            FilterBuild::Native(_) => "native",
        }
    }
}

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
    /// Longest Envoy waits for mvp-ext-proc per `/apis` phase before serving
    /// the apiserver's own document.
    pub ext_proc_message_timeout: Duration,
    pub front_tls: Option<FrontTls>,
    pub peer_tls: Option<PeerTls>,
    pub requestheader: RequestHeaderNames,
    /// Envoy's per-request access log (JSON lines on stdout) on or off.
    pub access_log: bool,
    /// Longest a client may take to send its request headers
    /// ([`edge::hcm_options`]; zero: no bound).
    pub request_headers_timeout: Duration,
    /// Envoy's heap bound for the overload manager ([`edge::overload_manager`]).
    pub max_heap_bytes: u64,
    /// Longest a request that is not long-running may take (zero: no bound).
    pub request_timeout: Duration,
    /// Longest a read that is not long-running waits for a byte from one
    /// apiserver before it is tried on another capable one (zero: no bound).
    pub read_idle_timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--ext-proc {0:?}: expected HOST:PORT or unix:/ABSOLUTE/PATH")]
    ExtProc(String),
    #[error("--ext-proc: at least one mvp-ext-proc address is needed")]
    NoExtProc,
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
    let ext_proc_clusters = static_cluster::ext_proc(replicas)?;
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
        "overload_manager": edge::overload_manager(o.max_heap_bytes),
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
mod tests {
    use super::*;
    use mvp_contract::envoy::{EXT_PROC_FALLBACK_CLUSTER, EXT_PROC_FALLBACK_FILTER};

    fn opts(apiservers: &[&str]) -> EnvoyConfigOptions {
        EnvoyConfigOptions {
            apiservers: apiservers.iter().map(|s| s.parse().unwrap()).collect(),
            listen: "127.0.0.1:8443".parse().unwrap(),
            admin: "127.0.0.1:9901".parse().unwrap(),
            filter: FilterBuild::Wasm("/w.wasm".into()),
            ext_proc: vec!["127.0.0.1:18000".into()],
            table_poll_interval: Duration::from_millis(200),
            hold_unavailable: Duration::from_secs(1),
            ext_proc_message_timeout: Duration::from_secs(1),
            front_tls: None,
            peer_tls: None,
            requestheader: RequestHeaderNames::default(),
            access_log: true,
            request_headers_timeout: Duration::from_secs(10),
            max_heap_bytes: 2 << 30,
            request_timeout: Duration::from_secs(70),
            read_idle_timeout: Duration::from_secs(20),
        }
    }

    #[test]
    fn apiserver_clusters_come_over_ads() {
        let v = render(&opts(&["a=http://127.0.0.1:1", "b=http://127.0.0.1:2"])).unwrap();
        let clusters = v["static_resources"]["clusters"].as_array().unwrap();
        assert_eq!(clusters.len(), 1);
        assert_eq!(clusters[0]["name"], EXT_PROC_CLUSTER);
        assert_eq!(v["dynamic_resources"]["ads_config"]["grpc_services"][0]["envoy_grpc"]["cluster_name"], EXT_PROC_CLUSTER);
        assert!(render(&opts(&[])).is_ok(), "the membership may come from the cluster alone");
    }

    #[test]
    fn rejects_what_it_cannot_render() {
        assert!(render(&opts(&["a=https://127.0.0.1:1"])).is_err());
        assert!(render(&opts(&["a=https://127.0.0.1:1", "b=http://127.0.0.1:2"])).is_err());
        let mut o = opts(&["a=http://127.0.0.1:1"]);
        for bad in [
            &["nonsense"][..],
            &["unix:relative.sock"],
            &["unix:"],
            &[],
            &["127.0.0.1:1", "nonsense"],
            &["unix:/run/a.sock", "b:1"],
        ] {
            o.ext_proc = bad.iter().map(ToString::to_string).collect();
            assert!(render(&o).is_err(), "{bad:?}");
        }
        let o = EnvoyConfigOptions { hold_unavailable: Duration::from_secs(61), ..opts(&[]) };
        assert!(matches!(render(&o), Err(ConfigError::HoldTooLong(_))));
    }

    /// The native build: the same router and refresher configurations, in
    /// Envoy's dynamic-module filter and bootstrap extension, one module file
    /// for both (so they share the table), never unloaded, and its metrics
    /// under the wasm build's names.
    #[test]
    fn the_native_build_loads_one_module_for_router_and_refresher() {
        let wasm = render(&opts(&["a=http://127.0.0.1:1"])).unwrap();
        let o = EnvoyConfigOptions { filter: FilterBuild::Native("/m/libmvp_native_filter.so".into()), ..opts(&["a=http://127.0.0.1:1"]) };
        let v = render(&o).unwrap();
        let filter = &v["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"][0]["typed_config"];
        let refresher = &v["bootstrap_extensions"][0]["typed_config"];
        assert_eq!(filter["@type"], "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter");
        assert_eq!(refresher["@type"], "type.googleapis.com/envoy.extensions.bootstrap.dynamic_modules.v3.DynamicModuleBootstrapExtension");
        let module = serde_json::json!({"module": {"local": {"filename": "/m/libmvp_native_filter.so"}}, "metrics_namespace": "wasmcustom", "do_not_close": true});
        assert_eq!((&filter["dynamic_module_config"], &refresher["dynamic_module_config"]), (&module, &module));
        let wasm_filter = &wasm["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"][0]["typed_config"];
        assert_eq!(filter["filter_config"]["value"], wasm_filter["config"]["configuration"]["value"]);
        assert_eq!(refresher["extension_config"]["value"], wasm["bootstrap_extensions"][0]["typed_config"]["config"]["configuration"]["value"]);
        // The node names the module (mvp-ext-proc then serves the clusters
        // with its load balancer); the wasm build's names none.
        assert_eq!(v["node"]["metadata"]["mvp_native_module"], "/m/libmvp_native_filter.so");
        assert!(wasm["node"]["metadata"].get("mvp_native_module").is_none(), "{}", wasm["node"]);
        // Which build routed: mvp-ext-proc's /table (by the node) and the
        // access log say so.
        assert_eq!((&v["node"]["metadata"]["mvp_filter"], &wasm["node"]["metadata"]["mvp_filter"]), (&json!("native"), &json!("wasm")));
        let log = |v: &Value| v["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]["access_log"][0]["typed_config"]["log_format"]["json_format"]["filter"].clone();
        assert_eq!((log(&v), log(&wasm)), (json!("native"), json!("wasm")));
    }

    /// The router plugin's configuration, as the filter parses it.
    fn router_config(o: &EnvoyConfigOptions) -> mvp_contract::plugin::PluginConfig {
        let v = render(o).unwrap();
        let hcm = &v["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
        let raw = hcm["http_filters"][0]["typed_config"]["config"]["configuration"]["value"].as_str().unwrap();
        mvp_contract::plugin::PluginConfig::parse(raw.as_bytes()).unwrap()
    }

    #[test]
    fn holds_requests_only_closed_apiservers_serve_unless_told_not_to() {
        use mvp_contract::plugin::{HoldConfig, PluginConfig, RouterConfig};
        let PluginConfig::Router(RouterConfig { hold, .. }) = router_config(&opts(&[])) else { panic!("not the router") };
        assert_eq!(hold, Some(HoldConfig { max_ms: 1000, max_held: 64, max_held_per_client: 8, cluster: EXT_PROC_CLUSTER.into(), authority: "mvp-ext-proc".into() }));
        let off = EnvoyConfigOptions { hold_unavailable: Duration::ZERO, ..opts(&[]) };
        assert!(matches!(router_config(&off), PluginConfig::Router(RouterConfig { hold: None, .. })));
    }

    #[test]
    fn reaches_ext_proc_over_tcp_or_a_unix_socket() {
        let mut o = opts(&["a=http://127.0.0.1:1"]);
        let cases = [
            ("127.0.0.1:18000", "STATIC", json!({"socket_address": {"address": "127.0.0.1", "port_value": 18000}})),
            ("mvp-ext-proc:18000", "STRICT_DNS", json!({"socket_address": {"address": "mvp-ext-proc", "port_value": 18000}})),
            ("unix:/run/mvp/grpc.sock", "STATIC", json!({"pipe": {"path": "/run/mvp/grpc.sock"}})),
        ];
        for (ext_proc, kind, address) in cases {
            o.ext_proc = vec![ext_proc.into()];
            let v = render(&o).unwrap();
            let cluster = &v["static_resources"]["clusters"][0];
            assert_eq!(cluster["type"], kind, "{ext_proc}");
            assert_eq!(cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"], address, "{ext_proc}");
            assert!(cluster.get("health_checks").is_none(), "one replica: nothing to fail over to");
        }
    }

    /// Replicas: one priority each in the order given (active/standby),
    /// health-checked over gRPC.
    #[test]
    fn replicas_are_priorities_in_order_and_health_checked() {
        let mut o = opts(&["a=http://127.0.0.1:1"]);
        o.ext_proc = vec!["127.0.0.1:18000".into(), "mvp-ext-proc-b:18000".into()];
        let v = render(&o).unwrap();
        let cluster = &v["static_resources"]["clusters"][0];
        assert_eq!(cluster["type"], "STRICT_DNS");
        let endpoints = cluster["load_assignment"]["endpoints"].as_array().unwrap();
        assert_eq!(endpoints.len(), 2);
        for (i, (e, host)) in endpoints.iter().zip(["127.0.0.1", "mvp-ext-proc-b"]).enumerate() {
            assert_eq!(e["priority"], i);
            assert_eq!(e["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]["address"], host);
        }
        assert!(cluster["health_checks"][0]["grpc_health_check"].is_object());

        // The fallback: the same replicas, the second preferred …
        let fallback = &v["static_resources"]["clusters"][1];
        assert_eq!(fallback["name"], EXT_PROC_FALLBACK_CLUSTER);
        let order: Vec<&Value> = fallback["load_assignment"]["endpoints"].as_array().unwrap().iter().map(|e| &e["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]["address"]).collect();
        assert_eq!(order, ["mvp-ext-proc-b", "127.0.0.1"]);
        assert!(fallback["health_checks"][0]["grpc_health_check"].is_object());
        // … behind a second ext_proc filter, off by default, placed before
        // the first (responses go through the filters in reverse) …
        let hcm = &v["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
        let names: Vec<&str> = hcm["http_filters"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["mvp.route", EXT_PROC_FALLBACK_FILTER, "envoy.filters.http.ext_proc", "envoy.filters.http.router"]);
        let second = &hcm["http_filters"][1];
        assert_eq!(second["disabled"], true);
        assert_eq!(second["typed_config"]["extension_config"]["typed_config"]["grpc_service"]["envoy_grpc"]["cluster_name"], EXT_PROC_FALLBACK_CLUSTER);
        // … which only the merged documents' routes turn on.
        let routes = hcm["route_config"]["virtual_hosts"][0]["routes"].as_array().unwrap();
        let on: Vec<&str> = routes.iter().filter(|r| !r["typed_per_filter_config"][EXT_PROC_FALLBACK_FILTER].is_null()).map(|r| r["match"]["path"].as_str().unwrap_or("")).collect();
        assert_eq!(on, routes::MERGED_PATHS);

        // One replica: nothing to fall back to.
        let v = render(&opts(&["a=http://127.0.0.1:1"])).unwrap();
        assert_eq!(v["static_resources"]["clusters"].as_array().unwrap().len(), 1);
        assert!(!v.to_string().contains(EXT_PROC_FALLBACK_FILTER));
    }

    #[test]
    fn strips_routing_and_identity_headers_first() {
        let v = render(&opts(&["a=http://127.0.0.1:1"])).unwrap();
        let hcm = &v["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
        let muts = hcm["early_header_mutation_extensions"][0]["typed_config"]["mutations"].to_string();
        for h in [mvp_contract::headers::ROUTE, "x-kubernetes-peer-proxied", "x-remote-"] {
            assert!(muts.contains(h), "{h} not stripped: {muts}");
        }
    }
}
