//! The upgrade soak: a whole control-plane upgrade under load, every answer
//! classified ([`workload`]) against what was really running
//! ([`timeline`]), through two front doors side by side on the same
//! apiservers and the same membership: mvp-envoy, and a plain round-robin
//! Envoy (the same bootstrap without the routing filter and the `/apis`
//! merge — what a load balancer with `/readyz` health checks gives).
//!
//! Three apiservers start as v1.30 and are upgraded one at a time to
//! v1.33, then to v1.37, the way kubeadm does it (SIGTERM: `/readyz` fails,
//! requests are served for the shutdown delay, the process exits; the new
//! release starts on the same address), once by replacement at a new
//! address (the new machine joins through the cluster's Endpoints and
//! Leases, then the old one stops and departs), and once with mvp-ext-proc
//! killed (SIGKILL) before an apiserver stops and restarted while it is
//! down.
//! `scripts/soak.sh` runs it long; `tests/soak.rs` runs it bounded.

pub mod continuity;
pub mod report;
pub mod samplers;
pub mod timeline;
pub mod workload;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::Value;

use integration::harness::process::rss_kib;
use integration::harness::{FakeSpec, FrontDoor, Options, plain_round_robin, wait_for};
use samplers::Samples;
use timeline::Timeline;
use workload::{AGGREGATED_ACCEPT, Item, Outcome, Tally, Verb};

#[derive(Debug, Clone)]
pub struct Settings {
    /// Concurrent clients per front door.
    pub clients: usize,
    /// The apiservers' `--shutdown-delay-duration`.
    pub shutdown_delay: Duration,
    /// Requests each front door answers in a phase after its step is done.
    pub settle: u64,
    /// Where process logs go (a temporary directory otherwise).
    pub dir: Option<PathBuf>,
}

impl Settings {
    /// The bounded run the test suite makes.
    pub fn bounded() -> Settings {
        Settings { clients: 3, shutdown_delay: Duration::from_secs(1), settle: 150, dir: None }
    }
}

pub const DOORS: [&str; 2] = ["mvp-envoy", "plain round-robin Envoy"];

/// Per phase: its name, the tally per front door, RSS after it (KiB):
/// mvp-envoy's Envoy, the plain Envoy, mvp-ext-proc.
#[derive(Debug, Clone)]
pub struct Phase {
    pub name: String,
    pub tallies: [Tally; 2],
    pub rss_kib: [u64; 3],
    pub took: Duration,
}

#[derive(Debug, Clone)]
pub struct Report {
    pub settings: Settings,
    pub phases: Vec<Phase>,
    /// Per front door: disruption seconds (any sampler, new connections,
    /// reused connections; see [`samplers`]).
    pub disruption: [[usize; 3]; 2],
    /// Per front door: samples taken.
    pub sampled: [usize; 2],
}

/// What the 1 Hz samplers ask: something every release serves.
const SAMPLED: &str = "/api/v1/namespaces/default/configmaps";

impl Report {
    /// One front door's tally over the whole run.
    pub fn total(&self, door: usize) -> Tally {
        let mut t = Tally::default();
        for p in &self.phases {
            for (c, n) in &p.tallies[door].classes {
                *t.classes.entry(c).or_default() += n;
            }
            for (s, n) in &p.tallies[door].samples {
                *t.samples.entry(s.clone()).or_default() += n;
            }
        }
        t
    }
}

struct Load {
    phase: AtomicUsize,
    stop: AtomicBool,
    tallies: Mutex<Vec<[Tally; 2]>>,
    timeline: Timeline,
}

impl Load {
    fn count(&self, phase: usize, door: usize) -> u64 {
        self.tallies.lock().unwrap_or_else(|p| p.into_inner()).get(phase).map(|t| t[door].total()).unwrap_or(0)
    }
}

