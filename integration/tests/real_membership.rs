//! Membership from real sources: the front door seeded with one real
//! apiserver finds the others from their identity Leases (the
//! `kubernetes.io/peer-advertise-address` annotation 1.3x servers write with
//! the Mixed Version Proxy's flags), routes to a server that joins, drains
//! one that stops gracefully (`--shutdown-delay-duration`) without a failed
//! request, and answers a SIGKILLed server's own APIs with the 503 Status.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use integration::harness::real::{RealControlPlane, Release, Spec, TOKENS, three_releases};
use integration::harness::{FrontDoor, Options};
use serde_json::Value;

const NOPEER: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer";

/// Listable collections a server serves, by its own discovery.
async fn listable(cp: &RealControlPlane, i: usize) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let doc: Value = cp.http.get(format!("{}/apis", cp.apiservers[i].url())).header("accept", NOPEER).send().await.unwrap().json().await.unwrap();
    for g in doc["items"].as_array().into_iter().flatten() {
        for v in g["versions"].as_array().into_iter().flatten() {
            for r in v["resources"].as_array().into_iter().flatten() {
                if r["verbs"].as_array().is_some_and(|vs| vs.iter().any(|x| x == "list")) {
                    out.insert(format!("/apis/{}/{}/{}", g["metadata"]["name"].as_str().unwrap_or(""), v["version"].as_str().unwrap_or(""), r["resource"].as_str().unwrap_or("")));
                }
            }
        }
    }
    out
}

/// `n` apiservers are sent new requests (a departed one stays in the
/// table, closed, until it is forgotten).
fn healthy(n: usize) -> impl Fn(&Value) -> bool {
    move |t| t["apiservers"].as_array().is_some_and(|a| a.iter().filter(|s| s["open"] == true).count() == n)
}

#[tokio::test]
async fn identity_leases_bring_members_in_and_out_without_a_wrong_answer() {
    let graceful = |s: Spec| {
        let mut s = s.with_kube_mvp();
        s.args.extend(["--shutdown-delay-duration=3s".to_string(), "--shutdown-send-retry-after=true".to_string()]);
        s
    };
    let mut cp = RealControlPlane::start_specs(&three_releases().into_iter().map(graceful).collect::<Vec<_>>()).await.unwrap();
    let options = Options {
        tls: Some(cp.pki.clone()),
        membership: Some("leases"),
        seeds: Some(1),
        discovery_token: Some(TOKENS[0].0.to_string()),
        ..Options::default()
    };
    let door = FrontDoor::in_front_of(cp.members(), options).await.unwrap();
    door.wait_table_published(healthy(3)).await.expect("the two others found from their identity leases");

    // A fourth server joins: routed to as soon as its lease says so.
    let joined = cp.add_apiserver(&graceful(Spec::new("kas-4", Release::minor(37), &["--runtime-config=resource.k8s.io/v1alpha3=true"]))).await.unwrap();
    let mut others = BTreeSet::new();
    for i in 0..joined {
        others.extend(listable(&cp, i).await);
    }
    let own: Vec<String> = listable(&cp, joined).await.difference(&others).cloned().collect();
    assert!(!own.is_empty(), "kas-4 serves something of its own");
    door.wait_table_published(healthy(4)).await.expect("kas-4 found from its identity lease");
    let client = door.https(None, true).unwrap();
    for path in &own {
        for _ in 0..3 {
            let r = client.get(door.url(path)).bearer_auth(TOKENS[0].0).send().await.unwrap();
            assert_eq!(r.status(), 200, "{path} of the joined server");
        }
    }

    // A graceful stop of kas-135 under load on shared APIs: no failure.
    let stop = Arc::new(AtomicBool::new(false));
    let mut loops = vec![];
    for http2 in [true, false] {
        let (c, url, stop) = (door.https(None, http2).unwrap(), door.url("/api/v1/namespaces/default/configmaps?limit=1"), stop.clone());
        loops.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0, vec![]);
            while !stop.load(Ordering::Relaxed) {
                match c.get(&url).bearer_auth(TOKENS[0].0).send().await {
                    Ok(r) if r.status() == 200 => ok += 1,
                    Ok(r) => failed.push(format!("{} {}", r.status(), r.text().await.unwrap_or_default())),
                    Err(e) => failed.push(e.to_string()),
                }
            }
            (ok, failed)
        }));
    }
    let t0 = Instant::now();
    cp.signal_apiserver(1, "TERM");
    let deadline = Instant::now() + Duration::from_secs(60);
    while cp.apiserver_running(1) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!cp.apiserver_running(1), "kas-135 stopped within 60 s");
    let exited = t0.elapsed();
    door.wait_table_published(healthy(3)).await.unwrap();
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        let (ok, failed) = l.await.unwrap();
        eprintln!("graceful stop (exited after {exited:?}): {ok} requests answered 200, {} failed", failed.len());
        assert!(failed.is_empty(), "failed during a graceful stop: {failed:?}");
    }

    // SIGKILL kas-137: its own APIs answer the 503 Status, never a 404.
    let kas137_only = "/apis/certificates.k8s.io/v1beta1/clustertrustbundles";
    cp.stop_apiserver(2);
    door.wait_table_published(healthy(2)).await.unwrap();
    for http2 in [true, false] {
        let c = door.https(None, http2).unwrap();
        for _ in 0..5 {
            let r = c.get(door.url(kas137_only)).bearer_auth(TOKENS[0].0).send().await.unwrap();
            let code = r.status();
            let body: Value = r.json().await.unwrap_or_default();
            assert_eq!((code.as_u16(), body["kind"].as_str(), body["code"].as_u64()), (503, Some("Status"), Some(503)), "{kas137_only}: {body}");
        }
    }
}

