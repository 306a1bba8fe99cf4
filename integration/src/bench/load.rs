//! Real load generators (Debian's wrk and hey), pinned to core 1, bounded in
//! time, against loopback only.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Serialize;

pub const CONNECTIONS: u32 = 16;

pub fn check_tools() -> Result<()> {
    for tool in ["wrk", "hey", "taskset"] {
        let ok = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().map(|o| o.status.success()).unwrap_or(false);
        if !ok {
            bail!("{tool} is not installed: run scripts/bootstrap.sh (it installs Debian's wrk and hey)");
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

/// Saturated throughput: wrk, one thread, fixed connections, `repeats` runs.
pub fn throughput(url: &str, duration: Duration, repeats: usize) -> Result<Throughput> {
    let mut runs = Vec::new();
    let mut total = 0u64;
    for _ in 0..repeats.max(1) {
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
        runs.push(rps);
        total += requests;
    }
    let mut sorted = runs.clone();
    sorted.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    Ok(Throughput {
        median_rps: sorted[sorted.len() / 2],
        min_rps: sorted[0],
        max_rps: sorted[sorted.len() - 1],
        runs,
        total_requests: total,
    })
}

/// Latency at a fixed rate: hey with `workers` × `rate` requests per second.
pub fn latency(url: &str, workers: u32, rate: u32, duration: Duration, headers: &[(&str, &str)]) -> Result<Latency> {
    let mut cmd = Command::new("taskset");
    cmd.args(["-c", "1", "hey", "-z", &format!("{}s", duration.as_secs().max(1)), "-c", &workers.to_string(), "-q", &rate.to_string(), "-disable-compression"]);
    for (k, v) in headers {
        cmd.args(["-H", &format!("{k}: {v}")]);
    }
    cmd.arg(url);
    let text = run(&mut cmd)?;
    let pct = |p: &str| -> Option<f64> {
        text.lines().find_map(|l| {
            let rest = l.trim().strip_prefix(&format!("{p}% in "))?;
            rest.split_whitespace().next()?.parse::<f64>().ok().map(|s| s * 1000.0)
        })
    };
    let (Some(p50), Some(p99)) = (pct("50"), pct("99")) else { bail!("no latency distribution in hey output:\n{text}") };
    let mut requests = 0;
    let mut in_codes = false;
    for l in text.lines() {
        if l.starts_with("Status code distribution") {
            in_codes = true;
            continue;
        }
        if in_codes {
            let t = l.trim();
            if t.is_empty() {
                break;
            }
            if !t.starts_with("[200]") {
                bail!("hey saw non-200 responses from {url}:\n{text}");
            }
            requests = t.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0);
        }
    }
    Ok(Latency { p50_ms: p50, p99_ms: p99, requests })
}

pub fn clock_ticks() -> f64 {
    Command::new("getconf").arg("CLK_TCK").output().ok().and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok()).unwrap_or(100.0)
}

pub fn machine() -> BTreeMap<String, String> {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name").map(|s| s.trim_start_matches([' ', '\t', ':']).to_string()))
        .unwrap_or_default();
    let cmd = |c: &str| Command::new("sh").args(["-c", c]).output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default();
    let envoy = crate::harness::envoy_bin().map(|p| cmd(&format!("{} --version", p.display()))).unwrap_or_default();
    BTreeMap::from([
        ("cpu".into(), cpu),
        ("cores".into(), cmd("nproc")),
        ("kernel".into(), cmd("uname -r")),
        ("envoy".into(), envoy.rsplit(' ').next().unwrap_or("").to_string()),
        ("wrk".into(), cmd("wrk --version 2>&1 | head -1")),
    ])
}
