//! Under a real cluster's load (issue 63 item 2, `bench --only cluster`):
//! two real kube-apiservers of the current release on one etcd, one of
//! them alone serving `coordination.k8s.io/v1beta1` (the skewed share),
//! and many clients — HTTP/2 connections carrying two requests at a time
//! as client-go does, HTTP/1.1 connections one at a time as kubectl's
//! and scripts' clients do — sending the kube-like mix of
//! [`super::cluster_mix`], with watches of the written objects held open
//! beside them. The same clients four ways in, interleaved in rotated
//! rounds:
//!
//! - `direct`: each connection to one apiserver (in turn), the floor;
//! - `plain-l7`: a plain Envoy, round robin per request;
//! - `native`, `wasm`: mvp-envoy, each build.
//!
//! Two modes. Saturation: every loop closed (the next request when the
//! last answer ended) for a window — requests/s, and the CPU of every
//! process a request can cost (etcd, both apiservers, the door's Envoy and
//! mvp-ext-proc) per 1,000 requests; the goal's comparison (mvp-envoy over
//! the plain Envoy) once more in paired slices. Fixed rate: GETs on the HTTP/2
//! connections at a fixed rate, open loop — p50/p99/p99.9, and what each
//! door adds over direct, per round.
//!
//! Every door, the machine's two cores shared by everything — the
//! apiservers, etcd, Envoy and the clients — as a real control plane's
//! node is. Everyone authenticates with a bearer token: a plain L7 door
//! cannot carry a client certificate's identity, and the comparison is of
//! doors, not of authenticators ([`super::latency`] measures the door's
//! certificate path).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use integration::harness::real::{RealControlPlane, Release, Spec, TOKENS};
use integration::harness::{FilterBuild, Options, plain_round_robin, tls_client_config};

use super::cluster_figures::{Rated, Window, assemble};
use super::cluster_mix::{self, Tally};
use super::load::{Latency, Spread};
use super::order::round_order;
use super::{cpu_ms, load};

#[derive(Debug, Clone)]
pub struct Plan {
    pub h2_connections: usize,
    /// Requests each HTTP/2 connection carries at a time.
    pub h2_streams: usize,
    pub h1_connections: usize,
    /// Watches held open through the door, on HTTP/2 connections.
    pub watches: usize,
    pub window: Duration,
    /// Fixed-rate mode: GETs per second over the HTTP/2 connections, each
    /// rate in turn.
    pub rates: Vec<u32>,
    pub rate_window: Duration,
    pub rounds: usize,
    /// Paired slices: mvp-envoy's builds against the plain Envoy in ABBA
    /// order, `pairs` pairs of `slice`-long saturated windows each.
    pub pairs: usize,
    pub slice: Duration,
}

/// One door's saturation figures over every round.
#[derive(Debug, Serialize, Default)]
pub struct Saturated {
    pub requests_per_s: Spread,
    /// CPU seconds of every server-side process per 1,000 requests.
    pub cpu_s_per_1000: Spread,
    /// The same by process (median over rounds).
    pub cpu_s_per_1000_by_process: BTreeMap<String, f64>,
    /// The load's own CPU (this process), per 1,000 requests.
    pub client_cpu_s_per_1000: f64,
    /// Latency by request kind, every round's requests together.
    pub latency_by_kind: BTreeMap<String, Latency>,
    pub statuses: BTreeMap<u16, u64>,
    /// The skewed API's 404s: a server that lacks it answered (wrong).
    pub skewed_404: u64,
    pub watch_events_per_s: Spread,
    /// Watch streams that ended cleanly before their window and were
    /// watched again from their last resourceVersion
    /// ([`cluster_mix::Watched`]), over every round.
    pub rewatches: u64,
    /// The watchers the apiservers ended for falling behind over the same
    /// windows (`apiserver_terminated_watchers_total`): a door's rewatches
    /// beyond these are the door's.
    pub watchers_terminated_by_apiservers: u64,
    /// Watches that stopped for good, by why.
    pub watches_failed: BTreeMap<String, usize>,
}

