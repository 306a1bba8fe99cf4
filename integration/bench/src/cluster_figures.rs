//! The cluster part's windows turned into its figures
//! ([`super::cluster_load`]): per door the saturation spreads over rounds,
//! CPU per 1,000 requests by process, latency by kind and the watches'
//! fate; per rate the percentiles and what each door adds over direct;
//! the ratios against the plain Envoy per round.

use std::collections::BTreeMap;

use integration::harness::real::Release;

use super::cluster_load::{ClusterLoad, Door, FixedRate, Plan, Saturated};
use super::cluster_mix::Tally;
use super::load::{Latency, Spread};
use super::percentile;

/// One door's fixed-rate windows, by round: latencies and statuses.
pub(super) type Rated = Vec<(Vec<f64>, BTreeMap<u16, u64>)>;

/// One door's saturated window.
pub(super) struct Window {
    pub(super) tally: Tally,
    pub(super) seconds: f64,
    pub(super) cpu_ms: BTreeMap<String, f64>,
    pub(super) client_cpu_ms: f64,
    pub(super) watch_events: u64,
    pub(super) rewatches: u64,
    pub(super) terminated: u64,
    pub(super) watches_failed: Vec<String>,
}

impl Window {
    pub(super) fn rps(&self) -> f64 {
        self.tally.requests() as f64 / self.seconds.max(1e-9)
    }

    pub(super) fn envoy_cpu_per_request(&self) -> f64 {
        self.cpu_ms.get("envoy").copied().unwrap_or(0.0) / self.tally.requests().max(1) as f64
    }

    /// Every server-side process's CPU ms per request.
    pub(super) fn cpu_per_request(&self) -> f64 {
        self.cpu_ms.values().sum::<f64>() / self.tally.requests().max(1) as f64
    }
}

pub(super) fn assemble(plan: &Plan, release: Release, doors: &[Door], rounds: &[Vec<Window>], rated: &[Vec<Rated>]) -> ClusterLoad {
    let mut out = ClusterLoad {
        release: match release {
            Release::Modules(_, v) => format!("v{v}"),
            Release::V1_20 => "v1.20".into(),
        },
        connections: BTreeMap::from([
            ("HTTP/2".into(), plan.h2_connections),
            ("HTTP/2 requests at a time each".into(), plan.h2_streams),
            ("HTTP/1.1".into(), plan.h1_connections),
            ("watches".into(), plan.watches),
        ]),
        window_s: plan.window.as_secs_f64(),
        rates: plan.rates.clone(),
        rate_window_s: plan.rate_window.as_secs_f64(),
        rounds: plan.rounds,
        ..ClusterLoad::default()
    };
    let rps = Window::rps;
    let per_1000 = |ms: f64, w: &Window| ms / 1000.0 / (w.tally.requests().max(1) as f64 / 1000.0);
    for (d, door) in doors.iter().enumerate() {
        let Some(windows) = rounds.get(d) else { continue };
        let mut s = Saturated {
            requests_per_s: Spread::of(&windows.iter().map(rps).collect::<Vec<_>>()),
            cpu_s_per_1000: Spread::of(&windows.iter().map(|w| per_1000(w.cpu_ms.values().sum(), w)).collect::<Vec<_>>()),
            client_cpu_s_per_1000: Spread::of(&windows.iter().map(|w| per_1000(w.client_cpu_ms, w)).collect::<Vec<_>>()).median,
            watch_events_per_s: Spread::of(&windows.iter().map(|w| w.watch_events as f64 / w.seconds.max(1e-9)).collect::<Vec<_>>()),
            rewatches: windows.iter().map(|w| w.rewatches).sum(),
            watchers_terminated_by_apiservers: windows.iter().map(|w| w.terminated).sum(),
            watches_failed: windows.iter().flat_map(|w| &w.watches_failed).fold(BTreeMap::new(), |mut m, why| {
                *m.entry(why.clone()).or_default() += 1;
                m
            }),
            ..Saturated::default()
        };
        for (name, _) in &door.pids {
            let v: Vec<f64> = windows.iter().filter_map(|w| w.cpu_ms.get(name).map(|ms| per_1000(*ms, w))).collect();
            s.cpu_s_per_1000_by_process.insert(name.clone(), Spread::of(&v).median);
        }
        let mut all = Tally::default();
        for w in windows {
            all.add(w.tally.clone());
        }
        for (op, l) in &all.latencies {
            s.latency_by_kind.insert(op.name().into(), Latency::of(l));
        }
        s.statuses = all.statuses;
        s.skewed_404 = all.skewed_404;
        out.saturated.insert(door.name.into(), s);
    }
    for (rate, by_door) in plan.rates.iter().zip(rated) {
        fixed_rate(&mut out, *rate, doors, by_door);
    }
    // Per round: a door's throughput and CPU against plain-l7's.
    if let Some(plain) = rounds.get(1) {
        for (d, door) in doors.iter().enumerate().skip(2) {
            let Some(this) = rounds.get(d) else { continue };
            let t: Vec<f64> = this.iter().zip(plain).map(|(a, b)| rps(a) / rps(b).max(1e-9)).collect();
            let c: Vec<f64> = this.iter().zip(plain).map(|(a, b)| a.cpu_per_request() / b.cpu_per_request().max(1e-9)).collect();
            out.ratios.insert(format!("{}/plain-l7 requests/s", door.name), Spread::of(&t));
            out.ratios.insert(format!("{}/plain-l7 CPU per request", door.name), Spread::of(&c));
            let e: Vec<f64> = this.iter().zip(plain).map(|(a, b)| a.envoy_cpu_per_request() / b.envoy_cpu_per_request().max(1e-9)).collect();
            out.ratios.insert(format!("{}/plain-l7 Envoy's CPU per request", door.name), Spread::of(&e));
        }
    }
    out
}

/// One rate's figures per door, and per round what each door adds over
/// direct's the same round.
fn fixed_rate(out: &mut ClusterLoad, rate: u32, doors: &[Door], by_door: &[Rated]) {
    for (door, windows) in doors.iter().zip(by_door) {
        let samples: Vec<f64> = windows.iter().flat_map(|(l, _)| l.iter().copied()).collect();
        let mut statuses = BTreeMap::new();
        for (k, v) in windows.iter().flat_map(|(_, st)| st) {
            *statuses.entry(*k).or_default() += v;
        }
        let f = FixedRate { p50_ms: percentile(&samples, 50.0), p99_ms: percentile(&samples, 99.0), p999_ms: percentile(&samples, 99.9), requests: samples.len() as u64, statuses };
        out.fixed_rate.insert(format!("{rate}/s {}", door.name), f);
    }
    let figures = |l: &[f64]| [("p50", percentile(l, 50.0)), ("p99", percentile(l, 99.0)), ("p99.9", percentile(l, 99.9))];
    let Some(direct) = by_door.first() else { return };
    for (door, this) in doors.iter().zip(by_door).skip(1) {
        let mut added: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for ((a, _), (b, _)) in direct.iter().zip(this) {
            for ((k, x), (_, y)) in figures(a).into_iter().zip(figures(b)) {
                added.entry(k).or_default().push(y - x);
            }
        }
        for (k, v) in added {
            out.added_ms.insert(format!("{rate}/s {} {k}", door.name), Spread::of(&v));
        }
    }
}
