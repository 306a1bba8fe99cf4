//! `envoy.service.ext_proc.v3.ExternalProcessor` for `/apis`,
//! `/openapi/v2` and `/openapi/v3`: the per-phase handler. Envoy sends only the response-headers message
//! (request headers ride along as attributes; no bodies, no trailers): each
//! one is decided by [`decide`] and answered by [`response`], on the
//! [`super::stream`] loop.

use std::sync::Arc;

use envoy_types::pb::envoy::service::ext_proc::v3::{HttpHeaders, ProcessingRequest, processing_request};
use tokio::sync::watch;
use tonic::{Status, Streaming};

use super::decide::{Outcome, Pass, decide};
use super::exchange::{Exchange, Target};
use super::service::{ExternalProcessorServer, Outgoing, Processor};
use super::openapi::{Upstream, decide_v2, decide_v3_index};
use super::response;
use super::stream::{Responses, answer_each};
use crate::merge::MergedDocument;
use crate::metrics::Metrics;
use crate::openapi::MergedOpenApi;

#[derive(Clone)]
pub struct Rewriter {
    merged: watch::Receiver<Option<Arc<MergedDocument>>>,
    openapi: watch::Receiver<Arc<MergedOpenApi>>,
    metrics: Arc<Metrics>,
}

impl Rewriter {
    pub fn server(
        merged: watch::Receiver<Option<Arc<MergedDocument>>>,
        openapi: watch::Receiver<Arc<MergedOpenApi>>,
        metrics: Arc<Metrics>,
    ) -> ExternalProcessorServer<Rewriter> {
        // Responses carry whole discovery and OpenAPI documents; a
        // CRD-heavy cluster's can be tens of MiB.
        ExternalProcessorServer::new(Rewriter { merged, openapi, metrics }, 16 << 20, 256 << 20)
    }

    fn on_response_headers(&self, h: &HttpHeaders, x: &Exchange) -> Vec<Outgoing> {
        if x.plan.is_none() {
            tracing::warn!("ext_proc response phase without request.headers attributes; passing the response through");
        }
        let (status, content_type) = (header(h, ":status").unwrap_or(""), header(h, "content-type").unwrap_or(""));
        let upstream = Upstream { status, content_type, etag: header(h, "etag") };
        let (doc, openapi);
        let outcome = match x.target {
            Target::Apis => {
                doc = self.merged.borrow().clone();
                decide(x, status, content_type, doc.as_deref())
            }
            Target::OpenApiV2 => {
                openapi = self.openapi.borrow().clone();
                decide_v2(x, &upstream, &openapi)
            }
            Target::OpenApiV3Index => {
                openapi = self.openapi.borrow().clone();
                decide_v3_index(x, &upstream, &openapi)
            }
        };
        if outcome == Outcome::Pass(Pass::NoPeer) {
            self.metrics.nopeer_request();
        }
        if outcome.served_merged() && x.target == Target::Apis {
            self.metrics.peer_aggregated_cache_hit();
        }
        self.metrics.discovery_rewrite(x.target.label(), outcome.result());
        response::answer(&outcome)
    }
}

fn header<'a>(h: &'a HttpHeaders, name: &str) -> Option<&'a str> {
    h.headers.as_ref()?.headers.iter().find(|v| v.key.eq_ignore_ascii_case(name)).and_then(|v| {
        if v.raw_value.is_empty() { Some(v.value.as_str()) } else { std::str::from_utf8(&v.raw_value).ok() }
    })
}

impl Processor for Rewriter {
    /// Not before the first merged `/apis`: a replica restarted faster than
    /// Envoy's health check noticed gets exchanges at once, and answering
    /// them with the apiserver's own document (nothing merged yet) would
    /// reach the client — the fallback filter never asks again an answered
    /// exchange. `UNAVAILABLE` sends the stream to another replica instead
    /// (measured: 2 of ~800 `/apis` in a restart on a loaded machine).
    fn ready(&self) -> Result<(), Status> {
        match self.merged.borrow().is_some() {
            true => Ok(()),
            false => Err(Status::unavailable("mvp-ext-proc has no merged discovery document yet")),
        }
    }

    fn process(&self, inbound: Streaming<ProcessingRequest>) -> Responses<Outgoing> {
        let this = self.clone();
        answer_each(inbound, move |msg| match msg.request {
            Some(processing_request::Request::ResponseHeaders(h)) => {
                Ok(this.on_response_headers(&h, &Exchange::from_attributes(&msg.attributes)))
            }
            // Not configured (only response headers are sent); an error makes
            // Envoy fall back (failure_mode_allow) rather than guess.
            other => Err(Status::failed_precondition(format!(
                "mvp-ext-proc handles only the response-headers phase, got {:?}",
                other.map(|o| std::mem::discriminant(&o))
            ))),
        })
    }
}
