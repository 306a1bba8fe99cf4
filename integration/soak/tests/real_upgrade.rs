//! A real rolling upgrade, side by side with kube's own Mixed Version Proxy.
//!
//! Three real kube-apiservers are upgraded one at a time from v1.35.4 to
//! v1.36.3, then to v1.37.2, the kubeadm way: SIGTERM,
//! `--shutdown-delay-duration` (`/readyz` fails, requests still served),
//! exit, the next release's binary started on the same host name and
//! address. The servers carry kube's peer flags with the MVP feature gate as
//! each release defaults it (off in 1.35, on from 1.36): what a cluster
//! gets by upgrading alone.
//!
//! Clients loop list, get, watch and create over an API every release
//! serves, one 1.36 added, one only 1.37 serves and one the upgrade takes
//! away (`coordination.k8s.io/v1beta1`, turned on by `--runtime-config` on
//! 1.35 and 1.36, left off on 1.37, as an operator upgrading would find
//! it), and `/apis`, through three front doors on the same servers at the
//! same moments:
//! - a plain round robin with kube's MVP switched off for its requests by
//!   kube's own means (what a load balancer gave before 1.36);
//! - a plain round robin, kube's MVP doing what it does;
//! - mvp-envoy.
//!
//! Answers are judged as `RELIABILITY.md` does, against a timeline of which
//! process ran which release at every moment; 1 Hz samplers per front door
//! (new and reused connections, HTTP/2 and HTTP/1.1) count disruption
//! seconds the way OpenShift's upgrade tests do: seconds with any failed
//! sample.
//!
//! Before each 1.36 server goes in the last round, `mvp-ext-proc readiness
//! --remove` says what its leaving takes away: nothing while another 1.36
//! server serves the API the upgrade removes; that API, and the client using
//! it (its token as the cluster reviews it) with a count no larger than the
//! requests it sent, before the last.
//!
//! `MVP_UPGRADE_REPORT=FILE` writes the side-by-side table (markdown);
//! `MVP_UPGRADE_SETTLE=N` makes each step wait for N requests per door
//! (100).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use integration::harness::real::{KubeMvp, RealControlPlane, Release, Spec, TOKENS};
use integration::harness::{FrontDoor, Topology, plain_round_robin, plain_round_robin_bypassing_kube_mvp};
use mvp_soak::continuity;
use mvp_soak::samplers::{Sampler, Samples};
use mvp_soak::timeline::{Process, State, Timeline};
use serde_json::{Value, json};

const DISCOVERY: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";

/// One API the clients use: its list path (as `RealControlPlane::listable`
/// names it) and its collection (in namespace `default` when namespaced).
struct Api {
    list: &'static str,
    collection: &'static str,
}

/// Every release serves configmaps; 1.36 added mutatingadmissionpolicies
/// (and their bindings) to `admissionregistration.k8s.io/v1`, a
/// group-version every release serves; only 1.37 serves
/// `certificates.k8s.io/v1` clustertrustbundles; only 1.35 and 1.36 (as
/// configured: [`REMOVED_BY_UPGRADE`]) serve `coordination.k8s.io/v1beta1`
/// leasecandidates. Who serves what is read from each release's own
/// discovery as it comes up, and checked.
const APIS: [Api; 4] = [
    Api { list: "/api/v1/configmaps", collection: "/api/v1/namespaces/default/configmaps" },
    Api {
        list: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings",
        collection: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings",
    },
    Api { list: "/apis/certificates.k8s.io/v1/clustertrustbundles", collection: "/apis/certificates.k8s.io/v1/clustertrustbundles" },
    Api { list: "/apis/coordination.k8s.io/v1beta1/leasecandidates", collection: "/apis/coordination.k8s.io/v1beta1/namespaces/default/leasecandidates" },
];
/// The API the upgrade takes away: on before 1.37, off from it.
const REMOVED_BY_UPGRADE: &str = "--runtime-config=coordination.k8s.io/v1beta1=true";
/// Its route key's label (the access log's `routedBy`, `readiness`'s).
const REMOVED_LABEL: &str = "coordination.k8s.io/v1beta1/leasecandidates";
/// The named object every client gets, created once a server of a release
/// that serves its API is up (and never deleted: a 404 for it is wrong).
const PROBE: &str = "upgrade-probe";

