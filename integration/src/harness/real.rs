//! Real kube-apiservers for the real tier, on one etcd, with the PKI of a
//! kubeadm control plane: a serving CA, a client CA, a separate front-proxy
//! CA that signs the front door's proxy client certificate
//! (`CN=front-proxy-client`), a token file, RBAC.
//!
//! Two kinds of build ([`Release`]): v1.20.2 from Debian's source
//! (`scripts/kube-apiserver.sh`; older than aggregated discovery), and
//! current releases from the Go module proxy (`scripts/kube-release.sh`, the
//! versions in `scripts/kube-releases`), which can also run as an older
//! release (`--emulated-version`) and with kube's own Mixed Version Proxy.
//!
//! Each apiserver can be stopped and started again with other flags or
//! another release, on the same address, as during an upgrade. Each runs
//! with its own host name (its own UTS namespace): 1.26+ derives the
//! apiserver identity from it. On loopback by default; on a test network
//! ([`super::test_net`]) when they must register in the `default/kubernetes`
//! Endpoints. Tests compare against [`super::plain_round_robin`] on the same
//! servers.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};

use super::process::{Proc, arg, free_ports, wait_for};
pub use super::real_spec::{KubeMvp, Spec, newest_pair, three_releases};
pub use super::release::Release;
use super::test_net::TestNet;
use crate::pki::{Leaf, Pki};

/// Every apiserver's port on the test network: the Endpoints reconciler
/// publishes one port for all.
const TEST_NET_PORT: u16 = 6443;

/// `token,user,uid,"groups"` lines of the apiservers' `--token-auth-file`.
pub const TOKENS: &[(&str, &str, &str)] = &[("admin-token", "token-admin", "system:masters"), ("nobody-token", "nobody", "nobodies")];

/// One real apiserver: its spec, port and process.
pub struct RealApiserver {
    pub name: String,
    /// Its address: 127.0.0.1, or its own on the test network.
    pub ip: String,
    pub port: u16,
    pub release: Release,
    pub extra_args: Vec<String>,
    pub kube_mvp: KubeMvp,
    pub proc: Option<Proc>,
}

impl RealApiserver {
    pub fn url(&self) -> String {
        format!("https://{}:{}", self.ip, self.port)
    }
}

pub struct RealControlPlane {
    pub dir: tempfile::TempDir,
    pub pki: Arc<Pki>,
    pub etcd: Proc,
    pub apiservers: Vec<RealApiserver>,
    etcd_url: String,
    pub(super) service_account_key: PathBuf,
    service_account_pub: PathBuf,
    tokens: PathBuf,
    /// A cluster-admin client certificate (`O=system:masters`).
    pub admin: Leaf,
    /// An admin client talking to the apiservers directly.
    pub http: reqwest::Client,
    /// The test network the apiservers run on, if any (dropped last: after
    /// the processes in it).
    net: Option<TestNet>,
}

impl RealControlPlane {
    /// etcd and one v1.20 apiserver per `(name, extra flags)`, all ready.
    pub async fn start(specs: &[(&str, &[&str])]) -> Result<RealControlPlane> {
        let specs: Vec<Spec> = specs.iter().map(|(name, args)| Spec::new(name, Release::V1_20, args)).collect();
        RealControlPlane::start_specs(&specs).await
    }

    /// etcd and one apiserver per spec, started in order, all ready.
    pub async fn start_specs(specs: &[Spec]) -> Result<RealControlPlane> {
        RealControlPlane::start_on(specs, None, None).await
    }

    /// The same with each apiserver on this host's own address (not
    /// loopback; a port each), where a pod on the node's pod network reaches
    /// it: a workload in a cluster of the test's (`harness::node`).
    pub async fn start_on_host_address(specs: &[Spec]) -> Result<RealControlPlane> {
        RealControlPlane::start_on(specs, None, Some(super::real_workload::host_ipv4()?)).await
    }

    /// The same on a test network ([`TestNet`]): each apiserver on its own
    /// address and port 6443, registering in the `default/kubernetes`
    /// Endpoints (`--endpoint-reconciler-type=lease`) as on real machines.
    pub async fn start_on_test_net(specs: &[Spec]) -> Result<RealControlPlane> {
        RealControlPlane::start_on(specs, Some(TestNet::create(specs.len() + 4)?), None).await
    }

