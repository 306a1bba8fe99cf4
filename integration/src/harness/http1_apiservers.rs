//! Apiservers the project did not write: `integration/tests/python/
//! http1_apiserver.py`, Python's standard `http.server` — plaintext HTTP/1.1
//! only, like `kubectl proxy` or kube's old insecure port — serving one
//! release's fixtures. The project's own fake takes h2c as well, so a front
//! door that assumed HTTP/2 of every plaintext server passed against it.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use super::process::{Proc, arg, wait_for};
use super::tools::{fixtures_dir, python, workspace_root};

pub struct Http1Apiserver {
    pub name: String,
    pub url: String,
    pub proc: Proc,
}

impl Http1Apiserver {
    /// Starts one serving `release`'s fixtures (`"v1.37"`) on a free port.
    pub async fn start(dir: &Path, name: &str, release: &str) -> Result<Http1Apiserver> {
        let script = workspace_root().join("integration/tests/python/http1_apiserver.py");
        let args = vec![arg(&script), "--name".into(), name.into(), "--fixtures".into(), arg(&fixtures_dir().join(release))];
        let proc = Proc::spawn(&format!("http1-{name}"), dir, &python()?, &args)?;
        let port = wait_for(&format!("{name} (http.server) to listen"), Duration::from_secs(15), || async {
            proc.log_head(20).lines().find_map(|l| l.strip_prefix("listening ")?.trim().parse::<u16>().ok())
        })
        .await
        .with_context(|| proc.log_tail(20))?;
        Ok(Http1Apiserver { name: name.into(), url: format!("http://127.0.0.1:{port}"), proc })
    }

    /// Three of them, v1.30, v1.33 and v1.37, named as the fakes are.
    pub async fn three(dir: &Path) -> Result<Vec<Http1Apiserver>> {
        let mut out = Vec::new();
        for (name, release) in [("v130", "v1.30"), ("v133", "v1.33"), ("v137", "v1.37")] {
            out.push(Http1Apiserver::start(dir, name, release).await?);
        }
        Ok(out)
    }
}
