//! The soak's tables (markdown, for RELIABILITY.md): per front door, the
//! classes per phase; the "other" and wrong-404 answers by kind; memory.

use std::fmt::Write;

use super::workload::{CORRECT_404, OK, OTHER, STATUS_503, STATUS_503_CAPABLE_UP, WATCH_SHUTDOWN, WRONG_404};
use super::{DOORS, Report};

const COLUMNS: [&str; 7] = [OK, CORRECT_404, WRONG_404, STATUS_503, STATUS_503_CAPABLE_UP, WATCH_SHUTDOWN, OTHER];

pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let s = &r.settings;
    let _ = writeln!(
        out,
        "Settings: {} clients per front door, apiserver shutdown delay {:?}, ≥ {} requests per front door per phase after its step.\n",
        s.clients, s.shutdown_delay, s.settle
    );
    for (d, door) in DOORS.iter().enumerate() {
        let _ = writeln!(out, "#### {door}\n");
        let _ = writeln!(out, "| phase | requests | {} |", COLUMNS.join(" | "));
        let _ = writeln!(out, "|---|---:|{}", "---:|".repeat(COLUMNS.len()));
        for p in &r.phases {
            let t = &p.tallies[d];
            let cells: Vec<String> = COLUMNS.iter().map(|c| t.get(c).to_string()).collect();
            let _ = writeln!(out, "| {} ({:.1} s) | {} | {} |", p.name, p.took.as_secs_f64(), t.total(), cells.join(" | "));
        }
        let total = r.total(d);
        let cells: Vec<String> = COLUMNS.iter().map(|c| format!("**{}**", total.get(c))).collect();
        let _ = writeln!(out, "| **whole upgrade** | **{}** | {} |\n", total.total(), cells.join(" | "));
        let [any, fresh, reused] = r.disruption[d];
        let _ = writeln!(out, "{door}: **{any} disruption seconds** ({fresh} on new connections, {reused} on reused ones; {} samples at 1 Hz).\n", r.sampled[d]);
        if !total.samples.is_empty() {
            let _ = writeln!(out, "{door}: wrong 404s, 503s a ready capable server could have answered, and other answers, by kind:\n");
            let mut samples: Vec<_> = total.samples.iter().collect();
            samples.sort_by(|a, b| b.1.cmp(a.1));
            for (what, n) in samples.iter().take(12) {
                let _ = writeln!(out, "- {n} × {what}");
            }
            let _ = writeln!(out);
        }
    }
    let _ = writeln!(out, "Resident memory after each phase (MiB):\n");
    let _ = writeln!(out, "| phase | mvp-envoy's Envoy | plain Envoy | mvp-ext-proc |\n|---|---:|---:|---:|");
    for p in &r.phases {
        let [a, b, c] = p.rss_kib.map(|k| k as f64 / 1024.0);
        let _ = writeln!(out, "| {} | {a:.1} | {b:.1} | {c:.1} |", p.name);
    }
    out
}
