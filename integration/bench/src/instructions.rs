//! Instructions per request, counted rather than timed.
//!
//! Two front doors a goal compares within a few percent (the 5,000- and
//! 50-GVR tables, wasm and Lua) are, timed, a reading of the shared host as
//! much as of the doors: paired slices of the same code gave (3)/(2) 0.92 and
//! 1.00 an hour apart. Here each door's Envoy runs under valgrind's callgrind,
//! which counts the instructions Envoy executes (every thread, the V8- and
//! LuaJIT-compiled code included) and simulates its caches. The same binary,
//! configuration and requests give the same count whatever else the machine
//! is doing, so what grows with the table, or separates wasm from Lua, shows
//! without the host's noise.
//!
//! Per door: Envoy starts with instrumentation off; warm-up requests (V8 and
//! LuaJIT compile their hot code here) are counted and thrown away; then
//! `phases` times `requests` sequential requests on one HTTP/1.1 connection,
//! each phase dumped on its own (the phases agreeing shows the count is
//! steady); then an idle window with no request, whose rate (Envoy's timers,
//! the refresher's poll) is subtracted from each phase for its wall time.
//! Instructions are not time (a cache miss costs more than an instruction),
//! so first-level data and last-level misses are reported beside them, from a
//! fixed simulated cache so every machine simulates the same one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::api_set::ApiSet;
use super::backend::Backend;
use super::variants::Variant;
use super::{check_routing, load, two_ports};
use integration::harness::wait_for;

/// How much to count.
#[derive(Debug, Clone)]
pub struct Plan {
    pub warm_up: u64,
    pub requests: u64,
    pub phases: usize,
    pub idle: Duration,
    /// Only these doors (by number; empty: every door), while iterating.
    pub doors: Vec<u32>,
    /// Where each door's callgrind output is kept for `callgrind_annotate`
    /// (None: the run's temporary directory, removed at its end).
    pub keep: Option<PathBuf>,
}

/// One door's count.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counted {
    /// Instructions Envoy executed per request (every thread), idle rate
    /// subtracted: the median over the phases.
    pub instructions_per_request: f64,
    /// Each phase's figure: they agree when the count is steady.
    pub phases: Vec<f64>,
    /// Simulated first-level data cache misses (reads and writes) and
    /// last-level misses (instruction and data) per request. Near zero (the
    /// last level) the idle rate subtracted can leave a small negative.
    pub d1_misses_per_request: f64,
    pub ll_misses_per_request: f64,
    /// Instructions per second with no request in flight.
    pub idle_per_second: f64,
}

/// Envoy under callgrind: a fixed simulated cache (32 KiB 8-way first level,
/// 8 MiB 16-way last level, 64-byte lines), instrumentation off until asked.
pub(crate) fn callgrind(out: &Path) -> Vec<String> {
    [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--cache-sim=yes",
        "--I1=32768,8,64",
        "--D1=32768,8,64",
        "--LL=8388608,16,64",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("--callgrind-out-file={}", out.join("callgrind.out").display())])
    .collect()
}

