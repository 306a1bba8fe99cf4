//! The run's results: targets, and the tables printed at the end (also
//! pasted into BENCHMARKS.md).

use std::collections::BTreeMap;

use super::discovery::Added;
use super::load::Latency;
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
    let (none, wasm, extproc, floor) = (by("no-filter", 50), by("wasm", 50), by("ext-proc", 50), by("wasm-floor", 50));
    if let (Some(n), Some(w), Some(f)) = (none, wasm, floor) {
        // How much of the filter's cost is proxy-wasm's dispatch, not our work.
        let cpu = |v: &VariantResult| v.cpu_us_per_request - n.cpu_us_per_request;
        r.memory.insert("floor_share_of_wasm_cpu_overhead".into(), cpu(f) / cpu(w).max(1e-9));
        r.memory.insert("wasm_cpu_overhead_us".into(), cpu(w));
        r.memory.insert("floor_cpu_overhead_us".into(), cpu(f));
    }
    r.counted_ratios = counted_ratios(r);
    let mut targets = Vec::new();
    // A close comparison reads its paired slices where the run has them
    // (the rounds' figure beside it), otherwise the rounds; where the run
    // counted instructions, the counted figure decides (it does not move
    // with the host) and the timed ones stand beside it.
    let ratio = |k: &str| {
        let rounds = r.ratios.get(k).map(|s| format!("{:.3} ({:.3}–{:.3})", s.median, s.min, s.max));
        match (r.paired.get(k), rounds) {
            (Some(p), rounds) => Some((
                p.median,
                format!("paired {:.3} (middle half {:.3}–{:.3}, all {:.3}–{:.3}); rounds {}", p.median, p.p25, p.p75, p.min, p.max, rounds.unwrap_or_default()),
            )),
            (None, Some(rounds)) => r.ratios.get(k).map(|s| (s.median, rounds)),
            (None, None) => None,
        }
    };
    let counted = |k: &str| r.counted_ratios.get(k).copied();
    let mut target = |name: &str, key: &str, counted_key: Option<&str>, ok: &dyn Fn(f64) -> bool| {
        let timed = ratio(key);
        let floor = counted_key.and_then(|k| Some((k, counted(&format!("{k} routing floor"))?)));
        match (counted_key.and_then(counted), timed) {
            (Some(c), timed) => {
                let mut shown = format!("counted {c:.3}");
                if let Some((k, f)) = floor {
                    shown.push_str(&format!(" (the routing floor {}: {f:.3})", k.replace("(2)", "(7)")));
                }
                if let Some((_, t)) = timed {
                    shown.push_str(&format!("; timed: {t}"));
                }
                targets.push((name.to_string(), ok(c), shown));
            }
            (None, Some((m, shown))) => targets.push((name.to_string(), ok(m), shown)),
            (None, None) => {}
        }
    };
    target("(2)/(1) throughput ≥ 0.90", "throughput (2)/(1) wasm/no-filter", Some("(2)/(1)"), &|m| m >= 0.90);
    target("(3)/(2) throughput ≥ 0.98", "throughput (3)/(2) wasm 5000/wasm 50", Some("(3)/(2)"), &|m| m >= 0.98);
    target("(2) ≥ 1.10 × (4) throughput", "throughput (2)/(4) wasm/lua", Some("(2)/(4)"), &|m| m >= 1.10);
    target("(2) CPU per request < (4)'s", "cpu per request (2)/(4) wasm/lua", Some("cpu (2)/(4)"), &|m| m < 1.0);
    target("(9)/(1) native throughput ≥ 0.97", "", Some("(9)/(1) native"), &|m| m >= 0.97);
    target("(9)/(11) native over no filter with the same routes ≥ 0.97", "", Some("(9)/(11) native over no filter with its routes"), &|m| m >= 0.97);
    target("(10)/(11) native, 5,000 GVRs, over no filter with the same routes ≥ 0.97", "", Some("(10)/(11) native 5000 over no filter with its routes"), &|m| m >= 0.97);
    target("(12)/(11) native, not pinned, over no filter with the same routes ≥ 0.97", "", Some("(12)/(11) native unpinned over no filter with its routes"), &|m| m >= 0.97);
    target("(13)/(11) native, not pinned, 5,000 GVRs, over no filter with the same routes ≥ 0.97", "", Some("(13)/(11) native unpinned 5000 over no filter with its routes"), &|m| m >= 0.97);
    target("(10)/(9) native throughput ≥ 0.98", "", Some("(10)/(9) native 5000/native 50"), &|m| m >= 0.98);
    target("(9) ≥ 1.15 × (4) throughput", "", Some("(9)/(4) native/lua"), &|m| m >= 1.15);
    target("(2) ≥ 1.5× (5) throughput", "throughput (2)/(5) wasm/ext-proc", None, &|m| m >= 1.5);
    if let (Some(n), Some(w), Some(e)) = (none, wasm, extproc) {
        let added = |v: &VariantResult| (v.latency.p50_ms - n.latency.p50_ms).max(0.0);
        targets.push((
            "(2) added latency ≤ ⅓ of (5)'s".into(),
            added(w) <= added(e) / 3.0,
            format!("p50 +{:.3} ms vs +{:.3} ms", added(w), added(e)),
        ));
    }
    if let Some(p99) = r.discovery_added_ms.get("p99") {
        let mut measured = format!("rounds {:+.3} ms ({:+.3}–{:+.3})", p99.median, p99.min, p99.max);
        if let Some(u) = r.discovery_added_ms.get("unix p99") {
            measured.push_str(&format!("; over a Unix socket {:+.3} ms ({:+.3}–{:+.3})", u.median, u.min, u.max));
        }
        let mut met = p99.median <= 1.0;
        // The paired client's figure, where the run has it, is the goal's:
        // both doors' samples come from the same seconds.
        if let Some(p) = r.discovery_paired_added_ms.get("p99") {
            let w = &p.per_window_ms;
            measured = format!("paired {:+.3} ms (per window {:+.3}–{:+.3}); {measured}", p.pooled_ms, w.min, w.max);
            met = p.pooled_ms <= 1.0;
            // Beside it, the floor: what a server answering "continue" adds.
            let get = |prefix: &str| r.discovery_paired_added_ms.get(&format!("{prefix}p99")).map(|a| a.pooled_ms);
            use super::discovery::{FLOOR, OVER_FLOOR};
            if let (Some(floor), Some(over)) = (get(FLOOR), get(OVER_FLOOR)) {
                measured.push_str(&format!("; paired ext_proc floor {floor:+.3} ms p99, merged over it {over:+.3} ms"));
            }
        }
        targets.push(("merged /apis adds ≤ 1 ms p99".into(), met, measured));
    }
    let c = &r.crd_heavy;
    if c.requests > 0 {
        targets.push((
            format!("CRD-heavy /apis: 0 unmerged of {} at {} clients", c.requests, c.clients),
            c.unmerged == 0,
            format!("{} unmerged, Envoy message_timeouts {}", c.unmerged, c.envoy_message_timeouts),
        ));
        let rss = c.ext_proc_rss_mib.max(c.ext_proc_rss_after_rebuilds_mib);
        targets.push((
            "CRD-heavy: mvp-ext-proc RSS ≤ 64 MiB".into(),
            rss <= 64.0,
            format!("{:.1} MiB after the load, {:.1} after the rebuilds (Envoy {:.1} MiB)", c.ext_proc_rss_mib, c.ext_proc_rss_after_rebuilds_mib, c.envoy_rss_mib),
        ));
        if let Some(full) = c.rebuilds.get("every CRD group changed") {
            let ms = &full.build_ms;
            let (cpu, alone) = (&full.build_cpu_ms, &full.isolated_build_ms);
            targets.push((
                format!("{}-CRD merge ≤ 100 ms", c.groups),
                ms.median <= 100.0,
                format!(
                    "{:.1} ms ({:.1}–{:.1}) in mvp-ext-proc, of which CPU {:.1} ms; {:.1} ms ({:.1}–{:.1}) alone",
                    ms.median, ms.min, ms.max, cpu.median, alone.median, alone.min, alone.max
                ),
            ));
        }
    }
    if let (Some(p50), Some(p99)) = (r.memory.remove("propagation_p50_ms"), r.memory.remove("propagation_p99_ms")) {
        r.propagation_ms.insert("p50".into(), p50);
        r.propagation_ms.insert("p99".into(), p99);
        if let Some(n) = r.memory.remove("propagation_samples") {
            r.propagation_ms.insert("samples".into(), n);
        }
        targets.push(("propagation ≤ 1 s p99".into(), p99 <= 1000.0, format!("{p99:.0} ms")));
    }
    // The same changes through a refresher that polls every 200 ms.
    for stat in ["p50", "p99"] {
        if let Some(v) = r.memory.remove(&format!("propagation_polling_{stat}_ms")) {
            r.propagation_ms.insert(format!("{stat}, polling refresher"), v);
        }
    }
    r.memory.remove("propagation_polling_samples");
    if let Some(rss) = r.memory.get("ext_proc_rss_mib_3_apiservers_v1_37") {
        targets.push(("ext-proc RSS ≤ 50 MiB (v1.37)".into(), *rss <= 50.0, format!("{rss:.1} MiB")));
    }
    if let Some(vm) = r.memory.get("wasm_vm_mib_per_worker_5000_gvr") {
        targets.push(("wasm VM ≤ 8 MiB per worker".into(), *vm > 0.0 && *vm <= 8.0, format!("{vm:.2} MiB")));
    }
    if let Some(c) = &r.cluster {
        targets.extend(super::cluster_report::targets(c));
    }
    r.targets = targets;
}

