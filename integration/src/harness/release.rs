//! Which real kube-apiserver builds the real tier runs, and where the build
//! scripts cache them: v1.20.2 from Debian's source
//! (`scripts/kube-apiserver.sh`) and current releases from Go modules
//! (`scripts/kube-release.sh`, one per line of `scripts/kube-releases`).

use std::path::PathBuf;

use anyhow::{Context, Result, anyhow};

/// The current releases the real tier builds from Go modules, newest first
/// (written once: `scripts/test.sh` builds each line).
const RELEASES: &str = include_str!("../../../scripts/kube-releases");

/// A real kube-apiserver build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// v1.20.2, from Debian's source package.
    V1_20,
    /// A current release built from Go modules: `(minor, "1.MINOR.PATCH")`.
    Modules(u32, &'static str),
}

impl Release {
    /// The newest built release of minor `1.minor` (`scripts/kube-releases`).
    pub fn minor(minor: u32) -> Release {
        let prefix = format!("1.{minor}.");
        let version = RELEASES.lines().map(str::trim).find(|l| l.starts_with(&prefix));
        match version {
            Some(v) => Release::Modules(minor, v),
            None => panic!("scripts/kube-releases builds no 1.{minor}.x"),
        }
    }

    /// The kube-apiserver binary of this release: `MVP_KUBE_APISERVER` for
    /// v1.20, else where the build scripts cache it.
    pub fn bin(self) -> Result<PathBuf> {
        let (bin, script) = match self {
            Release::V1_20 => {
                if let Some(p) = std::env::var_os("MVP_KUBE_APISERVER") {
                    return Ok(PathBuf::from(p));
                }
                (cache_dir()?.join("kube-apiserver-v1.20.2/kube-apiserver"), "scripts/kube-apiserver.sh".to_string())
            }
            Release::Modules(_, v) => (cache_dir()?.join(format!("kube-v{v}/kube-apiserver")), format!("scripts/kube-release.sh {v}")),
        };
        if bin.exists() { Ok(bin) } else { Err(anyhow!("{} not found: run {script} (scripts/test.sh does)", bin.display())) }
    }

    /// kube-controller-manager of the same release (current releases only).
    pub fn controller_manager_bin(self) -> Result<PathBuf> {
        let bin = self.bin()?.with_file_name("kube-controller-manager");
        if bin.exists() { Ok(bin) } else { Err(anyhow!("{} not found", bin.display())) }
    }
}

/// The etcd release under every real control plane (`scripts/etcd.sh`).
const ETCD_RELEASE: &str = include_str!("../../../scripts/etcd-release");

/// The etcd binary `scripts/etcd.sh` built (`MVP_ETCD` names another).
pub fn etcd_bin() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("MVP_ETCD") {
        return Ok(PathBuf::from(p));
    }
    let bin = cache_dir()?.join(format!("etcd-v{}/etcd", ETCD_RELEASE.trim()));
    if bin.exists() { Ok(bin) } else { Err(anyhow!("{} not found: run scripts/etcd.sh (scripts/test.sh does)", bin.display())) }
}

fn cache_dir() -> Result<PathBuf> {
    let cache = std::env::var_os("MVP_CACHE_DIR").map(PathBuf::from).or_else(|| {
        std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|c| c.join("mvp-envoy"))
    });
    cache.context("no cache directory (HOME unset)")
}
