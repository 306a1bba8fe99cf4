//! What a node of the test's leaves on the machine, and its removal: its
//! mounts, the kubelet's and the CNI plugins' iptables chains, and what a
//! killed node left (`reap_stale_nodes`).

use std::path::Path;
use std::process::Command;

use super::node::{POD_BRIDGE, RUNC_ROOT, run};
use super::process::arg;

/// Undoes every mount under `dir`, deepest first.
pub(super) fn unmount_under(dir: &Path) {
    let prefix = dir.to_string_lossy().into_owned();
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

/// What a node killed before its `Drop` ran (a test run stopped by a
/// timeout, a machine restarted) left behind: its processes,
/// mounts, pods' network namespaces and directory, the bridge, kube-proxy's
/// rules and the kubelet's chains. Without this the next node would start
/// beside them and count the chains as not its own.
pub(super) fn reap_stale_nodes(bin: &Path) {
    let Ok(entries) = std::fs::read_dir("/tmp") else { return };
    for dir in entries.flatten().map(|e| e.path()).filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("mvp-node-"))) {
        // Its kubelet, kube-proxy, containerd and shims: each names a file
        // in the directory on its command line.
        let _ = Command::new("pkill").args(["-9", "-f", &format!("{}/", arg(&dir))]).status();
        unmount_under(&dir);
        let _ = std::fs::remove_dir_all(&dir);
    }
    // Every node's containers, also those whose directory is gone: no node
    // runs while this one holds the machine's node lock.
    remove_runc_containers_under("/tmp/mvp-node-");
    let _ = Command::new("ip").args(["link", "del", POD_BRIDGE]).output();
    if Command::new("iptables").args(["-t", "nat", "-nL", "KUBE-SERVICES"]).output().map(|o| o.status.success()).unwrap_or(false) {
        let _ = Command::new(bin.join("kube-proxy")).args(["--cleanup", "--proxy-mode", "iptables"]).output();
    }
    remove_kubelet_chains();
    remove_cni_chains();
}

/// The chains every kubelet makes (`pkg/kubelet/kubelet_network_linux.go`):
/// its canaries, the iptables-mode hint, and KUBE-FIREWALL, whose rule drops
/// packets to 127.0.0.0/8 from other addresses — not to be left behind on a
/// test machine.
const KUBELET_CHAINS: [(&str, &str); 4] = [("mangle", "KUBE-IPTABLES-HINT"), ("mangle", "KUBE-KUBELET-CANARY"), ("nat", "KUBE-KUBELET-CANARY"), ("filter", "KUBE-KUBELET-CANARY")];

pub(super) fn kubelet_chains_present() -> bool {
    Command::new("iptables").args(["-t", "filter", "-nL", "KUBE-FIREWALL"]).output().map(|o| o.status.success()).unwrap_or(false)
}

pub(super) fn remove_kubelet_chains() {
    for tool in ["iptables", "ip6tables"] {
        let ipt = |args: &[&str]| {
            let _ = Command::new(tool).args(args).output();
        };
        for hook in ["INPUT", "OUTPUT"] {
            ipt(&["-t", "filter", "-D", hook, "-j", "KUBE-FIREWALL"]);
        }
        ipt(&["-t", "filter", "-F", "KUBE-FIREWALL"]);
        ipt(&["-t", "filter", "-X", "KUBE-FIREWALL"]);
        for (table, chain) in KUBELET_CHAINS {
            ipt(&["-t", table, "-F", chain]);
            ipt(&["-t", table, "-X", chain]);
        }
    }
}

/// The containers whose bundle is under `prefix`: they outlive their shims
/// and containerd (a stopped one stays in runc's own state).
pub(super) fn remove_runc_containers_under(prefix: &str) {
    let list = run("runc", &["--root", RUNC_ROOT, "list", "--format", "json"]).unwrap_or_default();
    let containers: Vec<serde_json::Value> = serde_json::from_str(&list).unwrap_or_default();
    for c in containers.iter().filter(|c| c["bundle"].as_str().is_some_and(|b| b.starts_with(prefix))) {
        if let Some(id) = c["id"].as_str() {
            let _ = run("runc", &["--root", RUNC_ROOT, "delete", "--force", id]);
        }
    }
}

/// The chains the CNI firewall plugin makes once and leaves (it removes only
/// each pod's rules).
pub(super) fn remove_cni_chains() {
    let ipt = |args: &[&str]| {
        let _ = Command::new("iptables").args(args).output();
    };
    ipt(&["-t", "filter", "-D", "FORWARD", "-m", "comment", "--comment", "CNI firewall plugin rules", "-j", "CNI-FORWARD"]);
    for chain in ["CNI-FORWARD", "CNI-ADMIN"] {
        ipt(&["-t", "filter", "-F", chain]);
        ipt(&["-t", "filter", "-X", chain]);
    }
}
