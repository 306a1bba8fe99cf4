//! A real rolling upgrade, side by side with kube's own Mixed Version Proxy.
//!
//! Three real kube-apiservers (the v1.37.2 binary as 1.35, then 1.36, then
//! 1.37 by `--emulated-version`) are upgraded one at a time the kubeadm way:
//! SIGTERM, `--shutdown-delay-duration` (`/readyz` fails, requests still
//! served), exit, the next release started on the same host name and
//! address. Clients loop over an API every release serves and APIs only 1.37
//! serves, through two front doors on the same servers — mvp-envoy and a
//! plain round-robin Envoy — twice: with kube's MVP off (what a load
//! balancer gave before 1.36) and on (what upgrading alone gives from 1.36).
//! Answers are judged as `RELIABILITY.md` does, against a timeline of which
//! process ran which release at every moment; 1 Hz samplers per front door
//! (new and reused connections, HTTP/2 and HTTP/1.1) count disruption
//! seconds the way OpenShift's upgrade tests do: seconds with any failed
//! sample.
//!
//! `MVP_UPGRADE_REPORT=FILE` appends the side-by-side table (markdown).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use integration::harness::real::{RealControlPlane, Release, Spec, TOKENS};
use integration::harness::{FrontDoor, plain_round_robin};
use integration::soak::timeline::{State, Timeline};
use serde_json::Value;

const DISCOVERY: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";

/// What the clients ask for: one list every release serves, three lists
/// only 1.37 serves by default (who serves what is read from each release's
/// own discovery as it comes up), and the aggregated `/apis`.
const PATHS: [&str; 5] = [
    "/api/v1/configmaps",
    "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
    "/apis/certificates.k8s.io/v1/clustertrustbundles",
    "/apis/storagemigration.k8s.io/v1/storageversionmigrations",
    "/apis",
];
/// What the samplers ask for.
const SAMPLED: &str = "/api/v1/configmaps";

const NAMES: [&str; 3] = ["kas-a", "kas-b", "kas-c"];
/// Requests per front door after each step before the next.
const SETTLE: usize = 120;

fn args(release: &str) -> Vec<String> {
    let mut args = vec!["--shutdown-delay-duration=3s".to_string(), "--shutdown-send-retry-after=true".to_string()];
    if release != "1.37" {
        args.push(format!("--emulated-version={release}"));
    }
    args
}

/// One answer, judged at the end (when every release's API set is known).
struct Record {
    door: usize,
    path: &'static str,
    states: Vec<State>,
    status: Option<u16>,
    body: Value,
}

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    records: Mutex<Vec<Record>>,
    /// (door, second of the run, ok) of the 1 Hz samplers.
    samples: Mutex<Vec<(usize, u64, bool)>>,
    timeline: Timeline,
}

impl Shared {
    fn count(&self, door: usize) -> usize {
        self.records.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|r| r.door == door).count()
    }
}

async fn get(c: &reqwest::Client, base: &str, path: &str) -> (Option<u16>, Value) {
    let (url, accept) = if path == "/apis" { (format!("{base}{path}"), DISCOVERY) } else { (format!("{base}{path}?limit=1"), "application/json") };
    match c.get(url).header("accept", accept).bearer_auth(TOKENS[0].0).send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            let body = r.bytes().await.ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or(Value::Null);
            (Some(status), body)
        }
        Err(_) => (None, Value::Null),
    }
}

