//! The processes one benchmark topology shares across its Envoy variants:
//! the upstream apiservers, mvp-ext-proc and, where variant (5) runs, its
//! ext_proc router.
//! Flags, rendering and readiness come from the harness's [`Topology`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use integration::harness::topology::all_healthy;
use integration::harness::{FilterBuild, Ports, Proc, Topology, envoy_bin, ext_proc_bin, free_ports, wait_for};

pub struct Backend {
    dir: PathBuf,
    /// Held so the upstream lives as long as the backend.
    _upstream: Proc,
    pub ext_proc: Proc,
    /// Variant (5)'s ext_proc server, started only where (5) runs: it polls
    /// and decodes every new table, so elsewhere it would only compete with
    /// what is measured (it shares core 0 with mvp-ext-proc and Envoy).
    _router: Option<Proc>,
    pub router_port: u16,
    servers: Vec<(String, u16)>,
    topology: Topology,
    pub http: reqwest::Client,
    pub refresh: Duration,
}

/// A binary next to mvp-ext-proc: the same profile.
fn bin(name: &str) -> Result<PathBuf> {
    let p = ext_proc_bin()?.with_file_name(name);
    if !p.exists() {
        bail!("{} not found: build the integration binaries (scripts/bench.sh does)", p.display());
    }
    Ok(p)
}

