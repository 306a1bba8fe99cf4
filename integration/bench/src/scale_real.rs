//! The scale part's smaller run against real kube-apiservers (issue 48,
//! `bench --only scale`): nodes — one HTTP/2 connection each, a bearer
//! token (a plain door cannot carry a certificate identity), 20 watches —
//! against two real kube-apiservers of the newest release, etcd behind
//! them, through three doors one after another: `direct` (node n to
//! apiserver n mod 2), a plain L7 round-robin Envoy, the front door
//! (native); every Envoy one worker. Each node opens a kubelet's own
//! watches (`kubelet_watches`: its pods and node by field selector,
//! services, endpointslices, the configmaps and secrets its pods mount) as
//! a current kubelet's informers ask for them: a watch-list
//! (`sendInitialEvents=true&resourceVersionMatch=NotOlderThan`, bookmarks)
//! from the watch cache, each answered with its initial objects and the
//! bookmark that ends them — which needs etcd's progress notify (etcd 3.6,
//! `scripts/etcd.sh`; on Debian's 3.4.23 kube 1.37 refused them with an
//! ERROR event). Per door what the apiservers carry with every watch open:
//! TCP connections (`/proc/net/tcp`), goroutines and their Go heap after a
//! forced GC and RSS (their own `/metrics`; each door starts once the last
//! one's goroutines have ended), and Envoy's heap.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use integration::harness::real::{RealControlPlane, Release, Spec, TOKENS};
use integration::harness::watches::{Held, established_to, hold_watches, kubelet_watches};
use integration::harness::{FilterBuild, Options, plain_round_robin, tls_client_config, wait_for};

use super::envoy_heap_mib;

#[derive(Debug, Clone)]
pub struct Plan {
    pub nodes: usize,
    pub watches_per_node: usize,
}

/// One door's figures with every watch open, over before.
#[derive(Debug, Serialize, Default, Clone)]
pub struct RealDoor {
    pub open_s: f64,
    pub apiserver_connections: u64,
    pub apiserver_goroutines: f64,
    /// Both apiservers' Go heap in use (`go_memstats_heap_inuse_bytes`, each
    /// read after a forced GC) and resident memory, MiB over before.
    pub apiserver_heap_mib: f64,
    pub apiserver_rss_mib: f64,
    pub envoy_heap_mib: f64,
}

#[derive(Debug, Serialize, Default)]
pub struct RealScale {
    pub release: String,
    pub nodes: usize,
    pub watches: usize,
    pub doors: BTreeMap<String, RealDoor>,
}

const DOORS: [&str; 3] = ["direct", "plain-l7", "native"];
/// A kubelet's informers' watch-list: initial objects, then the bookmark
/// that ends them, then changes (`kubelet_watches` adds `watch=1`).
const WATCH_LIST: &str = "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=3600";

