//! What a workload in a cluster of the test's needs of its control plane
//! beyond the apiservers (`install_workload.rs`): the host's own address
//! for them (a pod reaches it through its bridge) and the controllers.

use anyhow::{Context, Result, anyhow};

use super::process::{Proc, arg};
use super::real::RealControlPlane;

/// This host's own IPv4 address (the one its default route leaves from).
pub fn host_ipv4() -> Result<String> {
    let out = std::process::Command::new("ip").args(["-4", "-o", "route", "get", "1.1.1.1"]).output().context("ip route get")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split_whitespace();
    while let Some(w) = words.next() {
        if w == "src" {
            return words.next().map(str::to_string).context("no address after src");
        }
    }
    Err(anyhow!("no source address in `ip route get`: {text}"))
}

impl RealControlPlane {
    /// What a workload needs of a control plane besides its apiservers: a
    /// kube-controller-manager with every default controller (deployments,
    /// service accounts, the root CA's ConfigMap, endpoint slices) and a
    /// kube-scheduler, of the newest release, as the cluster admin.
    pub fn start_workload_controllers(&self) -> Result<(Proc, Proc)> {
        let dir = self.dir.path();
        let first = self.apiservers.first().context("an apiserver")?;
        let user = format!("    client-certificate: {}\n    client-key: {}", self.admin.cert_file.display(), self.admin.key_file.display());
        let kubeconfig = super::secure::kubeconfig(dir, &first.url(), &self.pki.serving.cert_file, &user);
        let bin = super::node::node_bin_dir()?;
        let kcm = Proc::spawn(
            "kube-controller-manager",
            dir,
            &bin.join("kube-controller-manager"),
            &[
                format!("--kubeconfig={}", arg(&kubeconfig)),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
                format!("--root-ca-file={}", arg(&self.pki.serving.cert_file)),
                format!("--service-account-private-key-file={}", arg(&self.service_account_key)),
            ],
        )?;
        let scheduler = Proc::spawn(
            "kube-scheduler",
            dir,
            &bin.join("kube-scheduler"),
            &[format!("--kubeconfig={}", arg(&kubeconfig)), "--leader-elect=false".into(), "--secure-port=0".into()],
        )?;
        Ok((kcm, scheduler))
    }
}
