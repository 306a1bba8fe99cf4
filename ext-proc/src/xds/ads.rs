//! The ADS server (state of the world): each Envoy opens one stream,
//! asks for clusters (wildcard) and for the endpoints of the clusters it
//! got; every change of the [`Snapshot`] is pushed to every stream.
//!
//! Protocol bookkeeping per resource type: the version and nonce last sent.
//! A request carrying that nonce without an error is an ACK; with an error,
//! a NACK (logged, counted; Envoy keeps its last accepted configuration and
//! nothing is resent until the resources change). A request with another
//! nonce than the latest is stale and ignored; one with no nonce, or with
//! new resource names, is a (re)subscription and gets the current
//! resources. After a cluster change is ACKed the endpoints are sent again:
//! Envoy re-subscribes a changed cluster's endpoints with names it already
//! has, and would otherwise wait for them.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use futures::Stream;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::acks::Streams;
use super::ads_stream::StreamLoop;
use super::envoys::ConnectedEnvoys;
use crate::sync::accepted::Accepted;
use super::{ENDPOINT_TYPE, Snapshot};
use crate::metrics::Metrics;
use mvp_contract::limits::MAX_ADS_STREAMS;
use crate::stopping::Stopping;

#[derive(Clone)]
pub struct AdsServer {
    pub(super) snapshot: watch::Receiver<Arc<Snapshot>>,
    pub(super) streams: Arc<Mutex<Streams>>,
    pub(super) accepted: Arc<watch::Sender<Accepted>>,
    pub(super) next_id: Arc<AtomicU64>,
    pub(super) metrics: Arc<Metrics>,
    /// Streams end at the stop (`UNAVAILABLE`): a graceful stop would
    /// otherwise wait on Envoy, whose subscription never ends on its own.
    pub(super) stopping: Stopping,
    /// Streams end after about this long (`--ads-max-stream-age`).
    pub(super) max_age: Option<Duration>,
    /// Who is connected, for `/table`; admits streams up to `max_streams`
    /// ([`MAX_ADS_STREAMS`] unless set).
    pub(super) envoys: ConnectedEnvoys,
    pub(super) max_streams: usize,
}

impl AdsServer {
    pub fn new(snapshot: watch::Receiver<Arc<Snapshot>>, metrics: Arc<Metrics>) -> (AdsServer, watch::Receiver<Accepted>) {
        let (tx, rx) = watch::channel(Accepted::default());
        let s = AdsServer {
            snapshot,
            streams: Arc::default(),
            accepted: Arc::new(tx),
            next_id: Arc::new(AtomicU64::new(1)),
            metrics,
            stopping: Stopping::never(),
            max_age: None,
            envoys: ConnectedEnvoys::default(),
            max_streams: MAX_ADS_STREAMS,
        };
        (s, rx)
    }

    /// Ends every stream, open or opened later, at the stop.
    pub fn ending_streams_at(self, stopping: Stopping) -> AdsServer {
        AdsServer { stopping, ..self }
    }

    /// Ends each stream after `age` (±10 %, so Envoys that connected
    /// together do not all come back together): Envoy reconnects at once to
    /// its first healthy replica and keeps its clusters meanwhile. Without
    /// it, an Envoy that failed over keeps its stream on the standby after
    /// the preferred replica returned — Envoy never gives up a working
    /// stream. Istio's xDS server does the same (`MaxServerConnectionAge`,
    /// 30 min).
    pub fn with_max_stream_age(self, age: Option<Duration>) -> AdsServer {
        AdsServer { max_age: age.filter(|a| !a.is_zero()), ..self }
    }

    /// At most `n` streams at once (at least one).
    pub fn with_max_streams(self, n: usize) -> AdsServer {
        AdsServer { max_streams: n.max(1), ..self }
    }

    /// The Envoys connected now, and the build each runs.
    pub fn envoys(&self) -> ConnectedEnvoys {
        self.envoys.clone()
    }

    pub fn service(self) -> AggregatedDiscoveryServiceServer<AdsServer> {
        AggregatedDiscoveryServiceServer::new(self).max_encoding_message_size(16 << 20)
    }

    pub(super) fn update_accepted(&self, f: impl FnOnce(&mut Streams)) {
        let mut s = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut s);
        self.accepted.send_if_modified(|cur| {
            let next = s.accepted(cur);
            let changed = *cur != next;
            *cur = next;
            changed
        });
    }
}

/// Sleeps until `at`; never without one.
async fn until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// `age` spread over ±10 % by the stream's id (Fibonacci hashing: ids
/// that follow each other land far apart).
fn spread(age: Duration, id: u64) -> Duration {
    let unit = (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) as f64 / (1u64 << 53) as f64;
    age.mul_f64(0.9 + 0.2 * unit)
}