async fn request(http: &reqwest::Client, base: &str, item: &Item) -> Outcome {
    let url = format!("{base}{}", item.url_path());
    let req = match item.verb {
        Verb::Create => http.post(&url).header("content-type", "application/json").body(r#"{"metadata":{"name":"soak"}}"#),
        Verb::Discovery => http.get(&url).header("accept", AGGREGATED_ACCEPT),
        _ => http.get(&url),
    };
    let mut resp = match req.send().await {
        Ok(r) => r,
        Err(e) => return Outcome::Error(e.without_url().to_string()),
    };
    let status = resp.status().as_u16();
    let mut body = Vec::new();
    let mut error = false;
    loop {
        match tokio::time::timeout(Duration::from_secs(10), resp.chunk()).await {
            Ok(Ok(Some(c))) => body.extend_from_slice(&c),
            Ok(Ok(None)) => break,
            Ok(Err(_)) | Err(_) => {
                error = true;
                break;
            }
        }
    }
    let lines = body.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count();
    let first = body.split(|b| *b == b'\n').next().unwrap_or(&[]);
    let json = serde_json::from_slice(first).unwrap_or(Value::Null);
    if error && item.verb != Verb::Watch {
        return Outcome::Error(format!("{status}, body cut after {} bytes", body.len()));
    }
    let watch = (item.verb == Verb::Watch && status == 200).then_some((lines, error));
    Outcome::Answer { status, body: json, watch }
}

fn start_load(load: &Arc<Load>, door: usize, base: String, clients: usize, items: &Arc<Vec<Item>>) -> Vec<tokio::task::JoinHandle<()>> {
    (0..clients)
        .map(|c| {
            let (load, items, base) = (load.clone(), items.clone(), base.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(30)).build().unwrap_or_default();
                let mut i = c * 7;
                while !load.stop.load(Ordering::Relaxed) {
                    let Some(item) = items.get(i % items.len()) else { break };
                    i += 1;
                    let phase = load.phase.load(Ordering::Relaxed);
                    let started = Instant::now();
                    let outcome = request(&http, &base, item).await;
                    let states = load.timeline.during(started, Instant::now());
                    let (class, sample) = workload::classify(item, &states, &outcome);
                    let mut tallies = load.tallies.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(t) = tallies.get_mut(phase) {
                        t[door].add(class, sample);
                    }
                }
            })
        })
        .collect()
}

fn spec(name: &str, release: &str, delay: Duration) -> FakeSpec {
    FakeSpec::new(name, release).with_shutdown_delay(delay)
}

/// The member `name` is open in mvp-ext-proc's table as `release`, and
/// Envoy has that table.
async fn wait_open(door: &FrontDoor, name: &str, release: &str) -> Result<()> {
    door.wait_table_published(|t| {
        t["apiservers"]
            .as_array()
            .is_some_and(|a| a.iter().any(|s| s["name"] == name && s["open"] == true && s["release"].as_str().is_some_and(|r| r.starts_with(release))))
    })
    .await
    .with_context(|| format!("{name} to be open as {release}"))
}

/// The member's name in mvp-ext-proc's table: the seed by its flag, the
/// others by their identity lease.
fn member_name(fake: &str) -> String {
    if fake == "a" { fake.to_string() } else { format!("apiserver-{fake}") }
}

/// SIGTERM, then the process exits after its shutdown delay.
async fn stop_gracefully(door: &mut FrontDoor, timeline: &Timeline, name: &str, delay: Duration) -> Result<()> {
    timeline.stopping(name);
    door.fake(name).proc.signal("TERM");
    wait_for(&format!("{name} to exit after its shutdown delay"), delay + Duration::from_secs(10), || {
        let running = door.fakes.iter_mut().find(|f| f.spec.name == name).map(|f| f.proc.is_running());
        async move { (running == Some(false)).then_some(()) }
    })
    .await?;
    timeline.gone(name);
    Ok(())
}

/// How long a restarted fake's `/readyz` fails after it listens: a real
/// kube-apiserver's post-start hooks take seconds (never none), and a fake
/// ready the instant it listens would be a server no load balancer ever
/// meets.
const STARTING_FOR: Duration = Duration::from_millis(300);

/// Restarts `name` on its address as `release`. Recorded as up before it
/// starts: a 404 for its APIs is judged wrong from the first moment it
/// could answer; and as ready once its `/readyz` answers 200 (the bar for
/// a 503 "capable up").
async fn start_as(door: &mut FrontDoor, timeline: &Timeline, name: &str, release: &str) -> Result<()> {
    timeline.up(name, release);
    let spec = FakeSpec { release: release.into(), ..door.fake(name).spec.clone() }.starting_for(STARTING_FOR);
    door.restart_fake(name, spec).await?;
    let readyz = format!("{}/readyz", door.fake(name).url());
    wait_for(&format!("{name}'s /readyz to answer 200"), Duration::from_secs(10), || async {
        // The driver's own probe (every 25 ms: finer than mvp-ext-proc's 100).
        door.http.get(&readyz).send().await.is_ok_and(|r| r.status().is_success()).then_some(())
    })
    .await?;
    timeline.ready(name);
    Ok(())
}

