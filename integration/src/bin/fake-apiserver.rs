//! A fake kube-apiserver serving one release's real discovery documents.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use anyhow::Context;
use clap::Parser;
use integration::fake::auth::AuthConfig;
use integration::fake::fixtures::Documents;
use integration::fake::tls::TlsServing;
use integration::fake::membership::ClusterState;
use integration::fake::server::{FakeState, router};

/// SIGTERM as kube-apiserver takes it: not ready and out of the Endpoints
/// at once, still serving for the shutdown delay, then gone (watches and
/// connections end with the process).
async fn graceful_shutdown(state: FakeState, delay: std::time::Duration) {
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else { return };
    term.recv().await;
    tracing::info!(?delay, "SIGTERM: /readyz fails, serving until the shutdown delay ends");
    state.shutting_down.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(c) = &state.cluster {
        c.leave();
    }
    tokio::time::sleep(delay).await;
    tracing::info!("shutdown delay over: stopping");
    std::process::exit(0);
}

#[derive(Parser)]
#[command(name = "fake-apiserver", about = "Serves one Kubernetes release's discovery documents like kube-apiserver")]
struct Args {
    /// Name reported in every resource response (x-fake-apiserver header and body).
    #[arg(long)]
    name: String,
    /// Release folder under --fixtures, e.g. v1.30.
    #[arg(long)]
    release: String,
    #[arg(long, value_name = "ADDR:PORT")]
    listen: SocketAddr,
    /// Folder holding <release>/{api,apis,api__v1}.json.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/discovery"))]
    fixtures: PathBuf,
    /// Behave like a server older than Kubernetes 1.26: no aggregated discovery.
    #[arg(long)]
    no_aggregated_discovery: bool,
    /// List GROUP/VERSION in the unaggregated /apis without serving it (as a
    /// cluster-wide APIService served by another apiserver would be).
    #[arg(long = "list-unserved-group-version", value_name = "GROUP/VERSION")]
    listed_only: Vec<String>,
    /// Without aggregated discovery: leave this served group-version out of
    /// `/apis` (repeatable), as a v1.20 server's list after another server
    /// deleted its APIService.
    #[arg(long = "unlist-served-group-version", value_name = "GROUP/VERSION")]
    unlisted: Vec<String>,
    /// Aggregated discovery version served: v2 (Kubernetes 1.30+) or v2beta1 (1.26–1.29).
    #[arg(long, default_value = "v2", value_parser = ["v2", "v2beta1"])]
    aggregated_discovery_version: String,
    /// Require `Authorization: Bearer TOKEN` on every API request (401 otherwise).
    #[arg(long, value_name = "TOKEN")]
    require_bearer_token: Option<String>,
    /// A bearer token and who it authenticates: TOKEN=USER[:GROUP,GROUP…].
    #[arg(long = "token", value_name = "TOKEN=USER[:GROUPS]")]
    tokens: Vec<String>,
    /// Serve TLS with this certificate (and --tls-private-key-file).
    #[arg(long, value_name = "FILE")]
    tls_cert_file: Option<PathBuf>,
    #[arg(long, value_name = "FILE")]
    tls_private_key_file: Option<PathBuf>,
    /// Client certificates chaining to this CA authenticate as CN / O.
    #[arg(long, value_name = "FILE")]
    client_ca_file: Option<PathBuf>,
    /// X-Remote-* headers are trusted only on connections whose client
    /// certificate chains to this CA (and whose CN is allowed).
    #[arg(long, value_name = "FILE")]
    requestheader_client_ca_file: Option<PathBuf>,
    #[arg(long, value_delimiter = ',')]
    requestheader_allowed_names: Vec<String>,
    /// Directory the control plane's fakes share as their etcd: this one
    /// registers in the `default/kubernetes` Endpoints and renews its
    /// identity Lease there, and serves both (list and watch).
    #[arg(long, value_name = "DIR")]
    cluster_state: Option<PathBuf>,
    /// kube-apiserver's --shutdown-delay-duration: at SIGTERM, /readyz
    /// fails and the endpoint is withdrawn at once, requests are served for
    /// this long, then the listener closes.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "0s")]
    shutdown_delay: std::time::Duration,
    /// Seconds this apiserver's clock runs ahead (negative: behind), as
    /// its lease's `renewTime` shows (control-plane nodes' clocks differ).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    clock_skew: i64,
    /// Once listening (and registered), write the bound address here, so a
    /// harness waits on this fake itself rather than on any process that
    /// accepts on the port (`--listen` port 0 picks a free one).
    #[arg(long, value_name = "FILE")]
    ready_file: Option<PathBuf>,
    /// kube-apiserver's flag: streams one HTTP/2 client connection may have
    /// open at once (announced in SETTINGS); kube-apiserver's default — 100
    /// since its HTTP/2 rapid-reset fix (1.29; 250 before: v1.20 sends 250),
    /// read off real 1.34 and 1.37 servers' SETTINGS.
    #[arg(long, default_value_t = 100)]
    http2_max_streams_per_connection: u32,
    /// Runtime threads: 1 (the default) serves on the main thread, as the
    /// tests run many fakes at once; a scale run's tens of thousands of
    /// streams want more.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// `/readyz` fails (500) when the request carries this header with this
    /// value: healthy to one of Envoy's clusters, not to the other (which
    /// health-checks as a requestheader user).
    #[arg(long, value_name = "HEADER=VALUE")]
    readyz_fails_with_header: Option<String>,
    /// `/readyz` fails for this long after the listener opens, as
    /// kube-apiserver's does while its post-start hooks run (requests are
    /// served meanwhile).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "0s")]
    starting_for: std::time::Duration,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let runtime = match a.threads {
        0 | 1 => tokio::runtime::Builder::new_current_thread().enable_all().build()?,
        n => tokio::runtime::Builder::new_multi_thread().worker_threads(n).enable_all().build()?,
    };
    runtime.block_on(serve(a))
}

