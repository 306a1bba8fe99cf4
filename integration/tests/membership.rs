//! Live membership (real Envoy, loopback, bounded): apiservers join through
//! each membership source and drain, and Envoy is never restarted — its
//! apiserver clusters and members come over ADS from mvp-ext-proc.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use integration::harness::{FakeSpec, FrontDoor, Options, served_by, wait_for};

const EVICTIONS: &str = "/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

/// Requests every member serves, in a loop until stopped: (sent, not 200).
fn background_load(door: &FrontDoor, stop: Arc<AtomicBool>) -> (Arc<AtomicU64>, Arc<AtomicU64>, tokio::task::JoinHandle<()>) {
    let (sent, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (http, url) = (door.http.clone(), door.url(CONFIGMAPS));
    let (s, f) = (sent.clone(), failed.clone());
    let task = tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            let ok = http.get(&url).send().await.is_ok_and(|r| r.status() == 200);
            s.fetch_add(1, Ordering::Relaxed);
            if !ok {
                f.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    (sent, failed, task)
}

async fn envoy_uptime(door: &FrontDoor) -> u64 {
    door.envoy_stat("server.uptime").await.unwrap_or(0)
}

/// An apiserver started at a new address joins through `source` alone:
/// its exclusive API routes to it within the bound, with no Envoy restart
/// and no failed request meanwhile.
async fn joins_through(source: &'static str) {
    let mut door = FrontDoor::start(&[FakeSpec::new("v130", "v1.30"), FakeSpec::new("v133", "v1.33")], Options { membership: Some(source), ..Options::default() })
        .await
        .unwrap();
    let (status, _) = door.get_json(&door.http, EVICTIONS).await.unwrap();
    assert_eq!(status, 404, "nobody serves it yet");
    let uptime = envoy_uptime(&door).await;
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, failed, load) = background_load(&door, stop.clone());

    let started = Instant::now();
    door.add_fake(FakeSpec::new("v137", "v1.37")).await.unwrap();
    let http = door.http.clone();
    let url = door.url(EVICTIONS);
    wait_for(&format!("v137 to be routed to through {source}"), Duration::from_secs(2), || async {
        let v: serde_json::Value = http.get(&url).send().await.ok()?.json().await.ok()?;
        (served_by(&v) == "v137").then_some(())
    })
    .await
    .unwrap();
    let joined_in = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    eprintln!("{source}: joined → routed in {joined_in:?}; background {} requests", sent.load(Ordering::Relaxed));
    assert_eq!(failed.load(Ordering::Relaxed), 0, "a request failed while a member joined");
    assert!(envoy_uptime(&door).await >= uptime, "Envoy was restarted");
    assert_eq!(door.envoy_stat("cluster_manager.cds.update_rejected").await, Some(0));
    let metrics = door.http.get(format!("http://127.0.0.1:{}/metrics", door.metrics_port)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("mvp_membership_apiservers 3"), "{metrics}");
    assert!(metrics.lines().any(|l| l.starts_with("mvp_membership_changes_total{change=\"joined\"}")), "{metrics}");
}

#[tokio::test]
async fn a_member_joins_through_the_kubernetes_endpoints() {
    joins_through("endpoints").await;
}

#[tokio::test]
async fn a_member_joins_through_its_identity_lease() {
    joins_through("leases").await;
}

/// SIGTERM with a shutdown delay, as kubeadm stops an apiserver: within 3 s
/// it is closed — no request its peers can answer reaches it — yet for its
/// exclusive API it is the last resort while it still serves (before,
/// issue 33: the 503 Status for the whole delay, though a server that could
/// answer was up); a watch it holds keeps streaming until it exits, and
/// after it exits its exclusive API answers the 503 Status.
#[tokio::test]
async fn a_draining_member_serves_only_what_nobody_else_can_and_its_watches_run_to_the_end() {
    let delay = Duration::from_secs(5);
    let door = FrontDoor::start(
        &[FakeSpec::new("v130", "v1.30"), FakeSpec::new("v133", "v1.33"), FakeSpec::new("v137", "v1.37").with_shutdown_delay(delay)],
        Options { membership: Some("endpoints,leases"), ..Options::default() },
    )
    .await
    .unwrap();
    // A watch on v137 that would stream bookmarks for 8 s.
    let mut watch = door.http.get(door.url(&format!("{EVICTIONS}?watch=1&bookmarks=80"))).send().await.unwrap();
    assert_eq!(watch.status(), 200);
    let first = watch.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("\"server\":\"v137\""));

    let terminated = Instant::now();
    door.fake("v137").proc.signal("TERM");
    let closed = |t: &serde_json::Value| t["apiservers"].as_array().is_some_and(|a| a.iter().any(|s| s["name"] == "v137" && s["open"] == false));
    door.wait_table_published(closed).await.unwrap();
    let closed_in = terminated.elapsed();
    assert!(closed_in < Duration::from_secs(3), "closed {closed_in:?} after SIGTERM");
    // Until it exits: shared APIs from its peers only, its exclusive API
    // from it (the last resort), never a 503.
    let mut checked = 0;
    while terminated.elapsed() < delay - Duration::from_millis(500) {
        let (status, v) = door.get_json(&door.http, EVICTIONS).await.unwrap();
        assert_eq!((status, served_by(&v)), (200, "v137"), "{v}");
        let (status, v) = door.get_json(&door.http, CONFIGMAPS).await.unwrap();
        assert_eq!(status, 200);
        assert_ne!(served_by(&v), "v137", "a request its peers serve reached the draining apiserver");
        checked += 1;
    }
    // The watch streamed through the drain and ended only with the process.
    let mut last_event = Instant::now();
    let mut events_after_close = 0;
    while let Ok(Some(chunk)) = watch.chunk().await {
        if terminated.elapsed() > closed_in + Duration::from_millis(200) {
            events_after_close += chunk.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count();
        }
        last_event = Instant::now();
    }
    let ended = terminated.elapsed();
    eprintln!("SIGTERM → closed in {closed_in:?}; {checked} checks; watch: {events_after_close} events after that, ended {ended:?} after SIGTERM (last event {:?} before)", last_event.elapsed());
    assert!(events_after_close > 10, "the watch on the draining apiserver stopped early");
    assert!(ended >= delay - Duration::from_millis(300), "the watch ended before the apiserver closed ({ended:?})");
    // Gone: its exclusive API is the 503 Status with Retry-After again.
    let http = door.http.clone();
    let url = door.url(EVICTIONS);
    wait_for("the exited apiserver's API to answer the 503 Status with Retry-After", Duration::from_secs(5), || async {
        let r = http.get(&url).send().await.ok()?;
        (r.status() == 503 && r.headers().get("retry-after").is_some()).then_some(())
    })
    .await
    .unwrap();
}

