//! Kube's own Mixed Version Proxy beside the front door (issue 48 item 5,
//! `bench --only kube-mvp`): two real kube-apiservers of the current
//! release, both with kube's MVP on (peer flags, identity leases), one of
//! them alone serving `coordination.k8s.io/v1beta1` (LeaseCandidate); the
//! same requests through
//!
//! - `direct`: to the server that serves it (the floor: one TLS hop);
//! - `kube-mvp`: a plain round-robin Envoy — half the requests land on the
//!   server that lacks the API, which proxies them to its peer (a second
//!   TLS hop, and CPU on both servers);
//! - `mvp-envoy`: the front door (native), which sends each to the server
//!   that serves it.
//!
//! For a peer-only LIST and, as the control, a LIST every server serves:
//! latency (sequential requests on one HTTP/2 connection, client side) and
//! CPU per request of every process (Envoy, both apiservers, etcd), doors
//! interleaved in rotated rounds. Everyone authenticates with a bearer token
//! (a plain round-robin door cannot carry a certificate identity).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use integration::harness::real::{RealControlPlane, Release, Spec, TOKENS};
use integration::harness::{FilterBuild, Options, plain_round_robin};

use super::load::{Latency, Spread};
use super::order::round_order;
use super::{cpu_ms, load};

#[derive(Debug, Clone)]
pub struct Plan {
    pub requests: usize,
    pub rounds: usize,
}

/// One door and path: latency over every round's requests, CPU per request
/// by process (median over rounds), answers by status.
#[derive(Debug, Serialize, Default)]
pub struct DoorPath {
    pub latency: Latency,
    pub cpu_ms_per_request: BTreeMap<String, f64>,
    pub cpu_ms_per_request_total: Spread,
    pub statuses: BTreeMap<u16, usize>,
}

#[derive(Debug, Serialize, Default)]
pub struct KubeMvp {
    pub release: String,
    pub requests_per_round: usize,
    pub rounds: usize,
    /// `<door> <path kind>`: `peer-only` or `served by both`.
    pub doors: BTreeMap<String, DoorPath>,
    /// `mvp-envoy/kube-mvp <figure>` for the peer-only LIST.
    pub ratios: BTreeMap<String, f64>,
}

/// What only `kas-b` serves, and what both do.
const PATHS: [(&str, &str); 2] = [
    ("peer-only", "/apis/coordination.k8s.io/v1beta1/namespaces/default/leasecandidates"),
    ("served by both", "/api/v1/namespaces/default/configmaps"),
];
const DOORS: [&str; 3] = ["direct", "kube-mvp", "mvp-envoy"];

