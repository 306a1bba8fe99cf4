//! The five front doors, each the production bootstrap with only the filter
//! changed.

use anyhow::{Context, Result};
use serde_json::{Value, json};

use mvp_contract::headers::ROUTE;

use super::api_set::ApiSet;
use super::config_edits::{hcm, insert_before_router, remove_ext_proc, remove_filter, remove_skew_log, routes};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// (1) no filter: the limit for any Envoy front door.
    NoFilter,
    /// (2)/(3) our wasm filter.
    Wasm,
    /// (4) a Lua filter doing the same classification and routing.
    Lua,
    /// (5) ext_proc on every request doing the routing (`ext-proc-router`,
    /// the filter's decision in a gRPC server).
    ExtProc,
    /// (6) the same wasm module doing nothing per request: the proxy-wasm
    /// dispatch floor any Rust-SDK filter pays. Configured as a root without
    /// a router (the filter's fail-safe: every request passes untouched).
    WasmFloor,
    /// (7) the routing floor: the least any proxy-wasm filter that routes by
    /// a header does (`integration/routing-floor`: read `:path`, write a
    /// fixed route header). Counted only ([`super::instructions`]).
    RoutingFloor,
    /// (8) the same in Lua. Counted only.
    LuaRoutingFloor,
    /// (9)/(10) the same routing as (2)/(3), built as an Envoy dynamic
    /// module (`native-filter/`, `envoy-config --filter native`). Counted
    /// only.
    Native,
    /// (11) no filter, on the native build's bootstrap: its routes (no
    /// per-list-length routes: the native build writes no host list) and no
    /// module — the plain door with the same route walk as (9). Counted
    /// only.
    NoFilterNativeRoutes,
    /// (12)/(13) the native door (9)/(10) asked for a resource every
    /// apiserver serves: not pinned, balanced (the steady state between
    /// upgrades). Its plain door is (11): no filter routes by path. Counted
    /// only.
    NativeUnpinned,
    /// (14) door (12) without the skew log and the warnings
    /// (`envoy-config --record-skew=false --warn-on-skew=false`): what they
    /// cost a request every apiserver serves. Counted only.
    NativeUnpinnedQuiet,
    /// (15) door (9) (pinned: a resource only some apiservers serve, so
    /// marked and logged) without the skew log and the warnings: what
    /// recording costs a skewed request. Counted only.
    NativeQuiet,
    /// (16) the wasm door (2) asked for a resource every apiserver serves
    /// (not pinned). Counted only.
    WasmUnpinned,
    /// (17) door (16) without the skew log and the warnings. Counted only.
    WasmUnpinnedQuiet,
    /// (18) door (2) without the skew log and the warnings. Counted only.
    WasmQuiet,
}

impl Variant {
    pub fn small_table() -> Vec<Variant> {
        vec![Variant::NoFilter, Variant::Wasm, Variant::Lua, Variant::ExtProc, Variant::WasmFloor]
    }

    /// The doors counted under callgrind: all but (5), whose cost is
    /// mostly its ext_proc server's, and the two routing floors.
    pub fn counted() -> Vec<Variant> {
        vec![
            Variant::NoFilter,
            Variant::Wasm,
            Variant::Lua,
            Variant::WasmFloor,
            Variant::RoutingFloor,
            Variant::LuaRoutingFloor,
            Variant::Native,
            Variant::NoFilterNativeRoutes,
            Variant::NativeUnpinned,
            Variant::NativeUnpinnedQuiet,
            Variant::NativeQuiet,
            Variant::WasmUnpinned,
            Variant::WasmUnpinnedQuiet,
            Variant::WasmQuiet,
        ]
    }

    /// The doors counted on the 5,000-GVR table: both builds of the filter.
    pub fn counted_large_table() -> Vec<Variant> {
        vec![Variant::Wasm, Variant::Native, Variant::NativeUnpinned]
    }

    pub fn large_table() -> Vec<Variant> {
        vec![Variant::Wasm]
    }