pub async fn run(settings: Settings) -> Result<Report> {
    let delay = settings.shutdown_delay;
    let names = ["a", "b", "c"];
    let specs: Vec<FakeSpec> = names.iter().map(|n| spec(n, "v1.30", delay)).collect();
    // One seed (the contact point); b and c are members through the
    // cluster's Endpoints and Leases only, as with a real control plane
    // whose machines come and go.
    let options = Options { membership: Some("endpoints,leases"), seeds: Some(1), dir: settings.dir.clone(), ..Options::default() };
    let mut door = FrontDoor::start(&specs, options).await?;
    door.wait_table_published(|t| t["apiservers"].as_array().is_some_and(|a| a.len() == 3 && a.iter().all(|s| s["open"] == true))).await?;
    let (mut plain, plain_topology) = door.another_envoy_with(plain_round_robin).await?;
    let load = Arc::new(Load { phase: AtomicUsize::new(0), stop: AtomicBool::new(false), tallies: Mutex::new(vec![Default::default()]), timeline: Timeline::default() });
    for n in names {
        load.timeline.up(n, "v1.30");
        load.timeline.ready(n);
    }
    let items = Arc::new(workload::workload()?);
    let plain_url = format!("http://127.0.0.1:{}", plain_topology.ports.listen);
    let mut tasks = start_load(&load, 0, door.url(""), settings.clients, &items);
    tasks.extend(start_load(&load, 1, plain_url.clone(), settings.clients, &items));
    let (samples, sampling, t0) = (Arc::new(Samples::default()), Arc::new(AtomicBool::new(false)), Instant::now());
    for (d, base) in [door.url(""), plain_url].into_iter().enumerate() {
        tasks.extend(samples.start(d, samplers::plain_clients(), format!("{base}{SAMPLED}"), None, t0, sampling.clone()));
    }

    let steps: Vec<&str> = vec![
        "steady: 3 × v1.30",
        "a → v1.33 in place",
        "b → v1.33 in place",
        "c → v1.33 in place",
        "a → v1.37 in place",
        "b → v1.37 replaced at a new address",
        "c → v1.37 in place; mvp-ext-proc SIGKILLed before, restarted while c is down",
        "steady: 3 × v1.37",
    ];
    let mut phases = Vec::new();
    for (i, name) in steps.iter().enumerate() {
        let started = Instant::now();
        if i > 0 {
            load.tallies.lock().unwrap_or_else(|p| p.into_inner()).push(Default::default());
            load.phase.store(i, Ordering::Relaxed);
        }
        let t = &load.timeline;
        match i {
            1..=4 => {
                let (server, release) = match i {
                    1 => ("a", "v1.33"),
                    2 => ("b", "v1.33"),
                    3 => ("c", "v1.33"),
                    _ => ("a", "v1.37"),
                };
                stop_gracefully(&mut door, t, server, delay).await?;
                start_as(&mut door, t, server, release).await?;
                wait_open(&door, &member_name(server), release).await?;
            }
            5 => {
                t.up("b2", "v1.37");
                door.add_fake(spec("b2", "v1.37", delay)).await?;
                wait_open(&door, "apiserver-b2", "v1.37").await?;
                stop_gracefully(&mut door, t, "b", delay).await?;
            }
            6 => {
                // Routing goes on by the last table while nothing serves
                // xDS or the table; the restarted mvp-ext-proc must not
                // forget c, which is down then.
                door.ext_proc.kill();
                stop_gracefully(&mut door, t, "c", delay).await?;
                door.restart_ext_proc().await?;
                let down = load.count(i, 0);
                wait_for("requests while c is down", Duration::from_secs(60), || async { (load.count(i, 0) >= down + settings.settle / 2).then_some(()) })
                    .await?;
                start_as(&mut door, t, "c", "v1.37").await?;
                wait_open(&door, "apiserver-c", "v1.37").await?;
            }
            _ => {}
        }
        let bound = Duration::from_secs(120);
        wait_for(&format!("{} requests per front door in phase {name:?}", settings.settle), bound, || async {
            (load.count(i, 0) >= settings.settle && load.count(i, 1) >= settings.settle).then_some(())
        })
        .await?;
        let rss = [rss_kib(door.envoy.pid()), rss_kib(plain.pid()), rss_kib(door.ext_proc.pid())];
        let tallies = load.tallies.lock().unwrap_or_else(|p| p.into_inner()).get(i).cloned().unwrap_or_default();
        eprintln!("soak phase {name:?}: mvp {:?} / plain {:?}", tallies[0].classes, tallies[1].classes);
        phases.push(Phase { name: name.to_string(), tallies, rss_kib: rss, took: started.elapsed() });
    }
    load.stop.store(true, Ordering::Relaxed);
    sampling.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    // The last requests counted into the last phase.
    if let (Some(last), Some(t)) = (phases.last_mut(), load.tallies.lock().unwrap_or_else(|p| p.into_inner()).last()) {
        last.tallies = t.clone();
    }
    plain.kill();
    let disruption = [samples.disruption(0), samples.disruption(1)];
    let sampled = [samples.taken(0), samples.taken(1)];
    Ok(Report { settings, phases, disruption, sampled })
}
