//! The load the cluster part ([`super::cluster_load`]) sends: a kube-like
//! mix of requests, each client connection's closed loop, the watches held
//! open beside them, and the open-loop fixed rate of GETs.
//!
//! Per 100 requests of a loop: 50 GETs of a ConfigMap by name, 5 of a
//! Namespace, 8 LISTs with `limit=50` and 2 without (100 ConfigMaps of
//! ~300 bytes), 32 writes — each loop creates an object of its own,
//! updates it (PUT), patches it (merge patch) and deletes it, in turn —
//! and 3 LISTs of an API only one apiserver serves (the skewed share).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;

use integration::harness::real::TOKENS;

/// Where the reads and the writes go, and what only one server serves.
pub const READS: &str = "load-reads";
pub const WRITES: &str = "load-writes";
pub const OBJECTS: usize = 100;
pub const SKEWED: &str = "/apis/coordination.k8s.io/v1beta1/namespaces/default/leasecandidates";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    Get,
    GetNamespace,
    ListLimit,
    List,
    Write,
    Skewed,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::GetNamespace => "get namespace",
            Op::ListLimit => "list limit=50",
            Op::List => "list",
            Op::Write => "create/update/patch/delete",
            Op::Skewed => "list, skewed API",
        }
    }
}

/// One cycle of 100 requests, the kinds spread through it.
pub fn mix() -> Vec<Op> {
    let counts = [(Op::Get, 50), (Op::Write, 32), (Op::ListLimit, 8), (Op::GetNamespace, 5), (Op::Skewed, 3), (Op::List, 2)];
    let total: usize = counts.iter().map(|(_, n)| n).sum();
    // Each kind at evenly spaced positions (its i-th at (i + ½)·total/n),
    // ties by the order above: a stable interleave, not runs of one kind.
    let mut slots: Vec<(f64, usize, Op)> = Vec::with_capacity(total);
    for (k, (op, n)) in counts.iter().enumerate() {
        for i in 0..*n {
            slots.push(((i as f64 + 0.5) * total as f64 / *n as f64, k, *op));
        }
    }
    slots.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal).then(a.1.cmp(&b.1)));
    slots.into_iter().map(|(_, _, op)| op).collect()
}

/// One closed loop's tally: latencies (ms) by kind, answers by status.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub latencies: BTreeMap<Op, Vec<f64>>,
    pub statuses: BTreeMap<u16, u64>,
    /// 404s for the skewed API: an apiserver that lacks it answered.
    pub skewed_404: u64,
}

impl Tally {
    pub fn add(&mut self, other: Tally) {
        for (op, l) in other.latencies {
            self.latencies.entry(op).or_default().extend(l);
        }
        for (s, n) in other.statuses {
            *self.statuses.entry(s).or_default() += n;
        }
        self.skewed_404 += other.skewed_404;
    }

    pub fn requests(&self) -> u64 {
        self.statuses.values().sum()
    }
}