type AdsStream = Pin<Box<dyn Stream<Item = Result<DiscoveryResponse, Status>> + Send>>;
type DeltaStream = Pin<Box<dyn Stream<Item = Result<DeltaDiscoveryResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for AdsServer {
    type StreamAggregatedResourcesStream = AdsStream;
    type DeltaAggregatedResourcesStream = DeltaStream;

    async fn stream_aggregated_resources(&self, request: Request<Streaming<DiscoveryRequest>>) -> Result<Response<AdsStream>, Status> {
        if !self.envoys.admit(self.max_streams) {
            tracing::warn!(max = self.max_streams, "an ADS stream refused: as many are open as mvp-ext-proc serves");
            return Err(Status::resource_exhausted(format!("mvp-ext-proc serves at most {} ADS streams", self.max_streams)));
        }
        let mut inbound = request.into_inner();
        let (out, rx) = mpsc::channel(16);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut l = StreamLoop { id, server: self.clone(), out, subs: HashMap::new(), nonce: 0, node: String::new(), native_module: None, unacked_since: None, lagging: false };
        let mut snapshots = self.snapshot.clone();
        self.metrics.xds_streams(1);
        tokio::spawn(async move {
            // Nothing is answered before the first publication (see
            // `Snapshot::published`); requests wait, and an endpoint
            // subscription counts for [`Accepted`] at once, so no member
            // opens before this Envoy has acknowledged it.
            let mut held = Vec::new();
            let mut alive = true;
            while alive && !snapshots.borrow_and_update().published {
                alive = tokio::select! {
                    msg = inbound.message() => match msg {
                        Ok(Some(req)) => {
                            if req.type_url == ENDPOINT_TYPE && req.response_nonce.is_empty() {
                                l.server.update_accepted(|st| {
                                    st.acked.entry(id).or_default();
                                });
                            }
                            held.push(req);
                            true
                        }
                        _ => false,
                    },
                    changed = snapshots.changed() => changed.is_ok(),
                    () = l.server.stopping.clone().stopped() => {
                        let _ = l.out.try_send(Err(Status::unavailable("mvp-ext-proc is stopping")));
                        false
                    }
                };
            }
            for req in held {
                alive = alive && l.on_request(req).await;
            }
            let retire_at = l.server.max_age.map(|age| tokio::time::Instant::now() + spread(age, id));
            while alive {
                let lag_deadline = l.lag_deadline();
                alive = tokio::select! {
                    () = until(lag_deadline) => {
                        l.set_lagging(true, "unacknowledged past the grace");
                        true
                    }
                    msg = inbound.message() => match msg {
                        Ok(Some(req)) => l.on_request(req).await,
                        Ok(None) => false,
                        Err(e) => {
                            tracing::debug!(node = %l.node, error = %e, "ADS stream ended");
                            false
                        }
                    },
                    changed = snapshots.changed() => changed.is_ok() && l.on_snapshot().await,
                    () = until(retire_at) => {
                        tracing::info!(node = %l.node, "ADS stream reached --ads-max-stream-age; Envoy reconnects to its first healthy replica");
                        let _ = l.out.try_send(Err(Status::unavailable("ADS stream reached its maximum age; reconnect")));
                        false
                    }
                    () = l.server.stopping.clone().stopped() => {
                        // Envoy keeps its clusters and reconnects. Not
                        // awaited: a full queue must not hold the stop.
                        let _ = l.out.try_send(Err(Status::unavailable("mvp-ext-proc is stopping")));
                        false
                    }
                };
            }
            tracing::info!(node = %l.node, "ADS stream closed");
            if l.lagging {
                l.server.metrics.xds_lagging(-1);
            }
            l.server.update_accepted(|st| {
                st.acked.remove(&id);
                st.lagging.remove(&id);
            });
            l.server.envoys.gone(id);
            l.server.metrics.xds_streams(-1);
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn delta_aggregated_resources(&self, _: Request<Streaming<DeltaDiscoveryRequest>>) -> Result<Response<DeltaStream>, Status> {
        Err(Status::unimplemented("mvp-ext-proc serves state-of-the-world ADS (api_type GRPC), not delta"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ages_spread_over_ten_percent() {
        let age = Duration::from_secs(1800);
        let ages: Vec<Duration> = (1..=1000).map(|id| spread(age, id)).collect();
        assert!(ages.iter().all(|a| *a >= age.mul_f64(0.9) && *a <= age.mul_f64(1.1)));
        let (lo, hi) = (ages.iter().min().unwrap(), ages.iter().max().unwrap());
        assert!(*hi - *lo > age.mul_f64(0.19), "not spread: {lo:?}..{hi:?}");
        // Neighbouring streams (Envoys started together) are far apart.
        assert!(spread(age, 1).abs_diff(spread(age, 2)) > Duration::from_secs(60));
    }
}
