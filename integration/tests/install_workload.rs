//! `deploy/workload/mvp-envoy.yaml` applied with kubectl as the docs say
//! (issue 57 item 3), to a one-node cluster of the test's: two real
//! kube-apiservers of the newest release (one alone serving an API the
//! other lacks) on this host's address, a real kube-controller-manager and
//! kube-scheduler, a real kubelet on containerd with the CNI bridge plugin
//! for pods and a real kube-proxy (iptables) for Services (`harness::node`).
//! The only edit to the manifest is its ConfigMap's list of apiservers; the
//! Secrets are made from the test's PKI and `mvp-ext-proc certs`, as the
//! manifest's header says. Checked: both replicas Ready (their probes pass);
//! the operator endpoints refuse a request without a token (401) and serve
//! one with a token the cluster knows, reviewed by it (delegated
//! authentication over the `kubernetes` Service: kube-proxy); requests
//! through the `mvp-envoy` Service's ClusterIP routed to the one apiserver
//! that serves their API, as the client certificate's user; either
//! replica's `readiness` counts the clients of both (each reads the other's
//! counts by the headless Service's name: the node's cluster DNS,
//! `harness::cluster_dns`). (The Service is
//! a LoadBalancer; no load-balancer controller runs here, so its ClusterIP
//! is what is asked.)
//!
//! Needs root, the images and the node's parts (`scripts/test.sh`:
//! `MVP_DOCKER=1`).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use integration::harness::node::{IMAGES, Node, NodeOptions, require_install_parts};
use integration::harness::real::{RealControlPlane, TOKENS, newest_pair};
use integration::harness::secure::kubeconfig;
use integration::harness::{ext_proc_bin, kubectl_137, tls_client_config, wait_for, workspace_root};
use serde_json::Value;

/// Only kas-b serves coordination.k8s.io/v1beta1 (LeaseCandidates).
const SKEWED: &str = "/apis/coordination.k8s.io/v1beta1/namespaces/default/leasecandidates";
/// The name the front door's serving certificate carries, what clients ask
/// for (they reach it by the Service's ClusterIP).
const FRONT_NAME: &str = "mvp-envoy.mvp-envoy.svc";

fn kubectl(config: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(kubectl_137().unwrap()).arg("--kubeconfig").arg(config).args(args).env("KUBECACHEDIR", config.with_extension("cache")).output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn json(config: &Path, args: &[&str]) -> Option<Value> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let (ok, text) = kubectl(config, &all);
    if ok { serde_json::from_str(&text).ok() } else { None }
}

