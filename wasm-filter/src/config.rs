//! The plugin configuration Envoy hands each root context. One `.wasm` serves
//! two roles, chosen here: `router` (the HTTP filter on every worker) and
//! `refresher` (the singleton bootstrap service on the main thread).

use serde::Deserialize;

/// Shared-data key holding the encoded `mvp.routing.v1.RoutingTable`.
pub const TABLE_KEY: &str = "mvp.routing.v1.table";
/// Shared-data key holding the table's version, 8 bytes little-endian. Workers
/// read only this per request and decode the table only when it changes.
pub const VERSION_KEY: &str = "mvp.routing.v1.version";

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase", deny_unknown_fields)]
pub enum PluginConfig {
    Router(RouterConfig),
    Refresher(RefresherConfig),
    /// Does nothing per request: measures the proxy-wasm dispatch floor
    /// (BENCHMARKS.md). Never rendered by `mvp-ext-proc envoy-config`.
    Noop(NoopConfig),
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoopConfig {}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterConfig {
    /// Header the apiservers cluster's override-host policy reads. Envoy's
    /// early header mutation strips it from every client request before any
    /// filter runs, so only this filter can set it.
    pub route_header: String,
    /// Forward a verified client certificate's identity as requestheaders
    /// (set when the front door has a --client-ca-file).
    #[serde(default)]
    pub identity: Option<IdentityConfig>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityConfig {
    pub username_header: String,
    pub group_header: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefresherConfig {
    /// Envoy cluster that reaches mvp-ext-proc's gRPC listener (HTTP/2).
    pub cluster: String,
    #[serde(default = "default_authority")]
    pub authority: String,
    #[serde(default = "default_poll_ms")]
    pub poll_interval_ms: u32,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u32,
}

fn default_authority() -> String {
    "mvp-ext-proc".into()
}
fn default_poll_ms() -> u32 {
    200
}
fn default_timeout_ms() -> u32 {
    2000
}

impl PluginConfig {
    pub fn parse(bytes: &[u8]) -> Result<PluginConfig, String> {
        let c: PluginConfig = serde_json::from_slice(bytes)
            .map_err(|e| format!("mvp plugin configuration is invalid: {e}"))?;
        match &c {
            PluginConfig::Router(r) if r.route_header.is_empty() => {
                Err("mvp plugin configuration: route_header must not be empty".into())
            }
            PluginConfig::Router(RouterConfig { identity: Some(i), .. })
                if i.username_header.is_empty() || i.group_header.is_empty() =>
            {
                Err("mvp plugin configuration: identity header names must not be empty".into())
            }
            PluginConfig::Refresher(r) if r.cluster.is_empty() => {
                Err("mvp plugin configuration: cluster must not be empty".into())
            }
            PluginConfig::Refresher(r) if r.poll_interval_ms == 0 || r.timeout_ms == 0 => {
                Err("mvp plugin configuration: poll_interval_ms and timeout_ms must be > 0".into())
            }
            _ => Ok(c),
        }
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