pub async fn run(plan: &Plan) -> Result<KubeMvp> {
    let release = Release::minor(37);
    let specs = [
        Spec::new("kas-a", release, &[]).with_kube_mvp(),
        Spec::new("kas-b", release, &["--runtime-config=coordination.k8s.io/v1beta1=true"]).with_kube_mvp(),
    ];
    let cp = RealControlPlane::start_specs(&specs).await.context("two real kube-apiservers with kube's MVP")?;
    let door = cp.front_door_with(Options { concurrency: 1, filter: Some(FilterBuild::Native), ..Options::default() }).await.context("the front door")?;
    let (plain, plain_topology) = door.another_envoy_of(FilterBuild::Wasm, plain_round_robin).await.context("the plain round-robin Envoy")?;
    let client = door.https(None, true)?;
    let kas_b = cp.apiservers.get(1).context("kas-b")?;
    let bases = [kas_b.url(), format!("https://127.0.0.1:{}", plain_topology.ports.listen), door.url("")];
    let envoys = [None, Some(plain.pid()), Some(door.envoy.pid())];
    // Every process whose CPU a request can cost.
    let mut processes: Vec<(String, u32)> = vec![("etcd".into(), cp.etcd.pid())];
    for a in &cp.apiservers {
        processes.push((a.name.clone(), a.proc.as_ref().context("an apiserver's process")?.pid()));
    }
    // kube's MVP learns its peer's APIs from its identity lease and
    // discovery: wait until the round-robin door answers every request.
    let through_kube = format!("{}{}", bases[1], PATHS[0].1);
    integration::harness::wait_for("kube's MVP to proxy the peer-only API", Duration::from_secs(120), || async {
        for _ in 0..8 {
            let ok = client.get(&through_kube).bearer_auth(TOKENS[0].0).send().await.is_ok_and(|r| r.status() == 200);
            if !ok {
                return None;
            }
        }
        Some(())
    })
    .await?;
    let cells = DOORS.len() * PATHS.len();
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); cells];
    let mut cpu: Vec<Vec<BTreeMap<String, f64>>> = vec![Vec::new(); cells];
    let mut statuses: Vec<BTreeMap<u16, usize>> = vec![BTreeMap::new(); cells];
    for round in 0..plan.rounds {
        eprintln!("kube-mvp round {}/{} (load average {})", round + 1, plan.rounds, load::load_average());
        for cell in round_order(cells, round) {
            let (d, p) = (cell / PATHS.len(), cell % PATHS.len());
            let (Some(base), Some(envoy), Some((_, path))) = (bases.get(d), envoys.get(d), PATHS.get(p)) else { continue };
            let mut pids = processes.clone();
            if let Some(pid) = envoy {
                pids.push(("envoy".into(), *pid));
            }
            let before: Vec<f64> = pids.iter().map(|(_, pid)| cpu_ms(*pid)).collect();
            let url = format!("{base}{path}");
            for _ in 0..plan.requests {
                let started = Instant::now();
                let status = client.get(&url).bearer_auth(TOKENS[0].0).send().await.map(|r| r.status().as_u16()).unwrap_or(0);
                if let Some(s) = samples.get_mut(cell) {
                    s.push(started.elapsed().as_secs_f64() * 1000.0);
                }
                if let Some(s) = statuses.get_mut(cell) {
                    *s.entry(status).or_default() += 1;
                }
            }
            let per_request: BTreeMap<String, f64> =
                pids.iter().zip(&before).map(|((name, pid), b)| (name.clone(), (cpu_ms(*pid) - b) / plan.requests.max(1) as f64)).collect();
            if let Some(c) = cpu.get_mut(cell) {
                c.push(per_request);
            }
        }
    }
    let mut out = KubeMvp { release: match release {
        Release::Modules(_, v) => format!("v{v}"),
        Release::V1_20 => "v1.20".into(),
    }, requests_per_round: plan.requests, rounds: plan.rounds, ..KubeMvp::default() };
    for cell in 0..cells {
        let (d, p) = (cell / PATHS.len(), cell % PATHS.len());
        let (Some(door_name), Some((kind, _))) = (DOORS.get(d), PATHS.get(p)) else { continue };
        let rounds = cpu.get(cell).cloned().unwrap_or_default();
        let names: Vec<String> = rounds.first().map(|r| r.keys().cloned().collect()).unwrap_or_default();
        let cpu_ms_per_request = names.iter().map(|n| (n.clone(), Spread::of(&rounds.iter().filter_map(|r| r.get(n).copied()).collect::<Vec<_>>()).median)).collect();
        let totals: Vec<f64> = rounds.iter().map(|r| r.values().sum()).collect();
        let cell_statuses = statuses.get(cell).cloned().unwrap_or_default();
        if cell_statuses.keys().any(|s| *s != 200) {
            bail!("{door_name} {kind}: answers {cell_statuses:?}");
        }
        out.doors.insert(
            format!("{door_name} {kind}"),
            DoorPath { latency: Latency::of(samples.get(cell).map(Vec::as_slice).unwrap_or(&[])), cpu_ms_per_request, cpu_ms_per_request_total: Spread::of(&totals), statuses: cell_statuses },
        );
    }
    if let (Some(ours), Some(kube)) = (out.doors.get("mvp-envoy peer-only"), out.doors.get("kube-mvp peer-only")) {
        let ratio = |a: f64, b: f64| a / b.max(1e-9);
        let ratios = [
            ("p50", ratio(ours.latency.p50_ms, kube.latency.p50_ms)),
            ("p99", ratio(ours.latency.p99_ms, kube.latency.p99_ms)),
            ("CPU per request, every process", ratio(ours.cpu_ms_per_request_total.median, kube.cpu_ms_per_request_total.median)),
        ];
        for (k, v) in ratios {
            out.ratios.insert(format!("mvp-envoy/kube-mvp peer-only {k}"), v);
        }
    }
    drop(plain);
    Ok(out)
}

/// The part's table.
pub fn render(k: &KubeMvp) -> String {
    let mut out = format!(
        "\nkube's MVP beside the front door: two real {} kube-apiservers (kube's MVP on), {} sequential requests per door and path per round, {} rounds\n\n",
        k.release, k.requests_per_round, k.rounds
    );
    out.push_str("| door, path | p50 ms | p99 ms | CPU ms / request, every process (median, min–max) | by process |\n|---|---|---|---|---|\n");
    for (name, d) in &k.doors {
        let by: Vec<String> = d.cpu_ms_per_request.iter().map(|(p, v)| format!("{p} {v:.3}")).collect();
        let t = &d.cpu_ms_per_request_total;
        out.push_str(&format!("| {name} | {:.3} | {:.3} | {:.3} ({:.3}–{:.3}) | {} |\n", d.latency.p50_ms, d.latency.p99_ms, t.median, t.min, t.max, by.join(", ")));
    }
    for (k, v) in &k.ratios {
        out.push_str(&format!("\n{k}: {v:.3}"));
    }
    out.push('\n');
    out
}
