//! The wasm plugin's configuration: rendered into Envoy's bootstrap by
//! `mvp-ext-proc envoy-config` (serialised from these types) and parsed by
//! each root context of the filter. One `.wasm` serves two roles:
//! `router` (the HTTP filter on every worker) and `refresher` (the singleton
//! bootstrap service on the main thread that keeps the table fresh).

use serde::{Deserialize, Serialize};

use crate::{envoy, headers, limits};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase", deny_unknown_fields)]
pub enum PluginConfig {
    Router(RouterConfig),
    Refresher(RefresherConfig),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterConfig {
    /// Header the apiservers cluster's override-host policy reads.
    #[serde(default = "default_route_header")]
    pub route_header: String,
    /// Forward a verified client certificate's identity as requestheaders
    /// (set when the front door has a `--client-ca-file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<IdentityConfig>,
    /// Set the `ROUTE_KEY_PROPERTY` request property on every request the
    /// front door routes by (for the access log; off when it is).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub export_route_key: bool,
    /// Mark each request for a skewed API with its record
    /// (`mvp_contract::envoy::SKEW_PROPERTY`) for the skew access log.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub record_skew: bool,
    /// Warn a client whose request names a resource only apiservers older
    /// than the newest release serve (`mvp_contract::envoy::WARNING_PROPERTY`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warn_on_skew: bool,
    /// Hold a request the table can only answer with the 503 Status (every
    /// apiserver that serves it is closed, or not read yet) until
    /// mvp-ext-proc publishes a newer table, instead of answering at once:
    /// a restarted apiserver is read within ~100 ms of its `/readyz`, so a
    /// request that arrives in between is served, not refused. Absent: the
    /// 503 at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<HoldConfig>,
}

/// Where a held request asks for a newer table (the refresher's
/// `GetTable`, from the request's own context) and how long it may wait.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HoldConfig {
    #[serde(default = "default_cluster")]
    pub cluster: String,
    #[serde(default = "default_authority")]
    pub authority: String,
    /// The longest one request is held before its 503 Status.
    #[serde(default = "default_hold_ms")]
    pub max_ms: u32,
    /// Requests one worker holds at once; beyond it the 503 at once (each
    /// holds one `GetTable` call, and a table change answers them all).
    #[serde(default = "default_max_held")]
    pub max_held: u32,
    /// Of those, the most one client holds (`limits::DEFAULT_MAX_HELD_PER_CLIENT`).
    #[serde(default = "default_max_held_per_client")]
    pub max_held_per_client: u32,
    /// What they may buffer of their bodies in all, in bytes.
    #[serde(default = "default_max_held_body_bytes")]
    pub max_held_body_bytes: u64,
}

/// Where a verified client certificate's identity goes: kube's
/// `--requestheader-username-headers` / `--requestheader-group-headers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityConfig {
    pub username_header: String,
    pub group_header: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefresherConfig {
    /// Envoy cluster that reaches mvp-ext-proc's gRPC listener (HTTP/2).
    #[serde(default = "default_cluster")]
    pub cluster: String,
    #[serde(default = "default_authority")]
    pub authority: String,
    /// How often to ask when the last call failed or the server answers at
    /// once (one that predates the long poll).
    #[serde(default = "default_poll_ms")]
    pub poll_interval_ms: u32,
    /// How long mvp-ext-proc may hold a call for a newer table (a long
    /// poll); 0 polls.
    #[serde(default = "default_wait_ms")]
    pub wait_ms: u32,
    /// How long an answer may take beyond `wait_ms`.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u32,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig { route_header: default_route_header(), identity: None, export_route_key: false, record_skew: false, warn_on_skew: false, hold: None }
    }
}

impl Default for HoldConfig {
    fn default() -> Self {
        HoldConfig { cluster: default_cluster(), authority: default_authority(), max_ms: default_hold_ms(), max_held: default_max_held(), max_held_per_client: default_max_held_per_client(), max_held_body_bytes: default_max_held_body_bytes() }
    }
}

impl Default for RefresherConfig {
    fn default() -> Self {
        RefresherConfig {
            cluster: default_cluster(),
            authority: default_authority(),
            poll_interval_ms: default_poll_ms(),
            wait_ms: default_wait_ms(),
            timeout_ms: default_timeout_ms(),
        }
    }
}

fn default_route_header() -> String {
    headers::ROUTE.into()
}
fn default_cluster() -> String {
    envoy::EXT_PROC_CLUSTER.into()
}
fn default_authority() -> String {
    envoy::EXT_PROC_AUTHORITY.into()
}
fn default_poll_ms() -> u32 {
    limits::DEFAULT_TABLE_POLL_MS
}
fn default_wait_ms() -> u32 {
    limits::DEFAULT_TABLE_WAIT_MS
}
fn default_timeout_ms() -> u32 {
    limits::GET_TABLE_TIMEOUT_MS
}
fn default_hold_ms() -> u32 {
    limits::DEFAULT_HOLD_MS
}
fn default_max_held() -> u32 {
    limits::DEFAULT_MAX_HELD
}

fn default_max_held_per_client() -> u32 {
    limits::DEFAULT_MAX_HELD_PER_CLIENT
}

