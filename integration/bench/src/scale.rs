//! The scale part (issue 48, `bench --only scale`): simulated kubelets —
//! each one HTTP/2 connection carrying a kubelet's watches
//! ([`kubelet_watches`]), renewing its lease and patching its node's
//! status, with controllers' lists beside them ([`super::scale_traffic`])
//! — through five doors side by side on the same three fake apiservers:
//!
//! - `direct`: each node's connection to one apiserver (node n to the
//!   n-th, round robin), no door: what the apiservers carry at least;
//! - `tcp-proxy`: Envoy's `tcp_proxy` (kubeadm's HAProxy-in-TCP-mode
//!   anchor): one apiserver connection per client connection;
//! - `plain-l7`: Envoy's router alone, round robin over the members;
//! - `wasm`, `native`: the front door in its two builds.
//!
//! Every Envoy runs one worker, served by the same mvp-ext-proc. Each watch
//! gets a MODIFIED event of a pod's size every `event_interval` (the fake's
//! `?events_every_ms`). Per door and round: the seconds until every watch
//! got its first event (all nodes connecting at once), Envoy's RSS growth
//! and CPU for opening them, per 10,000 watches; Envoy's CPU per 1,000
//! events over `window` of events; the apiserver connections the door
//! opened. Doors run one after another in a rotated order per round (the
//! machine is shared: [`round_order`]); the comparisons with the plain L7
//! door are per round, median and range.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use integration::harness::watches::{Held, hold_watches, kubelet_watches};
use integration::harness::{FilterBuild, FrontDoor, Options, Topology, plain_round_robin, tcp_proxy, three_fakes, wait_for};
use mvp_contract::envoy::APISERVERS_CLUSTER;

use super::load::Spread;
use super::order::round_order;
use super::{cpu_ms, envoy_heap_mib, load, rss_mib};

/// How big a scale run is.
#[derive(Debug, Clone)]
pub struct Plan {
    pub nodes: usize,
    pub watches_per_node: usize,
    pub event_interval: Duration,
    pub window: Duration,
    pub rounds: usize,
    /// Each fake apiserver's runtime threads.
    pub fake_threads: usize,
    /// Only these doors (by name; empty: all five).
    pub doors: Vec<String>,
    /// The smaller run against real kube-apiservers (none: not run).
    pub real: Option<super::scale_real::Plan>,
    /// The L7 doors' instructions per event and per watch opened, counted
    /// under callgrind (none: not run).
    pub counted: Option<super::scale_counted::Plan>,
    /// Reconnect storms door by door (none: not run).
    pub storm: Option<super::scale_storm::Plan>,
}

/// One door's figures: per round, median and range.
#[derive(Debug, Serialize, Default)]
pub struct DoorFigures {
    /// Seconds until every watch got its first event.
    pub open_s: Spread,
    /// Envoy's heap in use (its allocator's, admin `/memory`) once every
    /// watch is open, over before: MiB per 10,000 watches.
    pub envoy_heap_mib_per_10k_watches: Spread,
    /// Envoy's RSS growth, MiB per 10,000 watches: the first round only
    /// (the allocator keeps what the watches freed, so a later round's
    /// watches fit in it).
    pub envoy_rss_mib_per_10k_watches_first_round: f64,
    /// Envoy's CPU while they opened, ms per 10,000 watches.
    pub envoy_cpu_ms_per_10k_watches_opened: Spread,
    /// Envoy's CPU over the window of events, ms per 1,000 events.
    pub envoy_cpu_ms_per_1000_events: Spread,
    /// Events the apiservers sent per second in the window, and the bytes
    /// per second the clients read (every event got through).
    pub events_per_s: Spread,
    pub client_mib_per_s: Spread,
    /// The other requests per second in the window (leases, node status,
    /// controllers' lists: `scale_traffic`), every one answered 200.
    pub requests_per_s: Spread,
    /// Apiserver connections the door's load opened.
    pub apiserver_connections: Spread,
}