    pub fn name(&self) -> &'static str {
        match self {
            Variant::NoFilter => "no-filter",
            Variant::Wasm => "wasm",
            Variant::Lua => "lua",
            Variant::ExtProc => "ext-proc",
            Variant::WasmFloor => "wasm-floor",
            Variant::RoutingFloor => "routing-floor",
            Variant::LuaRoutingFloor => "lua-routing-floor",
            Variant::Native => "native",
            Variant::NoFilterNativeRoutes => "no-filter-native-routes",
            Variant::NativeUnpinned => "native-unpinned",
            Variant::NativeUnpinnedQuiet => "native-unpinned-quiet",
            Variant::NativeQuiet => "native-quiet",
            Variant::WasmUnpinned => "wasm-unpinned",
            Variant::WasmUnpinnedQuiet => "wasm-unpinned-quiet",
            Variant::WasmQuiet => "wasm-quiet",
        }
    }

    pub fn description(&self) -> &'static str {
        match self {
            Variant::NoFilter => "Envoy, no filter",
            Variant::Wasm => "Envoy + mvp wasm filter",
            Variant::Lua => "Envoy + Lua filter, same routing",
            Variant::ExtProc => "Envoy + ext_proc routing every request",
            Variant::WasmFloor => "Envoy + the same wasm module doing nothing (floor)",
            Variant::RoutingFloor => "Envoy + a proxy-wasm module that reads :path and writes a fixed route header (routing floor)",
            Variant::LuaRoutingFloor => "Envoy + a Lua filter that reads :path and writes a fixed route header (Lua routing floor)",
            Variant::Native => "Envoy + mvp filter as a native dynamic module",
            Variant::NoFilterNativeRoutes => "Envoy, no filter, with the native build's routes",
            Variant::NativeUnpinned => "Envoy + mvp filter as a native dynamic module, a resource every apiserver serves (not pinned)",
            Variant::NativeUnpinnedQuiet => "the same without the skew log and the warnings",
            Variant::NativeQuiet => "the native door, pinned, without the skew log and the warnings",
            Variant::WasmUnpinned => "Envoy + mvp wasm filter, a resource every apiserver serves (not pinned)",
            Variant::WasmUnpinnedQuiet => "the same without the skew log and the warnings",
            Variant::WasmQuiet => "the wasm door, pinned, without the skew log and the warnings",
        }
    }

    /// The issue's numbering: (1) no filter, (2) wasm 50, (3) wasm 5,000,
    /// (4) Lua, (5) ext_proc; then the floors.
    pub fn number(&self, gvrs: usize) -> u32 {
        match (self, gvrs > 50) {
            (Variant::NoFilter, _) => 1,
            (Variant::Wasm, false) => 2,
            (Variant::Wasm, true) => 3,
            (Variant::Lua, _) => 4,
            (Variant::ExtProc, _) => 5,
            (Variant::WasmFloor, _) => 6,
            (Variant::RoutingFloor, _) => 7,
            (Variant::LuaRoutingFloor, _) => 8,
            (Variant::Native, false) => 9,
            (Variant::Native, true) => 10,
            (Variant::NoFilterNativeRoutes, _) => 11,
            (Variant::NativeUnpinned, false) => 12,
            (Variant::NativeUnpinned, true) => 13,
            (Variant::NativeUnpinnedQuiet, _) => 14,
            (Variant::NativeQuiet, _) => 15,
            (Variant::WasmUnpinned, _) => 16,
            (Variant::WasmUnpinnedQuiet, _) => 17,
            (Variant::WasmQuiet, _) => 18,
        }
    }

    /// Whether the door loads the routing table (its Envoy is ready once
    /// the refresher announced one).
    pub fn loads_table(&self) -> bool {
        matches!(
            self,
            Variant::Wasm | Variant::Native | Variant::NativeUnpinned | Variant::NativeUnpinnedQuiet | Variant::NativeQuiet | Variant::WasmUnpinned | Variant::WasmUnpinnedQuiet | Variant::WasmQuiet
        )
    }

    /// `envoy-config` flags its bootstrap is rendered with.
    pub fn envoy_config_flags(&self) -> Vec<String> {
        match self {
            Variant::NativeUnpinnedQuiet | Variant::NativeQuiet | Variant::WasmUnpinnedQuiet | Variant::WasmQuiet => vec!["--record-skew=false".into(), "--warn-on-skew=false".into()],
            _ => vec![],
        }
    }

    /// The filter build its bootstrap is rendered with.
    pub fn filter_build(&self) -> integration::harness::FilterBuild {
        match self {
            Variant::Native | Variant::NoFilterNativeRoutes | Variant::NativeUnpinned | Variant::NativeUnpinnedQuiet | Variant::NativeQuiet => integration::harness::FilterBuild::Native,
            _ => integration::harness::FilterBuild::Wasm,
        }
    }

    pub fn uses_ext_proc(&self) -> bool {
        *self == Variant::ExtProc
    }

    pub fn routes(&self) -> bool {
        !matches!(self, Variant::NoFilter | Variant::WasmFloor | Variant::NoFilterNativeRoutes)
    }

    /// Whether it routes by the route header (the native build pins by
    /// upstream override host: no header reaches the upstream; a request
    /// not pinned is balanced without one).
    pub fn routes_by_header(&self) -> bool {
        self.routes() && !self.unpinned() && !matches!(self, Variant::Native | Variant::NativeQuiet)
    }

    /// Whether its requests name a resource every apiserver serves (else one
    /// only some serve: pinned).
    pub fn unpinned(&self) -> bool {
        matches!(self, Variant::NativeUnpinned | Variant::NativeUnpinnedQuiet | Variant::WasmUnpinned | Variant::WasmUnpinnedQuiet)
    }

    /// `router_port`: where the `ext-proc-router` of variant (5) listens.
    pub fn config(&self, mut config: Value, table: &ApiSet, address: &dyn Fn(&str) -> String, router_port: u16) -> Result<Value> {
        if *self == Variant::ExtProc {
            add_router_cluster(&mut config, router_port)?;
        }
        let hcm = hcm(&mut config)?;
        match self {
            Variant::NoFilter => {
                remove_filter(hcm, "mvp.route");
                remove_ext_proc(hcm);
                remove_skew_log(hcm);
            }
            Variant::NoFilterNativeRoutes => {
                remove_filter(hcm, "mvp.route");
                remove_ext_proc(hcm);
                remove_skew_log(hcm);
                // No module at all: no refresher, and the node does not ask
                // mvp-ext-proc for the module's balancer (plain round robin).
                if let Some(c) = config.as_object_mut() {
                    c.remove("bootstrap_extensions");
                }
                if let Some(m) = config["node"]["metadata"].as_object_mut() {
                    m.remove(mvp_contract::envoy::NODE_NATIVE_MODULE);
                }
            }
            // The quiet doors are rendered without them (`envoy_config_flags`).
            Variant::Wasm
            | Variant::Native
            | Variant::NativeUnpinned
            | Variant::NativeUnpinnedQuiet
            | Variant::NativeQuiet
            | Variant::WasmUnpinned
            | Variant::WasmUnpinnedQuiet
            | Variant::WasmQuiet => remove_ext_proc(hcm),
            Variant::WasmFloor => {
                remove_ext_proc(hcm);
                let filters = hcm["http_filters"].as_array_mut().context("http_filters")?;
                let wasm = filters.iter_mut().find(|f| f["name"] == "mvp.route").context("wasm filter")?;
                // A refresher configuration in the HTTP filter: no router, so
                // every request gets the pass-through context. Its one call
                // (at configure time) fails on the unknown cluster; the next
                // would come an hour later.
                wasm["typed_config"]["config"]["configuration"]["value"] =
                    json!(r#"{"role":"refresher","cluster":"none","poll_interval_ms":3600000}"#);
            }
            Variant::Lua | Variant::LuaRoutingFloor => {
                remove_filter(hcm, "mvp.route");
                remove_ext_proc(hcm);
                let code = match self {
                    Variant::Lua => LUA.replace("__TABLE__", &table.lua_table(address)),
                    _ => LUA_ROUTING_FLOOR.replace("__HOSTS__", &fixed_hosts(table, address)),
                }
                .replace("__ROUTE__", ROUTE);
                insert_before_router(hcm, json!({
                    "name": "envoy.filters.http.lua",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
                        "default_source_code": {"inline_string": code},
                    },
                }));
            }
            Variant::RoutingFloor => {
                remove_ext_proc(hcm);
                let filters = hcm["http_filters"].as_array_mut().context("http_filters")?;
                let wasm = filters.iter_mut().find(|f| f["name"] == "mvp.route").context("wasm filter")?;
                let plugin = &mut wasm["typed_config"]["config"];
                // Its own VM: shared data and VMs are per vm_id.
                plugin["vm_config"]["vm_id"] = json!("bench-routing-floor");
                plugin["vm_config"]["code"]["local"]["filename"] = json!(integration::harness::routing_floor_wasm()?.to_string_lossy());
                plugin["configuration"]["value"] = json!(format!("{ROUTE}\n{}", fixed_hosts(table, address)));
            }
            Variant::ExtProc => {
                remove_filter(hcm, "mvp.route");
                for r in routes(hcm) {
                    if let Some(m) = r.as_object_mut() {
                        m.remove("typed_per_filter_config");
                    }
                }
                let filters = hcm["http_filters"].as_array_mut().context("http_filters")?;
                let ext = filters.iter_mut().find(|f| f["name"] == "envoy.filters.http.ext_proc").context("ext_proc filter")?;
                // On for every request (the production config turns it on
                // for the merged documents' routes only).
                ext.as_object_mut().context("ext_proc filter")?.remove("disabled");
                let tc = &mut ext["typed_config"];
                tc["processing_mode"]["request_header_mode"] = json!("SEND");
                tc["processing_mode"]["response_header_mode"] = json!("SKIP");
                tc.as_object_mut().context("ext_proc config")?.remove("response_attributes");
                tc["message_timeout"] = json!("1s");
                tc["grpc_service"]["envoy_grpc"]["cluster_name"] = json!(ROUTER_CLUSTER);
            }
        }
        Ok(config)
    }
}