/// The same from the `default/kubernetes` Endpoints: real servers on a test
/// network, each on its own address (kube rejects loopback ones there),
/// registering themselves (`--endpoint-reconciler-type=lease`). A server
/// joins and is routed to once it is listed; a graceful stop drains with no
/// failed request; a SIGKILLed server's own APIs answer the 503 Status.
#[tokio::test]
async fn the_kubernetes_endpoints_bring_members_in_and_out_without_a_wrong_answer() {
    let graceful = |name: &str, args: &[&str]| {
        let mut s = Spec::new(name, Release::minor(37), args);
        s.args.extend(["--shutdown-delay-duration=3s".to_string(), "--shutdown-send-retry-after=true".to_string()]);
        s
    };
    let specs = [graceful("kas-a", &[]), graceful("kas-b", &["--emulated-version=1.35"]), graceful("kas-c", &["--runtime-config=certificates.k8s.io/v1beta1=true"])];
    let mut cp = RealControlPlane::start_on_test_net(&specs).await.unwrap();
    let options = Options {
        tls: Some(cp.pki.clone()),
        membership: Some("endpoints"),
        seeds: Some(1),
        discovery_token: Some(TOKENS[0].0.to_string()),
        ..Options::default()
    };
    let door = FrontDoor::in_front_of(cp.members(), options).await.unwrap();
    door.wait_table_published(healthy(3)).await.expect("kas-b and kas-c found in the kubernetes Endpoints");

    let joined = cp.add_apiserver(&graceful("kas-d", &["--runtime-config=resource.k8s.io/v1alpha3=true"])).await.unwrap();
    let mut others = BTreeSet::new();
    for i in 0..joined {
        others.extend(listable(&cp, i).await);
    }
    let own: Vec<String> = listable(&cp, joined).await.difference(&others).cloned().collect();
    assert!(!own.is_empty(), "kas-d serves something of its own");
    door.wait_table_published(healthy(4)).await.expect("kas-d found in the kubernetes Endpoints");
    let client = door.https(None, true).unwrap();
    for path in &own {
        let r = client.get(door.url(path)).bearer_auth(TOKENS[0].0).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path} of the joined server");
    }

    let stop = Arc::new(AtomicBool::new(false));
    let mut loops = vec![];
    for http2 in [true, false] {
        let (c, url, stop) = (door.https(None, http2).unwrap(), door.url("/api/v1/namespaces/default/configmaps?limit=1"), stop.clone());
        loops.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0, vec![]);
            while !stop.load(Ordering::Relaxed) {
                match c.get(&url).bearer_auth(TOKENS[0].0).send().await {
                    Ok(r) if r.status() == 200 => ok += 1,
                    Ok(r) => failed.push(format!("{} {}", r.status(), r.text().await.unwrap_or_default())),
                    Err(e) => failed.push(e.to_string()),
                }
            }
            (ok, failed)
        }));
    }
    cp.signal_apiserver(1, "TERM");
    let deadline = Instant::now() + Duration::from_secs(60);
    while cp.apiserver_running(1) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!cp.apiserver_running(1), "kas-b stopped within 60 s");
    door.wait_table_published(healthy(3)).await.unwrap();
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        let (ok, failed) = l.await.unwrap();
        eprintln!("graceful stop, Endpoints membership: {ok} requests answered 200, {} failed", failed.len());
        assert!(failed.is_empty(), "failed during a graceful stop: {failed:?}");
    }

    cp.stop_apiserver(2);
    door.wait_table_published(healthy(2)).await.unwrap();
    for http2 in [true, false] {
        let c = door.https(None, http2).unwrap();
        let r = c.get(door.url("/apis/certificates.k8s.io/v1beta1/clustertrustbundles")).bearer_auth(TOKENS[0].0).send().await.unwrap();
        let code = r.status().as_u16();
        let body: Value = r.json().await.unwrap_or_default();
        assert_eq!((code, body["kind"].as_str()), (503, Some("Status")), "{body}");
    }
}
