//! Faults under load (bounded, loopback): what clients see while an
//! apiserver churns or mvp-ext-proc is killed. Every response is classified
//! as a user would: correct 200 from a server that serves the API, an
//! honest 503 `metav1.Status`, or anything else (a misroute: another
//! server's 404; Envoy plain text; a reset).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use integration::harness::process::rss_kib;
use integration::harness::tally::{PATHS, Tally, after_requests, load_paths};
use integration::harness::{FakeSpec, FrontDoor, Options, served_by, wait_for};
use serde_json::Value;

use integration::harness::three_fakes as three;

/// v1.37 is killed (SIGKILL) and restarted six times under load from eight
/// clients: no request is misrouted or gets anything but a correct answer
/// or a 503 Status — for the API only v1.37 serves while it is down, and for
/// at most the requests in flight on its connections when it died (one per
/// client per kill); new requests for shared APIs fail over. Envoy's and
/// mvp-ext-proc's memory stay flat.
#[tokio::test]
async fn apiserver_churn_under_load_gives_only_correct_answers_and_503_status() {
    let options = Options { refresh_interval: Duration::from_millis(500), ..Options::default() };
    let mut door = FrontDoor::start(&three(), options).await.unwrap();
    let (stop, tally) = (Arc::new(AtomicBool::new(false)), Arc::new(Tally::default()));
    const V137_ONLY: &[&str] = &["/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests"];
    let v137_only = V137_ONLY;
    let tasks = load_paths(PATHS, &door, 8, stop.clone(), tally.clone(), v137_only);
    after_requests(&tally, 2000).await;
    let rss_before = (rss_kib(door.envoy.pid()), rss_kib(door.ext_proc.pid()));
    for cycle in 0..6 {
        door.fake_mut("v137").proc.kill();
        // Down long enough for discovery to notice (the table lists it last).
        door.wait_table_published(|t| t["apiservers"][2]["healthy"] == false).await.unwrap();
        after_requests(&tally, 300).await;
        door.restart_fake("v137", FakeSpec::new("v137", "v1.37")).await.unwrap();
        door.wait_table_published(|t| t["apiservers"][2]["healthy"] == true).await.unwrap();
        after_requests(&tally, 300).await;
        eprintln!("cycle {cycle}: {}", tally.report());
    }
    after_requests(&tally, 2000).await;
    let rss_after = (rss_kib(door.envoy.pid()), rss_kib(door.ext_proc.pid()));
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    eprintln!("churn: {} requests: {}; RSS KiB envoy {} -> {}, mvp-ext-proc {} -> {}", tally.total(), tally.report(), rss_before.0, rss_after.0, rss_before.1, rss_after.1);
    assert!(tally.other.lock().unwrap().is_empty(), "{}", tally.report());
    assert!(tally.status_503.load(Ordering::Relaxed) > 0, "the v1.37-only API was requested while v1.37 was down");
    assert!(tally.in_flight() <= 8 * 6, "more 503s for shared APIs than requests in flight at the kills: {}", tally.report());
    assert!(rss_after.0 < rss_before.0 + 32 * 1024 && rss_after.1 < rss_before.1 + 16 * 1024, "memory grew: {rss_before:?} -> {rss_after:?}");
}

/// mvp-ext-proc killed (SIGKILL) under load: routing continues on the table
/// the filter holds — every request correct, no error, no misroute — and
/// after it restarts nothing is forgotten.
#[tokio::test]
async fn routing_continues_while_mvp_ext_proc_is_killed() {
    let mut door = FrontDoor::start(&three(), Options::default()).await.unwrap();
    let (stop, tally) = (Arc::new(AtomicBool::new(false)), Arc::new(Tally::default()));
    let tasks = load_paths(PATHS, &door, 8, stop.clone(), tally.clone(), &[]);
    after_requests(&tally, 1000).await;
    door.ext_proc.kill();
    after_requests(&tally, 3000).await;
    door.restart_ext_proc().await.unwrap();
    after_requests(&tally, 1000).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    eprintln!("mvp-ext-proc killed under load: {} requests: {}", tally.total(), tally.report());
    assert_eq!((tally.in_flight(), tally.other.lock().unwrap().len()), (0, 0), "{}", tally.report());
}

