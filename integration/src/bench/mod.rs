//! The front-door benchmark: every variant on the same Envoy 1.40 binary, the
//! same config except the filter, the same minimal upstream, one run.
//!
//! Envoy (`--concurrency 1`) and mvp-ext-proc are pinned to core 0; the load
//! generator and the upstream to core 1. Throughput is wrk at fixed
//! concurrency for a bounded time, repeated (median and spread); latency is
//! h2load at a fixed moderate rate; CPU per request is Envoy's (and, for the
//! ext_proc variant, mvp-ext-proc's) CPU time from /proc over the wrk run.

pub mod api_set;
mod backend;
pub mod load;
mod report;
pub mod variants;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::Value;

use crate::harness::{fixtures_dir, free_ports};
use backend::{Backend, VM_MEMORY_STAT, wait_routed};
use load::{Latency, Throughput};
pub use report::{percentile, render_table};
use variants::Variant;

#[derive(Debug, Clone)]
pub struct Settings {
    pub smoke: bool,
    pub duration: Duration,
    pub repeats: usize,
    /// h2load: connections × per-connection rate = the fixed moderate rate.
    pub latency_workers: u32,
    pub latency_rate_per_worker: u32,
    pub propagation_changes: usize,
    pub refresh_interval: Duration,
}

impl Settings {
    pub fn full() -> Settings {
        Settings {
            smoke: false,
            duration: Duration::from_secs(5),
            repeats: 3,
            latency_workers: 4,
            latency_rate_per_worker: 250,
            propagation_changes: 30,
            refresh_interval: Duration::from_millis(500),
        }
    }

