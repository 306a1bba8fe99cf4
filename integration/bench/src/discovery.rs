//! The `/apis` cases: merged vs passthrough with the real v1.37 document,
//! and a CRD-heavy document under concurrent clients (fall-backs, latency,
//! CPU, memory). Measured in alternating rounds like the front door.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::Value;

use super::backend::Backend;
use super::rebuilds::{Rebuild, rebuilds};
use super::load::{self, Latency, Spread};
use super::{Settings, cpu_ticks, paired, percentile, round_order, rss_mib, two_ports};
use integration::harness::{FilterBuild, fixtures_dir};

/// The CRD-heavy `/apis` case.
#[derive(Debug, Default, Serialize)]
pub struct CrdHeavy {
    pub document_bytes: usize,
    pub groups: usize,
    pub requests: usize,
    pub clients: usize,
    /// Responses that were not the merged document (the apiserver's own,
    /// recognised by its ETag): Envoy fell back.
    pub unmerged: usize,
    pub envoy_message_timeouts: u64,
    pub envoy_timeout_extensions: u64,
    /// Latency seen by the concurrent clients (whole body read), ms.
    pub under_load: Latency,
    pub seconds: f64,
    /// CPU per request under that load, from each process's /proc counters.
    pub envoy_cpu_ms_per_request: f64,
    pub ext_proc_cpu_ms_per_request: f64,
    /// Added by merging at a moderate rate, per round (merged − passthrough).
    pub added_p50_ms: Spread,
    pub added_p99_ms: Spread,
    /// The same with Envoy reaching mvp-ext-proc over its Unix socket.
    pub added_unix_p50_ms: Spread,
    pub added_unix_p99_ms: Spread,
    /// Unix-socket door − TCP door, per round.
    pub unix_minus_tcp_p50_ms: Spread,
    pub unix_minus_tcp_p99_ms: Spread,
    /// The ext_proc floor door − passthrough, per round.
    pub ext_proc_floor_added_p50_ms: Spread,
    pub ext_proc_floor_added_p99_ms: Spread,
    pub ext_proc_floor: Latency,
    pub passthrough: Latency,
    pub merged: Latency,
    pub merged_unix: Latency,
    /// The three doors from the paired client, and what merging adds there.
    pub paired: BTreeMap<String, Latency>,
    pub paired_added_ms: BTreeMap<String, Added>,
    pub ext_proc_rss_mib: f64,
    pub envoy_rss_mib: f64,
    /// mvp-ext-proc's own build time of the merged document (`/table`
    /// `discovery.buildSeconds`), ms, and the groups it encoded, per kind of
    /// change, in alternating rounds.
    pub rebuilds: BTreeMap<String, Rebuild>,
    /// RSS after those rebuilds.
    pub ext_proc_rss_after_rebuilds_mib: f64,
}

/// Merged vs passthrough `/apis` with three apiservers serving the real
/// v1.37 documents, interleaved in rounds.
pub(super) async fn real_discovery(
    dir: &Path,
    http: &reqwest::Client,
    settings: &Settings,
    memory: &mut BTreeMap<String, f64>,
) -> Result<ApisDoors> {
    let real = dir.join("docs-v1.37");
    let mut servers = Vec::new();
    for name in ["a", "b", "c"] {
        let d = real.join(name);
        std::fs::create_dir_all(&d)?;
        for f in ["api.json", "apis.json"] {
            std::fs::copy(fixtures_dir().join("v1.37").join(f), d.join(f))?;
        }
        servers.push((name, d));
    }
    let refs: Vec<(&str, &Path)> = servers.iter().map(|(n, p)| (*n, p.as_path())).collect();
    let mut backend = Backend::start(dir, &refs, settings.refresh_interval).await?;
    let measured = merged_vs_passthrough(&mut backend, http, "v1.37", settings).await?;
    memory.insert("ext_proc_rss_mib_3_apiservers_v1_37".into(), rss_mib(backend.ext_proc.pid()));
    drop(backend);
    Ok(measured)
}