fn default_max_held_body_bytes() -> u64 {
    limits::DEFAULT_MAX_HELD_BODY_BYTES
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// Not JSON, or not one of the roles with exactly its fields.
    Invalid(String),
    /// A field that must not be empty or zero is.
    Empty(&'static str),
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::Invalid(e) => write!(f, "mvp plugin configuration is invalid: {e}"),
            ConfigError::Empty(field) => write!(f, "mvp plugin configuration: {field} must not be empty or zero"),
        }
    }
}

impl PluginConfig {
    pub fn parse(bytes: &[u8]) -> Result<PluginConfig, ConfigError> {
        let c: PluginConfig = serde_json::from_slice(bytes).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        c.validate()?;
        Ok(c)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        match self {
            PluginConfig::Router(r) if r.route_header.is_empty() => Err(ConfigError::Empty("route_header")),
            PluginConfig::Router(RouterConfig { identity: Some(i), .. })
                if i.username_header.is_empty() || i.group_header.is_empty() =>
            {
                Err(ConfigError::Empty("identity header names"))
            }
            PluginConfig::Router(RouterConfig { hold: Some(h), .. }) if h.cluster.is_empty() || h.max_ms == 0 || h.max_held == 0 || h.max_held_per_client == 0 => {
                Err(ConfigError::Empty("hold cluster, max_ms, max_held and max_held_per_client"))
            }
            PluginConfig::Router(RouterConfig { hold: Some(h), .. }) if h.max_ms > limits::MAX_TABLE_WAIT_MS => {
                Err(ConfigError::Invalid(format!("hold max_ms {} is above {}", h.max_ms, limits::MAX_TABLE_WAIT_MS)))
            }
            PluginConfig::Refresher(r) if r.cluster.is_empty() => Err(ConfigError::Empty("cluster")),
            PluginConfig::Refresher(r) if r.poll_interval_ms == 0 || r.timeout_ms == 0 => {
                Err(ConfigError::Empty("poll_interval_ms and timeout_ms"))
            }
            _ => Ok(()),
        }
    }

    /// The JSON the filter parses (what the renderer writes).
    pub fn to_json(&self) -> String {
        // Plain structs of strings and integers always serialise.
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_roles_and_rejects_bad_config() {
        assert_eq!(
            PluginConfig::parse(br#"{"role":"router","route_header":"x-mvp-route"}"#).unwrap(),
            PluginConfig::Router(RouterConfig { route_header: "x-mvp-route".into(), identity: None, export_route_key: false, record_skew: false, warn_on_skew: false, hold: None })
        );
        let r = PluginConfig::parse(br#"{"role":"refresher","cluster":"mvp_ext_proc"}"#).unwrap();
        assert_eq!(
            r,
            PluginConfig::Refresher(RefresherConfig {
                cluster: "mvp_ext_proc".into(),
                authority: "mvp-ext-proc".into(),
                poll_interval_ms: 200,
                wait_ms: 20_000,
                timeout_ms: 2000
            })
        );
        for bad in [
            &b""[..],
            b"{}",
            b"not json",
            br#"{"role":"router","route_header":""}"#,
            br#"{"role":"router","route_header":"x","extra":1}"#,
            br#"{"role":"refresher","cluster":"c","poll_interval_ms":0}"#,
            br#"{"role":"refresher","cluster":""}"#,
            br#"{"role":"other"}"#,
            br#"{"role":"noop"}"#,
            br#"{"role":"noop","x":1}"#,
            br#"{"role":"router","route_header":"x","identity":{"username_header":"","group_header":"g"}}"#,
            br#"{"role":"router","hold":{"max_ms":0}}"#,
            br#"{"role":"router","hold":{"max_held":0}}"#,
            br#"{"role":"router","hold":{"max_held_per_client":0}}"#,
            br#"{"role":"router","hold":{"max_ms":600000}}"#,
            br#"{"role":"router","hold":{"cluster":""}}"#,
        ] {
            assert!(PluginConfig::parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn what_the_renderer_writes_the_filter_reads() {
        for c in [
            PluginConfig::Router(RouterConfig::default()),
            PluginConfig::Router(RouterConfig {
                identity: Some(IdentityConfig { username_header: "x-remote-user".into(), group_header: "x-remote-group".into() }),
                ..RouterConfig::default()
            }),
            PluginConfig::Router(RouterConfig { export_route_key: true, ..RouterConfig::default() }),
            PluginConfig::Router(RouterConfig { record_skew: true, ..RouterConfig::default() }),
            PluginConfig::Router(RouterConfig { warn_on_skew: true, ..RouterConfig::default() }),
            PluginConfig::Router(RouterConfig { hold: Some(HoldConfig::default()), ..RouterConfig::default() }),
            PluginConfig::Refresher(RefresherConfig { poll_interval_ms: 100, ..RefresherConfig::default() }),
            PluginConfig::Refresher(RefresherConfig { wait_ms: 0, ..RefresherConfig::default() }),
        ] {
            assert_eq!(PluginConfig::parse(c.to_json().as_bytes()).unwrap(), c);
        }
        assert_eq!(
            PluginConfig::Router(RouterConfig::default()).to_json(),
            r#"{"role":"router","route_header":"x-mvp-route"}"#
        );
    }
}
