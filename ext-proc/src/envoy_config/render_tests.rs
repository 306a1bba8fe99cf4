//! Tests of `mod.rs`: the bootstrap as rendered.

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
        hold_max_per_worker: mvp_contract::limits::DEFAULT_MAX_HELD,
        hold_max_per_client: mvp_contract::limits::DEFAULT_MAX_HELD_PER_CLIENT,
        hold_max_body_bytes: mvp_contract::limits::DEFAULT_MAX_HELD_BODY_BYTES,
        proxy_protocol_from: vec![],
        ext_proc_message_timeout: Duration::from_secs(1),
        front_tls: None,
        peer_tls: None,
        requestheader: RequestHeaderNames::default(),
        access_log: true,
        record_skew: true,
        warn_on_skew: true,
        request_headers_timeout: Duration::from_secs(10),
        max_heap_bytes: 2 << 30,
        cgroup_memory_monitor: true,
        request_timeout: Duration::from_secs(70),
        read_idle_timeout: Duration::from_secs(20),
        control_tls: None,
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
    assert_eq!(hold, Some(HoldConfig { max_ms: 1000, max_held: 1024, max_held_per_client: 8, max_held_body_bytes: 32 << 20, cluster: EXT_PROC_CLUSTER.into(), authority: "mvp-ext-proc".into() }));
    // The bounds as given (envoy-config --hold-max-per-worker, --hold-max-per-client).
    let sized = EnvoyConfigOptions { hold_max_per_worker: 4096, hold_max_per_client: 2, ..opts(&[]) };
    let PluginConfig::Router(RouterConfig { hold, .. }) = router_config(&sized) else { panic!("not the router") };
    assert_eq!(hold.map(|h| (h.max_held, h.max_held_per_client)), Some((4096, 2)));
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

/// With the control channel's TLS, every mvp-ext-proc cluster (the
/// fallback's too) presents Envoy's certificate and verifies the server's;
/// a Unix socket cannot take it.
#[test]
fn control_tls_on_every_ext_proc_cluster_and_never_over_a_pipe() {
    let tls = super::control_tls::ControlTls {
        ca_file: "/p/ca.crt".into(),
        cert_file: "/p/envoy.crt".into(),
        key_file: "/p/envoy.key".into(),
        server_name: "mvp-ext-proc".into(),
        sds_dir: "/sds".into(),
    };
    let two = EnvoyConfigOptions { ext_proc: vec!["10.0.0.1:18000".into(), "10.0.0.2:18000".into()], control_tls: Some(tls.clone()), ..opts(&[]) };
    let v = render(&two).unwrap();
    let clusters = v["static_resources"]["clusters"].as_array().unwrap();
    assert_eq!(clusters.len(), 2);
    for c in clusters {
        assert_eq!(c["transport_socket"], tls.transport_socket(), "{}", c["name"]);
    }
    assert!(render(&opts(&[])).unwrap()["static_resources"]["clusters"][0].get("transport_socket").is_none());
    let pipe = EnvoyConfigOptions { ext_proc: vec!["unix:/run/mvp/grpc.sock".into()], control_tls: Some(tls), ..opts(&[]) };
    assert!(matches!(render(&pipe), Err(ConfigError::ControlTlsOverPipe)));
}

/// The native build hands a pinned request's list to the clusters'
/// balancer on the same worker, which holds only while nothing after the
/// routing filter pauses a request before the router picks its host
/// (`native-filter/src/handover.rs`): every filter between them is an
/// ext_proc filter that skips request headers and bodies.
#[test]
fn nothing_after_the_routing_filter_pauses_a_request_before_its_host_is_picked() {
    for replicas in [1, 2] {
        let mut o = EnvoyConfigOptions { filter: FilterBuild::Native("/m/libmvp_native_filter.so".into()), ..opts(&["a=http://127.0.0.1:1"]) };
        o.ext_proc = ["127.0.0.1:18000", "mvp-ext-proc-b:18000"].iter().take(replicas).map(|s| s.to_string()).collect();
        let v = render(&o).unwrap();
        let filters = v["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"].as_array().unwrap().clone();
        let names: Vec<&str> = filters.iter().map(|f| f["name"].as_str().unwrap()).collect();
        assert_eq!((names.first(), names.last(), names.len()), (Some(&"mvp.route"), Some(&"envoy.filters.http.router"), replicas + 2), "{names:?}");
        for f in &filters[1..filters.len() - 1] {
            let tc = &f["typed_config"];
            let ext_proc = if tc["extension_config"].is_object() { &tc["extension_config"]["typed_config"] } else { tc };
            assert_eq!(ext_proc["@type"], "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor", "{}", f["name"]);
            let mode = &ext_proc["processing_mode"];
            assert_eq!((mode["request_header_mode"].as_str(), mode["request_body_mode"].as_str().unwrap_or("NONE")), (Some("SKIP"), "NONE"), "{}", f["name"]);
        }
    }
}

/// The PROXY protocol only when asked, then first and required; the
/// overload manager watches the heap bound and the container's limit.
#[test]
fn proxy_protocol_when_asked_and_the_container_limit_watched() {
    let plain = render(&opts(&[])).unwrap();
    assert!(plain["static_resources"]["listeners"][0].get("listener_filters").is_none());
    assert!(plain["static_resources"]["listeners"][0]["filter_chains"][0].get("filter_chain_match").is_none());
    let from = vec!["10.0.0.0/24".parse().unwrap(), "fd00::7/128".parse().unwrap()];
    let v = render(&EnvoyConfigOptions { proxy_protocol_from: from, ..opts(&[]) }).unwrap();
    let filters = v["static_resources"]["listeners"][0]["listener_filters"].as_array().unwrap();
    assert_eq!(filters[0]["name"], "envoy.filters.listener.proxy_protocol");
    assert!(filters[0]["typed_config"].get("allow_requests_without_proxy_protocol").is_none(), "required on every connection");
    // From the balancers alone: the only filter chain matches their
    // addresses, anyone else's connection finds none.
    let chains = v["static_resources"]["listeners"][0]["filter_chains"].as_array().unwrap();
    assert_eq!(chains.len(), 1);
    assert_eq!(
        chains[0]["filter_chain_match"]["direct_source_prefix_ranges"],
        serde_json::json!([{"address_prefix": "10.0.0.0", "prefix_len": 24}, {"address_prefix": "fd00::7", "prefix_len": 128}])
    );
    let monitors: Vec<&str> = plain["overload_manager"]["resource_monitors"].as_array().unwrap().iter().filter_map(|m| m["name"].as_str()).collect();
    assert!(monitors.contains(&"envoy.resource_monitors.cgroup_memory") && monitors.contains(&"envoy.resource_monitors.fixed_heap"), "{monitors:?}");
    for action in plain["overload_manager"]["actions"].as_array().unwrap() {
        let on: Vec<&str> = action["triggers"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
        assert!(on.contains(&"envoy.resource_monitors.cgroup_memory"), "{action}");
    }
    // Without it (no cgroup memory files where Envoy runs): the heap alone.
    let off = render(&EnvoyConfigOptions { cgroup_memory_monitor: false, ..opts(&[]) }).unwrap();
    assert!(!off["overload_manager"].to_string().contains("cgroup_memory"));
}
