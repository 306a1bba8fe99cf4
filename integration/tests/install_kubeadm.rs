//! `deploy/kubeadm/mvp-envoy.yaml` as the docs tell an operator to run it
//! (issue 57 item 2): copied into a real kubelet's manifest directory (a
//! kubelet of the newest release on containerd, registered to two real
//! kube-apiservers of that release: `harness::node`), its `--apiserver`
//! lines edited to name them, kubeadm's PKI file names. The only other edit:
//! its two hostPath directories (`/etc/kubernetes/pki`, `/var/lib/mvp-envoy`)
//! moved under the test's directory, so a test machine's own stay
//! untouched. What the operator checks: the mirror pod
//! `kube-system/mvp-envoy-<node>` Running and Ready (its probes pass),
//! `kubectl logs … -c envoy` showing the access log, a kubectl through the
//! pod's `:7443` routing a skewed API to the one apiserver that serves it
//! and carrying the client certificate's user, and after the Envoy
//! container is killed the kubelet restarting it and requests answered
//! again within seconds.
//!
//! Needs root, the Docker engine's images (`scripts/images.sh`) and the
//! node's parts (`scripts/node.sh`); `scripts/test.sh` prepares them
//! (`MVP_DOCKER=1`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use integration::harness::node::{IMAGES, Node, require_install_parts};
use integration::harness::real::{RealControlPlane, newest_pair};
use integration::harness::secure::kubeconfig;
use integration::harness::{kubectl_137, wait_for, workspace_root};
use serde_json::Value;

/// Only kas-b serves coordination.k8s.io/v1beta1 (LeaseCandidates).
const SKEWED: &str = "/apis/coordination.k8s.io/v1beta1/namespaces/default/leasecandidates";

fn kubectl(config: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(kubectl_137().unwrap())
        .arg("--kubeconfig")
        .arg(config)
        .args(args)
        .env("KUBECACHEDIR", config.with_extension("cache"))
        .output()
        .unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// kubeadm's file names in /etc/kubernetes/pki, from the test's PKI:
/// `ca.crt` is one CA in kubeadm (clients and serving certificates); here
/// the bundle of the two that sign them.
fn kubeadm_pki(cp: &RealControlPlane, dir: &Path) -> std::path::PathBuf {
    let pki = dir.join("etc-kubernetes-pki");
    std::fs::create_dir_all(&pki).unwrap();
    let copy = |from: &Path, to: &str| std::fs::copy(from, pki.join(to)).unwrap();
    copy(&cp.pki.front_door.cert_file, "apiserver.crt");
    copy(&cp.pki.front_door.key_file, "apiserver.key");
    copy(&cp.pki.proxy_client.cert_file, "front-proxy-client.crt");
    copy(&cp.pki.proxy_client.key_file, "front-proxy-client.key");
    std::fs::write(pki.join("ca.crt"), cp.pki.serving.pem() + &cp.pki.clients.pem()).unwrap();
    pki
}

/// The shipped manifest with its `--apiserver` lines naming `members` (the
/// three example lines become one per member), and its hostPaths moved.
fn edited_manifest(members: &[(String, String)], pki: &Path, state: &Path) -> String {
    let text = std::fs::read_to_string(workspace_root().join("deploy/kubeadm/mvp-envoy.yaml")).unwrap();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(at) = line.find("--apiserver=cp") {
            // Each place lists cp1, cp2, cp3: one list of the members
            // replaces it, written where cp1 was.
            if line[at..].starts_with("--apiserver=cp1=") {
                for (name, url) in members {
                    out.push(format!("{}--apiserver={name}={url}{}", &line[..at], if line.trim_end().ends_with('\\') { " \\" } else { "" }));
                }
            }
            continue;
        }
        out.push(line.replace("path: /etc/kubernetes/pki,", &format!("path: {},", pki.display())).replace("path: /var/lib/mvp-envoy,", &format!("path: {},", state.display())));
    }
    out.join("\n") + "\n"
}

fn pod(config: &Path, name: &str) -> Option<Value> {
    let (ok, text) = kubectl(config, &["-n", "kube-system", "get", "pod", name, "-o", "json"]);
    if !ok {
        return None;
    }
    serde_json::from_str(&text).ok()
}

