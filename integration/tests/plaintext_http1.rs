//! Plaintext apiservers that speak HTTP/1.1 only — `kubectl proxy`, kube's
//! old insecure port, a plain proxy in between — here three written on
//! Python's standard `http.server`, not by this project (issue 55 item 0).
//! Before: mvp-ext-proc discovered them (its own client spoke HTTP/1.1) and
//! the merged `/apis` was complete, but Envoy spoke HTTP/2 with prior
//! knowledge to every plaintext server: every proxied request a `502`
//! (`upstream_reset_before_response_started{protocol_error}`).

use std::process::Command;
use std::time::Duration;

use integration::harness::http1_apiservers::Http1Apiserver;
use integration::harness::{FrontDoor, Options, kubectl_137, served_resources, start_fake, FakeSpec};
use serde_json::Value;

const RELEASES: [(&str, &str); 3] = [("v130", "v1.30"), ("v133", "v1.33"), ("v137", "v1.37")];
const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

fn kubeconfig(dir: &std::path::Path, server: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: mvp\n  cluster:\n    server: {server}\ncontexts:\n- name: mvp\n  context:\n    cluster: mvp\n    user: anonymous\nusers:\n- name: anonymous\n  user: {{}}\ncurrent-context: mvp\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Every resource of three releases, a watch, `/api/v1`, the merged
/// `/apis` and kubectl through the door: each answered by a server that
/// serves it, over HTTP/1.1 (the door's own default for plaintext).
#[tokio::test]
async fn http1_only_plaintext_apiservers_answer_every_request() {
    let dir = tempfile::Builder::new().prefix("mvp-http1-").tempdir().unwrap();
    let servers = Http1Apiserver::three(dir.path()).await.unwrap();
    let members = servers.iter().map(|s| (s.name.clone(), s.url.clone())).collect();
    let door = FrontDoor::in_front_of(members, Options { dir: Some(dir.path().to_path_buf()), ..Options::default() }).await.unwrap();

    let releases: Vec<&str> = RELEASES.iter().map(|(_, r)| *r).collect();
    let name_of = |release: &str| RELEASES.iter().find(|(_, r)| *r == release).map(|(n, _)| n.to_string()).unwrap();
    let mut wrong = Vec::new();
    let resources = served_resources(&releases).unwrap();
    for r in &resources {
        let path = format!("{}/{}", r.prefix(), r.resource);
        let resp = door.http.get(door.url(&path)).send().await.unwrap();
        let status = resp.status().as_u16();
        let by = resp.headers().get("x-fake-apiserver").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let serving: Vec<String> = r.by_release.keys().map(|rel| name_of(rel)).collect();
        if status != 200 || !serving.contains(&by) {
            wrong.push(format!("{path}: {status} from {by:?} (served by {serving:?})"));
        }
    }
    assert!(resources.len() > 100, "{} resources", resources.len());
    assert_eq!(wrong, Vec::<String>::new(), "{} of {} resources", wrong.len(), resources.len());

    let v: Value = door.http.get(door.url("/api/v1")).send().await.unwrap().json().await.unwrap();
    assert_eq!(v["groupVersion"], "v1");
    let watch = door.http.get(door.url("/api/v1/namespaces/default/pods?watch=1&timeoutSeconds=1")).send().await.unwrap();
    assert_eq!(watch.status(), 200);
    assert!(watch.text().await.unwrap().contains("BOOKMARK"));

    let apis: Value = door.http.get(door.url("/apis")).header("accept", AGGREGATED).send().await.unwrap().json().await.unwrap();
    let groups: Vec<&str> = apis["items"].as_array().unwrap().iter().filter_map(|g| g["metadata"]["name"].as_str()).collect();
    assert!(groups.contains(&"lifecycle.k8s.io") && groups.contains(&"flowcontrol.apiserver.k8s.io"), "{groups:?}");

    let config = kubeconfig(dir.path(), &door.url(""));
    let out = Command::new(kubectl_137().unwrap())
        .arg("--kubeconfig")
        .arg(&config)
        .args(["api-resources", "--no-headers"])
        .env("KUBECACHEDIR", dir.path().join("kube-cache"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "kubectl api-resources: {}", String::from_utf8_lossy(&out.stderr));
    for name in ["evictionrequests", "resourceclaimparameters", "pods"] {
        assert!(text.lines().any(|l| l.split_whitespace().next() == Some(name)), "no {name} in\n{text}");
    }
    assert!(door.envoy_stat("cluster.apiservers.upstream_cx_http1_total").await.unwrap_or(0) > 0);
    assert_eq!(door.envoy_stat("cluster.apiservers.upstream_cx_http2_total").await.unwrap_or(0), 0);
}

/// Told the plaintext servers take h2c (`serve --apiserver-h2c`) when one
/// does not: mvp-ext-proc asks it in h2c as Envoy would, its reads fail, it
/// is never opened, and the table says why — the API only it serves gets
/// the 503 Status (never a 502), the others' APIs are served over h2c.
#[tokio::test]
async fn told_h2c_an_http1_only_server_is_never_opened() {
    let dir = tempfile::Builder::new().prefix("mvp-h2c-").tempdir().unwrap();
    let mut fakes = Vec::new();
    for (name, release) in &RELEASES[..2] {
        fakes.push(start_fake(dir.path(), FakeSpec::new(name, release), 0).unwrap().ready().await.unwrap());
    }
    let http1 = Http1Apiserver::start(dir.path(), "v137", "v1.37").await.unwrap();
    let mut members: Vec<(String, String)> = fakes.iter().map(|f| (f.spec.name.clone(), f.url())).collect();
    members.push((http1.name.clone(), http1.url.clone()));
    let options = Options {
        dir: Some(dir.path().to_path_buf()),
        ext_proc_args: vec!["--apiserver-h2c".into()],
        ready_when: Some(|t: &Value| {
            t["apiservers"].as_array().is_some_and(|a| a.iter().filter(|s| s["name"] != "v137").all(|s| s["healthy"] == true) && a.len() == 3)
        }),
        hold_unavailable: Some(Duration::from_millis(200)),
        ..Options::default()
    };
    let door = FrontDoor::in_front_of(members, options).await.unwrap();
    let table = door.table().await.unwrap();
    let v137 = table["apiservers"].as_array().unwrap().iter().find(|s| s["name"] == "v137").cloned().unwrap();
    assert_eq!(v137["open"], false, "{v137}");
    assert!(v137.to_string().contains("h2c"), "the table says why: {v137}");

    let resp = door.http.get(door.url("/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests")).send().await.unwrap();
    assert_eq!(resp.status(), 503);
    let status: Value = resp.json().await.unwrap();
    assert_eq!(status["kind"], "Status", "{status}");
    let resp = door.http.get(door.url("/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(door.envoy_stat("cluster.apiservers.upstream_cx_http2_total").await.unwrap_or(0) > 0);
}
