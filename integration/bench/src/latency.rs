//! What the door adds (issue 55 item 8, `bench --only latency`): a client
//! talking to a real kube-apiserver of the current release directly, and
//! the same client through the front door (native build) in front of it —
//! TLS both ways, a client certificate (kube's x509 authentication
//! directly; through the door, the door's requestheader forwarding, as in
//! production). A GET of one ConfigMap and a LIST of 50, each at a fixed
//! rate (open loop: requests leave on a schedule whatever the answers do,
//! so a slow answer delays none behind it), on one HTTP/2 connection as
//! client-go keeps. Doors and paths interleaved in balanced rounds; per
//! round the added p50 and p99 (door − direct), and their spread over rounds.
//!
//! The published figure for an L7 proxy in front of kube-apiserver
//! (kubewharf/kubegateway, Go: +0.8–1.4 ms mean, p99 +8–13 ms at 5,000 QPS)
//! is the bar; this machine (2 cores for the apiserver, etcd, Envoy and the
//! client together) runs far below 5,000 QPS.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use integration::harness::real::{RealControlPlane, Release, Spec};
use integration::harness::{FilterBuild, Options};

use super::load::{Latency, Spread};
use super::order::round_order;

#[derive(Debug, Clone)]
pub struct Plan {
    /// Requests per second per door and path.
    pub rate: u32,
    /// Each window's length.
    pub window: Duration,
    pub rounds: usize,
}

#[derive(Debug, Serialize, Default)]
pub struct DoorPath {
    pub latency: Latency,
    pub mean_ms: f64,
    pub statuses: BTreeMap<u16, usize>,
}

#[derive(Debug, Serialize, Default)]
pub struct AddedLatency {
    pub release: String,
    pub rate_per_path: u32,
    pub window_s: f64,
    pub rounds: usize,
    /// `<door> <path>`: `direct` or `door`, `GET` or `LIST`.
    pub cells: BTreeMap<String, DoorPath>,
    /// `<path> <figure>`: door − direct per round (ms): p50, p99, mean.
    pub added_ms: BTreeMap<String, Spread>,
}

const PATHS: [(&str, &str); 2] = [("GET", "/api/v1/namespaces/default/configmaps/latency-0"), ("LIST", "/api/v1/namespaces/default/configmaps")];
const DOORS: [&str; 2] = ["direct", "door"];
const CONFIGMAPS: usize = 50;