pub(crate) fn control(pid: u32, what: &str) -> Result<()> {
    let out = Command::new("callgrind_control").args([what, &pid.to_string()]).output().context("running callgrind_control")?;
    if !out.status.success() {
        bail!("callgrind_control {what} {pid} failed: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// The events of one dump: callgrind's `events:` names with the `summary:`
/// (or `totals:`) counts.
fn parse_dump(text: &str) -> Result<BTreeMap<String, u64>> {
    let names = text.lines().find_map(|l| l.strip_prefix("events:")).context("no events: line in the dump")?;
    let counts = text
        .lines()
        .find_map(|l| l.strip_prefix("summary:").or_else(|| l.strip_prefix("totals:")))
        .context("no summary: line in the dump")?;
    let values: Vec<u64> = counts.split_whitespace().map(|v| v.parse().unwrap_or(0)).collect();
    Ok(names.split_whitespace().map(str::to_string).zip(values.into_iter().chain(std::iter::repeat(0))).collect())
}

/// Dumps the counts since the last dump and reads them.
pub(crate) async fn dump(pid: u32, out: &Path, seen: &mut usize) -> Result<BTreeMap<String, u64>> {
    control(pid, "--dump")?;
    *seen += 1;
    let n = *seen;
    let file: PathBuf = wait_for("callgrind's dump", Duration::from_secs(60), || async {
        let f = std::fs::read_dir(out).ok()?.filter_map(|e| e.ok()).map(|e| e.path()).find(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|name| name.rsplit('.').next() == Some(n.to_string().as_str()))
        })?;
        // Written whole once its totals are there.
        std::fs::read_to_string(&f).ok()?.contains("\ntotals:").then_some(f)
    })
    .await?;
    parse_dump(&std::fs::read_to_string(&file)?)
}

pub(crate) fn event(d: &BTreeMap<String, u64>, names: &[&str]) -> f64 {
    names.iter().map(|n| d.get(*n).copied().unwrap_or(0)).sum::<u64>() as f64
}

/// Counts every door a goal compares closely, keyed `(number) name GVRs`:
/// (1), (2), (4), (6), (7), (8) on the 50-GVR table and (3) on the 5,000-GVR
/// one; smoke mode only the filter and its routing floor, which shows the
/// counting works.
pub async fn count_doors(dir: &Path, backends: &[(Backend, ApiSet, usize)], plan: &Plan, smoke: bool) -> Result<BTreeMap<String, Counted>> {
    load::require_tools(&["valgrind", "callgrind_control"], "Debian's valgrind")?;
    let mut out = BTreeMap::new();
    for (backend, table, gvrs) in backends {
        let list = match (*gvrs > 50, smoke) {
            (true, false) => Variant::counted_large_table(),
            (true, true) => vec![],
            (false, false) => Variant::counted(),
            (false, true) => vec![Variant::Wasm, Variant::RoutingFloor],
        };
        for variant in list.into_iter().filter(|v| plan.doors.is_empty() || plan.doors.contains(&v.number(*gvrs))) {
            let key = format!("({}) {} {gvrs}", variant.number(*gvrs), variant.name());
            eprintln!("counting instructions: {key} under callgrind (load average {})", load::load_average());
            let counted = count(dir, backend, (table, *gvrs), variant, plan).await.with_context(|| key.clone())?;
            out.insert(key, counted);
        }
    }
    Ok(out)
}

/// Counts `variant`'s Envoy in front of `backend`.
async fn count(dir: &Path, backend: &Backend, (table, gvrs): (&ApiSet, usize), variant: Variant, plan: &Plan) -> Result<Counted> {
    let name = format!("{}-{gvrs}", variant.name());
    let out = plan.keep.as_deref().unwrap_or(dir).join(format!("callgrind-{name}"));
    // A kept directory holds this run's dumps only.
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out)?;
    let (listen, admin) = two_ports();
    let config = variant.config(backend.render_with(listen, admin, variant.filter_build(), &variant.envoy_config_flags())?, table, &|n| backend.address(n), backend.router_port)?;
    let wrapper = callgrind(&out);
    let envoy = backend
        .envoy_under(&format!("callgrind-{name}"), &config, (listen, admin), 1, variant.loads_table(), Some((&wrapper, Duration::from_secs(300))))
        .await?;
    let (path, capable) = match variant.unpinned() {
        true => (table.unpinned_path(), table.servers.clone()),
        false => (table.routed_path(), table.routed_servers()),
    };
    let url = format!("http://127.0.0.1:{listen}{path}");
    check_routing(&backend.http, &url, variant, &capable).await?;
    let pid = envoy.pid();
    control(pid, "--instr=on")?;
    let mut seen = 0;
    load::sequential(&url, plan.warm_up)?;
    dump(pid, &out, &mut seen).await?;
    let mut phases = Vec::new();
    for _ in 0..plan.phases {
        let start = Instant::now();
        load::sequential(&url, plan.requests)?;
        phases.push((dump(pid, &out, &mut seen).await?, start.elapsed()));
    }
    let start = Instant::now();
    // A measured window with nothing sent, not a wait for a condition.
    tokio::time::sleep(plan.idle).await;
    let idle = dump(pid, &out, &mut seen).await?;
    let idle_secs = start.elapsed().as_secs_f64();
    let rate = |d: &BTreeMap<String, u64>, names: &[&str]| event(d, names) / idle_secs;
    let per_request = |(d, wall): &(BTreeMap<String, u64>, Duration), names: &[&str]| {
        (event(d, names) - rate(&idle, names) * wall.as_secs_f64()) / plan.requests.max(1) as f64
    };
    let ir: Vec<f64> = phases.iter().map(|p| per_request(p, &["Ir"])).collect();
    let d1: Vec<f64> = phases.iter().map(|p| per_request(p, &["D1mr", "D1mw"])).collect();
    let ll: Vec<f64> = phases.iter().map(|p| per_request(p, &["ILmr", "DLmr", "DLmw"])).collect();
    Ok(Counted {
        instructions_per_request: load::Spread::of(&ir).median,
        phases: ir,
        d1_misses_per_request: load::Spread::of(&d1).median,
        ll_misses_per_request: load::Spread::of(&ll).median,
        idle_per_second: rate(&idle, &["Ir"]),
    })
}