/// Two clients (HTTP/2 and HTTP/1.1, each one reused connection) looping
/// over [`PATHS`], and four 1 Hz samplers (new and reused connections, both
/// protocols).
fn start_load(shared: &Arc<Shared>, door_index: usize, door: &FrontDoor, base: &str, t0: Instant) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = vec![];
    for http2 in [true, false] {
        let (looping, url, c) = (shared.clone(), base.to_string(), door.https(None, http2).unwrap());
        tasks.push(tokio::spawn(async move {
            let (shared, base) = (looping, url);
            let mut i = usize::from(http2) * 2;
            while !shared.stop.load(Ordering::Relaxed) {
                let path = PATHS[i % PATHS.len()];
                i += 1;
                let started = Instant::now();
                let (status, body) = get(&c, &base, path).await;
                let states = shared.timeline.during(started, Instant::now());
                shared.records.lock().unwrap_or_else(|p| p.into_inner()).push(Record { door: door_index, path, states, status, body });
            }
        }));
        for fresh in [true, false] {
            let (shared, base) = (shared.clone(), base.to_string());
            let c = if fresh { new_connection_each_time(door, http2) } else { door.https(None, http2).unwrap() };
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                while !shared.stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    let (status, _) = get(&c, &base, SAMPLED).await;
                    shared.samples.lock().unwrap_or_else(|p| p.into_inner()).push((door_index, t0.elapsed().as_secs(), status == Some(200)));
                }
            }));
        }
    }
    tasks
}

/// A client that keeps no idle connection: each request a new connection
/// (TCP and TLS handshake), as a new client process makes.
fn new_connection_each_time(door: &FrontDoor, http2: bool) -> reqwest::Client {
    let pki = door.tls.as_ref().unwrap();
    let alpn: &[&[u8]] = if http2 { &[b"h2"] } else { &[b"http/1.1"] };
    let config = integration::harness::tls_client_config(&pki.serving.cert_file, None, alpn).unwrap();
    let b = reqwest::Client::builder().use_preconfigured_tls(config).no_proxy().timeout(Duration::from_secs(10)).pool_max_idle_per_host(0);
    if http2 { b.http2_prior_knowledge() } else { b.http1_only() }.build().unwrap()
}

const CLASSES: [&str; 7] = ["correct 2xx", "correct 404", "wrong 404", "503 Status", "plain-text 503", "429 Retry-After", "other"];

fn classify(r: &Record, served: &BTreeMap<String, BTreeSet<String>>) -> &'static str {
    let capable = |s: &State| s.values().any(|p| served.get(&p.release).is_some_and(|set| set.contains(r.path)));
    match r.status {
        None => "other",
        Some(200..=299) if r.path == "/apis" && r.body["kind"] != "APIGroupDiscoveryList" => "other",
        Some(200..=299) => "correct 2xx",
        Some(404) if r.states.iter().any(capable) => "wrong 404",
        Some(404) => "correct 404",
        Some(503) if r.body["kind"] == "Status" => "503 Status",
        Some(503) => "plain-text 503",
        Some(429) => "429 Retry-After",
        Some(_) => "other",
    }
}

