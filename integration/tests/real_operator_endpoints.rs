//! The operator endpoints (`--metrics-listen`: `/table`, `/debug/route`, `/readiness`,
//! `/metrics`, the status page) behind delegated authentication and
//! authorization by a REAL kube-apiserver (issue 47 item 2): before, anyone
//! who reached the port read `/table` — every apiserver, its address, its
//! last error. With `serve --authentication-kubeconfig`, as
//! kube-controller-manager's secure port: a bearer token reviewed by the
//! cluster (TokenReview), its user allowed the path by RBAC
//! (SubjectAccessReview, non-resource URL, verb get); `/healthz` and
//! `/readyz` stay open.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use integration::harness::real::{RealControlPlane, TOKENS};
use integration::harness::secure::kubeconfig;
use integration::harness::{Proc, ext_proc_bin, free_ports, tls_client_config, wait_for};

/// Both ways the operator port is served: plain HTTP (loopback, kubeadm)
/// and HTTPS with the gRPC port's certificate (`--metrics-tls`, the
/// workload deployment), where a plaintext request gets nothing.
#[tokio::test]
async fn the_operator_endpoints_answer_whom_the_cluster_allows() {
    let cp = RealControlPlane::start(&[("kas-a", &[][..])]).await.unwrap();
    let user = format!("    client-certificate: {}\n    client-key: {}", cp.admin.cert_file.display(), cp.admin.key_file.display());
    let kc = kubeconfig(cp.dir.path(), &cp.apiservers[0].url(), &cp.pki.serving.cert_file, &user);
    let admin_token = TOKENS[0].0;
    // RBAC as an operator would grant it: "nobody" may read /table only.
    let role = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "mvp-envoy-table"},
        "rules": [{"nonResourceURLs": ["/table"], "verbs": ["get"]}]});
    let binding = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "mvp-envoy-table"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "mvp-envoy-table"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "nobody"}]});
    let base = cp.apiservers[0].url();
    for (path, body) in [("/apis/rbac.authorization.k8s.io/v1/clusterroles", role), ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)] {
        let resp = cp.http.post(format!("{base}{path}")).json(&body).send().await.unwrap();
        assert_eq!(resp.status(), 201, "{path}");
    }

    let token_file = cp.dir.path().join("admin.token");
    std::fs::write(&token_file, admin_token).unwrap();
    check(&cp, &kc, &token_file, None).await;
    let control = cp.dir.path().join("control");
    let out = Command::new(ext_proc_bin().unwrap()).args(["certs", "--out"]).arg(&control).args(["--server-ip", "127.0.0.1"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    check(&cp, &kc, &token_file, Some(&control)).await;
}

/// The operator port of an mvp-ext-proc with delegated auth, over HTTPS
/// with the certificate set in `tls`, else plain HTTP.
async fn check(cp: &RealControlPlane, kc: &Path, token_file: &Path, tls: Option<&Path>) {
    let (admin_token, nobody_token) = (TOKENS[0].0, TOKENS[1].0);
    let base = cp.apiservers[0].url();
    let ports = free_ports(2);
    let metrics = format!("127.0.0.1:{}", ports[1]);
    let mut args: Vec<String> = vec![
        "serve".into(),
        "--apiserver".into(),
        format!("kas-a={base}"),
        "--grpc-listen".into(),
        format!("127.0.0.1:{}", ports[0]),
        "--metrics-listen".into(),
        metrics.clone(),
        "--peer-ca-file".into(),
        cp.pki.serving.cert_file.display().to_string(),
        "--discovery-token-file".into(),
        token_file.display().to_string(),
        "--authentication-kubeconfig".into(),
        kc.display().to_string(),
    ];
    if let Some(dir) = tls {
        for (flag, file) in [("--tls-cert-file", "server.crt"), ("--tls-private-key-file", "server.key"), ("--client-ca-file", "ca.crt")] {
            args.extend([flag.to_string(), dir.join(file).display().to_string()]);
        }
        args.push("--metrics-tls".into());
    }
    let _ext_proc = Proc::spawn("mvp-ext-proc", cp.dir.path(), &ext_proc_bin().unwrap(), &args).unwrap();
    let mut http = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(15));
    if let Some(dir) = tls {
        http = http.use_preconfigured_tls(tls_client_config(&dir.join("ca.crt"), None, &[b"http/1.1"]).unwrap());
    }
    let http = http.build().unwrap();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = |p: &str| format!("{scheme}://{metrics}{p}");
    wait_for("mvp-ext-proc ready", Duration::from_secs(60), || async {
        http.get(url("/readyz")).send().await.ok().filter(|r| r.status() == 200)
    })
    .await
    .unwrap();

    let get = |path: &'static str, token: Option<&'static str>| {
        let mut req = http.get(url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            (status, resp.text().await.unwrap_or_default())
        }
    };
    // Open, as kube leaves them.
    assert_eq!(get("/healthz", None).await.0, 200);
    assert_eq!(get("/readyz", None).await.0, 200);
    // No token, a token the cluster does not know: 401 Status.
    for (path, token) in [("/table", None), ("/metrics", None), ("/debug/route", None), ("/readiness", None), ("/usage", None), ("/", None), ("/table", Some("not-a-token"))] {
        let (status, body) = get(path, token).await;
        assert_eq!(status, 401, "{path} {token:?}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!((v["kind"].as_str(), v["reason"].as_str()), (Some("Status"), Some("Unauthorized")));
    }
    // A user RBAC allows /table only.
    let (status, body) = get("/table", Some(nobody_token)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("kas-a"), "{body}");
    let (status, body) = get("/metrics", Some(nobody_token)).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("User \\\"nobody\\\" cannot get path \\\"/metrics\\\""), "{body}");
    // system:masters: everything.
    for path in ["/metrics", "/table", "/readiness", "/usage", "/"] {
        assert_eq!(get(path, Some(admin_token)).await.0, 200, "{path}");
    }
    for path in ["/readiness", "/usage"] {
        let (status, body) = get(path, Some(nobody_token)).await;
        assert_eq!(status, 403, "{path}: {body}");
    }
    // explain presents a token.
    let explain = |token: Option<&std::path::Path>| {
        let mut c = Command::new(ext_proc_bin().unwrap());
        c.args(["explain", "--server", &url(""), "/api/v1/namespaces/default/pods"]);
        if let Some(dir) = tls {
            c.arg("--ca-file").arg(dir.join("ca.crt"));
        }
        if let Some(t) = token {
            c.arg("--token-file").arg(t);
        }
        c.output().unwrap()
    };
    let denied = explain(None);
    assert!(!denied.status.success() && String::from_utf8_lossy(&denied.stderr).contains("401"), "{}", String::from_utf8_lossy(&denied.stderr));
    let allowed = explain(Some(token_file));
    assert!(allowed.status.success(), "{}", String::from_utf8_lossy(&allowed.stderr));
    if tls.is_some() {
        let plain = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(5)).build().unwrap();
        let got = plain.get(format!("http://{metrics}/healthz")).send().await;
        assert!(got.is_err() || got.is_ok_and(|r| !r.status().is_success()), "plain HTTP answered on the HTTPS operator port");
    }
}