pub async fn run(plan: &Plan) -> Result<RealScale> {
    let release = Release::minor(37);
    // Profiling on (the harness turns it off; kube's default is on): the
    // memory figures force a GC through `/debug/pprof/heap?gc=1`.
    let profiling: &[&str] = &["--profiling=true"];
    let specs = [Spec::new("kas-a", release, profiling), Spec::new("kas-b", release, profiling)];
    let cp = RealControlPlane::start_specs(&specs).await.context("two real kube-apiservers")?;
    let door = cp.front_door_with(Options { concurrency: 1, filter: Some(FilterBuild::Native), ..Options::default() }).await.context("the front door")?;
    let (_plain, plain_topology) = door.another_envoy_of(FilterBuild::Wasm, plain_round_robin).await.context("the plain round-robin Envoy")?;
    let apiservers: Vec<String> = cp.apiservers.iter().map(|a| a.url()).collect();
    let targets: [(Vec<String>, Option<u16>); 3] = [
        (apiservers.clone(), None),
        (vec![format!("https://127.0.0.1:{}", plain_topology.ports.listen)], Some(plain_topology.ports.admin)),
        (vec![door.url("").trim_end_matches('/').to_string()], Some(door.admin_port)),
    ];
    let ports: Vec<u16> = cp.apiservers.iter().map(|a| a.port).collect();
    let ca = cp.pki.serving.cert_file.clone();
    // What the apiservers report of themselves, summed.
    let metric = |name: &'static str| {
        let (http, urls) = (cp.http.clone(), apiservers.clone());
        async move {
            let mut sum = 0.0;
            for url in urls {
                let text = http.get(format!("{url}/metrics")).send().await.ok()?.text().await.ok()?;
                sum += text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse::<f64>().ok())?;
            }
            Some(sum)
        }
    };
    // Their memory after a forced GC (`/debug/pprof/heap?gc=1` collects
    // before it profiles): what the watches hold, not garbage not yet
    // collected.
    let memory = || {
        let (http, urls) = (cp.http.clone(), apiservers.clone());
        async move {
            for url in &urls {
                if let Ok(r) = http.get(format!("{url}/debug/pprof/heap?gc=1")).send().await {
                    let _ = r.bytes().await;
                }
            }
        }
    };
    let mib = |bytes: Option<f64>| bytes.unwrap_or(0.0) / (1024.0 * 1024.0);
    let envoy_heap = |admin: Option<u16>| envoy_heap_mib(&door.http, admin);
    let connections = || ports.iter().map(|p| established_to(*p) as u64).sum::<u64>();
    let mut out = RealScale {
        release: match release {
            Release::Modules(_, v) => format!("v{v}"),
            Release::V1_20 => "v1.20".into(),
        },
        nodes: plan.nodes,
        watches: plan.nodes * plan.watches_per_node,
        ..RealScale::default()
    };
    let mut baseline: Option<f64> = None;
    for (name, (bases, admin)) in DOORS.iter().zip(&targets) {
        eprintln!("scale against real kube-apiservers: {name}");
        let (connections_before, goroutines_before, envoy_before) = (connections(), metric("go_goroutines").await.unwrap_or(0.0), envoy_heap(*admin).await);
        memory().await;
        let (heap_before, rss_before) = (mib(metric("go_memstats_heap_inuse_bytes").await), mib(metric("process_resident_memory_bytes").await));
        baseline.get_or_insert(goroutines_before);
        let started = Instant::now();
        let nodes = (0..plan.nodes).map(|n| {
            let base = bases.get(n % bases.len().max(1)).cloned().unwrap_or_default();
            let ca = ca.clone();
            async move {
                let tls = tls_client_config(&ca, None, &[b"h2"])?;
                let client = reqwest::Client::builder()
                    .use_preconfigured_tls(tls)
                    .no_proxy()
                    .http2_prior_knowledge()
                    .default_headers(reqwest::header::HeaderMap::from_iter([(
                        reqwest::header::AUTHORIZATION,
                        reqwest::header::HeaderValue::from_str(&format!("Bearer {}", TOKENS[0].0))?,
                    )]))
                    .build()?;
                let mut held = Vec::new();
                for path in kubelet_watches(n, plan.watches_per_node, WATCH_LIST) {
                    held.push(hold_watches(&client, &format!("{base}{path}"), 1).await);
                }
                anyhow::Ok((client, held))
            }
        });
        let opened: Vec<(reqwest::Client, Vec<Held>)> = futures::future::try_join_all(nodes).await?;
        let open_s = started.elapsed().as_secs_f64();
        let failed: BTreeMap<u16, usize> = opened.iter().flat_map(|(_, h)| h).flat_map(Held::failed).fold(BTreeMap::new(), |mut m, s| {
            *m.entry(s).or_default() += 1;
            m
        });
        if !failed.is_empty() {
            bail!("{name}: watches not held, by status: {failed:?}");
        }
        memory().await;
        let figures = RealDoor {
            apiserver_heap_mib: mib(metric("go_memstats_heap_inuse_bytes").await) - heap_before,
            apiserver_rss_mib: mib(metric("process_resident_memory_bytes").await) - rss_before,
            open_s,
            apiserver_connections: connections().saturating_sub(connections_before),
            apiserver_goroutines: metric("go_goroutines").await.unwrap_or(0.0) - goroutines_before,
            envoy_heap_mib: envoy_heap(*admin).await - envoy_before,
        };
        for (_, held) in opened {
            for h in held {
                h.end().await;
            }
        }
        // The next door starts with the clients' connections gone (an L7
        // door keeps its own pool: counted once, in its figures).
        wait_for("the clients' apiserver connections to close", Duration::from_secs(60), || async { (admin.is_some() || connections() <= connections_before).then_some(()) })
            .await?;
        // …and the watches' goroutines gone (kube ends a watcher after its
        // client left, not at once).
        let first = baseline.unwrap_or(0.0);
        wait_for("the apiservers' watch goroutines to end", Duration::from_secs(60), || async { (metric("go_goroutines").await? <= first + 100.0).then_some(()) }).await?;
        out.doors.insert((*name).to_string(), figures);
    }
    Ok(out)
}

/// The run's table.
pub fn render(r: &RealScale) -> String {
    let mut out = format!(
        "\n{} watches of {} nodes against two real {} kube-apiservers (one HTTP/2 connection per node, a bearer token)\n\n| door | open s | apiserver connections | apiserver goroutines | apiserver Go heap MiB | apiserver RSS MiB | Envoy heap MiB |\n|---|---|---|---|---|---|---|\n",
        r.watches, r.nodes, r.release
    );
    for name in DOORS {
        let Some(d) = r.doors.get(name) else { continue };
        out.push_str(&format!(
            "| {name} | {:.2} | {} | {:.0} | {:.1} | {:.1} | {:.1} |\n",
            d.open_s, d.apiserver_connections, d.apiserver_goroutines, d.apiserver_heap_mib, d.apiserver_rss_mib, d.envoy_heap_mib
        ));
    }
    out
}
