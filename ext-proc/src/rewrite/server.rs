//! `envoy.service.ext_proc.v3.ExternalProcessor` for `/apis`: the stream
//! loop. Envoy sends only the response-headers message (request headers
//! ride along as attributes; no bodies, no trailers): each one is decided
//! by [`decide`] and answered by [`response`].

use std::sync::Arc;

use envoy_types::pb::envoy::service::ext_proc::v3::{
    HttpHeaders, ProcessingRequest, ProcessingResponse, external_processor_server::ExternalProcessor,
    external_processor_server::ExternalProcessorServer, processing_request,
};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::decide::{Outcome, Pass, decide};
use super::exchange::Exchange;
use super::response;
use crate::merge::MergedDocument;
use crate::metrics::Metrics;

#[derive(Clone)]
pub struct Rewriter {
    merged: watch::Receiver<Option<Arc<MergedDocument>>>,
    metrics: Arc<Metrics>,
}

impl Rewriter {
    pub fn server(merged: watch::Receiver<Option<Arc<MergedDocument>>>, metrics: Arc<Metrics>) -> ExternalProcessorServer<Rewriter> {
        // Responses carry whole discovery documents; a CRD-heavy cluster's
        // can be several MiB.
        ExternalProcessorServer::new(Rewriter { merged, metrics })
            .max_encoding_message_size(256 << 20)
            .max_decoding_message_size(16 << 20)
    }

    fn on_response_headers(&self, h: &HttpHeaders, x: &Exchange) -> ProcessingResponse {
        if x.plan.is_none() {
            tracing::warn!("ext_proc response phase without request.headers attributes; passing the response through");
        }
        let doc = self.merged.borrow().clone();
        let outcome = decide(x, header(h, ":status").unwrap_or(""), header(h, "content-type").unwrap_or(""), doc.as_deref());
        if outcome == Outcome::Pass(Pass::NoPeer) {
            self.metrics.nopeer_request();
        }
        if outcome.served_merged() {
            self.metrics.peer_aggregated_cache_hit();
        }
        self.metrics.discovery_rewrite(outcome.result());
        response::response_headers(&outcome)
    }
}

fn header<'a>(h: &'a HttpHeaders, name: &str) -> Option<&'a str> {
    h.headers.as_ref()?.headers.iter().find(|v| v.key.eq_ignore_ascii_case(name)).and_then(|v| {
        if v.raw_value.is_empty() { Some(v.value.as_str()) } else { std::str::from_utf8(&v.raw_value).ok() }
    })
}

#[tonic::async_trait]
impl ExternalProcessor for Rewriter {
    type ProcessStream = ReceiverStream<Result<ProcessingResponse, Status>>;

    async fn process(&self, request: Request<Streaming<ProcessingRequest>>) -> Result<Response<Self::ProcessStream>, Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(4);
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                let msg = match inbound.message().await {
                    Ok(Some(m)) => m,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(error = %e, "ext_proc stream ended with an error");
                        break;
                    }
                };
                let out = match msg.request {
                    Some(processing_request::Request::ResponseHeaders(h)) => {
                        this.on_response_headers(&h, &Exchange::from_attributes(&msg.attributes))
                    }
                    // Not configured (only response headers are sent); an
                    // error makes Envoy fall back (failure_mode_allow) rather
                    // than guess.
                    other => {
                        let _ = tx
                            .send(Err(Status::failed_precondition(format!(
                                "mvp-ext-proc handles only the response-headers phase, got {:?}",
                                other.map(|o| std::mem::discriminant(&o))
                            ))))
                            .await;
                        break;
                    }
                };
                if tx.send(Ok(out)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}
