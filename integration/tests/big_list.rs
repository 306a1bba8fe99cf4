//! A LIST of a gigabyte through the front door (issue 48): the biggest
//! answers a large cluster gives (every pod, every event) stream through
//! Envoy, which holds no more than its buffer limits of them — whether the
//! client reads as fast as it can or stops reading for a while. Reported:
//! throughput, and Envoy's RSS growth at its peak. `MVP_BIG_LIST_MIB` sets
//! the size (default 1024).

use std::time::{Duration, Instant};

use integration::harness::process::rss_kib;
use integration::harness::{FrontDoor, Options, three_fakes};

const MIB: u64 = 1 << 20;

/// Samples a process's RSS every 20 ms until dropped; the highest seen.
struct PeakRss {
    peak: std::sync::Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl PeakRss {
    fn watch(pid: u32) -> PeakRss {
        let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(rss_kib(pid)));
        let p = peak.clone();
        let task = tokio::spawn(async move {
            loop {
                p.fetch_max(rss_kib(pid), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        PeakRss { peak, task }
    }

    fn peak_kib(&self) -> u64 {
        self.peak.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for PeakRss {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads a response to its end; its size, and whether it is one JSON list
/// (the first and last bytes: parsing a gigabyte would measure the test).
async fn read_all(resp: reqwest::Response) -> (u64, bool) {
    read_rest(resp, None).await
}

/// The same for a response whose first byte was `first` (read already).
async fn read_rest(mut resp: reqwest::Response, mut first: Option<u8>) -> (u64, bool) {
    let (mut n, mut last) = (0u64, Vec::new());
    while let Some(chunk) = resp.chunk().await.unwrap() {
        first = first.or(chunk.first().copied());
        n += chunk.len() as u64;
        last = [last.as_slice(), &chunk].concat();
        let keep = last.len().saturating_sub(2);
        last.drain(..keep);
    }
    (n, first == Some(b'{') && last == b"]}")
}

#[tokio::test]
async fn a_gigabyte_list_streams_through_in_bounded_memory() {
    let mib = std::env::var("MVP_BIG_LIST_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(1024u64);
    let door = FrontDoor::start(&three_fakes(), Options::default()).await.unwrap();
    let pid = door.envoy.pid();
    let path = format!("/api/v1/namespaces/default/pods?items_bytes={}", mib * MIB);
    let client = reqwest::Client::builder().no_proxy().build().unwrap();

    // Directly from an apiserver, over HTTP/1.1 and over HTTP/2 (what the
    // door's upstream speaks): the anchor for the door's throughput.
    let direct = |client: reqwest::Client| {
        let url = format!("{}{path}", door.fakes[0].url());
        async move {
            let start = Instant::now();
            let (bytes, whole) = read_all(client.get(url).send().await.unwrap()).await;
            assert!(whole, "{bytes} bytes directly");
            bytes as f64 / MIB as f64 / start.elapsed().as_secs_f64()
        }
    };
    let direct_h1 = direct(client.clone()).await;
    let direct_h2 = direct(reqwest::Client::builder().no_proxy().http2_prior_knowledge().build().unwrap()).await;

    // Through the other doors of the same bootstrap: a plain L7
    // round-robin Envoy (without the routing filter or ext_proc) and a TCP
    // proxy: MiB/s and Envoy's RSS growth at its peak.
    let other = async |edit: fn(String) -> String| {
        let (envoy, topology) = door.another_envoy_with(edit).await.unwrap();
        let url = format!("http://127.0.0.1:{}{path}", topology.ports.listen);
        let (before, peak) = (rss_kib(envoy.pid()), PeakRss::watch(envoy.pid()));
        let start = Instant::now();
        let (bytes, whole) = read_all(client.get(&url).send().await.unwrap()).await;
        let rate = bytes as f64 / MIB as f64 / start.elapsed().as_secs_f64();
        assert!(whole, "{bytes} bytes through {url}");
        (rate, peak.peak_kib().saturating_sub(before) / 1024)
    };
    let (plain_rate, plain_growth) = other(integration::harness::plain_round_robin).await;
    let (tcp_rate, tcp_growth) = other(integration::harness::tcp_proxy).await;

    // As fast as the client reads.
    let before = rss_kib(pid);
    assert!(before > 0, "Envoy's RSS is read");
    let peak = PeakRss::watch(pid);
    let start = Instant::now();
    let resp = client.get(door.url(&path)).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let (bytes, whole) = read_all(resp).await;
    let seconds = start.elapsed().as_secs_f64();
    let fast_growth = peak.peak_kib().saturating_sub(before) / 1024;
    drop(peak);
    assert!(whole && bytes >= mib * MIB - 64 * 1024, "{bytes} bytes, whole: {whole}");

    // A client that stops reading after its first MiB, for two seconds (a
    // measured window): Envoy stops reading the apiserver instead of
    // holding what the client does not take.
    let before_stall = rss_kib(pid);
    let peak = PeakRss::watch(pid);
    let mut resp = client.get(door.url(&path)).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let (mut read, mut first) = (0u64, None);
    while read < MIB {
        let chunk = resp.chunk().await.unwrap().unwrap_or_default();
        first = first.or(chunk.first().copied());
        read += chunk.len() as u64;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stall_growth = peak.peak_kib().saturating_sub(before_stall) / 1024;
    let (rest, whole) = read_rest(resp, first).await;
    let slow_growth = peak.peak_kib().saturating_sub(before_stall) / 1024;
    assert!(whole && read + rest >= mib * MIB - 64 * 1024, "{} bytes, whole: {whole}", read + rest);

    eprintln!(
        "big list: {mib} MiB directly {direct_h1:.0} MiB/s (HTTP/1.1), {direct_h2:.0} MiB/s (HTTP/2); plain L7 Envoy {plain_rate:.0} MiB/s, RSS growth at its peak {plain_growth} MiB; TCP proxy {tcp_rate:.0} MiB/s, {tcp_growth} MiB; front door ({:?}, RSS {} MiB before) {seconds:.1} s ({:.0} MiB/s), RSS growth at its peak: {fast_growth} MiB read at once, {stall_growth} MiB while the client stopped reading for 2 s, {slow_growth} MiB for that whole read",
        integration::harness::FilterBuild::from_env(),
        before / 1024,
        mib as f64 / seconds
    );
    // Issue 48's bound for a 1 GiB LIST.
    assert!(fast_growth <= 64 && slow_growth <= 64, "Envoy grew {fast_growth} / {slow_growth} MiB");
    assert!(stall_growth <= 16, "Envoy held {stall_growth} MiB of a response its client did not read");
}