/// A new object of `APIS[api]`, named `name` or generated.
fn object(api: usize, name: Option<&str>, ca_pem: &str) -> Value {
    let meta = match name {
        Some(n) => json!({"name": n}),
        None => json!({"generateName": "upgrade-"}),
    };
    match api {
        0 => json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}),
        1 => json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding", "metadata": meta, "spec": {"policyName": "upgrade-policy"}}),
        2 => json!({"apiVersion": "certificates.k8s.io/v1", "kind": "ClusterTrustBundle", "metadata": meta, "spec": {"trustBundle": ca_pem}}),
        _ => json!({"apiVersion": "coordination.k8s.io/v1beta1", "kind": "LeaseCandidate", "metadata": meta,
            "spec": {"leaseName": "upgrade-lease", "binaryVersion": "1.35.0", "emulationVersion": "1.35.0", "strategy": "OldestEmulationVersion"}}),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verb {
    List,
    Get,
    Watch,
    Create,
    Discovery,
}

/// What one looping client asks, in order: every verb of its API, or the
/// merged `/apis` (`None`). One client per API and door, so an API that is
/// unavailable (held, or answered 503 at once) slows only its own client:
/// the doors' counts compare like with like, API by API.
fn items(api: Option<usize>) -> Vec<Verb> {
    match api {
        Some(_) => vec![Verb::List, Verb::Get, Verb::Watch, Verb::Create],
        None => vec![Verb::Discovery],
    }
}

/// Each looping client's API: [`APIS`] and the merged `/apis`.
fn client_apis() -> impl Iterator<Item = Option<usize>> {
    (0..APIS.len()).map(Some).chain([None])
}

const NAMES: [&str; 3] = ["kas-a", "kas-b", "kas-c"];
const UPGRADES: [(&str, u32); 2] = [("1.36", 36), ("1.37", 37)];
const DOORS: [&str; 3] = ["plain round robin (kube's MVP bypassed)", "plain round robin + kube's MVP", "mvp-envoy"];
/// Requests per front door after each step before the next
/// (`MVP_UPGRADE_SETTLE` for a longer run).
fn settle() -> usize {
    std::env::var("MVP_UPGRADE_SETTLE").ok().and_then(|s| s.parse().ok()).unwrap_or(100)
}
const SAMPLED: &str = "/api/v1/configmaps?limit=1";
/// Each server's `--shutdown-delay-duration`: `/readyz` fails, requests are
/// still taken; then its listener closes.
const SHUTDOWN_DELAY: Duration = Duration::from_secs(3);
/// The looping clients' user agent (`readiness` names clients by it and
/// by who they are).
const USER_AGENT: &str = "upgrade-soak/1.0";

/// One answer, judged at the end (when every release's API set is known).
struct Record {
    door: usize,
    verb: Verb,
    api: Option<usize>,
    states: Vec<State>,
    status: Option<u16>,
    body: Value,
    /// When its answer was in.
    ended: Instant,
}

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    /// Per API: its probe object exists.
    probe: [AtomicBool; 4],
    records: Mutex<Vec<Record>>,
    /// Set with `stop`: the samplers' own flag.
    sampling: Arc<AtomicBool>,
    /// The 1 Hz samplers' answers.
    samples: Arc<Samples>,
    timeline: Timeline,
    ca_pem: String,
}

impl Shared {
    fn count(&self, door: usize) -> usize {
        self.records.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|r| r.door == door).count()
    }
}

/// One request; a watch is judged by its response head (then dropped).
async fn ask(c: &reqwest::Client, base: &str, verb: Verb, api: Option<usize>, ca_pem: &str) -> (Option<u16>, Value) {
    let collection = api.and_then(|a| APIS.get(a)).map(|a| a.collection).unwrap_or("/apis");
    let req = match verb {
        Verb::List => c.get(format!("{base}{collection}?limit=1")),
        Verb::Get => c.get(format!("{base}{collection}/{PROBE}")),
        Verb::Watch => c.get(format!("{base}{collection}?watch=1&timeoutSeconds=30")),
        Verb::Create => c.post(format!("{base}{collection}")).json(&object(api.unwrap_or(0), None, ca_pem)),
        Verb::Discovery => c.get(format!("{base}/apis")).header("accept", DISCOVERY),
    };
    match req.bearer_auth(TOKENS[0].0).header("user-agent", USER_AGENT).send().await {
        // An established watch streams until its timeout: its head says it.
        Ok(r) if verb == Verb::Watch && r.status().is_success() => (Some(r.status().as_u16()), Value::Null),
        Ok(r) => {
            let status = r.status().as_u16();
            let body = r.bytes().await.ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or(Value::Null);
            (Some(status), body)
        }
        Err(_) => (None, Value::Null),
    }
}

