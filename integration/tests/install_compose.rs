//! `docker compose up` as a user runs it (issue 57 item 1): the project's
//! `docker-compose.yml`, unchanged, on a real Docker engine, with the images
//! the project's `Dockerfile` builds (`scripts/images.sh`: the Dockerfile's
//! bases from this machine, as no registry is reachable here) — three fake
//! apiservers, mvp-ext-proc, Envoy with the native build. What a user checks
//! against the published ports: each skewed API on the one server that
//! serves it, the merged `/apis` complete, kubectl; one fault — an
//! apiserver container stopped answers its API's 503 Status while the others
//! answer, started again it is routed again with nothing restarted; the
//! images run as non-root; `docker compose down` leaves nothing behind.
//!
//! Needs the engine and the images: `scripts/test.sh` runs
//! `scripts/docker.sh start` and `scripts/images.sh` first (`MVP_DOCKER=1`).
//! Only 127.0.0.1's published ports are asked, and the project's own
//! containers talk to each other.

use std::process::Command;
use std::time::Duration;

use integration::harness::{kubectl_137, wait_for, workspace_root};
use serde_json::Value;

const PROJECT: &str = "mvp-envoy";
const FRONT: &str = "http://127.0.0.1:8443";
const TABLE: &str = "http://127.0.0.1:9090/table";

