//! Real load generators (Debian's wrk and h2load), pinned to core 1, bounded in
//! time, against loopback only.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Serialize;

pub const CONNECTIONS: u32 = 16;

pub fn check_tools() -> Result<()> {
    require_tools(&["wrk", "h2load", "taskset"], "Debian's wrk and nghttp2-client")
}

/// Fails naming the first of `tools` not on PATH and what installs it.
pub fn require_tools(tools: &[&str], installs: &str) -> Result<()> {
    for tool in tools {
        let ok = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().map(|o| o.status.success()).unwrap_or(false);
        if !ok {
            bail!("{tool} is not installed: run scripts/bootstrap.sh (it installs {installs})");
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Throughput {
    pub median_rps: f64,
    pub min_rps: f64,
    pub max_rps: f64,
    pub runs: Vec<f64>,
    pub total_requests: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub requests: u64,
}

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!("{cmd:?} failed: {}{}", text, String::from_utf8_lossy(&out.stderr));
    }
    Ok(text)
}

/// Saturated throughput: one wrk run (one thread, fixed connections):
/// requests per second and requests served.
pub fn wrk(url: &str, duration: Duration) -> Result<(f64, u64)> {
    let text = run(Command::new("taskset").args(["-c", "1", "wrk", "-t1", &format!("-c{CONNECTIONS}"), &format!("-d{}s", duration.as_secs().max(1)), url]))?;
    if text.contains("Non-2xx or 3xx responses") {
        bail!("wrk saw errors against {url}:\n{text}");
    }
    let rps: f64 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:")?.trim().parse().ok())
        .with_context(|| format!("no Requests/sec in wrk output:\n{text}"))?;
    let requests: u64 = text
        .lines()
        .find_map(|l| l.trim().split_once(" requests in ")?.0.trim().parse().ok())
        .with_context(|| format!("no request count in wrk output:\n{text}"))?;
    Ok((rps, requests))
}

impl Throughput {
    /// One run per round.
    pub fn from_runs(runs: Vec<f64>, total_requests: u64) -> Throughput {
        let s = Spread::of(&runs);
        Throughput { median_rps: s.median, min_rps: s.min, max_rps: s.max, runs, total_requests }
    }
}

/// A value measured once per round (or pair): the median, the quartiles and
/// the range.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Nearest-rank quartiles: with many pairs the range shows the host's
    /// worst moments, the quartiles how the middle half agrees.
    pub p25: f64,
    pub p75: f64,
    pub rounds: Vec<f64>,
}

impl Spread {
    pub fn of(values: &[f64]) -> Spread {
        let mut s = values.to_vec();
        s.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        let median = match s.len() {
            0 => 0.0,
            n if n % 2 == 1 => s[n / 2],
            n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
        };
        Spread {
            median,
            min: s.first().copied().unwrap_or(0.0),
            max: s.last().copied().unwrap_or(0.0),
            p25: super::percentile(&s, 25.0),
            p75: super::percentile(&s, 75.0),
            rounds: values.to_vec(),
        }
    }
}

impl Latency {
    pub fn of(samples: &[f64]) -> Latency {
        Latency { p50_ms: super::percentile(samples, 50.0), p99_ms: super::percentile(samples, 99.0), requests: samples.len() as u64 }
    }
}

/// Latency at a fixed rate: h2load (HTTP/1.1) with `workers` connections
/// each sending `rate` requests per second; every request's latency in ms,
/// from its per-request log (µs resolution; hey's report stops at 0.1 ms).
pub fn latency(url: &str, workers: u32, rate: u32, duration: Duration, headers: &[(&str, &str)]) -> Result<Vec<f64>> {
    let log = tempfile::NamedTempFile::new()?;
    let mut cmd = Command::new("taskset");
    cmd.args(["-c", "1", "h2load", "--h1", "-c", &workers.to_string(), "--rps", &rate.to_string()]);
    cmd.args(["-D", &duration.as_secs().max(1).to_string()]);
    cmd.arg(format!("--log-file={}", log.path().display()));
    for (k, v) in headers {
        cmd.args(["-H", &format!("{k}: {v}")]);
    }
    cmd.arg(url);
    let text = h2load_ok(&mut cmd, url)?;
    let samples: Vec<f64> = std::fs::read_to_string(log.path())?
        .lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            let (_, status, us) = (f.next()?, f.next()?, f.next()?);
            (status == "200").then(|| us.trim().parse::<f64>().ok()).flatten()
        })
        .map(|us| us / 1000.0)
        .collect();
    if samples.is_empty() {
        bail!("h2load logged no requests:\n{text}");
    }
    Ok(samples)
}