#[derive(Debug, Serialize, Default)]
pub struct FixedRate {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub requests: u64,
    pub statuses: BTreeMap<u16, u64>,
}

#[derive(Debug, Serialize, Default)]
pub struct ClusterLoad {
    pub release: String,
    pub connections: BTreeMap<String, usize>,
    pub window_s: f64,
    pub rates: Vec<u32>,
    pub rate_window_s: f64,
    pub rounds: usize,
    pub saturated: BTreeMap<String, Saturated>,
    /// `<rate>/s <door>`.
    pub fixed_rate: BTreeMap<String, FixedRate>,
    /// `<rate>/s <door> <figure>`: door − direct per round (ms).
    pub added_ms: BTreeMap<String, Spread>,
    /// `<door>/plain-l7 <figure>`, per round.
    pub ratios: BTreeMap<String, Spread>,
    /// The same per pair of paired slices: each side saturated for a slice
    /// right after the other, so a burst from elsewhere on the host lands
    /// on both or neither (the rounds' sides are a minute apart).
    pub paired: BTreeMap<String, Spread>,
    /// Answers a door should not have given, watches that ended early
    /// ([`super::cluster_report::problems`]): none in a good run.
    pub problems: Vec<String>,
}

pub const DOORS: [&str; 4] = ["direct", "plain-l7", "native", "wasm"];

/// A way in: where each connection goes and which processes it costs.
/// The apiservers' own counts, read with the admin's client.
struct Apiservers {
    http: reqwest::Client,
    urls: Vec<String>,
}