/// `/apis` through four Envoys on `backend`: one with ext_proc off for it
/// (the answering apiserver's own document), one whose ext_proc server
/// answers "continue" (the round trip's floor), one merging over TCP and one
/// merging over mvp-ext-proc's Unix socket. Measured twice: in rounds of
/// balanced order, one door at a time (h2load), giving each door's pooled
/// latency and per-round differences; then by the paired client, every door
/// in the same seconds.
async fn merged_vs_passthrough(backend: &mut Backend, http: &reqwest::Client, label: &str, settings: &Settings) -> Result<ApisDoors> {
    let accept = ("accept", mvp_ext_proc::apidiscovery::JSON_CONTENT_TYPE);
    backend.start_pass_through_ext_proc()?;
    let mut doors = Vec::new();
    for door in [Door::Passthrough, Door::ExtProcFloor, Door::Merged, Door::MergedOverUnix] {
        let (listen, admin) = two_ports();
        let mut config = match door {
            Door::MergedOverUnix => backend.render_over_unix(listen, admin)?,
            _ => backend.render(listen, admin, FilterBuild::Wasm)?,
        };
        match door {
            Door::Passthrough => crate::config_edits::disable_ext_proc_on_apis(&mut config),
            Door::ExtProcFloor => crate::config_edits::ext_proc_to_pass_through(&mut config, backend.router_port)?,
            Door::Merged | Door::MergedOverUnix => {}
        }
        let envoy = backend.envoy(&format!("{}-{label}", door.name()), &config, listen, admin, 1, true).await?;
        let url = format!("http://127.0.0.1:{listen}/apis");
        let resp = http.get(&url).header(accept.0, accept.1).send().await?;
        let doc: Value = serde_json::from_slice(&resp.bytes().await?)?;
        if doc["items"].as_array().map(Vec::len).unwrap_or(0) < 10 {
            bail!("{}: /apis is not a discovery document", door.name());
        }
        doors.push(Measured { door, _envoy: envoy, url, all: vec![], p50: vec![], p99: vec![] });
    }
    // Large documents at a lower rate: 5.5 MB × 200/s would measure loopback
    // copying, not the merge.
    let rate = if label == "v1.37" { 100 } else { 10 };
    for round in 0..settings.rounds {
        for i in round_order(doors.len(), round) {
            let Some(d) = doors.get_mut(i) else { continue };
            let samples = load::latency(&d.url, 2, rate, settings.latency_duration, &[accept])?;
            d.p50.push(percentile(&samples, 50.0));
            d.p99.push(percentile(&samples, 99.0));
            d.all.extend(samples);
        }
    }
    let by = |door: Door| doors.iter().find(|d| d.door == door);
    let mut latency = BTreeMap::new();
    let mut added = BTreeMap::new();
    for d in &doors {
        latency.insert(d.door.name().to_string(), Latency::of(&d.all));
    }
    let diff = |m: &[f64], p: &[f64]| Spread::of(&m.iter().zip(p).map(|(m, p)| m - p).collect::<Vec<_>>());
    for (key, (a, b)) in differences() {
        if let (Some(a), Some(b)) = (by(a), by(b)) {
            added.insert(format!("{key}p50"), diff(&a.p50, &b.p50));
            added.insert(format!("{key}p99"), diff(&a.p99, &b.p99));
        }
    }
    // The same doors again, every door's samples from the same seconds: one
    // request per slot, the doors in turn (`paired`), at a quarter of the
    // rounds' per-door rate per door — the same rate of requests overall,
    // each request alone with room after it (v1.37: ~2 ms each in a 5 ms
    // slot), so no door's request meets the one before it still in Envoy.
    let urls: Vec<String> = doors.iter().map(|d| d.url.clone()).collect();
    let windows = paired::interleaved_latency(&urls, &[accept], rate * 2 / 4, settings.rounds, settings.apis_window)?;
    let mut paired_added = BTreeMap::new();
    let mut paired_latency = BTreeMap::new();
    for (d, w) in doors.iter().zip(&windows) {
        paired_latency.insert(d.door.name().to_string(), Latency::of(&w.concat()));
    }
    let window = |door: Door| doors.iter().position(|d| d.door == door).and_then(|i| windows.get(i));
    for (key, (a, b)) in differences() {
        if let (Some(a), Some(b)) = (window(a), window(b)) {
            for p in [50.0, 99.0] {
                let (pooled_ms, per_window_ms) = paired::added(a, b, p);
                paired_added.insert(format!("{key}p{p}"), Added { pooled_ms, per_window_ms });
            }
        }
    }
    Ok(ApisDoors { latency, added, paired_latency, paired_added })
}