/// mvp-ext-proc restarted (SIGKILL, then started with the same flags) while
/// one apiserver hangs (SIGSTOP): Envoy keeps every endpoint it has until
/// the new process has read every seed once — it is never sent an empty
/// endpoint set — so every API another server serves answers throughout
/// (measured before: 0 hosts 0.4 s after the restart, every request 503 for
/// ~10 s, until the hung seed's read timed out; issue 31).
#[tokio::test]
async fn a_restart_while_an_apiserver_hangs_changes_nothing_for_the_others() {
    let mut door = FrontDoor::start(&three(), Options::default()).await.unwrap();
    door.fake("v130").proc.signal("STOP");
    let closed = |t: &Value| t["apiservers"].as_array().is_some_and(|a| a.iter().any(|s| s["name"] == "v130" && s["open"] == false));
    door.wait_table_published(closed).await.unwrap();
    let (stop, tally) = (Arc::new(AtomicBool::new(false)), Arc::new(Tally::default()));
    // What the others serve. A request for the API only v130 serves is held
    // for the whole hold (v130 hangs throughout), then gets its 503: checked
    // once below, kept out of the load it would only slow down.
    const OTHERS: &[(&str, &[&str])] = &[PATHS[0], PATHS[2], PATHS[3]];
    let only_v130 = PATHS[1].0;
    assert_eq!(PATHS[1].1, ["v130"]);
    let tasks = load_paths(OTHERS, &door, 4, stop.clone(), tally.clone(), &[]);
    after_requests(&tally, 200).await;
    door.restart_ext_proc().await.unwrap();
    let (status, _, body, took) = timed_get(door.http.clone(), door.url(only_v130)).await;
    assert_eq!((status, body["kind"].as_str()), (503, Some("Status")), "{body}");
    after_requests(&tally, 1000).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    door.fake("v130").proc.signal("CONT");
    eprintln!("mvp-ext-proc restarted while v130 hangs: {} requests: {}; v130's API: 503 after {took:?}", tally.total(), tally.report());
    assert_eq!((tally.status_503.load(Ordering::Relaxed), tally.in_flight(), tally.other.lock().unwrap().len()), (0, 0, 0), "{}", tally.report());
}

