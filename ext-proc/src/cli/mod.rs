//! `mvp-ext-proc`'s command line: flags named after kube-apiserver's where
//! the concept is the same, checked and turned into the options of
//! [`crate::serve`] and [`crate::envoy_config`].

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

use crate::apidiscovery::{go_json, protobuf};
use crate::apiservers::ApiserverSpec;
use crate::discover::DiscoveryOptions;
use crate::serve::ServeOptions;
use crate::tls::{DEFAULT_PEER_SERVER_NAME, PeerTls, RequestHeaderNames};

mod certs;
mod daemon;
mod explain;
mod readiness;
mod replica_args;
mod envoy_config;

use envoy_config::EnvoyConfigArgs;
pub use envoy_config::envoy_config_yaml;

#[derive(Parser)]
#[command(name = "mvp-ext-proc", version, about = "Mixed-version front door for kube-apiservers: discovery, routing table and Envoy config")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Poll every apiserver's discovery and serve the routing table to Envoy.
    Serve(ServeArgs),
    /// Print a complete Envoy bootstrap for these apiservers.
    EnvoyConfig(EnvoyConfigArgs),
    /// Write a certificate set for the control channel (Envoy ⇄
    /// mvp-ext-proc over TCP): a CA, mvp-ext-proc's serving certificate,
    /// Envoy's client certificate. Again on the same directory: new leaves
    /// under the same CA (a rotation).
    Certs(certs::CertsArgs),
    /// Decode a protobuf APIGroupDiscoveryList (Kubernetes envelope) from
    /// standard input and print it as JSON.
    DecodeDiscovery,
    /// Ask a running mvp-ext-proc what the front door does with a request,
    /// and why: its classification, which apiservers serve it, the decision.
    Explain(explain::ExplainArgs),
    /// Ask a running mvp-ext-proc which APIs would be served by no
    /// apiserver if members left: `--remove MEMBER`, `--release X.Y`, or
    /// (neither) once the upgrade in progress finishes. Exit status 0:
    /// nothing lost; 1: something would be; 2: a member was not read yet.
    Readiness(readiness::ReadinessArgs),
}

/// How the front door reaches apiservers over TLS (kube-apiserver's names).
#[derive(Parser, Clone)]
struct PeerTlsArgs {
    /// CA bundle that apiservers' serving certificates must chain to. Required
    /// for https:// apiservers; they are never contacted unverified.
    #[arg(long, value_name = "FILE")]
    peer_ca_file: Option<std::path::PathBuf>,
    /// Client certificate the front door presents to apiservers; they trust it
    /// through --requestheader-client-ca-file / --requestheader-allowed-names.
    #[arg(long, value_name = "FILE")]
    proxy_client_cert_file: Option<std::path::PathBuf>,
    #[arg(long, value_name = "FILE")]
    proxy_client_key_file: Option<std::path::PathBuf>,
    /// Name sent as SNI and required in apiservers' certificates.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_PEER_SERVER_NAME)]
    peer_server_name: String,
}

impl PeerTlsArgs {
    fn load(&self) -> anyhow::Result<Option<PeerTls>> {
        Ok(PeerTls::load(
            self.peer_ca_file.as_deref(),
            self.proxy_client_cert_file.as_deref(),
            self.proxy_client_key_file.as_deref(),
            &self.peer_server_name,
        )?)
    }
}

/// Header names for forwarded identity, as the apiservers' own
/// --requestheader-* flags name them.
#[derive(Parser, Clone)]
struct RequestHeaderArgs {
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-User")]
    requestheader_username_headers: Vec<String>,
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-Group")]
    requestheader_group_headers: Vec<String>,
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-Extra-")]
    requestheader_extra_headers_prefix: Vec<String>,
}

impl RequestHeaderArgs {
    fn names(&self) -> anyhow::Result<RequestHeaderNames> {
        Ok(RequestHeaderNames::from_flags(
            &self.requestheader_username_headers,
            &self.requestheader_group_headers,
            &self.requestheader_extra_headers_prefix,
        )?)
    }
}

