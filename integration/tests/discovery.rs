//! mvp-ext-proc's discovery of each apiserver, observed end to end.

use std::time::{Duration, Instant};

use integration::harness::{FakeSpec, FrontDoor, Options, served_by, wait_for};
use serde_json::Value;

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
    fn gzip(b: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }
    let options = Options { ext_proc_args: vec!["--max-discovery-bytes".into(), "200000".into()], ..Options::default() };
    let door = FrontDoor::start(&[FakeSpec::new("v130", "v1.30"), FakeSpec::new("v137", "v1.37")], options).await.unwrap();
    let before = door.table().await.unwrap();
    let rss_before = integration::harness::process::rss_kib(door.ext_proc.pid());
    let v137 = door.fake("v137").url();
    let huge = format!("{{\"kind\":\"APIGroupDiscoveryList\",\"apiVersion\":\"apidiscovery.k8s.io/v2\",\"items\":[],\"pad\":\"{}\"}}", "x".repeat(300_000));
    let good = door.http.get(format!("{v137}/apis")).header("accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList").send().await.unwrap().text().await.unwrap();
    let truncated = good[..good.len() / 2].to_string();
    let deep = format!("{{\"kind\":\"APIGroupDiscoveryList\",\"apiVersion\":\"apidiscovery.k8s.io/v2\",\"items\":{}{}}}", "[".repeat(50_000), "]".repeat(50_000));
    let nulls = "{\"kind\":\"APIGroupDiscoveryList\",\"apiVersion\":\"apidiscovery.k8s.io/v2\",\"items\":[{\"metadata\":null,\"versions\":[{\"version\":null,\"resources\":null}]}]}".to_string();
    const AGGREGATED: &str = "";
    // (body, ?status&content_type, what the error says)
    for (body, query, expect) in [
        ("{\"kind\":\"APIGroupDiscoveryList\",".to_string(), AGGREGATED, "not valid JSON"),
        (truncated, AGGREGATED, "not valid JSON"),
        (deep, AGGREGATED, "not valid JSON"),
        (nulls, AGGREGATED, "not valid JSON"),
        ("{\"kind\":\"APIGroupList\",\"apiVersion\":\"v1\",\"groups\":[]}".to_string(), AGGREGATED, "expected kind APIGroupDiscoveryList"),
        // Valid, but a kube-apiserver never serves nothing.
        ("{\"kind\":\"APIGroupDiscoveryList\",\"apiVersion\":\"apidiscovery.k8s.io/v2\",\"metadata\":{},\"items\":[]}".to_string(), AGGREGATED, "lists no API group"),
        (huge, AGGREGATED, "larger than 200000 bytes"),
        // The aggregated document under another content type: read as the
        // old unaggregated list, which it is not.
        (good.clone(), "?content_type=text/html", "APIGroupList"),
        ("{\"kind\":\"Status\",\"code\":500}".to_string(), "?status=500&content_type=application/json", "500"),
        ("{\"kind\":\"Status\",\"code\":429}".to_string(), "?status=429&content_type=application/json", "429"),
    ]
    .into_iter()
    .map(|(body, query, expect)| (body.into_bytes(), query, expect))
    // gzip nobody asked for: discovery never sends Accept-Encoding.
    .chain([(gzip(good.as_bytes()), "?content_encoding=gzip", "not valid JSON")])
    {
        door.http.post(format!("{v137}/__fake/apis-body{query}")).body(body).send().await.unwrap();
        let seen = std::sync::Mutex::new(Value::Null);
        let t = wait_for(&format!("v137 to be unhealthy with '{expect}'"), Duration::from_secs(10), || async {
            let t = door.table().await?;
            let s = &t["apiservers"][1];
            *seen.lock().unwrap() = s.clone();
            (s["healthy"] == false && s["lastError"].as_str()?.contains(expect)).then_some(t)
        })
        .await
        .unwrap_or_else(|e| panic!("{e:#}; v137 is {}", seen.lock().unwrap()));
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

    // Broken answers cost no memory that stays (the oversized one is cut
    // off at the limit, not read whole).
    let rss_after = integration::harness::process::rss_kib(door.ext_proc.pid());
    eprintln!("mvp-ext-proc RSS {rss_before} -> {rss_after} KiB across the broken answers");
    assert!(rss_after < rss_before + 16 * 1024, "mvp-ext-proc grew from {rss_before} to {rss_after} KiB");

    // The same document under a new ETag every time: read in full every
    // round (nothing to answer 304 to), healthy, and nothing is rebuilt.
    door.http.post(format!("{v137}/__fake/apis-body?flapping_etag=true")).body(good).send().await.unwrap();
    let stats = |door: &FrontDoor| {
        let http = door.http.clone();
        let url = format!("{v137}/__fake/stats");
        async move { http.get(url).send().await.ok()?.json::<Value>().await.ok()?["aggregatedOk"].as_u64() }
    };
    let from = stats(&door).await.unwrap();
    let version = door.table().await.unwrap()["version"].clone();
    wait_for("three rounds with a flapping ETag", Duration::from_secs(10), || async { (stats(&door).await? >= from + 3).then_some(()) }).await.unwrap();
    let t = door.table().await.unwrap();
    assert_eq!((t["version"].clone(), t["apiservers"][1]["healthy"].clone()), (version, Value::Bool(true)), "{t}");
}

