//! What one run measures and for how long: the full run BENCHMARKS.md holds,
//! and the smoke run the tests make.

use std::time::Duration;

use super::{cluster_load, instructions, kube_mvp, latency, scale, scale_counted, scale_real, scale_storm};

#[derive(Debug, Clone)]
pub struct Settings {
    pub smoke: bool,
    /// Rounds: every variant is measured once per round, in a balanced order,
    /// so a burst of load from elsewhere on the machine hits one round of
    /// every variant rather than all runs of one.
    pub rounds: usize,
    /// wrk's duration per variant per round.
    pub duration: Duration,
    /// h2load's duration per variant per round.
    pub latency_duration: Duration,
    /// h2load: connections × per-connection rate = the fixed moderate rate.
    pub latency_workers: u32,
    pub latency_rate_per_worker: u32,
    /// Paired slices ([`paired`]): pairs per close comparison, each side one
    /// wrk run this long.
    pub pairs: usize,
    pub slice: Duration,
    /// The paired `/apis` client: `rounds` windows this long.
    pub apis_window: Duration,
    pub propagation_changes: usize,
    pub refresh_interval: Duration,
    /// The CRD-heavy `/apis` case: requests, spread over `crd_heavy_clients`
    /// concurrent clients.
    pub crd_heavy_requests: usize,
    pub crd_heavy_clients: usize,
    pub crd_heavy_groups: usize,
    /// Which parts run: the front-door variants and propagation, and the
    /// `/apis` cases. A full run (what BENCHMARKS.md holds) runs both.
    pub front_door: bool,
    /// With `front_door`: the filter variants too (off: propagation only).
    pub variants: bool,
    pub discovery: bool,
    /// Instructions per request under callgrind ([`instructions`]), for the
    /// doors the goals compare closely.
    pub count: Option<instructions::Plan>,
    /// Many nodes' watches through five doors ([`scale`]).
    pub scale: Option<scale::Plan>,
    /// Kube's own MVP beside the front door ([`kube_mvp`]).
    pub kube_mvp: Option<kube_mvp::Plan>,
    /// What the door adds over a real kube-apiserver directly ([`latency`]).
    pub latency: Option<latency::Plan>,
    /// Many clients' kube-like mix on real apiservers ([`cluster_load`]).
    pub cluster: Option<cluster_load::Plan>,
}

impl Settings {
    pub fn full() -> Settings {
        Settings {
            smoke: false,
            // One full cycle of the balanced order for the six front-door
            // variants (and two of it for the three /apis doors).
            rounds: 6,
            duration: Duration::from_secs(5),
            latency_duration: Duration::from_secs(3),
            latency_workers: 4,
            latency_rate_per_worker: 250,
            pairs: 20,
            slice: Duration::from_secs(1),
            apis_window: Duration::from_secs(8),
            propagation_changes: 30,
            refresh_interval: Duration::from_millis(500),
            crd_heavy_requests: 10_000,
            crd_heavy_clients: 16,
            crd_heavy_groups: 3000,
            front_door: true,
            variants: true,
            discovery: true,
            count: Some(instructions::Plan { warm_up: 2000, requests: 2000, phases: 2, idle: Duration::from_secs(5), doors: vec![], keep: None }),
            // 6,000 watches: the reconnect storms' size (scale_watches.rs);
            // an event every 2 s per watch is 3,000 events/s.
            // Counted: 1,000 watches, 500 events/s — Envoy's idle work
            // (health checks, timers) a few % of a window, which Envoy
            // under callgrind (~50x slower) carries without falling behind.
            scale: Some(scale::Plan {
                nodes: 300,
                watches_per_node: 20,
                event_interval: Duration::from_secs(2),
                window: Duration::from_secs(10),
                rounds: 3,
                fake_threads: 2,
                doors: vec![],
                real: Some(scale_real::Plan { nodes: 100, watches_per_node: 20 }),
                counted: Some(scale_counted::Plan {
                    nodes: 50,
                    watches_per_node: 20,
                    event_interval: Duration::from_secs(2),
                    window: Duration::from_secs(10),
                    phases: 3,
                    idle: Duration::from_secs(10),
                    doors: vec![],
                    keep: None,
                }),
                // The storms at the scale_watches tests' full size.
                storm: Some(scale_storm::Plan { nodes: 300, watches_per_node: 20, doors: vec![] }),
            }),
            kube_mvp: Some(kube_mvp::Plan { requests: 200, rounds: 6 }),
            latency: Some(latency::Plan { rate: 200, window: Duration::from_secs(5), rounds: 8 }),
            // 52 connections (40 HTTP/2 carrying two requests at a time,
            // 12 HTTP/1.1), 10 watches.
            cluster: Some(cluster_load::Plan {
                h2_connections: 40,
                h2_streams: 2,
                h1_connections: 12,
                watches: 10,
                window: Duration::from_secs(10),
                // Below and near where the machine saturates.
                rates: vec![250, 1000],
                rate_window: Duration::from_secs(10),
                rounds: 6,
                pairs: 20,
                slice: Duration::from_secs(3),
            }),
        }
    }

