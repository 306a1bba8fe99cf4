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

/// `n` apiservers are sent new requests (a departed one stays in the
/// table, closed, until it is forgotten).
fn healthy(n: usize) -> impl Fn(&Value) -> bool {
    move |t| t["apiservers"].as_array().is_some_and(|a| a.iter().filter(|s| s["open"] == true).count() == n)
}

/// Stops gracefully: SIGTERM, then the shutdown delay.
fn graceful(mut s: Spec) -> Spec {
    s.args.extend(["--shutdown-delay-duration=3s".to_string(), "--shutdown-send-retry-after=true".to_string()]);
    s
}

/// The door seeded with the first apiserver, following `source`.
async fn door_following(cp: &RealControlPlane, source: &'static str) -> FrontDoor {
    let options = Options {
        tls: Some(cp.pki.clone()),
        membership: Some(source),
        seeds: Some(1),
        discovery_token: Some(TOKENS[0].0.to_string()),
        ..Options::default()
    };
    FrontDoor::in_front_of(cp.members(), options).await.unwrap()
}

/// A server joins (`spec`, serving something of its own): routed to as
/// soon as the membership source names it.
async fn joins_and_is_routed_to(cp: &mut RealControlPlane, door: &FrontDoor, spec: Spec) {
    let joined = cp.add_apiserver(&spec).await.unwrap();
    let mut others = BTreeSet::new();
    for i in 0..joined {
        others.extend(cp.listable(i).await.unwrap());
    }
    let own: Vec<String> = cp.listable(joined).await.unwrap().difference(&others).cloned().collect();
    assert!(!own.is_empty(), "{} serves something of its own", spec.name);
    door.wait_table_published(healthy(joined + 1)).await.unwrap_or_else(|e| panic!("{} found: {e:#}", spec.name));
    let client = door.https(None, true).unwrap();
    for path in &own {
        for _ in 0..3 {
            let r = client.get(door.url(path)).bearer_auth(TOKENS[0].0).send().await.unwrap();
            assert_eq!(r.status(), 200, "{path} of the joined server");
        }
    }
}

/// A graceful stop of apiserver `i` under load on a shared API: not one
/// request fails (HTTP/2 and HTTP/1.1).
async fn drains_without_a_failure(cp: &mut RealControlPlane, door: &FrontDoor, i: usize) {
    let open_before = cp.apiservers.len();
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
    cp.signal_apiserver(i, "TERM");
    let deadline = Instant::now() + Duration::from_secs(60);
    while cp.apiserver_running(i) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!cp.apiserver_running(i), "{} stopped within 60 s", cp.apiservers[i].name);
    let exited = t0.elapsed();
    door.wait_table_published(healthy(open_before - 1)).await.unwrap();
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        let (ok, failed) = l.await.unwrap();
        eprintln!("graceful stop (exited after {exited:?}): {ok} requests answered 200, {} failed", failed.len());
        assert!(failed.is_empty(), "failed during a graceful stop: {failed:?}");
    }
}

/// SIGKILL apiserver `i`: `path`, which it alone served, answers the 503
/// Status, never a 404.
async fn killed_servers_apis_answer_503(cp: &mut RealControlPlane, door: &FrontDoor, i: usize, open_after: usize, path: &str) {
    cp.stop_apiserver(i);
    door.wait_table_published(healthy(open_after)).await.unwrap();
    for http2 in [true, false] {
        let c = door.https(None, http2).unwrap();
        for _ in 0..5 {
            let r = c.get(door.url(path)).bearer_auth(TOKENS[0].0).send().await.unwrap();
            let code = r.status();
            let body: Value = r.json().await.unwrap_or_default();
            assert_eq!((code.as_u16(), body["kind"].as_str(), body["code"].as_u64()), (503, Some("Status"), Some(503)), "{path}: {body}");
        }
    }
}

/// Identity Leases (on loopback, kube's MVP flags on so they carry the
/// peer-advertise address).
#[tokio::test]
async fn identity_leases_bring_members_in_and_out_without_a_wrong_answer() {
    let specs: Vec<Spec> = three_releases().into_iter().map(|s| graceful(s.with_kube_mvp())).collect();
    let mut cp = RealControlPlane::start_specs(&specs).await.unwrap();
    let door = door_following(&cp, "leases").await;
    door.wait_table_published(healthy(3)).await.expect("the two others found from their identity leases");
    joins_and_is_routed_to(&mut cp, &door, graceful(Spec::new("kas-4", Release::minor(37), &["--runtime-config=resource.k8s.io/v1alpha3=true"]).with_kube_mvp())).await;
    drains_without_a_failure(&mut cp, &door, 1).await;
    killed_servers_apis_answer_503(&mut cp, &door, 2, 2, "/apis/certificates.k8s.io/v1beta1/clustertrustbundles").await;
}

/// The `default/kubernetes` Endpoints: real servers on a test network,
/// each on its own address (kube rejects loopback ones there), registering
/// themselves (`--endpoint-reconciler-type=lease`).
#[tokio::test]
async fn the_kubernetes_endpoints_bring_members_in_and_out_without_a_wrong_answer() {
    let spec = |name: &str, args: &[&str]| graceful(Spec::new(name, Release::minor(37), args));
    let specs = [spec("kas-a", &[]), spec("kas-b", &["--emulated-version=1.35"]), spec("kas-c", &["--runtime-config=certificates.k8s.io/v1beta1=true"])];
    let mut cp = RealControlPlane::start_on_test_net(&specs).await.unwrap();
    let door = door_following(&cp, "endpoints").await;
    door.wait_table_published(healthy(3)).await.expect("kas-b and kas-c found in the kubernetes Endpoints");
    joins_and_is_routed_to(&mut cp, &door, spec("kas-d", &["--runtime-config=resource.k8s.io/v1alpha3=true"])).await;
    drains_without_a_failure(&mut cp, &door, 1).await;
    killed_servers_apis_answer_503(&mut cp, &door, 2, 2, "/apis/certificates.k8s.io/v1beta1/clustertrustbundles").await;
}
