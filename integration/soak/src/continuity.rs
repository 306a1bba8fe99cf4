//! Watch continuity across apiserver stops, followed the way a client-go
//! reflector follows a collection: list once, then watch from the last
//! `resourceVersion` seen; when a watch ends (its apiserver shut down, or
//! its timeout), watch again from there through the same front door; a
//! `410 Gone` (that version is no longer in the server's window) forces a
//! relist, counted. An object created while the follower runs and never
//! delivered by a watch is an event lost across a stop.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// What the follower saw.
#[derive(Default)]
pub struct Followed {
    /// Names delivered as `ADDED` by a watch.
    pub watched: Mutex<BTreeSet<String>>,
    /// Names the first list showed (there before the first watch).
    pub listed_first: Mutex<BTreeSet<String>>,
    /// Names only a relist (after `410 Gone`) showed.
    pub relisted: Mutex<BTreeSet<String>>,
    /// Watches that ended and were started again from the last version.
    pub resumed: AtomicU64,
    /// `410 Gone`: the follower had to list again.
    pub relists: AtomicU64,
    /// Watch requests that got no stream (an error status or no answer).
    pub failed_watches: AtomicU64,
}

/// Where and as whom the follower reads.
#[derive(Clone)]
pub struct Target {
    pub client: reqwest::Client,
    /// `https://host:port` of the front door.
    pub base: String,
    /// The collection path, e.g. `/api/v1/namespaces/default/configmaps`.
    pub collection: String,
    pub label_selector: String,
    pub token: String,
}

/// Follows `target` until `stop`.
pub fn follow(target: Target, stop: Arc<AtomicBool>) -> (Arc<Followed>, tokio::task::JoinHandle<()>) {
    let followed = Arc::new(Followed::default());
    let out = followed.clone();
    let task = tokio::spawn(async move {
        let mut rv = None;
        while !stop.load(Ordering::Relaxed) {
            let from = match rv.clone() {
                Some(v) => v,
                None => match list(&target, &out).await {
                    Some(v) => v,
                    None => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            rv = watch(&target, &from, &out, &stop).await;
        }
    });
    (followed, task)
}

/// Lists the collection; its `resourceVersion`. Names are recorded as
/// relisted when no watch delivered them.
async fn list(t: &Target, out: &Followed) -> Option<String> {
    let url = format!("{}{}?labelSelector={}", t.base, t.collection, t.label_selector);
    let v: Value = t.client.get(url).bearer_auth(&t.token).send().await.ok()?.json().await.ok()?;
    let watched = out.watched.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut first = out.listed_first.lock().unwrap_or_else(|p| p.into_inner());
    let mut relisted = out.relisted.lock().unwrap_or_else(|p| p.into_inner());
    let relist = out.relists.load(Ordering::Relaxed) > 0;
    for item in v["items"].as_array()? {
        if let Some(n) = item["metadata"]["name"].as_str()
            && !watched.contains(n)
        {
            if relist { relisted.insert(n.to_string()) } else { first.insert(n.to_string()) };
        }
    }
    v["metadata"]["resourceVersion"].as_str().map(str::to_string)
}

/// One watch from `from`; the version to resume from, or `None` to relist.
async fn watch(t: &Target, from: &str, out: &Followed, stop: &AtomicBool) -> Option<String> {
    let url = format!("{}{}?watch=1&allowWatchBookmarks=true&resourceVersion={from}&labelSelector={}&timeoutSeconds=300", t.base, t.collection, t.label_selector);
    let mut resp = match t.client.get(url).bearer_auth(&t.token).send().await {
        Ok(r) if r.status().is_success() => r,
        Ok(r) if r.status().as_u16() == 410 => {
            out.relists.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        _ => {
            out.failed_watches.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(100)).await;
            return Some(from.to_string());
        }
    };
    let mut rv = from.to_string();
    let mut buf = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let chunk = match tokio::time::timeout(Duration::from_millis(500), resp.chunk()).await {
            Err(_) => continue,
            Ok(Ok(Some(c))) => c,
            Ok(_) => break,
        };
        buf.extend_from_slice(&chunk);
        while let Some(at) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=at).collect();
            let Ok(event) = serde_json::from_slice::<Value>(&line) else { continue };
            let object = &event["object"];
            match event["type"].as_str() {
                Some("ERROR") if object["code"] == 410 => {
                    out.relists.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
                Some("ADDED") => {
                    if let Some(n) = object["metadata"]["name"].as_str() {
                        out.watched.lock().unwrap_or_else(|p| p.into_inner()).insert(n.to_string());
                    }
                }
                _ => {}
            }
            if let Some(v) = object["metadata"]["resourceVersion"].as_str() {
                rv = v.to_string();
            }
        }
    }
    out.resumed.fetch_add(1, Ordering::Relaxed);
    Some(rv)
}

/// Creates `body(n)` in `target`'s collection every `period` until `stop`;
/// the names of those created (a 2xx answer).
pub fn create_every(target: Target, period: Duration, body: fn(u64) -> Value, stop: Arc<AtomicBool>) -> (Arc<Mutex<BTreeSet<String>>>, tokio::task::JoinHandle<()>) {
    let created = Arc::new(Mutex::new(BTreeSet::new()));
    let out = created.clone();
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            n += 1;
            let object = body(n);
            let url = format!("{}{}", target.base, target.collection);
            let Ok(r) = target.client.post(url).bearer_auth(&target.token).json(&object).send().await else { continue };
            if r.status().is_success()
                && let Some(name) = object["metadata"]["name"].as_str()
            {
                out.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_string());
            }
        }
    });
    (created, task)
}

/// Watch continuity over a run.
#[derive(Debug)]
pub struct Summary {
    pub created: usize,
    /// Created, never delivered by a watch…
    pub lost: usize,
    /// …of which a relist showed.
    pub relisted: usize,
    /// Watches ended (server stops, timeouts) and resumed from their last
    /// version.
    pub resumed: u64,
    /// `410 Gone`: had to list again.
    pub relists: u64,
    pub failed_watches: u64,
}

impl Summary {
    pub fn of(created: &BTreeSet<String>, followed: &Followed) -> Summary {
        let watched = followed.watched.lock().unwrap_or_else(|p| p.into_inner());
        let first = followed.listed_first.lock().unwrap_or_else(|p| p.into_inner());
        let relisted = followed.relisted.lock().unwrap_or_else(|p| p.into_inner());
        // There before the first watch: the first list is how it is seen.
        let lost: Vec<&String> = created.iter().filter(|n| !watched.contains(*n) && !first.contains(*n)).collect();
        Summary {
            created: created.len(),
            lost: lost.len(),
            relisted: lost.iter().filter(|n| relisted.contains(**n)).count(),
            resumed: followed.resumed.load(Ordering::Relaxed),
            relists: followed.relists.load(Ordering::Relaxed),
            failed_watches: followed.failed_watches.load(Ordering::Relaxed),
        }
    }
}