/// Each apiserver's discovery runs on its own: one that accepts connections
/// and never answers delays no other server's change (it reaches routing in
/// about one refresh interval), and is unhealthy once its own deadline
/// passes.
#[tokio::test]
async fn a_hung_apiserver_delays_no_other_servers_change() {
    let options = Options {
        refresh_interval: Duration::from_millis(500),
        ext_proc_args: vec!["--discovery-timeout".into(), "4s".into()],
        ..Options::default()
    };
    let door = FrontDoor::start(&[FakeSpec::new("v130", "v1.30"), FakeSpec::new("v137", "v1.37")], options).await.unwrap();
    let before = door.table().await.unwrap()["apiservers"][1]["resources"].clone();
    door.http.post(format!("{}/__fake/hang-discovery", door.fake("v130").url())).send().await.unwrap();
    // Once v130's read hangs, change v137.
    wait_for("v130's discovery to hang", Duration::from_secs(5), || async { (door.fake("v130").stats(&door.http).await?["hung"].as_u64()? > 0).then_some(()) })
        .await
        .unwrap();
    let changed = Instant::now();
    door.http.post(format!("{}/__fake/release?name=v1.33", door.fake("v137").url())).send().await.unwrap();
    door.wait_table_published(|t| t["apiservers"][1]["resources"] != before).await.unwrap();
    let took = changed.elapsed();
    eprintln!("v137's change published {took:?} after it happened, v130 hung");
    assert!(took < Duration::from_secs(3), "a hung apiserver delayed another's change by {took:?}");
    let t = wait_for("v130 to be unhealthy", Duration::from_secs(10), || async {
        let t = door.table().await?;
        (t["apiservers"][0]["healthy"] == false).then_some(t)
    })
    .await
    .unwrap();
    assert!(t["apiservers"][0]["lastError"].as_str().unwrap_or("").contains("/api"), "{t}");
    // Its routing is kept meanwhile: its exclusive APIs still go to it.
    assert!(t["apiservers"][0]["resources"].as_u64().unwrap() > 80, "{t}");
}

/// An unchanged server without aggregated discovery costs its two list GETs
/// per round: the probe of every known group-version (≈75 GETs) runs only
/// when something may have changed — the first read, other list bytes, a
/// newly known group-version, a health transition — or every 30 s.
#[tokio::test]
async fn an_unchanged_old_server_costs_two_gets_per_round() {
    let old = FakeSpec::new("v130", "v1.30").old();
    let options = Options { refresh_interval: Duration::from_millis(100), ..Options::default() };
    let door = FrontDoor::start(&[old, FakeSpec::new("v137", "v1.37")], options).await.unwrap();
    let stats = || async { door.fake("v130").stats(&door.http).await };
    let count = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or(0);
    let before = stats().await.unwrap();
    let after = wait_for("20 more discovery rounds", Duration::from_secs(60), || async {
        let s = stats().await?;
        (count(&s, "listRequests") >= count(&before, "listRequests") + 40).then_some(s)
    })
    .await
    .unwrap();
    let probes = count(&after, "groupVersionRequests") - count(&before, "groupVersionRequests");
    eprintln!("old server, 20 unchanged rounds: {} list GETs, {probes} group-version GETs", count(&after, "listRequests") - count(&before, "listRequests"));
    // Probing every round would be over 1,500; one safety-net probe ≈ 75.
    assert!(probes <= 100, "{probes} group-version GETs in 20 unchanged rounds");
}