/// mvp-ext-proc stopped gracefully (SIGTERM, as the kubelet stops a pod)
/// while clients hold streams open: the ADS subscription — which never ends
/// on its own, so a graceful stop once waited on Envoy for over 10 s — and
/// the skew log's stream are ended by the server with UNAVAILABLE at once,
/// and a client that holds
/// any other stream open cannot keep the process from exiting: it is cut
/// off after the drain limit, and the cut-off is logged.
#[tokio::test]
async fn a_graceful_stop_ends_ads_streams_and_bounds_the_drain() {
    use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
    use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
    use envoy_types::pb::envoy::service::ext_proc::v3::ProcessingRequest;
    use envoy_types::pb::envoy::service::accesslog::v3::StreamAccessLogsMessage;
    use envoy_types::pb::envoy::service::accesslog::v3::access_log_service_client::AccessLogServiceClient;
    use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
    use futures::StreamExt;

    let mut door = FrontDoor::start(&three()[..2], Options::default()).await.unwrap();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{}", door.grpc_port)).unwrap().connect().await.unwrap();
    let subscribe = DiscoveryRequest { type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".into(), ..Default::default() };
    let mut ads = AggregatedDiscoveryServiceClient::new(channel.clone())
        .stream_aggregated_resources(futures::stream::iter([subscribe]).chain(futures::stream::pending()))
        .await
        .unwrap()
        .into_inner();
    assert!(ads.message().await.unwrap().is_some_and(|r| !r.resources.is_empty()), "no clusters on the ADS stream");
    // A skew log stream, as Envoy's access logger keeps one open: it never
    // ends on its own either.
    let mut log = AccessLogServiceClient::new(channel.clone());
    let skew_log = tokio::spawn(async move { log.stream_access_logs(futures::stream::pending::<StreamAccessLogsMessage>()).await });
    // An ext_proc stream that never sends its request's headers.
    let _held = ExternalProcessorClient::new(channel).process(futures::stream::pending::<ProcessingRequest>()).await.unwrap();

    door.ext_proc.signal("TERM");
    let ended = tokio::time::timeout(Duration::from_secs(20), ads.message()).await.expect("the ADS stream outlived the stop");
    let status = ended.expect_err("the ADS stream ended without a status");
    assert_eq!((status.code(), status.message()), (tonic::Code::Unavailable, "mvp-ext-proc is stopping"));
    // The skew log's stream too, at once (before: it held the drain to its
    // limit).
    let ended = tokio::time::timeout(Duration::from_secs(3), skew_log).await.expect("the skew log stream outlived the stop").unwrap();
    let status = ended.expect_err("the skew log stream ended without a status");
    assert_eq!((status.code(), status.message()), (tonic::Code::Unavailable, "mvp-ext-proc is stopping"));
    let log = door.ext_proc.log.clone();
    wait_for("mvp-ext-proc to stop though a stream is held open", Duration::from_secs(30), || {
        let stopped = !door.ext_proc.is_running();
        async move { stopped.then_some(()) }
    })
    .await
    .unwrap();
    let log = std::fs::read_to_string(log).unwrap();
    assert!(log.contains("gRPC streams still open after the drain limit: stopping anyway"), "{log}");
    assert!(log.contains("mvp-ext-proc stopped"), "{log}");
}

/// The `/openapi/v3` index keys one apiserver serves (read from it).
async fn openapi_v3_keys(door: &FrontDoor, name: &str) -> std::collections::BTreeSet<String> {
    let index: Value = door.http.get(format!("{}/openapi/v3", door.fake(name).url())).send().await.unwrap().json().await.unwrap();
    index["paths"].as_object().unwrap().keys().cloned().collect()
}

/// mvp-ext-proc restarted while an apiserver is down: the state file gives
/// back its API set and its OpenAPI v3 keys, so its resources and its
/// `/openapi/v3/{key}` both answer the 503 Status. Before (issue 31): the
/// OpenAPI documents were not kept, and the key was a 404 while the
/// resources were 503.
#[tokio::test]
async fn a_restart_while_an_apiserver_is_down_keeps_its_openapi_keys() {
    let mut door = FrontDoor::start(&three(), Options::default()).await.unwrap();
    let others: std::collections::BTreeSet<String> = [openapi_v3_keys(&door, "v130").await, openapi_v3_keys(&door, "v133").await].into_iter().flatten().collect();
    let key = openapi_v3_keys(&door, "v137").await.into_iter().find(|k| !others.contains(k)).expect("a key only v137 serves");
    let path = format!("/openapi/v3/{key}");
    let state_file = door.dir.path().join("mvp-ext-proc-state.json");
    wait_for("v137's OpenAPI index in the state file", Duration::from_secs(10), || {
        let kept = std::fs::read_to_string(&state_file).is_ok_and(|s| s.contains("openapi_v3_index") && s.contains(&key));
        async move { kept.then_some(()) }
    })
    .await
    .unwrap();
    door.fake_mut("v137").proc.kill();
    door.restart_ext_proc().await.unwrap();
    let pending = |t: &Value| t["apiservers"].as_array().is_some_and(|a| a.iter().any(|s| s["name"] == "v137" && s["open"] == false));
    door.wait_table_published(pending).await.unwrap();
    for p in [path.as_str(), "/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests"] {
        let (status, v) = door.get_json(&door.http, p).await.unwrap();
        assert_eq!((status, v["kind"].as_str()), (503, Some("Status")), "{p}: {v}");
    }
}

/// An apiserver that comes back is read the moment its `/readyz` turns
/// 200, not at the next round: a member that is not ready is probed every
/// 100 ms whatever the refresh interval (4 s here). Measured: from the
/// restarted server listening to Envoy routing by a table with it open.
/// Before (issue 33): anywhere within the interval — the restarted server
/// served clients' requests for up to a round while its exclusive APIs
/// still answered 503.
#[tokio::test]
async fn a_restarted_apiserver_is_read_as_soon_as_it_is_ready() {
    let interval = Duration::from_secs(4);
    let mut door = FrontDoor::start(&three(), Options { refresh_interval: interval, ..Options::default() }).await.unwrap();
    let open = |want: bool| move |t: &Value| t["apiservers"].as_array().is_some_and(|a| a.iter().any(|s| s["name"] == "v137" && s["open"] == want));
    let mut gaps = Vec::new();
    for _ in 0..3 {
        door.fake_mut("v137").proc.kill();
        door.wait_table_published(open(false)).await.unwrap();
        let spec = door.fake("v137").spec.clone();
        door.restart_fake("v137", spec).await.unwrap();
        let listening = std::time::Instant::now();
        door.wait_table_published(open(true)).await.unwrap();
        gaps.push(listening.elapsed());
    }
    eprintln!("restarted → routed: {gaps:?} (refresh interval {interval:?})");
    assert!(gaps.iter().all(|g| *g < Duration::from_millis(1500)), "{gaps:?}");
}

/// A request only a restarting apiserver serves is held only while a wait
/// can help (issue 63 item 1). The apiserver down — its port refuses
/// connections — the request gets the 503 Status (with `Retry-After`) at
/// once, not after the hold: before, every such request waited the whole
/// hold, and a client that sends one request after another made one a
/// second (60 requests in 20 s against a plain door's 2,406). Started
/// again and answering while not ready yet (`/readyz` fails for 1 s, as a
/// real kube-apiserver's does for seconds after it listens), a request is
/// held and served once mvp-ext-proc reads it back: before issue 33 it was
/// the 503 at once — the soak counted 0–4 "503 while a capable server was
/// up" per run, all in that window. The hold is 5 s here (the product's is
/// 1 s) so the start fits in it on a loaded machine: what is checked is
/// that the request is served, not how fast. The access log says which.
#[tokio::test]
async fn a_request_for_a_restarting_apiserver_waits_for_it_and_one_for_a_down_apiserver_does_not() {
    let hold = Duration::from_secs(5);
    let mut door = FrontDoor::start(&three(), Options { hold_unavailable: Some(hold), ..Options::default() }).await.unwrap();
    let v137 = |want: &'static str, value: bool| move |t: &Value| t["apiservers"].as_array().is_some_and(|a| a.iter().any(|s| s["name"] == "v137" && s[want] == value));
    let (only_v137, _) = PATHS[0];
    let held = "wasmcustom.mvp.router.held_requests";
    let rerouted = "wasmcustom.mvp.router.rerouted_requests";
    let held_then_503 = "wasmcustom.mvp.router.held_then_unavailable";
    let rerouted_before = door.envoy_stat(rerouted).await.unwrap_or(0);

    // Down: the 503 Status at once, three times over, nothing held.
    door.fake_mut("v137").proc.kill();
    door.wait_table_published(v137("open", false)).await.unwrap();
    let held_before = door.envoy_stat(held).await.unwrap_or(0);
    let mut down = Vec::new();
    for i in 0..3 {
        let path = format!("{only_v137}?mark=down-{i}");
        let (status, retry_after, body, took) = timed_get(door.http.clone(), door.url(&path)).await;
        assert_eq!((status, body["kind"].as_str(), retry_after.as_deref()), (503, Some("Status"), Some("1")), "{body}");
        // Why, in kube's words: no Envoy response flags in a cause (issue 49).
        assert_eq!(body["reason"], "ServiceUnavailable", "{body}");
        assert!(body["message"].as_str().is_some_and(|m| m.starts_with("unavailable: ") && m.contains("restarting, draining or not read yet")), "{body}");
        assert!(body.get("details").is_none() && !body.to_string().contains("direct_response"), "{body}");
        down.push(took);
    }
    eprintln!("down: the 503 Status after {down:?} (the hold is {hold:?})");
    // "At once" on a loaded machine: far under the hold, which it waited before.
    assert!(down.iter().all(|t| *t < Duration::from_secs(1)), "answered {down:?}, not at once");
    assert_eq!(door.envoy_stat(held).await.unwrap_or(0), held_before, "nothing held while v137 is down");

    // Started again, not ready for 1 s: held, then served.
    let spec = door.fake("v137").spec.clone().starting_for(Duration::from_secs(1));
    door.restart_fake("v137", spec).await.unwrap();
    door.wait_table_published(v137("returning", true)).await.unwrap();
    let restarted = format!("{only_v137}?mark=restarted");
    let request = tokio::spawn(timed_get(door.http.clone(), door.url(&restarted)));
    wait_for("the request held", Duration::from_secs(10), || async { (door.envoy_stat(held).await? > held_before).then_some(()) }).await.unwrap();
    let (status, _, body, took) = request.await.unwrap();
    eprintln!("held until v137 was ready and read back: {took:?}");
    assert_eq!((status, served_by(&body)), (200, "v137"), "{body}");
    assert!(took < hold, "answered by the hold's end, not a table: {took:?}");

    let log = |path: String| {
        let file = door.envoy.log.clone();
        move || {
            let text = std::fs::read_to_string(&file).ok()?;
            text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find(|l| l["path"] == path.as_str())
        }
    };
    let first = wait_for("the access log line", Duration::from_secs(10), || std::future::ready(log(format!("{only_v137}?mark=down-0"))())).await.unwrap();
    let second = wait_for("the access log line", Duration::from_secs(10), || std::future::ready(log(restarted.clone())())).await.unwrap();
    assert!(first["held"].is_null() && first["code"] == 503, "not held: {first}");
    assert!(second["held"].as_str().is_some_and(|h| h.ends_with(" routed")) && second["code"] == 200, "{second}");
    assert_eq!(door.envoy_stat(held_then_503).await.unwrap_or(0), 0, "no held request ended in the 503");
    // Each request counted once as routed (the proxy-wasm workers flush
    // theirs each second: waited for), the held one not also when held.
    let counted = wait_for("every request counted", Duration::from_secs(10), || async { door.envoy_stat(rerouted).await.filter(|n| *n >= rerouted_before + 4) }).await.unwrap();
    assert_eq!(counted, rerouted_before + 4, "three answered at once and one held, each counted once");
}

/// A request held for an apiserver that was coming back gets the 503 Status
/// as soon as the apiserver is down again — not at the end of its hold
/// (issue 63 item 1): the table that says so wakes it.
#[tokio::test]
async fn a_held_request_gets_the_503_once_its_apiserver_is_down_again() {
    let hold = Duration::from_secs(20);
    let mut door = FrontDoor::start(&three(), Options { hold_unavailable: Some(hold), ..Options::default() }).await.unwrap();
    let (only_v137, _) = PATHS[0];
    coming_back_for_good(&mut door).await;
    let held = "wasmcustom.mvp.router.held_requests";
    let before = door.envoy_stat(held).await.unwrap_or(0);
    let request = tokio::spawn(timed_get(door.http.clone(), door.url(only_v137)));
    wait_for("the request held", Duration::from_secs(10), || async { (door.envoy_stat(held).await? > before).then_some(()) }).await.unwrap();
    let killed = std::time::Instant::now();
    door.fake_mut("v137").proc.kill();
    let (status, retry_after, body, _) = request.await.unwrap();
    let after_kill = killed.elapsed();
    eprintln!("held, v137 killed: the 503 Status {after_kill:?} later (the hold is {hold:?})");
    assert_eq!((status, body["kind"].as_str(), retry_after.as_deref()), (503, Some("Status"), Some("1")), "{body}");
    // Its next probe (100 ms) and a table: seconds on a loaded machine at most.
    assert!(after_kill < Duration::from_secs(5), "answered {after_kill:?} after the kill, the hold is {hold:?}");
}

/// Restarts v137 never to be ready on its own (`/readyz` fails until told:
/// coming back, as the table says), waiting until Envoy routes by that
/// table.
async fn coming_back_for_good(door: &mut FrontDoor) {
    door.restart_fake_coming_back("v137").await.unwrap();
}

/// A held request ends by its hold's deadline while Envoy's main thread is
/// stalled (issue 47 item 4; ptrace stops that one thread, the workers run
/// on). Before, the native build's held requests were woken at their
/// deadline by the main thread only (and a worker's own sweep, 10 s late,
/// and only when that worker saw another request): this one waited as long
/// as the main thread stalled — past the 10 s the test gives it. Now a
/// thread of the module wakes every held request at its deadline, the main
/// thread only those a new table may serve; the proxy-wasm build's hold is its worker's call and
/// never waited on the main thread.
#[tokio::test]
async fn a_held_request_ends_by_its_deadline_while_envoys_main_thread_is_stalled() {
    use integration::harness::process::StoppedThread;
    let hold = Duration::from_secs(2);
    let mut door = FrontDoor::start(&three(), Options { hold_unavailable: Some(hold), ..Options::default() }).await.unwrap();
    // Coming back, never ready: the request is held, to its deadline.
    coming_back_for_good(&mut door).await;
    let (only_v137, _) = PATHS[0];
    let stalled = StoppedThread::stop(door.envoy.pid()).unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(10), timed_get(door.http.clone(), door.url(only_v137))).await;
    drop(stalled);
    let (status, retry_after, body, took) = answered.expect("the held request not answered within 10 s while Envoy's main thread was stalled");
    eprintln!("held while the main thread was stalled, answered after {took:?}");
    assert_eq!((status, body["kind"].as_str(), retry_after.as_deref()), (503, Some("Status"), Some("1")), "{body}");
    assert!(took >= hold - Duration::from_millis(100) && took < hold + Duration::from_secs(2), "answered after {took:?}, the hold is {hold:?}");
    // The main thread resumed: the door goes on as before.
    let shared = door.http.get(door.url(PATHS[2].0)).send().await.unwrap();
    assert_eq!(shared.status(), 200);
}

