//! `mvp-ext-proc readiness`: asks a running mvp-ext-proc's `/readiness`
//! which APIs would be served by no apiserver if members left, and exits
//! with its verdict (0 ready, 1 would break, 2 cannot tell) for an upgrade
//! script to gate on.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

use super::daemon::DaemonArgs;
use super::explain::Output;
use crate::operate::readiness::{Release, Report, render};

#[derive(Parser)]
pub(super) struct ReadinessArgs {
    #[command(flatten)]
    daemon: DaemonArgs,
    /// A member about to be removed (repeatable).
    #[arg(long, value_name = "MEMBER", conflicts_with = "release")]
    remove: Vec<String>,
    /// Every member on this release (MAJOR.MINOR): those on it stay, the
    /// others leave. Neither flag: the upgrade in progress finishes (the
    /// newest release stays).
    #[arg(long, value_name = "X.Y", value_parser = parse_release)]
    release: Option<Release>,
    /// How far back to look for clients of the APIs that would be lost
    /// (the skew log's counts).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "24h")]
    window: std::time::Duration,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Human)]
    output: Output,
}

fn parse_release(s: &str) -> Result<Release, String> {
    Release::parse(s).ok_or_else(|| format!("{s:?}: not MAJOR.MINOR (e.g. 1.37)"))
}

pub(super) fn readiness(a: ReadinessArgs) -> anyhow::Result<ExitCode> {
    let remove = a.remove.join(",");
    let release = a.release.map(|r| r.to_string());
    let window = humantime::format_duration(a.window).to_string();
    let mut query = vec![("window", window.as_str())];
    if !remove.is_empty() {
        query.push(("remove", remove.as_str()));
    }
    if let Some(r) = &release {
        query.push(("release", r.as_str()));
    }
    let mut reports = Vec::new();
    for body in a.daemon.get_each("/readiness", &query)? {
        reports.push(serde_json::from_str::<Report>(&body).context("reading the readiness report")?);
    }
    // Replicas each count the Envoys that log to them: one report of all.
    let Some(report) = reports.into_iter().reduce(Report::merge) else { anyhow::bail!("no --server") };
    match a.output {
        Output::Json => println!("{}", serde_json::to_string(&report)?),
        Output::Human => print!("{}", render(&report)),
    }
    Ok(ExitCode::from(u8::try_from(report.verdict.exit_code()).unwrap_or(1)))
}
