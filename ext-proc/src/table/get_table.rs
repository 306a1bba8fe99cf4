//! table → publish: serves `mvp.routing.v1.RoutingTableService` to the wasm
//! refresher in Envoy.
//!
//! A long poll: a refresher that holds the current table is answered when
//! the next one is published (or after the `wait_ms` it allows), so a new
//! table reaches every Envoy in milliseconds, not at its next poll — the
//! window in which a server that just became ready, or a member that just
//! opened, is not routed to yet. A held call ends at the graceful stop with
//! `UNAVAILABLE`; the refresher asks again (the restarted process or another
//! replica) at its poll interval.
//!
//! Each table version's answer is encoded once, by the first fetch that
//! needs it, and every later fetch of that version (one per Envoy) sends the
//! same bytes. tonic's generated server wants an owned `GetTableResponse` per
//! call: a deep copy of the whole table per fetch, encoded again each time —
//! at CRD scale thousands of groups of strings, copied and dropped on the
//! runtime that answers ext_proc, beside the merge of the same change (`perf`
//! during the benchmark's 3,000-CRD rebuilds found it there). So this one
//! method is served by hand: tonic still frames the message, applies the
//! size limit and writes the status; the message is the held encoding.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{BufMut, Bytes};
use mvp_protos::routing::v1 as pb;
use tokio::sync::watch;
use tonic::codec::{Codec, EncodeBuf, Encoder};
use tonic::codegen::{Body as HttpBody, BoxFuture, Service, StdError, http};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status};

use crate::metrics::Metrics;
use crate::stopping::Stopping;

const SERVICE: &str = "mvp.routing.v1.RoutingTableService";

pub struct TableService {
    table: watch::Receiver<Arc<pb::RoutingTable>>,
    metrics: Arc<Metrics>,
    stopping: Stopping,
    /// The encoded `GetTableResponse` carrying the table of that version.
    encoded: Mutex<Option<(u64, Bytes)>>,
    /// Calls held now, and the most there may be
    /// (`mvp_contract::limits::MAX_HELD_TABLE_CALLS` by default).
    held: AtomicUsize,
    max_held: usize,
}

/// One held call, counted while it lives.
struct HeldCall<'a>(&'a AtomicUsize);

impl Drop for HeldCall<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `GetTableResponse { waited: true }`: nothing newer after the whole wait.
const WAITED: &[u8] = &[0x10, 0x01];

impl TableService {
    /// `max_held`: calls held at once at most (`--max-held-table-calls`).
    pub fn server(table: watch::Receiver<Arc<pb::RoutingTable>>, metrics: Arc<Metrics>, stopping: Stopping, max_held: usize) -> TableServer {
        TableServer(Arc::new(TableService { table, metrics, stopping, encoded: Mutex::new(None), held: AtomicUsize::new(0), max_held }))
    }

    /// The encoded answer to a refresher that holds `known_version`, once
    /// there is a newer table or `wait` has passed.
    async fn answer(&self, known_version: u64, wait: Duration) -> Result<Bytes, Status> {
        let wait = wait.min(Duration::from_millis(u64::from(mvp_contract::limits::MAX_TABLE_WAIT_MS)));
        // Past the bound a call is answered at once: nothing is held for it.
        let _held = if wait.is_zero() {
            None
        } else {
            if self.held.fetch_add(1, Ordering::AcqRel) >= self.max_held {
                self.held.fetch_sub(1, Ordering::AcqRel);
                return self.encoded_answer(known_version, false);
            }
            Some(HeldCall(&self.held))
        };
        let mut table = self.table.clone();
        let newer = |t: &pb::RoutingTable| t.version != 0 && t.version != known_version;
        let held = tokio::time::timeout(wait, table.wait_for(|t| newer(t)));
        let stopped = self.stopping.clone().stopped();
        let waited = tokio::select! {
            // Ok(Err): the publisher is gone — the process is stopping.
            r = held => r.is_err(),
            () = stopped => {
                self.metrics.table_request("unavailable");
                return Err(Status::unavailable("stopping: ask again"));
            }
        };
        self.encoded_answer(known_version, waited && !wait.is_zero())
    }

    fn encoded_answer(&self, known_version: u64, waited: bool) -> Result<Bytes, Status> {
        let current = self.table.borrow().clone();
        if current.version == 0 {
            self.metrics.table_request("unavailable");
            return Err(Status::unavailable("no routing table yet: the first discovery round is still running"));
        }
        if known_version == current.version {
            self.metrics.table_request("current");
            // `table` unset: an empty message, or `waited` alone.
            return Ok(if waited { Bytes::from_static(WAITED) } else { Bytes::new() });
        }
        self.metrics.table_request("sent");
        // Held while encoding, so concurrent first fetches of a new version
        // encode it once; a poisoned lock only means an encode panicked.
        let mut held = self.encoded.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, bytes)) = held.as_ref().filter(|(v, _)| *v == current.version) {
            return Ok(bytes.clone());
        }
        let bytes = encode_response(&current);
        *held = Some((current.version, bytes.clone()));
        Ok(bytes)
    }
}

