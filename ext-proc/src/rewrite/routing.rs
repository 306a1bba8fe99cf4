//! ext_proc routing: the wasm filter's per-request decision made in this
//! process instead, one gRPC round trip per request. It exists to measure
//! the design mvp-envoy chose not to ship (BENCHMARKS.md, variant 5); the
//! front door routes in the wasm filter.

use std::sync::{Arc, Mutex};

use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::{ProcessingMode, processing_mode::HeaderSendMode};
use envoy_types::pb::envoy::service::ext_proc::v3::{CommonResponse, HeaderMutation, HeadersResponse, ProcessingResponse, processing_response};
use mvp_protos::routing::v1 as pb;
use mvp_wasm_filter::table::RouteTable;
use tokio::sync::watch;

use super::processor::set;

/// A table indexed for one published version.
type Indexed = Option<(u64, Arc<RouteTable>)>;

/// The published table, indexed once per version.
#[derive(Clone)]
pub struct Routes {
    table: watch::Receiver<Arc<pb::RoutingTable>>,
    indexed: Arc<Mutex<Indexed>>,
    counter: Arc<std::sync::atomic::AtomicU32>,
}

impl Routes {
    pub fn new(table: watch::Receiver<Arc<pb::RoutingTable>>) -> Routes {
        Routes { table, indexed: Default::default(), counter: Default::default() }
    }

    fn current(&self) -> Option<Arc<RouteTable>> {
        let published = self.table.borrow().clone();
        let mut cache = self.indexed.lock().unwrap_or_else(|p| p.into_inner());
        match &*cache {
            Some((v, t)) if *v == published.version => Some(t.clone()),
            _ => {
                let t = Arc::new(RouteTable::from_proto(&published).ok()?);
                *cache = Some((published.version, t.clone()));
                Some(t)
            }
        }
    }

    /// The request-headers answer: the route headers when only some
    /// apiservers serve the request, and no response phase.
    pub fn route(&self, path: &str) -> ProcessingResponse {
        let mut common = CommonResponse::default();
        if let Some(table) = self.current() {
            let n = self.counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if let Some(hosts) = mvp_wasm_filter::route::decide(&table, path.as_bytes(), n) {
                // As the wasm filter: the route header only; Envoy's route
                // table adds the rest.
                common.header_mutation = Some(HeaderMutation {
                    set_headers: vec![set(crate::envoy_config::ROUTE_HEADER, hosts)],
                    ..Default::default()
                });
                common.clear_route_cache = true;
            }
        }
        ProcessingResponse {
            response: Some(processing_response::Response::RequestHeaders(HeadersResponse { response: Some(common) })),
            mode_override: Some(ProcessingMode { response_header_mode: HeaderSendMode::Skip as i32, ..Default::default() }),
            ..Default::default()
        }
    }
}