/// h2load's report, when every request succeeded.
fn h2load_ok(cmd: &mut Command, url: &str) -> Result<String> {
    let text = run(cmd)?;
    let ok = text.lines().any(|l| l.starts_with("status codes:") && l.contains(" 0 3xx, 0 4xx, 0 5xx"))
        && text.lines().any(|l| l.starts_with("requests:") && l.contains(" 0 failed, 0 errored, 0 timeout"));
    if !ok {
        bail!("h2load saw failures against {url}:\n{text}");
    }
    Ok(text)
}

/// Open loop: `rate` requests per second for `window`, the i-th built by
/// `request(i)` (`None` ends the run) and sent at its scheduled time on its
/// own task whatever the answers do, so a slow answer delays none behind
/// it. Every request's latency (ms) from its scheduled time to its whole
/// body (a LIST's latency is its last byte's), and answers by status (0:
/// none).
pub async fn open_loop(rate: u32, window: Duration, request: impl Fn(usize) -> Option<reqwest::RequestBuilder>) -> (Vec<f64>, BTreeMap<u16, u64>) {
    let every = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
    let n = (window.as_secs_f64() * f64::from(rate)).round() as usize;
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let Some(r) = request(i) else { break };
        let due = start + every * i as u32;
        tokio::time::sleep_until(due).await;
        let due: std::time::Instant = due.into_std();
        tasks.push(tokio::spawn(async move {
            let status = match r.timeout(Duration::from_secs(10)).send().await {
                Ok(r) => {
                    let s = r.status().as_u16();
                    if r.bytes().await.is_err() { 0 } else { s }
                }
                Err(_) => 0,
            };
            (due.elapsed().as_secs_f64() * 1000.0, status)
        }));
    }
    let mut latencies = Vec::with_capacity(n);
    let mut statuses = BTreeMap::new();
    for t in tasks {
        if let Ok((ms, status)) = t.await {
            latencies.push(ms);
            *statuses.entry(status).or_default() += 1;
        }
    }
    (latencies, statuses)
}

/// Exactly `requests` requests, one at a time on one HTTP/1.1 connection.
pub fn sequential(url: &str, requests: u64) -> Result<()> {
    h2load_ok(Command::new("taskset").args(["-c", "1", "h2load", "--h1", "-c", "1", "-n", &requests.to_string(), url]), url).map(drop)
}

pub fn clock_ticks() -> f64 {
    Command::new("getconf").arg("CLK_TCK").output().ok().and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok()).unwrap_or(100.0)
}

/// The 1-, 5- and 15-minute load averages: how busy the shared machine was.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")).unwrap_or_default()
}

pub fn machine() -> BTreeMap<String, String> {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name").map(|s| s.trim_start_matches([' ', '\t', ':']).to_string()))
        .unwrap_or_default();
    let cmd = |c: &str| Command::new("sh").args(["-c", c]).output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default();
    let envoy = integration::harness::envoy_bin().map(|p| cmd(&format!("{} --version", p.display()))).unwrap_or_default();
    BTreeMap::from([
        ("cpu".into(), cpu),
        ("cores".into(), cmd("nproc")),
        ("kernel".into(), cmd("uname -r")),
        ("envoy".into(), envoy.rsplit(' ').next().unwrap_or("").to_string()),
        ("wrk".into(), cmd("wrk --version 2>&1 | head -1")),
    ])
}
