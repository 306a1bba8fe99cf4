//! `mvp-ext-proc explain`: asks a running mvp-ext-proc's `/debug/route`
//! what the front door does with a request, and prints its answer.

use anyhow::Context;
use clap::{Parser, ValueEnum};

use super::daemon::DaemonArgs;

#[derive(Parser)]
pub(super) struct ExplainArgs {
    #[command(flatten)]
    daemon: DaemonArgs,
    /// HTTP method of the request.
    #[arg(short = 'X', long, default_value = "GET")]
    method: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Human)]
    output: Output,
    /// The request's path, with its query if any (`/apis/apps/v1/namespaces/x/deployments?watch=1`).
    path: String,
}

/// How `explain` and `readiness` print the daemon's answer.
#[derive(Clone, Copy, ValueEnum)]
pub(super) enum Output {
    Human,
    Json,
}

pub(super) fn explain(a: ExplainArgs) -> anyhow::Result<()> {
    let body = a.daemon.get("/debug/route", &[("path", a.path.as_str()), ("method", a.method.as_str())])?;
    match a.output {
        Output::Json => println!("{body}"),
        Output::Human => {
            let e: crate::table::explain::Explanation = serde_json::from_str(&body).context("reading the explanation")?;
            print!("{}", crate::table::explain::render(&e));
        }
    }
    Ok(())
}