/// Instruction counts as the goals' ratios: a throughput ratio A/B read as
/// instructions(B)/instructions(A) (what a door would serve per unit of CPU
/// if an instruction cost the same everywhere), a CPU ratio as
/// instructions(A)/instructions(B); and the routing floors' figures, the best
/// any proxy-wasm routing filter could reach in the same comparison.
fn counted_ratios(r: &Results) -> BTreeMap<String, f64> {
    let ir = |n: u32| r.instructions.iter().find(|(k, _)| k.starts_with(&format!("({n}) "))).map(|(_, c)| c.instructions_per_request);
    let mut out = BTreeMap::new();
    let mut put = |name: &str, a: Option<f64>, b: Option<f64>| {
        if let (Some(a), Some(b)) = (a, b) {
            out.insert(name.to_string(), a / b.max(1e-9));
        }
    };
    put("(2)/(1)", ir(1), ir(2));
    put("(3)/(2)", ir(2), ir(3));
    put("(2)/(4)", ir(4), ir(2));
    put("cpu (2)/(4)", ir(2), ir(4));
    put("(6)/(1)", ir(1), ir(6));
    put("(2)/(1) routing floor", ir(1), ir(7));
    put("(2)/(4) routing floor", ir(4), ir(7));
    put("(8)/(7) Lua routing floor over proxy-wasm's", ir(8), ir(7));
    put("(2)/(7) the filter over its routing floor", ir(7), ir(2));
    put("(9)/(1) native", ir(1), ir(9));
    put("(10)/(9) native 5000/native 50", ir(9), ir(10));
    put("(9)/(4) native/lua", ir(4), ir(9));
    put("(9)/(2) native/wasm", ir(2), ir(9));
    put("(9)/(11) native over no filter with its routes", ir(11), ir(9));
    put("(12)/(11) native unpinned over no filter with its routes", ir(11), ir(12));
    put("(13)/(11) native unpinned 5000 over no filter with its routes", ir(11), ir(13));
    put("(10)/(11) native 5000 over no filter with its routes", ir(11), ir(10));
    put("(11)/(1) no filter: native routes over wasm routes", ir(1), ir(11));
    out
}

