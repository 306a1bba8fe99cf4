//! One front door on loopback, described once: the apiservers behind it, its
//! ports, the flags of `mvp-ext-proc serve` and `mvp-ext-proc envoy-config`,
//! and the readiness wait. The test harness ([`super::FrontDoor`]), the
//! benchmark and the demo all start from it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use serde_json::Value;

use mvp_ext_proc::grpc::listen::UNIX_PREFIX;

use super::process::{arg, wait_for};
use super::tools::FilterBuild;
use crate::pki::Pki;

/// The refresher's gauge: the table version Envoy's workers now route by,
/// since workers read this very gauge on every request.
pub use mvp_contract::shared_data::VERSION_STAT as PUBLISHED_VERSION_STAT;

#[derive(Clone, Copy, Debug)]
pub struct Ports {
    /// Envoy's listener (the front door).
    pub listen: u16,
    pub admin: u16,
    /// mvp-ext-proc's gRPC (GetTable, ext_proc).
    pub grpc: u16,
    /// mvp-ext-proc's /metrics, /table, /readyz.
    pub metrics: u16,
}

impl Ports {
    pub fn free() -> Ports {
        let p = super::process::free_ports(4);
        let at = |i: usize| p.get(i).copied().unwrap_or(0);
        Ports { listen: at(0), admin: at(1), grpc: at(2), metrics: at(3) }
    }
}

#[derive(Clone)]
pub struct Topology {
    /// `(name, url)` of each apiserver, in `--apiserver` order.
    pub apiservers: Vec<(String, String)>,
    pub ports: Ports,
    pub refresh_interval: Duration,
    /// `--state-file`: the apiservers' last known API sets across restarts.
    pub state_file: Option<std::path::PathBuf>,
    /// How often Envoy's refresher polls (fast in tests: readiness waits on it).
    pub table_poll_interval: Duration,
    /// TLS everywhere: Envoy serves TLS with client certificates from the
    /// client CA, and reaches apiservers over mTLS as kube's peers do.
    pub tls: Option<Arc<Pki>>,
    /// Extra `mvp-ext-proc serve` flags.
    pub serve_extra: Vec<String>,
    /// Envoy's access log (on, as rendered by default; the benchmark turns it
    /// off to measure routing alone).
    pub access_log: bool,
    /// mvp-ext-proc also serves its gRPC on this Unix socket
    /// (`--grpc-listen unix:PATH`, beside the TCP port), and Envoy reaches it
    /// there (`--ext-proc unix:PATH`).
    pub grpc_unix: Option<std::path::PathBuf>,
    /// How long Envoy may take to become ready, and then to route by the
    /// published table (longer where it runs under valgrind).
    pub envoy_start_within: Duration,
    /// More mvp-ext-proc replicas beside the first (`ports.grpc`,
    /// `ports.metrics`): same flags, their own ports and state file; Envoy
    /// lists them after the first (`--ext-proc` repeated).
    pub standbys: Vec<Replica>,
    /// `envoy-config --hold-unavailable` (the product's default otherwise).
    pub hold_unavailable: Option<Duration>,
    /// The routing filter's build (`MVP_FILTER`, the `.wasm` by default).
    pub filter: FilterBuild,
    /// Extra `envoy-config` flags, last.
    pub envoy_config_extra: Vec<String>,
    /// `serve --apiserver-h2c`: the plaintext apiservers take HTTP/2 with
    /// prior knowledge (the project's fakes and the benchmark's upstream
    /// do; a plaintext server that speaks HTTP/1.1 only does not).
    pub apiserver_h2c: bool,
}

/// Where one more mvp-ext-proc replica listens.
#[derive(Clone, Copy, Debug)]
pub struct Replica {
    pub grpc: u16,
    pub metrics: u16,
}

impl Topology {
    pub fn new(apiservers: Vec<(String, String)>, ports: Ports) -> Topology {
        Topology {
            apiservers,
            ports,
            refresh_interval: Duration::from_secs(1),
            state_file: None,
            table_poll_interval: Duration::from_millis(100),
            tls: None,
            serve_extra: vec![],
            access_log: true,
            grpc_unix: None,
            envoy_start_within: Duration::from_secs(30),
            standbys: vec![],
            hold_unavailable: None,
            filter: FilterBuild::from_env(),
            envoy_config_extra: vec![],
            apiserver_h2c: false,
        }
    }