/// The shipped manifest with its ConfigMap naming `members`.
fn edited_manifest(members: &[(String, String)]) -> String {
    let text = std::fs::read_to_string(workspace_root().join("deploy/workload/mvp-envoy.yaml")).unwrap();
    let list: Vec<String> = members.iter().map(|(n, u)| format!("    {n}={u}")).collect();
    let mut out = Vec::new();
    let mut replaced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("cp") && line.contains("=https://10.0.0.1") {
            if !replaced {
                out.extend(list.iter().cloned());
                replaced = true;
            }
            continue;
        }
        out.push(line.to_string());
    }
    assert!(replaced, "the manifest's ConfigMap lists no example apiservers");
    out.join("\n") + "\n"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workload_form_runs_in_a_real_cluster() {
    require_install_parts();
    let cp = RealControlPlane::start_on_host_address(&newest_pair()).await.unwrap();
    let dir = cp.dir.path().to_path_buf();
    let admin_user = format!("    client-certificate: {}\n    client-key: {}", cp.admin.cert_file.display(), cp.admin.key_file.display());
    let admin = kubeconfig(&dir, &cp.apiservers[0].url(), &cp.pki.serving.cert_file, &admin_user);
    // The `kubernetes` Service's endpoint, kas-a (no reconciler: the two
    // servers share this host's address on different ports).
    let a = &cp.apiservers[0];
    let endpoints = serde_json::json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "kubernetes", "namespace": "default"},
        "subsets": [{"addresses": [{"ip": a.ip}], "ports": [{"name": "https", "port": a.port, "protocol": "TCP"}]}]});
    let resp = cp.http.put(format!("{}/api/v1/namespaces/default/endpoints/kubernetes", a.url())).json(&endpoints).send().await.unwrap();
    assert!(resp.status().is_success(), "the kubernetes Endpoints: {}", resp.status());
    let (_kcm, _scheduler) = cp.start_workload_controllers().unwrap();
    let node = Node::start_with(&cp, &IMAGES, NodeOptions { pod_network: true, kube_proxy: true, cluster_dns: true }).await.unwrap();

    // The Secrets, as the manifest's header says: the fronted control
    // plane's PKI (kubeadm's names; `ca.crt` the bundle of its two CAs), and
    // the control channel's from `mvp-ext-proc certs`.
    let pki = dir.join("workload-pki");
    std::fs::create_dir_all(&pki).unwrap();
    let front = cp.pki.serving.server(&pki, "front", &[FRONT_NAME], &[]).unwrap();
    for (from, to) in [(&front.cert_file, "apiserver.crt"), (&front.key_file, "apiserver.key"), (&cp.pki.proxy_client.cert_file, "front-proxy-client.crt"), (&cp.pki.proxy_client.key_file, "front-proxy-client.key")] {
        std::fs::copy(from, pki.join(to)).unwrap();
    }
    std::fs::write(pki.join("ca.crt"), cp.pki.serving.pem() + &cp.pki.clients.pem()).unwrap();
    let control = dir.join("control");
    let certs = Command::new(ext_proc_bin().unwrap()).args(["certs", "--out"]).arg(&control).output().unwrap();
    assert!(certs.status.success(), "{}", String::from_utf8_lossy(&certs.stderr));
    let manifest = dir.join("mvp-envoy.yaml");
    let members: Vec<(String, String)> = cp.apiservers.iter().map(|a| (a.name.clone(), a.url())).collect();
    std::fs::write(&manifest, edited_manifest(&members)).unwrap();
    let (ok, text) = kubectl(&admin, &["apply", "-f", manifest.to_str().unwrap()]);
    assert!(ok, "kubectl apply: {text}");
    let file = |d: &Path, f: &str| format!("--from-file={}", d.join(f).display());
    let mut args = vec!["-n".to_string(), "mvp-envoy".into(), "create".into(), "secret".into(), "generic".into(), "mvp-envoy-pki".into()];
    args.extend(["apiserver.crt", "apiserver.key", "ca.crt", "front-proxy-client.crt", "front-proxy-client.key"].iter().map(|f| file(&pki, f)));
    let (ok, text) = kubectl(&admin, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(ok, "the pki Secret: {text}");
    let mut args = vec!["-n".to_string(), "mvp-envoy".into(), "create".into(), "secret".into(), "generic".into(), "mvp-envoy-control".into()];
    args.extend(["ca.crt", "server.crt", "server.key", "envoy.crt", "envoy.key"].iter().map(|f| file(&control, f)));
    let (ok, text) = kubectl(&admin, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(ok, "the control Secret: {text}");

    // Both replicas Ready.
    let ready = wait_for("both replicas Ready", Duration::from_secs(180), || {
        let d = json(&admin, &["-n", "mvp-envoy", "get", "deployment", "mvp-envoy"]);
        async move { d.filter(|d| d["status"]["readyReplicas"] == 2) }
    })
    .await;
    if ready.is_err() {
        let (_, pods) = kubectl(&admin, &["-n", "mvp-envoy", "describe", "pods"]);
        panic!("the replicas were not Ready in 180 s:\n{pods}\n----- kubelet -----\n{}", node.kubelet_log_tail(30));
    }
    let pods = json(&admin, &["-n", "mvp-envoy", "get", "pods"]).unwrap();
    let pod_ips: Vec<String> = pods["items"].as_array().unwrap().iter().filter_map(|p| p["status"]["podIP"].as_str().map(str::to_string)).collect();
    assert_eq!(pod_ips.len(), 2, "{pods}");

    // The operator endpoints: refused without a token, served with one the
    // cluster knows (delegated: TokenReview and SubjectAccessReview).
    let control_tls = tls_client_config(&control.join("ca.crt"), None, &[b"http/1.1"]).unwrap();
    let ip: std::net::IpAddr = pod_ips[0].parse().unwrap();
    let operator = reqwest::Client::builder()
        .use_preconfigured_tls(control_tls)
        .resolve("mvp-ext-proc", std::net::SocketAddr::new(ip, 9091))
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let anonymous = operator.get("https://mvp-ext-proc:9091/table").send().await.unwrap();
    assert_eq!(anonymous.status(), 401, "the operator endpoints without a token");
    let with_token = operator.get("https://mvp-ext-proc:9091/table").bearer_auth(TOKENS[0].0).send().await.unwrap();
    assert_eq!(with_token.status(), 200, "the operator endpoints with the admin's token");
    let table: Value = with_token.json().await.unwrap();
    assert_eq!(table["apiservers"].as_array().map(|a| a.iter().filter(|s| s["open"] == true).count()), Some(2), "{table}");

    // Through the Service (kube-proxy), a client certificate of its own.
    let service = json(&admin, &["-n", "mvp-envoy", "get", "service", "mvp-envoy"]).unwrap();
    let cluster_ip: std::net::IpAddr = service["spec"]["clusterIP"].as_str().unwrap().parse().unwrap();
    let alice = cp.pki.clients.client(&dir, "alice", "alice", &["dev"]).unwrap();
    let tls = tls_client_config(&pki.join("ca.crt"), Some(&alice), &[b"h2"]).unwrap();
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .resolve(FRONT_NAME, std::net::SocketAddr::new(cluster_ip, 443))
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    for _ in 0..6 {
        let resp = client.get(format!("https://{FRONT_NAME}{SKEWED}")).send().await.unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        // alice has no RBAC: kube's 403 names her — from kas-b, which serves
        // the API (kas-a would answer 404).
        assert_eq!(status, 403, "the skewed API through the Service: {text}");
        assert!(text.contains("User \\\"alice\\\" cannot list resource \\\"leasecandidates\\\""), "{text}");
    }
    // Each pod's own front door too (its Envoy logs to its own replica):
    // both replicas count alice.
    for ip in &pod_ips {
        let at = std::net::SocketAddr::new(ip.parse().unwrap(), 7443);
        let direct = reqwest::Client::builder().use_preconfigured_tls(tls_client_config(&pki.join("ca.crt"), Some(&alice), &[b"h2"]).unwrap()).resolve(FRONT_NAME, at).no_proxy().timeout(Duration::from_secs(10)).build().unwrap();
        for _ in 0..2 {
            assert_eq!(direct.get(format!("https://{FRONT_NAME}{SKEWED}")).send().await.unwrap().status(), 403, "the skewed API through pod {ip}");
        }
    }
    // Either replica's `readiness` counts both replicas' clients: it reads
    // the other's /usage (--replica: the headless Service, its
    // ServiceAccount's token, the mvp-envoy-replicas role).
    for ip in &pod_ips {
        let replica = reqwest::Client::builder()
            .use_preconfigured_tls(tls_client_config(&control.join("ca.crt"), None, &[b"http/1.1"]).unwrap())
            .resolve("mvp-ext-proc", std::net::SocketAddr::new(ip.parse().unwrap(), 9091))
            .no_proxy()
            .timeout(Duration::from_secs(20))
            .build()
            .unwrap();
        let ask = || async {
            let r: Value = replica.get("https://mvp-ext-proc:9091/readiness?remove=kas-b").bearer_auth(TOKENS[0].0).send().await.ok()?.json().await.ok()?;
            let api = r["lost"].as_array()?.iter().find(|a| a["routedBy"] == "coordination.k8s.io/v1beta1/leasecandidates")?.clone();
            let alice = api["usedBy"]["clients"].as_array()?.iter().find(|c| c["who"]["user"] == "alice")?["count"].as_u64()?;
            Some((r, alice))
        };
        let counted = wait_for("alice's 10 requests, on both replicas, in one report", Duration::from_secs(30), || async { ask().await.filter(|(_, n)| *n == 10) }).await;
        let Ok((report, _)) = counted else {
            let last = replica.get("https://mvp-ext-proc:9091/readiness?remove=kas-b").bearer_auth(TOKENS[0].0).send().await.unwrap().text().await.unwrap();
            panic!("replica {ip}: alice's 10 requests not counted in one report: {last}");
        };
        assert_eq!(report["replicas"].as_array().map(Vec::len), Some(2), "{report}");
        assert!(report["replicasUnanswered"].is_null(), "{report}");
    }
    eprintln!("workload form: two replicas Ready on pods {pod_ips:?}; operator endpoints 401 without a token, 200 with one; the skewed API through the Service's ClusterIP {cluster_ip} as alice, every time from the apiserver that serves it; either replica's readiness counts alice's 10 requests over both");

    let (ok, text) = kubectl(&admin, &["delete", "-f", manifest.to_str().unwrap(), "--wait=true", "--timeout=60s"]);
    assert!(ok, "kubectl delete: {text}");
}
