//! The real front door on loopback for a test (or the demo): fake
//! apiservers of given releases, `mvp-ext-proc serve`, and Envoy 1.40 running
//! the bootstrap `mvp-ext-proc envoy-config` renders, all from one
//! [`Topology`]. Every process is killed when the `FrontDoor` drops; a
//! failing test prints the tail of each process's log.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::fakes::{Fake, FakeSpec, start_fake};
pub use super::options::{Options, Workdir};
use super::process::{Proc, free_ports, wait_for};
use super::tools::{envoy_bin, ext_proc_bin};
use super::topology::{Ports, Replica, Topology};
use crate::pki::Pki;

pub struct FrontDoor {
    pub topology: Topology,
    pub fakes: Vec<Fake>,
    pub ext_proc: Proc,
    /// The replicas after the first, as [`Topology::standbys`] lists them.
    pub standbys: Vec<Proc>,
    pub envoy: Proc,
    /// Envoy's memory cgroup, with `Options::envoy_memory_limit` (dropped
    /// after Envoy, which is killed first).
    pub envoy_cgroup: Option<super::container::MemoryCgroup>,
    pub listen_port: u16,
    pub admin_port: u16,
    pub metrics_port: u16,
    pub grpc_port: u16,
    pub config_path: PathBuf,
    pub http: reqwest::Client,
    pub h2c: reqwest::Client,
    pub dir: Workdir,
    pub tls: Option<Arc<Pki>>,
}

