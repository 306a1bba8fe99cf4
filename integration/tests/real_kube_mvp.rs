//! The front door beside kube's own Mixed Version Proxy: the same three
//! real releases with peer-aggregated discovery on (peer CA, proxy client
//! certificate, identity Leases with peer-advertise addresses).

use std::time::Duration;

use integration::harness::real::{RealControlPlane, Spec, three_releases};
use integration::harness::{FrontDoor, Options};
use serde_json::Value;

const V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

fn with_kube_mvp() -> Vec<Spec> {
    three_releases().into_iter().map(Spec::with_kube_mvp).collect()
}

fn resources(doc: &Value) -> Vec<String> {
    let mut out = vec![];
    for g in doc["items"].as_array().into_iter().flatten() {
        for v in g["versions"].as_array().into_iter().flatten() {
            for r in v["resources"].as_array().into_iter().flatten() {
                out.push(format!("{}/{}/{}", g["metadata"]["name"].as_str().unwrap_or(""), v["version"].as_str().unwrap_or(""), r["resource"].as_str().unwrap_or("")));
            }
        }
    }
    out
}

const PB: &str = "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

#[tokio::test]
async fn explore() {
    let cp = RealControlPlane::start_specs(&with_kube_mvp()).await.unwrap();
    let door = FrontDoor::in_front_of(cp.members(), Options { tls: Some(cp.pki.clone()), ..Options::default() }).await.unwrap();
    door.wait_table_published(|t| t["apiservers"].as_array().is_some_and(|a| a.len() == 3 && a.iter().all(|s| s["healthy"] == true)))
        .await
        .unwrap();
    let admin = door.https(Some(&cp.admin), true).unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let m = door.http.get(format!("http://127.0.0.1:{}/metrics", door.metrics_port)).send().await.unwrap().text().await.unwrap();
    for l in m.lines().filter(|l| l.contains("openapi") || l.contains("error")) { eprintln!("M {l}"); }
    eprintln!("EXTPROC\n{}", door.ext_proc.log_tail(40));
    for (what, accept) in [("v2json", V2), ("v2pb", PB), ("list", "application/json"), ("openapi", "application/json")] {
        let path = if what == "openapi" { "/openapi/v3" } else { "/apis" };
        let r = admin.get(door.url(path)).header("accept", accept).send().await.unwrap();
        let etag = r.headers().get("etag").map(|v| v.to_str().unwrap_or("").to_string());
        let ours = r.bytes().await.unwrap();
        std::fs::write(format!("/tmp/ours-{what}"), &ours).unwrap();
        for a in &cp.apiservers {
            let r = cp.http.get(format!("{}{path}", a.url())).header("accept", accept).send().await.unwrap();
            let ketag = r.headers().get("etag").map(|v| v.to_str().unwrap_or("").to_string());
            let theirs = r.bytes().await.unwrap();
            std::fs::write(format!("/tmp/kube-{}-{what}", a.name), &theirs).unwrap();
            eprintln!("{what} {}: bytes equal {} ({} vs {}), etag {:?} vs {:?}", a.name, ours == theirs, ours.len(), theirs.len(), etag, ketag);
        }
    }
}