/// An apiserver restarted in place as another release, the way kubeadm
/// upgrades one (SIGTERM, shutdown delay, the new binary on the same
/// address): under load, no request gets a 404 for an API a ready
/// apiserver served at that moment, and none fails.
#[tokio::test]
async fn a_member_restarted_in_place_as_another_release_is_read_before_it_is_used() {
    let delay = Duration::from_millis(1500);
    let mut door = FrontDoor::start(
        &[FakeSpec::new("v137", "v1.37"), FakeSpec::new("x", "v1.33").with_shutdown_delay(delay)],
        Options { membership: Some("leases"), ..Options::default() },
    )
    .await
    .unwrap();
    // Both serve resource.k8s.io/v1beta1 now; the release x comes back as
    // (1.30) does not: a request for it must never reach the new x.
    const CLAIMS: &str = "/apis/resource.k8s.io/v1beta1/namespaces/ns/resourceclaims";
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::<String, u64>::new()));
    let mut load = Vec::new();
    for path in [CLAIMS, CONFIGMAPS, CLAIMS] {
        let (http, url, stop, counts) = (door.http.clone(), door.url(path), stop.clone(), counts.clone());
        load.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let outcome = match http.get(&url).send().await {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let v: serde_json::Value = r.json().await.unwrap_or_default();
                        format!("{status} {}", if status == 200 { served_by(&v).to_string() } else { v["reason"].as_str().unwrap_or("").to_string() })
                    }
                    Err(e) => format!("error {e}"),
                };
                *counts.lock().unwrap().entry(format!("{} → {outcome}", url.rsplit('/').next().unwrap_or(""))).or_default() += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    door.fake("x").proc.signal("TERM");
    wait_for("x to exit after its shutdown delay", Duration::from_secs(5), || {
        let running = door.fakes.iter_mut().find(|f| f.spec.name == "x").map(|f| f.proc.is_running());
        async move { (running == Some(false)).then_some(()) }
    })
    .await
    .unwrap();
    let spec = FakeSpec { release: "v1.30".into(), ..door.fake("x").spec.clone() };
    door.restart_fake("x", spec).await.unwrap();
    door.wait_table_published(|t| {
        t["apiservers"].as_array().is_some_and(|a| a.iter().any(|s| s["name"] == "x" && s["open"] == true && s["release"].as_str().is_some_and(|r| r.starts_with("v1.30"))))
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.await.unwrap();
    }
    let counts = counts.lock().unwrap().clone();
    eprintln!("{counts:#?}");
    let bad: Vec<_> = counts.iter().filter(|(k, _)| !k.contains("→ 200 ")).collect();
    assert!(bad.is_empty(), "requests that did not succeed: {bad:?}");
    assert!(counts.iter().any(|(k, _)| k.starts_with("configmaps → 200 x")), "x was not used again after its restart: {counts:?}");
}

