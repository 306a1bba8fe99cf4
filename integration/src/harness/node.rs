//! A node of the test's control plane: a real kubelet (the newest release,
//! built from Go modules beside its kube-apiserver: `scripts/node.sh`) on
//! Debian's containerd, registered to a real kube-apiserver, running the
//! static pods of a manifest directory — what a kubeadm control-plane node
//! runs, without kubeadm. Everything under a directory of its own: its
//! containerd (own socket, root and state; the machine's other containerd,
//! Docker's, is untouched), the kubelet's root, the manifests.
//!
//! As this machine kind allows (issue 57): cgroup v1 and cgroupfs
//! (`failCgroupV1: false`, `cgroupDriver: cgroupfs`, no QoS cgroups, no
//! node allocatable enforcement), and containerd's CRI with
//! `restrict_oom_score_adj` (the machine withholds CAP_SYS_RESOURCE: a
//! negative `oom_score_adj` cannot be set). The kubelet authenticates as a
//! cluster admin and lets anyone read its API (logs): a test node only.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::process::{Proc, arg, free_ports, machine_lock, wait_for};
use super::node_cleanup::{kubelet_chains_present, reap_stale_nodes, remove_cni_chains, remove_kubelet_chains, remove_runc_containers_under, unmount_under};
use super::real::RealControlPlane;

/// The project's images (`scripts/images.sh`) a node imports.
pub const IMAGES: [&str; 2] = ["mvp-envoy/mvp:dev", "mvp-envoy/envoy:dev"];

/// The install tests need the images and a node's parts: `scripts/test.sh`
/// builds them and says so with `MVP_DOCKER=1`.
pub fn require_install_parts() {
    assert!(std::env::var_os("MVP_DOCKER").is_some(), "needs the images and a node: scripts/docker.sh start && scripts/images.sh, then MVP_DOCKER=1 (scripts/test.sh does)");
}

/// The pause image `scripts/node.sh` builds from kube's source.
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// The pod network: the CNI bridge plugin on a bridge of the node's own,
/// addresses from host-local (kept in the node's directory).
pub const POD_SUBNET: &str = "10.244.77.0/24";
pub(super) const POD_BRIDGE: &str = "mvp77";
/// Where containerd's runc shim keeps its containers' state for the `k8s.io`
/// namespace, whatever containerd's own state directory.
pub(super) const RUNC_ROOT: &str = "/run/containerd/runc/k8s.io";

/// What a node runs besides its static pods.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeOptions {
    /// Pods of their own network (the CNI bridge plugin); hostNetwork
    /// pods need none.
    pub pod_network: bool,
    /// kube-proxy (iptables), for Services' ClusterIPs — the `kubernetes`
    /// Service a pod's in-cluster configuration names among them.
    pub kube_proxy: bool,
    /// Pods resolve Services by name ([`super::cluster_dns`]).
    pub cluster_dns: bool,
}

pub struct Node {
    pub name: String,
    /// The kubelet's static pod manifests.
    pub manifests: PathBuf,
    /// containerd's socket.
    pub sock: PathBuf,
    kubelet: Option<Proc>,
    kube_proxy: Option<Proc>,
    containerd: Option<Proc>,
    _dns: Option<super::cluster_dns::ClusterDns>,
    options: NodeOptions,
    /// The kubelet's own iptables chains are this node's to remove: the
    /// host had none before it started.
    owns_kubelet_chains: bool,
    /// Dropped after every process in it.
    dir: tempfile::TempDir,
    /// One node on the machine at a time (its bridge, its iptables chains):
    /// released when the file closes, also when the process is killed.
    _lock: std::fs::File,
}