/// One closed loop: a request, its whole answer, the next, until `stop`.
/// `serves_skewed`: its server serves the skewed API (direct to the one
/// that lacks it, the loop sends a GET in its place, as a client that knew
/// would). `id` offsets it in the mix and, after `prefix` (unique per door
/// and window: a window can end between a create and its delete), names
/// its objects.
pub async fn closed_loop(client: reqwest::Client, base: String, prefix: String, id: usize, serves_skewed: bool, stop: Arc<AtomicBool>) -> Tally {
    let ops = mix();
    let mut tally = Tally::default();
    let (mut k, mut step, mut object) = (id * 7, 0usize, 0usize);
    while !stop.load(Ordering::Relaxed) {
        let op = ops.get(k % ops.len().max(1)).copied().unwrap_or(Op::Get);
        k += 1;
        let op = if op == Op::Skewed && !serves_skewed { Op::Get } else { op };
        let name = format!("{prefix}-w{id}-{object}");
        let collection = format!("{base}/api/v1/namespaces/{WRITES}/configmaps");
        let request = match op {
            Op::Get => client.get(format!("{base}/api/v1/namespaces/{READS}/configmaps/r-{}", k % OBJECTS)),
            Op::GetNamespace => client.get(format!("{base}/api/v1/namespaces/{READS}")),
            Op::ListLimit => client.get(format!("{base}/api/v1/namespaces/{READS}/configmaps?limit=50")),
            Op::List => client.get(format!("{base}/api/v1/namespaces/{READS}/configmaps")),
            Op::Skewed => client.get(format!("{base}{SKEWED}")),
            Op::Write => {
                let s = step % 4;
                step += 1;
                if s == 3 {
                    object += 1;
                }
                match s {
                    0 => client.post(&collection).json(&configmap(&name, "created")),
                    1 => client.put(format!("{collection}/{name}")).json(&configmap(&name, "updated")),
                    2 => client
                        .patch(format!("{collection}/{name}"))
                        .header("content-type", "application/merge-patch+json")
                        .body(r#"{"data":{"state":"patched"}}"#),
                    _ => client.delete(format!("{collection}/{name}")),
                }
            }
        };
        let started = Instant::now();
        let status = match request.bearer_auth(TOKENS[0].0).timeout(Duration::from_secs(10)).send().await {
            // The whole body: a LIST's latency is its last byte's.
            Ok(r) => {
                let s = r.status().as_u16();
                if r.bytes().await.is_err() { 0 } else { s }
            }
            Err(_) => 0,
        };
        tally.latencies.entry(op).or_default().push(started.elapsed().as_secs_f64() * 1000.0);
        *tally.statuses.entry(status).or_default() += 1;
        if op == Op::Skewed && status == 404 {
            tally.skewed_404 += 1;
        }
    }
    tally
}

pub fn configmap(name: &str, state: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"state": state, "key": "x".repeat(200)}})
}

/// How one watch fared over its window.
#[derive(Debug, Default)]
pub struct Watched {
    /// Its stream ended cleanly before the window did, and it watched
    /// again from the last resourceVersion it had seen, as client-go's
    /// reflector does: kube-apiserver ends a watcher that falls behind its
    /// events (cacher's cache_watcher.go, counted in
    /// `apiserver_terminated_watchers_total`), on a saturated machine too.
    pub rewatches: u64,
    /// Why it stopped for good, if it did: an error answer, an ERROR event
    /// (a 410 Gone: a reflector would relist), a broken stream.
    pub failed: Option<String>,
}

/// A watch of the written ConfigMaps from now (a LIST's resourceVersion
/// on its own connection, as an informer starts), held until `stop`; the
/// events it got (one JSON line each; bookmarks too) are added to `events`.
pub async fn watch(client: reqwest::Client, base: String, stop: Arc<AtomicBool>, events: Arc<AtomicU64>) -> Watched {
    use futures::StreamExt;
    let mut out = Watched::default();
    let list = format!("{base}/api/v1/namespaces/{WRITES}/configmaps?limit=1");
    let rv = match client.get(list).bearer_auth(TOKENS[0].0).send().await {
        Ok(r) if r.status() == 200 => r.json::<serde_json::Value>().await.ok().and_then(|v| v["metadata"]["resourceVersion"].as_str().map(str::to_string)),
        Ok(r) => return Watched { failed: Some(format!("its LIST answered {}", r.status())), ..out },
        Err(e) => return Watched { failed: Some(format!("its LIST: {e}")), ..out },
    };
    let Some(mut rv) = rv else { return Watched { failed: Some("its LIST had no resourceVersion".into()), ..out } };
    loop {
        let url = format!("{base}/api/v1/namespaces/{WRITES}/configmaps?watch=1&allowWatchBookmarks=true&resourceVersion={rv}");
        let resp = match client.get(url).bearer_auth(TOKENS[0].0).send().await {
            Ok(r) if r.status() == 200 => r,
            Ok(r) => return Watched { failed: Some(format!("answered {}", r.status())), ..out },
            Err(e) => return Watched { failed: Some(format!("no answer: {e}")), ..out },
        };
        let mut body = resp.bytes_stream();
        let mut line = Vec::new();
        let ended = loop {
            if stop.load(Ordering::Relaxed) {
                return out;
            }
            match tokio::time::timeout(Duration::from_millis(200), body.next()).await {
                Ok(Some(Ok(chunk))) => {
                    for part in chunk.split_inclusive(|b| *b == b'\n') {
                        line.extend_from_slice(part);
                        if line.last() != Some(&b'\n') {
                            continue;
                        }
                        events.fetch_add(1, Ordering::Relaxed);
                        match event_resource_version(&line) {
                            Ok(Some(v)) => rv = v,
                            Ok(None) => {}
                            Err(why) => return Watched { failed: Some(why), ..out },
                        }
                        line.clear();
                    }
                }
                Ok(Some(Err(e))) => break Some(format!("its stream failed: {e}")),
                Ok(None) => break None,
                Err(_) => {}
            }
        };
        if stop.load(Ordering::Relaxed) {
            return out;
        }
        match ended {
            None => out.rewatches += 1,
            Some(why) => return Watched { failed: Some(why), ..out },
        }
    }
}

