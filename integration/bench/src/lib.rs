//! The front-door benchmark: every variant on the same Envoy 1.40 binary, the
//! same config except the filter, the same minimal upstream, one run.
//!
//! Envoy (`--concurrency 1`) and mvp-ext-proc are pinned to core 0; the load
//! generator and the upstream to core 1. The machine is shared and noisy, so
//! variants run interleaved in rounds (each round measures every variant once,
//! in a balanced order: [`order`]) and a ratio is the median of its per-round ratios, with
//! their range. Throughput is wrk at fixed concurrency for a bounded time;
//! latency is h2load at a fixed moderate rate; CPU per request is Envoy's (and,
//! for the ext_proc variant, its ext_proc server's) CPU time from /proc over
//! the wrk run. The load average is recorded at the start and the end. The
//! comparisons a goal reads are measured once more in paired slices, and the
//! `/apis` doors by a paired client ([`paired`]): rounds seconds apart let a
//! burst from elsewhere land on one side of a ratio only. Last, each door a
//! goal compares closely has its instructions per request counted under
//! callgrind ([`instructions`]), which the host's noise does not move.

pub mod api_set;
mod backend;
mod cluster_figures;
pub mod cluster_load;
mod cluster_mix;
pub mod cluster_report;
pub mod config_edits;
pub mod discovery;
mod instructions;
pub mod kube_mvp;
pub mod latency;
pub mod load;
mod order;
mod paired;
mod proc_cost;
mod propagation;
mod rebuilds;
mod report;
pub mod results_file;
pub mod scale;
pub mod scale_counted;
pub mod scale_real;
pub mod scale_storm;
pub mod scale_traffic;
mod settings;
use proc_cost::{cpu_ms, cpu_ticks, envoy_heap_mib, rss_mib};
pub mod variants;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use integration::harness::{FilterBuild, Proc, free_ports};
use backend::{Backend, VM_MEMORY_STAT};
use discovery::{Added, ApisDoors, CrdHeavy, crd_heavy, real_discovery};
use load::{Latency, Spread, Throughput};
use order::round_order;
pub use report::{percentile, render_table};
pub use settings::Settings;
use variants::Variant;

#[derive(Debug, Serialize)]
pub struct VariantResult {
    /// The numbering: (1) no filter … (6) the wasm floor.
    pub number: u32,
    pub name: String,
    pub description: String,
    pub gvrs: usize,
    /// One wrk run per round.
    pub throughput: Throughput,
    /// Every round's h2load samples together.
    pub latency: Latency,
    /// Envoy's CPU (plus its ext_proc server's for variant 5) per request,
    /// from the processes' own /proc counters over each round's wrk run:
    /// the median over rounds.
    pub cpu_us_per_request: f64,
    pub cpu_us_per_request_rounds: Vec<f64>,
}

#[derive(Debug, Serialize)]
pub struct Results {
    pub machine: BTreeMap<String, String>,
    pub settings: BTreeMap<String, String>,
    /// `/proc/loadavg` at the start and the end of the run.
    pub load_average: BTreeMap<String, String>,
    pub variants: Vec<VariantResult>,
    /// Per-round ratios: median and spread.
    pub ratios: BTreeMap<String, Spread>,
    /// The goals' close comparisons from paired slices: per-pair ratios.
    pub paired: BTreeMap<String, Spread>,
    pub discovery: BTreeMap<String, Latency>,
    pub discovery_added_ms: BTreeMap<String, Spread>,
    /// The `/apis` doors from the paired client, and what merging adds there.
    pub discovery_paired: BTreeMap<String, Latency>,
    pub discovery_paired_added_ms: BTreeMap<String, Added>,
    pub crd_heavy: CrdHeavy,
    pub propagation_ms: BTreeMap<String, f64>,
    pub memory: BTreeMap<String, f64>,
    /// Instructions per request under callgrind, per door.
    pub instructions: BTreeMap<String, instructions::Counted>,
    /// The goals' ratios read from those counts ([`report`]).
    pub counted_ratios: BTreeMap<String, f64>,
    /// Many nodes' watches through five doors ([`scale`]).
    pub scale: Option<scale::Scale>,
    /// Kube's own MVP beside the front door ([`kube_mvp`]).
    pub kube_mvp: Option<kube_mvp::KubeMvp>,
    /// What the door adds over a real kube-apiserver directly ([`latency`]).
    pub added_latency: Option<latency::AddedLatency>,
    /// Many clients' kube-like mix on real apiservers, doors side by side
    /// ([`cluster_load`]).
    pub cluster: Option<cluster_load::ClusterLoad>,
    pub targets: Vec<(String, bool, String)>,
}