    fn apiserver_flags(&self) -> Vec<String> {
        self.apiservers.iter().flat_map(|(n, u)| ["--apiserver".to_string(), format!("{n}={u}")]).collect()
    }

    fn peer_flags(&self) -> Vec<String> {
        match &self.tls {
            Some(pki) => vec![
                "--peer-ca-file".into(),
                arg(&pki.serving.cert_file),
                "--proxy-client-cert-file".into(),
                arg(&pki.proxy_client.cert_file),
                "--proxy-client-key-file".into(),
                arg(&pki.proxy_client.key_file),
            ],
            None => vec![],
        }
    }

    pub fn serve_args(&self) -> Vec<String> {
        self.replica_serve_args(
            Replica {
                grpc: self.ports.grpc,
                metrics: self.ports.metrics,
            },
            self.state_file.clone(),
        )
    }

    /// Each replica told every replica's operator endpoint, itself among
    /// them (`serve --replica`: it skips itself).
    pub fn replicas_know_each_other(&mut self) {
        let all: Vec<u16> = std::iter::once(self.ports.metrics).chain(self.standbys.iter().map(|r| r.metrics)).collect();
        for m in all {
            self.serve_extra.extend(["--replica".into(), format!("http://127.0.0.1:{m}")]);
        }
    }

    /// `mvp-ext-proc serve` flags of standby `i` (its own state file beside
    /// the first one's, as on another node).
    pub fn standby_serve_args(&self, i: usize) -> Option<Vec<String>> {
        let r = *self.standbys.get(i)?;
        let state_file = self
            .state_file
            .as_ref()
            .map(|f| f.with_extension(format!("standby-{i}.json")));
        Some(self.replica_serve_args(r, state_file))
    }

    fn replica_serve_args(
        &self,
        at: Replica,
        state_file: Option<std::path::PathBuf>,
    ) -> Vec<String> {
        let mut args = vec!["serve".to_string()];
        args.extend(self.apiserver_flags());
        args.extend([
            "--grpc-listen".into(),
            format!("127.0.0.1:{}", at.grpc),
            "--metrics-listen".into(),
            format!("127.0.0.1:{}", at.metrics),
            "--refresh-interval".into(),
            format!("{}ms", self.refresh_interval.as_millis()),
        ]);
        if let Some(p) = &self.grpc_unix {
            args.extend(["--grpc-listen".into(), format!("{UNIX_PREFIX}{}", arg(p))]);
        }
        if let Some(f) = &state_file {
            args.extend(["--state-file".into(), arg(f)]);
        }
        if self.apiserver_h2c && self.tls.is_none() {
            args.push("--apiserver-h2c".into());
        }
        args.extend(self.serve_extra.iter().cloned());
        args.extend(self.peer_flags());
        args
    }

    /// `mvp-ext-proc envoy-config` flags (without the subcommand).
    pub fn envoy_config_args(&self) -> Result<Vec<String>> {
        let mut args = self.apiserver_flags();
        args.extend([
            "--listen".into(),
            format!("127.0.0.1:{}", self.ports.listen),
            "--admin".into(),
            format!("127.0.0.1:{}", self.ports.admin),
            "--ext-proc".into(),
            match &self.grpc_unix {
                Some(p) => format!("{UNIX_PREFIX}{}", arg(p)),
                None => format!("127.0.0.1:{}", self.ports.grpc),
            },
        ]);
        for r in &self.standbys {
            args.extend(["--ext-proc".into(), format!("127.0.0.1:{}", r.grpc)]);
        }
        args.extend(self.filter.envoy_config_flags()?);
        args.extend([
            "--table-poll-interval".into(),
            format!("{}ms", self.table_poll_interval.as_millis()),
            "--access-log".into(),
            if self.access_log { "stdout" } else { "off" }.into(),
        ]);
        if let Some(hold) = self.hold_unavailable {
            args.extend(["--hold-unavailable".into(), format!("{}ms", hold.as_millis())]);
        }
        args.extend(self.peer_flags());
        if let Some(pki) = &self.tls {
                args.extend([
                "--tls-cert-file".into(),
                arg(&pki.front_door.cert_file),
                "--tls-private-key-file".into(),
                arg(&pki.front_door.key_file),
                "--client-ca-file".into(),
                arg(&pki.clients.cert_file),
            ]);
        }
        args.extend(self.envoy_config_extra.iter().cloned());
        Ok(args)
    }