/// The tables printed at the end of a run (also pasted into BENCHMARKS.md).
pub fn render_table(r: &Results) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "load average (1, 5, 15 min): {} at the start, {} at the end; {} rounds\n\n",
        r.load_average.get("start").map(String::as_str).unwrap_or("?"),
        r.load_average.get("end").map(String::as_str).unwrap_or("?"),
        r.settings.get("rounds").map(String::as_str).unwrap_or("?"),
    ));
    out.push_str("| variant | GVRs | throughput req/s (median, min–max over rounds) | p50 ms | p99 ms | CPU µs/req (median, min–max) |\n|---|---|---|---|---|---|\n");
    for v in &r.variants {
        let cpu = super::Spread::of(&v.cpu_us_per_request_rounds);
        out.push_str(&format!(
            "| ({}) {} | {} | {:.0} ({:.0}–{:.0}) | {:.3} | {:.3} | {:.1} ({:.1}–{:.1}) |\n",
            v.number,
            v.description,
            v.gvrs,
            v.throughput.median_rps,
            v.throughput.min_rps,
            v.throughput.max_rps,
            v.latency.p50_ms,
            v.latency.p99_ms,
            cpu.median,
            cpu.min,
            cpu.max,
        ));
    }
    out.push_str("\n| ratio (per round) | median | min–max |\n|---|---|---|\n");
    for (k, v) in &r.ratios {
        out.push_str(&format!("| {k} | {:.3} | {:.3}–{:.3} |\n", v.median, v.min, v.max));
    }
    if !r.paired.is_empty() {
        out.push_str(&format!(
            "\n| ratio (paired {} s slices, ABBA) | median | middle half | min–max | pairs |\n|---|---|---|---|---|\n",
            r.settings.get("slice_s").map(String::as_str).unwrap_or("?")
        ));
        for (k, v) in &r.paired {
            out.push_str(&format!("| {k} | {:.3} | {:.3}–{:.3} | {:.3}–{:.3} | {} |\n", v.median, v.p25, v.p75, v.min, v.max, v.rounds.len()));
        }
    }
    if !r.instructions.is_empty() {
        out.push_str("\n| door, counted under callgrind (every Envoy thread) | instructions / request (per phase) | D1 misses / request | LL misses / request | idle instructions / s |\n|---|---|---|---|---|\n");
        for (k, c) in &r.instructions {
            let phases: Vec<String> = c.phases.iter().map(|p| format!("{p:.0}")).collect();
            out.push_str(&format!(
                "| {k} | {:.0} ({}) | {:.1} | {:.2} | {:.0} |\n",
                c.instructions_per_request,
                phases.join(", "),
                c.d1_misses_per_request,
                c.ll_misses_per_request,
                c.idle_per_second
            ));
        }
        out.push_str("\n| ratio, counted (throughput as instructions(B)/instructions(A)) | value |\n|---|---|\n");
        for (k, v) in &r.counted_ratios {
            out.push_str(&format!("| {k} | {v:.3} |\n"));
        }
    }
    if let Some(scale) = &r.scale {
        out.push_str(&super::scale::render(scale));
    }
    if let Some(l) = &r.added_latency {
        out.push_str(&super::latency::render(l));
    }
    if let Some(c) = &r.cluster {
        out.push_str(&super::cluster_report::render(c));
    }
    if let Some(k) = &r.kube_mvp {
        out.push_str(&super::kube_mvp::render(k));
    }
    // A run of one part (`--only`) shows that part's tables, not the
    // others' empty ones.
    if !r.discovery.is_empty() || r.crd_heavy.requests > 0 {
        render_apis(&mut out, r);
    }
    if !r.propagation_ms.is_empty() || !r.memory.is_empty() {
        out.push_str("\n| other | value |\n|---|---|\n");
        for (k, v) in &r.propagation_ms {
            out.push_str(&format!("| propagation {k} | {v:.0}{} |\n", if k == "samples" { "" } else { " ms" }));
        }
        for (k, v) in &r.memory {
            out.push_str(&format!("| {k} | {v:.2} |\n"));
        }
    }
    out.push_str("\n| target | met | measured |\n|---|---|---|\n");
    for (t, ok, m) in &r.targets {
        out.push_str(&format!("| {t} | {} | {m} |\n", if *ok { "yes" } else { "NO" }));
    }
    out
}