    /// Only `part` of the run (`bench --only`), while iterating on it:
    /// `propagation` is the front-door part without its filter variants.
    pub fn only(mut self, part: &str) -> Settings {
        let keep = |p: &str| p == part;
        self.front_door &= keep("front-door") || keep("propagation");
        self.variants &= !keep("propagation");
        self.discovery &= keep("discovery");
        if !keep("instructions") {
            self.count = None;
        }
        if !keep("scale") {
            self.scale = None;
        }
        if !keep("kube-mvp") {
            self.kube_mvp = None;
        }
        if !keep("latency") {
            self.latency = None;
        }
        if !keep("cluster") {
            self.cluster = None;
        }
        self
    }

    pub fn smoke() -> Settings {
        Settings {
            smoke: true,
            rounds: 2,
            duration: Duration::from_secs(1),
            latency_duration: Duration::from_secs(1),
            latency_workers: 2,
            latency_rate_per_worker: 50,
            pairs: 1,
            slice: Duration::from_secs(1),
            apis_window: Duration::from_secs(1),
            propagation_changes: 2,
            refresh_interval: Duration::from_millis(500),
            crd_heavy_requests: 32,
            crd_heavy_clients: 4,
            crd_heavy_groups: 300,
            front_door: true,
            variants: true,
            discovery: true,
            count: Some(instructions::Plan { warm_up: 50, requests: 50, phases: 2, idle: Duration::from_secs(1), doors: vec![], keep: None }),
            // Counted: the native door alone (an Envoy under callgrind
            // starts in tens of seconds), that the counting works.
            scale: Some(scale::Plan {
                nodes: 4,
                watches_per_node: 5,
                event_interval: Duration::from_millis(200),
                window: Duration::from_secs(1),
                rounds: 1,
                fake_threads: 1,
                doors: vec![],
                real: Some(scale_real::Plan { nodes: 3, watches_per_node: 5 }),
                counted: Some(scale_counted::Plan {
                    nodes: 2,
                    watches_per_node: 5,
                    event_interval: Duration::from_millis(500),
                    window: Duration::from_secs(2),
                    phases: 2,
                    idle: Duration::from_secs(1),
                    doors: vec!["native".into()],
                    keep: None,
                }),
                storm: Some(scale_storm::Plan { nodes: 6, watches_per_node: 5, doors: vec![] }),
            }),
            kube_mvp: Some(kube_mvp::Plan { requests: 5, rounds: 1 }),
            latency: Some(latency::Plan { rate: 20, window: Duration::from_secs(1), rounds: 2 }),
            cluster: Some(cluster_load::Plan {
                h2_connections: 4,
                h2_streams: 2,
                h1_connections: 2,
                watches: 2,
                window: Duration::from_secs(1),
                rates: vec![50],
                rate_window: Duration::from_secs(1),
                rounds: 1,
                pairs: 1,
                slice: Duration::from_secs(1),
            }),
        }
    }
}
