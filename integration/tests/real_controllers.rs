//! A real kube-controller-manager (v1.37.2, built as the apiservers are)
//! pointed at the front door during a real skew: the namespace controller
//! and the garbage collector act on what a list or get answers, and a wrong
//! 404 from a server that lacks the API is read as "nothing there" / "owner
//! gone" (kubernetes issues 96486, 98548). Through the door a namespace
//! holding an object of an API only one server serves is deleted completely
//! and a dependent whose owner only one server serves survives; through a
//! plain round robin in front of the same servers, they do not.

use std::time::{Duration, Instant};

use integration::harness::real::{RealControlPlane, Release, three_releases};
use integration::harness::plain_round_robin;
use serde_json::{Value, json};

/// LeaseCandidate `coordination.k8s.io/v1beta1` (namespaced) and
/// ClusterTrustBundle `certificates.k8s.io/v1beta1`: kas-137 alone serves
/// them.
const CANDIDATES: &str = "/apis/coordination.k8s.io/v1beta1/namespaces";
const BUNDLES: &str = "/apis/certificates.k8s.io/v1beta1/clustertrustbundles";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

/// Namespaces to delete and owned dependents to keep: each is a separate
/// chance for a wrong 404 (two in three through a round robin of three),
/// so the round robin's failure is certain in practice ((1/3)^12 ≈ 2e-6
/// that it gets all right) and the door's success is no luck.
const N: usize = 6;

/// What the controllers did, as a user checks it on the apiservers.
#[derive(Debug, Default)]
struct Outcome {
    namespaces_deleted: usize,
    /// The namespaces' deletion conditions that are True (e.g.
    /// NamespaceDeletionDiscoveryFailure).
    failed_conditions: Vec<String>,
    /// LeaseCandidates still in etcd after their namespace went away.
    candidates_leaked: usize,
    /// Dependents of existing owners still there.
    dependents_alive: usize,
    /// The dependent of a missing owner was collected (the GC ran).
    orphan_collected: bool,
    /// Lines of the controller manager's log that say discovery was partial.
    partial_discovery: Vec<String>,
}

async fn post(cp: &RealControlPlane, server: &str, path: &str, body: Value) -> Value {
    let r = cp.http.post(format!("{server}{path}")).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 201, "POST {path}");
    r.json().await.unwrap()
}

async fn status(cp: &RealControlPlane, server: &str, path: &str) -> u16 {
    cp.http.get(format!("{server}{path}")).send().await.map(|r| r.status().as_u16()).unwrap_or(0)
}