/// The paired `/apis` client's table: each door over the same seconds, and
/// what merging adds (over all windows, and the range over windows).
fn paired_apis(out: &mut String, what: &str, doors: &BTreeMap<String, Latency>, added: &BTreeMap<String, Added>) {
    if doors.is_empty() {
        return;
    }
    out.push_str(&format!("\n| /apis {what}, paired client (every door in the same seconds) | p50 ms | p99 ms | requests |\n|---|---|---|---|\n"));
    for (k, v) in doors {
        out.push_str(&format!("| {k} | {:.3} | {:.3} | {} |\n", v.p50_ms, v.p99_ms, v.requests));
    }
    for (k, v) in added {
        let w = &v.per_window_ms;
        out.push_str(&format!("| {}: all windows (per window min–max) | {:+.3} ({:+.3}–{:+.3}) | | |\n", difference(k), v.pooled_ms, w.min, w.max));
    }
}

/// A row label for a key of `discovery::differences`.
fn difference(key: &str) -> String {
    use super::discovery::{FLOOR, OVER_FLOOR, UNIX_MINUS_TCP};
    if let Some(p) = key.strip_prefix(UNIX_MINUS_TCP) {
        format!("Unix socket − TCP ({p})")
    } else if let Some(p) = key.strip_prefix(FLOOR) {
        format!("ext_proc floor: pass-through server − passthrough ({p})")
    } else if let Some(p) = key.strip_prefix(OVER_FLOOR) {
        format!("merging over that floor: merged − pass-through server ({p})")
    } else {
        format!("added by merging ({key})")
    }
}

