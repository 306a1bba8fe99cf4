//! The front-door benchmark: every variant on the same Envoy 1.40 binary, the
//! same config except the filter, the same minimal upstream, one run.
//!
//! Envoy (`--concurrency 1`) and mvp-ext-proc are pinned to core 0; the load
//! generator and the upstream to core 1. Throughput is wrk at fixed
//! concurrency for a bounded time, repeated (median and spread); latency is
//! h2load at a fixed moderate rate; CPU per request is Envoy's (and, for the
//! ext_proc variant, mvp-ext-proc's) CPU time from /proc over the wrk run.

pub mod docs;
pub mod load;
pub mod variants;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::Value;

use crate::harness::{Proc, envoy_bin, ext_proc_bin, fixtures_dir, wait_for, wasm_file};
use load::{Latency, Throughput};
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

/// The processes of one topology: upstream apiservers and mvp-ext-proc.
struct Backend {
    dir: PathBuf,
    /// Held so the upstream lives as long as the backend.
    _upstream: Proc,
    ext_proc: Proc,
    /// Variant (5)'s ext_proc server.
    router: Proc,
    router_port: u16,
    servers: Vec<(String, u16)>,
    grpc_port: u16,
    metrics_port: u16,
    http: reqwest::Client,
    refresh: Duration,
}

fn bin(name: &str) -> Result<PathBuf> {
    // Next to mvp-ext-proc: the same profile.
    let p = ext_proc_bin()?.with_file_name(name);
    if !p.exists() {
        bail!("{} not found: build the integration binaries (scripts/bench.sh does)", p.display());
    }
    Ok(p)
}

