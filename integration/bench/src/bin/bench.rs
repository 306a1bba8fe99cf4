//! `bench [--smoke] [--only PART] [--doors N,..] [--callgrind-dir DIR] [--scale-nodes N] [--scale-rounds N] [--scale-doors D,..] [--scale-parts P,..] [--out FILE]`: benchmarks the front door's variants side
//! by side in one run (see BENCHMARKS.md). Run it through scripts/bench.sh,
//! which builds release binaries and installs the load generators.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use mvp_bench::{Settings, render_table, run};

#[derive(Parser)]
struct Args {
    /// A short run that only checks every variant produces numbers (tests).
    #[arg(long)]
    smoke: bool,
    /// Run one part only, while iterating on it: `front-door` (the filter
    /// variants and propagation), `propagation` (discovery change → routed,
    /// long-polling and polling refreshers on the same changes),
    /// `discovery` (the `/apis` cases), `instructions` (instructions per
    /// request under callgrind), `scale` (many nodes' watches through five
    /// doors), `kube-mvp` (kube's own MVP beside the front door, real
    /// kube-apiservers), `latency` (what the door adds over a real
    /// kube-apiserver directly) or `cluster` (many clients' kube-like mix
    /// on real apiservers, doors side by side). BENCHMARKS.md holds full
    /// runs.
    #[arg(long, value_parser = ["front-door", "propagation", "discovery", "instructions", "scale", "kube-mvp", "latency", "cluster"])]
    only: Option<String>,
    /// The CRD-heavy case's request count (default: 10,000; smoke: 32).
    #[arg(long)]
    crd_heavy_requests: Option<usize>,
    /// With `--only instructions`: count only these doors (BENCHMARKS.md's
    /// numbers, comma-separated), while iterating on one.
    #[arg(long, value_delimiter = ',')]
    doors: Vec<u32>,
    /// Keep each counted door's callgrind output in this directory (for
    /// `callgrind_annotate`; `--only instructions` and `--only scale`).
    #[arg(long)]
    callgrind_dir: Option<PathBuf>,
    /// With `--only scale`: simulated nodes (20 watches each), rounds, and
    /// only these doors (`direct,tcp-proxy,plain-l7,wasm,native`).
    #[arg(long)]
    scale_nodes: Option<usize>,
    #[arg(long)]
    scale_rounds: Option<usize>,
    #[arg(long, value_delimiter = ',')]
    scale_doors: Vec<String>,
    /// With `--only scale`: only these of its parts — `timed` (the rounds),
    /// `counted` (instructions under callgrind), `storm` (reconnect storms
    /// door by door), `real` (real kube-apiservers).
    #[arg(long, value_delimiter = ',', value_parser = ["timed", "counted", "storm", "real"])]
    scale_parts: Vec<String>,
    /// Machine-readable results.
    #[arg(long, default_value = "bench/results.json")]
    out: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut settings = if args.smoke { Settings::smoke() } else { Settings::full() };
    if let Some(part) = args.only.as_deref() {
        settings = settings.only(part);
    }
    if let Some(n) = args.crd_heavy_requests {
        settings.crd_heavy_requests = n;
    }
    if let Some(plan) = settings.scale.as_mut() {
        plan.nodes = args.scale_nodes.unwrap_or(plan.nodes);
        plan.rounds = args.scale_rounds.unwrap_or(plan.rounds);
        if !args.scale_doors.is_empty() {
            plan.doors = args.scale_doors.clone();
            if let Some(counted) = plan.counted.as_mut() {
                counted.doors = args.scale_doors.clone();
            }
            if let Some(storm) = plan.storm.as_mut() {
                storm.doors = args.scale_doors.clone();
            }
        }
        if let Some(counted) = plan.counted.as_mut() {
            counted.keep = args.callgrind_dir.clone();
        }
        if !args.scale_parts.is_empty() {
            let part = |p: &str| args.scale_parts.iter().any(|x| x == p);
            if !part("timed") {
                plan.rounds = 0;
            }
            if !part("counted") {
                plan.counted = None;
            }
            if !part("real") {
                plan.real = None;
            }
            if !part("storm") {
                plan.storm = None;
            }
        }
    }
    if let Some(plan) = settings.count.as_mut() {
        plan.doors = args.doors.clone();
        plan.keep = args.callgrind_dir.clone();
    }
    let results = run(settings).await?;
    let table = render_table(&results);
    println!("{table}");
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    // A run of one part keeps the figures of the others (results_file.rs).
    let old = std::fs::read(&args.out).ok().and_then(|b| serde_json::from_slice(&b).ok());
    let written = mvp_bench::results_file::merge(old, serde_json::to_value(&results)?, args.only.as_deref());
    std::fs::write(&args.out, serde_json::to_vec_pretty(&written)?).with_context(|| format!("writing {}", args.out.display()))?;
    match args.only.as_deref() {
        Some(part) => eprintln!("{part}'s results written to {} (its other figures kept)", args.out.display()),
        None => eprintln!("results written to {}", args.out.display()),
    }
    Ok(())
}