/// Status, `Retry-After`, body and time taken of a GET.
async fn timed_get(client: reqwest::Client, url: String) -> (u16, Option<String>, Value, Duration) {
    let started = std::time::Instant::now();
    let resp = client.get(url).send().await.unwrap();
    let retry_after = resp.headers().get("retry-after").map(|v| v.to_str().unwrap_or("").to_string());
    (resp.status().as_u16(), retry_after, resp.json::<Value>().await.unwrap(), started.elapsed())
}

/// A read whose apiserver drops the connection before any response byte
/// (it died with the request in flight), or answers kube's 429 while it
/// shuts down, is answered by another capable apiserver; a write that
/// reached an apiserver is never sent again. Before (issue 33): only
/// failures before the request left were retried, for reads too — the
/// soak counted 8 503s for shared APIs in flight at a SIGKILL.
#[tokio::test]
async fn reads_failed_before_an_answer_go_to_another_server_writes_never_do() {
    let door = FrontDoor::start(&three(), Options::default()).await.unwrap();
    let control = |name: &str, query: &str| format!("{}/__fake/{query}", door.fake(name).url());
    for (name, how) in [("v130", "reset"), ("v133", "shutting-down")] {
        let r = door.http.post(control(name, &format!("fail-next?count=100000&how={how}"))).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    let requests = || async {
        let mut n = 0;
        for name in ["v130", "v133", "v137"] {
            let v: Value = door.http.get(control(name, "stats")).send().await.unwrap().json().await.unwrap();
            n += v["resourceRequests"].as_u64().unwrap();
        }
        n
    };
    // Reads of an API all serve (load-balanced) and of one v133 and v137
    // serve (pinned to both): every one answered by v137.
    for path in [PATHS[3].0, PATHS[2].0] {
        for client in [&door.http, &door.h2c] {
            for _ in 0..15 {
                let (status, v) = door.get_json(client, path).await.unwrap();
                assert_eq!((status, served_by(&v)), (200, "v137"), "{path}: {v}");
            }
        }
    }
    // Writes: each reaches one apiserver exactly once.
    let before = requests().await;
    let mut answers: BTreeMap<u16, u64> = BTreeMap::new();
    for i in 0..30 {
        let body = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("w{i}")}});
        let r = door.http.post(door.url(PATHS[3].0)).json(&body).send().await.unwrap();
        let status = r.status().as_u16();
        *answers.entry(status).or_default() += 1;
        if status != 200 {
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["kind"], "Status", "{status}: {v}");
        }
    }
    let sent = requests().await - before;
    eprintln!("30 writes: answers {answers:?}, requests reaching apiservers {sent}");
    assert_eq!(sent, 30, "a write was sent again: {answers:?}");
    assert!(answers.keys().all(|s| [200, 429, 503].contains(s)), "{answers:?}");
}

