//! Fake apiservers in a test topology: what each serves and how it
//! authenticates, as `fake-apiserver` flags.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use serde_json::Value;

use super::process::{Proc, arg, wait_for};
use super::tools::{fake_bin, fixtures_dir};

#[derive(Clone, Debug)]
pub struct FakeSpec {
    pub name: String,
    pub release: String,
    pub aggregated: bool,
    /// Group-versions the old server's `/apis` lists but does not serve.
    pub listed_only: Vec<String>,
    /// Group-versions the old server serves but leaves out of `/apis`.
    pub unlisted: Vec<String>,
    /// `v2` or `v2beta1`.
    pub aggregated_version: String,
    pub bearer_token: Option<String>,
    pub tls: Option<FakeTls>,
    /// The control plane's shared membership directory (`--cluster-state`).
    pub cluster_state: Option<PathBuf>,
    /// kube's `--shutdown-delay-duration` (SIGTERM → not ready, serving).
    pub shutdown_delay: Option<Duration>,
    /// How far its clock is off (seconds, either way): its lease's
    /// `renewTime` is written by that clock.
    pub clock_skew: i64,
    /// kube-apiserver's `--http2-max-streams-per-connection` (`None`: its
    /// default, 1000).
    pub http2_max_streams: Option<u32>,
    /// Runtime threads (`--threads`; 1: one thread, as tests run many fakes
    /// at once).
    pub threads: usize,
    /// `/readyz` fails when asked with this `header=value`
    /// (`--readyz-fails-with-header`).
    pub readyz_fails_with_header: Option<String>,
    /// `/readyz` fails this long after it listens, as kube-apiserver's
    /// does while its post-start hooks run (`--starting-for`).
    pub starting_for: Option<Duration>,
}

/// A fake apiserver's TLS and authentication, as kube-apiserver's flags.
#[derive(Clone, Debug)]
pub struct FakeTls {
    pub serving: crate::pki::Leaf,
    pub client_ca: PathBuf,
    pub requestheader_ca: PathBuf,
    pub requestheader_allowed_names: Vec<String>,
    /// `TOKEN=USER[:GROUPS]`
    pub tokens: Vec<String>,
}

/// The fakes' three releases — the real discovery fixtures of v1.30, v1.33
/// and v1.37 — as `(name, release)`: the demo's and most tests' topology,
/// written once.
pub const THREE_RELEASES: [(&str, &str); 3] = [("v130", "v1.30"), ("v133", "v1.33"), ("v137", "v1.37")];

/// One fake apiserver per [`THREE_RELEASES`].
pub fn three_fakes() -> Vec<FakeSpec> {
    THREE_RELEASES.iter().map(|(n, r)| FakeSpec::new(n, r)).collect()
}

impl FakeSpec {
    pub fn new(name: &str, release: &str) -> FakeSpec {
        FakeSpec { name: name.into(), release: release.into(), aggregated: true, listed_only: vec![], unlisted: vec![], aggregated_version: "v2".into(), bearer_token: None, tls: None, cluster_state: None, shutdown_delay: None, clock_skew: 0, http2_max_streams: None, threads: 1, readyz_fails_with_header: None, starting_for: None }
    }

    /// Serves TLS and authenticates like kube-apiserver.
    pub fn with_tls(mut self, tls: FakeTls) -> FakeSpec {
        self.tls = Some(tls);
        self
    }

    /// Drains like kube-apiserver at SIGTERM: `/readyz` fails, requests are
    /// served for `delay`, then it exits.
    pub fn with_shutdown_delay(mut self, delay: Duration) -> FakeSpec {
        self.shutdown_delay = Some(delay);
        self
    }

    /// At most `n` streams on one HTTP/2 connection
    /// (`--http2-max-streams-per-connection`).
    pub fn with_http2_max_streams(mut self, n: u32) -> FakeSpec {
        self.http2_max_streams = Some(n);
        self
    }

    /// `/readyz` fails (500) when the request carries `header: value` —
    /// e.g. the requestheader user one of Envoy's two clusters health-checks
    /// as: healthy in one cluster, not in the other.
    pub fn with_readyz_failing_with_header(mut self, header: &str, value: &str) -> FakeSpec {
        self.readyz_fails_with_header = Some(format!("{header}={value}"));
        self
    }

