//! `soak [--clients N] [--shutdown-delay D] [--settle N]`: a whole
//! control-plane upgrade under load through mvp-envoy and a plain
//! round-robin Envoy side by side; prints the tables RELIABILITY.md holds.
//! Run it through scripts/soak.sh.

use std::path::PathBuf;

use clap::Parser;
use mvp_soak::{Settings, report, run};

#[derive(Parser)]
struct Args {
    /// Concurrent clients per front door.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// The apiservers' shutdown delay (kube's --shutdown-delay-duration).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    shutdown_delay: std::time::Duration,
    /// Requests per front door per phase after its step is done.
    #[arg(long, default_value_t = 3000)]
    settle: u64,
    /// Keep the processes' logs here.
    #[arg(long)]
    logs: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let settings = Settings { clients: a.clients, shutdown_delay: a.shutdown_delay, settle: a.settle, dir: a.logs };
    let r = run(settings).await?;
    println!("{}", report::render(&r));
    Ok(())
}