fn two_ports() -> (u16, u16) {
    let p = free_ports(2);
    (p.first().copied().unwrap_or(0), p.get(1).copied().unwrap_or(0))
}

/// The upstream's `x-routed` when the request carried no route header.
pub const NOT_ROUTED: &str = "-";

/// Checks the variant routes the benchmark path the way it should: to a
/// capable server, by the route header unless it is the native build
/// (which pins without one).
async fn check_routing(http: &reqwest::Client, url: &str, variant: Variant, capable: &[String]) -> Result<()> {
    for _ in 0..4 {
        let resp = http.get(url).send().await?;
        let routed = resp.headers().get("x-routed").and_then(|v| v.to_str().ok()).filter(|v| *v != NOT_ROUTED).map(str::to_string);
        let upstream = resp.headers().get("x-upstream").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let ok = match variant.routes() {
            false => routed.is_none(),
            true => capable.contains(&upstream) && routed.is_some() == variant.routes_by_header(),
        };
        if !ok {
            bail!("{url}: routed {routed:?} to {upstream}, expected {}", if variant.routes() { format!("routing to {capable:?}") } else { "no routing".into() });
        }
    }
    Ok(())
}

/// One running variant: its Envoy and what is measured on it.
struct Door {
    variant: Variant,
    gvrs: usize,
    /// Held: the Envoy runs as long as the door.
    _envoy: Proc,
    admin: u16,
    url: String,
    /// Processes whose CPU counts: Envoy, and variant (5)'s ext_proc server.
    pids: Vec<u32>,
    rps: Vec<f64>,
    requests: u64,
    cpu_us: Vec<f64>,
    latency: Vec<f64>,
}


/// Ratios of two variants' values, round by round.
fn per_round(a: &[f64], b: &[f64]) -> Spread {
    let r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y.max(1e-9)).collect();
    Spread::of(&r)
}

