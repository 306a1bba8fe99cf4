//! What a cluster sends besides its watches, during the scale part's
//! windows: each node renews its Lease every 10 s and patches its Node's
//! status every minute (a kubelet's defaults, `--node-status-update-frequency`
//! aside), each on its own connection and at its own offset, and a few
//! controllers list what they reconcile every few seconds (one connection
//! each). Counted, and every answer must be a 200: a door that failed them
//! fails the round.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::scale::Node;

const LEASE_EVERY: Duration = Duration::from_secs(10);
const STATUS_EVERY: Duration = Duration::from_secs(60);
const LIST_EVERY: Duration = Duration::from_secs(5);
/// The controllers' lists: what the node lifecycle, endpointslice and
/// scheduler loops read.
const LISTS: [&str; 3] = ["/api/v1/nodes", "/apis/discovery.k8s.io/v1/endpointslices", "/api/v1/pods"];

/// The traffic running, until [`Traffic::stop`].
pub struct Traffic {
    pub requests: Arc<AtomicU64>,
    pub failed: Arc<AtomicU64>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Traffic {
    /// Starts it over the nodes' own connections; the controllers' through
    /// the first node's door.
    pub fn start(nodes: &[Node]) -> Traffic {
        let (stop, stopped) = watch::channel(false);
        let (requests, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let count = |requests: &Arc<AtomicU64>, failed: &Arc<AtomicU64>| {
            let (requests, failed) = (requests.clone(), failed.clone());
            move |ok: bool| {
                requests.fetch_add(1, Ordering::Relaxed);
                if !ok {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        };
        let total = nodes.len().max(1) as u32;
        let mut tasks = Vec::new();
        for (n, (client, _, base)) in nodes.iter().enumerate() {
            let (client, base, mut stopped, record) = (client.clone(), base.clone(), stopped.clone(), count(&requests, &failed));
            // Spread over the period, as nodes that started at different times.
            let offset = LEASE_EVERY * n as u32 / total;
            tasks.push(tokio::spawn(async move {
                let lease = format!("{base}/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-{n}");
                let status = format!("{base}/api/v1/nodes/node-{n}/status");
                let body = serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": format!("node-{n}")}});
                let mut next_status = tokio::time::Instant::now() + offset + STATUS_EVERY * n as u32 / total;
                let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + offset, LEASE_EVERY);
                loop {
                    tokio::select! {
                        _ = stopped.wait_for(|s| *s) => return,
                        _ = ticks.tick() => {}
                    }
                    let ok = client.put(&lease).json(&body).send().await.is_ok_and(|r| r.status() == 200);
                    record(ok);
                    if tokio::time::Instant::now() >= next_status {
                        next_status += STATUS_EVERY;
                        let patch = client
                            .patch(&status)
                            .header("content-type", "application/strategic-merge-patch+json")
                            .body(r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#)
                            .send()
                            .await;
                        record(patch.is_ok_and(|r| r.status() == 200));
                    }
                }
            }));
        }
        if let Some((_, _, base)) = nodes.first() {
            for (i, path) in LISTS.iter().enumerate() {
                let (url, mut stopped, record) = (format!("{base}{path}"), stopped.clone(), count(&requests, &failed));
                let client = reqwest::Client::builder().no_proxy().http2_prior_knowledge().build().unwrap_or_default();
                let offset = LIST_EVERY * i as u32 / LISTS.len() as u32;
                tasks.push(tokio::spawn(async move {
                    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + offset, LIST_EVERY);
                    loop {
                        tokio::select! {
                            _ = stopped.wait_for(|s| *s) => return,
                            _ = ticks.tick() => {}
                        }
                        let ok = match client.get(&url).send().await {
                            Ok(r) => r.status() == 200 && r.bytes().await.is_ok(),
                            Err(_) => false,
                        };
                        record(ok);
                    }
                }));
            }
        }
        Traffic { requests, failed, stop, tasks }
    }

    /// Stops it; the requests sent and those not answered 200.
    pub async fn stop(self) -> (u64, u64) {
        let _ = self.stop.send(true);
        futures::future::join_all(self.tasks).await;
        (self.requests.load(Ordering::Relaxed), self.failed.load(Ordering::Relaxed))
    }
}
