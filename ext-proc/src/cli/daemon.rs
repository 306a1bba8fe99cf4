//! Asking the running daemon (`explain`, `readiness`): its operator
//! endpoints on `--metrics-listen`, with a bearer token and a CA when it
//! wants them.

use std::time::Duration;

use anyhow::Context;
use clap::Args;

#[derive(Args)]
pub(super) struct DaemonArgs {
    /// The running mvp-ext-proc's --metrics-listen address (`readiness`
    /// takes one per replica and merges their answers).
    #[arg(long, default_value = "http://127.0.0.1:9090")]
    server: Vec<String>,
    /// A file holding the bearer token to present, for an mvp-ext-proc whose
    /// operator endpoints need one (`serve --authentication-kubeconfig`).
    #[arg(long, value_name = "FILE")]
    token_file: Option<std::path::PathBuf>,
    /// CA bundle (PEM) to verify an https:// --server with (`serve
    /// --metrics-tls`: the gRPC port's CA, e.g. `certs`' ca.crt).
    #[arg(long, value_name = "FILE")]
    ca_file: Option<std::path::PathBuf>,
}

impl DaemonArgs {
    /// `GET path?query` on the one daemon asked (an error if several are).
    pub(super) fn get(&self, path: &str, query: &[(&str, &str)]) -> anyhow::Result<String> {
        match self.server.as_slice() {
            [one] => self.get_from(one, path, query),
            _ => anyhow::bail!("give one --server"),
        }
    }

    /// The same of every `--server`, in order.
    pub(super) fn get_each(&self, path: &str, query: &[(&str, &str)]) -> anyhow::Result<Vec<String>> {
        self.server.iter().map(|s| self.get_from(s, path, query)).collect()
    }

    /// `GET path?query` on `server`: its body when it answers 2xx, its
    /// refusal as an error otherwise.
    fn get_from(&self, server: &str, path: &str, query: &[(&str, &str)]) -> anyhow::Result<String> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let url = reqwest::Url::parse_with_params(&format!("{}{path}", server.trim_end_matches('/')), query)
            .with_context(|| format!("--server {server}: not a URL"))?;
        let (status, body) = runtime
            .block_on(async {
                let mut client = reqwest::Client::builder().no_proxy();
                if let Some(f) = &self.ca_file {
                    let pem = std::fs::read(f).with_context(|| format!("--ca-file {}", f.display()))?;
                    for cert in reqwest::Certificate::from_pem_bundle(&pem).with_context(|| format!("--ca-file {}", f.display()))? {
                        client = client.add_root_certificate(cert);
                    }
                }
                let mut req = client.build()?.get(url).timeout(Duration::from_secs(10));
                if let Some(f) = &self.token_file {
                    let token = std::fs::read_to_string(f).with_context(|| format!("--token-file {}", f.display()))?;
                    req = req.bearer_auth(token.trim());
                }
                let resp = req.send().await?;
                anyhow::Ok((resp.status(), resp.text().await?))
            })
            .with_context(|| format!("asking mvp-ext-proc at {server}"))?;
        if !status.is_success() {
            anyhow::bail!("{server}: {status}: {}", body.trim());
        }
        Ok(body)
    }
}