    pub fn smoke() -> Settings {
        Settings {
            smoke: true,
            duration: Duration::from_secs(1),
            repeats: 1,
            latency_workers: 2,
            latency_rate_per_worker: 50,
            propagation_changes: 2,
            refresh_interval: Duration::from_millis(500),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct VariantResult {
    /// The numbering: (1) no filter … (5) ext_proc.
    pub number: u32,
    pub name: String,
    pub description: String,
    pub gvrs: usize,
    pub throughput: Throughput,
    pub latency: Latency,
    /// Envoy CPU (plus mvp-ext-proc's for the ext_proc variant) per request.
    pub cpu_us_per_request: f64,
}

#[derive(Debug, Serialize)]
pub struct Results {
    pub machine: BTreeMap<String, String>,
    pub settings: BTreeMap<String, String>,
    pub variants: Vec<VariantResult>,
    pub ratios: BTreeMap<String, f64>,
    pub discovery: BTreeMap<String, Latency>,
    pub discovery_added_ms: BTreeMap<String, f64>,
    pub propagation_ms: BTreeMap<String, f64>,
    pub memory: BTreeMap<String, f64>,
    pub targets: Vec<(String, bool, String)>,
}

fn two_ports() -> (u16, u16) {
    let p = free_ports(2);
    (p.first().copied().unwrap_or(0), p.get(1).copied().unwrap_or(0))
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command: utime is the 12th, stime the 13th.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    n(11) + n(12)
}

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:")?.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// Checks the variant routes the benchmark path the way it should.
async fn check_routing(http: &reqwest::Client, url: &str, expect_routed: Option<&[String]>) -> Result<()> {
    for _ in 0..4 {
        let resp = http.get(url).send().await?;
        let routed = resp.headers().get("x-routed").and_then(|v| v.to_str().ok()).map(str::to_string);
        let upstream = resp.headers().get("x-upstream").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        match (expect_routed, routed) {
            (None, None) => {}
            (Some(capable), Some(_)) if capable.contains(&upstream) => {}
            (want, got) => bail!("{url}: routed {got:?} to {upstream}, expected routing to {want:?}"),
        }
    }
    Ok(())
}

pub async fn run(settings: Settings) -> Result<Results> {
    load::check_tools()?;
    let dir = tempfile::Builder::new().prefix("mvp-bench-").tempdir()?;
    let http = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(30)).build()?;
    let mut variants_out = Vec::new();
    let mut memory = BTreeMap::new();

    // Tables: 50 and 5,000 group/version/resources over three apiservers.
    for (gvrs, list) in [(50usize, Variant::small_table()), (5000, Variant::large_table())] {
        let table = api_set::ApiSet::generate(gvrs);
        let docs_dir = dir.path().join(format!("docs-{gvrs}"));
        let servers = table.write(&docs_dir)?;
        let refs: Vec<(&str, &Path)> = servers.iter().map(|(n, p)| (n.as_str(), p.as_path())).collect();
        let backend = Backend::start(dir.path(), &refs, settings.refresh_interval).await?;
        let target = table.routed_path();
        let capable: Vec<String> = table.routed_servers();
        for variant in list {
            let (listen, admin) = two_ports();
            let config = variant.config(backend.render(listen, admin)?, &table, &|n| backend.address(n), backend.router_port)?;
            let envoy = backend.envoy(variant.name(), &config, listen, admin, 1, variant.uses_wasm()).await?;
            let url = format!("http://127.0.0.1:{listen}{target}");
            check_routing(&http, &url, variant.routes().then_some(capable.as_slice()))
                .await
                .with_context(|| format!("variant {}", variant.name()))?;
            let pids: Vec<u32> = if variant.uses_ext_proc() {
                vec![envoy.pid(), backend.router.pid()]
            } else {
                vec![envoy.pid()]
            };
            let before: u64 = pids.iter().map(|p| cpu_ticks(*p)).sum();
            let throughput = load::throughput(&url, settings.duration, settings.repeats)?;
            let ticks = pids.iter().map(|p| cpu_ticks(*p)).sum::<u64>() - before;
            let cpu_us = ticks as f64 * 1e6 / load::clock_ticks() / throughput.total_requests.max(1) as f64;
            let latency = load::latency(&url, settings.latency_workers, settings.latency_rate_per_worker, settings.duration, &[])?;
            if variant.uses_wasm() && gvrs == 5000 {
                let bytes = backend.stat(admin, VM_MEMORY_STAT).await.unwrap_or(0);
                memory.insert("wasm_vm_mib_per_worker_5000_gvr".into(), bytes as f64 / (1024.0 * 1024.0));
            }
            variants_out.push(VariantResult {
                number: variant.number(gvrs),
                name: variant.name().into(),
                description: variant.description().into(),
                gvrs,
                throughput,
                latency,
                cpu_us_per_request: cpu_us,
            });
            drop(envoy);
        }
        if gvrs == 50 {
            // Propagation: discovery change → every worker routes by it.
            let (listen, admin) = two_ports();
            let config = Variant::Wasm.config(backend.render(listen, admin)?, &table, &|n| backend.address(n), backend.router_port)?;
            let envoy = backend.envoy("propagation", &config, listen, admin, 2, true).await?;
            let samples = propagation(&backend, &table, listen, settings.propagation_changes).await?;
            drop(envoy);
            memory.insert("propagation_samples".into(), samples.len() as f64);
            memory.insert("propagation_p50_ms".into(), percentile(&samples, 50.0));
            memory.insert("propagation_p99_ms".into(), percentile(&samples, 99.0));
        }
    }

    // Merged vs passthrough /apis with three apiservers serving the real
    // v1.37 documents.
    let real = dir.path().join("docs-v1.37");
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
    let backend = Backend::start(dir.path(), &refs, settings.refresh_interval).await?;
    let mut discovery = BTreeMap::new();
    let accept = ("accept", mvp_ext_proc::apidiscovery::JSON_CONTENT_TYPE);
    for (name, merged) in [("apis_passthrough", false), ("apis_merged", true)] {
        let (listen, admin) = two_ports();
        let mut config = backend.render(listen, admin)?;
        if !merged {
            variants::disable_ext_proc_on_apis(&mut config);
        }
        let envoy = backend.envoy(name, &config, listen, admin, 1, true).await?;
        let url = format!("http://127.0.0.1:{listen}/apis");
        let resp = http.get(&url).header(accept.0, accept.1).send().await?;
        let body = resp.bytes().await?;
        let doc: Value = serde_json::from_slice(&body)?;
        if doc["items"].as_array().map(Vec::len).unwrap_or(0) < 10 {
            bail!("{name}: /apis is not a discovery document");
        }
        let lat = load::latency(&url, 2, 100, settings.duration, &[accept])?;
        discovery.insert(name.to_string(), lat);
        drop(envoy);
    }
    memory.insert("ext_proc_rss_mib_3_apiservers_v1_37".into(), rss_mib(backend.ext_proc.pid()));
    drop(backend);
    variants_out.sort_by_key(|v| v.number);

    let mut results = Results {
        machine: load::machine(),
        settings: BTreeMap::from([
            ("duration_s".into(), settings.duration.as_secs_f64().to_string()),
            ("repeats".into(), settings.repeats.to_string()),
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
            ("smoke".into(), settings.smoke.to_string()),
        ]),
        variants: variants_out,
        ratios: BTreeMap::new(),
        discovery,
        discovery_added_ms: BTreeMap::new(),
        propagation_ms: BTreeMap::new(),
        memory,
        targets: vec![],
    };
    report::finish(&mut results);
    Ok(results)
}

/// Changes one apiserver's discovery (a new group only it serves) and times
/// until requests on fresh connections — spread over both workers — are
/// all routed by the new table.
async fn propagation(backend: &Backend, table: &api_set::ApiSet, listen: u16, changes: usize) -> Result<Vec<f64>> {
    let fresh = reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0).timeout(Duration::from_secs(5)).build()?;
    let only = table.servers.last().cloned().unwrap_or_default();
    let addr = backend.address(&only);
    let mut samples = Vec::new();
    let interval = backend.refresh;
    for i in 0..changes {
        // Changes land at a random point of the refresh cycle, as real ones
        // do; without this every change would follow a detection by the same
        // delay and measure one phase only.
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        tokio::time::sleep(interval.mul_f64(f64::from(nanos % 1000) / 1000.0)).await;
        let group = format!("prop{i}.bench.example");
        let doc = table.apis_with_extra_group(&only, &group);
        let started = Instant::now();
        backend.http.post(format!("http://{addr}/__bench/apis")).body(serde_json::to_vec(&doc)?).send().await?;
        let url = format!("http://127.0.0.1:{listen}/apis/{group}/v1/namespaces/default/things/x");
        wait_routed(&fresh, &url, &addr).await?;
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(samples)
}
