//! Edits of the rendered production bootstrap a bench door makes (its
//! filters, routes, access logs, refresher) — the doors differ from the
//! product only where these say.

use anyhow::{Context, Result};
use serde_json::{Value, json};

pub(crate) fn hcm(config: &mut Value) -> Result<&mut Value> {
    config
        .pointer_mut("/static_resources/listeners/0/filter_chains/0/filters/0/typed_config")
        .context("no HTTP connection manager in the rendered config")
}

pub(crate) fn routes(hcm: &mut Value) -> Vec<&mut Value> {
    hcm.pointer_mut("/route_config/virtual_hosts/0/routes").and_then(Value::as_array_mut).map(|r| r.iter_mut().collect()).unwrap_or_default()
}

pub(crate) fn remove_filter(hcm: &mut Value, name: &str) {
    if let Some(f) = hcm["http_filters"].as_array_mut() {
        f.retain(|x| x["name"] != name);
    }
}

/// Without the skew log (a door with no mvp filter has none to feed).
pub(crate) fn remove_skew_log(hcm: &mut Value) {
    if let Some(logs) = hcm["access_log"].as_array_mut() {
        logs.retain(|l| l["name"] != "envoy.access_loggers.http_grpc");
    }
}

pub(crate) fn remove_ext_proc(hcm: &mut Value) {
    remove_filter(hcm, "envoy.filters.http.ext_proc");
    for r in routes(hcm) {
        if let Some(m) = r.as_object_mut() {
            m.remove("typed_per_filter_config");
        }
    }
}

pub(crate) fn insert_before_router(hcm: &mut Value, filter: Value) {
    if let Some(f) = hcm["http_filters"].as_array_mut() {
        let at = f.iter().position(|x| x["name"] == "envoy.filters.http.router").unwrap_or(f.len());
        f.insert(at, filter);
    }
}

/// The passthrough `/apis` baseline: the production config with ext_proc
/// switched off on the `/apis` routes too.
pub fn disable_ext_proc_on_apis(config: &mut Value) {
    if let Ok(hcm) = hcm(config) {
        for r in routes(hcm) {
            r["typed_per_filter_config"] = json!({"envoy.filters.http.ext_proc": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute",
                "disabled": true,
            }});
        }
    }
}

/// The `/apis` ext_proc floor: the production config with its ext_proc
/// filter sent to the pass-through server on `port` instead of mvp-ext-proc.
pub fn ext_proc_to_pass_through(config: &mut Value, port: u16) -> Result<()> {
    super::variants::add_router_cluster(config, port)?;
    let hcm = hcm(config)?;
    let filters = hcm["http_filters"].as_array_mut().context("http_filters")?;
    let ext = filters.iter_mut().find(|f| f["name"] == "envoy.filters.http.ext_proc").context("ext_proc filter")?;
    ext["typed_config"]["grpc_service"]["envoy_grpc"]["cluster_name"] = json!(super::variants::ROUTER_CLUSTER);
    Ok(())
}

/// The refresher as it was before the long poll: a `GetTable` every poll
/// interval, answered at once (propagation's comparison).
pub fn poll_tables(config: &mut Value) -> Result<()> {
    let value = &mut config["bootstrap_extensions"][0]["typed_config"]["config"]["configuration"]["value"];
    let mut refresher: Value = serde_json::from_str(value.as_str().context("the refresher's configuration")?)?;
    refresher["wait_ms"] = json!(0);
    *value = json!(refresher.to_string());
    Ok(())
}
