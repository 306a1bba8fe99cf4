//! The benchmark's "ext_proc routes every request" variant: the design
//! mvp-envoy chose not to ship (BENCHMARKS.md, variant 5), kept out of the
//! product. It polls mvp-ext-proc's `GetTable` like the wasm refresher, and
//! answers each ext_proc request-headers message with the filter's own
//! decision (`mvp_routing::route::decide`): the route header, and no
//! response phase.
//!
//! With `--pass-through` it is the `/apis` benchmark's ext_proc floor
//! instead: every message is answered "continue, nothing changed", so an
//! Envoy configured like production's `/apis` door pays the ext_proc round
//! trip and forwards the apiserver's own document.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption, header_value_option::HeaderAppendAction};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::{ProcessingMode, processing_mode::HeaderSendMode};
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_server::{ExternalProcessor, ExternalProcessorServer};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    CommonResponse, HeaderMutation, HeadersResponse, ProcessingRequest, ProcessingResponse, processing_request, processing_response,
};
use mvp_protos::routing::v1 as pb;
use mvp_routing::table::RouteTable;
use mvp_ext_proc::rewrite::stream::{Responses, answer_each};
use tonic::{Request, Response, Status, Streaming};

#[derive(Parser)]
struct Args {
    /// Where Envoy's ext_proc filter reaches this process.
    #[arg(long)]
    listen: SocketAddr,
    /// mvp-ext-proc's --grpc-listen (routing mode).
    #[arg(long, required_unless_present = "pass_through")]
    table_from: Option<SocketAddr>,
    /// Answer every message with "continue" (the ext_proc floor).
    #[arg(long)]
    pass_through: bool,
}

#[derive(Clone, Default)]
struct Router {
    table: Arc<RwLock<Option<Arc<RouteTable>>>>,
    counter: Arc<AtomicU32>,
    pass_through: bool,
}

/// "Continue, nothing changed" for the phase of `msg`.
fn pass(msg: &ProcessingRequest) -> Result<ProcessingResponse, Status> {
    use processing_request::Request as In;
    use processing_response::Response as Out;
    let unchanged = || HeadersResponse { response: None };
    let response = match &msg.request {
        Some(In::RequestHeaders(_)) => Out::RequestHeaders(unchanged()),
        Some(In::ResponseHeaders(_)) => Out::ResponseHeaders(unchanged()),
        _ => return Err(Status::failed_precondition("only header phases are configured")),
    };
    Ok(ProcessingResponse { response: Some(response), ..Default::default() })
}

impl Router {
    fn route(&self, path: &str) -> ProcessingResponse {
        let mut common = CommonResponse::default();
        let table = self.table.read().ok().and_then(|t| t.clone());
        if let Some(table) = table {
            let n = self.counter.fetch_add(1, Ordering::Relaxed);
            if let Some(hosts) = mvp_routing::route::decide(&table, path.as_bytes(), n) {
                common.header_mutation = Some(HeaderMutation {
                    set_headers: vec![HeaderValueOption {
                        header: Some(HeaderValue {
                            key: mvp_contract::headers::ROUTE.into(),
                            value: String::new(),
                            raw_value: hosts.as_bytes().to_vec(),
                        }),
                        append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
                        ..Default::default()
                    }],
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

    async fn poll(self, from: SocketAddr) {
        let mut known = 0;
        loop {
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{from}")).map(|e| e.connect_lazy());
            if let Ok(channel) = channel {
                let mut client = pb::routing_table_service_client::RoutingTableServiceClient::new(channel);
                while let Ok(resp) = client.get_table(pb::GetTableRequest { known_version: known, wait_ms: 0 }).await {
                    if let Some(t) = resp.into_inner().table
                        && let Ok(indexed) = RouteTable::from_proto(&t)
                    {
                        known = t.version;
                        if let Ok(mut slot) = self.table.write() {
                            *slot = Some(Arc::new(indexed));
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tonic::async_trait]
impl ExternalProcessor for Router {
    type ProcessStream = Responses<ProcessingResponse>;

    async fn process(&self, request: Request<Streaming<ProcessingRequest>>) -> Result<Response<Responses<ProcessingResponse>>, Status> {
        let this = self.clone();
        Ok(Response::new(answer_each(request.into_inner(), move |msg| {
            if this.pass_through {
                return Ok(vec![pass(&msg)?]);
            }
            let Some(processing_request::Request::RequestHeaders(h)) = msg.request else {
                return Err(Status::failed_precondition("only request headers are routed"));
            };
            let path = h.headers.iter().flat_map(|m| &m.headers).find(|v| v.key == ":path").map(|v| v.raw_value.as_slice());
            Ok(vec![this.route(&String::from_utf8_lossy(path.unwrap_or_default()))])
        })))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let router = Router { pass_through: args.pass_through, ..Router::default() };
    if let Some(from) = args.table_from.filter(|_| !args.pass_through) {
        tokio::spawn(router.clone().poll(from));
    }
    // TCP_NODELAY like mvp-ext-proc's listener: without it a small answer
    // can wait for the delayed ACK of the one before (Nagle), which would
    // make this floor slower than the server it is the floor of.
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(ExternalProcessorServer::new(router))
        .serve(args.listen)
        .await
        .with_context(|| format!("serving ext_proc on {}", args.listen))
}