/// Two Envoys on one mvp-ext-proc (front doors behind an L4 balancer): the
/// same merged `/apis` bytes and ETag from both, and a joining member is
/// routed by both.
#[tokio::test]
async fn two_envoys_share_one_mvp_ext_proc() {
    let mut door = FrontDoor::start(&[FakeSpec::new("v130", "v1.30"), FakeSpec::new("v133", "v1.33")], Options { membership: Some("leases"), ..Options::default() })
        .await
        .unwrap();
    let (_second, other) = door.another_envoy().await.unwrap();
    let accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let client = door.http.clone();
    let apis = |port: u16| {
        let http = client.clone();
        async move {
            let r = http.get(format!("http://127.0.0.1:{port}/apis")).header("accept", accept).send().await.unwrap();
            let etag = r.headers().get("etag").map(|v| v.to_str().unwrap().to_string());
            (etag, r.bytes().await.unwrap())
        }
    };
    let (a, b) = (apis(door.listen_port).await, apis(other.ports.listen).await);
    assert!(a.0.is_some());
    assert_eq!(a, b, "the two front doors answer /apis differently");

    door.add_fake(FakeSpec::new("v137", "v1.37")).await.unwrap();
    for port in [door.listen_port, other.ports.listen] {
        let http = door.http.clone();
        let url = format!("http://127.0.0.1:{port}{EVICTIONS}");
        wait_for("both front doors to route to the new member", Duration::from_secs(2), || async {
            let v: serde_json::Value = http.get(&url).send().await.ok()?.json().await.ok()?;
            (served_by(&v) == "v137").then_some(())
        })
        .await
        .unwrap();
    }
    // The merged document is rebuilt off the sync loop, after the table that
    // routes the new member: wait until it has been rebuilt with it.
    let before = a.0.clone().unwrap_or_default();
    door.topology.wait_table(&door.http, |t| t["discovery"]["etag"].as_str().is_some_and(|e| e != before)).await.unwrap();
    let (a, b) = (apis(door.listen_port).await, apis(other.ports.listen).await);
    assert_eq!(a, b, "the two front doors answer /apis differently after the join");
    let metrics = door.http.get(format!("http://127.0.0.1:{}/metrics", door.metrics_port)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("mvp_xds_streams 2"), "{metrics}");
    assert!(metrics.lines().filter(|l| l.starts_with("mvp_xds_nacks_total{")).all(|l| l.ends_with(" 0")), "an Envoy rejected a push: {metrics}");
}