/// The kubelet and kube-scheduler of the newest release (`scripts/node.sh`
/// prints the folder; `MVP_KUBE_NODE_BIN` names it).
pub fn node_bin_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("MVP_KUBE_NODE_BIN") {
        return Ok(PathBuf::from(d));
    }
    let out = Command::new(super::tools::workspace_root().join("scripts/node.sh")).output().context("running scripts/node.sh")?;
    if !out.status.success() {
        bail!("scripts/node.sh failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

pub(super) fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program).args(args).output().with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!("{program} {args:?}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Node {
    /// Starts containerd with `images` (from the Docker engine) and the pause
    /// image imported, then a kubelet registered to `cp`'s first apiserver.
    pub async fn start(cp: &RealControlPlane, images: &[&str]) -> Result<Node> {
        Node::start_with(cp, images, NodeOptions::default()).await
    }

    /// [`Node::start`] with a pod network and kube-proxy as `options` say.
    pub async fn start_with(cp: &RealControlPlane, images: &[&str], options: NodeOptions) -> Result<Node> {
        let bin = node_bin_dir()?;
        let lock = machine_lock("node")?;
        // Holding the lock, every other node directory is a killed run's.
        reap_stale_nodes(&bin);
        let owns_kubelet_chains = !kubelet_chains_present();
        // Short: containerd's socket path must fit sockaddr_un.
        let dir = tempfile::Builder::new().prefix("mvp-node-").tempdir_in("/tmp")?;
        let d = dir.path();
        let name = format!("mvp-node-{}", std::process::id());
        let manifests = d.join("manifests");
        std::fs::create_dir_all(&manifests)?;
        std::fs::create_dir_all(d.join("cni"))?;
        if options.pod_network {
            // Pods reach the host's own addresses through the bridge's
            // gateway (the apiservers: `RealControlPlane::start_on_host_address`).
            std::fs::write(
                d.join("cni/10-mvp.conflist"),
                serde_json::json!({
                    "cniVersion": "1.0.0",
                    "name": "mvp",
                    "plugins": [
                        {"type": "bridge", "bridge": POD_BRIDGE, "isGateway": true, "ipMasq": false, "hairpinMode": true,
                         "ipam": {"type": "host-local", "dataDir": arg(&d.join("cni-ipam")), "ranges": [[{"subnet": POD_SUBNET}]], "routes": [{"dst": "0.0.0.0/0"}]}},
                        {"type": "portmap", "capabilities": {"portMappings": true}},
                        // Pod to pod across the bridge: FORWARD's policy may
                        // drop (the Docker engine sets DROP), as on real nodes.
                        {"type": "firewall", "backend": "iptables"},
                    ],
                })
                .to_string(),
            )?;
        }
        let sock = d.join("containerd.sock");
        std::fs::write(
            d.join("containerd.toml"),
            format!(
                r#"version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  # Pods' network namespaces under the node's directory, not /run/netns.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
"#,
                root = arg(&d.join("containerd/root")),
                state = arg(&d.join("containerd/state")),
                sock = arg(&sock),
                opt = arg(&d.join("containerd/opt")),
                cni = arg(&d.join("cni")),
            ),
        )?;
        let containerd = Proc::spawn("containerd", d, Path::new("containerd"), &["--config".into(), arg(&d.join("containerd.toml"))])?;
        let address = arg(&sock);
        wait_for("containerd to answer", Duration::from_secs(30), || {
            let ok = run("ctr", &["--address", &address, "version"]).is_ok();
            async move { ok.then_some(()) }
        })
        .await
        .with_context(|| containerd.log_tail(20))?;
        // The images, as the Docker engine has them.
        let mut all: Vec<&str> = vec![PAUSE_IMAGE];
        all.extend(images);
        let save = format!("docker save {} | ctr --address {address} -n k8s.io images import --no-unpack -", all.join(" "));
        run("sh", &["-c", &save])?;

        let ports = free_ports(2);
        let (port, healthz) = (ports.first().copied().unwrap_or(0), ports.get(1).copied().unwrap_or(0));
        let user = format!("    client-certificate: {}\n    client-key: {}", cp.admin.cert_file.display(), cp.admin.key_file.display());
        let first = cp.apiservers.first().context("an apiserver")?;
        let kubeconfig = super::secure::kubeconfig(d, &first.url(), &cp.pki.serving.cert_file, &user);
        let dns = match options.cluster_dns {
            true => Some(super::cluster_dns::ClusterDns::start(&super::real_workload::host_ipv4()?, first.url(), cp.http.clone()).await?),
            false => None,
        };
        std::fs::write(
            d.join("kubelet.yaml"),
            format!(
                r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: {manifests}
containerRuntimeEndpoint: unix://{sock}
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
port: {port}
healthzPort: {healthz}
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {{enabled: true}}
  webhook: {{enabled: false}}
authorization: {{mode: AlwaysAllow}}
evictionHard: {{memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%"}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
fileCheckFrequency: 1s
syncFrequency: 5s
{dns}"#,
                manifests = arg(&manifests),
                sock = arg(&sock),
                dns = dns.as_ref().map(super::cluster_dns::ClusterDns::kubelet_config).unwrap_or_default(),
            ),
        )?;
        let kubelet = Proc::spawn(
            "kubelet",
            d,
            &bin.join("kubelet"),
            &[
                "--config".into(),
                arg(&d.join("kubelet.yaml")),
                "--kubeconfig".into(),
                arg(&kubeconfig),
                "--root-dir".into(),
                arg(&d.join("kubelet")),
                "--cert-dir".into(),
                arg(&d.join("kubelet/pki")),
                "--hostname-override".into(),
                name.clone(),
                "--v".into(),
                "2".into(),
            ],
        )?;
        let kube_proxy = match options.kube_proxy {
            true => {
                let ports = free_ports(2);
                Some(Proc::spawn(
                    "kube-proxy",
                    d,
                    &bin.join("kube-proxy"),
                    &[
                        "--kubeconfig".into(),
                        arg(&kubeconfig),
                        "--hostname-override".into(),
                        name.clone(),
                        "--proxy-mode".into(),
                        "iptables".into(),
                        "--cluster-cidr".into(),
                        POD_SUBNET.into(),
                        // Leave the machine's conntrack table as it is.
                        "--conntrack-max-per-core=0".into(),
                        format!("--metrics-bind-address=127.0.0.1:{}", ports.first().copied().unwrap_or(0)),
                        format!("--healthz-bind-address=127.0.0.1:{}", ports.get(1).copied().unwrap_or(0)),
                    ],
                )?)
            }
            false => None,
        };
        let node = Node { name, manifests, sock, kubelet: Some(kubelet), kube_proxy, containerd: Some(containerd), _dns: dns, options, owns_kubelet_chains, dir, _lock: lock };
        let url = format!("{}/api/v1/nodes/{}", first.url(), node.name);
        let registered = wait_for("the kubelet to register its node", Duration::from_secs(60), || async { cp.http.get(&url).send().await.ok().filter(|r| r.status() == 200) }).await;
        if let Err(e) = registered {
            let tail = node.kubelet.as_ref().map(|k| k.log_tail(30)).unwrap_or_default();
            bail!("{e:#}\n----- kubelet -----\n{tail}");
        }
        Ok(node)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn kubelet_log_tail(&self, lines: usize) -> String {
        self.kubelet.as_ref().map(|k| k.log_tail(lines)).unwrap_or_default()
    }

    /// containerd's tasks (running containers), by id.
    fn tasks(&self) -> Vec<String> {
        run("ctr", &["--address", &arg(&self.sock), "-n", "k8s.io", "tasks", "ls", "-q"]).map(|s| s.lines().map(str::to_string).collect()).unwrap_or_default()
    }
}

impl Drop for Node {
    /// The static pods stopped by their kubelet (manifests removed), then
    /// whatever still runs killed, the kubelet and containerd stopped, and
    /// the mounts under the node's directory undone.
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("----- last lines of the kubelet -----\n{}", self.kubelet_log_tail(40));
        }
        if let Ok(entries) = std::fs::read_dir(&self.manifests) {
            for e in entries.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        for _ in 0..100 {
            if self.tasks().is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        drop(self.kubelet.take());
        if self.kube_proxy.take().is_some()
            && let Ok(bin) = node_bin_dir()
        {
            // Its iptables rules, all of them.
            let _ = Command::new(bin.join("kube-proxy")).args(["--cleanup", "--proxy-mode", "iptables"]).output();
        }
        let address = arg(&self.sock);
        for task in self.tasks() {
            let _ = run("ctr", &["--address", &address, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", &task]);
        }
        drop(self.containerd.take());
        // The shims outlive containerd: those of this node's socket.
        let _ = Command::new("pkill").args(["-9", "-f", &format!("containerd-shim.*{address}")]).status();
        remove_runc_containers_under(&format!("{}/", arg(self.dir.path())));
        unmount_under(self.dir.path());
        if self.options.pod_network {
            let _ = Command::new("ip").args(["link", "del", POD_BRIDGE]).output();
            remove_cni_chains();
        }
        if self.owns_kubelet_chains {
            remove_kubelet_chains();
        }
    }
}