/// One run: the three servers (kube's MVP on or off) from 1.35 to 1.37,
/// both front doors; per door the count of each class and the disruption
/// seconds (new connection, reused connection).
async fn upgrade(kube_mvp: bool) -> Vec<(String, BTreeMap<&'static str, usize>, usize)> {
    let specs: Vec<Spec> = NAMES
        .iter()
        .map(|n| {
            let a = args("1.35");
            let s = Spec::new(n, Release::minor(37), &a.iter().map(String::as_str).collect::<Vec<_>>());
            if kube_mvp { s.with_kube_mvp() } else { s }
        })
        .collect();
    let mut cp = RealControlPlane::start_specs(&specs).await.unwrap();
    let door = cp.front_door().await.unwrap();
    let open = |n: usize| move |t: &Value| t["apiservers"].as_array().is_some_and(|a| a.iter().filter(|s| s["open"] == true).count() == n);
    let (_plain, plain) = door.another_envoy_with(plain_round_robin).await.unwrap();

    let mut served: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    served.insert("1.35".into(), cp.listable(0).await.unwrap());
    let shared = Arc::new(Shared::default());
    for n in NAMES {
        shared.timeline.up(n, "1.35");
    }
    let t0 = Instant::now();
    let mut tasks = start_load(&shared, 0, &door, &door.url(""), t0);
    tasks.extend(start_load(&shared, 1, &door, &format!("https://127.0.0.1:{}", plain.ports.listen), t0));

    for release in ["1.36", "1.37"] {
        for (i, name) in NAMES.iter().enumerate() {
            let before = [shared.count(0), shared.count(1)];
            shared.timeline.stopping(name);
            cp.signal_apiserver(i, "TERM");
            door.wait_table_published(open(2)).await.unwrap();
            let deadline = Instant::now() + Duration::from_secs(60);
            while cp.apiserver_running(i) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert!(!cp.apiserver_running(i), "{name} exits after its shutdown delay");
            shared.timeline.gone(name);
            cp.apiservers[i].extra_args = args(release);
            // Up from just before it starts: a 404 for its APIs is judged
            // wrong from the first moment it could answer.
            shared.timeline.up(name, release);
            cp.start_apiserver(i).await.unwrap();
            if !served.contains_key(release) {
                served.insert(release.to_string(), cp.listable(i).await.unwrap());
            }
            door.wait_table_published(open(3)).await.unwrap();
            let deadline = Instant::now() + Duration::from_secs(60);
            while (shared.count(0) < before[0] + SETTLE || shared.count(1) < before[1] + SETTLE) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    shared.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }

    for path in &PATHS[1..4] {
        let by: Vec<&String> = served.iter().filter(|(_, s)| s.contains(*path)).map(|(r, _)| r).collect();
        eprintln!("{path}: served by {by:?}");
    }
    let records = shared.records.lock().unwrap_or_else(|p| p.into_inner());
    let samples = shared.samples.lock().unwrap_or_else(|p| p.into_inner());
    let mvp = if kube_mvp { " + kube's MVP on the servers" } else { "" };
    ["mvp-envoy", "plain round robin"]
        .iter()
        .enumerate()
        .map(|(d, name)| {
            let mut classes: BTreeMap<&'static str, usize> = CLASSES.iter().map(|c| (*c, 0)).collect();
            for r in records.iter().filter(|r| r.door == d) {
                *classes.entry(classify(r, &served)).or_default() += 1;
            }
            let seconds: BTreeSet<u64> = samples.iter().filter(|(door, _, ok)| *door == d && !ok).map(|(_, s, _)| *s).collect();
            (format!("{name}{mvp}"), classes, seconds.len())
        })
        .collect()
}

#[tokio::test]
async fn a_real_rolling_upgrade_side_by_side_with_kubes_own_mvp() {
    let mut rows = upgrade(false).await;
    rows.extend(upgrade(true).await);
    let mut table = format!("| front door | requests | {} | disruption seconds |\n|---|---:|{}---:|\n", CLASSES.join(" | "), "---:|".repeat(CLASSES.len()));
    for (name, classes, seconds) in &rows {
        let total: usize = classes.values().sum();
        let cells: Vec<String> = CLASSES.iter().map(|c| classes.get(c).copied().unwrap_or(0).to_string()).collect();
        table.push_str(&format!("| {name} | {total} | {} | {seconds} |\n", cells.join(" | ")));
    }
    eprintln!("{table}");
    if let Ok(file) = std::env::var("MVP_UPGRADE_REPORT") {
        let _ = std::fs::write(file, &table);
    }
    for (name, classes, seconds) in rows.iter().filter(|(n, _, _)| n.starts_with("mvp-envoy")) {
        for bad in ["wrong 404", "plain-text 503", "other"] {
            assert_eq!(classes[bad], 0, "{name}: {bad}\n{table}");
        }
        assert_eq!(*seconds, 0, "{name}: disruption seconds\n{table}");
    }
    assert!(rows[1].1["wrong 404"] > 0, "the plain round robin without kube's MVP shows the skew (else the run proved nothing)\n{table}");
}
