//! Which routing filter build the rendered bootstrap loads.
//!
//! The same router comes in two builds: the native module (an Envoy dynamic
//! module, the faster one) and the `.wasm` (any Envoy with wasm). A dynamic
//! module runs only in the Envoy releases it is built for — Envoy promises a
//! module built for X.Y loads in X.Y and X.(Y+1) and checks nothing else
//! before it calls into it — so `envoy-config` picks the native build when
//! the Envoy it renders for is one of those, and the `.wasm` otherwise
//! (`--filter auto`, the default). `--filter native|wasm` forces one; a
//! forced native build an Envoy of another release would load is refused
//! here, with what to do, not by Envoy at start.
//!
//! The Envoy's release comes from `--envoy-version` (rendering for an Envoy
//! elsewhere: an image, another host) or from running `--envoy-binary
//! --version` (default `envoy` on `PATH`).

use std::fmt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use mvp_contract::envoy::NATIVE_MODULE_ENVOY;

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

/// `--filter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterChoice {
    /// The native build where the Envoy loads it, else the `.wasm`.
    Auto,
    Native,
    Wasm,
}

/// An Envoy release: `1.40` or `1.40.2`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnvoyVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: Option<u32>,
}

impl fmt::Display for EnvoyVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.patch {
            Some(p) => write!(f, "{}.{}.{p}", self.major, self.minor),
            None => write!(f, "{}.{}", self.major, self.minor),
        }
    }
}

impl FromStr for EnvoyVersion {
    type Err = String;

    /// `1.40`, `1.40.2` or `v1.40.2` (an image tag's form); a `-dev` or
    /// other suffix of the patch is ignored.
    fn from_str(s: &str) -> Result<EnvoyVersion, String> {
        let bad = || format!("{s:?} is not an Envoy release (expected X.Y or X.Y.Z, e.g. 1.40.0)");
        let mut parts = s.strip_prefix('v').unwrap_or(s).splitn(3, '.');
        let number = |p: Option<&str>| p.and_then(|p| p.parse::<u32>().ok());
        let major = number(parts.next()).ok_or_else(bad)?;
        let minor = number(parts.next()).ok_or_else(bad)?;
        let patch = match parts.next() {
            None => None,
            Some(p) => Some(number(p.split(|c: char| !c.is_ascii_digit()).next()).ok_or_else(bad)?),
        };
        Ok(EnvoyVersion { major, minor, patch })
    }
}

impl EnvoyVersion {
    /// Whether this Envoy loads the native module: the release it is built
    /// for, or the next.
    pub fn loads_native(&self) -> bool {
        let (major, minor) = NATIVE_MODULE_ENVOY;
        self.major == major && (self.minor == minor || self.minor == minor + 1)
    }

    /// The release in `envoy --version`'s line, e.g. `envoy  version:
    /// 2c0a…/1.40.0/Clean/RELEASE/BoringSSL`.
    pub fn from_version_output(out: &str) -> Option<EnvoyVersion> {
        let line = out.lines().find(|l| l.contains("version:"))?;
        let fields = line.split_once("version:")?.1.trim();
        fields.split('/').find_map(|f| f.parse().ok())
    }

    /// Runs `binary --version`, for at most 10 s (an Envoy answers it at
    /// once, without reading a configuration).
    pub fn of_binary(binary: &Path) -> Result<EnvoyVersion, String> {
        let what = binary.display();
        let mut child = Command::new(binary)
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run {what} --version: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("{what} --version did not answer within 10s"));
                }
                Err(e) => return Err(format!("{what} --version: {e}")),
            }
        }
        let mut out = String::new();
        if let Some(mut stdout) = child.stdout.take() {
            use std::io::Read;
            stdout.read_to_string(&mut out).map_err(|e| format!("{what} --version: {e}"))?;
        }
        EnvoyVersion::from_version_output(&out).ok_or_else(|| format!("{what} --version printed no Envoy release: {:?}", out.trim()))
    }
}

/// The build picked, and why, in a line for the operator.
#[derive(Debug, PartialEq, Eq)]
pub struct Chosen {
    pub build: FilterBuild,
    pub why: String,
}

fn built_for() -> String {
    let (major, minor) = NATIVE_MODULE_ENVOY;
    format!("built for Envoy {major}.{minor}, it loads in {major}.{minor} and {major}.{}", minor + 1)
}

/// Picks the build. `envoy`: the release of the Envoy the bootstrap is for,
/// or why it is not known; asked only when the choice depends on it.
pub fn choose(
    choice: FilterChoice,
    wasm: Option<String>,
    native: Option<String>,
    envoy: impl FnOnce() -> Result<EnvoyVersion, String>,
) -> Result<Chosen, String> {
    match (choice, wasm, native) {
        (FilterChoice::Wasm, Some(w), _) => Ok(Chosen { build: FilterBuild::Wasm(w), why: "the wasm build (--filter wasm)".into() }),
        (FilterChoice::Wasm, None, _) => Err("--filter wasm needs --wasm".into()),
        (FilterChoice::Native, _, None) => Err("--filter native needs --native-module".into()),
        (FilterChoice::Native, _, Some(n)) => match envoy() {
            Ok(v) if v.loads_native() => Ok(Chosen { build: FilterBuild::Native(n), why: format!("the native build (--filter native; Envoy {v} loads it)") }),
            Ok(v) => Err(format!(
                "--filter native: Envoy {v} cannot load the native module ({}); use --filter wasm, which any Envoy with wasm runs",
                built_for()
            )),
            Err(unknown) => Ok(Chosen {
                build: FilterBuild::Native(n),
                why: format!("the native build (--filter native; the Envoy's release is not known: {unknown}; {})", built_for()),
            }),
        },
        (FilterChoice::Auto, wasm, native) => {
            let not_native = match native {
                None => "no --native-module".to_string(),
                Some(n) => match envoy() {
                    Ok(v) if v.loads_native() => {
                        return Ok(Chosen { build: FilterBuild::Native(n), why: format!("the native build (Envoy {v} loads it)") });
                    }
                    Ok(v) => format!("Envoy {v} cannot load the native module ({})", built_for()),
                    Err(unknown) => format!("the Envoy's release is not known ({unknown}; give --envoy-version or --envoy-binary)"),
                },
            };
            match wasm {
                Some(w) => Ok(Chosen { build: FilterBuild::Wasm(w), why: format!("the wasm build: {not_native}") }),
                None => Err(format!("no filter build this Envoy can load: {not_native}, and no --wasm")),
            }
        }
    }
}

#[cfg(test)]
#[path = "filter_choice_tests.rs"]
mod tests;
