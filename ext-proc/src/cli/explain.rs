//! `mvp-ext-proc explain`: asks a running mvp-ext-proc's `/debug/route`
//! what the front door does with a request, and prints its answer.

use std::time::Duration;

use anyhow::Context;
use clap::{Parser, ValueEnum};

#[derive(Parser)]
pub(super) struct ExplainArgs {
    /// The running mvp-ext-proc's --metrics-listen address.
    #[arg(long, default_value = "http://127.0.0.1:9090")]
    server: String,
    /// HTTP method of the request.
    #[arg(short = 'X', long, default_value = "GET")]
    method: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = ExplainOutput::Human)]
    output: ExplainOutput,
    /// A file holding the bearer token to present, for an mvp-ext-proc whose
    /// operator endpoints need one (`serve --authentication-kubeconfig`).
    #[arg(long, value_name = "FILE")]
    token_file: Option<std::path::PathBuf>,
    /// CA bundle (PEM) to verify an https:// --server with (`serve
    /// --metrics-tls`: the gRPC port's CA, e.g. `certs`' ca.crt).
    #[arg(long, value_name = "FILE")]
    ca_file: Option<std::path::PathBuf>,
    /// The request's path, with its query if any (`/apis/apps/v1/namespaces/x/deployments?watch=1`).
    path: String,
}

#[derive(Clone, Copy, ValueEnum)]
enum ExplainOutput {
    Human,
    Json,
}

pub(super) fn explain(a: ExplainArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let url = reqwest::Url::parse_with_params(&format!("{}/debug/route", a.server.trim_end_matches('/')), [("path", a.path.as_str()), ("method", a.method.as_str())])
        .with_context(|| format!("--server {}: not a URL", a.server))?;
    let (status, body) = runtime
        .block_on(async {
            let mut client = reqwest::Client::builder().no_proxy();
            if let Some(f) = &a.ca_file {
                let pem = std::fs::read(f).with_context(|| format!("--ca-file {}", f.display()))?;
                for cert in reqwest::Certificate::from_pem_bundle(&pem).with_context(|| format!("--ca-file {}", f.display()))? {
                    client = client.add_root_certificate(cert);
                }
            }
            let mut req = client.build()?.get(url).timeout(Duration::from_secs(10));
            if let Some(f) = &a.token_file {
                let token = std::fs::read_to_string(f).with_context(|| format!("--token-file {}", f.display()))?;
                req = req.bearer_auth(token.trim());
            }
            let resp = req.send().await?;
            anyhow::Ok((resp.status(), resp.text().await?))
        })
        .with_context(|| format!("asking mvp-ext-proc at {}", a.server))?;
    if !status.is_success() {
        anyhow::bail!("{}: {status}: {}", a.server, body.trim());
    }
    match a.output {
        ExplainOutput::Json => println!("{body}"),
        ExplainOutput::Human => {
            let e: crate::table::explain::Explanation = serde_json::from_str(&body).context("reading the explanation")?;
            print!("{}", crate::table::explain::render(&e));
        }
    }
    Ok(())
}