    async fn start_on(specs: &[Spec], net: Option<TestNet>, host: Option<String>) -> Result<RealControlPlane> {
        let dir = tempfile::Builder::new().prefix("mvp-real-").tempdir()?;
        let pki = Arc::new(Pki::new(dir.path())?);
        let mut ports = free_ports(2 + specs.len()).into_iter();
        let (client_port, peer_port) = (ports.next().unwrap_or(0), ports.next().unwrap_or(0));
        let etcd_host = if net.is_some() { TestNet::host_address() } else { "127.0.0.1".into() };
        let etcd_url = format!("http://{etcd_host}:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd_args: Vec<String> = [
            "--name", "mvp", "--data-dir", &dir.path().join("etcd").to_string_lossy(),
            "--listen-client-urls", &etcd_url, "--advertise-client-urls", &etcd_url,
            "--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url,
            "--initial-cluster", &format!("mvp={peer_url}"), "--log-level", "warn",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let etcd = Proc::spawn("etcd", dir.path(), &super::release::etcd_bin()?, &etcd_args)?;

        let sa = rcgen::KeyPair::generate()?;
        let service_account_key = dir.path().join("sa.key");
        let service_account_pub = dir.path().join("sa.pub");
        std::fs::write(&service_account_key, sa.serialize_pem())?;
        std::fs::write(&service_account_pub, sa.public_key_pem())?;
        let tokens = dir.path().join("tokens.csv");
        let lines: Vec<String> = TOKENS.iter().map(|(t, u, g)| format!("{t},{u},{u},\"{g}\"")).collect();
        std::fs::write(&tokens, lines.join("\n") + "\n")?;
        let admin = pki.clients.client(dir.path(), "admin", "kubernetes-admin", &["system:masters"])?;
        let http = crate::harness::tls_client_config(&pki.serving.cert_file, Some(&admin), &[b"http/1.1"])
            .and_then(|c| Ok(reqwest::Client::builder().use_preconfigured_tls(c).no_proxy().timeout(Duration::from_secs(30)).build()?))?;

        let on_net = net.is_some();
        let apiservers = specs
            .iter()
            .enumerate()
            .map(|(i, spec)| RealApiserver {
                name: spec.name.clone(),
                ip: if on_net { TestNet::address(i) } else { host.clone().unwrap_or_else(|| "127.0.0.1".into()) },
                port: if on_net { TEST_NET_PORT } else { ports.next().unwrap_or(0) },
                release: spec.release,
                extra_args: spec.args.clone(),
                kube_mvp: spec.kube_mvp,
                proc: None,
            })
            .collect();
        let mut cp = RealControlPlane { dir, pki, etcd, apiservers, etcd_url, service_account_key, service_account_pub, tokens, admin, http, net };
        wait_for("etcd to listen", Duration::from_secs(30), || async {
            tokio::net::TcpStream::connect((etcd_host.as_str(), client_port)).await.ok()
        })
        .await?;
        for i in 0..cp.apiservers.len() {
            cp.start_apiserver(i).await?;
        }
        Ok(cp)
    }

    fn args(&self, a: &RealApiserver) -> Result<Vec<String>> {
        let dir = self.dir.path();
        let serving = self.pki.apiserver_at(dir, &a.name, &a.ip)?;
        let mut args: Vec<String> = vec![
            format!("--etcd-servers={}", self.etcd_url),
            format!("--bind-address={}", a.ip),
            format!("--secure-port={}", a.port),
            format!("--advertise-address={}", a.ip),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            // Endpoints reject loopback addresses: only on the test network.
            format!("--endpoint-reconciler-type={}", if self.net.is_some() { "lease" } else { "none" }),
            format!("--tls-cert-file={}", arg(&serving.cert_file)),
            format!("--tls-private-key-file={}", arg(&serving.key_file)),
            format!("--client-ca-file={}", arg(&self.pki.clients.cert_file)),
            format!("--requestheader-client-ca-file={}", arg(&self.pki.requestheader.cert_file)),
            format!("--requestheader-allowed-names={}", crate::pki::PROXY_CLIENT_CN),
            "--requestheader-username-headers=X-Remote-User".into(),
            "--requestheader-group-headers=X-Remote-Group".into(),
            "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
            "--authorization-mode=RBAC".into(),
            // kubeadm's: a node is reached at its InternalIP (logs, exec),
            // not a hostname the machine's DNS may not know.
            "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname".into(),
            format!("--token-auth-file={}", arg(&self.tokens)),
            format!("--service-account-key-file={}", arg(&self.service_account_pub)),
            format!("--service-account-signing-key-file={}", arg(&self.service_account_key)),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            "--profiling=false".into(),
        ];
        if a.release == Release::V1_20 {
            // Removed in 1.24; v1.20 serves plain HTTP on 8080 without it.
            args.push("--insecure-port=0".into());
        }
        if a.kube_mvp.peer_flags(a.release) {
            // kube's own MVP: peers verify each other's serving certificates
            // with the serving CA (SNI kubernetes.default.svc) and proxy with
            // the front-proxy client certificate; each advertises its own
            // port (every server is on 127.0.0.1 here).
            args.extend([
                format!("--peer-ca-file={}", arg(&self.pki.serving.cert_file)),
                format!("--proxy-client-cert-file={}", arg(&self.pki.proxy_client.cert_file)),
                format!("--proxy-client-key-file={}", arg(&self.pki.proxy_client.key_file)),
                format!("--peer-advertise-ip={}", a.ip),
                format!("--peer-advertise-port={}", a.port),
            ]);
            // Alpha before 1.36 — and a 1.37 binary emulating 1.35 takes
            // 1.35's defaults — so `On` asks for it; from 1.36 it is the
            // default, and naming a default is accepted.
            if a.kube_mvp == KubeMvp::On && a.release != Release::V1_20 {
                args.push("--feature-gates=UnknownVersionInteroperabilityProxy=true".into());
            }
        }
        args.extend(a.extra_args.iter().cloned());
        Ok(args)
    }

    /// Starts apiserver `i` (again) and waits until its `/readyz` answers 200.
    pub async fn start_apiserver(&mut self, i: usize) -> Result<()> {
        let a = self.apiservers.get(i).context("no such apiserver")?;
        let args = self.args(a)?;
        let name = a.name.clone();
        let bin = a.release.bin()?;
        let proc = match a.release {
            Release::V1_20 => Proc::spawn(&format!("kube-apiserver-{name}"), self.dir.path(), &bin, &args)?,
            // Each server with its own hostname, as on its own node: 1.26+
            // derives the apiserver identity (the identity Lease's name, and
            // who is a peer of whom) from the hostname.
            Release::Modules(..) => {
                let mut all = vec!["--uts".to_string(), "--".into(), "sh".into(), "-c".into(), "hostname \"$0\" && exec \"$@\"".into(), name.clone(), arg(&bin)];
                all.extend(args);
                match &self.net {
                    None => Proc::spawn(&format!("kube-apiserver-{name}"), self.dir.path(), Path::new("unshare"), &all)?,
                    Some(net) => {
                        let mut inside = vec!["netns".to_string(), "exec".into(), net.netns.clone(), "unshare".into()];
                        inside.extend(all);
                        Proc::spawn(&format!("kube-apiserver-{name}"), self.dir.path(), Path::new("ip"), &inside)?
                    }
                }
            }
        };
        if let Some(a) = self.apiservers.get_mut(i) {
            a.proc = Some(proc);
        }
        self.wait_ready(i).await
    }

    /// Waits until apiserver `i` answers `/readyz` with 200; fails at once,
    /// with its log, if it exits (a flag this release rejects).
    pub async fn wait_ready(&mut self, i: usize) -> Result<()> {
        let a = self.apiservers.get(i).context("no such apiserver")?;
        let (url, name) = (format!("{}/readyz", a.url()), a.name.clone());
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            if self.http.get(&url).send().await.is_ok_and(|r| r.status().is_success()) {
                return Ok(());
            }
            let a = self.apiservers.get_mut(i).context("no such apiserver")?;
            let exited = !a.proc.as_mut().is_some_and(|p| p.is_running());
            if exited || std::time::Instant::now() >= deadline {
                let tail = a.proc.as_ref().map(|p| p.log_tail(30)).unwrap_or_default();
                let why = if exited { "exited" } else { "not ready after 120 s" };
                return Err(anyhow!("kube-apiserver {name} {why}\n----- kube-apiserver {name} -----\n{tail}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Adds an apiserver to the control plane (a new port) and starts it.
    pub async fn add_apiserver(&mut self, spec: &Spec) -> Result<usize> {
        let (ip, port) = match self.net {
            Some(_) => (TestNet::address(self.apiservers.len()), TEST_NET_PORT),
            None => ("127.0.0.1".to_string(), free_ports(1).into_iter().next().context("no free port")?),
        };
        self.apiservers.push(RealApiserver {
            name: spec.name.clone(),
            ip,
            port,
            release: spec.release,
            extra_args: spec.args.clone(),
            kube_mvp: spec.kube_mvp,
            proc: None,
        });
        let i = self.apiservers.len() - 1;
        self.start_apiserver(i).await?;
        Ok(i)
    }

    /// Sends apiserver `i` a signal (`TERM`: the graceful shutdown).
    pub fn signal_apiserver(&self, i: usize, sig: &str) {
        if let Some(p) = self.apiservers.get(i).and_then(|a| a.proc.as_ref()) {
            p.signal(sig);
        }
    }

    /// Whether apiserver `i`'s process still runs.
    pub fn apiserver_running(&mut self, i: usize) -> bool {
        self.apiservers.get_mut(i).and_then(|a| a.proc.as_mut()).is_some_and(|p| p.is_running())
    }

    /// Stops apiserver `i` (SIGKILL).
    pub fn stop_apiserver(&mut self, i: usize) {
        if let Some(p) = self.apiservers.get_mut(i).and_then(|a| a.proc.as_mut()) {
            p.kill();
        }
    }

    /// A real kube-controller-manager of `release` with only the namespace
    /// and garbage-collector controllers — the two that act on a wrong 404 —
    /// talking to `server` (a front door) as the cluster admin, by token
    /// (a plain round robin terminating TLS cannot pass a client
    /// certificate's identity on; a token passes any proxy).
    pub fn start_controller_manager(&self, release: Release, server: &str) -> Result<Proc> {
        let dir = self.dir.path();
        let user = format!("    token: {}", TOKENS[0].0);
        let kubeconfig = super::secure::kubeconfig(dir, server, &self.pki.serving.cert_file, &user);
        let args: Vec<String> = vec![
            format!("--kubeconfig={}", arg(&kubeconfig)),
            "--controllers=namespace-controller,garbage-collector-controller".into(),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
        ];
        Proc::spawn("kube-controller-manager", dir, &release.controller_manager_bin()?, &args)
    }

    /// The front door (TLS, this PKI) in front of every apiserver, once each
    /// is open in its table and its OpenAPI documents are merged.
    pub async fn front_door(&self) -> Result<super::FrontDoor> {
        self.front_door_with(super::Options::default()).await
    }

    /// [`RealControlPlane::front_door`] with other options (TLS is this PKI's).
    pub async fn front_door_with(&self, options: super::Options) -> Result<super::FrontDoor> {
        let door = super::FrontDoor::in_front_of(self.members(), super::Options { tls: Some(self.pki.clone()), ..options }).await?;
        let n = self.apiservers.len();
        door.wait_table_published(|t| {
            t["apiservers"].as_array().is_some_and(|a| a.iter().filter(|s| s["open"] == true).count() == n)
                && t["openapi"]["sources"].as_array().is_some_and(|s| s.len() == n)
        })
        .await?;
        Ok(door)
    }

    /// Every collection apiserver `i` lists in its own aggregated discovery
    /// (`profile=nopeer`: without its peers'), as a list path —
    /// `/api/v1/configmaps`, `/apis/{group}/{version}/{resource}` (all
    /// namespaces for a namespaced one). Who serves what, as a user checks it.
    pub async fn listable(&self, i: usize) -> Result<std::collections::BTreeSet<String>> {
        const NOPEER: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer";
        let a = self.apiservers.get(i).context("no such apiserver")?;
        let mut out = std::collections::BTreeSet::new();
        for root in ["/api", "/apis"] {
            let doc: serde_json::Value = self.http.get(format!("{}{root}", a.url())).header("accept", NOPEER).send().await?.json().await?;
            if doc["kind"] != "APIGroupDiscoveryList" {
                return Err(anyhow!("{} {root}: not aggregated discovery: {doc}", a.name));
            }
            for group in doc["items"].as_array().into_iter().flatten() {
                let g = group["metadata"]["name"].as_str().unwrap_or_default();
                for v in group["versions"].as_array().into_iter().flatten() {
                    let version = v["version"].as_str().unwrap_or_default();
                    let prefix = if g.is_empty() { format!("/api/{version}") } else { format!("/apis/{g}/{version}") };
                    for r in v["resources"].as_array().into_iter().flatten() {
                        if r["verbs"].as_array().is_some_and(|vs| vs.iter().any(|x| x == "list")) {
                            out.insert(format!("{prefix}/{}", r["resource"].as_str().unwrap_or_default()));
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// `(name, URL)` of every apiserver, for [`super::FrontDoor::in_front_of`].
    pub fn members(&self) -> Vec<(String, String)> {
        self.apiservers.iter().map(|a| (a.name.clone(), a.url())).collect()
    }
}
