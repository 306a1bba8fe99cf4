//! Servers older than Kubernetes 1.26 (no aggregated discovery) through
//! real Envoy, mvp-ext-proc and fake apiservers: their unaggregated
//! documents are read instead, and what they say is checked against what
//! each server itself answers.

use std::time::Duration;

use integration::harness::{FakeSpec, FrontDoor, Options, served_by, wait_for};
use serde_json::Value;

/// Servers older than Kubernetes 1.26 have no aggregated discovery; their
/// unaggregated documents are read instead, and a group-version their
/// `/apis` lists but that answers 404 does not count.
#[tokio::test]
async fn old_server_without_aggregated_discovery_is_routed() {
    let old = FakeSpec::new("v130", "v1.30").old().listing_unserved("lifecycle.k8s.io/v1alpha1");
    let door = FrontDoor::start(&[old, FakeSpec::new("v137", "v1.37")], Options::default()).await.unwrap();
    for _ in 0..6 {
        let (status, v) = door.get_json(&door.http, "/apis/flowcontrol.apiserver.k8s.io/v1beta3/namespaces/x/flowschemas/y").await.unwrap();
        assert_eq!((status, served_by(&v)), (200, "v130"));
        let (status, v) = door.get_json(&door.http, "/apis/lifecycle.k8s.io/v1alpha1/evictionrequests").await.unwrap();
        assert_eq!((status, served_by(&v)), (200, "v137"));
        // Core resources both serve, subresources only one lists.
        let (status, v) = door.get_json(&door.http, "/apis/storage.k8s.io/v1/csinodes/n/status").await.unwrap();
        assert_eq!((status, served_by(&v)), (200, "v137"));
    }
    let t = door.table().await.unwrap();
    assert!(t["apiservers"][0]["resources"].as_u64().unwrap() > 80, "{t}");
}

/// An old server's `/apis` list is not the truth (on v1.20 the last-started
/// apiserver deletes the APIService objects of group-versions it does not
/// serve): a group-version counts for a server exactly when its own
/// `/apis/{g}/{v}` answers 200, listed or not.
#[tokio::test]
async fn old_server_serving_an_unlisted_group_version_is_routed() {
    let old = FakeSpec::new("v130", "v1.30").old().unlisting_served("flowcontrol.apiserver.k8s.io/v1beta3");
    let door = FrontDoor::start(&[old, FakeSpec::new("v137", "v1.37")], Options::default()).await.unwrap();
    let listed = door.http.get(format!("{}/apis", door.fake("v130").url())).send().await.unwrap().text().await.unwrap();
    assert!(!listed.contains("flowcontrol.apiserver.k8s.io/v1beta3"), "the fake must not list it");
    for _ in 0..6 {
        let (status, v) = door.get_json(&door.http, "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas").await.unwrap();
        assert_eq!((status, served_by(&v)), (200, "v130"));
    }
}

/// An old server (no aggregated discovery) with one group-version's
/// backend down — an aggregated APIService such as metrics-server answering
/// kube-aggregator's 503 — is still read: what answered is updated (here
/// the server is upgraded in place to 1.33's API set), the failing
/// group-version keeps what was read of it before, and requests for it
/// still reach the server (whose 503 is the honest answer). Before (issue
/// 31): the one 503 failed the whole read every round, the server's API
/// set froze and it was marked unhealthy.
#[tokio::test]
async fn an_old_servers_failing_group_version_does_not_freeze_the_rest() {
    let old = FakeSpec::new("v130", "v1.30").old();
    let door = FrontDoor::start(&[old, FakeSpec::new("v137", "v1.37")], Options::default()).await.unwrap();
    let fake = door.fake("v130").url();
    let resources = |t: &Value| t["apiservers"].as_array().and_then(|a| a.iter().find(|s| s["name"] == "v130")).and_then(|s| s["resources"].as_u64());
    let before = resources(&door.table().await.unwrap()).unwrap();
    let r = door.http.post(format!("{fake}/__fake/unavailable?groupVersion=batch/v1")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = door.http.post(format!("{fake}/__fake/release?name=v1.33")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let upgraded = |t: &Value| {
        let v130 = t["apiservers"].as_array().and_then(|a| a.iter().find(|s| s["name"] == "v130"));
        v130.is_some_and(|s| s["healthy"] == true) && resources(t).is_some_and(|n| n != before)
    };
    door.wait_table_published(upgraded).await.unwrap();
    // Each round now asks the failing group-version alone, not all of them.
    let stats = || async { door.http.get(format!("{fake}/__fake/stats")).send().await.unwrap().json::<Value>().await.unwrap() };
    let count = |v: &Value, k: &str| v[k].as_u64().unwrap();
    let start = stats().await;
    let http = door.http.clone();
    wait_for("three more discovery rounds", Duration::from_secs(20), || async {
        let now: Value = http.get(format!("{fake}/__fake/stats")).send().await.ok()?.json().await.ok()?;
        (count(&now, "listRequests") >= count(&start, "listRequests") + 6).then_some(())
    })
    .await
    .unwrap();
    let end = stats().await;
    let (rounds, asked) = ((count(&end, "listRequests") - count(&start, "listRequests")) / 2, count(&end, "groupVersionRequests") - count(&start, "groupVersionRequests"));
    eprintln!("{asked} group-version documents asked in {rounds} rounds while batch/v1 fails");
    assert!(asked <= rounds + 1, "{asked} group-version documents in {rounds} rounds");
    // Its batch/v1 is still its own: requests reach it and get its 503.
    let (status, v) = door.get_json(&door.http, "/apis/batch/v1/namespaces/default/jobs").await.unwrap();
    assert!(status == 200 || (status, v["reason"].as_str()) == (503, Some("ServiceUnavailable")), "{status} {v}");
    let apis: Value = door.http.get(door.url("/apis")).header("accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList").send().await.unwrap().json().await.unwrap();
    let batch = apis["items"].as_array().unwrap().iter().find(|g| g["metadata"]["name"] == "batch").unwrap();
    assert!(batch["versions"].as_array().unwrap().iter().any(|v| v["version"] == "v1"), "{batch}");
}