/// `GetTableResponse { table: Some(table) }` as prost would encode it,
/// without copying the table into an owned message first.
fn encode_response(table: &pb::RoutingTable) -> Bytes {
    let mut buf = Vec::with_capacity(prost::encoding::message::encoded_len(1, table));
    prost::encoding::message::encode(1, table, &mut buf);
    Bytes::from(buf)
}

/// The service as tonic's router mounts it.
#[derive(Clone)]
pub struct TableServer(Arc<TableService>);

impl NamedService for TableServer {
    const NAME: &'static str = SERVICE;
}

impl<B> Service<http::Request<B>> for TableServer
where
    B: HttpBody + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != mvp_contract::envoy::GET_TABLE_PATH {
            return Box::pin(async { Ok(Status::unimplemented("only GetTable is served").into_http()) });
        }
        let method = GetTable(self.0.clone());
        Box::pin(async move {
            // The refresher accepts tables up to this size; a larger one
            // fails here (tonic: OUT_OF_RANGE) instead of being cut there.
            let mut grpc =
                Grpc::new(HeldCodec).apply_max_message_size_config(None, Some(mvp_contract::limits::MAX_TABLE_BYTES));
            Ok(grpc.unary(method, req).await)
        })
    }
}

struct GetTable(Arc<TableService>);

impl UnaryService<pb::GetTableRequest> for GetTable {
    type Response = Bytes;
    type Future = BoxFuture<Response<Bytes>, Status>;

    fn call(&mut self, request: Request<pb::GetTableRequest>) -> Self::Future {
        let service = self.0.clone();
        let pb::GetTableRequest { known_version, wait_ms } = *request.get_ref();
        Box::pin(async move { service.answer(known_version, Duration::from_millis(u64::from(wait_ms))).await.map(Response::new) })
    }
}

/// Requests decoded by prost; answers are already-encoded messages.
struct HeldCodec;

impl Codec for HeldCodec {
    type Encode = Bytes;
    type Decode = pb::GetTableRequest;
    type Encoder = HeldEncoder;
    type Decoder = tonic_prost::ProstDecoder<pb::GetTableRequest>;

    fn encoder(&mut self) -> HeldEncoder {
        HeldEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstDecoder::default()
    }
}

struct HeldEncoder;