fn docker(args: &[&str]) -> (bool, String) {
    let out = Command::new("docker").args(args).current_dir(workspace_root()).output().unwrap_or_else(|e| panic!("running docker {args:?}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

fn compose(args: &[&str]) -> String {
    let mut all = vec!["compose"];
    all.extend(args);
    let (ok, text) = docker(&all);
    assert!(ok, "docker compose {args:?}:\n{text}");
    text
}

/// What is left of the project: its containers and networks.
fn leftovers() -> Vec<String> {
    let label = format!("label=com.docker.compose.project={PROJECT}");
    let (_, containers) = docker(&["ps", "-a", "-q", "--filter", &label]);
    let (_, networks) = docker(&["network", "ls", "-q", "--filter", &label]);
    containers.lines().chain(networks.lines()).filter(|l| !l.trim().is_empty()).map(str::to_string).collect()
}

/// `docker compose down` even when the test fails half way.
struct Down;

impl Drop for Down {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let (_, logs) = docker(&["compose", "logs", "--tail", "30"]);
            eprintln!("----- docker compose logs -----\n{logs}");
        }
        let _ = docker(&["compose", "down", "--timeout", "5"]);
    }
}

async fn table(http: &reqwest::Client) -> Option<Value> {
    http.get(TABLE).send().await.ok()?.json().await.ok()
}

fn open(t: &Value, name: &str) -> Option<bool> {
    t["apiservers"].as_array()?.iter().find(|s| s["name"] == name).map(|s| s["open"] == true)
}

async fn served_by(http: &reqwest::Client, path: &str) -> (u16, String, Value) {
    let resp = http.get(format!("{FRONT}{path}")).send().await.unwrap();
    let status = resp.status().as_u16();
    let by = resp.headers().get("x-fake-apiserver").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    (status, by, resp.json().await.unwrap_or(Value::Null))
}

/// Skewed APIs of the three releases: (path, the one fake that serves it).
const SKEWED: [(&str, &str); 3] = [
    ("/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests", "v137"),
    ("/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas", "v130"),
    ("/apis/networking.k8s.io/v1beta1/servicecidrs", "v133"),
];

#[tokio::test]
async fn docker_compose_up_runs_the_front_door_as_users_run_it() {
    assert!(
        std::env::var_os("MVP_DOCKER").is_some(),
        "needs a Docker engine and the images: run scripts/docker.sh start && scripts/images.sh, then MVP_DOCKER=1 (scripts/test.sh does)"
    );
    assert!(leftovers().is_empty(), "the project's containers are running already: {:?}", leftovers());
    let _down = Down;
    compose(&["up", "-d"]);
    let http = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(10)).build().unwrap();
    let all_open = |t: &Value| ["v130", "v133", "v137"].iter().all(|n| open(t, n) == Some(true));
    wait_for("the compose topology's table, every apiserver open", Duration::from_secs(60), || async { table(&http).await.filter(|t| all_open(t)) }).await.unwrap();
    wait_for("Envoy ready", Duration::from_secs(60), || async { http.get("http://127.0.0.1:9901/ready").send().await.ok().filter(|r| r.status() == 200) }).await.unwrap();

    // Each skewed API on the one server that serves it, every time.
    for (path, by) in SKEWED {
        for _ in 0..4 {
            let (status, got, v) = served_by(&http, path).await;
            assert_eq!((status, got.as_str()), (200, by), "{path}: {v}");
        }
    }
    // The merged /apis: every release's groups.
    let apis: Value = http.get(format!("{FRONT}/apis")).header("accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList").send().await.unwrap().json().await.unwrap();
    let versions: Vec<String> = apis["items"].as_array().unwrap().iter().flat_map(|g| {
        let name = g["metadata"]["name"].as_str().unwrap_or("").to_string();
        g["versions"].as_array().into_iter().flatten().map(move |v| format!("{name}/{}", v["version"].as_str().unwrap_or(""))).collect::<Vec<_>>()
    }).collect();
    for gv in ["lifecycle.k8s.io/v1alpha1", "flowcontrol.apiserver.k8s.io/v1beta3", "networking.k8s.io/v1beta1"] {
        assert!(versions.iter().any(|v| v == gv), "{gv} not in the merged /apis: {versions:?}");
    }
    // kubectl through the published port.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, format!("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {FRONT}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\nusers:\n- name: u\n  user: {{}}\ncurrent-context: c\n")).unwrap();
    let out = Command::new(kubectl_137().unwrap()).arg("--kubeconfig").arg(&kubeconfig).args(["api-resources", "--no-headers"]).env("KUBECACHEDIR", dir.path().join("cache")).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "kubectl api-resources: {}", String::from_utf8_lossy(&out.stderr));
    for r in ["evictionrequests", "flowschemas", "servicecidrs"] {
        assert!(text.lines().any(|l| l.split_whitespace().next() == Some(r)), "kubectl api-resources lists no {r}:\n{text}");
    }

    // Non-root, both images, as running.
    for service in ["ext-proc", "envoy", "apiserver-v137"] {
        let (ok, id) = docker(&["compose", "ps", "-q", service]);
        assert!(ok && !id.trim().is_empty(), "{service}: {id}");
        let (_, user) = docker(&["exec", id.trim(), "id", "-u"]);
        assert_ne!(user.trim(), "0", "{service} runs as root");
    }

    // The fault: one apiserver container stopped, then started again.
    let started_at = |service: &str| docker(&["inspect", "--format", "{{.State.StartedAt}}", docker(&["compose", "ps", "-q", service]).1.trim()]).1;
    let before: Vec<String> = ["ext-proc", "envoy", "apiserver-v130", "apiserver-v133"].iter().map(|s| started_at(s)).collect();
    compose(&["stop", "apiserver-v137"]);
    wait_for("v137 closed in the table", Duration::from_secs(30), || async { table(&http).await.filter(|t| open(t, "v137") == Some(false)) }).await.unwrap();
    let (status, _, v) = served_by(&http, SKEWED[0].0).await;
    assert_eq!((status, v["kind"].as_str()), (503, Some("Status")), "the stopped server's API: {v}");
    for (path, by) in &SKEWED[1..] {
        let (status, got, v) = served_by(&http, path).await;
        assert_eq!((status, got.as_str()), (200, *by), "{path} while v137 is stopped: {v}");
    }
    compose(&["start", "apiserver-v137"]);
    wait_for("v137 open again", Duration::from_secs(60), || async { table(&http).await.filter(|t| open(t, "v137") == Some(true)) }).await.unwrap();
    let (status, got, v) = served_by(&http, SKEWED[0].0).await;
    assert_eq!((status, got.as_str()), (200, "v137"), "v137's API once it is back: {v}");
    let after: Vec<String> = ["ext-proc", "envoy", "apiserver-v130", "apiserver-v133"].iter().map(|s| started_at(s)).collect();
    assert_eq!(before, after, "nothing else was restarted");

    // Down: nothing of the project left.
    compose(&["down", "--timeout", "5"]);
    assert!(leftovers().is_empty(), "left behind: {:?}", leftovers());
    let sizes: Vec<String> = ["mvp-envoy/mvp:dev", "mvp-envoy/envoy:dev"]
        .iter()
        .map(|i| format!("{i} {} MB", docker(&["image", "inspect", "--format", "{{.Size}}", i]).1.trim().parse::<u64>().unwrap_or(0) / 1_000_000))
        .collect();
    eprintln!("docker compose: every skewed API routed, merged /apis, kubectl, a stopped apiserver's 503 and its return, non-root, down clean; images {sizes:?}");
}