pub(crate) const ROUTER_CLUSTER: &str = "bench_ext_proc_router";

/// The routing floors' fixed route header value: the benchmark path's
/// capable apiservers, as the filter would pin them.
fn fixed_hosts(table: &ApiSet, address: &dyn Fn(&str) -> String) -> String {
    table.routed_servers().iter().map(|n| address(n)).collect::<Vec<_>>().join(",")
}

pub(crate) fn add_router_cluster(config: &mut Value, port: u16) -> Result<()> {
    let clusters = config.pointer_mut("/static_resources/clusters").and_then(Value::as_array_mut).context("clusters")?;
    clusters.push(json!({
        "name": ROUTER_CLUSTER,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {"cluster_name": ROUTER_CLUSTER, "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}}}]}]},
        "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}},
        }},
    }));
    Ok(())
}

/// Variant (8): the Lua routing floor, (7)'s work in Lua.
const LUA_ROUTING_FLOOR: &str = r#"
function envoy_on_request(handle)
  local headers = handle:headers()
  local path = headers:get(":path")
  headers:replace("__ROUTE__", "__HOSTS__")
  handle:clearRouteCache()
end
"#;

/// What a user might write instead of the wasm filter: the same RequestInfo
/// walk (no percent-decoding, no fieldSelector: strictly less work) and the
/// same headers.
const LUA: &str = r#"
local T = __TABLE__

local function classify(path)
  local q = string.find(path, "?", 1, true)
  if q then path = string.sub(path, 1, q - 1) end
  local parts = {}
  for seg in string.gmatch(path, "[^/]+") do parts[#parts + 1] = seg end
  local group, i
  if parts[1] == "apis" then
    if #parts < 4 then return nil end
    group = parts[2]; i = 3
  elseif parts[1] == "api" then
    if #parts < 3 then return nil end
    group = ""; i = 2
  else
    return nil
  end
  local version = parts[i]; i = i + 1
  if parts[i] == "watch" or parts[i] == "proxy" then i = i + 1 end
  if parts[i] == "namespaces" and parts[i + 2] ~= nil and parts[i + 2] ~= "status" and parts[i + 2] ~= "finalize" then
    i = i + 2
  end
  return group, version, parts[i]
end

function envoy_on_request(handle)
  local headers = handle:headers()
  local g, v, r = classify(headers:get(":path"))
  if g == nil then return end
  local gt = T[g]; if gt == nil then return end
  local vt = gt[v]; if vt == nil then return end
  local e = vt[r]; if e == nil then return end
  headers:replace("__ROUTE__", e[1])
  -- Lua does not clear the route cache by itself.
  handle:clearRouteCache()
end
"#;