/// The `/apis` cases' tables (v1.37 and CRD-heavy, their rebuilds).
fn render_apis(out: &mut String, r: &Results) {
    out.push_str("\n| /apis, three apiservers with the real v1.37 document | p50 ms | p99 ms |\n|---|---|---|\n");
    for (k, v) in &r.discovery {
        out.push_str(&format!("| {k} | {:.3} | {:.3} |\n", v.p50_ms, v.p99_ms));
    }
    for (k, v) in &r.discovery_added_ms {
        out.push_str(&format!("| {}, median of rounds (min–max) | {:+.3} ({:+.3}–{:+.3}) | |\n", difference(k), v.median, v.min, v.max));
    }
    paired_apis(out, "v1.37", &r.discovery_paired, &r.discovery_paired_added_ms);
    let c = &r.crd_heavy;
    paired_apis(out, "CRD-heavy", &c.paired, &c.paired_added_ms);
    out.push_str(&format!(
        "\n| /apis, CRD-heavy ({} groups, {:.1} MB) beside v1.30 | value |\n|---|---|\n",
        c.groups,
        c.document_bytes as f64 / 1e6
    ));
    out.push_str(&format!("| {} uncompressed requests, {} concurrent clients | {:.1} s |\n", c.requests, c.clients, c.seconds));
    out.push_str(&format!("| unmerged (fell back to an apiserver's own document) | {} |\n", c.unmerged));
    out.push_str(&format!("| Envoy ext_proc.message_timeouts / timeout extensions received | {} / {} |\n", c.envoy_message_timeouts, c.envoy_timeout_extensions));
    out.push_str(&format!("| latency under that load p50 / p99 | {:.1} / {:.1} ms |\n", c.under_load.p50_ms, c.under_load.p99_ms));
    out.push_str(&format!("| CPU per request under that load: Envoy / mvp-ext-proc | {:.2} / {:.2} ms |\n", c.envoy_cpu_ms_per_request, c.ext_proc_cpu_ms_per_request));
    out.push_str(&format!("| passthrough p50 / p99 at a moderate rate | {:.2} / {:.2} ms |\n", c.passthrough.p50_ms, c.passthrough.p99_ms));
    out.push_str(&format!("| ext_proc floor (pass-through server) p50 / p99 at a moderate rate | {:.2} / {:.2} ms |\n", c.ext_proc_floor.p50_ms, c.ext_proc_floor.p99_ms));
    out.push_str(&format!("| merged p50 / p99 at a moderate rate | {:.2} / {:.2} ms |\n", c.merged.p50_ms, c.merged.p99_ms));
    out.push_str(&format!("| merged over a Unix socket p50 / p99 at a moderate rate | {:.2} / {:.2} ms |\n", c.merged_unix.p50_ms, c.merged_unix.p99_ms));
    out.push_str(&format!(
        "| added by merging p50 / p99, median of rounds: TCP / Unix socket | {:+.2} / {:+.2} ms / {:+.2} / {:+.2} ms |\n",
        c.added_p50_ms.median, c.added_p99_ms.median, c.added_unix_p50_ms.median, c.added_unix_p99_ms.median
    ));
    out.push_str(&format!(
        "| ext_proc floor − passthrough p50 / p99, median of rounds | {:+.2} / {:+.2} ms |\n",
        c.ext_proc_floor_added_p50_ms.median, c.ext_proc_floor_added_p99_ms.median
    ));
    out.push_str(&format!(
        "| Unix socket − TCP p50 / p99, median of rounds (min–max) | {:+.2} ({:+.2}–{:+.2}) / {:+.2} ({:+.2}–{:+.2}) ms |\n",
        c.unix_minus_tcp_p50_ms.median,
        c.unix_minus_tcp_p50_ms.min,
        c.unix_minus_tcp_p50_ms.max,
        c.unix_minus_tcp_p99_ms.median,
        c.unix_minus_tcp_p99_ms.min,
        c.unix_minus_tcp_p99_ms.max
    ));
    out.push_str(&format!("| RSS after the load: mvp-ext-proc / Envoy | {:.1} / {:.1} MiB |\n", c.ext_proc_rss_mib, c.envoy_rss_mib));
    out.push_str(&format!("| mvp-ext-proc RSS after the rebuilds below | {:.1} MiB |\n", c.ext_proc_rss_after_rebuilds_mib));
    for (what, b) in &c.rebuilds {
        out.push_str(&format!(
            "| rebuild after \"{what}\": build ms in mvp-ext-proc, median (min–max) / its CPU ms / alone, same documents / groups encoded | {:.1} ({:.1}–{:.1}) / {:.1} ({:.1}–{:.1}) / {:.1} ({:.1}–{:.1}) / {:.0} |\n",
            b.build_ms.median,
            b.build_ms.min,
            b.build_ms.max,
            b.build_cpu_ms.median,
            b.build_cpu_ms.min,
            b.build_cpu_ms.max,
            b.isolated_build_ms.median,
            b.isolated_build_ms.min,
            b.isolated_build_ms.max,
            b.groups_encoded.median
        ));
    }
}
