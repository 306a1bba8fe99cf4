//! mvp-ext-proc's discovery of each apiserver, observed end to end.

use std::time::Duration;

use integration::harness::{FakeSpec, FrontDoor, Options, served_by, wait_for};

/// An unchanged aggregated document costs a 304: the poll sends the ETag it
/// got and the apiserver does not send the document again.
#[tokio::test]
async fn unchanged_discovery_is_polled_with_etags() {
    let door = FrontDoor::start(&[FakeSpec::new("v133", "v1.33"), FakeSpec::new("v137", "v1.37")], Options {
        refresh_interval: Duration::from_millis(200),
        ..Options::default()
    })
    .await
    .unwrap();
    let fake = door.fake("v137");
    let stats = wait_for("several polls answered 304", Duration::from_secs(10), || async {
        let s = fake.stats(&door.http).await?;
        (s["notModified"].as_u64()? >= 6).then_some(s)
    })
    .await
    .unwrap();
    // /api and /apis were each sent in full once; every later poll was a 304.
    assert_eq!(stats["aggregatedOk"], 2, "{stats}");
}

/// Kubernetes 1.26–1.29 serve aggregated discovery only as v2beta1.
#[tokio::test]
async fn v2beta1_only_server_is_routed() {
    let old = FakeSpec::new("v130", "v1.30").v2beta1();
    let door = FrontDoor::start(&[old, FakeSpec::new("v137", "v1.37")], Options::default()).await.unwrap();
    for _ in 0..4 {
        let (status, v) = door.get_json(&door.http, "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas").await.unwrap();
        assert_eq!((status, served_by(&v)), (200, "v130"));
        let (status, v) = door.get_json(&door.http, "/apis/lifecycle.k8s.io/v1alpha1/evictionrequests").await.unwrap();
        assert_eq!((status, served_by(&v)), (200, "v137"));
    }
}

/// A broken or oversized discovery document is a clear error for that one
/// apiserver: it is marked unhealthy, its last good view keeps routing, and
/// nothing else changes.
#[tokio::test]
async fn bad_discovery_documents_change_nothing_that_was_good() {
    let options = Options { ext_proc_args: vec!["--max-discovery-bytes".into(), "200000".into()], ..Options::default() };
    let door = FrontDoor::start(&[FakeSpec::new("v130", "v1.30"), FakeSpec::new("v137", "v1.37")], options).await.unwrap();
    let before = door.table().await.unwrap();
    let v137 = door.fake("v137").url();
    let huge = format!("{{\"kind\":\"APIGroupDiscoveryList\",\"apiVersion\":\"apidiscovery.k8s.io/v2\",\"items\":[],\"pad\":\"{}\"}}", "x".repeat(300_000));
    for (body, expect) in [
        ("{\"kind\":\"APIGroupDiscoveryList\",".to_string(), "not valid JSON"),
        ("{\"kind\":\"APIGroupList\",\"apiVersion\":\"v1\",\"groups\":[]}".to_string(), "expected kind APIGroupDiscoveryList"),
        (huge, "larger than 200000 bytes"),
    ] {
        door.http.post(format!("{v137}/__fake/apis-body")).body(body).send().await.unwrap();
        let t = wait_for(&format!("v137 to be unhealthy with '{expect}'"), Duration::from_secs(10), || async {
            let t = door.table().await?;
            let s = &t["apiservers"][1];
            (s["healthy"] == false && s["lastError"].as_str()?.contains(expect)).then_some(t)
        })
        .await
        .unwrap();
        // Its last good view is kept, and v130 is untouched.
        assert_eq!(t["apiservers"][1]["resources"], before["apiservers"][1]["resources"]);
        assert_eq!(t["apiservers"][0], before["apiservers"][0]);
        door.wait_table_published(|x| x["version"] == t["version"]).await.unwrap();
        for _ in 0..3 {
            let (status, v) = door.get_json(&door.http, "/apis/lifecycle.k8s.io/v1alpha1/evictionrequests").await.unwrap();
            assert_eq!((status, served_by(&v)), (200, "v137"));
            let (status, v) = door.get_json(&door.http, "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas").await.unwrap();
            assert_eq!((status, served_by(&v)), (200, "v130"));
        }
        door.http.delete(format!("{v137}/__fake/apis-body")).send().await.unwrap();
        door.wait_table_published(|t| t["apiservers"][1]["healthy"] == true).await.unwrap();
    }
    let metrics = door.http.get(format!("http://127.0.0.1:{}/metrics", door.metrics_port)).send().await.unwrap().text().await.unwrap();
    let errors = metrics
        .lines()
        .find(|l| l.starts_with("apiserver_peer_discovery_sync_errors_total{") && l.contains("apiserver=\"v137\"") && l.contains("fetch_discovery"))
        .unwrap_or_else(|| panic!("no sync error metric for v137:\n{metrics}"));
    assert!(errors.rsplit(' ').next().unwrap().parse::<u64>().unwrap() >= 3, "{errors}");
}