    /// Not ready for `d` after it listens: `/readyz` fails while it
    /// "starts", as a real kube-apiserver's does for seconds.
    pub fn starting_for(mut self, d: Duration) -> FakeSpec {
        self.starting_for = Some(d);
        self
    }

    /// Serves on `n` threads (a scale run's tens of thousands of streams).
    pub fn with_threads(mut self, n: usize) -> FakeSpec {
        self.threads = n;
        self
    }

    /// Its clock runs `seconds` ahead (negative: behind).
    pub fn with_clock_skew(mut self, seconds: i64) -> FakeSpec {
        self.clock_skew = seconds;
        self
    }

    /// Requires `Authorization: Bearer <token>` (401 otherwise).
    pub fn with_token(mut self, token: &str) -> FakeSpec {
        self.bearer_token = Some(token.into());
        self
    }

    /// A Kubernetes 1.26–1.29 server: aggregated discovery only as v2beta1.
    pub fn v2beta1(mut self) -> FakeSpec {
        self.aggregated_version = "v2beta1".into();
        self
    }

    /// A server older than Kubernetes 1.26: unaggregated discovery only.
    pub fn old(mut self) -> FakeSpec {
        self.aggregated = false;
        self
    }

    pub fn unlisting_served(mut self, gv: &str) -> FakeSpec {
        self.unlisted.push(gv.into());
        self
    }

    pub fn listing_unserved(mut self, gv: &str) -> FakeSpec {
        self.listed_only.push(gv.into());
        self
    }
}

pub struct Fake {
    pub spec: FakeSpec,
    pub port: u16,
    pub proc: Proc,
}

impl Fake {
    /// The fake's own counters (`/__fake/stats`).
    pub async fn stats(&self, http: &reqwest::Client) -> Option<Value> {
        http.get(format!("{}/__fake/stats", self.url())).send().await.ok()?.json().await.ok()
    }

    /// Ends its start (`--starting-for`): `/readyz` answers 200 from now.
    /// (A TLS fake is told over a client of its own: the test's control
    /// of its own fake, not a channel under test.)
    pub async fn finish_starting(&self, http: &reqwest::Client) -> anyhow::Result<()> {
        let tls_control;
        let http = if self.spec.tls.is_some() {
            tls_control = reqwest::Client::builder().no_proxy().danger_accept_invalid_certs(true).build()?;
            &tls_control
        } else {
            http
        };
        let resp = http.post(format!("{}/__fake/started", self.url())).send().await?;
        anyhow::ensure!(resp.status().is_success(), "/__fake/started: {}", resp.status());
        Ok(())
    }

