//! One ADS stream's state and its handling of requests and pushes (the
//! protocol bookkeeping described in `ads.rs`): what each resource type
//! subscribed to, the version and nonce last sent, whether the Envoy lags
//! behind on acknowledging its endpoints.

use std::collections::HashMap;
use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use tokio::sync::mpsc;
use tonic::Status;

use super::ads::AdsServer;
use super::native_lb::{native_module, with_native_lb};
use super::{CLUSTER_TYPE, ENDPOINT_TYPE, Snapshot, kind};
use crate::sync::accepted::ACK_GRACE;

/// Per stream, per resource type.
#[derive(Default)]
pub(super) struct Subscription {
    names: Vec<String>,
    /// Version and nonce of the last response.
    sent: Option<(String, String)>,
    /// The snapshot the last response came from (to know what an ACK accepted).
    sent_from: Option<Arc<Snapshot>>,
}

pub(super) struct StreamLoop {
    pub(super) id: u64,
    pub(super) server: AdsServer,
    pub(super) out: mpsc::Sender<Result<DiscoveryResponse, Status>>,
    pub(super) subs: HashMap<String, Subscription>,
    pub(super) nonce: u64,
    pub(super) node: String,
    /// The native build's module, as the Envoy's node metadata names it:
    /// its clusters get the module's load balancer.
    pub(super) native_module: Option<String>,
    /// Since when an endpoint push has waited for its ACK.
    pub(super) unacked_since: Option<tokio::time::Instant>,
    pub(super) lagging: bool,
}

impl StreamLoop {
    /// When this stream stops counting for [`Accepted`], if it does not ACK.
    pub(super) fn lag_deadline(&self) -> Option<tokio::time::Instant> {
        self.unacked_since.filter(|_| !self.lagging).map(|t| t + ACK_GRACE)
    }

    /// Counted again (`false`) or no longer (`true`).
    pub(super) fn set_lagging(&mut self, lagging: bool, why: &str) {
        if self.lagging == lagging {
            return;
        }
        self.lagging = lagging;
        let id = self.id;
        if lagging {
            tracing::warn!(node = %self.node, why, "an Envoy has not accepted its endpoints; joining members no longer wait for it");
        } else {
            tracing::info!(node = %self.node, "the Envoy accepted its endpoints again; joining members wait for it");
        }
        self.server.metrics.xds_lagging(if lagging { 1 } else { -1 });
        self.server.update_accepted(|st| {
            if lagging {
                st.lagging.insert(id);
            } else {
                st.lagging.remove(&id);
            }
        });
    }

    pub(super) async fn send(&mut self, type_url: &str, snapshot: &Arc<Snapshot>) -> bool {
        let Some(res) = snapshot.resources(type_url) else { return true };
        let sub = self.subs.entry(type_url.to_string()).or_default();
        let items = res
            .items
            .iter()
            // Wildcard (clusters) or the named ones (endpoints).
            .filter(|(n, _)| type_url == CLUSTER_TYPE || sub.names.is_empty() || sub.names.contains(n))
            .map(|(_, a)| match &self.native_module {
                // The version stays the snapshot's: the node's variant is a
                // function of the snapshot and of metadata that a stream
                // never changes.
                Some(m) if type_url == CLUSTER_TYPE => with_native_lb(a, m).unwrap_or_else(|| a.clone()),
                _ => a.clone(),
            })
            .collect();
        self.nonce += 1;
        let nonce = self.nonce.to_string();
        sub.sent = Some((res.version.clone(), nonce.clone()));
        sub.sent_from = Some(snapshot.clone());
        if type_url == ENDPOINT_TYPE && self.unacked_since.is_none() {
            self.unacked_since = Some(tokio::time::Instant::now());
        }
        self.server.metrics.xds_push(kind(type_url));
        tracing::debug!(node = %self.node, r#type = kind(type_url), version = %res.version, "ADS push");
        let r = DiscoveryResponse { version_info: res.version.clone(), resources: items, type_url: type_url.to_string(), nonce, ..Default::default() };
        self.out.send(Ok(r)).await.is_ok()
    }

    /// Handles one request; false when the stream is gone.
    pub(super) async fn on_request(&mut self, req: DiscoveryRequest) -> bool {
        if let Some(n) = &req.node {
            self.node = n.id.clone();
            self.native_module = native_module(n);
            self.server.envoys.seen(self.id, n);
        }
        let snapshot = self.server.snapshot.borrow().clone();
        if snapshot.resources(&req.type_url).is_none() {
            tracing::debug!(node = %self.node, type_url = %req.type_url, "ADS request for a type this server does not serve; ignored");
            return true;
        }
        let sub = self.subs.entry(req.type_url.clone()).or_default();
        let names_changed = sub.names != req.resource_names;
        sub.names = req.resource_names.clone();
        let latest = sub.sent.as_ref().is_some_and(|(_, n)| *n == req.response_nonce);
        if !req.response_nonce.is_empty() && !latest {
            // Stale: answers a response already superseded.
            return true;
        }
        if latest {
            if let Some(err) = &req.error_detail {
                self.server.metrics.xds_nack(kind(&req.type_url));
                tracing::error!(
                    node = %self.node,
                    r#type = kind(&req.type_url),
                    rejected = %sub.sent.as_ref().map(|(v, _)| v.as_str()).unwrap_or(""),
                    kept = %req.version_info,
                    error = %err.message,
                    "Envoy rejected the configuration (NACK); it keeps its last accepted one"
                );
                if req.type_url == ENDPOINT_TYPE {
                    self.set_lagging(true, "rejected");
                }
                if !names_changed {
                    return true;
                }
            } else {
                let accepted = sub.sent_from.clone();
                if req.type_url == ENDPOINT_TYPE
                    && let Some(s) = accepted
                {
                    let id = self.id;
                    self.server.update_accepted(|st| {
                        st.acked.insert(id, s.addresses.clone());
                    });
                    self.unacked_since = None;
                    self.set_lagging(false, "");
                }
                if req.type_url == CLUSTER_TYPE && self.subs.contains_key(ENDPOINT_TYPE) {
                    // A changed cluster waits for its endpoints again.
                    return self.send(ENDPOINT_TYPE, &snapshot).await;
                }
                if !names_changed {
                    return true;
                }
            }
        }
        if req.type_url == ENDPOINT_TYPE && req.response_nonce.is_empty() {
            // Subscribed: this Envoy counts for [`Accepted`] from now on,
            // with the endpoints it says it has if they are the current ones.
            let id = self.id;
            let has = snapshot.resources(ENDPOINT_TYPE).filter(|r| !req.version_info.is_empty() && r.version == req.version_info).map(|_| snapshot.addresses.clone());
            self.server.update_accepted(|st| match has {
                Some(a) => {
                    st.acked.insert(id, a);
                }
                None => {
                    st.acked.entry(id).or_default();
                }
            });
        }
        self.send(&req.type_url, &snapshot).await
    }

    /// Pushes every subscribed type whose version changed.
    pub(super) async fn on_snapshot(&mut self) -> bool {
        let snapshot = self.server.snapshot.borrow().clone();
        for type_url in [CLUSTER_TYPE, ENDPOINT_TYPE] {
            let Some(sub) = self.subs.get(type_url) else { continue };
            let current = snapshot.resources(type_url).map(|r| r.version.as_str());
            if sub.sent.as_ref().map(|(v, _)| v.as_str()) != current && !self.send(type_url, &snapshot).await {
                return false;
            }
        }
        true
    }
}