/// A watch event's resourceVersion (a BOOKMARK's too), or why the event
/// ends the watch.
fn event_resource_version(line: &[u8]) -> Result<Option<String>, String> {
    let v: serde_json::Value = serde_json::from_slice(line).map_err(|e| format!("an event that is not JSON: {e}"))?;
    if v["type"] == "ERROR" {
        return Err(format!("an ERROR event: {}", v["object"].to_string().chars().take(160).collect::<String>()));
    }
    Ok(v["object"]["metadata"]["resourceVersion"].as_str().map(str::to_string))
}

/// `rate` GETs per second for `window`, open loop ([`super::load::open_loop`]),
/// spread over `clients` in turn, each to its base.
pub async fn fixed_rate(clients: &[reqwest::Client], bases: &[String], rate: u32, window: Duration) -> (Vec<f64>, BTreeMap<u16, u64>) {
    let n = clients.len().min(bases.len()).max(1);
    super::load::open_loop(rate, window, |i| {
        let (client, base) = (clients.get(i % n)?, bases.get(i % n)?);
        Some(client.get(format!("{base}/api/v1/namespaces/{READS}/configmaps/r-{}", i % OBJECTS)).bearer_auth(TOKENS[0].0))
    })
    .await
}

/// The objects the reads read, and the namespaces.
pub async fn seed(http: &reqwest::Client, base: &str) -> Result<()> {
    for ns in [READS, WRITES] {
        let body = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        let r = http.post(format!("{base}/api/v1/namespaces")).json(&body).send().await?;
        anyhow::ensure!(r.status().is_success() || r.status() == 409, "creating namespace {ns}: {}", r.status());
    }
    for i in 0..OBJECTS {
        let r = http.post(format!("{base}/api/v1/namespaces/{READS}/configmaps")).json(&configmap(&format!("r-{i}"), "read")).send().await?;
        anyhow::ensure!(r.status().is_success() || r.status() == 409, "creating ConfigMap r-{i}: {}", r.status());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_has_its_shares_and_no_long_runs_of_one_kind() {
        let m = mix();
        assert_eq!(m.len(), 100);
        let count = |op| m.iter().filter(|o| **o == op).count();
        assert_eq!((count(Op::Get), count(Op::Write), count(Op::ListLimit), count(Op::GetNamespace), count(Op::Skewed), count(Op::List)), (50, 32, 8, 5, 3, 2));
        let longest = m.chunk_by(|a, b| a == b).map(<[Op]>::len).max().unwrap_or(0);
        assert!(longest <= 2, "{m:?}");
    }

    #[test]
    fn a_watch_goes_on_from_the_last_event_it_saw_and_stops_at_an_error() {
        let modified = br#"{"type":"MODIFIED","object":{"kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"41"}}}
"#;
        assert_eq!(event_resource_version(modified), Ok(Some("41".into())));
        let bookmark = br#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","metadata":{"resourceVersion":"57"}}}"#;
        assert_eq!(event_resource_version(bookmark), Ok(Some("57".into())));
        let gone = br#"{"type":"ERROR","object":{"kind":"Status","status":"Failure","reason":"Expired","code":410}}"#;
        assert!(event_resource_version(gone).is_err_and(|e| e.contains("410")));
        assert!(event_resource_version(b"{\"type\":").is_err());
    }
}