/// A stream an apiserver resets is an answer from a live server, not a sign
/// it is gone: kube's request timeout ends an HTTP/2 stream with a reset,
/// and `--goaway-chance` refuses the streams in flight on the connection it
/// closes. Every member resets a few of a burst of concurrent reads; the
/// reads after are all answered. Before, Envoy's outlier detection took a
/// member out of the balancer after two resets in a row — the router feeds
/// it every upstream reset as a connect failure, and a stream's success in
/// between counts only while none is in flight — all of them here, so the
/// next reads got Envoy's `no_healthy_upstream` 503 until a health check
/// brought one back: 48 of 600 requests in the real tier's
/// `goaway_chance_loses_no_request`.
#[tokio::test]
async fn apiservers_that_reset_streams_stay_in_the_balancer() {
    let door = FrontDoor::start(&three(), Options::default()).await.unwrap();
    let control = |name: &str, query: &str| format!("{}/__fake/{query}", door.fake(name).url());
    const RESETS: u64 = 4;
    for name in ["v130", "v133", "v137"] {
        let r = door.http.post(control(name, &format!("fail-next?count={RESETS}&how=reset"))).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    let attempts = || async {
        let mut n = 0;
        for name in ["v130", "v133", "v137"] {
            let v: Value = door.http.get(control(name, "stats")).send().await.unwrap().json().await.unwrap();
            n += v["resourceRequests"].as_u64().unwrap();
        }
        n
    };
    // Served by all (load-balanced). A read whose every attempt was reset
    // gets the 503 Status, honestly; then reads one by one until every
    // reset is spent.
    let path = PATHS[3].0;
    let honest = |status: u16, v: &Value| status == 200 || (status == 503 && v["kind"] == "Status");
    let burst = futures::future::join_all((0..16).map(|_| door.get_json(&door.h2c, path))).await;
    let mut answered = 0;
    for r in burst {
        let (status, v) = r.unwrap();
        assert!(honest(status, &v), "{status}: {v}");
        answered += u64::from(status == 200);
    }
    for _ in 0..10 {
        if attempts().await >= 3 * RESETS + answered {
            break;
        }
        let (status, v) = door.get_json(&door.http, path).await.unwrap();
        assert!(honest(status, &v), "{status}: {v}");
        answered += u64::from(status == 200);
    }
    assert_eq!(attempts().await, 3 * RESETS + answered, "every reset spent");
    let mut statuses = BTreeMap::<u16, u32>::new();
    for client in [&door.http, &door.h2c] {
        for _ in 0..15 {
            let (status, _) = door.get_json(client, path).await.unwrap();
            *statuses.entry(status).or_default() += 1;
        }
    }
    let ejected = door.envoy_stat(&format!("cluster.{}.outlier_detection.ejections_enforced_total", mvp_contract::envoy::APISERVERS_CLUSTER)).await;
    assert_eq!(statuses, [(200, 30)].into(), "after {} resets (members ejected: {ejected:?})", 3 * RESETS);
}

/// A rolling upgrade's moment: one member down (Envoy's health checks mark
/// it unhealthy; it serves nothing these requests need, so it is never
/// listed) and the first listed apiserver dropping every request before an
/// answer: each read goes on to the next listed apiserver, never back to
/// the one that just failed. Before (issue 46), the native build's balancer
/// asked Envoy's previous-hosts predicate with an index into the healthy
/// hosts, which Envoy reads as an index into all of them: with v130 down
/// ahead of the list it asked about v130, chose v133 again for every retry
/// while v137 idled, and the reads ended in a 503.
#[tokio::test]
async fn with_a_member_down_a_read_never_goes_back_to_the_server_that_failed() {
    let mut door = FrontDoor::start(&three(), Options::default()).await.unwrap();
    door.fake_mut("v130").proc.kill();
    door.wait_table_published(|t| t["apiservers"][0]["healthy"] == false).await.unwrap();
    let healthy = format!("cluster.{}.membership_healthy", mvp_contract::envoy::APISERVERS_CLUSTER);
    wait_for("Envoy's health checks to mark v130 unhealthy", Duration::from_secs(30), || async { (door.envoy_stat(&healthy).await? == 2).then_some(()) }).await.unwrap();
    let r = door.http.post(format!("{}/__fake/fail-next?count=100000&how=reset", door.fake("v133").url())).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // Served by v133 and v137: pinned to both, v133 first in turn.
    let (path, by) = PATHS[2];
    assert_eq!(by, ["v133", "v137"]);
    for client in [&door.http, &door.h2c] {
        for _ in 0..12 {
            let (status, v) = door.get_json(client, path).await.unwrap();
            assert_eq!((status, served_by(&v)), (200, "v137"), "{path}: {v}");
        }
    }
    assert_eq!(door.envoy_stat(&healthy).await, Some(2), "v133 stayed healthy to Envoy: the case above was the one meant");
}

/// A read every listed apiserver answers with kube's 429 (each shutting
/// down with `--shutdown-send-retry-after`) gets that 429 Status with its
/// `Retry-After`, after exactly one attempt per listed apiserver — never
/// Envoy's 503 for a retry that found no host left. Before (issue 46), the
/// native build retried as often as the route allowed (3) whatever the list,
/// and the retry past the list ended in `no_healthy_upstream`.
#[tokio::test]
async fn a_read_every_listed_server_refuses_with_429_gets_that_429() {
    let door = FrontDoor::start(&three(), Options::default()).await.unwrap();
    let control = |name: &str, query: &str| format!("{}/__fake/{query}", door.fake(name).url());
    for name in ["v133", "v137"] {
        let r = door.http.post(control(name, "fail-next?count=100000&how=shutting-down")).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    let requests = |name: &'static str| {
        let url = control(name, "stats");
        let http = door.http.clone();
        async move { http.get(url).send().await.unwrap().json::<Value>().await.unwrap()["resourceRequests"].as_u64().unwrap() }
    };
    // Listed: v137 alone; v133 and v137.
    for (path, listed) in [(PATHS[0].0, 1), (PATHS[2].0, 2)] {
        for client in [&door.http, &door.h2c] {
            let before = requests("v133").await + requests("v137").await;
            let r = client.get(door.url(path)).send().await.unwrap();
            let status = r.status().as_u16();
            let retry_after = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
            let v: Value = r.json().await.unwrap();
            assert_eq!((status, v["reason"].as_str(), retry_after.as_deref()), (429, Some("TooManyRequests"), Some("5")), "{path}: {v}");
            assert_eq!(requests("v133").await + requests("v137").await - before, listed, "{path}: one attempt per listed apiserver");
        }
    }
}

/// mvp-ext-proc restarted onto a corrupt state file (a disk error, a
/// person's edit): it starts without it — every apiserver read afresh,
/// every API answering — keeps the bad file aside as `<file>.unusable`
/// rather than overwriting it, and writes a good one again.
#[tokio::test]
async fn a_restart_onto_a_corrupt_state_file_starts_clean_and_keeps_the_file() {
    let mut door = FrontDoor::start(&three(), Options::default()).await.unwrap();
    let state_file = door.dir.path().join("mvp-ext-proc-state.json");
    wait_for("the state file", Duration::from_secs(10), || {
        let written = state_file.exists();
        async move { written.then_some(()) }
    })
    .await
    .unwrap();
    door.ext_proc.kill();
    std::fs::write(&state_file, b"{\"apiservers\": {\"v130\": tru").unwrap();
    door.restart_ext_proc().await.unwrap();
    let all_open = |t: &Value| t["apiservers"].as_array().is_some_and(|a| a.len() == 3 && a.iter().all(|s| s["open"] == true));
    door.wait_table_published(all_open).await.unwrap();
    for (path, by) in PATHS {
        let (status, v) = door.get_json(&door.http, path).await.unwrap();
        assert!(status == 200 && by.contains(&served_by(&v)), "{path}: {status} {v}");
    }
    let aside = door.dir.path().join("mvp-ext-proc-state.json.unusable");
    assert_eq!(std::fs::read(&aside).unwrap(), b"{\"apiservers\": {\"v130\": tru", "the bad file kept aside");
    wait_for("a good state file again", Duration::from_secs(10), || {
        let good = std::fs::read_to_string(&state_file).is_ok_and(|s| s.contains("\"format\":1") && s.contains("v137"));
        async move { good.then_some(()) }
    })
    .await
    .unwrap();
    let log = std::fs::read_to_string(&door.ext_proc.log).unwrap();
    assert!(log.contains("not a state file") && log.contains(".unusable"), "{log}");
}

/// The requests the fakes received, in all: `field` of their stats.
async fn received(door: &FrontDoor, field: &str) -> u64 {
    let mut n = 0;
    for f in &door.fakes {
        n += f.stats(&door.http).await.and_then(|v| v[field].as_u64()).unwrap_or(0);
    }
    n
}

/// Requests sent to an apiserver that then hangs (SIGSTOP: connections
/// accepted, nothing answered, no HTTP/2 PING answered). A read of an API
/// others serve too is tried on another once the hung one's connection
/// missed its PINGs for `serve --apiserver-ping-timeout` (1 s here; 5 s by
/// default; issue 55 item 6) and answered; a read only the hung one serves
/// ends with a 503 or 504 Status; nothing waits past `--request-timeout`
/// (3 s here; 70 s by default). Before issue 47, Envoy's route timeout was
/// off: each waited until the apiserver resumed, or forever; from issue 47
/// to 55 a per-read idle timeout moved them (20 s by default) — and moved
/// slow reads of healthy servers too (below). A watch of a healthy server
/// streams on untouched.
#[tokio::test]
async fn reads_sent_to_a_hung_apiserver_go_elsewhere_or_end_and_a_watch_streams_on() {
    let options = Options {
        hold_unavailable: Some(Duration::ZERO),
        ext_proc_args: vec!["--apiserver-ping-timeout".into(), "1s".into()],
        envoy_config_args: vec!["--request-timeout".into(), "3s".into()],
        ..Options::default()
    };
    let door = FrontDoor::start(&three(), options).await.unwrap();
    // A watch of an API every server serves, streaming bookmarks for ~4 s.
    let mut watch = door.http.get(door.url("/api/v1/namespaces/default/pods?watch=1&bookmarks=40")).send().await.unwrap();
    assert_eq!(watch.status(), 200);
    let watched_by = watch.headers().get("x-fake-apiserver").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let watched = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let mut events = 0;
        while let Ok(Some(_)) = watch.chunk().await {
            events += 1;
        }
        (events, started.elapsed())
    });
    // The hung server is one the watch is not on.
    let hung = ["v137", "v133", "v130"].into_iter().find(|n| *n != watched_by).unwrap();
    let only_hung = match hung {
        "v137" => "/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests",
        "v133" => "/apis/networking.k8s.io/v1beta1/servicecidrs",
        _ => "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas",
    };
    let before = received(&door, "resourceRequests").await;
    door.fake(hung).proc.signal("STOP");
    let sent = std::time::Instant::now();
    let get = |path: &'static str| {
        let (http, url) = (door.http.clone(), door.url(path));
        tokio::spawn(async move {
            let resp = http.get(url).timeout(Duration::from_secs(15)).send().await;
            let waited = sent.elapsed();
            match resp {
                Ok(r) => (r.status().as_u16(), r.json::<Value>().await.unwrap_or(Value::Null), waited),
                Err(e) => (0, Value::String(e.to_string()), waited),
            }
        })
    };
    // At once requests go out: six reads of an API all serve (round robin
    // sends some to the hung one), one only it serves.
    let shared: Vec<_> = (0..6).map(|_| get("/api/v1/namespaces/default/configmaps")).collect();
    let own = get(only_hung);
    let shared = futures::future::join_all(shared).await;
    let (status, body, waited) = own.await.unwrap();
    let sent_to = received(&door, "resourceRequests").await - before;
    door.fake(hung).proc.signal("CONT");
    for r in &shared {
        let (status, body, waited) = r.as_ref().unwrap();
        assert!(*status == 200 && *waited < Duration::from_millis(3500), "a shared read: {status} after {waited:?}: {body}");
    }
    assert!(matches!(status, 503 | 504) && body["kind"] == "Status", "{hung}'s own API: {status} {body}");
    assert!(waited < Duration::from_millis(3500), "the hung server's API answered after {waited:?}");
    let (events, lasted) = watched.await.unwrap();
    assert!(lasted > Duration::from_secs(3) && events >= 30, "the watch ended after {lasted:?} and {events} events");
    let slowest = shared.iter().map(|r| r.as_ref().unwrap().2).max().unwrap();
    eprintln!("hung apiserver ({hung}): 6 shared reads all 200 (slowest {slowest:?}); its own API: {status} Status after {waited:?}; the healthy fakes received {sent_to} of the 7 requests and their retries; a watch beside it streamed {events} events over {lasted:?}");
}