/// Objects written straight to kas-137, then the controller manager started
/// against `front` and the namespaces deleted; waits (bounded) until the
/// controllers are done or visibly stuck.
async fn run(cp: &RealControlPlane, front: &str) -> Outcome {
    let kas137 = cp.apiservers[2].url();
    let bundle = std::fs::read_to_string(&cp.pki.serving.cert_file).unwrap();
    let owner_ref = |name: &str, uid: &str| json!([{"apiVersion": "certificates.k8s.io/v1beta1", "kind": "ClusterTrustBundle", "name": name, "uid": uid}]);
    for i in 0..N {
        post(cp, &kas137, "/api/v1/namespaces", json!({"metadata": {"name": format!("skewed-{i}")}})).await;
        post(cp, &kas137, &format!("{CANDIDATES}/skewed-{i}/leasecandidates"), json!({
            "apiVersion": "coordination.k8s.io/v1beta1", "kind": "LeaseCandidate", "metadata": {"name": "candidate"},
            "spec": {"leaseName": "lease", "binaryVersion": "1.37.2", "emulationVersion": "1.37.2", "strategy": "OldestEmulationVersion"}})).await;
        let owner = post(cp, &kas137, BUNDLES, json!({"apiVersion": "certificates.k8s.io/v1beta1", "kind": "ClusterTrustBundle", "metadata": {"name": format!("owner-{i}")}, "spec": {"trustBundle": bundle}})).await;
        let uid = owner["metadata"]["uid"].as_str().unwrap();
        post(cp, &kas137, CONFIGMAPS, json!({"metadata": {"name": format!("dependent-{i}"), "ownerReferences": owner_ref(&format!("owner-{i}"), uid)}})).await;
    }
    post(cp, &kas137, CONFIGMAPS, json!({"metadata": {"name": "orphan", "ownerReferences": owner_ref("ghost", "5d1b5b8e-0000-4000-8000-000000000001")}})).await;

    let kcm = cp.start_controller_manager(Release::minor(37), front).unwrap();
    for i in 0..N {
        let deleted = cp.http.delete(format!("{kas137}/api/v1/namespaces/skewed-{i}")).send().await.unwrap();
        assert_eq!(deleted.status(), 200);
    }

    let mut o = Outcome::default();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        o.namespaces_deleted = 0;
        o.failed_conditions.clear();
        for i in 0..N {
            let ns = cp.http.get(format!("{kas137}/api/v1/namespaces/skewed-{i}")).send().await.unwrap();
            if ns.status() == 404 {
                o.namespaces_deleted += 1;
                continue;
            }
            let ns: Value = ns.json().await.unwrap();
            let failed = ns["status"]["conditions"].as_array().into_iter().flatten().filter(|c| c["status"] == "True");
            o.failed_conditions.extend(failed.map(|c| format!("skewed-{i} {}: {}", c["type"].as_str().unwrap_or(""), c["message"].as_str().unwrap_or(""))));
        }
        o.orphan_collected = status(cp, &kas137, &format!("{CONFIGMAPS}/orphan")).await == 404;
        if o.namespaces_deleted == N && o.orphan_collected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for i in 0..N {
        o.candidates_leaked += usize::from(status(cp, &kas137, &format!("{CANDIDATES}/skewed-{i}/leasecandidates/candidate")).await == 200);
        o.dependents_alive += usize::from(status(cp, &kas137, &format!("{CONFIGMAPS}/dependent-{i}")).await == 200);
    }
    let log = std::fs::read_to_string(&kcm.log).unwrap_or_default();
    o.partial_discovery = log
        .lines()
        .filter(|l| l.contains("unable to retrieve the complete list of server APIs") || l.contains("NamespaceDeletionDiscoveryFailure") || l.contains("failed to discover"))
        .map(|l| l.chars().take(300).collect())
        .collect();
    o
}

#[tokio::test]
async fn through_the_door_namespace_deletion_and_garbage_collection_are_right() {
    let cp = RealControlPlane::start_specs(&three_releases()).await.unwrap();
    let door = cp.front_door().await.unwrap();
    let o = run(&cp, &door.url("")).await;
    eprintln!("through the door: {o:#?}");
    assert_eq!(o.namespaces_deleted, N, "the namespaces are deleted: {o:#?}");
    assert_eq!(o.candidates_leaked, 0, "no object outlives its namespace: {o:#?}");
    assert!(o.orphan_collected && o.dependents_alive == N, "the GC collects the orphan and keeps the owned: {o:#?}");
    assert!(o.partial_discovery.is_empty() && o.failed_conditions.is_empty(), "discovery was complete: {o:#?}");
}

#[tokio::test]
async fn through_a_plain_round_robin_they_go_wrong() {
    let cp = RealControlPlane::start_specs(&three_releases()).await.unwrap();
    let door = cp.front_door().await.unwrap();
    let (_envoy, plain) = door.another_envoy_with(plain_round_robin).await.unwrap();
    let o = run(&cp, &format!("https://127.0.0.1:{}", plain.ports.listen)).await;
    eprintln!("through a plain round robin: {o:#?}");
    assert!(
        o.candidates_leaked > 0 || o.dependents_alive < N || o.namespaces_deleted < N || !o.partial_discovery.is_empty(),
        "the round robin misled no controller: {o:#?}"
    );
}