pub async fn run(plan: &Plan) -> Result<AddedLatency> {
    let release = Release::minor(37);
    let cp = RealControlPlane::start_specs(&[Spec::new("kas-a", release, &[])]).await.context("a real kube-apiserver")?;
    let door = cp.front_door_with(Options { filter: Some(FilterBuild::Native), ..Options::default() }).await.context("the front door")?;
    // The ConfigMaps: one read by name, fifty listed (~300 bytes each).
    for i in 0..CONFIGMAPS {
        let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("latency-{i}")}, "data": {"key": "x".repeat(200)}});
        let resp = cp.http.post(format!("{}/api/v1/namespaces/default/configmaps", cp.apiservers[0].url())).json(&cm).send().await?;
        if !resp.status().is_success() {
            bail!("creating ConfigMap latency-{i}: {}", resp.status());
        }
    }
    let direct = {
        let config = integration::harness::tls_client_config(&cp.pki.serving.cert_file, Some(&cp.admin), &[b"h2"])?;
        reqwest::Client::builder().use_preconfigured_tls(config).no_proxy().http2_prior_knowledge().timeout(Duration::from_secs(10)).build()?
    };
    let through = door.https(Some(&cp.admin), true)?;
    let bases = [cp.apiservers[0].url(), door.url("")];
    let clients = [direct, through];
    // Each connection opened and warmed before anything is counted.
    for (client, base) in clients.iter().zip(&bases) {
        for (_, path) in PATHS {
            for _ in 0..20 {
                client.get(format!("{base}{path}")).send().await?.bytes().await?;
            }
        }
    }
    let cells = DOORS.len() * PATHS.len();
    let mut samples: Vec<Vec<Vec<f64>>> = vec![Vec::new(); cells];
    let mut statuses: Vec<BTreeMap<u16, usize>> = vec![BTreeMap::new(); cells];
    for round in 0..plan.rounds {
        eprintln!("latency round {}/{} (load average {})", round + 1, plan.rounds, super::load::load_average());
        for cell in round_order(cells, round) {
            let (d, p) = (cell / PATHS.len(), cell % PATHS.len());
            let (Some(client), Some(base), Some((_, path))) = (clients.get(d), bases.get(d), PATHS.get(p)) else { continue };
            let url = format!("{base}{path}");
            let (window, answers) = super::load::open_loop(plan.rate, plan.window, |_| Some(client.get(&url))).await;
            if let Some(s) = samples.get_mut(cell) {
                s.push(window);
            }
            if let Some(s) = statuses.get_mut(cell) {
                for (a, n) in answers {
                    *s.entry(a).or_default() += n as usize;
                }
            }
        }
    }
    let release_name = match release {
        Release::Modules(_, v) => format!("v{v}"),
        Release::V1_20 => "v1.20".into(),
    };
    let mut out = AddedLatency { release: release_name, rate_per_path: plan.rate, window_s: plan.window.as_secs_f64(), rounds: plan.rounds, ..AddedLatency::default() };
    let mean = |s: &[f64]| if s.is_empty() { 0.0 } else { s.iter().sum::<f64>() / s.len() as f64 };
    for cell in 0..cells {
        let (d, p) = (cell / PATHS.len(), cell % PATHS.len());
        let (Some(door_name), Some((kind, _))) = (DOORS.get(d), PATHS.get(p)) else { continue };
        let all: Vec<f64> = samples.get(cell).into_iter().flatten().flatten().copied().collect();
        let cell_statuses = statuses.get(cell).cloned().unwrap_or_default();
        if cell_statuses.keys().any(|s| *s != 200) {
            bail!("{door_name} {kind}: answers {cell_statuses:?}");
        }
        out.cells.insert(format!("{door_name} {kind}"), DoorPath { latency: Latency::of(&all), mean_ms: mean(&all), statuses: cell_statuses });
    }
    // Per round: the door's figure minus the direct one's, same path.
    for (p, (kind, _)) in PATHS.iter().enumerate() {
        let (Some(direct), Some(door)) = (samples.get(p), samples.get(PATHS.len() + p)) else { continue };
        let mut added: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for (a, b) in direct.iter().zip(door) {
            let (la, lb) = (Latency::of(a), Latency::of(b));
            added.entry("p50").or_default().push(lb.p50_ms - la.p50_ms);
            added.entry("p99").or_default().push(lb.p99_ms - la.p99_ms);
            added.entry("mean").or_default().push(mean(b) - mean(a));
        }
        for (figure, values) in added {
            out.added_ms.insert(format!("{kind} {figure}"), Spread::of(&values));
        }
    }
    Ok(out)
}

/// The part's table.
pub fn render(l: &AddedLatency) -> String {
    let mut out = format!(
        "\nWhat the door adds: a real {} kube-apiserver directly and through the front door (native), TLS and a client certificate both ways, {} requests/s per path (open loop, one HTTP/2 connection), {} s windows, {} rounds interleaved\n\n",
        l.release, l.rate_per_path, l.window_s, l.rounds
    );
    out.push_str("| door, path | p50 ms | p99 ms | mean ms | requests |\n|---|---|---|---|---|\n");
    for (name, c) in &l.cells {
        out.push_str(&format!("| {name} | {:.3} | {:.3} | {:.3} | {} |\n", c.latency.p50_ms, c.latency.p99_ms, c.mean_ms, c.latency.requests));
    }
    out.push_str("\n| added by the door (per round) | median ms | min–max ms |\n|---|---|---|\n");
    for (k, s) in &l.added_ms {
        out.push_str(&format!("| {k} | {:+.3} | {:+.3} – {:+.3} |\n", s.median, s.min, s.max));
    }
    out
}
