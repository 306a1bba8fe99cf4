//! Holding only when a wait can help, on REAL kube-apiservers (issue 63
//! item 1). kas-b alone serves `coordination.k8s.io/v1beta1`; a client
//! sends one request after another for it through the door.
//! - kas-b down (stopped, its port refusing connections): every request
//!   gets the 503 Status with `Retry-After` at once — before, each waited
//!   the whole hold (`--hold-unavailable`), so such a client made one
//!   request a second.
//! - kas-b started again: from the moment it listens its `/readyz` fails
//!   for a while (its post-start hooks); the door holds requests for it
//!   then, and every request sent once kas-b is ready is served — 0 × 503
//!   while a capable server is ready.
//!
//! It measures, and prints, a real v1.37 server's restart: started →
//! listening → `/readyz` 200 → routed by the door (the first 200 through
//! it), and what `/readyz` says while it drains and while it starts (how
//! mvp-ext-proc tells a draining server from a starting one).

use std::time::{Duration, Instant};

use integration::harness::real::{RealControlPlane, Release, Spec};
use integration::harness::wait_for;
use serde_json::Value;

const ONLY_B: &str = "/apis/coordination.k8s.io/v1beta1/namespaces/default/leasecandidates";

/// One request of the looping client: when it was sent, how long it took,
/// its status and whether it is kube's Status with `Retry-After`.
#[derive(Debug, Clone, Copy)]
struct Sent {
    at: Instant,
    took: Duration,
    status: u16,
    status_retry: bool,
}

/// Sends one request after another until `stop`, as a controller's loop
/// does (no pause: a 503 is retried at once, so a held request shows).
fn looping(client: reqwest::Client, url: String, stop: tokio::sync::watch::Receiver<bool>) -> tokio::task::JoinHandle<Vec<Sent>> {
    tokio::spawn(async move {
        let mut sent = Vec::new();
        while !*stop.borrow() {
            let at = Instant::now();
            let (status, status_retry) = match client.get(&url).timeout(Duration::from_secs(30)).send().await {
                Ok(r) => {
                    let status = r.status().as_u16();
                    let retry = r.headers().contains_key("retry-after");
                    let body: Value = r.json().await.unwrap_or_default();
                    (status, retry && body["kind"] == "Status")
                }
                Err(_) => (0, false),
            };
            sent.push(Sent { at, took: at.elapsed(), status, status_retry });
        }
        sent
    })
}

