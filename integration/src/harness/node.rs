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

use super::process::{Proc, arg, free_ports, wait_for};
use super::real::RealControlPlane;

/// The pause image `scripts/node.sh` builds from kube's source.
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

pub struct Node {
    pub name: String,
    /// The kubelet's static pod manifests.
    pub manifests: PathBuf,
    /// containerd's socket.
    pub sock: PathBuf,
    kubelet: Option<Proc>,
    containerd: Option<Proc>,
    /// Dropped last: after every process in it.
    dir: tempfile::TempDir,
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

fn run(program: &str, args: &[&str]) -> Result<String> {
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
        let bin = node_bin_dir()?;
        // Short: containerd's socket path must fit sockaddr_un.
        let dir = tempfile::Builder::new().prefix("mvp-node-").tempdir_in("/tmp")?;
        let d = dir.path();
        let name = format!("mvp-node-{}", std::process::id());
        let manifests = d.join("manifests");
        std::fs::create_dir_all(&manifests)?;
        std::fs::create_dir_all(d.join("cni"))?;
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
"#,
                manifests = arg(&manifests),
                sock = arg(&sock),
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
        let node = Node { name, manifests, sock, kubelet: Some(kubelet), containerd: Some(containerd), dir };
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
        let address = arg(&self.sock);
        for task in self.tasks() {
            let _ = run("ctr", &["--address", &address, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", &task]);
        }
        drop(self.containerd.take());
        // The shims outlive containerd: those of this node's socket.
        let _ = Command::new("pkill").args(["-9", "-f", &format!("containerd-shim.*{address}")]).status();
        let prefix = self.dir.path().to_string_lossy().into_owned();
        let mounts: Vec<String> = std::fs::read_to_string("/proc/mounts")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
            .filter(|m| m.starts_with(&prefix))
            .collect();
        for m in mounts.iter().rev() {
            let _ = Command::new("umount").args(["-l", m]).status();
        }
    }
}