/// The differences reported, by key prefix: what merging adds (over TCP: the
/// goal's; over the socket), the ext_proc round trip's floor, what merging
/// adds over that floor, and the socket's own effect.
fn differences() -> [(&'static str, (Door, Door)); 5] {
    [
        ("", (Door::Merged, Door::Passthrough)),
        ("unix ", (Door::MergedOverUnix, Door::Passthrough)),
        (FLOOR, (Door::ExtProcFloor, Door::Passthrough)),
        (OVER_FLOOR, (Door::Merged, Door::ExtProcFloor)),
        (UNIX_MINUS_TCP, (Door::MergedOverUnix, Door::Merged)),
    ]
}

/// Key prefixes of [`differences`] (keys are prefix + "p50" / "p99").
pub const FLOOR: &str = "ext_proc floor − passthrough ";
pub const OVER_FLOOR: &str = "merged − ext_proc floor ";
pub const UNIX_MINUS_TCP: &str = "unix − tcp ";

struct Measured {
    door: Door,
    /// Held: the Envoy runs as long as the door.
    _envoy: integration::harness::Proc,
    url: String,
    all: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
}

/// The `/apis` doors measured: the rounds (h2load, one door at a time) and the
/// paired client (every door in the same seconds).
#[derive(Default)]
pub(super) struct ApisDoors {
    pub latency: BTreeMap<String, Latency>,
    /// Per round: merged − passthrough ("p50", "p99", "unix p50", "unix p99")
    /// and the two merging doors' difference.
    pub added: BTreeMap<String, Spread>,
    pub paired_latency: BTreeMap<String, Latency>,
    pub paired_added: BTreeMap<String, Added>,
}

/// Added latency from the paired client: over all its windows together (what
/// the goal reads: both doors saw the same seconds) and window by window.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Added {
    pub pooled_ms: f64,
    pub per_window_ms: Spread,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Door {
    Passthrough,
    ExtProcFloor,
    Merged,
    MergedOverUnix,
}

impl Door {
    fn name(self) -> &'static str {
        match self {
            Door::Passthrough => "apis_passthrough",
            Door::ExtProcFloor => "apis_ext_proc_floor",
            Door::Merged => "apis_merged",
            Door::MergedOverUnix => "apis_merged_unix",
        }
    }
}

