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
/// no new request reaches it (its exclusive API answers the 503 Status,
/// shared ones go to its peers) while a watch it holds keeps streaming
/// until it exits.
#[tokio::test]
async fn a_draining_member_gets_no_new_requests_and_its_watches_run_to_the_end() {
    let delay = Duration::from_secs(5);
    let mut door = FrontDoor::start(
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
    let http = door.http.clone();
    let url = door.url(EVICTIONS);
    wait_for("v137's exclusive API to answer 503 after SIGTERM", Duration::from_secs(3), || async {
        let r = http.get(&url).send().await.ok()?;
        (r.status() == 503).then_some(())
    })
    .await
    .unwrap();
    let closed_in = terminated.elapsed();
    // Until it exits: never v137, exclusive 503 Status with Retry-After,
    // shared APIs from its peers.
    let mut checked = 0;
    while terminated.elapsed() < delay - Duration::from_millis(500) {
        let r = door.http.get(door.url(EVICTIONS)).send().await.unwrap();
        assert_eq!(r.status(), 503);
        assert_eq!(r.headers().get("retry-after").map(|v| v.to_str().unwrap()), Some("1"));
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!((v["kind"].as_str(), v["code"].as_u64()), (Some("Status"), Some(503)), "{v}");
        let (status, v) = door.get_json(&door.http, CONFIGMAPS).await.unwrap();
        assert_eq!(status, 200);
        assert_ne!(served_by(&v), "v137", "a new request reached the draining apiserver");
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
}
