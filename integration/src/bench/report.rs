//! The run's results: ratios, targets, and the table printed at the end (also
//! pasted into BENCHMARKS.md).

use std::collections::BTreeMap;

use super::{Results, VariantResult};

pub fn percentile(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

pub fn finish(r: &mut Results) {
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