/// What mvp-ext-proc's table says of `name` whenever it changes (seconds
/// since `t0`: open, returning, draining, its last error), until `stop`.
fn member_timeline(door: &integration::harness::FrontDoor, name: &'static str, t0: Instant, stop: tokio::sync::watch::Receiver<bool>) -> tokio::task::JoinHandle<Vec<(f64, String)>> {
    let (topology, http) = (door.topology.clone(), door.http.clone());
    tokio::spawn(async move {
        let mut seen: Vec<(f64, String)> = Vec::new();
        while !*stop.borrow() {
            if let Some(t) = topology.table(&http).await
                && let Some(m) = t["apiservers"].as_array().and_then(|a| a.iter().find(|s| s["name"] == name))
            {
                let now = format!("open={} returning={} draining={} lastError={}", m["open"], m["returning"], m["draining"], m["lastError"]);
                if seen.last().is_none_or(|(_, last)| *last != now) {
                    seen.push((t0.elapsed().as_secs_f64(), now));
                }
            }
            // A sampling period, not a wait for anything.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        seen
    })
}

fn member(name: &'static str, key: &'static str, want: bool) -> impl Fn(&Value) -> bool {
    move |t: &Value| t["apiservers"].as_array().is_some_and(|a| a.iter().any(|s| s["name"] == name && s[key] == want))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarting_real_apiserver_is_waited_for_and_a_down_one_is_not() {
    let specs = [
        Spec::new("kas-a", Release::minor(37), &[]),
        Spec::new("kas-b", Release::minor(37), &["--runtime-config=coordination.k8s.io/v1beta1=true", "--shutdown-delay-duration=2s"]),
    ];
    let mut cp = RealControlPlane::start_specs(&specs).await.unwrap();
    let door = cp.front_door().await.unwrap();
    let client = door.https(Some(&cp.admin), true).unwrap();
    let url = door.url(ONLY_B);
    assert_eq!(client.get(&url).send().await.unwrap().status(), 200);
    let held_stat = "wasmcustom.mvp.router.held_requests";
    let readyz = format!("{}/readyz", cp.apiservers[1].url());

    // Drains: what its /readyz says (mvp-ext-proc's draining sign).
    cp.signal_apiserver(1, "TERM");
    let draining = wait_for("kas-b's /readyz to fail", Duration::from_secs(10), || async {
        let r = cp.http.get(&readyz).send().await.ok()?;
        (!r.status().is_success()).then_some(())?;
        r.text().await.ok()
    })
    .await
    .unwrap();
    eprintln!("draining kas-b's /readyz:\n{draining}");
    let exited = Instant::now();
    wait_for("kas-b to exit", Duration::from_secs(60), || std::future::ready((!cp.apiserver_running(1)).then_some(()))).await.unwrap();
    eprintln!("kas-b exited {:.2} s after its /readyz failed", exited.elapsed().as_secs_f64());
    door.wait_table_published(member("kas-b", "returning", false)).await.unwrap();
    door.wait_table_published(member("kas-b", "open", false)).await.unwrap();

    // Down: the 503 Status at once, nothing held.
    let held_before = door.envoy_stat(held_stat).await.expect("the held counter");
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let down_loop = looping(client.clone(), url.clone(), stopped);
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.send_replace(true);
    let down = down_loop.await.unwrap();
    let slowest = down.iter().map(|s| s.took).max().unwrap_or_default();
    eprintln!("kas-b down: {} requests in 3 s, slowest {:.1} ms", down.len(), slowest.as_secs_f64() * 1e3);
    assert!(down.iter().all(|s| s.status == 503 && s.status_retry), "every answer the 503 Status with Retry-After: {down:?}");
    assert!(slowest < Duration::from_millis(500), "answered at once, not held: slowest {slowest:?}");
    assert!(down.len() >= 30, "{} requests in 3 s: held?", down.len());
    assert_eq!(door.envoy_stat(held_stat).await.expect("the held counter"), held_before, "nothing held while kas-b is down");

    // Started again, a client looping over the start.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let timeline = member_timeline(&door, "kas-b", Instant::now(), stopped.clone());
    let start_loop = looping(client.clone(), url.clone(), stopped);
    let address = format!("{}:{}", cp.apiservers[1].ip, cp.apiservers[1].port);
    let http = cp.http.clone();
    let probe = tokio::spawn({
        let readyz = readyz.clone();
        async move {
            let began = Instant::now();
            let listening = loop {
                if tokio::net::TcpStream::connect(&address).await.is_ok() {
                    break began.elapsed();
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            let mut first_failure = None;
            let ready = loop {
                match http.get(&readyz).send().await {
                    Ok(r) if r.status().is_success() => break began.elapsed(),
                    Ok(r) if first_failure.is_none() => first_failure = Some((r.status().as_u16(), r.text().await.unwrap_or_default())),
                    _ => {}
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            (began, listening, ready, first_failure)
        }
    });
    cp.start_apiserver(1).await.unwrap();
    let (began, listening, ready, first_failure) = probe.await.unwrap();
    door.wait_table_published(member("kas-b", "open", true)).await.unwrap();
    // Requests after it opened, then stop.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.send_replace(true);
    let start = start_loop.await.unwrap();
    let ready_at = began + ready;
    let routed = start.iter().find(|s| s.status == 200 && s.at + s.took > began + listening).map(|s| (s.at + s.took).duration_since(began));
    let (status, body) = first_failure.unwrap_or_default();
    eprintln!("starting kas-b's /readyz ({status}):\n{body}");
    eprintln!(
        "kas-b restart: listening {:.3} s after its start, /readyz 200 at {:.3} s, the first request through the door answered by it at {:.3} s; listening → ready {:.3} s, ready → routed {:.3} s",
        listening.as_secs_f64(),
        ready.as_secs_f64(),
        routed.map_or(f64::NAN, |r| r.as_secs_f64()),
        (ready - listening).as_secs_f64(),
        routed.map_or(f64::NAN, |r| (r.saturating_sub(ready)).as_secs_f64()),
    );
    let held = door.envoy_stat(held_stat).await.expect("the held counter") - held_before;
    let capable_503: Vec<&Sent> = start.iter().filter(|s| s.at >= ready_at && s.status != 200).collect();
    let by_status = start.iter().fold(std::collections::BTreeMap::<u16, usize>::new(), |mut m, s| {
        *m.entry(s.status).or_default() += 1;
        m
    });
    eprintln!("over the start: {} requests {by_status:?}, {held} held", start.len());
    let timeline = timeline.await.unwrap();
    for (at, what) in &timeline {
        eprintln!("  mvp-ext-proc's kas-b at {at:.3} s: {what}");
    }
    assert!(timeline.iter().any(|(_, w)| w.contains("returning=true")), "never seen coming back: {timeline:?}");
    eprintln!("{}", door.ext_proc.log_tail(40));
    assert!(capable_503.is_empty(), "answered other than 200 though sent once kas-b was ready: {capable_503:?}");
    assert!(start.iter().all(|s| s.status == 200 || (s.status == 503 && s.status_retry)), "only 200 or the 503 Status: {by_status:?}");
    assert!(held > 0, "nothing held while kas-b started (listening, not ready)");
}