/// What a slow but healthy apiserver gets (issue 55 item 6), with the
/// idle bound the merged documents keep set to 1 s (`--read-idle-timeout`,
/// 20 s by default) and the request timeout to 3 s. Before, the idle bound
/// applied to every read that was not long-running: (a) a LIST whose first
/// byte took longer (a consistent LIST from a slow etcd, a big cluster,
/// priority-and-fairness queueing) was re-sent to up to 3 more apiservers —
/// multiplying etcd's load when etcd was slowest — then a 504; (b) Envoy's
/// idle timer counts only upstream data, so a client that stopped reading a
/// LIST for longer had it reset mid-body; (c) a CPU profile
/// (`/debug/pprof/profile`, long-running in kube) was re-sent and cut at the
/// request timeout. Now each is sent once and answered whole.
#[tokio::test]
async fn a_slow_healthy_apiserver_gets_each_read_once_and_answers_it() {
    let options = Options { envoy_config_args: vec!["--request-timeout".into(), "3s".into(), "--read-idle-timeout".into(), "1s".into()], ..Options::default() };
    let door = FrontDoor::start(&three(), options).await.unwrap();
    // (a) A LIST answered after 2.5 s.
    let before = received(&door, "resourceRequests").await;
    let started = std::time::Instant::now();
    let resp = door.http.get(door.url("/api/v1/namespaces/default/configmaps?delay_ms=2500")).send().await.unwrap();
    let (slow_status, slow_took) = (resp.status().as_u16(), started.elapsed());
    let slow_sent = received(&door, "resourceRequests").await - before;
    // (b) A 32 MiB LIST whose client stops reading for 2.5 s after its
    // first bytes (the client's pause is the test, not a wait for anything).
    let before = received(&door, "resourceRequests").await;
    let mut resp = door.http.get(door.url("/api/v1/namespaces/default/configmaps?items_bytes=33554432")).timeout(Duration::from_secs(60)).send().await.unwrap();
    let mut got = resp.chunk().await.ok().flatten().map_or(0, |c| c.len());
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let mut cut = None;
    loop {
        match resp.chunk().await {
            Ok(Some(c)) => got += c.len(),
            Ok(None) => break,
            Err(e) => {
                cut = Some(e.to_string());
                break;
            }
        }
    }
    let big_sent = received(&door, "resourceRequests").await - before;
    // (c) A 4 s CPU profile.
    let before = received(&door, "profileRequests").await;
    let started = std::time::Instant::now();
    let resp = door.http.get(door.url("/debug/pprof/profile?seconds=4")).send().await.unwrap();
    let (profile_status, profile_took) = (resp.status().as_u16(), started.elapsed());
    let profile_body = resp.text().await.unwrap_or_default();
    let profile_sent = received(&door, "profileRequests").await - before;
    eprintln!(
        "slow healthy apiserver: a LIST answered after 2.5 s — {slow_status} after {slow_took:?}, sent {slow_sent} time(s); a 32 MiB LIST read with a 2.5 s pause — {got} bytes, cut: {cut:?}, sent {big_sent} time(s); a 4 s profile — {profile_status} after {profile_took:?}, sent {profile_sent} time(s)"
    );
    assert_eq!((slow_status, slow_sent), (200, 1), "the slow LIST");
    assert!(cut.is_none() && got > 32_000_000, "the paused LIST: {got} bytes, {cut:?}");
    assert_eq!(big_sent, 1);
    assert_eq!((profile_status, profile_sent), (200, 1), "the profile: {profile_body}");
    assert!(profile_body.starts_with("profile of "), "{profile_body}");
}