/// One client per API (each one reused connection, HTTP/2 and HTTP/1.1 by
/// turns, as client-go and kubectl) looping over its [`items`], and four
/// 1 Hz samplers (new and reused connections, both protocols).
fn start_load(shared: &Arc<Shared>, d: usize, door: &FrontDoor, base: &str, t0: Instant) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = vec![];
    for (n, api) in client_apis().enumerate() {
        let http2 = n % 2 == 0;
        let (shared2, base2, c) = (shared.clone(), base.to_string(), door.https(None, http2).unwrap());
        tasks.push(tokio::spawn(async move {
            let (shared, base, items) = (shared2, base2, items(api));
            let mut i = 0;
            while !shared.stop.load(Ordering::Relaxed) {
                let Some(&verb) = items.get(i % items.len()) else { break };
                i += 1;
                if verb == Verb::Get && !api.is_some_and(|a| shared.probe[a].load(Ordering::Relaxed)) {
                    continue;
                }
                let started = Instant::now();
                let (status, body) = ask(&c, &base, verb, api, &shared.ca_pem).await;
                let ended = Instant::now();
                let states = shared.timeline.during(started, ended);
                shared.records.lock().unwrap_or_else(|p| p.into_inner()).push(Record { door: d, verb, api, states, status, body, ended });
            }
        }));
    }
    for http2 in [true, false] {
        let samplers = [true, false].map(|fresh| Sampler { fresh, client: if fresh { new_connection_each_time(door, http2) } else { door.https(None, http2).unwrap() } });
        let stop = shared.sampling.clone();
        tasks.extend(shared.samples.start(d, samplers.into(), format!("{base}{SAMPLED}"), Some(TOKENS[0].0), t0, stop));
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

const CLASSES: [&str; 8] = ["correct 2xx", "correct 404", "wrong 404", "503 Status", "503 Status, capable up", "plain-text 503", "429 Retry-After", "other"];

/// The class, and what it was when it is wrong or "other".
fn classify(r: &Record, served: &BTreeMap<String, BTreeSet<String>>) -> (&'static str, Option<String>) {
    let list = r.api.and_then(|a| APIS.get(a)).map(|a| a.list);
    let serves = |p: &Process| list.is_none_or(|l| served.get(&p.release).is_some_and(|set| set.contains(l)));
    // Up: the bar for a wrong 404. Up, ready (/readyz 200 seen) and taking
    // new requests (a stopping one until its shutdown delay ends, when its
    // listener closes) until the answer: the bar for a 503 a capable server
    // could have answered. The last server of the API the upgrade removes
    // stops taking requests seconds before it exits: a 503 then is honest.
    let capable = |s: &State| s.values().any(serves);
    let capable_ready = |s: &State| s.values().any(|p| p.ready && p.accepting_at(r.ended) && serves(p));
    let what = format!("{:?} {}", r.verb, list.unwrap_or("/apis"));
    let other = |detail: String| ("other", Some(format!("{} {what}: {detail}", r.status.map_or("no answer".into(), |s| s.to_string()))));
    match r.status {
        None => other("transport error".into()),
        Some(200..=299) if r.verb == Verb::Discovery && r.body["kind"] != "APIGroupDiscoveryList" => other(format!("kind {}", r.body["kind"])),
        Some(200..=299) => ("correct 2xx", None),
        Some(404) if r.states.iter().any(capable) => ("wrong 404", Some(what)),
        Some(404) => ("correct 404", None),
        Some(503) if r.body["kind"] == "Status" && r.states.iter().all(capable_ready) => ("503 Status, capable up", Some(format!("503 Status, capable up: {what} ({})", r.body["message"]))),
        Some(503) if r.body["kind"] == "Status" => ("503 Status", None),
        Some(503) => ("plain-text 503", Some(what)),
        Some(429) => ("429 Retry-After", None),
        Some(_) => other(r.body.to_string().chars().take(160).collect()),
    }
}

/// Creates the probe object of every API a server of `release` serves that
/// has none yet, directly on that server.
async fn create_probes(cp: &RealControlPlane, i: usize, served: &BTreeSet<String>, shared: &Shared) {
    for (a, api) in APIS.iter().enumerate() {
        if shared.probe[a].load(Ordering::Relaxed) || !served.contains(api.list) {
            continue;
        }
        let url = format!("{}{}", cp.apiservers[i].url(), api.collection);
        let r = cp.http.post(url).json(&object(a, Some(PROBE), &shared.ca_pem)).send().await.unwrap();
        let status = r.status();
        assert!(status.is_success(), "creating {PROBE} in {}: {status} {}", api.list, r.text().await.unwrap_or_default());
        shared.probe[a].store(true, Ordering::Relaxed);
    }
}

/// `mvp-ext-proc readiness --remove name` before a 1.36 server goes: the
/// API the upgrade removes is lost only with the `last` of them, and then
/// names the looping clients with a count no larger than the requests they
/// sent for it through mvp-envoy.
async fn readiness_before_removing(door: &FrontDoor, shared: &Shared, name: &str, last: bool) {
    let ask = || {
        let out = std::process::Command::new(integration::harness::ext_proc_bin().unwrap())
            .args(["readiness", "--remove", name, "-o", "json", "--server", &format!("http://127.0.0.1:{}", door.metrics_port)])
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let api = report["lost"].as_array().and_then(|l| l.iter().find(|a| a["routedBy"] == REMOVED_LABEL).cloned());
        (out.status.code(), report, api)
    };
    if !last {
        let (_, report, api) = ask();
        assert!(api.is_none(), "{name} leaving takes away {REMOVED_LABEL} while another 1.36 server serves it: {report}");
        return;
    }
    let sent = || shared.records.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|r| r.door == 2 && r.api == Some(3) && r.status.is_some()).count();
    let counted = |api: &Value| -> u64 { api["usedBy"]["clients"].as_array().into_iter().flatten().filter(|c| c["userAgent"] == USER_AGENT).filter_map(|c| c["count"].as_u64()).sum() };
    let (code, report, api) = ask();
    let api = api.unwrap_or_else(|| panic!("{name} is the last 1.36 server: readiness must name {REMOVED_LABEL}: {report}"));
    assert_eq!((code, api["servedBy"].clone()), (Some(1), json!([name])), "{report}");
    let (n, upper) = (counted(&api), sent());
    assert!(n > 0 && n as usize <= upper, "{REMOVED_LABEL}: readiness counts {n} requests of {USER_AGENT}, mvp-envoy answered {upper} by now: {report}");
    eprintln!("readiness --remove {name} (the last 1.36 server): {REMOVED_LABEL} used by {USER_AGENT}: {n} requests counted (mvp-envoy answered {upper} for it, watches logged when they end)");
}