impl Backend {
    pub async fn start(dir: &Path, servers: &[(&str, &Path)], refresh: Duration) -> Result<Backend> {
        let mut free = free_ports(servers.len() + 3).into_iter();
        let ports: Vec<(String, u16)> = servers.iter().map(|(n, _)| (n.to_string(), free.next().unwrap_or(0))).collect();
        let mut args = Vec::new();
        for ((name, port), (_, docs)) in ports.iter().zip(servers) {
            args.push("--server".to_string());
            args.push(format!("{name}=127.0.0.1:{port}={}", docs.display()));
        }
        let upstream = Proc::spawn_pinned("bench-upstream", dir, "1", &bin("bench-upstream")?, &args)?;
        let (grpc, metrics, router_port) = (free.next().unwrap_or(0), free.next().unwrap_or(0), free.next().unwrap_or(0));
        let apiservers = ports.iter().map(|(n, p)| (n.clone(), format!("http://127.0.0.1:{p}"))).collect();
        let mut topology = Topology::new(apiservers, Ports { listen: 0, admin: 0, grpc, metrics });
        topology.refresh_interval = refresh;
        // bench-upstream takes h2c: its connections multiplex as an HTTPS
        // apiserver's do by ALPN.
        topology.apiserver_h2c = true;
        // Routing alone is measured; an operator's access log is a choice.
        topology.access_log = false;
        // Served on TCP and on a Unix socket (one per backend: several share
        // `dir`); Envoys reach TCP unless rendered with
        // [`Backend::render_over_unix`].
        topology.grpc_unix = Some(dir.join(format!("grpc-{grpc}.sock")));
        let ext_proc = Proc::spawn_pinned("mvp-ext-proc", dir, "0", &ext_proc_bin()?, &topology.serve_args())?;
        let http = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(30)).build()?;
        let b = Backend { dir: dir.to_path_buf(), _upstream: upstream, ext_proc, _router: None, router_port, servers: ports, topology, http, refresh };
        let want = servers.len();
        b.topology.wait_table(&b.http, |t| all_healthy(t) && t["apiservers"].as_array().is_some_and(|a| a.len() == want)).await?;
        Ok(b)
    }

    /// Starts variant (5)'s router (on `router_port`); returns its pid.
    pub fn start_router(&mut self) -> Result<u32> {
        let table_from = format!("127.0.0.1:{}", self.topology.ports.grpc);
        self.start_ext_proc_router(&["--table-from", &table_from])
    }

    /// Starts the `/apis` ext_proc floor (on `router_port`): an ext_proc
    /// server that answers every message "continue".
    pub fn start_pass_through_ext_proc(&mut self) -> Result<u32> {
        self.start_ext_proc_router(&["--pass-through"])
    }

    fn start_ext_proc_router(&mut self, mode: &[&str]) -> Result<u32> {
        let mut args = vec!["--listen".to_string(), format!("127.0.0.1:{}", self.router_port)];
        args.extend(mode.iter().map(|a| a.to_string()));
        // On core 0, like mvp-ext-proc: part of the proxy's cost.
        let router = Proc::spawn_pinned("ext-proc-router", &self.dir, "0", &bin("ext-proc-router")?, &args)?;
        let pid = router.pid();
        self._router = Some(router);
        Ok(pid)
    }

    pub fn address(&self, name: &str) -> String {
        let port = self.servers.iter().find(|(n, _)| n == name).map(|(_, p)| *p).unwrap_or(0);
        format!("127.0.0.1:{port}")
    }

    fn front(&self, listen: u16, admin: u16) -> Topology {
        let mut t = self.topology.clone();
        t.ports.listen = listen;
        t.ports.admin = admin;
        t.grpc_unix = None;
        t
    }

    /// The rendered production bootstrap for these upstreams, mvp-ext-proc
    /// reached over TCP.
    pub fn render(&self, listen: u16, admin: u16, filter: FilterBuild) -> Result<Value> {
        self.render_with(listen, admin, filter, &[])
    }

    /// [`Backend::render`] with more `envoy-config` flags.
    pub fn render_with(&self, listen: u16, admin: u16, filter: FilterBuild, flags: &[String]) -> Result<Value> {
        let mut t = self.front(listen, admin);
        t.filter = filter;
        t.envoy_config_extra.extend(flags.iter().cloned());
        Ok(serde_yaml_ng::from_str(&t.render_envoy_config()?)?)
    }

    /// The same, mvp-ext-proc reached over its Unix socket.
    pub fn render_over_unix(&self, listen: u16, admin: u16) -> Result<Value> {
        let mut t = self.front(listen, admin);
        t.grpc_unix = self.topology.grpc_unix.clone();
        Ok(serde_yaml_ng::from_str(&t.render_envoy_config()?)?)
    }

    /// Starts Envoy with `config`, pinned to core 0 unless `concurrency` > 1.
    pub async fn envoy(&self, name: &str, config: &Value, listen: u16, admin: u16, concurrency: u32, wait_table: bool) -> Result<Proc> {
        self.envoy_under(name, config, (listen, admin), concurrency, wait_table, None).await
    }

    /// Like [`Backend::envoy`], run by `under` (a program and its flags, the
    /// Envoy command line following them) with `within` to start and route.
    pub async fn envoy_under(
        &self,
        name: &str,
        config: &Value,
        (listen, admin): (u16, u16),
        concurrency: u32,
        wait_table: bool,
        under: Option<(&[String], Duration)>,
    ) -> Result<Proc> {
        let path = self.dir.join(format!("envoy-{name}.yaml"));
        std::fs::write(&path, serde_yaml_ng::to_string(config)?)?;
        let cores = if concurrency > 1 { "0,1" } else { "0" };
        let mut front = self.front(listen, admin);
        let mut args = Topology::envoy_args(&path, concurrency, "warning");
        let mut program = envoy_bin()?;
        if let Some((wrapper, within)) = under {
            let (first, flags) = wrapper.split_first().context("an empty wrapper command")?;
            args = flags.iter().cloned().chain([program.to_string_lossy().into_owned()]).chain(args).collect();
            program = PathBuf::from(first);
            front.envoy_start_within = within;
        }
        let envoy = Proc::spawn_pinned(&format!("envoy-{name}"), &self.dir, cores, &program, &args)?;
        front.wait_envoy_ready(&self.http).await?;
        if wait_table {
            front.wait_table_published(&self.http, |_| true).await?;
        }
        Ok(envoy)
    }

    /// mvp-ext-proc's `/table`, once `accept` holds.
    pub async fn wait_table(&self, accept: impl Fn(&Value) -> bool) -> Result<Value> {
        self.topology.wait_table(&self.http, accept).await
    }

    /// Envoy's admin stat on `admin`.
    pub async fn stat(&self, admin: u16, name: &str) -> Option<u64> {
        self.front(0, admin).envoy_stat(&self.http, name).await
    }
}

/// Variant (2)'s VM memory gauge name.
pub const VM_MEMORY_STAT: &str = "wasmcustom.mvp.router.vm_memory_bytes";

pub async fn wait_routed(http: &reqwest::Client, url: &str, addr: &str) -> Result<()> {
    wait_for("the new table to route on every worker", Duration::from_secs(10), || async {
        for _ in 0..8 {
            let resp = http.get(url).send().await.ok()?;
            if resp.headers().get("x-routed")?.to_str().ok()? != addr {
                return None;
            }
        }
        Some(())
    })
    .await
}
