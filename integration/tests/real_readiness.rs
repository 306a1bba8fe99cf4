//! Before the last old apiserver goes (issue 56), against REAL
//! kube-apiservers: kas-old runs v1.36 with `coordination.k8s.io/v1beta1`
//! turned on (`--runtime-config`; v1.37, kas-new, leaves it off — the API
//! the upgrade takes away), kas-new runs v1.37 (which adds APIs 1.36 lacks).
//! Three clients use the API only kas-old serves through the front door: a
//! client certificate's user, a ServiceAccount's token (from the cluster's
//! own TokenRequest) and kubectl; a fourth sends a forged token claiming to
//! be kube-system's admin. mvp-ext-proc reviews tokens with the cluster
//! (`--authentication-kubeconfig`, as its operator endpoints). Then:
//! - `mvp-ext-proc readiness --remove kas-old` names exactly those three,
//!   with their counts — the ServiceAccount as the cluster names it — and
//!   not the forged token (kube answered it 401: not a use), and exits 1; the report's rollback side names what only 1.37 serves, and
//!   a client that already uses it;
//! - kubectl prints the front door's `Warning` for the API only the older
//!   release serves, and none for one the newest serves.

use std::process::Command;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use integration::harness::real::{RealControlPlane, Release, Spec, TOKENS};
use integration::harness::secure::kubeconfig;
use integration::harness::{Options, ext_proc_bin, kubectl_137, wait_for};
use serde_json::{Value, json};