async fn serve(a: Args) -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_writer(std::io::stderr).init();
    let docs = Documents::load(&a.fixtures, &a.release)?;
    let mut auth = AuthConfig::default();
    if let Some(t) = &a.require_bearer_token {
        auth.tokens.insert(t.clone(), ("token-user".into(), vec![]));
    }
    for spec in &a.tokens {
        let (token, who) = spec.split_once('=').context("--token wants TOKEN=USER[:GROUPS]")?;
        let (user, groups) = who.split_once(':').map(|(u, g)| (u, g.split(',').map(str::to_string).collect())).unwrap_or((who, vec![]));
        auth.tokens.insert(token.to_string(), (user.to_string(), groups));
    }
    auth.requestheader_allowed_names = a.requestheader_allowed_names.clone();
    auth.required = !auth.tokens.is_empty() || a.client_ca_file.is_some() || a.requestheader_client_ca_file.is_some();
    let state = FakeState {
        name: a.name.clone(),
        aggregated: !a.no_aggregated_discovery,
        fixtures: a.fixtures.clone(),
        docs: Arc::new(RwLock::new(Arc::new(docs))),
        listed_only: a.listed_only,
        unlisted: a.unlisted,
        aggregated_version: a.aggregated_discovery_version.clone(),
        stats: Default::default(),
        apis_override: Default::default(),
        hang_discovery: Default::default(),
        unavailable: Default::default(),
        fail_next: Default::default(),
        auth,
        cluster: None,
        shutting_down: Default::default(),
        readyz_fails_with_header: match &a.readyz_fails_with_header {
            Some(hv) => {
                let (h, v) = hv.split_once('=').context("--readyz-fails-with-header wants HEADER=VALUE")?;
                Some((h.to_ascii_lowercase(), v.to_string()))
            }
            None => None,
        },
        starting_until: Default::default(),
    };
    let listener = tokio::net::TcpListener::bind(a.listen).await.with_context(|| format!("listening on {}", a.listen))?;
    let listen = listener.local_addr().context("the bound address")?;
    let mut state = state;
    *state.starting_until.lock().unwrap_or_else(|p| p.into_inner()) = (!a.starting_for.is_zero()).then(|| std::time::Instant::now() + a.starting_for);
    if let Some(dir) = &a.cluster_state {
        state.cluster = Some(ClusterState::join(dir, &a.name, listen, a.clock_skew).with_context(|| format!("--cluster-state {}", dir.display()))?);
    }
    tokio::spawn(graceful_shutdown(state.clone(), a.shutdown_delay));
    tracing::info!(name = %a.name, release = %a.release, %listen, aggregated = !a.no_aggregated_discovery, "fake apiserver serving");
    if let Some(path) = &a.ready_file {
        // Renamed into place: a reader never sees a half-written address.
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, listen.to_string()).and_then(|()| std::fs::rename(&tmp, path)).with_context(|| format!("--ready-file {}", path.display()))?;
    }
    let tls = match (&a.tls_cert_file, &a.tls_private_key_file) {
        (Some(cert), Some(key)) => Some(Arc::new(TlsServing::new(cert, key, a.client_ca_file.as_deref(), a.requestheader_client_ca_file.as_deref())?)),
        _ => None,
    };
    let stats = state.stats.clone();
    integration::fake::serve(listener, router(state), tls, a.http2_max_streams_per_connection, stats).await
}
