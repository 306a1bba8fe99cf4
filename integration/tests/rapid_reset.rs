//! The adversarial suite's rapid reset (issue 47, RELIABILITY.md
//! "Security"): a binary of its own because it measures legitimate
//! latency, which other tests running beside it would disturb.
//!
//! The door's Envoy runs on a core of its own (one worker), the attacker,
//! the legitimate client, the fakes and mvp-ext-proc on the other — as in a
//! cluster, where the attacker spends its own machine's CPU and the
//! apiservers have theirs. Sharing two cores, the kernel's time slices
//! between a busy Envoy and a fake apiserver were most of what a legitimate
//! request waited for (p99 2.2–2.9× unloaded: `MVP_FLOOD_SHARED_CORES=1`
//! runs it that way).

use std::time::{Duration, Instant};

use integration::harness::process::{allowed_cpus, pin_process, pin_this_thread};
use integration::harness::{FrontDoor, Options, three_fakes};

/// One attacker's HTTP/2 rapid reset (CVE-2023-44487) aimed at the hold: on
/// a few connections, as fast as it can, HEADERS for an API only a stopped
/// apiserver serves (the filter holds it, or answers the 503) and at once
/// RST_STREAM, over and over, reconnecting when Envoy closes a connection.
/// Before, one connection's burst was worked through in one turn of the
/// worker's event loop: the flood kept its connections (its requests were
/// answered before their resets, so Envoy's premature-reset check never
/// fired on the wasm build) and a legitimate client's p99 went from a few
/// ms to 0.6–1.5 s. Now (`http.max_requests_per_io_cycle: 1`, edge.rs)
/// Envoy closes every flood connection (premature resets), the main thread
/// keeps up (no watchdog miss; health checks on their interval: the native
/// build's holds post to it), and every legitimate request is answered.
#[tokio::test]
async fn a_rapid_reset_flood_is_cut_off_and_the_others_are_served() {
    const ONLY_V137: &str = "/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests";
    // Two of the cores this test may use: Envoy's, and the others'.
    let cores = match allowed_cpus().as_slice() {
        [others, envoy, ..] if std::env::var_os("MVP_FLOOD_SHARED_CORES").is_none() => Some((*others, *envoy)),
        _ => None,
    };
    let apart = cores.is_some();
    if let Some((others, _)) = cores {
        // This test's thread runs the legitimate client and spawns the
        // attacker, the fakes and mvp-ext-proc: they inherit its core.
        pin_this_thread(others).unwrap();
    }
    let concurrency = if apart { 1 } else { 2 };
    let mut options = Options { hold_unavailable: Some(Duration::from_secs(5)), concurrency, ..Options::default() };
    if std::env::var_os("MVP_FLOOD_NO_CYCLE_BOUND").is_some() {
        // Before the fix, to see this test fail: Envoy takes a connection's
        // whole burst in one turn of its event loop again.
        options.edit_config = Some(|y| y.replace("http.max_requests_per_io_cycle: 1", "http.max_requests_per_io_cycle: 100000"));
    }
    let mut door = FrontDoor::start(&three_fakes(), options).await.unwrap();
    if let Some((_, envoy)) = cores {
        pin_process(door.envoy.pid(), &envoy.to_string()).unwrap();
    }
    // Restarting: listening, not ready yet — what the filter holds for.
    door.restart_fake_coming_back("v137").await.unwrap();

    // A legitimate client's reads of a shared API, one every 10 ms.
    let legit = |secs: u64| {
        let (http, url) = (door.http.clone(), door.url("/api/v1/namespaces/default/pods"));
        async move {
            let (start, mut got) = (Instant::now(), Vec::new());
            while start.elapsed() < Duration::from_secs(secs) {
                let t = Instant::now();
                let status = http.get(&url).send().await.map(|r| r.status().as_u16()).unwrap_or(0);
                got.push((t.elapsed().as_secs_f64() * 1e3, status));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            got
        }
    };
    let quantiles = |got: &[(f64, u16)]| {
        let mut ms: Vec<f64> = got.iter().map(|g| g.0).collect();
        ms.sort_by(f64::total_cmp);
        (ms[ms.len() / 2], ms[ms.len() * 99 / 100])
    };
    let unloaded = legit(4).await;

    let stats = [
        "server.main_thread.watchdog_miss",
        "server.main_thread.watchdog_mega_miss",
        "cluster.apiservers.health_check.attempt",
        "http.apiserver_front_door.downstream_rq_too_many_premature_resets",
        "http.apiserver_front_door.downstream_rq_5xx",
        "http.apiserver_front_door.downstream_rq_rx_reset",
    ];
    let read = || async {
        let mut v = Vec::new();
        for s in stats {
            v.push(door.envoy_stat(s).await.unwrap_or(0));
        }
        v
    };
    let before = read().await;
    let (port, flood_secs) = (door.listen_port, 4);
    let until = Instant::now() + Duration::from_secs(flood_secs);
    // The attacker on a runtime and thread of its own: its busy loop must
    // not delay the legitimate client's own runtime.
    let flood = std::thread::spawn(move || {
        // At idle priority: its loop gets what the legitimate client and
        // the fakes leave of their core (the streams it opened are
        // reported), never a slice from them.
        let idle = libc::sched_param { sched_priority: 0 };
        // SAFETY: the calling thread (0), a valid parameter for SCHED_IDLE.
        let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &idle) };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let conns: Vec<_> = (0..4).map(|_| tokio::spawn(rapid_reset(port, ONLY_V137, until))).collect();
            futures::future::join_all(conns).await.into_iter().map(|r| r.unwrap_or(0)).sum::<u64>()
        })
    });
    let during = legit(flood_secs).await;
    let streams = flood.join().unwrap();
    let after = read().await;
    let delta: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let ((p50u, p99u), (p50f, p99f)) = (quantiles(&unloaded), quantiles(&during));
    eprintln!(
        "rapid reset ({}): {streams} streams; flood connections closed by Envoy {}; legit p50/p99 unloaded {p50u:.1}/{p99u:.1} ms, under the flood {p50f:.1}/{p99f:.1} ms ({} requests; {:.2}×/{:.2}×); watchdog misses {}+{}; health checks {}; answered 5xx {}, reset by the client {}",
        if apart { "Envoy on a core of its own" } else { "all on the same cores" },
        delta[3],
        during.len(),
        p50f / p50u,
        p99f / p99u,
        delta[0],
        delta[1],
        delta[2],
        delta[4],
        delta[5]
    );
    assert!(during.iter().all(|g| g.1 == 200), "legitimate requests not answered 200: {:?}", during.iter().filter(|g| g.1 != 200).collect::<Vec<_>>());
    assert_eq!((delta[0], delta[1]), (0, 0), "Envoy's main thread missed its watchdog");
    // 3 members checked every second (unhealthy v137 too).
    assert!(delta[2] >= 3 * (flood_secs - 1), "health checks fell behind: {} in {flood_secs} s", delta[2]);
    assert!(delta[3] >= 1, "no flood connection was closed for its premature resets");
    // Latency is reported, not asserted: issue 47's goal (p99 within 2×
    // of the unloaded run) is met with Envoy on a core of its own — p99
    // 0.8–1.3× (native), 0.7–2.1× (wasm), RELIABILITY.md — but on a machine
    // that is busy besides, the two windows' p99 differ by what else ran
    // (a build beside it: 15.7 ms unloaded, 40 ms under a flood of only
    // 4,834 streams). What fails first without the fix is asserted above:
    // without the bound on requests per turn (`MVP_FLOOD_NO_CYCLE_BOUND=1`)
    // the wasm build answers the flood before its resets and Envoy closes
    // none of its connections (p99 3.5–35× then).
}

/// Streams opened and at once reset on one connection after another until
/// `until`; the number opened.
async fn rapid_reset(port: u16, path: &'static str, until: Instant) -> u64 {
    let mut streams = 0;
    while Instant::now() < until {
        let Ok(tcp) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else { continue };
        let Ok((mut client, conn)) = h2::client::handshake(tcp).await else { continue };
        let driver = tokio::spawn(conn);
        while Instant::now() < until {
            let req = hyper::Request::builder().uri(format!("http://127.0.0.1:{port}{path}")).body(()).unwrap();
            let Ok(ready) = client.clone().ready().await else { break };
            client = ready;
            let Ok((response, mut send)) = client.send_request(req, false) else { break };
            send.send_reset(h2::Reason::CANCEL);
            drop(response);
            streams += 1;
            tokio::task::yield_now().await;
        }
        driver.abort();
    }
    streams
}