pub async fn run(settings: Settings) -> Result<Results> {
    load::check_tools()?;
    let load_start = load::load_average();
    let dir = tempfile::Builder::new().prefix("mvp-bench-").tempdir()?;
    let http = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(30)).build()?;
    let mut memory = BTreeMap::new();

    // Tables: 50 and 5,000 group/version/resources over three apiservers,
    // each behind its own upstream and mvp-ext-proc; every variant's Envoy
    // runs from the start (idle ones cost nothing measurable).
    let mut backends = Vec::new();
    let mut doors = Vec::new();
    let tables = if settings.front_door || settings.count.is_some() {
        vec![(50usize, Variant::small_table()), (5000, Variant::large_table())]
    } else {
        vec![]
    };
    for (gvrs, list) in tables {
        let table = api_set::ApiSet::generate(gvrs);
        let servers = table.write(&dir.path().join(format!("docs-{gvrs}")))?;
        let refs: Vec<(&str, &Path)> = servers.iter().map(|(n, p)| (n.as_str(), p.as_path())).collect();
        let mut backend = Backend::start(dir.path(), &refs, settings.refresh_interval).await?;
        let router = match list.iter().any(|v| v.uses_ext_proc()) {
            true => Some(backend.start_router()?),
            false => None,
        };
        let capable: Vec<String> = table.routed_servers();
        for variant in list.into_iter().filter(|_| settings.front_door && settings.variants) {
            let (listen, admin) = two_ports();
            let config = variant.config(backend.render_with(listen, admin, variant.filter_build(), &variant.envoy_config_flags())?, &table, &|n| backend.address(n), backend.router_port)?;
            let envoy = backend.envoy(&format!("{}-{gvrs}", variant.name()), &config, listen, admin, 1, variant.loads_table()).await?;
            let url = format!("http://127.0.0.1:{listen}{}", table.routed_path());
            check_routing(&http, &url, variant, &capable)
                .await
                .with_context(|| format!("variant {}", variant.name()))?;
            let mut pids = vec![envoy.pid()];
            if let Some(pid) = router.filter(|_| variant.uses_ext_proc()) {
                pids.push(pid);
            }
            doors.push(Door { variant, gvrs, _envoy: envoy, admin, url, pids, rps: vec![], requests: 0, cpu_us: vec![], latency: vec![] });
        }
        backends.push((backend, table, gvrs));
    }
    for round in 0..if doors.is_empty() { 0 } else { settings.rounds } {
        eprintln!("round {}/{} (load average {})", round + 1, settings.rounds, load::load_average());
        for i in round_order(doors.len(), round) {
            let Some(d) = doors.get_mut(i) else { continue };
            let before: u64 = d.pids.iter().map(|p| cpu_ticks(*p)).sum();
            let (rps, requests) = load::wrk(&d.url, settings.duration)?;
            let ticks = d.pids.iter().map(|p| cpu_ticks(*p)).sum::<u64>() - before;
            d.rps.push(rps);
            d.requests += requests;
            d.cpu_us.push(ticks as f64 * 1e6 / load::clock_ticks() / requests.max(1) as f64);
        }
        for i in round_order(doors.len(), round) {
            let Some(d) = doors.get_mut(i) else { continue };
            let samples = load::latency(&d.url, settings.latency_workers, settings.latency_rate_per_worker, settings.latency_duration, &[])?;
            d.latency.extend(samples);
        }
    }
    let mut variants_out = Vec::new();
    for d in &doors {
        if d.variant.loads_table() && d.gvrs == 5000 {
            let bytes = backends.first().map(|(b, ..)| b).map(|b| b.stat(d.admin, VM_MEMORY_STAT));
            let bytes = match bytes {
                Some(f) => f.await.unwrap_or(0),
                None => 0,
            };
            memory.insert("wasm_vm_mib_per_worker_5000_gvr".into(), bytes as f64 / (1024.0 * 1024.0));
        }
        variants_out.push(VariantResult {
            number: d.variant.number(d.gvrs),
            name: d.variant.name().into(),
            description: d.variant.description().into(),
            gvrs: d.gvrs,
            throughput: Throughput::from_runs(d.rps.clone(), d.requests),
            latency: Latency::of(&d.latency),
            cpu_us_per_request: Spread::of(&d.cpu_us).median,
            cpu_us_per_request_rounds: d.cpu_us.clone(),
        });
    }
    let mut ratios = BTreeMap::new();
    let find = |name: &str, gvrs: usize| doors.iter().find(|d| d.variant.name() == name && d.gvrs == gvrs);
    let pairs = [
        ("throughput (2)/(1) wasm/no-filter", ("wasm", 50), ("no-filter", 50)),
        ("throughput (3)/(2) wasm 5000/wasm 50", ("wasm", 5000), ("wasm", 50)),
        ("throughput (2)/(4) wasm/lua", ("wasm", 50), ("lua", 50)),
        ("throughput (2)/(5) wasm/ext-proc", ("wasm", 50), ("ext-proc", 50)),
        ("throughput (2)/(6) wasm/floor", ("wasm", 50), ("wasm-floor", 50)),
        ("throughput (6)/(1) floor/no-filter", ("wasm-floor", 50), ("no-filter", 50)),
    ];
    for (name, a, b) in pairs {
        if let (Some(a), Some(b)) = (find(a.0, a.1), find(b.0, b.1)) {
            ratios.insert(name.to_string(), per_round(&a.rps, &b.rps));
        }
    }
    if let (Some(w), Some(l)) = (find("wasm", 50), find("lua", 50)) {
        ratios.insert("cpu per request (2)/(4) wasm/lua".into(), per_round(&w.cpu_us, &l.cpu_us));
    }
    // The goals' three close comparisons again, in paired slices, and the
    // proxy-wasm floor's ratio to bare Envoy, which (2)/(1)'s goal is read
    // against.
    let paired_names = ["wasm/no-filter", "wasm 5000/wasm 50", "wasm/lua", "floor/no-filter"];
    let mut comparisons = Vec::new();
    for (name, a, b) in pairs.iter().filter(|(n, ..)| paired_names.iter().any(|p| n.ends_with(p))) {
        if let (Some(a), Some(b)) = (find(a.0, a.1), find(b.0, b.1)) {
            comparisons.push(paired::Comparison {
                name: name.trim_start_matches("throughput "),
                a: paired::Side { url: &a.url, pids: &a.pids },
                b: paired::Side { url: &b.url, pids: &b.pids },
            });
        }
    }
    if !comparisons.is_empty() {
        eprintln!("paired slices: {} pairs of {} comparisons (load average {})", settings.pairs, comparisons.len(), load::load_average());
    }
    let paired = paired::slices(&comparisons, settings.pairs, settings.slice)?;
    drop(comparisons);
    drop(doors);

    // Propagation: discovery change → every worker routes by it; the same
    // changes seen by an Envoy whose refresher long-polls (the product) and
    // one whose refresher polls every 200 ms (before the long poll).
    if let Some((backend, table, _)) = backends.first().filter(|_| settings.front_door) {
        let mut envoys = Vec::new();
        let mut listens = Vec::new();
        for (name, long_poll) in [("propagation", true), ("propagation-polling", false)] {
            let (listen, admin) = two_ports();
            let mut config = Variant::Wasm.config(backend.render(listen, admin, FilterBuild::Wasm)?, table, &|n| backend.address(n), backend.router_port)?;
            if !long_poll {
                config_edits::poll_tables(&mut config)?;
            }
            envoys.push(backend.envoy(name, &config, listen, admin, 2, true).await?);
            listens.push(listen);
        }
        let samples = propagation::propagation(backend, table, &listens, settings.propagation_changes).await?;
        drop(envoys);
        for (prefix, s) in ["propagation", "propagation_polling"].iter().zip(&samples) {
            memory.insert(format!("{prefix}_samples"), s.len() as f64);
            memory.insert(format!("{prefix}_p50_ms"), percentile(s, 50.0));
            memory.insert(format!("{prefix}_p99_ms"), percentile(s, 99.0));
        }
    }
    let instructions = match &settings.count {
        Some(plan) => instructions::count_doors(dir.path(), &backends, plan, settings.smoke).await?,
        None => BTreeMap::new(),
    };
    drop(backends);

    let scale = match &settings.scale {
        Some(plan) => Some(scale::run(plan).await.context("the scale part")?),
        None => None,
    };
    let kube_mvp = match &settings.kube_mvp {
        Some(plan) => Some(kube_mvp::run(plan).await.context("the kube-mvp part")?),
        None => None,
    };
    let added_latency = match &settings.latency {
        Some(plan) => Some(latency::run(plan).await.context("the latency part")?),
        None => None,
    };
    let cluster = match &settings.cluster {
        Some(plan) => {
            let c = cluster_load::run(plan).await.context("the cluster part")?;
            for p in &c.problems {
                eprintln!("the cluster part: {p}");
            }
            Some(c)
        }
        None => None,
    };

    let (mut apis, mut crd_heavy_out) = (None, CrdHeavy::default());
    if settings.discovery {
        apis = Some(real_discovery(dir.path(), &http, &settings, &mut memory).await?);
        crd_heavy_out = crd_heavy(dir.path(), &http, &settings).await?;
    }
    let ApisDoors { latency: discovery, added: discovery_added_ms, paired_latency: discovery_paired, paired_added: discovery_paired_added_ms } =
        apis.unwrap_or_default();

    let mut results = Results {
        machine: load::machine(),
        settings: BTreeMap::from([
            ("rounds".into(), settings.rounds.to_string()),
            ("duration_s".into(), settings.duration.as_secs_f64().to_string()),
            ("latency_duration_s".into(), settings.latency_duration.as_secs_f64().to_string()),
            ("throughput".into(), format!("wrk -t1 -c{} (pinned to core 1), Envoy --concurrency 1 pinned to core 0", load::CONNECTIONS)),
            (
                "latency".into(),
                format!(
                    "h2load --h1 -c {} --rps {} ({} req/s), p50/p99 from its per-request log",
                    settings.latency_workers,
                    settings.latency_rate_per_worker,
                    settings.latency_workers * settings.latency_rate_per_worker
                ),
            ),
            ("refresh_interval_ms".into(), settings.refresh_interval.as_millis().to_string()),
            ("pairs".into(), settings.pairs.to_string()),
            ("slice_s".into(), settings.slice.as_secs_f64().to_string()),
            ("apis_window_s".into(), settings.apis_window.as_secs_f64().to_string()),
            ("smoke".into(), settings.smoke.to_string()),
        ]),
        load_average: BTreeMap::from([("start".into(), load_start), ("end".into(), load::load_average())]),
        variants: variants_out,
        ratios,
        paired,
        discovery,
        discovery_added_ms,
        discovery_paired,
        discovery_paired_added_ms,
        crd_heavy: crd_heavy_out,
        propagation_ms: BTreeMap::new(),
        memory,
        instructions,
        counted_ratios: BTreeMap::new(),
        scale,
        kube_mvp,
        added_latency,
        cluster,
        targets: vec![],
    };
    results.variants.sort_by_key(|v| v.number);
    report::finish(&mut results);
    Ok(results)
}