/// A member that departs and comes back with the same documents (a
/// restart) costs no OpenAPI merge: its documents are read again against
/// the ones it had (their ETags) and stay the same, so nothing is merged —
/// or, where the set without it was merged, that merge is taken again
/// (`mvp_openapi_merges_total{result="recent"}`). A merge from scratch is
/// 0.7–2.3 s of CPU at CRD scale, which a reconnect storm or a flapping
/// member would pay on every change (issue 48). Before, its documents were
/// read afresh, new to the merge: one built on every return.
#[tokio::test]
async fn a_member_back_with_the_same_documents_costs_no_openapi_merge() {
    let mut door = FrontDoor::start(&[FakeSpec::new("v130", "v1.30"), FakeSpec::new("v133", "v1.33")], Options { membership: Some("leases"), ..Options::default() })
        .await
        .unwrap();
    // (OpenAPI merges built, recent; v137's OpenAPI reads changed, unchanged)
    let counts = |door: &FrontDoor| {
        let (http, url) = (door.http.clone(), format!("http://127.0.0.1:{}/metrics", door.metrics_port));
        async move {
            let text = http.get(url).send().await.ok()?.text().await.ok()?;
            let count = |series: &str| text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse::<u64>().ok()).unwrap_or(0);
            let read = |result: &str| count(&format!("mvp_apiserver_openapi_reads_total{{apiserver=\"apiserver-v137\",result=\"{result}\"}}"));
            Some((count("mvp_openapi_merges_total{result=\"built\"}"), count("mvp_openapi_merges_total{result=\"recent\"}"), read("changed"), read("unchanged")))
        }
    };
    let sources = |n: usize| move |t: &serde_json::Value| t["openapi"]["sources"].as_array().is_some_and(|s| s.len() == n);
    door.wait_table_published(sources(2)).await.unwrap();
    door.add_fake(FakeSpec::new("v137", "v1.37")).await.unwrap();
    door.wait_table_published(sources(3)).await.unwrap();
    let before = counts(&door).await.unwrap();
    assert!(before.0 >= 2 && before.2 >= 1, "two sets merged, v137's documents read: {before:?}");
    // It crashes (its lease no longer renewed: departed), then restarts.
    let spec = door.fake("v137").spec.clone();
    door.fake_mut("v137").proc.kill();
    door.wait_table_published(|t| t["apiservers"].as_array().is_some_and(|a| a.iter().any(|s| s["name"] == "apiserver-v137" && s["departed"] == true)))
        .await
        .unwrap();
    door.restart_fake("v137", spec).await.unwrap();
    // Back, and its OpenAPI documents read again.
    let after = wait_for("v137's documents read again", Duration::from_secs(30), || async {
        let c = counts(&door).await?;
        (c.2 + c.3 > before.2 + before.3).then_some(c)
    })
    .await
    .unwrap();
    eprintln!("(merges built, recent, v137 reads changed, unchanged): {before:?} before the crash, {after:?} once back");
    assert_eq!((after.2, after.0), (before.2, before.0), "back with the same documents: read as unchanged, no merge built");
    let keys = door.get_json(&door.http, "/openapi/v3").await.unwrap().1;
    assert!(keys["paths"].as_object().is_some_and(|p| p.keys().any(|k| k.contains("lifecycle.k8s.io"))), "v1.37's group is in the merged index: {keys}");
}

/// A member that leaves every source (crashed: its lease is no longer
/// renewed and its endpoint is gone) is closed at once: its exclusive API
/// answers the 503 Status — never a 404 — for the departed retention.
#[tokio::test]
async fn a_departed_member_is_closed_and_its_apis_answer_503() {
    let mut door = FrontDoor::start(&[FakeSpec::new("v130", "v1.30"), FakeSpec::new("v133", "v1.33")], Options { membership: Some("leases"), ..Options::default() })
        .await
        .unwrap();
    door.add_fake(FakeSpec::new("v137", "v1.37")).await.unwrap();
    door.wait_table_published(|t| t["apiservers"].as_array().is_some_and(|a| a.iter().any(|s| s["name"] == "apiserver-v137" && s["open"] == true)))
        .await
        .unwrap();
    let (status, v) = door.get_json(&door.http, EVICTIONS).await.unwrap();
    assert_eq!((status, served_by(&v)), (200, "v137"));
    door.fake_mut("v137").proc.kill();
    // Not renewed for --lease-stale-after (3 s here): departed.
    door.wait_table_published(|t| t["apiservers"].as_array().is_some_and(|a| a.iter().any(|s| s["name"] == "apiserver-v137" && s["departed"] == true)))
        .await
        .unwrap();
    for _ in 0..5 {
        let (status, v) = door.get_json(&door.http, EVICTIONS).await.unwrap();
        assert_eq!((status, v["kind"].as_str()), (503, Some("Status")), "{v}");
    }
    let metrics = door.http.get(format!("http://127.0.0.1:{}/metrics", door.metrics_port)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("mvp_membership_apiservers 2"), "{metrics}");
    assert!(metrics.lines().any(|l| l.starts_with("mvp_membership_changes_total{change=\"departed\"} 1")), "{metrics}");
}
