//! `mvp-ext-proc envoy-config`: its flags, checked and turned into
//! [`EnvoyConfigOptions`], and the rendered bootstrap.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, ValueEnum};

use super::{Cli, Command, PeerTlsArgs, RequestHeaderArgs};
use crate::apiservers::ApiserverSpec;
use crate::envoy_config::filter_choice::{self, EnvoyVersion, FilterChoice};
use crate::envoy_config::{self, EnvoyConfigOptions};
use crate::tls::FrontTls;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum FilterKind {
    Auto,
    Wasm,
    Native,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AccessLog {
    Stdout,
    Off,
}

#[derive(Parser)]
pub(super) struct EnvoyConfigArgs {
    /// Optional, for checking the TLS flags against the apiserver URLs: the
    /// apiserver clusters and members come from mvp-ext-proc over ADS.
    #[arg(long = "apiserver", value_name = "NAME=URL")]
    apiservers: Vec<ApiserverSpec>,
    /// Address clients connect to.
    #[arg(long, value_name = "ADDR:PORT")]
    listen: SocketAddr,
    /// The routing filter's build: `auto` (the native module where the
    /// Envoy loads it — a module built for Envoy X.Y loads in X.Y and
    /// X.(Y+1) — else the `.wasm`), `native` (libmvp_native_filter.so, an
    /// Envoy dynamic module: past the proxy-wasm per-request floor) or
    /// `wasm` (mvp_wasm_filter.wasm in Envoy's V8, any Envoy with wasm).
    #[arg(long, value_enum, default_value_t = FilterKind::Auto)]
    filter: FilterKind,
    /// Path of the built mvp_wasm_filter.wasm, as Envoy will see it.
    #[arg(long, value_name = "PATH", required_if_eq("filter", "wasm"))]
    wasm: Option<String>,
    /// Path of the built libmvp_native_filter.so, as Envoy will see it.
    #[arg(long, value_name = "PATH", required_if_eq("filter", "native"))]
    native_module: Option<String>,
    /// The release of the Envoy that will run this bootstrap (X.Y or
    /// X.Y.Z), when it is not the --envoy-binary here (an image's Envoy).
    #[arg(long, value_name = "X.Y[.Z]", value_parser = parse_envoy_version)]
    envoy_version: Option<EnvoyVersion>,
    /// The Envoy that will run this bootstrap, asked for its release
    /// (`--version`) unless --envoy-version is given.
    #[arg(long, value_name = "PATH", default_value = "envoy")]
    envoy_binary: std::path::PathBuf,
    /// mvp-ext-proc's --grpc-listen address as Envoy reaches it: IP:PORT,
    /// HOST:PORT, or unix:/PATH. Repeat it for replicas, the preferred one
    /// first (e.g. the one on the same node): Envoy uses the first healthy
    /// one for everything and fails over to the next.
    #[arg(long, value_name = "HOST:PORT|unix:/PATH", required = true)]
    ext_proc: Vec<String>,
    /// Envoy admin address.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9901")]
    admin: SocketAddr,
    /// Envoy's access log: one JSON line per request on stdout (method,
    /// path, code, flags, upstream, the filter's route list and key, user).
    #[arg(long, value_enum, default_value_t = AccessLog::Stdout)]
    access_log: AccessLog,
    /// Log each request for an API only some apiservers serve to
    /// mvp-ext-proc (Envoy's gRPC access log, over the control channel):
    /// who uses what would go if members left (`readiness`). Requests for
    /// APIs every apiserver serves are not logged.
    #[arg(long, action = clap::ArgAction::Set, default_value_t = true, value_name = "BOOL")]
    record_skew: bool,
    /// Add a `Warning: 299 - "…"` (kube's format: kubectl prints it) to a
    /// response for a resource only apiservers older than the newest
    /// release serve — gone once the upgrade finishes.
    #[arg(long, action = clap::ArgAction::Set, default_value_t = true, value_name = "BOOL")]
    warn_on_skew: bool,
    /// How often Envoy's refresher asks mvp-ext-proc for a table when its
    /// last call failed. Otherwise it long-polls: mvp-ext-proc holds each
    /// call until it publishes a newer table, so a table reaches Envoy the
    /// moment it exists.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "200ms")]
    table_poll_interval: Duration,
    /// Longest a request only closed apiservers serve is held for a table
    /// that opens one, before its 503 Status — held only while one of them
    /// is coming back (it answers, not ready or not read yet: a
    /// kube-apiserver's start), never while all are down; 0 answers at once.
    /// The default covers a real v1.37 start's first answer → routed (about
    /// 1.2 s on a loaded 2-core machine; RELIABILITY.md) four times over.
    /// At most 60s.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    hold_unavailable: Duration,
    /// Requests one Envoy worker holds at once (beyond: the 503 Status at
    /// once). Size it by the nodes that may re-watch an API only one
    /// apiserver serves while it restarts: each holds one (its stream, as
    /// any request in flight, for at most --hold-unavailable).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), default_value_t = mvp_contract::limits::DEFAULT_MAX_HELD)]
    hold_max_per_worker: u32,
    /// Of those, the most one client holds: a client certificate's user,
    /// else a bearer token, else a source address (an IPv6 /64).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), default_value_t = mvp_contract::limits::DEFAULT_MAX_HELD_PER_CLIENT)]
    hold_max_per_client: u32,
    /// What the requests one worker holds may buffer of their bodies in all
    /// (bytes, or Ki/Mi/Gi); a request whose body does not fit gets the 503
    /// Status at once. Requests without a body are never refused by it.
    #[arg(long, value_name = "QUANTITY", value_parser = envoy_config::edge::parse_bytes, default_value = "32Mi")]
    hold_max_body_bytes: u64,
    /// Every client connection starts with a PROXY protocol header (v1 or
    /// v2: HAProxy's `send-proxy-v2`, a cloud load balancer's option), whose
    /// source address Envoy then takes as the client's — the access log's,
    /// and whose share of the hold is bounded. Without it, behind a load
    /// balancer every client has the balancer's address. A connection
    /// without the header is refused: give it only when every client comes
    /// through such a balancer. Requires --proxy-protocol-from.
    #[arg(long, requires = "proxy_protocol_from")]
    proxy_protocol: bool,
    /// With --proxy-protocol: the load balancers' addresses (CIDR, e.g.
    /// 10.0.0.0/24 or 10.0.0.7/32; repeatable), the only peers a connection
    /// is taken from. Anyone else who can reach the port could otherwise
    /// name any source in its header: a fresh share of the hold per
    /// invented address, a forged address in the audit trail.
    #[arg(long, value_name = "CIDR", requires = "proxy_protocol", value_parser = parse_cidr)]
    proxy_protocol_from: Vec<ipnet::IpNet>,
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
    /// Longest Envoy waits for mvp-ext-proc's first answer to an /apis
    /// response before it serves the apiserver's own (unmerged) document
    /// instead. 1 s: on a saturated machine a 250 ms wait made 2 of 160
    /// concurrent multi-MiB answers fall back (docs/discovery.md); only a hung
    /// mvp-ext-proc ever waits this long (a stopped one fails at once).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    ext_proc_message_timeout: Duration,
    /// Longest a client may take to send its request headers before Envoy
    /// closes its connection (a slowloris holds none); 0s: no bound.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    request_headers_timeout: Duration,
    /// Envoy's heap bound (bytes, or Ki/Mi/Gi): past 95 % it returns free
    /// memory to the system, past 98 % it answers new requests with a 503
    /// Status instead of growing until the OOM killer ends every stream.
    #[arg(long, value_name = "QUANTITY", value_parser = envoy_config::edge::parse_bytes, default_value = "2Gi")]
    max_heap: u64,
    /// Whether the overload manager also watches the container's memory
    /// limit from Envoy's cgroup (`true`, `false`, or `auto`: when this
    /// machine has cgroup memory files where Envoy reads them — render where
    /// Envoy runs, as the manifests do). Envoy refuses to start with it
    /// where it finds none (a cgroup v2 host's root, outside any container).
    #[arg(long, value_name = "auto|true|false", default_value = "auto", value_parser = ["auto", "true", "false"])]
    cgroup_memory_monitor: String,
    /// Longest a request may take that kube-apiserver does not count as
    /// long-running (watches, logs, exec, attach, port-forward and proxy are
    /// exempt, as in kube): past it the client gets a 504 Status. Longer
    /// than kube-apiserver's own --request-timeout (60 s), so the
    /// apiserver's answer comes first; a hung apiserver holds no request
    /// longer. 0s: no bound.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "70s")]
    request_timeout: Duration,
    /// Longest a read of a merged document (`/apis`, `/openapi/v2`,
    /// `/openapi/v3`) waits for the first byte — or the next — from one
    /// apiserver before it is tried on another (an apiserver serves them
    /// from memory: only a hung one is this slow). No other request has
    /// such a bound: a slow LIST is a healthy server's and is never sent
    /// twice; reads on a hung apiserver move when its connection's HTTP/2
    /// PING goes unanswered (`serve --apiserver-ping-timeout`). 0s: no
    /// bound.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "20s")]
    read_idle_timeout: Duration,
    /// Write to this file instead of standard output.
    #[arg(long, short, value_name = "FILE")]
    output: Option<std::path::PathBuf>,
    /// The CA mvp-ext-proc's gRPC serving certificate chains to (`serve
    /// --tls-cert-file`). With --ext-proc-cert-file, --ext-proc-key-file and
    /// --sds-dir, Envoy reaches every --ext-proc (TCP) over mutual TLS;
    /// the files reach Envoy by SDS and are reloaded when renamed into
    /// their directory (rotation without a restart).
    #[arg(long, value_name = "FILE", requires_all = ["ext_proc_cert_file", "ext_proc_key_file", "sds_dir"])]
    ext_proc_ca_file: Option<std::path::PathBuf>,
    /// Envoy's client certificate toward mvp-ext-proc (signed by its
    /// `serve --client-ca-file`).
    #[arg(long, value_name = "FILE", requires = "ext_proc_ca_file")]
    ext_proc_cert_file: Option<std::path::PathBuf>,
    /// The key of --ext-proc-cert-file.
    #[arg(long, value_name = "FILE", requires = "ext_proc_ca_file")]
    ext_proc_key_file: Option<std::path::PathBuf>,
    /// The DNS name mvp-ext-proc's certificate must carry (and the SNI).
    #[arg(long, default_value = crate::cli::certs::DEFAULT_SERVER_NAME)]
    ext_proc_server_name: String,
    /// Directory this command writes the two SDS documents into (the same
    /// path as Envoy sees it: render where Envoy runs, or into a shared
    /// volume).
    #[arg(long, value_name = "DIR", requires = "ext_proc_ca_file")]
    sds_dir: Option<std::path::PathBuf>,
}

/// The control channel's TLS flags, their files checked here (a clear
/// error now, not a rejected secret in Envoy's log later).
fn control_tls(a: &EnvoyConfigArgs) -> anyhow::Result<Option<envoy_config::control_tls::ControlTls>> {
    let (Some(ca), Some(cert), Some(key), Some(sds_dir)) = (&a.ext_proc_ca_file, &a.ext_proc_cert_file, &a.ext_proc_key_file, &a.sds_dir) else {
        return Ok(None);
    };
    crate::tls::load_identity("--ext-proc-cert-file", cert, "--ext-proc-key-file", key)?;
    crate::tls::load_certs("--ext-proc-ca-file", ca)?;
    Ok(Some(envoy_config::control_tls::ControlTls {
        ca_file: ca.clone(),
        cert_file: cert.clone(),
        key_file: key.clone(),
        server_name: a.ext_proc_server_name.clone(),
        sds_dir: sds_dir.clone(),
    }))
}

fn parse_envoy_version(s: &str) -> Result<EnvoyVersion, String> {
    s.parse()
}

pub(super) fn envoy_config(a: EnvoyConfigArgs) -> anyhow::Result<()> {
    let output = a.output.clone();
    let yaml = render_envoy_config(a, &envoy_config::rendering_command(std::env::args().skip(1)))?;
    match output {
        Some(path) => std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?,
        None => print!("{yaml}"),
    }
    Ok(())
}

/// What `mvp-ext-proc envoy-config ARGS…` prints, as a function (for tests
/// and tools that render without spawning the binary).
pub fn envoy_config_yaml(args: &[String]) -> anyhow::Result<String> {
    let argv = ["mvp-ext-proc".to_string(), "envoy-config".to_string()].into_iter().chain(args.iter().cloned());
    let Command::EnvoyConfig(a) = Cli::try_parse_from(argv)?.command else {
        anyhow::bail!("not an envoy-config command line");
    };
    render_envoy_config(a, &envoy_config::rendering_command(["envoy-config".to_string()].into_iter().chain(args.iter().cloned())))
}

fn render_envoy_config(a: EnvoyConfigArgs, command: &str) -> anyhow::Result<String> {
    let choice = match a.filter {
        FilterKind::Auto => FilterChoice::Auto,
        FilterKind::Native => FilterChoice::Native,
        FilterKind::Wasm => FilterChoice::Wasm,
    };
    let (version, binary) = (a.envoy_version, a.envoy_binary.clone());
    let chosen = filter_choice::choose(choice, a.wasm.clone(), a.native_module.clone(), || match version {
        Some(v) => Ok(v),
        None => EnvoyVersion::of_binary(&binary),
    })
    .map_err(anyhow::Error::msg)?;
    // Where the operator reads it: the init container's log, the terminal.
    eprintln!("envoy-config: routing filter: {}", chosen.why);
    let front_tls = FrontTls::load(a.tls_cert_file.as_deref(), a.tls_private_key_file.as_deref(), a.client_ca_file.as_deref())?;
    let control_tls = control_tls(&a)?;
    // The SDS documents the bootstrap names, written with it.
    if let Some(tls) = &control_tls {
        std::fs::create_dir_all(&tls.sds_dir).with_context(|| format!("--sds-dir {}", tls.sds_dir.display()))?;
        for (path, doc) in tls.sds_files() {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, doc).and_then(|()| std::fs::rename(&tmp, &path)).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    let opts = EnvoyConfigOptions {
        front_tls,
        peer_tls: a.peer_tls.load()?,
        requestheader: a.requestheader.names()?,
        apiservers: a.apiservers,
        listen: a.listen,
        admin: a.admin,
        filter: chosen.build,
        ext_proc: a.ext_proc,
        table_poll_interval: a.table_poll_interval,
        hold_unavailable: a.hold_unavailable,
        hold_max_per_worker: a.hold_max_per_worker,
        hold_max_per_client: a.hold_max_per_client,
        hold_max_body_bytes: a.hold_max_body_bytes,
        proxy_protocol_from: if a.proxy_protocol { a.proxy_protocol_from } else { Vec::new() },
        ext_proc_message_timeout: a.ext_proc_message_timeout,
        access_log: a.access_log == AccessLog::Stdout,
        record_skew: a.record_skew,
        warn_on_skew: a.warn_on_skew,
        request_headers_timeout: a.request_headers_timeout,
        max_heap_bytes: a.max_heap,
        cgroup_memory_monitor: match a.cgroup_memory_monitor.as_str() {
            "true" => true,
            "false" => false,
            _ => envoy_config::edge::cgroup_memory_files_here(),
        },
        request_timeout: a.request_timeout,
        read_idle_timeout: a.read_idle_timeout,
        control_tls,
    };
    Ok(envoy_config::render_yaml(&opts, command)?)
}

/// A CIDR range (`10.0.0.0/24`; a bare address is one host).
fn parse_cidr(s: &str) -> Result<ipnet::IpNet, String> {
    s.parse::<ipnet::IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map(|n| n.trunc())
        .map_err(|_| format!("{s:?}: not an address range (e.g. 10.0.0.0/24 or 10.0.0.7)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The PROXY protocol only with the balancers' ranges: without them
    /// any peer could name any source.
    #[test]
    fn the_proxy_protocol_needs_the_balancers_addresses() {
        let err = envoy_config_yaml(&["--proxy-protocol".to_string()]).unwrap_err().to_string();
        assert!(err.contains("--proxy-protocol-from"), "{err}");
        assert_eq!(parse_cidr("10.0.0.7"), Ok("10.0.0.7/32".parse().unwrap()));
        assert_eq!(parse_cidr("10.0.0.9/24"), Ok("10.0.0.0/24".parse().unwrap()));
        assert_eq!(parse_cidr("fd00::1/64"), Ok("fd00::/64".parse().unwrap()));
        assert!(parse_cidr("10.0.0.0/33").is_err() && parse_cidr("lb.example").is_err());
    }
}