impl FrontDoor {
    /// Starts the topology. Free ports are picked but bound by other
    /// processes moments later, so a parallel test can take one in between:
    /// such a start is retried with new ports (bounded).
    pub async fn start(specs: &[FakeSpec], options: Options) -> Result<FrontDoor> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match FrontDoor::start_once(specs, options.clone()).await {
                Err(e) if attempt < 3 && options.fixed_ports.is_none() && format!("{e:#}").contains("Address already in use") => {
                    eprintln!("port taken by another process while starting; retrying with new ports");
                }
                other => return other,
            }
        }
    }

    /// The front door in front of apiservers that run already (`(name,
    /// URL)`), e.g. real kube-apiservers; nothing else is started but
    /// mvp-ext-proc and Envoy.
    pub async fn in_front_of(apiservers: Vec<(String, String)>, options: Options) -> Result<FrontDoor> {
        let dir = Workdir::new(&options)?;
        let ports = options.fixed_ports.as_ref().map(|(p, _)| *p).unwrap_or_else(Ports::free);
        FrontDoor::launch(dir, vec![], apiservers, ports, options).await
    }

    async fn start_once(specs: &[FakeSpec], options: Options) -> Result<FrontDoor> {
        let dir = Workdir::new(&options)?;
        // Fakes pick their own ports unless fixed (the demo's).
        let (ports, fake_ports) = match &options.fixed_ports {
            Some((p, f)) => (*p, f.clone()),
            None => (Ports::free(), vec![0; specs.len()]),
        };
        let mut starting = Vec::new();
        for (spec, port) in specs.iter().zip(fake_ports) {
            starting.push(start_fake(dir.path(), with_cluster_state(dir.path(), &options, spec.clone()), port)?);
        }
        let mut fakes = Vec::new();
        for s in starting {
            fakes.push(s.ready().await?);
        }
        let apiservers = fakes.iter().map(|f| (f.spec.name.clone(), f.url())).collect();
        FrontDoor::launch(dir, fakes, apiservers, ports, options).await
    }

    /// Fakes take h2c (and HTTP/1.1): their plaintext connections
    /// multiplex as an HTTPS apiserver's do by ALPN.
    fn speaks_h2c(fakes: &[Fake]) -> bool {
        !fakes.is_empty()
    }

    async fn launch(dir: Workdir, fakes: Vec<Fake>, apiservers: Vec<(String, String)>, ports: Ports, options: Options) -> Result<FrontDoor> {
        let http = options.harness_client()?;
        let seeds = match (options.membership, options.seeds) {
            (Some(_), Some(n)) => apiservers.iter().take(n).cloned().collect(),
            _ => apiservers.clone(),
        };
        let mut topology = Topology::new(seeds, ports);
        topology.refresh_interval = options.refresh_interval;
        topology.state_file = Some(dir.path().join("mvp-ext-proc-state.json"));
        topology.tls = options.tls.clone();
        topology.serve_extra = options.ext_proc_args.clone();
        topology.hold_unavailable = options.hold_unavailable;
        if let Some(filter) = options.filter {
            topology.filter = filter;
        }
        topology.envoy_config_extra = options.envoy_config_args.clone();
        topology.apiserver_h2c = FrontDoor::speaks_h2c(&fakes);
        if options.grpc_over_unix {
            topology.grpc_unix = Some(dir.path().join("mvp-ext-proc.sock"));
        }
        if let (Some(sources), Some(first)) = (options.membership, apiservers.first()) {
            // Read through the first seed, as any reachable apiserver.
            let kubeconfig = dir.path().join("membership.kubeconfig");
            std::fs::write(&kubeconfig, kubeconfig_yaml(&first.1, options.tls.as_deref(), options.discovery_token.as_deref()))?;
            topology.serve_extra.extend([
                "--membership".into(),
                sources.into(),
                "--membership-kubeconfig".into(),
                kubeconfig.to_string_lossy().into_owned(),
            ]);
            if !fakes.is_empty() {
                // Fakes renew every second (real servers every 10 s: the
                // default stands).
                topology.serve_extra.extend(["--lease-stale-after".into(), "3s".into()]);
            }
        }
        if let Some(token) = &options.discovery_token {
            let path = dir.path().join("discovery-token");
            std::fs::write(&path, token)?;
            topology.serve_extra.extend(["--discovery-token-file".into(), path.to_string_lossy().into_owned()]);
        }
        for _ in 1..options.replicas {
            let free = free_ports(2);
            topology.standbys.push(Replica { grpc: free.first().copied().unwrap_or(0), metrics: free.get(1).copied().unwrap_or(0) });
        }
        if options.replica_peers {
            topology.replicas_know_each_other();
        }
        let ext_proc = Proc::spawn("mvp-ext-proc", dir.path(), &ext_proc_bin()?, &topology.serve_args())?;
        let mut standbys = Vec::new();
        for i in 0..topology.standbys.len() {
            let args = topology.standby_serve_args(i).context("a standby")?;
            standbys.push(Proc::spawn(&format!("mvp-ext-proc-standby-{i}"), dir.path(), &ext_proc_bin()?, &args)?);
        }

        let config_path = dir.path().join("envoy.yaml");
        let mut yaml = topology.render_envoy_config()?;
        if let Some(edit) = options.edit_config {
            yaml = edit(yaml);
        }
        std::fs::write(&config_path, yaml)?;
        let envoy_args = Topology::envoy_args(&config_path, options.concurrency, "info");
        let envoy_cgroup = options.envoy_memory_limit.map(|limit| super::container::MemoryCgroup::new("envoy", limit)).transpose()?;
        let envoy = match &envoy_cgroup {
            Some(cg) => {
                let (program, args) = cg.wrap(dir.path(), &envoy_bin()?, &envoy_args)?;
                Proc::spawn("envoy", dir.path(), &program, &args)?
            }
            None => Proc::spawn("envoy", dir.path(), &envoy_bin()?, &envoy_args)?,
        };
        let h2c = reqwest::Client::builder().no_proxy().http2_prior_knowledge().timeout(Duration::from_secs(10)).build()?;
        let mut door = FrontDoor {
            listen_port: ports.listen,
            admin_port: ports.admin,
            metrics_port: ports.metrics,
            grpc_port: ports.grpc,
            topology,
            fakes,
            ext_proc,
            standbys,
            envoy,
            envoy_cgroup,
            config_path,
            http,
            h2c,
            dir,
            tls: options.tls.clone(),
        };
        // An Envoy that refused its configuration exits: that ends the wait
        // at once, with its log, instead of at the readiness bound.
        let ready = async {
            match options.ready_when {
                Some(accept) => {
                    door.topology.wait_envoy_ready(&door.http).await?;
                    door.topology.wait_table_published(&door.http, accept).await
                }
                None => door.topology.wait_ready(&door.http).await,
            }
        };
        let envoy = &mut door.envoy;
        let exited = async {
            while envoy.is_running() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        let ready = tokio::select! {
            r = ready => r,
            () = exited => Err(anyhow::anyhow!("Envoy exited before it was ready")),
        };
        if let Err(e) = ready {
            let mut logs = String::new();
            for p in door.fakes.iter().map(|f| &f.proc).chain([&door.ext_proc, &door.envoy]).chain(&door.standbys) {
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
        let config = super::tls_client_config(&pki.serving.cert_file, identity, alpn)?;
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
        *fake = start_fake(&dir, spec, fake.port)?.ready().await?;
        Ok(())
    }

    /// Restarts fake `name` as a server coming back: listening, `/readyz`
    /// failing until [`Fake::finish_starting`] (kube-apiserver's post-start
    /// hooks), and waits until Envoy routes by a table that says so
    /// (`returning`): requests only it serves are held for it.
    /// First it is down long enough for the table to say so (a real
    /// kube-apiserver refuses connections for a second or more before it
    /// listens again): requests asked for meanwhile get the 503 Status at
    /// once, none reaches the new process before the table knows it.
    pub async fn restart_fake_coming_back(&mut self, name: &str) -> Result<()> {
        let spec = self.fake(name).spec.clone().starting_for(Duration::from_secs(3600));
        self.fake_mut(name).proc.kill();
        let member = |state: &'static str, name: String| {
            move |t: &Value| {
                t["apiservers"].as_array().is_some_and(|a| {
                    a.iter().any(|s| s["name"] == name.as_str() && s["open"] == false && s["returning"] == (state == "returning"))
                })
            }
        };
        self.wait_table_published(member("down", name.to_string())).await?;
        self.restart_fake(name, spec).await?;
        self.wait_table_published(member("returning", name.to_string())).await
    }

    /// Starts another fake apiserver on a free port (sharing the membership
    /// directory when membership is live), waiting until it listens. It is
    /// not a seed: only a membership source can make it a member.
    pub async fn add_fake(&mut self, spec: FakeSpec) -> Result<&Fake> {
        let spec = if self.fakes.iter().any(|f| f.spec.cluster_state.is_some()) {
            FakeSpec { cluster_state: Some(self.dir.path().join("cluster")), ..spec }
        } else {
            spec
        };
        let fake = start_fake(self.dir.path(), spec, 0)?.ready().await?;
        self.fakes.push(fake);
        self.fakes.last().context("just added")
    }

    pub fn fake_mut(&mut self, name: &str) -> &mut Fake {
        self.fakes.iter_mut().find(|f| f.spec.name == name).unwrap_or_else(|| panic!("no fake named {name}"))
    }

    /// Kills mvp-ext-proc (SIGKILL) and starts it again with the same flags,
    /// waiting until it answers `/readyz` (its first discovery round).
    pub async fn restart_ext_proc(&mut self) -> Result<()> {
        self.ext_proc.kill();
        self.ext_proc = Proc::spawn("mvp-ext-proc", self.dir.path(), &ext_proc_bin()?, &self.topology.serve_args())?;
        let readyz = format!("http://127.0.0.1:{}/readyz", self.metrics_port);
        wait_for("the restarted mvp-ext-proc to be ready", Duration::from_secs(30), || async {
            self.http.get(&readyz).send().await.ok().filter(|r| r.status().is_success())
        })
        .await?;
        Ok(())
    }

    /// The topology as seen through standby `i`: its `/table`, and
    /// [`Topology::wait_table_published`] against its tables.
    pub fn standby_topology(&self, i: usize) -> Option<Topology> {
        let r = *self.topology.standbys.get(i)?;
        let mut t = self.topology.clone();
        (t.ports.grpc, t.ports.metrics) = (r.grpc, r.metrics);
        Some(t)
    }

    /// Starts standby `i` again (after a kill) with the same flags and
    /// waits until it answers `/readyz`.
    pub async fn restart_standby(&mut self, i: usize) -> Result<()> {
        let args = self
            .topology
            .standby_serve_args(i)
            .context("no such standby")?;
        let metrics = self
            .topology
            .standbys
            .get(i)
            .context("no such standby")?
            .metrics;
        let standby = self.standbys.get_mut(i).context("no such standby")?;
        standby.kill();
        *standby = Proc::spawn(
            &format!("mvp-ext-proc-standby-{i}"),
            self.dir.path(),
            &ext_proc_bin()?,
            &args,
        )?;
        let readyz = format!("http://127.0.0.1:{metrics}/readyz");
        wait_for(
            "the restarted standby to be ready",
            Duration::from_secs(30),
            || async {
                self.http
                    .get(&readyz)
                    .send()
                    .await
                    .ok()
                    .filter(|r| r.status().is_success())
            },
        )
        .await?;
        Ok(())
    }

    /// mvp-ext-proc's view: `/table` JSON.
    pub async fn table(&self) -> Option<Value> {
        self.topology.table(&self.http).await
    }

    /// An Envoy admin stat by exact name.
    pub async fn envoy_stat(&self, name: &str) -> Option<u64> {
        self.topology.envoy_stat(&self.http, name).await
    }

    /// See [`Topology::wait_table_published`].
    pub async fn wait_table_published(&self, accept: impl Fn(&Value) -> bool) -> Result<()> {
        self.topology.wait_table_published(&self.http, accept).await
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

fn with_cluster_state(dir: &Path, options: &Options, spec: FakeSpec) -> FakeSpec {
    match options.membership {
        Some(_) => FakeSpec { cluster_state: Some(dir.join("cluster")), ..spec },
        None => spec,
    }
}

/// A kubeconfig for reading the membership through `server`: anonymous
/// for plain fakes; with TLS, the serving CA and the discovery token (real
/// servers') or the TLS fakes' token.
fn kubeconfig_yaml(server: &str, tls: Option<&Pki>, token: Option<&str>) -> String {
    let (ca, user) = match tls {
        Some(pki) => (
            format!("\n    certificate-authority: {}", pki.serving.cert_file.display()),
            format!("\n    token: {}", token.unwrap_or(super::secure::TOKEN)),
        ),
        None => (String::new(), " {}".to_string()),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}{ca}\nusers:\n- name: u\n  user:{user}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n"
    )
}