fn ready(p: &Value) -> bool {
    p["status"]["phase"] == "Running" && p["status"]["conditions"].as_array().is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

fn restarts(p: &Value, container: &str) -> u64 {
    p["status"]["containerStatuses"].as_array().and_then(|c| c.iter().find(|c| c["name"] == container)).and_then(|c| c["restartCount"].as_u64()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubeadm_static_pod_runs_under_a_real_kubelet() {
    require_install_parts();
    let cp = RealControlPlane::start_specs(&newest_pair()).await.unwrap();
    let node = Node::start(&cp, &IMAGES).await.unwrap();
    let pki = kubeadm_pki(&cp, node.dir());
    let state = node.dir().join("var-lib-mvp-envoy");
    let members: Vec<(String, String)> = cp.apiservers.iter().map(|a| (a.name.clone(), a.url())).collect();
    let started = Instant::now();
    std::fs::write(node.manifests.join("mvp-envoy.yaml"), edited_manifest(&members, &pki, &state)).unwrap();

    let admin_user = format!("    client-certificate: {}\n    client-key: {}", cp.admin.cert_file.display(), cp.admin.key_file.display());
    let admin = kubeconfig(node.dir(), &cp.apiservers[0].url(), &cp.pki.serving.cert_file, &admin_user);
    let mirror = format!("mvp-envoy-{}", node.name);
    let running = wait_for("the mirror pod Running and Ready", Duration::from_secs(120), || {
        let p = pod(&admin, &mirror);
        async move { p.filter(ready) }
    })
    .await;
    if running.is_err() {
        let (_, describe) = kubectl(&admin, &["-n", "kube-system", "describe", "pod", &mirror]);
        panic!("{mirror} not Ready in 120 s:\n{describe}\n----- kubelet -----\n{}", node.kubelet_log_tail(40));
    }
    let ready_after = started.elapsed();
    let (_, table) = kubectl(&admin, &["-n", "kube-system", "get", "pods", "-o", "wide"]);
    assert!(table.lines().any(|l| l.starts_with(&mirror) && l.contains("Running") && l.contains("2/2")), "kubectl get pods:\n{table}");

    // A client with a certificate of its own through the pod's :7443.
    let alice = cp.pki.clients.client(node.dir(), "alice", "alice", &["system:masters"]).unwrap();
    let user = format!("    client-certificate: {}\n    client-key: {}", alice.cert_file.display(), alice.key_file.display());
    let clients = node.dir().join("clients");
    std::fs::create_dir_all(&clients).unwrap();
    let through = kubeconfig(&clients, "https://127.0.0.1:7443", &pki.join("ca.crt"), &user);
    for _ in 0..4 {
        let (ok, text) = kubectl(&through, &["get", "--raw", SKEWED]);
        assert!(ok && text.contains("LeaseCandidateList"), "the skewed API through :7443: {text}");
    }
    let (ok, whoami) = kubectl(&through, &["auth", "whoami", "-o", "json"]);
    let review: Value = serde_json::from_str(&whoami).unwrap_or(Value::Null);
    assert!(ok && review["status"]["userInfo"]["username"] == "alice", "the client's identity through the door: {whoami}");

    // The access log, as the operator reads it.
    let (ok, logs) = kubectl(&admin, &["-n", "kube-system", "logs", &mirror, "-c", "envoy"]);
    assert!(ok && logs.lines().any(|l| l.contains("\"routedBy\":\"coordination.k8s.io/v1beta1/leasecandidates\"") && l.contains("\"user\":\"alice\"")), "kubectl logs -c envoy:\n{logs}");

    // Envoy killed: the kubelet restarts its container.
    let before = restarts(&pod(&admin, &mirror).unwrap(), "envoy");
    let out = Command::new("pkill").args(["-9", "-f", "envoy -c /etc/mvp/envoy/envoy.yaml"]).output().unwrap();
    assert!(out.status.success(), "no Envoy process to kill");
    let killed = Instant::now();
    wait_for("requests answered through :7443 again", Duration::from_secs(60), || {
        let (ok, text) = kubectl(&through, &["get", "--raw", SKEWED]);
        async move { (ok && text.contains("LeaseCandidateList")).then_some(()) }
    })
    .await
    .unwrap();
    let back = killed.elapsed();
    let after = pod(&admin, &mirror).unwrap();
    assert!(restarts(&after, "envoy") > before, "the kubelet did not restart the envoy container");
    eprintln!("kubeadm static pod under a real kubelet: {mirror} Ready {ready_after:.1?} after the manifest was copied; the skewed API and alice's identity through :7443; Envoy killed, answered again after {back:.1?} (restarts {})", restarts(&after, "envoy"));
}