struct Row {
    door: &'static str,
    classes: BTreeMap<&'static str, usize>,
    /// Disruption seconds: any sampler, new-connection samplers, reused.
    seconds: [usize; 3],
    samples: BTreeMap<String, usize>,
    /// Per looping client's API ([`api_label`]): its requests and of
    /// them the 503 Status answers.
    per_api: BTreeMap<&'static str, (usize, usize)>,
}

/// A looping client's API as the report names it.
fn api_label(api: Option<usize>) -> &'static str {
    api.and_then(|a| APIS.get(a)).map_or("/apis (merged discovery)", |a| a.list)
}

/// The requests mvp-envoy held, per API: how many and the seconds they
/// spent held (the access log's `held`: "<ms> routed" or "<ms> unavailable").
fn held_by_api(access_log: &std::path::Path) -> BTreeMap<&'static str, (usize, f64)> {
    let mut held: BTreeMap<&'static str, (usize, f64)> = BTreeMap::new();
    let text = std::fs::read_to_string(access_log).unwrap_or_default();
    for line in text.lines().filter(|l| l.starts_with('{')) {
        let Ok(entry) = serde_json::from_str::<Value>(line) else { continue };
        let Some(ms) = entry["held"].as_str().and_then(|h| h.split(' ').next()).and_then(|ms| ms.parse::<f64>().ok()) else { continue };
        let path = entry["path"].as_str().unwrap_or("");
        let api = APIS.iter().position(|a| path.starts_with(a.collection));
        let e = held.entry(api_label(api)).or_default();
        e.0 += 1;
        e.1 += ms / 1000.0;
    }
    held
}