impl Backend {
    async fn start(dir: &Path, servers: &[(&str, &Path)], refresh: Duration) -> Result<Backend> {
        let mut free = crate::harness::free_ports(servers.len() + 3).into_iter();
        let ports: Vec<(String, u16)> = servers.iter().map(|(n, _)| (n.to_string(), free.next().unwrap_or(0))).collect();
        let mut args = Vec::new();
        for ((name, port), (_, docs)) in ports.iter().zip(servers) {
            args.push("--server".to_string());
            args.push(format!("{name}=127.0.0.1:{port}={}", docs.display()));
        }
        let upstream = Proc::spawn_pinned("bench-upstream", dir, "1", &bin("bench-upstream")?, &args)?;
        let (grpc_port, metrics_port) = (free.next().unwrap_or(0), free.next().unwrap_or(0));
        let mut serve = vec!["serve".to_string()];
        for (name, port) in &ports {
            serve.extend(["--apiserver".into(), format!("{name}=http://127.0.0.1:{port}")]);
        }
        serve.extend([
            "--grpc-listen".into(),
            format!("127.0.0.1:{grpc_port}"),
            "--metrics-listen".into(),
            format!("127.0.0.1:{metrics_port}"),
            "--refresh-interval".into(),
            format!("{}ms", refresh.as_millis()),
        ]);
        let ext_proc = Proc::spawn_pinned("mvp-ext-proc", dir, "0", &ext_proc_bin()?, &serve)?;
        let router_port = free.next().unwrap_or(0);
        let router_args = vec![
            "--listen".to_string(),
            format!("127.0.0.1:{router_port}"),
            "--table-from".into(),
            format!("127.0.0.1:{grpc_port}"),
        ];
        let router = Proc::spawn_pinned("ext-proc-router", dir, "0", &bin("ext-proc-router")?, &router_args)?;
        let http = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(30)).build()?;
        let b = Backend { dir: dir.to_path_buf(), _upstream: upstream, ext_proc, router, router_port, servers: ports, grpc_port, metrics_port, http, refresh };
        let want = servers.len();
        wait_for("mvp-ext-proc to discover every upstream", Duration::from_secs(30), || async {
            let t = b.table().await?;
            (t["apiservers"].as_array()?.iter().filter(|a| a["healthy"] == true).count() == want).then_some(())
        })
        .await?;
        Ok(b)
    }

    async fn table(&self) -> Option<Value> {
        self.http.get(format!("http://127.0.0.1:{}/table", self.metrics_port)).send().await.ok()?.json().await.ok()
    }

    fn address(&self, name: &str) -> String {
        let port = self.servers.iter().find(|(n, _)| n == name).map(|(_, p)| *p).unwrap_or(0);
        format!("127.0.0.1:{port}")
    }

    /// The rendered production bootstrap for these upstreams.
    fn render(&self, listen: u16, admin: u16) -> Result<Value> {
        let mut args = vec!["envoy-config".to_string()];
        for (name, port) in &self.servers {
            args.extend(["--apiserver".into(), format!("{name}=http://127.0.0.1:{port}")]);
        }
        args.extend([
            "--listen".into(),
            format!("127.0.0.1:{listen}"),
            "--admin".into(),
            format!("127.0.0.1:{admin}"),
            "--wasm".into(),
            wasm_file()?.to_string_lossy().into_owned(),
            "--ext-proc".into(),
            format!("127.0.0.1:{}", self.grpc_port),
            "--table-poll-interval".into(),
            "100ms".into(),
        ]);
        let out = std::process::Command::new(ext_proc_bin()?).args(&args).output()?;
        if !out.status.success() {
            bail!("envoy-config: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(serde_yaml_ng::from_slice(&out.stdout)?)
    }

    /// Starts Envoy with `config`, pinned to core 0 unless `concurrency` > 1.
    async fn envoy(&self, name: &str, config: &Value, listen: u16, admin: u16, concurrency: u32, wait_table: bool) -> Result<Proc> {
        let path = self.dir.join(format!("envoy-{name}.yaml"));
        std::fs::write(&path, serde_yaml_ng::to_string(config)?)?;
        let args = vec![
            "-c".to_string(),
            path.to_string_lossy().into_owned(),
            "--concurrency".into(),
            concurrency.to_string(),
            "--disable-hot-restart".into(),
            "--log-level".into(),
            "warning".into(),
        ];
        let cores = if concurrency > 1 { "0,1" } else { "0" };
        let envoy = Proc::spawn_pinned(&format!("envoy-{name}"), &self.dir, cores, &envoy_bin()?, &args)?;
        let ready = format!("http://127.0.0.1:{admin}/ready");
        wait_for(&format!("Envoy ({name}) to be ready"), Duration::from_secs(30), || async {
            self.http.get(&ready).send().await.ok().filter(|r| r.status().is_success())
        })
        .await?;
        let _ = listen;
        if wait_table {
            wait_for("the routing table to reach Envoy", Duration::from_secs(30), || async {
                let v: u64 = self.table().await?["version"].as_str()?.parse().ok()?;
                (stat(&self.http, admin, "wasmcustom.mvp.refresher.table_version").await? == v).then_some(())
            })
            .await?;
        }
        Ok(envoy)
    }
}

fn two_ports() -> (u16, u16) {
    let p = crate::harness::free_ports(2);
    (p.first().copied().unwrap_or(0), p.get(1).copied().unwrap_or(0))
}

pub async fn stat(http: &reqwest::Client, admin: u16, name: &str) -> Option<u64> {
    let text = http.get(format!("http://127.0.0.1:{admin}/stats?filter={name}")).send().await.ok()?.text().await.ok()?;
    text.lines().find_map(|l| l.strip_prefix(&format!("{name}: "))?.trim().parse().ok())
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
        let table = docs::Table::generate(gvrs);
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
                let bytes = stat(&http, admin, "wasmcustom.mvp.router.vm_memory_bytes").await.unwrap_or(0);
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
    finish(&mut results);
    Ok(results)
}

/// Changes one apiserver's discovery (a new group only it serves) and times
/// until requests on fresh connections — spread over both workers — are
/// all routed by the new table.
async fn propagation(backend: &Backend, table: &docs::Table, listen: u16, changes: usize) -> Result<Vec<f64>> {
    let fresh = reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0).timeout(Duration::from_secs(5)).build()?;
    let only = table.servers.last().cloned().unwrap_or_default();
    let addr = backend.address(&only);
    let mut samples = Vec::new();
    let interval = backend_interval(backend);
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
        wait_for("the new table to route on every worker", Duration::from_secs(10), || async {
            for _ in 0..8 {
                let resp = fresh.get(&url).send().await.ok()?;
                let routed = resp.headers().get("x-routed")?.to_str().ok()? == addr;
                if !routed {
                    return None;
                }
            }
            Some(())
        })
        .await?;
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(samples)
}