/// One apiserver serving a CRD-heavy document beside one serving v1.30's:
/// `crd_heavy_requests` uncompressed `/apis` requests from
/// `crd_heavy_clients` concurrent clients, each checked for the merged ETag;
/// then the added latency at a moderate rate, and both processes' memory.
pub(super) async fn crd_heavy(dir: &Path, http: &reqwest::Client, settings: &Settings) -> Result<CrdHeavy> {
    let docs = dir.join("docs-crd-heavy");
    let (big, old) = (docs.join("big"), docs.join("old"));
    std::fs::create_dir_all(&big)?;
    std::fs::create_dir_all(&old)?;
    let apis = serde_json::to_vec(&integration::harness::crd_heavy::apis(settings.crd_heavy_groups))?;
    std::fs::write(big.join("apis.json"), &apis)?;
    std::fs::copy(fixtures_dir().join("v1.37/api.json"), big.join("api.json"))?;
    for f in ["api.json", "apis.json"] {
        std::fs::copy(fixtures_dir().join("v1.30").join(f), old.join(f))?;
    }
    let mut backend = Backend::start(dir, &[("big", big.as_path()), ("old", old.as_path())], settings.refresh_interval).await?;
    // The merge runs after the table is published: wait for its ETag.
    let groups = settings.crd_heavy_groups as u64;
    let table = backend.wait_table(|t| t["discovery"]["groups"].as_u64().is_some_and(|n| n > groups)).await?;
    let merged_etag = table["discovery"]["etag"].as_str().context("no merged ETag in /table")?.to_string();

    let (listen, admin) = two_ports();
    let config = backend.render(listen, admin, FilterBuild::Wasm)?;
    let envoy = backend.envoy("crd-heavy", &config, listen, admin, 1, true).await?;
    let url = format!("http://127.0.0.1:{listen}/apis");
    let accept = mvp_ext_proc::apidiscovery::JSON_CONTENT_TYPE;
    let clients = settings.crd_heavy_clients.max(1);
    let (envoy_ticks, ext_proc_ticks) = (cpu_ticks(envoy.pid()), cpu_ticks(backend.ext_proc.pid()));
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (http, url, etag) = (http.clone(), url.clone(), merged_etag.clone());
            let n = settings.crd_heavy_requests / clients + usize::from(c < settings.crd_heavy_requests % clients);
            tokio::spawn(async move {
                let (mut unmerged, mut times) = (0usize, Vec::with_capacity(n));
                for _ in 0..n {
                    let t = Instant::now();
                    let r = http.get(&url).header("accept", accept).send().await?;
                    if r.status() != 200 {
                        bail!("/apis answered {}", r.status());
                    }
                    unmerged += usize::from(r.headers().get("etag").and_then(|e| e.to_str().ok()) != Some(etag.as_str()));
                    r.bytes().await?;
                    times.push(t.elapsed().as_secs_f64() * 1000.0);
                }
                Ok((unmerged, times))
            })
        })
        .collect();
    let (mut unmerged, mut times) = (0, Vec::new());
    for t in tasks {
        let (u, s) = t.await??;
        unmerged += u;
        times.extend(s);
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu_ms = |pid: u32, before: u64| (cpu_ticks(pid) - before) as f64 * 1e3 / load::clock_ticks() / times.len().max(1) as f64;
    let (envoy_cpu_ms, ext_proc_cpu_ms) = (cpu_ms(envoy.pid(), envoy_ticks), cpu_ms(backend.ext_proc.pid(), ext_proc_ticks));
    let stat = |name: &'static str| backend.stat(admin, name);
    let timeouts = stat("http.apiserver_front_door.ext_proc.message_timeouts").await.unwrap_or(0);
    let extensions = stat("http.apiserver_front_door.ext_proc.override_message_timeout_received").await.unwrap_or(0);
    let (ext_proc_rss, envoy_rss) = (rss_mib(backend.ext_proc.pid()), rss_mib(envoy.pid()));
    drop(envoy);
    let ApisDoors { latency, added, paired_latency, paired_added } = merged_vs_passthrough(&mut backend, http, "crd-heavy", settings).await?;
    let rebuilds = rebuilds(&backend, settings).await?;
    let ext_proc_rss_after_rebuilds_mib = rss_mib(backend.ext_proc.pid());
    let get = |k: &str| latency.get(k).cloned().unwrap_or_default();
    Ok(CrdHeavy {
        document_bytes: apis.len(),
        groups: settings.crd_heavy_groups,
        requests: times.len(),
        clients,
        unmerged,
        envoy_message_timeouts: timeouts,
        envoy_timeout_extensions: extensions,
        under_load: Latency::of(&times),
        seconds,
        envoy_cpu_ms_per_request: envoy_cpu_ms,
        ext_proc_cpu_ms_per_request: ext_proc_cpu_ms,
        added_p50_ms: added.get("p50").cloned().unwrap_or_default(),
        added_p99_ms: added.get("p99").cloned().unwrap_or_default(),
        added_unix_p50_ms: added.get("unix p50").cloned().unwrap_or_default(),
        added_unix_p99_ms: added.get("unix p99").cloned().unwrap_or_default(),
        unix_minus_tcp_p50_ms: added.get(&format!("{UNIX_MINUS_TCP}p50")).cloned().unwrap_or_default(),
        unix_minus_tcp_p99_ms: added.get(&format!("{UNIX_MINUS_TCP}p99")).cloned().unwrap_or_default(),
        ext_proc_floor_added_p50_ms: added.get(&format!("{FLOOR}p50")).cloned().unwrap_or_default(),
        ext_proc_floor_added_p99_ms: added.get(&format!("{FLOOR}p99")).cloned().unwrap_or_default(),
        ext_proc_floor: get("apis_ext_proc_floor"),
        passthrough: get("apis_passthrough"),
        merged: get("apis_merged"),
        merged_unix: get("apis_merged_unix"),
        paired: paired_latency,
        paired_added_ms: paired_added,
        ext_proc_rss_mib: ext_proc_rss,
        envoy_rss_mib: envoy_rss,
        rebuilds,
        ext_proc_rss_after_rebuilds_mib,
    })
}
