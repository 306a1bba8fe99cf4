//! The cluster part's ([`super::cluster_load`]) verdicts and tables: every
//! answer what the door should give, the goals, the tables
//! BENCHMARKS.md holds.

use super::cluster_load::{ClusterLoad, DOORS};
use super::cluster_mix::Op;

/// What a door should not have done: an answer not 2xx (but the plain
/// door's 404s for the skewed API, which it cannot route), a watch that
/// stopped, a watch stream ended early that no apiserver ended.
pub fn problems(c: &ClusterLoad) -> Vec<String> {
    let mut out = Vec::new();
    for (name, s) in &c.saturated {
        let bad: u64 = s.statuses.iter().filter(|(k, _)| !(200..300).contains(*k)).map(|(_, v)| v).sum();
        let allowed = if name == DOORS[1] { s.skewed_404 } else { 0 };
        if bad > allowed {
            out.push(format!("{name} saturated: answers {:?} ({} wrong 404s)", s.statuses, s.skewed_404));
        }
        for (why, n) in &s.watches_failed {
            out.push(format!("{name}: {n} watches stopped: {why}"));
        }
        if s.rewatches > s.watchers_terminated_by_apiservers {
            out.push(format!("{name}: {} watch streams ended early, the apiservers ended {}", s.rewatches, s.watchers_terminated_by_apiservers));
        }
    }
    for (name, f) in &c.fixed_rate {
        if f.statuses.keys().any(|k| *k != 200) {
            out.push(format!("{name} at the fixed rate: answers {:?}", f.statuses));
        }
    }
    out
}

/// The goals (issue 63 item 2): throughput at saturation ≥ 0.95 of the
/// plain Envoy's, and at the fixed rate p50 added ≤ 0.8 ms and p99 ≤ +8 ms
/// (kubegateway's published figure for a Go L7 proxy) over direct.
pub fn targets(c: &ClusterLoad) -> Vec<(String, bool, String)> {
    let mut out = vec![("the cluster's doors: every answer as it should be, every watch held".to_string(), c.problems.is_empty(), match c.problems.is_empty() {
        true => "yes".to_string(),
        false => c.problems.join("; "),
    })];
    for door in [DOORS[2], DOORS[3]] {
        // The paired slices decide where the run has them, the rounds
        // beside them.
        let key = format!("{door}/plain-l7 requests/s");
        let rounds = c.ratios.get(&key).map(|t| format!("rounds {:.3} ({:.3}–{:.3})", t.median, t.min, t.max)).unwrap_or_default();
        if let Some(t) = c.paired.get(&key).or(c.ratios.get(&key)) {
            out.push((
                format!("{door} ≥ 0.95 × plain-l7 requests/s, a real cluster's mix"),
                t.median >= 0.95,
                format!("paired {:.3} (middle half {:.3}–{:.3}); {rounds}", t.median, t.p25, t.p75),
            ));
        }
        for rate in &c.rates {
            for (figure, bar) in [("p50", 0.8), ("p99", 8.0)] {
                let added = |d: &str| c.added_ms.get(&format!("{rate}/s {d} {figure}"));
                let (Some(a), plain) = (added(door), added(DOORS[1])) else { continue };
                let beside = plain.map(|p| format!("; plain-l7 {:+.3} ms", p.median)).unwrap_or_default();
                out.push((
                    format!("{door} {figure} added over direct ≤ {bar} ms at {rate} GETs/s"),
                    a.median <= bar,
                    format!("{:+.3} ms ({:+.3} – {:+.3}){beside}", a.median, a.min, a.max),
                ));
            }
        }
    }
    out
}

/// The part's tables.
pub fn render(c: &ClusterLoad) -> String {
    let conns: Vec<String> = c.connections.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let mut out = format!(
        "\nUnder a real cluster's load: two real {} kube-apiservers on one etcd, {} — the kube-like mix closed-loop for {} s per door (and paired slices), then GETs at {} /s open loop for {} s each; {} rounds interleaved\n\n",
        c.release, conns.join(", "), c.window_s, c.rates.iter().map(u32::to_string).collect::<Vec<_>>().join(" and "), c.rate_window_s, c.rounds
    );
    out.push_str("| door | requests/s (median, min–max) | CPU s / 1,000 requests, servers (median, min–max) | by process | client | get p50 / p99 ms | watch events/s | watches re-made (the apiservers ended) | wrong 404 |\n|---|---|---|---|---|---|---|---|---|\n");
    for (name, s) in &c.saturated {
        let by: Vec<String> = s.cpu_s_per_1000_by_process.iter().map(|(p, v)| format!("{p} {v:.3}")).collect();
        let get = s.latency_by_kind.get(Op::Get.name()).cloned().unwrap_or_default();
        let (r, t) = (&s.requests_per_s, &s.cpu_s_per_1000);
        out.push_str(&format!(
            "| {name} | {:.0} ({:.0}–{:.0}) | {:.3} ({:.3}–{:.3}) | {} | {:.3} | {:.2} / {:.2} | {:.0} | {} ({}) | {} |\n",
            r.median, r.min, r.max, t.median, t.min, t.max, by.join(", "), s.client_cpu_s_per_1000, get.p50_ms, get.p99_ms, s.watch_events_per_s.median, s.rewatches, s.watchers_terminated_by_apiservers, s.skewed_404
        ));
    }
    out.push_str("\n| ratio | paired slices: median (middle half; all) | rounds: median (min–max) |\n|---|---|---|\n");
    for (k, r) in &c.ratios {
        let p = c.paired.get(k).map(|p| format!("{:.3} ({:.3}–{:.3}; {:.3}–{:.3})", p.median, p.p25, p.p75, p.min, p.max)).unwrap_or_default();
        out.push_str(&format!("| {k} | {p} | {:.3} ({:.3}–{:.3}) |\n", r.median, r.min, r.max));
    }
    out.push_str("\n| GETs/s, door | p50 ms | p99 ms | p99.9 ms | requests |\n|---|---|---|---|---|\n");
    for (name, f) in &c.fixed_rate {
        out.push_str(&format!("| {name} | {:.3} | {:.3} | {:.3} | {} |\n", f.p50_ms, f.p99_ms, f.p999_ms, f.requests));
    }
    out.push_str("\n| added over direct, per round | median ms | min–max ms |\n|---|---|---|\n");
    for (k, s) in &c.added_ms {
        out.push_str(&format!("| {k} | {:+.3} | {:+.3} – {:+.3} |\n", s.median, s.min, s.max));
    }
    out
}