fn backend_interval(b: &Backend) -> Duration {
    b.refresh
}

pub fn percentile(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

fn finish(r: &mut Results) {
    let by = |name: &str, gvrs: usize| r.variants.iter().find(|v| v.name == name && v.gvrs == gvrs);
    let (none, wasm, wasm_big, lua, extproc) =
        (by("no-filter", 50), by("wasm", 50), by("wasm", 5000), by("lua", 50), by("ext-proc", 50));
    if let (Some(n), Some(w), Some(f)) = (none, wasm, by("wasm-floor", 50)) {
        // How much of the filter's cost is the SDK's dispatch, not our work.
        let cpu = |v: &VariantResult| v.cpu_us_per_request - n.cpu_us_per_request;
        r.memory.insert("floor_share_of_wasm_cpu_overhead".into(), cpu(f) / cpu(w).max(1e-9));
        r.memory.insert("wasm_cpu_overhead_us".into(), cpu(w));
        r.memory.insert("floor_cpu_overhead_us".into(), cpu(f));
    }
    let mut ratios = BTreeMap::new();
    let mut targets = Vec::new();
    if let (Some(w), Some(f)) = (wasm, by("wasm-floor", 50)) {
        ratios.insert("throughput (2)/(6) wasm/floor".into(), w.throughput.median_rps / f.throughput.median_rps);
    }
    if let (Some(n), Some(w), Some(b), Some(l), Some(e)) = (none, wasm, wasm_big, lua, extproc) {
        let t = |v: &VariantResult| v.throughput.median_rps;
        let added = |v: &VariantResult| (v.latency.p50_ms - n.latency.p50_ms).max(0.0);
        let added99 = |v: &VariantResult| (v.latency.p99_ms - n.latency.p99_ms).max(0.0);
        ratios.insert("throughput (2)/(1) wasm/no-filter".into(), t(w) / t(n));
        ratios.insert("throughput (3)/(2) wasm 5000/wasm 50".into(), t(b) / t(w));
        ratios.insert("throughput (2)/(4) wasm/lua".into(), t(w) / t(l));
        ratios.insert("throughput (2)/(5) wasm/ext-proc".into(), t(w) / t(e));
        ratios.insert("added p50 latency (2)/(5) wasm/ext-proc".into(), added(w) / added(e).max(1e-9));
        ratios.insert("added p99 latency (2)/(5) wasm/ext-proc".into(), added99(w) / added99(e).max(1e-9));
        ratios.insert("cpu per request (2)/(4) wasm/lua".into(), w.cpu_us_per_request / l.cpu_us_per_request.max(1e-9));
        targets.push(("(2)/(1) throughput ≥ 0.90".into(), ratios["throughput (2)/(1) wasm/no-filter"] >= 0.90, format!("{:.3}", ratios["throughput (2)/(1) wasm/no-filter"])));
        targets.push(("(3)/(2) throughput ≥ 0.98".into(), ratios["throughput (3)/(2) wasm 5000/wasm 50"] >= 0.98, format!("{:.3}", ratios["throughput (3)/(2) wasm 5000/wasm 50"])));
        targets.push(("(2) faster than (4)".into(), t(w) > t(l), format!("{:.3}", ratios["throughput (2)/(4) wasm/lua"])));
        targets.push(("(2) ≥ 1.5× (5) throughput".into(), t(w) >= 1.5 * t(e), format!("{:.3}", ratios["throughput (2)/(5) wasm/ext-proc"])));
        targets.push((
            "(2) added latency ≤ ⅓ of (5)'s".into(),
            added(w) <= added(e) / 3.0,
            format!("p50 +{:.3} ms vs +{:.3} ms", added(w), added(e)),
        ));
    }
    if let (Some(p), Some(m)) = (r.discovery.get("apis_passthrough"), r.discovery.get("apis_merged")) {
        r.discovery_added_ms.insert("p50".into(), m.p50_ms - p.p50_ms);
        r.discovery_added_ms.insert("p99".into(), m.p99_ms - p.p99_ms);
        targets.push(("merged /apis adds ≤ 1 ms p99".into(), m.p99_ms - p.p99_ms <= 1.0, format!("{:+.3} ms", m.p99_ms - p.p99_ms)));
    }
    if let (Some(p50), Some(p99)) = (r.memory.remove("propagation_p50_ms"), r.memory.remove("propagation_p99_ms")) {
        r.propagation_ms.insert("p50".into(), p50);
        r.propagation_ms.insert("p99".into(), p99);
        if let Some(n) = r.memory.remove("propagation_samples") {
            r.propagation_ms.insert("samples".into(), n);
        }
        targets.push(("propagation ≤ 1 s p99".into(), p99 <= 1000.0, format!("{p99:.0} ms")));
    }
    if let Some(rss) = r.memory.get("ext_proc_rss_mib_3_apiservers_v1_37") {
        targets.push(("ext-proc RSS ≤ 50 MiB".into(), *rss <= 50.0, format!("{rss:.1} MiB")));
    }
    if let Some(vm) = r.memory.get("wasm_vm_mib_per_worker_5000_gvr") {
        targets.push(("wasm VM ≤ 8 MiB per worker".into(), *vm > 0.0 && *vm <= 8.0, format!("{vm:.2} MiB")));
    }
    r.ratios = ratios;
    r.targets = targets;
}

/// The table printed at the end of a run (also pasted into BENCHMARKS.md).
pub fn render_table(r: &Results) -> String {
    let mut out = String::new();
    out.push_str("| variant | GVRs | throughput req/s (median, min–max) | p50 ms | p99 ms | CPU µs/req |\n|---|---|---|---|---|---|\n");
    for v in &r.variants {
        out.push_str(&format!(
            "| ({}) {} | {} | {:.0} ({:.0}–{:.0}) | {:.3} | {:.3} | {:.1} |\n",
            v.number,
            v.description,
            v.gvrs,
            v.throughput.median_rps,
            v.throughput.min_rps,
            v.throughput.max_rps,
            v.latency.p50_ms,
            v.latency.p99_ms,
            v.cpu_us_per_request
        ));
    }
    out.push_str("\n| ratio | value |\n|---|---|\n");
    for (k, v) in &r.ratios {
        out.push_str(&format!("| {k} | {v:.3} |\n"));
    }
    out.push_str("\n| /apis | p50 ms | p99 ms |\n|---|---|---|\n");
    for (k, v) in &r.discovery {
        out.push_str(&format!("| {k} | {:.3} | {:.3} |\n", v.p50_ms, v.p99_ms));
    }
    for (k, v) in &r.discovery_added_ms {
        out.push_str(&format!("| added by merging ({k}) | {v:+.3} | |\n"));
    }
    out.push_str("\n| other | value |\n|---|---|\n");
    for (k, v) in &r.propagation_ms {
        out.push_str(&format!("| propagation {k} | {v:.0}{} |\n", if k == "samples" { "" } else { " ms" }));
    }
    for (k, v) in &r.memory {
        out.push_str(&format!("| {k} | {v:.2} |\n"));
    }
    out.push_str("\n| target | met | measured |\n|---|---|---|\n");
    for (t, ok, m) in &r.targets {
        out.push_str(&format!("| {t} | {} | {m} |\n", if *ok { "yes" } else { "NO" }));
    }
    out
}