impl Apiservers {
    /// Watchers the apiservers have ended for falling behind, all told.
    async fn terminated_watchers(&self) -> Result<u64> {
        let mut total = 0.0;
        for url in &self.urls {
            let text = self.http.get(format!("{url}/metrics")).send().await?.error_for_status()?.text().await?;
            total += text
                .lines()
                .filter(|l| l.starts_with("apiserver_terminated_watchers_total"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>();
        }
        Ok(total as u64)
    }
}

pub(super) struct Door {
    pub(super) name: &'static str,
    pub(super) bases: Vec<String>,
    /// Whether each base serves the skewed API (direct: only kas-b; every
    /// door: the door's answer).
    pub(super) serves_skewed: Vec<bool>,
    pub(super) pids: Vec<(String, u32)>,
}

pub async fn run(plan: &Plan) -> Result<ClusterLoad> {
    let release = Release::minor(37);
    let specs = [Spec::new("kas-a", release, &[]), Spec::new("kas-b", release, &["--runtime-config=coordination.k8s.io/v1beta1=true"])];
    let cp = RealControlPlane::start_specs(&specs).await.context("two real kube-apiservers")?;
    let door = cp.front_door_with(Options { filter: Some(FilterBuild::Native), ..Options::default() }).await.context("the front door")?;
    let (wasm, wasm_topology) = door.another_envoy_of(FilterBuild::Wasm, |y| y).await.context("the wasm door")?;
    let (plain, plain_topology) = door.another_envoy_of(FilterBuild::Wasm, plain_round_robin).await.context("the plain round-robin Envoy")?;
    cluster_mix::seed(&cp.http, &cp.apiservers[0].url()).await?;
    let servers: Vec<(String, u32)> = std::iter::once(Ok(("etcd".to_string(), cp.etcd.pid())))
        .chain(cp.apiservers.iter().map(|a| Ok((a.name.clone(), a.proc.as_ref().context("an apiserver's process")?.pid()))))
        .collect::<Result<_>>()?;
    let with = |extra: &[(&str, u32)]| servers.iter().cloned().chain(extra.iter().map(|(n, p)| (n.to_string(), *p))).collect::<Vec<_>>();
    let url = |port: u16| format!("https://127.0.0.1:{port}");
    let apiservers = Apiservers { http: cp.http.clone(), urls: cp.apiservers.iter().map(|a| a.url()).collect() };
    let doors = [
        Door { name: DOORS[0], bases: cp.apiservers.iter().map(|a| a.url()).collect(), serves_skewed: vec![false, true], pids: servers.clone() },
        Door { name: DOORS[1], bases: vec![url(plain_topology.ports.listen)], serves_skewed: vec![true], pids: with(&[("envoy", plain.pid())]) },
        Door { name: DOORS[2], bases: vec![door.url("")], serves_skewed: vec![true], pids: with(&[("envoy", door.envoy.pid()), ("mvp-ext-proc", door.ext_proc.pid())]) },
        Door { name: DOORS[3], bases: vec![url(wasm_topology.ports.listen)], serves_skewed: vec![true], pids: with(&[("envoy", wasm.pid()), ("mvp-ext-proc", door.ext_proc.pid())]) },
    ];
    let ca = cp.pki.serving.cert_file.clone();
    let client = |h2: bool| -> Result<reqwest::Client> {
        let config = tls_client_config(&ca, None, if h2 { &[b"h2"] } else { &[b"http/1.1"] })?;
        let b = reqwest::Client::builder().use_preconfigured_tls(config).no_proxy().pool_max_idle_per_host(1);
        Ok(if h2 { b.http2_prior_knowledge() } else { b.http1_only() }.build()?)
    };
    // Per door, its connections: opened and warmed before anything counts.
    let mut connections: Vec<Vec<(reqwest::Client, String, bool, bool)>> = Vec::new();
    for d in &doors {
        let mut conns = Vec::new();
        for i in 0..plan.h2_connections + plan.h1_connections {
            let h2 = i < plan.h2_connections;
            let (Some(base), Some(skewed)) = (d.bases.get(i % d.bases.len()), d.serves_skewed.get(i % d.bases.len())) else { continue };
            let c = client(h2)?;
            let r = c.get(format!("{base}/api/v1/namespaces/{}", cluster_mix::READS)).bearer_auth(TOKENS[0].0).send().await.with_context(|| format!("{} warm-up", d.name))?;
            if r.status() != 200 {
                bail!("{} warm-up: {}", d.name, r.status());
            }
            conns.push((c, base.clone(), *skewed, h2));
        }
        connections.push(conns);
    }
    // mvp-envoy must route the skewed API before its share is counted.
    for d in doors.iter().skip(2) {
        let base = d.bases.first().context("a door's address")?;
        let c = client(true)?;
        integration::harness::wait_for("the door to route the skewed API", Duration::from_secs(60), || async {
            c.get(format!("{base}{}", cluster_mix::SKEWED)).bearer_auth(TOKENS[0].0).send().await.ok().filter(|r| r.status() == 200).map(drop)
        })
        .await?;
    }
    let me = std::process::id();
    let mut rounds: Vec<Vec<Window>> = (0..doors.len()).map(|_| Vec::new()).collect();
    // By rate, door, round: latencies and statuses.
    let mut rated: Vec<Vec<Rated>> = plan.rates.iter().map(|_| (0..doors.len()).map(|_| Vec::new()).collect()).collect();
    for round in 0..plan.rounds {
        eprintln!("cluster round {}/{} (load average {})", round + 1, plan.rounds, load::load_average());
        for d in round_order(doors.len(), round) {
            let (Some(door), Some(conns)) = (doors.get(d), connections.get(d)) else { continue };
            let w = saturate(plan, &apiservers, door, conns, round, me).await.with_context(|| format!("{} saturated", door.name))?;
            if let Some(r) = rounds.get_mut(d) {
                r.push(w);
            }
        }
        for (r, rate) in plan.rates.iter().enumerate() {
            for d in round_order(doors.len(), round + 1 + r) {
                let Some(conns) = connections.get(d) else { continue };
                let h2: Vec<&(reqwest::Client, String, bool, bool)> = conns.iter().filter(|c| c.3).collect();
                let clients: Vec<reqwest::Client> = h2.iter().map(|c| c.0.clone()).collect();
                let bases: Vec<String> = h2.iter().map(|c| c.1.clone()).collect();
                let got = cluster_mix::fixed_rate(&clients, &bases, *rate, plan.rate_window).await;
                if let Some(cell) = rated.get_mut(r).and_then(|by_door| by_door.get_mut(d)) {
                    cell.push(got);
                }
            }
        }
    }
    // Paired slices, the comparisons interleaved with each other.
    let slice = Plan { window: plan.slice, ..plan.clone() };
    let mut pairs: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for p in 0..plan.pairs {
        for d in [2, 3] {
            let (Some(a), Some(b), Some(ca), Some(cb)) = (doors.get(d), doors.get(1), connections.get(d), connections.get(1)) else { continue };
            let tag = plan.rounds + p;
            let (wa, wb) = if p % 2 == 0 {
                let wa = saturate(&slice, &apiservers, a, ca, tag, me).await?;
                (wa, saturate(&slice, &apiservers, b, cb, tag, me).await?)
            } else {
                let wb = saturate(&slice, &apiservers, b, cb, tag, me).await?;
                (saturate(&slice, &apiservers, a, ca, tag, me).await?, wb)
            };
            pairs.entry(format!("{}/plain-l7 requests/s", a.name)).or_default().push(wa.rps() / wb.rps().max(1e-9));
            pairs.entry(format!("{}/plain-l7 CPU per request", a.name)).or_default().push(wa.cpu_per_request() / wb.cpu_per_request().max(1e-9));
            pairs.entry(format!("{}/plain-l7 Envoy's CPU per request", a.name)).or_default().push(wa.envoy_cpu_per_request() / wb.envoy_cpu_per_request().max(1e-9));
        }
    }
    drop((plain, wasm));
    let mut out = assemble(plan, release, &doors, &rounds, &rated);
    out.paired = pairs.into_iter().map(|(k, v)| (k, Spread::of(&v))).collect();
    out.problems = super::cluster_report::problems(&out);
    Ok(out)
}

async fn saturate(plan: &Plan, apiservers: &Apiservers, door: &Door, conns: &[(reqwest::Client, String, bool, bool)], round: usize, me: u32) -> Result<Window> {
    let stop = Arc::new(AtomicBool::new(false));
    let events = Arc::new(AtomicU64::new(0));
    let watches: Vec<_> = conns
        .iter()
        .filter(|c| c.3)
        .cycle()
        .take(plan.watches)
        .map(|c| tokio::spawn(cluster_mix::watch(c.0.clone(), c.1.clone(), stop.clone(), events.clone())))
        .collect();
    let terminated_before = apiservers.terminated_watchers().await.context("the apiservers' metrics")?;
    let before: Vec<f64> = door.pids.iter().map(|(_, p)| cpu_ms(*p)).collect();
    let client_before = cpu_ms(me);
    let started = Instant::now();
    let mut loops = Vec::new();
    for (i, (client, base, skewed, h2)) in conns.iter().enumerate() {
        for s in 0..if *h2 { plan.h2_streams } else { 1 } {
            loops.push(tokio::spawn(cluster_mix::closed_loop(client.clone(), base.clone(), format!("{}-{round}", door.name), i * plan.h2_streams.max(1) + s, *skewed, stop.clone())));
        }
    }
    tokio::time::sleep(plan.window).await;
    stop.store(true, Ordering::Relaxed);
    let mut tally = Tally::default();
    for l in loops {
        tally.add(l.await?);
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu: BTreeMap<String, f64> = door.pids.iter().zip(&before).map(|((n, p), b)| (n.clone(), cpu_ms(*p) - b)).collect();
    let client_cpu_ms = cpu_ms(me) - client_before;
    let (mut rewatches, mut failed) = (0, Vec::new());
    for w in watches {
        let w = w.await?;
        rewatches += w.rewatches;
        failed.extend(w.failed);
    }
    let terminated = apiservers.terminated_watchers().await.context("the apiservers' metrics")?.saturating_sub(terminated_before);
    Ok(Window { tally, seconds, cpu_ms: cpu, client_cpu_ms, watch_events: events.load(Ordering::Relaxed), rewatches, terminated, watches_failed: failed })
}