async fn upgrade() -> (Vec<Row>, BTreeMap<String, BTreeSet<String>>, continuity::Summary, BTreeMap<&'static str, (usize, f64)>) {
    let delay = format!("--shutdown-delay-duration={}s", SHUTDOWN_DELAY.as_secs());
    let graceful = [delay.as_str(), "--shutdown-send-retry-after=true", REMOVED_BY_UPGRADE];
    let specs: Vec<Spec> = NAMES.iter().map(|n| Spec::new(n, Release::minor(35), &graceful).with(KubeMvp::AsReleased)).collect();
    let mut cp = RealControlPlane::start_specs(&specs).await.unwrap();
    let door = cp.front_door().await.unwrap();
    let open = |n: usize| move |t: &Value| t["apiservers"].as_array().is_some_and(|a| a.iter().filter(|s| s["open"] == true).count() == n);
    let (_bypassing, bypassing) = door.another_envoy_with(plain_round_robin_bypassing_kube_mvp).await.unwrap();
    let (_plain, plain) = door.another_envoy_with(plain_round_robin).await.unwrap();
    let base = |t: &Topology| format!("https://127.0.0.1:{}", t.ports.listen);

    let ca_pem = std::fs::read_to_string(&cp.pki.serving.cert_file).unwrap();
    let shared = Arc::new(Shared { ca_pem, ..Shared::default() });
    let mut served: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    served.insert("1.35".into(), cp.listable(0).await.unwrap());
    create_probes(&cp, 0, &served["1.35"], &shared).await;
    for n in NAMES {
        shared.timeline.up(n, "1.35");
        shared.timeline.ready(n);
    }
    let t0 = Instant::now();
    let mut tasks = start_load(&shared, 0, &door, &base(&bypassing), t0);
    tasks.extend(start_load(&shared, 1, &door, &base(&plain), t0));
    tasks.extend(start_load(&shared, 2, &door, &door.url(""), t0));
    // Watch continuity through mvp-envoy: a labelled ConfigMap created
    // every 200 ms, followed as a reflector follows it.
    let target = continuity::Target {
        client: door.https(None, true).unwrap(),
        base: door.url(""),
        collection: APIS[0].collection.into(),
        label_selector: "continuity=1".into(),
        token: TOKENS[0].0.into(),
    };
    let (stop_following, stop_creating) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let (followed, follower) = continuity::follow(target.clone(), stop_following.clone());
    let body = |n: u64| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("continuity-{n}"), "labels": {"continuity": "1"}}});
    let (created, creator) = continuity::create_every(target, Duration::from_millis(200), body, stop_creating.clone());

    for (release, minor) in UPGRADES {
        for (i, name) in NAMES.iter().enumerate() {
            if minor == 37 {
                readiness_before_removing(&door, &shared, name, i == NAMES.len() - 1).await;
            }
            let before: Vec<usize> = (0..DOORS.len()).map(|d| shared.count(d)).collect();
            shared.timeline.stopping_after(name, SHUTDOWN_DELAY);
            cp.signal_apiserver(i, "TERM");
            door.wait_table_published(open(2)).await.unwrap();
            let deadline = Instant::now() + Duration::from_secs(60);
            while cp.apiserver_running(i) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert!(!cp.apiserver_running(i), "{name} exits after its shutdown delay");
            shared.timeline.gone(name);
            cp.apiservers[i].release = Release::minor(minor);
            if minor == 37 {
                cp.apiservers[i].extra_args.retain(|a| a != REMOVED_BY_UPGRADE);
            }
            // Up from just before it starts: a 404 for its APIs is judged
            // wrong from the first moment it could answer.
            shared.timeline.up(name, release);
            cp.start_apiserver(i).await.unwrap();
            // Its /readyz answered 200 (start_apiserver waits for it).
            shared.timeline.ready(name);
            if !served.contains_key(release) {
                served.insert(release.to_string(), cp.listable(i).await.unwrap());
            }
            create_probes(&cp, i, &served[release], &shared).await;
            door.wait_table_published(open(3)).await.unwrap();
            let deadline = Instant::now() + Duration::from_secs(60);
            while (0..DOORS.len()).any(|d| shared.count(d) < before[d] + settle()) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    shared.stop.store(true, Ordering::Relaxed);
    shared.sampling.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    stop_creating.store(true, Ordering::Relaxed);
    let _ = creator.await;
    let created = created.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let deadline = Instant::now() + Duration::from_secs(20);
    while continuity::Summary::of(&created, &followed).lost > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop_following.store(true, Ordering::Relaxed);
    let _ = follower.await;
    let watch = continuity::Summary::of(&created, &followed);

    let records = shared.records.lock().unwrap_or_else(|p| p.into_inner());
    let rows = DOORS
        .iter()
        .enumerate()
        .map(|(d, door)| {
            let mut row = Row { door, classes: CLASSES.iter().map(|c| (*c, 0)).collect(), seconds: [0; 3], samples: BTreeMap::new(), per_api: BTreeMap::new() };
            for r in records.iter().filter(|r| r.door == d) {
                let (class, sample) = classify(r, &served);
                *row.classes.entry(class).or_default() += 1;
                let api = row.per_api.entry(api_label(r.api)).or_default();
                api.0 += 1;
                api.1 += usize::from(class.starts_with("503 Status"));
                if let Some(s) = sample {
                    *row.samples.entry(s).or_default() += 1;
                }
            }
            row.seconds = shared.samples.disruption(d);
            row
        })
        .collect();
    (rows, served, watch, held_by_api(&door.envoy.log))
}


/// Requests per API, door by door: what one looping client of that API got
/// through each door; for mvp-envoy also what it held.
fn per_api_table(rows: &[Row], held: &BTreeMap<&'static str, (usize, f64)>) -> String {
    let mut t = format!("| API (one looping client per door) | {} | mvp-envoy held (requests / seconds) |\n|---|{}---:|\n", DOORS.join(" | "), "---:|".repeat(DOORS.len()));
    for api in client_apis().map(api_label) {
        let cells: Vec<String> = rows
            .iter()
            .map(|r| r.per_api.get(api).map_or("0".into(), |(n, unavailable)| format!("{n} ({unavailable} × 503)")))
            .collect();
        let (n, seconds) = held.get(api).copied().unwrap_or_default();
        t.push_str(&format!("| {api} | {} | {n} / {seconds:.1} s |\n", cells.join(" | ")));
    }
    t
}

fn table(rows: &[Row]) -> String {
    let mut t = format!(
        "| front door | requests | {} | disruption seconds (new conn / reused) |\n|---|---:|{}---:|\n",
        CLASSES.join(" | "),
        "---:|".repeat(CLASSES.len())
    );
    for r in rows {
        let total: usize = r.classes.values().sum();
        let cells: Vec<String> = CLASSES.iter().map(|c| r.classes.get(c).copied().unwrap_or(0).to_string()).collect();
        t.push_str(&format!("| {} | {total} | {} | {} ({} / {}) |\n", r.door, cells.join(" | "), r.seconds[0], r.seconds[1], r.seconds[2]));
    }
    for r in rows.iter().filter(|r| !r.samples.is_empty()) {
        t.push_str(&format!("\n{}, wrong and other answers by kind:\n", r.door));
        for (what, n) in &r.samples {
            t.push_str(&format!("- {n} × {what}\n"));
        }
    }
    t
}

#[tokio::test]
async fn a_real_rolling_upgrade_side_by_side_with_kubes_own_mvp() {
    let (rows, served, watch, held) = upgrade().await;
    let table = format!("{}\n{}\nWatch continuity through mvp-envoy: {watch:?}\n", table(&rows), per_api_table(&rows, &held));
    eprintln!("{table}");
    if let Ok(file) = std::env::var("MVP_UPGRADE_REPORT") {
        let _ = std::fs::write(file, &table);
    }
    // The skew is what the releases themselves say.
    let by = |list: &str| -> Vec<&str> { served.iter().filter(|(_, s)| s.contains(list)).map(|(r, _)| r.as_str()).collect() };
    assert_eq!(
        [by(APIS[0].list), by(APIS[1].list), by(APIS[2].list), by(APIS[3].list)],
        [vec!["1.35", "1.36", "1.37"], vec!["1.36", "1.37"], vec!["1.37"], vec!["1.35", "1.36"]]
    );

    assert!(watch.created > 100 && watch.resumed >= 3, "{watch:?}");
    assert_eq!((watch.lost, watch.relists), (0, 0), "events lost across server stops: {watch:?}");
    let mvp_envoy = &rows[2];
    for bad in ["wrong 404", "503 Status, capable up", "plain-text 503", "other"] {
        assert_eq!(mvp_envoy.classes[bad], 0, "mvp-envoy: {bad}\n{table}");
    }
    assert_eq!(mvp_envoy.seconds[0], 0, "mvp-envoy: disruption seconds\n{table}");
    assert!(rows[0].classes["wrong 404"] > 0, "the plain round robin without kube's MVP shows the skew (else the run proved nothing)\n{table}");
}