    pub fn url(&self) -> String {
        let scheme = if self.spec.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

/// A fake apiserver process started but not yet known to listen.
pub struct Starting {
    spec: FakeSpec,
    proc: Proc,
    ready_file: PathBuf,
}

/// Starts a fake apiserver on `port` (0: one it picks itself, so no other
/// process can take it between choosing and binding); [`Starting::ready`]
/// waits until it listens.
pub fn start_fake(dir: &Path, spec: FakeSpec, port: u16) -> Result<Starting> {
    let ready_file = dir.join(format!("fake-{}.ready", spec.name));
    match std::fs::remove_file(&ready_file) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    let mut args = vec![
        "--ready-file".into(),
        arg(&ready_file),
        "--name".into(),
        spec.name.clone(),
        "--release".into(),
        spec.release.clone(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--fixtures".into(),
        arg(&fixtures_dir()),
    ];
    if !spec.aggregated {
        args.push("--no-aggregated-discovery".into());
    }
    args.push("--aggregated-discovery-version".into());
    args.push(spec.aggregated_version.clone());
    if let Some(t) = &spec.bearer_token {
        args.push("--require-bearer-token".into());
        args.push(t.clone());
    }
    if let Some(t) = &spec.tls {
        args.extend([
            "--tls-cert-file".into(),
            arg(&t.serving.cert_file),
            "--tls-private-key-file".into(),
            arg(&t.serving.key_file),
            "--client-ca-file".into(),
            arg(&t.client_ca),
            "--requestheader-client-ca-file".into(),
            arg(&t.requestheader_ca),
        ]);
        if !t.requestheader_allowed_names.is_empty() {
            args.push("--requestheader-allowed-names".into());
            args.push(t.requestheader_allowed_names.join(","));
        }
        for tok in &t.tokens {
            args.push("--token".into());
            args.push(tok.clone());
        }
    }
    if let Some(d) = &spec.cluster_state {
        args.extend(["--cluster-state".into(), arg(d)]);
    }
    if let Some(d) = spec.shutdown_delay {
        args.extend(["--shutdown-delay".into(), format!("{}ms", d.as_millis())]);
    }
    if let Some(n) = spec.http2_max_streams {
        args.push(format!("--http2-max-streams-per-connection={n}"));
    }
    if spec.threads > 1 {
        args.push(format!("--threads={}", spec.threads));
    }
    if let Some(d) = spec.starting_for {
        args.extend(["--starting-for".into(), format!("{}ms", d.as_millis())]);
    }
    if let Some(h) = &spec.readyz_fails_with_header {
        args.extend(["--readyz-fails-with-header".into(), h.clone()]);
    }
    if spec.clock_skew != 0 {
        args.push(format!("--clock-skew={}", spec.clock_skew));
    }
    for gv in &spec.unlisted {
        args.push("--unlist-served-group-version".into());
        args.push(gv.clone());
    }
    for gv in &spec.listed_only {
        args.push("--list-unserved-group-version".into());
        args.push(gv.clone());
    }
    let proc = Proc::spawn(&format!("fake-{}", spec.name), dir, &fake_bin()?, &args)?;
    Ok(Starting { spec, proc, ready_file })
}

impl Starting {
    /// Waits until the fake itself says it listens (its ready file names the
    /// bound address) — not until anything accepts on the port, which another
    /// process may hold. A fake that exits first fails at once with its log
    /// (e.g. "Address already in use").
    pub async fn ready(mut self) -> Result<Fake> {
        let name = self.spec.name.clone();
        let read = wait_for(&format!("fake apiserver {name} to listen"), Duration::from_secs(20), || {
            let got = match std::fs::read_to_string(&self.ready_file) {
                Ok(addr) => Some(addr.trim().parse::<SocketAddr>().map_err(|e| anyhow!("{}: {e}", self.ready_file.display()))),
                Err(_) if !self.proc.is_running() => Some(Err(anyhow!("exited before listening"))),
                Err(_) => None,
            };
            async move { got }
        })
        .await;
        match read.and_then(|r| r) {
            Ok(addr) => Ok(Fake { spec: self.spec, port: addr.port(), proc: self.proc }),
            Err(e) => bail!("fake apiserver {name}: {e:#}\n----- {} -----\n{}", self.proc.name, self.proc.log_head(10)),
        }
    }
}

/// Which fake apiserver answered, from a resource response's body.
pub fn served_by(v: &Value) -> &str {
    v["servedBy"]["server"].as_str().unwrap_or("<not served by a fake>")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port another process listens on does not pass for the fake's: the
    /// start fails with the fake's own error (a connect to the port would
    /// have succeeded).
    #[tokio::test]
    async fn a_fake_whose_port_is_taken_fails_to_start_with_its_error() {
        let dir = tempfile::tempdir().unwrap();
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let err = start_fake(dir.path(), FakeSpec::new("v130", "v1.30"), port).unwrap().ready().await.err().expect("started on a taken port");
        assert!(format!("{err:#}").contains("Address already in use"), "{err:#}");
    }

    /// Port 0: the fake picks a free port and the harness learns it.
    #[tokio::test]
    async fn a_fake_on_port_zero_reports_the_port_it_serves() {
        let dir = tempfile::tempdir().unwrap();
        let fake = start_fake(dir.path(), FakeSpec::new("v137", "v1.37"), 0).unwrap().ready().await.unwrap();
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let v: Value = http.get(format!("{}/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests", fake.url())).send().await.unwrap().json().await.unwrap();
        assert_eq!(served_by(&v), "v137");
    }
}
