//! `mvp-ext-proc`: the control half of the mvp-envoy front door.
//!
//! - `serve`: apiservers → discover → table → publish (gRPC to Envoy's wasm
//!   refresher), plus metrics.
//! - `envoy-config`: prints the Envoy bootstrap for the same apiservers.

mod apidiscovery;
mod merge;
mod apiservers;
mod discover;
mod envoy_config;
mod health;
mod metrics;
mod publish;
mod rewrite;
mod sync;
mod table;
mod tls;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

use apiservers::ApiserverSpec;

/// The user mvp-ext-proc's discovery requests carry when it authenticates with
/// the proxy client certificate. Apiservers authorize it like any
/// authenticated user: kube's system:discovery role, bound to
/// system:authenticated, allows /api and /apis.
const DISCOVERY_USER: &str = "system:mvp-envoy:discovery";

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
    /// Decode a protobuf APIGroupDiscoveryList (Kubernetes envelope) from
    /// standard input and print it as JSON.
    DecodeDiscovery,
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
    #[arg(long, value_name = "NAME", default_value = tls::DEFAULT_PEER_SERVER_NAME)]
    peer_server_name: String,
}

impl PeerTlsArgs {
    fn load(&self) -> anyhow::Result<Option<tls::PeerTls>> {
        Ok(tls::PeerTls::load(
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
    fn names(&self) -> anyhow::Result<envoy_config::RequestHeaderNames> {
        let lower = |v: &[String], flag: &str| -> anyhow::Result<Vec<String>> {
            let out: Vec<String> = v.iter().map(|s| s.trim().to_ascii_lowercase()).filter(|s| !s.is_empty()).collect();
            if out.is_empty() || out.iter().any(|h| !h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')) {
                anyhow::bail!("{flag}: expected HTTP header names, got {v:?}");
            }
            Ok(out)
        };
        Ok(envoy_config::RequestHeaderNames {
            username: lower(&self.requestheader_username_headers, "--requestheader-username-headers")?,
            group: lower(&self.requestheader_group_headers, "--requestheader-group-headers")?,
            extra_prefix: lower(&self.requestheader_extra_headers_prefix, "--requestheader-extra-headers-prefix")?,
        })
    }
}

#[derive(Parser)]
struct ServeArgs {
    /// An apiserver behind the front door, NAME=URL (repeat for each).
    #[arg(long = "apiserver", value_name = "NAME=URL", required = true)]
    apiservers: Vec<ApiserverSpec>,
    /// Address for the gRPC services Envoy calls (routing table, ext_proc for /apis).
    #[arg(long, value_name = "ADDR:PORT")]
    grpc_listen: SocketAddr,
    /// Address for /metrics, /healthz, /readyz and /table.
    #[arg(long, value_name = "ADDR:PORT")]
    metrics_listen: Option<SocketAddr>,
    /// How often every apiserver's discovery is read. Each round is two
    /// conditional GETs per apiserver (304 when unchanged); servers without
    /// aggregated discovery cost one GET per group-version, so raise it for
    /// many of those.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "500ms")]
    refresh_interval: Duration,
    /// How long a failing apiserver's last good discovery keeps routing.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5m")]
    unhealthy_retention: Duration,
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
    #[command(flatten)]
    peer_tls: PeerTlsArgs,
    #[command(flatten)]
    requestheader: RequestHeaderArgs,
}

#[derive(Parser)]
struct EnvoyConfigArgs {
    /// An apiserver behind the front door, NAME=URL (repeat for each).
    #[arg(long = "apiserver", value_name = "NAME=URL", required = true)]
    apiservers: Vec<ApiserverSpec>,
    /// Address clients connect to.
    #[arg(long, value_name = "ADDR:PORT")]
    listen: SocketAddr,
    /// Path of the built mvp_wasm_filter.wasm, as Envoy will see it.
    #[arg(long, value_name = "PATH")]
    wasm: String,
    /// mvp-ext-proc's --grpc-listen address as Envoy reaches it (IP:PORT or HOST:PORT).
    #[arg(long, value_name = "HOST:PORT")]
    ext_proc: String,
    /// Envoy admin address.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9901")]
    admin: SocketAddr,
    /// How often Envoy's refresher asks mvp-ext-proc for a newer table.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "200ms")]
    table_poll_interval: Duration,
    /// Serving certificate of the front door; with --tls-private-key-file,
    /// clients connect over TLS (HTTP/2 and HTTP/1.1).
    #[arg(long, value_name = "FILE")]
    tls_cert_file: Option<std::path::PathBuf>,
    #[arg(long, value_name = "FILE")]
    tls_private_key_file: Option<std::path::PathBuf>,
    /// CA that client certificates must chain to; a verified certificate's CN
    /// and O are forwarded as the requestheader user and groups.
    #[arg(long, value_name = "FILE")]
    client_ca_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    peer_tls: PeerTlsArgs,
    #[command(flatten)]
    requestheader: RequestHeaderArgs,
    /// Longest Envoy waits for mvp-ext-proc in each /apis phase before it
    /// serves the apiserver's own (unmerged) document instead.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "250ms")]
    ext_proc_message_timeout: Duration,
    /// Write to this file instead of standard output.
    #[arg(long, short, value_name = "FILE")]
    output: Option<std::path::PathBuf>,
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let result = match cli.command {
        Command::Serve(args) => serve(args),
        Command::EnvoyConfig(args) => envoy_config(args),
        Command::DecodeDiscovery => decode_discovery(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mvp-ext-proc: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn envoy_config(a: EnvoyConfigArgs) -> anyhow::Result<()> {
    let command = rendering_command(std::env::args().skip(1));
    let front_tls = tls::FrontTls::load(a.tls_cert_file.as_deref(), a.tls_private_key_file.as_deref(), a.client_ca_file.as_deref())?;
    let opts = envoy_config::EnvoyConfigOptions {
        front_tls,
        peer_tls: a.peer_tls.load()?,
        requestheader: a.requestheader.names()?,
        apiservers: a.apiservers,
        listen: a.listen,
        admin: a.admin,
        wasm: a.wasm,
        ext_proc: a.ext_proc,
        table_poll_interval: a.table_poll_interval,
        ext_proc_message_timeout: a.ext_proc_message_timeout,
    };
    let yaml = envoy_config::render_yaml(&opts, &command)?;
    match a.output {
        Some(path) => std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?,
        None => print!("{yaml}"),
    }
    Ok(())
}

fn decode_discovery() -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let mut body = Vec::new();
    std::io::stdin().read_to_end(&mut body).context("reading standard input")?;
    let list = merge::document::decode_protobuf(&body).map_err(anyhow::Error::msg)?;
    let mut out = apidiscovery::go_json(&list);
    out.push(b'\n');
    std::io::stdout().write_all(&out).context("writing standard output")?;
    Ok(())
}

/// The command line recorded in the rendered file: argv[0] varies by install
/// path and the output file is not part of what was rendered.
fn rendering_command(args: impl Iterator<Item = String>) -> String {
    let mut out = vec!["mvp-ext-proc".to_string()];
    let mut skip_value = false;
    for a in args {
        if skip_value {
            skip_value = false;
        } else if a == "--output" || a == "-o" {
            skip_value = true;
        } else if !a.starts_with("--output=") {
            out.push(a);
        }
    }
    out.join(" ")
}

fn serve(a: ServeArgs) -> anyhow::Result<()> {
    apiservers::validate_set(&a.apiservers).map_err(anyhow::Error::msg)?;
    if a.refresh_interval.is_zero() {
        anyhow::bail!("--refresh-interval must be greater than 0");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(run(a))
}

async fn run(a: ServeArgs) -> anyhow::Result<()> {
    let metrics = metrics::Metrics::new();
    let mut default_headers = reqwest::header::HeaderMap::new();
    if let Some(path) = &a.discovery_token_file {
        let token = std::fs::read_to_string(path)
            .with_context(|| format!("--discovery-token-file {}: cannot read", path.display()))?;
        let token = token.trim();
        if token.is_empty() {
            anyhow::bail!("--discovery-token-file {}: the file is empty", path.display());
        }
        let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
            .with_context(|| format!("--discovery-token-file {}: not a valid token", path.display()))?;
        value.set_sensitive(true);
        default_headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    let default_headers_for_tls = default_headers.clone();
    let client = reqwest::Client::builder()
        .default_headers(default_headers)
        .user_agent(concat!("mvp-ext-proc/", env!("CARGO_PKG_VERSION")))
        .no_proxy()
        .connect_timeout(Duration::from_secs(3))
        .pool_idle_timeout(Duration::from_secs(90))
        .build()
        .context("building the discovery HTTP client")?;
    let peer_tls = a.peer_tls.load()?;
    envoy_config::check_schemes(&a.apiservers, peer_tls.as_ref())?;
    let names = a.requestheader.names()?;
    let transport = match &peer_tls {
        None => discover::Transport::Plain(client),
        Some(p) => discover::Transport::Tls {
            config: Arc::new(p.client_config()?),
            server_name: p.server_name.clone(),
            // With the proxy client certificate the apiserver authenticates us
            // through requestheader: name who is asking.
            identity: p.client.as_ref().map(|_| (names.username[0].clone(), DISCOVERY_USER.to_string())),
            headers: default_headers_for_tls,
        },
    };
    let options = sync::SyncOptions {
        interval: a.refresh_interval,
        retention: a.unhealthy_retention,
        discovery: discover::DiscoveryOptions { timeout: a.discovery_timeout, max_document_bytes: a.max_discovery_bytes },
    };
    let (syncer, published) = sync::Syncer::new(&a.apiservers, transport, options, metrics.clone());

    let grpc = tokio::net::TcpListener::bind(a.grpc_listen)
        .await
        .with_context(|| format!("--grpc-listen {}: cannot listen", a.grpc_listen))?;
    let admin = match a.metrics_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("--metrics-listen {addr}: cannot listen"))?,
        ),
        None => None,
    };
    tracing::info!(
        grpc = %a.grpc_listen,
        metrics = ?a.metrics_listen,
        apiservers = ?a.apiservers.iter().map(|s| format!("{}={}", s.name, s.url)).collect::<Vec<_>>(),
        refresh_interval = ?a.refresh_interval,
        "mvp-ext-proc serving"
    );

    let grpc_server = tonic::transport::Server::builder()
        .add_service(publish::TableService::server(published.table.clone(), metrics.clone()))
        .add_service(rewrite::processor::Rewriter::server(
            published.merged.clone(),
            rewrite::routing::Routes::new(published.table.clone()),
            metrics.clone(),
        ))
        .serve_with_incoming_shutdown(tokio_stream_incoming(grpc), shutdown_signal());
    let sync_task = tokio::spawn(syncer.run());
    let admin_task = admin.map(|l| {
        let router = metrics::admin_router(metrics.clone(), published.clone());
        tokio::spawn(async move { axum::serve(l, router).with_graceful_shutdown(shutdown_signal()).await })
    });
    grpc_server.await.context("gRPC server failed")?;
    sync_task.abort();
    if let Some(t) = admin_task {
        t.abort();
    }
    tracing::info!("mvp-ext-proc stopped");
    Ok(())
}

fn tokio_stream_incoming(
    l: tokio::net::TcpListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures::stream::unfold(l, |l| async move {
        let r = l.accept().await.map(|(s, _)| {
            let _ = s.set_nodelay(true);
            s
        });
        Some((r, l))
    })
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