const OLD_ONLY: &str = "/apis/coordination.k8s.io/v1beta1/namespaces/default/leasecandidates";
const OLD_ONLY_LABEL: &str = "coordination.k8s.io/v1beta1/leasecandidates";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_names_who_would_lose_what_the_upgrade_takes_away() {
    let specs = [Spec::new("kas-new", Release::minor(37), &[]), Spec::new("kas-old", Release::minor(36), &["--runtime-config=coordination.k8s.io/v1beta1=true"])];
    let cp = RealControlPlane::start_specs(&specs).await.unwrap();
    let dir = cp.dir.path();
    let admin_user = format!("    client-certificate: {}\n    client-key: {}", cp.admin.cert_file.display(), cp.admin.key_file.display());
    // Its own file: kubeconfig() names files by their user.
    let reviewer = dir.join("reviewer.kubeconfig");
    std::fs::rename(kubeconfig(dir, &cp.apiservers[0].url(), &cp.pki.serving.cert_file, &admin_user), &reviewer).unwrap();
    let admin_token = TOKENS[0].0;
    let options = Options {
        ext_proc_args: vec!["--authentication-kubeconfig".into(), reviewer.display().to_string()],
        operator_token: Some(admin_token.into()),
        ..Options::default()
    };
    let door = cp.front_door_with(options).await.unwrap();
    let token_file = dir.join("operator.token");
    std::fs::write(&token_file, admin_token).unwrap();

    // A ServiceAccount and a token the cluster issues for it.
    let a = &cp.apiservers[0];
    let sa = cp.http.post(format!("{}/api/v1/namespaces/default/serviceaccounts", a.url())).json(&json!({"metadata": {"name": "ci-deployer"}})).send().await.unwrap();
    assert!(sa.status().is_success(), "the ServiceAccount: {}", sa.status());
    let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}});
    let issued: Value = cp.http.post(format!("{}/api/v1/namespaces/default/serviceaccounts/ci-deployer/token", a.url())).json(&request).send().await.unwrap().json().await.unwrap();
    let token = issued["status"]["token"].as_str().unwrap_or_else(|| panic!("no token: {issued}")).to_string();

    // alice (a client certificate), the ServiceAccount, kubectl (the admin's
    // certificate). Both are refused by RBAC (403): they used the API all the
    // same, and would get a 404 once kas-old is gone.
    let alice = cp.pki.clients.client(dir, "alice", "alice", &["dev"]).unwrap();
    let as_alice = door.https(Some(&alice), true).unwrap();
    for _ in 0..3 {
        let r = as_alice.get(door.url(OLD_ONLY)).header("user-agent", "alice-tool/2.1").send().await.unwrap();
        assert_eq!(r.status(), 403, "alice: kas-old's answer, not kas-new's 404");
    }
    let plain = door.https(None, true).unwrap();
    for _ in 0..2 {
        let r = plain.get(door.url(OLD_ONLY)).bearer_auth(&token).header("user-agent", "deployer/1.0").send().await.unwrap();
        assert_eq!(r.status(), 403, "the ServiceAccount");
    }
    // A forged token: a JWT whose claim names kube-system's admin, signed by
    // no one the cluster trusts (kube answers 401).
    let claims = URL_SAFE_NO_PAD.encode(json!({"sub": "system:serviceaccount:kube-system:admin"}).to_string());
    let forged = format!("{}.{claims}.c2ln", URL_SAFE_NO_PAD.encode(r#"{"alg":"RS256"}"#));
    let r = plain.get(door.url(OLD_ONLY)).bearer_auth(&forged).header("user-agent", "forger/0.1").send().await.unwrap();
    assert_eq!(r.status(), 401, "the forged token");
    let config = kubeconfig(dir, &door.url(""), &cp.pki.serving.cert_file, &admin_user);
    let kubectl = |args: &[&str]| {
        let out = Command::new(kubectl_137().unwrap()).arg("--kubeconfig").arg(&config).args(args).env("KUBECACHEDIR", dir.join("kubectl-cache")).output().unwrap();
        assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let warned = kubectl(&["get", "leasecandidates.v1beta1.coordination.k8s.io", "-A"]);
    assert!(
        warned.contains("Warning: coordination.k8s.io/v1beta1 leasecandidates is served only by kube-apiservers older than 1.37: unavailable once the upgrade to 1.37 finishes"),
        "kubectl did not print the warning: {warned}"
    );
    let newest = kubectl(&["get", "--raw", "/apis/certificates.k8s.io/v1/clustertrustbundles"]);
    assert!(!newest.contains("Warning"), "an API the newest release serves: {newest}");

    // Who would lose it, by name, with their counts.
    let readiness = || {
        let out = Command::new(ext_proc_bin().unwrap())
            .args(["readiness", "--remove", "kas-old", "-o", "json", "--server", &format!("http://127.0.0.1:{}", door.metrics_port), "--token-file"])
            .arg(&token_file)
            .output()
            .unwrap();
        (out.status.code(), serde_json::from_slice::<Value>(&out.stdout).unwrap_or_default())
    };
    let expected = [
        (json!({"kind": "certificate", "user": "alice", "groups": ["dev"]}), "alice-tool/2.1", 3),
        (
            json!({"kind": "token", "user": "system:serviceaccount:default:ci-deployer", "groups": ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"]}),
            "deployer/1.0",
            2,
        ),
    ];
    let (code, report, api) = wait_for("the skew log's counts", Duration::from_secs(20), || async {
        let (code, r) = readiness();
        let api = r["lost"].as_array()?.iter().find(|a| a["routedBy"] == OLD_ONLY_LABEL)?.clone();
        let clients = api["usedBy"]["clients"].as_array()?.clone();
        let counted = expected.iter().all(|(who, agent, n)| clients.iter().any(|c| c["who"] == *who && c["userAgent"] == *agent && c["count"] == *n))
            && clients.iter().any(|c| c["who"]["user"] == "kubernetes-admin" && c["userAgent"].as_str().is_some_and(|a| a.starts_with("kubectl")));
        counted.then_some((code, r, api))
    })
    .await
    .unwrap();
    assert_eq!(code, Some(1), "a client would break: {report}");
    let clients = api["usedBy"]["clients"].as_array().unwrap();
    // The forger's request was refused (401): not a use, not a client —
    // whatever its token claims (issue 64 item 2).
    assert_eq!(clients.len(), 3, "exactly the three clients, not the forger: {api}");
    assert!(clients.iter().all(|c| c["userAgent"] != "forger/0.1"), "{api}");
    assert_eq!(api["servedBy"], json!(["kas-old"]), "{api}");
    assert_eq!(report["clientsLosing"], 3, "{report}");
    // What only 1.37 serves is not at stake in a removal of kas-old.
    assert!(report["lost"].as_array().unwrap().iter().all(|a| a["servedBy"] == json!(["kas-old"])), "{report}");
    eprintln!("readiness --remove kas-old: {} resources lost, {OLD_ONLY_LABEL} used by {}", report["lost"].as_array().unwrap().len(), clients.iter().map(|c| format!("{} ×{}", c["who"], c["count"])).collect::<Vec<_>>().join(", "));

    // The finished upgrade: the same loss, and a rollback's.
    let out = Command::new(ext_proc_bin().unwrap()).args(["readiness", "--server", &format!("http://127.0.0.1:{}", door.metrics_port), "--token-file"]).arg(&token_file).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("if the upgrade to 1.37 finished:\n  leaving:  kas-old (1.36)\n  staying:  kas-new (1.37)\n"), "{text}");
    assert!(
        text.contains("used by system:serviceaccount:default:ci-deployer (token; groups system:serviceaccounts, system:serviceaccounts:default, system:authenticated) (deployer/1.0) from 127.0.0.1: 2 request(s)"),
        "{text}"
    );
    assert!(!text.contains("forger/0.1") && !text.contains("kube-system:admin"), "{text}");
    assert!(text.contains(" served by no apiserver, used by 3 client(s)"), "{text}");
    assert!(text.contains("gone again on a rollback"), "{text}");

    // A client already on an API only 1.37 serves: a rollback would take it
    // away, and the report's rollback side names it.
    let finished = || {
        let out = Command::new(ext_proc_bin().unwrap()).args(["readiness", "-o", "json", "--server", &format!("http://127.0.0.1:{}", door.metrics_port), "--token-file"]).arg(&token_file).output().unwrap();
        serde_json::from_slice::<Value>(&out.stdout).unwrap_or_default()
    };
    let rollback = finished()["lostOnRollback"].as_array().cloned().unwrap_or_default();
    let new_only = rollback.iter().find(|a| a["subresource"].is_null() && a["group"] != "").unwrap_or_else(|| panic!("nothing only 1.37 serves: {rollback:?}"));
    let (label, path) = (new_only["routedBy"].clone(), format!("/apis/{}/{}/{}", new_only["group"].as_str().unwrap(), new_only["version"].as_str().unwrap(), new_only["resource"].as_str().unwrap()));
    for _ in 0..2 {
        let r = as_alice.get(door.url(&path)).header("user-agent", "early-adopter/1.0").send().await.unwrap();
        assert_eq!(r.status(), 403, "{path}: kas-new's answer, not kas-old's 404");
    }
    let alice = json!({"kind": "certificate", "user": "alice", "groups": ["dev"]});
    wait_for("the rollback side's client", Duration::from_secs(20), || async {
        let r = finished();
        let api = r["lostOnRollback"].as_array()?.iter().find(|a| a["routedBy"] == label)?.clone();
        api["usedBy"]["clients"].as_array()?.iter().any(|c| c["who"] == alice && c["userAgent"] == "early-adopter/1.0" && c["count"] == 2).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{path} ({label}): {e}"));
    eprintln!("a rollback takes away {} resources; {label} used by alice ×2", rollback.len());
}