impl Encoder for HeldEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::routing_table_service_client::RoutingTableServiceClient;
    use prost::Message;

    fn table(version: u64, groups: usize) -> pb::RoutingTable {
        pb::RoutingTable {
            version,
            apiservers: vec![pb::Apiserver { name: "a".into(), address: "127.0.0.1:1".into(), healthy: true, ..Default::default() }],
            groups: (0..groups)
                .map(|i| pb::GroupRoute {
                    group: format!("g{i}.example.com"),
                    servers: 1,
                    versions: vec![pb::VersionRoute {
                        version: "v1".into(),
                        servers: 1,
                        resources: vec![pb::ResourceRoute { resource: "things".into(), servers: 1, subresources: vec![] }],
                    }],
                })
                .collect(),
            openapi_v3: vec![pb::OpenApiV3Route { key: "".into(), servers: 1 }],
            newest_release: String::new(),
        }
    }

    #[test]
    fn the_held_answer_is_what_prost_encodes_for_the_message() {
        let t = table(3, 40);
        let want = pb::GetTableResponse { table: Some(t.clone()), waited: false }.encode_to_vec();
        assert_eq!(encode_response(&t).as_ref(), want.as_slice());
        assert_eq!(pb::GetTableResponse::default().encode_to_vec(), Vec::<u8>::new(), "a current refresher gets an empty message");
    }

    fn service(rx: watch::Receiver<Arc<pb::RoutingTable>>, stopping: Stopping) -> Arc<TableService> {
        Arc::new(TableService { table: rx, metrics: Metrics::new(), stopping, encoded: Mutex::new(None), held: AtomicUsize::new(0), max_held: 2 })
    }

    const NOW: Duration = Duration::ZERO;

    #[tokio::test]
    async fn a_version_is_encoded_once_and_a_new_version_replaces_it() {
        let (tx, rx) = watch::channel(Arc::new(pb::RoutingTable::default()));
        let service = service(rx, Stopping::never());
        assert_eq!(service.answer(0, NOW).await.unwrap_err().code(), tonic::Code::Unavailable);
        tx.send_replace(Arc::new(table(5, 3)));
        let first = service.answer(0, NOW).await.unwrap();
        let again = service.answer(4, NOW).await.unwrap();
        assert_eq!(first.as_ptr(), again.as_ptr(), "the second fetch of version 5 sends the held bytes");
        assert!(service.answer(5, NOW).await.unwrap().is_empty());
        tx.send_replace(Arc::new(table(6, 4)));
        let next = service.answer(5, NOW).await.unwrap();
        assert_eq!(pb::GetTableResponse::decode(next).unwrap().table, Some(table(6, 4)));
    }

    /// At most `max_held` calls are held (2 here); one more is answered at
    /// once, as a call that allows no wait; a held one that ends frees its
    /// place.
    #[tokio::test(start_paused = true)]
    async fn calls_past_the_bound_are_answered_at_once() {
        let (tx, rx) = watch::channel(Arc::new(table(5, 1)));
        let service = service(rx, Stopping::never());
        let wait = Duration::from_secs(20);
        let hold = |known: u64| {
            let s = service.clone();
            tokio::spawn(async move { s.answer(known, wait).await })
        };
        let (a, b) = (hold(5), hold(5));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!a.is_finished() && !b.is_finished(), "both held");
        let started = tokio::time::Instant::now();
        let third = service.answer(5, wait).await.unwrap();
        assert_eq!((started.elapsed(), third.len()), (Duration::ZERO, 0), "answered at once: current, not waited");
        tx.send_replace(Arc::new(table(6, 1)));
        let (_, _) = (a.await.unwrap().unwrap(), b.await.unwrap().unwrap());
        assert_eq!(service.held.load(Ordering::Acquire), 0, "every place freed");
        let held_again = hold(6);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!held_again.is_finished(), "held again once places are free");
    }

    /// The long poll: held while there is nothing newer, answered the
    /// moment there is; `waited` after the whole wait; ended by the stop.
    #[tokio::test(start_paused = true)]
    async fn a_held_call_is_answered_by_the_next_publish_or_after_the_wait() {
        let (tx, rx) = watch::channel(Arc::new(pb::RoutingTable::default()));
        let (stop, stopping) = crate::stopping::Stop::new();
        let service = service(rx, stopping);
        let wait = Duration::from_secs(20);

        // Before the first table too: the refresher gets it when it exists.
        let first = tokio::spawn({
            let s = service.clone();
            async move { s.answer(0, wait).await }
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!first.is_finished(), "held: there is no table yet");
        tx.send_replace(Arc::new(table(5, 1)));
        let got = first.await.unwrap().unwrap();
        assert_eq!(pb::GetTableResponse::decode(got).unwrap().table, Some(table(5, 1)));

        let started = tokio::time::Instant::now();
        let held = tokio::spawn({
            let s = service.clone();
            async move { s.answer(5, wait).await }
        });
        tokio::time::sleep(Duration::from_secs(3)).await;
        // The same version again (a rebuild with equal content) is nothing new.
        tx.send_replace(Arc::new(table(5, 1)));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!held.is_finished());
        tx.send_replace(Arc::new(table(6, 2)));
        let got = held.await.unwrap().unwrap();
        assert_eq!(started.elapsed(), Duration::from_secs(4), "answered at the publish");
        assert_eq!(pb::GetTableResponse::decode(got).unwrap().table, Some(table(6, 2)));

        let started = tokio::time::Instant::now();
        let waited = pb::GetTableResponse::decode(service.answer(6, wait).await.unwrap()).unwrap();
        assert_eq!(started.elapsed(), wait);
        assert_eq!(waited, pb::GetTableResponse { table: None, waited: true });
        let capped = tokio::time::Instant::now();
        service.answer(6, Duration::from_secs(3600)).await.unwrap();
        assert_eq!(capped.elapsed(), Duration::from_millis(u64::from(mvp_contract::limits::MAX_TABLE_WAIT_MS)));
        assert!(service.answer(6, NOW).await.unwrap().is_empty(), "no wait asked: not `waited`");

        let held = tokio::spawn({
            let s = service.clone();
            async move { s.answer(6, wait).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.stop();
        assert_eq!(held.await.unwrap().unwrap_err().code(), tonic::Code::Unavailable, "the stop ends a held call");
    }

    /// Through tonic's client, as `ext-proc-router` and any gRPC client
    /// fetch it: the generated message decodes, limits and errors included.
    #[tokio::test]
    async fn a_grpc_client_gets_the_table_the_current_marker_and_errors() {
        let (tx, rx) = watch::channel(Arc::new(pb::RoutingTable::default()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tonic::transport::Server::builder()
            .add_service(TableService::server(rx, Metrics::new(), Stopping::never(), mvp_contract::limits::MAX_HELD_TABLE_CALLS))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
        tokio::spawn(server);
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
        let mut client = RoutingTableServiceClient::new(channel);
        let err = client.get_table(pb::GetTableRequest { known_version: 0, wait_ms: 0 }).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unavailable);
        assert!(err.message().contains("first discovery round"), "{err:?}");

        tx.send_replace(Arc::new(table(9, 1000)));
        let got = client.get_table(pb::GetTableRequest { known_version: 0, wait_ms: 0 }).await.unwrap().into_inner();
        assert_eq!(got.table, Some(table(9, 1000)));
        let current = client.get_table(pb::GetTableRequest { known_version: 9, wait_ms: 0 }).await.unwrap().into_inner();
        assert_eq!(current.table, None);

        // Larger than the refresher accepts: an error, not a cut message.
        let mut huge = table(10, 1);
        huge.groups[0].group = "x".repeat(mvp_contract::limits::MAX_TABLE_BYTES);
        tx.send_replace(Arc::new(huge));
        let err = client.get_table(pb::GetTableRequest { known_version: 9, wait_ms: 0 }).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::OutOfRange, "{err:?}");
        assert!(err.message().contains("too large"), "{err:?}");
    }
}