    /// The bootstrap `mvp-ext-proc envoy-config` renders for this topology.
    pub fn render_envoy_config(&self) -> Result<String> {
        mvp_ext_proc::cli::envoy_config_yaml(&self.envoy_config_args()?)
    }

    /// Envoy's command line for a bootstrap file.
    pub fn envoy_args(config: &Path, concurrency: u32, log_level: &str) -> Vec<String> {
        vec![
            "-c".to_string(),
            arg(config),
            "--concurrency".into(),
            concurrency.to_string(),
            "--disable-hot-restart".into(),
            "--log-level".into(),
            log_level.into(),
            // Access log lines reach the log file within 100 ms (Envoy's
            // default is every 10 s), so tests can wait for them.
            "--file-flush-interval-msec".into(),
            "100".into(),
        ]
    }

    /// mvp-ext-proc's view: `/table` JSON.
    pub async fn table(&self, http: &reqwest::Client) -> Option<Value> {
        http.get(format!("http://127.0.0.1:{}/table", self.ports.metrics)).send().await.ok()?.json().await.ok()
    }

    /// An Envoy admin stat by exact name.
    pub async fn envoy_stat(&self, http: &reqwest::Client, name: &str) -> Option<u64> {
        let url = format!("http://127.0.0.1:{}/stats?filter=^{}$", self.ports.admin, regex_escape(name));
        let text = http.get(url).send().await.ok()?.text().await.ok()?;
        text.lines().find_map(|l| l.strip_prefix(&format!("{name}: "))?.trim().parse().ok())
    }

    pub async fn wait_envoy_ready(&self, http: &reqwest::Client) -> Result<()> {
        let ready = format!("http://127.0.0.1:{}/ready", self.ports.admin);
        wait_for("Envoy to be ready", self.envoy_start_within, || async {
            http.get(&ready).send().await.ok().filter(|r| r.status().is_success())
        })
        .await?;
        Ok(())
    }

    /// Waits until mvp-ext-proc's table satisfies `accept`.
    pub async fn wait_table(&self, http: &reqwest::Client, accept: impl Fn(&Value) -> bool) -> Result<Value> {
        wait_for("mvp-ext-proc's table", Duration::from_secs(30), || async {
            let t = self.table(http).await?;
            accept(&t).then_some(t)
        })
        .await
    }

    /// Waits until mvp-ext-proc's table satisfies `accept` and Envoy's
    /// refresher has published that very version to the workers. Workers
    /// read this gauge on every request, so from then on every
    /// request is routed by that table.
    pub async fn wait_table_published(&self, http: &reqwest::Client, accept: impl Fn(&Value) -> bool) -> Result<()> {
        let waited = wait_for("the routing table to reach Envoy", self.envoy_start_within, || async {
            let t = self.table(http).await?;
            if !accept(&t) {
                return None;
            }
            let version: u64 = t["version"].as_str()?.parse().ok()?;
            (self.envoy_stat(http, PUBLISHED_VERSION_STAT).await? == version).then_some(())
        })
        .await;
        // On a timeout, what it waited on: a flake is diagnosed from the
        // failure message alone.
        if waited.is_err() {
            let table = self.table(http).await;
            let members: Vec<String> = table.as_ref().and_then(|t| t["apiservers"].as_array()).into_iter().flatten().map(|s| format!("{} open={} healthy={}", s["name"], s["open"], s["healthy"])).collect();
            let envoy = self.envoy_stat(http, PUBLISHED_VERSION_STAT).await;
            let mvp = table.as_ref().map(|t| t["version"].clone());
            return waited.map_err(|e| e.context(format!("mvp-ext-proc's table {mvp:?} [{}], Envoy's {envoy:?}", members.join(", "))));
        }
        waited
    }

    /// The one readiness condition: Envoy is up and routes by a table in
    /// which every apiserver is healthy.
    pub async fn wait_ready(&self, http: &reqwest::Client) -> Result<()> {
        self.wait_envoy_ready(http).await?;
        self.wait_table_published(http, all_healthy).await
    }
}