#[derive(Parser)]
struct ServeArgs {
    /// An apiserver behind the front door, NAME=URL (repeat for each): the
    /// static seed. Always a member; with --membership, others join and
    /// leave as the cluster says.
    #[arg(long = "apiserver", value_name = "NAME=URL", required_unless_present = "membership")]
    apiservers: Vec<ApiserverSpec>,
    /// Also learn the apiservers from the cluster: `endpoints` (the
    /// default/kubernetes Endpoints, every release) and/or `leases` (the
    /// apiserver identity Leases in kube-system, 1.26+, with the Mixed
    /// Version Proxy's peer-advertise-address annotation).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "endpoints,leases")]
    membership: Vec<crate::membership::kube::Source>,
    /// Kubeconfig for reading the membership (its server: any apiserver or
    /// load balancer that reaches one); without it, in-cluster
    /// ServiceAccount credentials.
    #[arg(long, value_name = "FILE")]
    membership_kubeconfig: Option<std::path::PathBuf>,
    /// An identity lease not renewed for this long is gone (kube renews
    /// every 10 s).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    lease_stale_after: Duration,
    /// Address for the gRPC services Envoy calls (routing table, ext_proc for
    /// /apis, ADS): IP:PORT, or unix:/PATH for a Unix socket (an Envoy on the
    /// same host or in the same pod). Repeat to serve on several.
    #[arg(long, value_name = "ADDR:PORT|unix:/PATH", required = true)]
    grpc_listen: Vec<crate::grpc::listen::GrpcListen>,
    /// The gRPC port's serving certificate (PEM; the chain, leaf first).
    /// With --tls-private-key-file and --client-ca-file, every TCP
    /// --grpc-listen serves mutual TLS only: Envoy presents a certificate
    /// signed by --client-ca-file (`envoy-config --ext-proc-cert-file`) or
    /// gets a failed handshake. The files are re-read every 2 s (rotation
    /// without a restart). Unix sockets stay plaintext.
    #[arg(long, value_name = "FILE", requires_all = ["tls_private_key_file", "client_ca_file"])]
    tls_cert_file: Option<std::path::PathBuf>,
    /// The key of --tls-cert-file (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert_file")]
    tls_private_key_file: Option<std::path::PathBuf>,
    /// CA bundle (PEM) the gRPC clients' certificates must chain to.
    #[arg(long, value_name = "FILE", requires = "tls_cert_file")]
    client_ca_file: Option<std::path::PathBuf>,
    /// Address for /metrics, /healthz, /readyz and /table.
    #[arg(long, value_name = "ADDR:PORT")]
    metrics_listen: Option<SocketAddr>,
    /// How often every apiserver's discovery is read. Each round is two
    /// conditional GETs per apiserver (304 when unchanged); servers without
    /// aggregated discovery cost one GET per group-version, so raise it for
    /// many of those.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "500ms")]
    refresh_interval: Duration,
    /// File that keeps every apiserver's last known API set across restarts
    /// (written on change). Without it, an apiserver that is down when
    /// mvp-ext-proc starts is unknown until it answers.
    #[arg(long, value_name = "FILE")]
    state_file: Option<std::path::PathBuf>,
    /// How long the last known API set of an apiserver that left the
    /// control plane is kept: meanwhile requests for APIs only it served get
    /// the 503 Status (it may be restarting or being replaced), afterwards
    /// the 404 they then are.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10m")]
    departed_retention: Duration,
    /// No longer used: a member's last known API set is kept for as long as
    /// it is a member (accepted so existing command lines keep working).
    #[arg(long, hide = true, value_parser = humantime::parse_duration)]
    unhealthy_retention: Option<Duration>,
    /// Timeout of each discovery request.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    discovery_timeout: Duration,
    /// Largest discovery document accepted, in bytes.
    #[arg(long, default_value_t = 64 << 20)]
    max_discovery_bytes: usize,
    /// File holding a bearer token sent with discovery requests (e.g. a
    /// ServiceAccount token; discovery is readable by every authenticated
    /// user through kube's system:discovery role).
    #[arg(long, value_name = "FILE")]
    discovery_token_file: Option<std::path::PathBuf>,
    /// End each Envoy's ADS stream after about this long (0: never), so an
    /// Envoy that failed over to another replica comes back to its
    /// preferred one; Envoy keeps its configuration while it reconnects.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30m")]
    ads_max_stream_age: Duration,
    /// The most ADS streams served at once (one per Envoy); beyond it a new
    /// one is refused RESOURCE_EXHAUSTED and Envoy retries with backoff.
    #[arg(long, default_value_t = mvp_contract::limits::MAX_ADS_STREAMS)]
    max_ads_streams: usize,
    /// The most GetTable long polls held at once; beyond it a call is
    /// answered at once, as one that allows no wait.
    #[arg(long, default_value_t = mvp_contract::limits::MAX_HELD_TABLE_CALLS)]
    max_held_table_calls: usize,
    /// Streams Envoy opens at most on one HTTP/2 connection to an apiserver:
    /// the apiservers' `--http2-max-streams-per-connection` (kube's default
    /// 100 since 1.29; 250 before). Envoy follows a lower value a server
    /// announces on a connection, but fills a new connection by this bound
    /// before the server's SETTINGS arrive: set it when that flag is lowered
    /// on the apiservers — or raise both together — or the streams past it
    /// are refused (and retried on another apiserver only).
    #[arg(long, default_value_t = crate::xds::APISERVER_HTTP2_MAX_STREAMS, value_parser = clap::value_parser!(u32).range(1..=32768))]
    apiserver_http2_max_streams_per_connection: u32,
    /// The http:// apiservers take HTTP/2 with prior knowledge (h2c), so
    /// every request a worker sends one of them shares a connection.
    /// Without it they are spoken to in HTTP/1.1 — what kube-apiserver's old
    /// insecure port, `kubectl proxy` and plain proxies speak — one
    /// connection per request in flight. mvp-ext-proc's own discovery then
    /// speaks h2c too, so a member that does not take it is never opened
    /// (its error says why) instead of answering every request with a 502.
    /// https:// apiservers negotiate HTTP/2 by ALPN whatever this says.
    #[arg(long)]
    apiserver_h2c: bool,
    /// How long an apiserver may take to answer an HTTP/2 PING (Envoy sends
    /// one every second on each connection) before the connection is
    /// closed: the reads in flight on it — not yet answered — are tried on
    /// another apiserver that serves them, its watches end and are made
    /// again. A hung apiserver (a stopped process, a lost network) never
    /// answers; a slow one (a slow etcd, a long LIST) does at once, so its
    /// requests are never moved. 0s: no PINGs.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    apiserver_ping_timeout: Duration,
    /// Protect the operator endpoints (--metrics-listen: /metrics, /table,
    /// /debug/route, the status page) as kube's components protect theirs:
    /// a bearer token reviewed by this cluster (TokenReview), its user
    /// allowed to get the path (SubjectAccessReview, non-resource URL);
    /// /healthz and /readyz stay open. The kubeconfig needs the
    /// system:auth-delegator ClusterRole.
    #[arg(long, value_name = "FILE", conflicts_with = "delegated_auth_in_cluster")]
    authentication_kubeconfig: Option<std::path::PathBuf>,
    /// The same with the pod's ServiceAccount (in-cluster credentials).
    #[arg(long)]
    delegated_auth_in_cluster: bool,
    /// Serve --metrics-listen over HTTPS with the --tls-cert-file
    /// certificate (re-read with it; no client certificate asked): bearer
    /// tokens never cross the network in clear, as on kube's components'
    /// secure port. Probes then use HTTPS.
    #[arg(long, requires = "tls_cert_file")]
    metrics_tls: bool,
    #[command(flatten)]
    replicas: replica_args::ReplicaArgs,
    #[command(flatten)]
    peer_tls: PeerTlsArgs,
    #[command(flatten)]
    requestheader: RequestHeaderArgs,
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only on a terminal: escape codes in a log file are noise.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let done = |r: anyhow::Result<()>| r.map(|()| ExitCode::SUCCESS);
    let result = match cli.command {
        Command::Serve(args) => done(serve(args)),
        Command::EnvoyConfig(args) => done(envoy_config::envoy_config(args)),
        Command::Certs(args) => done(certs::certs(args)),
        Command::DecodeDiscovery => done(decode_discovery()),
        Command::Explain(args) => done(explain::explain(args)),
        // An upgrade script tells "would break" (1) from "cannot tell" (2):
        // a question that could not be asked or answered — a replica
        // unreachable, a 503 while its first round runs, a member that is
        // not there — is the latter, never a verdict.
        Command::Readiness(args) => readiness::readiness(args).or_else(|e| {
            eprintln!("mvp-ext-proc readiness: cannot tell: {e:#}");
            Ok(ExitCode::from(2))
        }),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mvp-ext-proc: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(a: ServeArgs) -> anyhow::Result<()> {
    crate::building::memory::configure();
    if a.unhealthy_retention.is_some() {
        tracing::warn!("--unhealthy-retention is ignored: an apiserver's last known API set is kept for as long as it is configured");
    }
    let requestheader = a.requestheader.names()?;
    crate::serve::serve(ServeOptions {
        peer_tls: a.peer_tls.load()?,
        apiservers: a.apiservers,
        grpc_tls: grpc_tls(a.tls_cert_file, a.tls_private_key_file, a.client_ca_file, &a.grpc_listen),
        grpc_listen: a.grpc_listen,
        metrics_listen: a.metrics_listen,
        refresh_interval: a.refresh_interval,
        state_file: a.state_file,
        departed_retention: a.departed_retention,
        membership: (!a.membership.is_empty()).then(|| crate::membership::kube::KubeOptions {
            sources: a.membership.clone(),
            kubeconfig: a.membership_kubeconfig.clone(),
            lease_stale_after: a.lease_stale_after,
        }),
        discovery: DiscoveryOptions { timeout: a.discovery_timeout, max_document_bytes: a.max_discovery_bytes, plaintext_h2c: a.apiserver_h2c },
        discovery_token_file: a.discovery_token_file,
        username_header: requestheader.username_header().to_string(),
        group_header: requestheader.group_header().to_string(),
        ads_max_stream_age: Some(a.ads_max_stream_age),
        max_ads_streams: a.max_ads_streams,
        max_held_table_calls: a.max_held_table_calls,
        apiserver_http2_max_streams: a.apiserver_http2_max_streams_per_connection,
        apiserver_h2c: a.apiserver_h2c,
        apiserver_ping_timeout: a.apiserver_ping_timeout,
        metrics_tls: a.metrics_tls,
        replicas: a.replicas.options(),
        delegated_auth: match (a.authentication_kubeconfig, a.delegated_auth_in_cluster) {
            (Some(path), _) => Some(Some(path)),
            (None, true) => Some(None),
            (None, false) => None,
        },
    })
}

/// `mvp-ext-proc certs --out DIR --server-ip 127.0.0.1` (for tests).
#[cfg(test)]
pub fn write_cert_set(dir: &std::path::Path) {
    let argv = ["mvp-ext-proc", "certs", "--out"].into_iter().map(String::from).chain([dir.display().to_string(), "--server-ip".into(), "127.0.0.1".into()]);
    let Command::Certs(a) = Cli::try_parse_from(argv).unwrap().command else { unreachable!() };
    certs::certs(a).unwrap();
}

/// The gRPC port's TLS files, all three or none (clap checks it). A TCP
/// listener beyond loopback without them is served, as before, but said
/// loudly: anyone who reaches it reads the apiservers and can hold streams.
fn grpc_tls(
    cert: Option<std::path::PathBuf>,
    key: Option<std::path::PathBuf>,
    ca: Option<std::path::PathBuf>,
    listen: &[crate::grpc::listen::GrpcListen],
) -> Option<crate::grpc::tls::GrpcTlsFiles> {
    use crate::grpc::listen::GrpcListen;
    match (cert, key, ca) {
        (Some(cert_file), Some(key_file), Some(client_ca_file)) => Some(crate::grpc::tls::GrpcTlsFiles { cert_file, key_file, client_ca_file }),
        _ => {
            for l in listen {
                if let GrpcListen::Tcp(a) = l
                    && !a.ip().is_loopback()
                {
                    tracing::warn!(listen = %a, "gRPC on TCP beyond loopback without TLS: anyone who reaches it can read the apiservers' addresses and the routing table and open ADS streams; give --tls-cert-file, --tls-private-key-file and --client-ca-file (mvp-ext-proc certs makes a set)");
                }
            }
            None
        }
    }
}

fn decode_discovery() -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let mut body = Vec::new();
    std::io::stdin().read_to_end(&mut body).context("reading standard input")?;
    let list = protobuf::decode(&body).map_err(anyhow::Error::msg)?;
    let mut out = go_json(&list);
    out.push(b'\n');
    std::io::stdout().write_all(&out).context("writing standard output")?;
    Ok(())
}