#[derive(Debug, Serialize, Default)]
pub struct Scale {
    pub nodes: usize,
    pub watches: usize,
    pub event_interval_ms: u64,
    pub window_s: f64,
    pub rounds: usize,
    pub doors: BTreeMap<String, DoorFigures>,
    /// `<door>/plain-l7 <figure>`: per-round ratios.
    pub ratios: BTreeMap<String, Spread>,
    /// The smaller run against real kube-apiservers.
    pub real: Option<super::scale_real::RealScale>,
    /// The doors' cost counted in instructions.
    pub counted: Option<super::scale_counted::ScaleCounted>,
    /// Reconnect storms door by door.
    pub storms: Option<super::scale_storm::ScaleStorms>,
}

const DOORS: [&str; 5] = ["direct", "tcp-proxy", "plain-l7", "wasm", "native"];

/// A door that is an Envoy: its name, the filter build of its bootstrap,
/// and the edit that makes it this door.
pub(crate) type EnvoyDoor = (&'static str, FilterBuild, fn(String) -> String);

/// The doors the counted part and the storms start an Envoy of their own
/// for, one at a time.
pub(crate) const ENVOY_DOORS: [EnvoyDoor; 4] =
    [("tcp-proxy", FilterBuild::Wasm, tcp_proxy), ("plain-l7", FilterBuild::Wasm, plain_round_robin), ("wasm", FilterBuild::Wasm, same), ("native", FilterBuild::Native, same)];

fn same(yaml: String) -> String {
    yaml
}

/// Where a door's clients connect (the direct clients: each apiserver in
/// turn), and its Envoy: process and topology (none for the direct door).
type Target = (Vec<String>, Option<(u32, Topology)>);

/// A figure of a round, by name.
type Figure = (&'static str, fn(&Round) -> f64);

/// One round's figures of one door.
#[derive(Default, Clone)]
struct Round {
    open_s: f64,
    heap_mib_per_10k: f64,
    rss_mib_per_10k: f64,
    cpu_ms_per_10k_opened: f64,
    cpu_ms_per_1000_events: f64,
    events_per_s: f64,
    requests_per_s: f64,
    client_mib_per_s: f64,
    connections: f64,
}

pub async fn run(plan: &Plan) -> Result<Scale> {
    let options = Options { concurrency: 1, filter: Some(FilterBuild::Native), ..Options::default() };
    let fakes: Vec<_> = three_fakes().into_iter().map(|f| f.with_threads(plan.fake_threads)).collect();
    let mut door = FrontDoor::start(&fakes, options).await.context("the native front door")?;
    let (tcp, tcp_topology) = door.another_envoy_of(FilterBuild::Wasm, tcp_proxy).await.context("the TCP proxy")?;
    let (plain, plain_topology) = door.another_envoy_of(FilterBuild::Wasm, plain_round_robin).await.context("the plain L7 Envoy")?;
    let (wasm, wasm_topology) = door.another_envoy_of(FilterBuild::Wasm, |yaml| yaml).await.context("the wasm front door")?;
    let envoy = |t: &Topology, pid: u32| (vec![format!("http://127.0.0.1:{}", t.ports.listen)], Some((pid, t.clone())));
    let targets: [Target; 5] = [
        (door.fakes.iter().map(|f| f.url().trim_end_matches('/').to_string()).collect(), None),
        envoy(&tcp_topology, tcp.pid()),
        envoy(&plain_topology, plain.pid()),
        envoy(&wasm_topology, wasm.pid()),
        envoy(&door.topology, door.envoy.pid()),
    ];
    let real = match &plan.real {
        Some(p) => Some(super::scale_real::run(p).await.context("against real kube-apiservers")?),
        None => None,
    };
    let mut rounds: Vec<Vec<Round>> = vec![Vec::new(); DOORS.len()];
    for round in 0..plan.rounds {
        for i in round_order(DOORS.len(), round) {
            let (Some(name), Some((bases, pid))) = (DOORS.get(i), targets.get(i)) else { continue };
            if !plan.doors.is_empty() && !plan.doors.iter().any(|d| d == name) {
                continue;
            }
            eprintln!("scale round {}/{}: {name} (load average {})", round + 1, plan.rounds, load::load_average());
            let r = one_door(&door, plan, bases, pid.as_ref()).await.with_context(|| format!("door {name}"))?;
            if let Some(rs) = rounds.get_mut(i) {
                rs.push(r);
            }
        }
    }
    // Counted after the timed rounds, one door under callgrind at a time.
    let counted = match &plan.counted {
        Some(p) => Some(super::scale_counted::run(&door, p, door.dir.path()).await.context("counting instructions")?),
        None => None,
    };
    // The storms last: they stop and restart an apiserver.
    let storms = match &plan.storm {
        Some(p) => Some(super::scale_storm::run(&mut door, p).await.context("the storms")?),
        None => None,
    };
    let mut out = Scale {
        counted,
        storms,
        nodes: plan.nodes,
        watches: plan.nodes * plan.watches_per_node,
        event_interval_ms: plan.event_interval.as_millis() as u64,
        window_s: plan.window.as_secs_f64(),
        rounds: plan.rounds,
        real,
        ..Scale::default()
    };
    let spread = |rs: &[Round], f: fn(&Round) -> f64| Spread::of(&rs.iter().map(f).collect::<Vec<_>>());
    for (name, rs) in DOORS.iter().zip(&rounds).filter(|(_, rs)| !rs.is_empty()) {
        let mut figures = DoorFigures {
            open_s: spread(rs, |r| r.open_s),
            events_per_s: spread(rs, |r| r.events_per_s),
            client_mib_per_s: spread(rs, |r| r.client_mib_per_s),
            requests_per_s: spread(rs, |r| r.requests_per_s),
            apiserver_connections: spread(rs, |r| r.connections),
            ..DoorFigures::default()
        };
        if *name != "direct" {
            figures.envoy_heap_mib_per_10k_watches = spread(rs, |r| r.heap_mib_per_10k);
            figures.envoy_rss_mib_per_10k_watches_first_round = rs.first().map_or(0.0, |r| r.rss_mib_per_10k);
            figures.envoy_cpu_ms_per_10k_watches_opened = spread(rs, |r| r.cpu_ms_per_10k_opened);
            figures.envoy_cpu_ms_per_1000_events = spread(rs, |r| r.cpu_ms_per_1000_events);
        }
        out.doors.insert((*name).to_string(), figures);
    }
    let plain_rounds = rounds.get(2).cloned().unwrap_or_default();
    for (name, rs) in DOORS.iter().zip(&rounds).filter(|(n, rs)| ["tcp-proxy", "wasm", "native"].contains(*n) && !rs.is_empty() && !plain_rounds.is_empty()) {
        let figures: [Figure; 3] = [
            ("heap per watch", |r| r.heap_mib_per_10k),
            ("CPU per watch opened", |r| r.cpu_ms_per_10k_opened),
            ("CPU per event", |r| r.cpu_ms_per_1000_events),
        ];
        for (figure, f) in figures {
            // A round whose plain figure is 0 (below the clock tick) has no ratio.
            let per_round: Vec<f64> = rs.iter().zip(&plain_rounds).filter(|(_, b)| f(b) > 0.0).map(|(a, b)| f(a) / f(b)).collect();
            out.ratios.insert(format!("{name}/plain-l7 {figure}"), Spread::of(&per_round));
        }
    }
    Ok(out)
}

/// The nodes through one door: opened all at once, a window of events,
/// then every watch ended and the door's apiserver connections gone again.
async fn one_door(door: &FrontDoor, plan: &Plan, bases: &[String], envoy: Option<&(u32, Topology)>) -> Result<Round> {
    let pid = envoy.map(|(pid, _)| *pid);
    let fake_connections = || async {
        let mut n = 0;
        for f in &door.fakes {
            n += f.stats(&door.http).await.and_then(|v| v["connectionsOpen"].as_u64()).unwrap_or(0);
        }
        n
    };
    // A door's: its Envoy's to the apiservers (a door keeps its pool from
    // round to round); the clients' own without one.
    let connections = || async {
        match envoy {
            Some((_, t)) => t.envoy_stat(&door.http, &format!("cluster.{APISERVERS_CLUSTER}.upstream_cx_active")).await.unwrap_or(0),
            None => fake_connections().await,
        }
    };
    let events = || events_sent(door);
    let watches = plan.nodes * plan.watches_per_node;
    let query = format!("hold=3600&events_every_ms={}", plan.event_interval.as_millis());
    let heap = || envoy_heap_mib(&door.http, envoy.map(|(_, t)| t.ports.admin));
    let (rss_before, heap_before, connections_before) = (pid.map(rss_mib).unwrap_or(0.0), heap().await, fake_connections().await);
    let cpu = || pid.map(cpu_ms).unwrap_or(0.0);
    let (cpu_before, started) = (cpu(), Instant::now());
    let opened = open_nodes(bases, plan.nodes, plan.watches_per_node, &query).await?;
    let open_s = started.elapsed().as_secs_f64();
    let cpu_opened = cpu() - cpu_before;
    let (rss, heap) = (pid.map(rss_mib).unwrap_or(0.0) - rss_before, heap().await - heap_before);
    // The watches' connections, counted before the other traffic starts:
    // through a TCP proxy or directly, each controller's list opens a
    // connection of its own while it runs, and whether one is running
    // when counted is a race (a smoke saw nodes + 1).
    let connections_held = match envoy {
        Some(_) => connections().await,
        None => fake_connections().await.saturating_sub(connections_before),
    };
    // The cluster's other traffic beside the watches: leases, node
    // status, controllers' lists.
    let traffic = super::scale_traffic::Traffic::start(&opened);
    // The window of events: what Envoy's CPU does for them.
    let (events_before, received_before, cpu_before, window_started) = (events().await, received(&opened), cpu(), Instant::now());
    tokio::time::sleep(plan.window).await;
    let (events_sent, bytes, cpu_window, window) =
        (events().await - events_before, received(&opened) - received_before, cpu() - cpu_before, window_started.elapsed().as_secs_f64());
    let (requests, failed) = traffic.stop().await;
    if failed > 0 {
        bail!("{failed} of {requests} lease renewals, status patches and controllers' lists not answered 200");
    }
    for (_, held, _) in opened {
        for h in held {
            h.end().await;
        }
    }
    // The next door starts with the clients' connections gone (an L7
    // door keeps its pool to the apiservers: idle, it costs them nothing
    // measured here).
    wait_for("the clients' apiserver connections to close", Duration::from_secs(30), || async {
        (envoy.is_some() || fake_connections().await <= connections_before).then_some(())
    })
    .await?;
    let per_10k = 10_000.0 / watches.max(1) as f64;
    Ok(Round {
        open_s,
        heap_mib_per_10k: heap * per_10k,
        rss_mib_per_10k: rss * per_10k,
        cpu_ms_per_10k_opened: cpu_opened * per_10k,
        cpu_ms_per_1000_events: cpu_window * 1000.0 / events_sent.max(1) as f64,
        events_per_s: events_sent as f64 / window,
        requests_per_s: requests as f64 / window,
        client_mib_per_s: bytes as f64 / window / (1024.0 * 1024.0),
        connections: connections_held as f64,
    })
}

/// A node: its one connection, its watches, the door it came through.
pub(crate) type Node = (reqwest::Client, Vec<Held>, String);

/// `nodes` simulated kubelets through the door at `bases` (node n to the
/// n-th, round robin): every node at once, as after a restart; a node's
/// watches one after another on its one HTTP/2 connection, as a kubelet's
/// informers start. Returned once every watch got its first event; an
/// error if any was not held.
pub(crate) async fn open_nodes(bases: &[String], nodes: usize, watches_per_node: usize, query: &str) -> Result<Vec<Node>> {
    let each = (0..nodes).map(|n| {
        let base = bases.get(n % bases.len().max(1)).cloned().unwrap_or_default();
        async move {
            let client = reqwest::Client::builder().no_proxy().http2_prior_knowledge().build()?;
            let mut held = Vec::new();
            for path in kubelet_watches(n, watches_per_node, query) {
                held.push(hold_watches(&client, &format!("{base}{path}"), 1).await);
            }
            anyhow::Ok((client, held, base))
        }
    });
    let opened: Vec<Node> = futures::future::try_join_all(each).await?;
    let failed: usize = opened.iter().flat_map(|(_, held, _)| held).map(|h| h.failed().len()).sum();
    if failed > 0 {
        bail!("{failed} of {} watches not held", nodes * watches_per_node);
    }
    Ok(opened)
}

/// What the fake apiservers sent on watches so far (`watchEvents`).
pub(crate) async fn events_sent(door: &FrontDoor) -> u64 {
    let mut n = 0;
    for f in &door.fakes {
        n += f.stats(&door.http).await.and_then(|v| v["watchEvents"].as_u64()).unwrap_or(0);
    }
    n
}

/// The bytes the nodes' watches read so far.
pub(crate) fn received(opened: &[Node]) -> u64 {
    opened.iter().flat_map(|(_, held, _)| held).map(|h| h.received.load(std::sync::atomic::Ordering::Relaxed)).sum()
}

/// The scale part's tables (median, min–max over rounds).
pub fn render(s: &Scale) -> String {
    let m = |x: &Spread, digits: usize| format!("{:.*} ({:.*}–{:.*})", digits, x.median, digits, x.min, digits, x.max);
    let mut out = format!(
        "\n{} watches of {} nodes (one HTTP/2 connection each), an event every {} ms per watch, {} s windows, {} rounds; every Envoy one worker\n\n",
        s.watches, s.nodes, s.event_interval_ms, s.window_s, s.rounds
    );
    out.push_str("| door | open s | Envoy heap MiB / 10k watches | Envoy RSS MiB / 10k watches (first round) | Envoy CPU ms / 10k watches opened | Envoy CPU ms / 1,000 events | events / s | other requests / s | apiserver connections |\n|---|---|---|---|---|---|---|---|---|\n");
    for name in DOORS {
        let Some(d) = s.doors.get(name) else { continue };
        let envoy = |x: &Spread, digits: usize| if name == "direct" { "–".to_string() } else { m(x, digits) };
        out.push_str(&format!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            m(&d.open_s, 2),
            envoy(&d.envoy_heap_mib_per_10k_watches, 0),
            if name == "direct" { "–".to_string() } else { format!("{:.0}", d.envoy_rss_mib_per_10k_watches_first_round) },
            envoy(&d.envoy_cpu_ms_per_10k_watches_opened, 0),
            envoy(&d.envoy_cpu_ms_per_1000_events, 1),
            m(&d.events_per_s, 0),
            m(&d.requests_per_s, 1),
            m(&d.apiserver_connections, 0),
        ));
    }
    out.push_str("\n| ratio to the plain L7 door (per round) | median | min–max |\n|---|---|---|\n");
    for (k, v) in &s.ratios {
        out.push_str(&format!("| {k} | {:.3} | {:.3}–{:.3} |\n", v.median, v.min, v.max));
    }
    if let Some(storms) = &s.storms {
        out.push_str(&super::scale_storm::render(storms));
    }
    if let Some(counted) = &s.counted {
        out.push_str(&super::scale_counted::render(counted));
    }
    if let Some(real) = &s.real {
        out.push_str(&super::scale_real::render(real));
    }
    out
}