pub fn all_healthy(t: &Value) -> bool {
    t["apiservers"].as_array().is_some_and(|a| a.iter().all(|s| s["healthy"] == true))
}

fn regex_escape(s: &str) -> String {
    s.chars().flat_map(|c| if ".^$*+?()[]{}|\\".contains(c) { vec!['\\', c] } else { vec![c] }).collect()
}

/// The plain front door, for comparison: the same bootstrap with only
/// Envoy's router — no routing filter, no merged documents; what a load
/// balancer with `/readyz` health checks gives. Its routes lose the
/// front door's timeouts too: those are lifted by the filter's mark for a
/// long-running request, and a plain load balancer cannot tell a watch
/// from a read, so it bounds neither (with them, its watches would be cut
/// at the request timeout, and each event would re-arm a read's idle
/// timer the front door never arms for a watch).
pub fn plain_round_robin(yaml: String) -> String {
    let yaml = edit_http_filters(&yaml, |filters| filters.retain(|f| f["name"] == "envoy.filters.http.router"));
    let mut v: Value = serde_yaml_ng::from_str(&yaml).unwrap_or_default();
    let vhosts = v.pointer_mut("/static_resources/listeners/0/filter_chains/0/filters/0/typed_config/route_config/virtual_hosts").and_then(Value::as_array_mut);
    for vhost in vhosts.into_iter().flatten() {
        for route in vhost["routes"].as_array_mut().into_iter().flatten().filter_map(|r| r.get_mut("route")).filter_map(Value::as_object_mut) {
            route.insert("timeout".into(), Value::from("0s"));
            if let Some(retry) = route.get_mut("retry_policy").and_then(Value::as_object_mut) {
                retry.remove("per_try_idle_timeout");
            }
        }
    }
    serde_yaml_ng::to_string(&v).unwrap_or_default()
}

/// A TCP proxy in front of the same members (kubeadm's HAProxy-in-TCP-mode
/// anchor): the listener's HTTP connection manager replaced by Envoy's
/// `tcp_proxy` to the apiservers cluster — every client connection becomes
/// one apiserver connection, balanced round robin over healthy members.
pub fn tcp_proxy(yaml: String) -> String {
    let mut v: Value = serde_yaml_ng::from_str(&yaml).unwrap_or_default();
    if let Some(filters) = v.pointer_mut("/static_resources/listeners/0/filter_chains/0/filters") {
        *filters = serde_json::json!([{
            "name": "envoy.filters.network.tcp_proxy",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
                "stat_prefix": "apiservers_tcp",
                "cluster": mvp_contract::envoy::APISERVERS_CLUSTER,
            },
        }]);
    }
    serde_yaml_ng::to_string(&v).unwrap_or_default()
}

/// The plain front door in front of servers that run kube's own Mixed
/// Version Proxy, with that proxy switched off for its requests by kube's
/// own means: every request carries kube's loop guard
/// (`x-kubernetes-peer-proxied: true`: served where it lands, never proxied
/// to a peer) and `/apis` asks for `profile=nopeer` (the server's own
/// document, not the peer-aggregated one). What a load balancer gave before
/// kube had its MVP — on the same servers as the doors it is compared with.
pub fn plain_round_robin_bypassing_kube_mvp(yaml: String) -> String {
    const NOPEER: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer,application/json";
    let overwrite = |key: &str, value: &str| serde_json::json!([{"header": {"key": key, "value": value}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}]);
    let mut v: Value = serde_yaml_ng::from_str(&plain_round_robin(yaml)).unwrap_or_default();
    if let Some(vhost) = v.pointer_mut("/static_resources/listeners/0/filter_chains/0/filters/0/typed_config/route_config/virtual_hosts/0") {
        vhost["request_headers_to_add"] = overwrite(mvp_contract::headers::PEER_PROXIED, "true");
        for route in vhost["routes"].as_array_mut().into_iter().flatten() {
            if route["match"]["path"] == "/apis" {
                route["request_headers_to_add"] = overwrite("accept", NOPEER);
            }
        }
    }
    serde_yaml_ng::to_string(&v).unwrap_or_default()
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
