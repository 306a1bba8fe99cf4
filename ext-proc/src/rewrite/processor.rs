//! `envoy.service.ext_proc.v3.ExternalProcessor` for `/apis`: one handler
//! per phase (request headers, response headers). Envoy sends no bodies
//! (body modes NONE): the merged document replaces the apiserver's body at
//! the response-headers phase with `CONTINUE_AND_REPLACE`.

use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption, header_value_option::HeaderAppendAction};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::{ProcessingMode, processing_mode::HeaderSendMode};
use envoy_types::pb::envoy::r#type::v3::{HttpStatus, StatusCode};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    BodyMutation, CommonResponse, HeaderMutation, HeadersResponse, HttpHeaders, ImmediateResponse, ProcessingRequest,
    ProcessingResponse, body_mutation, common_response::ResponseStatus, external_processor_server::ExternalProcessor,
    external_processor_server::ExternalProcessorServer, processing_request, processing_response,
};
use envoy_types::pb::google::protobuf::{Struct, value::Kind};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::negotiate::{Format, Plan, negotiate};
use crate::merge::MergedDocument;
use crate::merge::document::{Encoded, JSON_CONTENT_TYPE, PROTOBUF_CONTENT_TYPE};
use crate::metrics::Metrics;

pub struct Rewriter {
    merged: watch::Receiver<Option<Arc<MergedDocument>>>,
    routes: super::routing::Routes,
    metrics: Arc<Metrics>,
}

impl Rewriter {
    pub fn server(
        merged: watch::Receiver<Option<Arc<MergedDocument>>>,
        routes: super::routing::Routes,
        metrics: Arc<Metrics>,
    ) -> ExternalProcessorServer<Rewriter> {
        // Responses carry whole discovery documents; a CRD-heavy cluster's
        // can be several MiB.
        ExternalProcessorServer::new(Rewriter { merged, routes, metrics })
            .max_encoding_message_size(256 << 20)
            .max_decoding_message_size(16 << 20)
    }
}

/// What the response phase needs from the request.
#[derive(Debug, Default)]
struct Exchange {
    plan: Option<Plan>,
    if_none_match: Option<String>,
    gzip: bool,
}

/// The request headers the rewrite needs, as CEL attributes Envoy attaches
/// to the response-headers message: one round trip per `/apis` request
/// instead of two.
pub const REQUEST_ATTRIBUTES: [&str; 3] =
    ["request.headers['accept']", "request.headers['if-none-match']", "request.headers['accept-encoding']"];

/// `None` when Envoy sent no attributes at all (misconfigured); absent
/// headers are simply missing from the list.
fn request_headers(attributes: &std::collections::HashMap<String, Struct>) -> Option<Vec<(String, String)>> {
    let fields = &attributes.get("envoy.filters.http.ext_proc")?.fields;
    Some(
        REQUEST_ATTRIBUTES
            .iter()
            .filter_map(|attr| {
                let name = attr.strip_prefix("request.headers['")?.strip_suffix("']")?;
                match fields.get(*attr)?.kind.as_ref()? {
                    Kind::StringValue(v) => Some((name.to_string(), v.clone())),
                    _ => None,
                }
            })
            .collect(),
    )
}

impl Exchange {
    fn from_headers(accept: Option<&str>, if_none_match: Option<&str>, accept_encoding: Option<&str>) -> Exchange {
        Exchange {
            plan: Some(negotiate(accept)),
            if_none_match: if_none_match.map(str::to_string),
            gzip: wants_gzip(accept_encoding),
        }
    }

    fn from_attributes(attributes: &std::collections::HashMap<String, Struct>) -> Exchange {
        let Some(h) = request_headers(attributes) else {
            tracing::warn!(?attributes, "ext_proc response phase without request.headers; passing the response through");
            return Exchange::default();
        };
        let get = |name: &str| h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        Exchange::from_headers(get("accept"), get("if-none-match"), get("accept-encoding"))
    }
}

fn header<'a>(h: &'a HttpHeaders, name: &str) -> Option<&'a str> {
    h.headers.as_ref()?.headers.iter().find(|v| v.key.eq_ignore_ascii_case(name)).and_then(|v| {
        if v.raw_value.is_empty() { Some(v.value.as_str()) } else { std::str::from_utf8(&v.raw_value).ok() }
    })
}

/// A header to set (overwriting), for ext_proc header mutations.
pub(super) fn set(key: &str, value: impl Into<Vec<u8>>) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue { key: key.into(), value: String::new(), raw_value: value.into() }),
        append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
        ..Default::default()
    }
}

fn wants_gzip(accept_encoding: Option<&str>) -> bool {
    accept_encoding.is_some_and(|ae| {
        ae.split(',').any(|c| {
            let mut p = c.split(';').map(str::trim);
            p.next().is_some_and(|t| t.eq_ignore_ascii_case("gzip")) && !p.any(|q| q.replace(' ', "") == "q=0")
        })
    })
}

fn headers_response(common: CommonResponse) -> HeadersResponse {
    HeadersResponse { response: Some(common) }
}

fn reply(response: processing_response::Response) -> ProcessingResponse {
    ProcessingResponse { response: Some(response), ..Default::default() }
}

impl Rewriter {
    /// Request headers: decide the plan. When we may rewrite, the apiserver
    /// must answer in full (no 304 for its own ETag, no gzip we would have to
    /// undo), so `If-None-Match` and `Accept-Encoding` are removed from the
    /// upstream request and remembered; everything else, credentials
    /// included, goes to the apiserver unchanged.
    fn on_request_headers(&self, h: &HttpHeaders, x: &mut Exchange) -> ProcessingResponse {
        let path = header(h, ":path").unwrap_or("/apis");
        if !matches!(path.split('?').next(), Some("/apis" | "/apis/")) {
            // Only when Envoy sends other routes here (the ext_proc-routing
            // benchmark variant): route like the wasm filter.
            return self.routes.route(path);
        }
        *x = Exchange::from_headers(header(h, "accept"), header(h, "if-none-match"), header(h, "accept-encoding"));
        let plan = x.plan.unwrap_or(Plan::Passthrough);
        match plan {
            Plan::Merged(_) | Plan::GroupList => {
                let mutation = HeaderMutation {
                    remove_headers: vec!["if-none-match".into(), "accept-encoding".into()],
                    ..Default::default()
                };
                reply(processing_response::Response::RequestHeaders(headers_response(CommonResponse {
                    header_mutation: Some(mutation),
                    ..Default::default()
                })))
            }
            Plan::NoPeer | Plan::Passthrough => {
                if plan == Plan::NoPeer {
                    self.metrics.nopeer_request();
                }
                self.metrics.discovery_rewrite(if plan == Plan::NoPeer { "nopeer" } else { "passthrough" });
                // Nothing to do on the way back: skip the response phase.
                ProcessingResponse {
                    response: Some(processing_response::Response::RequestHeaders(HeadersResponse::default())),
                    mode_override: Some(ProcessingMode {
                        response_header_mode: HeaderSendMode::Skip as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }
            }
        }
    }

    /// Response headers: replace a 200 of the negotiated kind with the
    /// merged document (or answer 304 to a matching `If-None-Match`).
    ///
    /// The apiserver saw the client's `If-None-Match` and `Accept-Encoding`:
    /// it answers 304 only to its own (unmerged) ETag, which passes through,
    /// and any body it gzipped is replaced anyway.
    fn on_response_headers(&self, h: &HttpHeaders, x: &Exchange) -> ProcessingResponse {
        let pass = || reply(processing_response::Response::ResponseHeaders(HeadersResponse::default()));
        let status = header(h, ":status").unwrap_or("");
        let content_type = header(h, "content-type").unwrap_or("").to_ascii_lowercase();
        let Some(plan) = x.plan else {
            self.metrics.discovery_rewrite("no_request_headers");
            return pass();
        };
        if plan == Plan::NoPeer {
            self.metrics.nopeer_request();
        }
        if matches!(plan, Plan::NoPeer | Plan::Passthrough) {
            self.metrics.discovery_rewrite(if plan == Plan::NoPeer { "nopeer" } else { "passthrough" });
            return pass();
        }
        if status != "200" {
            self.metrics.discovery_rewrite("upstream_status");
            return pass();
        }
        let expected = match plan {
            Plan::Merged(_) => content_type.contains("g=apidiscovery.k8s.io") && content_type.contains("as=apigroupdiscoverylist"),
            Plan::GroupList => content_type.starts_with("application/json") && !content_type.contains("as="),
            Plan::NoPeer | Plan::Passthrough => false,
        };
        let doc = self.merged.borrow().clone();
        let (true, Some(doc)) = (expected, doc) else {
            self.metrics.discovery_rewrite("not_rewritable");
            return pass();
        };
        self.metrics.peer_aggregated_cache_hit();
        let (encoded, content_type, etag): (&Encoded, &str, Option<&str>) = match plan {
            Plan::Merged(Format::Json) => (&doc.json, JSON_CONTENT_TYPE, Some(&doc.etag)),
            Plan::Merged(Format::Protobuf) => (&doc.protobuf, PROTOBUF_CONTENT_TYPE, Some(&doc.etag)),
            _ => (&doc.group_list, "application/json", None),
        };
        let mut headers = Vec::new();
        if let Some(etag) = etag {
            headers.extend([set("etag", etag), set("cache-control", "public")]);
            if crate::merge::etag::matches(x.if_none_match.as_deref(), etag) {
                self.metrics.discovery_rewrite("not_modified");
                headers.push(set("vary", "Accept"));
                return reply(processing_response::Response::ImmediateResponse(ImmediateResponse {
                    status: Some(HttpStatus { code: StatusCode::NotModified as i32 }),
                    headers: Some(HeaderMutation { set_headers: headers, ..Default::default() }),
                    details: "mvp_discovery_not_modified".into(),
                    ..Default::default()
                }));
            }
        }
        let (body, gzipped): (Bytes, bool) = match (&encoded.gzip, x.gzip) {
            (Some(gz), true) => (gz.clone(), true),
            _ => (encoded.identity.clone(), false),
        };
        let mut remove = Vec::new();
        headers.push(set("content-type", content_type));
        headers.push(set("content-length", body.len().to_string()));
        if gzipped {
            headers.push(set("content-encoding", "gzip"));
            headers.push(set("vary", "Accept, Accept-Encoding"));
        } else {
            remove.push("content-encoding".to_string());
            headers.push(set("vary", "Accept"));
        }
        if etag.is_none() {
            remove.extend(["etag".to_string(), "cache-control".to_string()]);
        }
        self.metrics.discovery_rewrite(match plan {
            Plan::GroupList => "group_list",
            _ => "merged",
        });
        reply(processing_response::Response::ResponseHeaders(headers_response(CommonResponse {
            status: ResponseStatus::ContinueAndReplace as i32,
            header_mutation: Some(HeaderMutation { set_headers: headers, remove_headers: remove }),
            body_mutation: Some(BodyMutation { mutation: Some(body_mutation::Mutation::Body(body.to_vec())) }),
            ..Default::default()
        })))
    }
}

#[tonic::async_trait]
impl ExternalProcessor for Rewriter {
    type ProcessStream = ReceiverStream<Result<ProcessingResponse, Status>>;

    async fn process(&self, request: Request<Streaming<ProcessingRequest>>) -> Result<Response<Self::ProcessStream>, Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(4);
        let this = Rewriter { merged: self.merged.clone(), routes: self.routes.clone(), metrics: self.metrics.clone() };
        tokio::spawn(async move {
            let mut exchange = Exchange::default();
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
                    Some(processing_request::Request::RequestHeaders(h)) => this.on_request_headers(&h, &mut exchange),
                    Some(processing_request::Request::ResponseHeaders(h)) => {
                        if exchange.plan.is_none() {
                            exchange = Exchange::from_attributes(&msg.attributes);
                        }
                        this.on_response_headers(&h, &exchange)
                    }
                    // Not configured (body and trailer modes are off); an
                    // error makes Envoy fall back (failure_mode_allow) rather
                    // than guess.
                    other => {
                        let _ = tx
                            .send(Err(Status::failed_precondition(format!(
                                "mvp-ext-proc handles only header phases, got {:?}",
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

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::HeaderMap;

    fn headers(pairs: &[(&str, &str)]) -> HttpHeaders {
        HttpHeaders {
            headers: Some(HeaderMap {
                headers: pairs
                    .iter()
                    .map(|(k, v)| HeaderValue { key: k.to_string(), value: String::new(), raw_value: v.as_bytes().to_vec() })
                    .collect(),
            }),
            ..Default::default()
        }
    }

    fn rewriter() -> Rewriter {
        let servers = [("a".to_string(), vec![]), ("b".to_string(), vec![])].into_iter().collect();
        let (_tx, rx) = watch::channel(Some(Arc::new(MergedDocument::build(&servers))));
        std::mem::forget(_tx);
        let (_ttx, trx) = watch::channel(Arc::new(mvp_protos::routing::v1::RoutingTable::default()));
        std::mem::forget(_ttx);
        Rewriter { merged: rx, routes: crate::rewrite::routing::Routes::new(trx), metrics: Metrics::new() }
    }

    fn common(r: &ProcessingResponse) -> Option<&CommonResponse> {
        match r.response.as_ref()? {
            processing_response::Response::ResponseHeaders(h) | processing_response::Response::RequestHeaders(h) => h.response.as_ref(),
            _ => None,
        }
    }

    #[test]
    fn merged_json_replaces_a_200_and_304s_on_our_etag() {
        let r = rewriter();
        let doc = r.merged.borrow().clone().unwrap();
        let mut x = Exchange::default();
        let req = r.on_request_headers(&headers(&[("accept", JSON_CONTENT_TYPE), ("accept-encoding", "gzip")]), &mut x);
        assert_eq!(common(&req).unwrap().header_mutation.as_ref().unwrap().remove_headers, ["if-none-match", "accept-encoding"]);
        let resp = r.on_response_headers(&headers(&[(":status", "200"), ("content-type", JSON_CONTENT_TYPE)]), &x);
        let c = common(&resp).unwrap();
        assert_eq!(c.status, ResponseStatus::ContinueAndReplace as i32);
        let Some(body_mutation::Mutation::Body(b)) = c.body_mutation.as_ref().unwrap().mutation.as_ref() else { panic!() };
        assert_eq!(b.as_slice(), &doc.json.identity[..]);

        let mut x = Exchange::default();
        r.on_request_headers(&headers(&[("accept", JSON_CONTENT_TYPE), ("if-none-match", &doc.etag)]), &mut x);
        let resp = r.on_response_headers(&headers(&[(":status", "200"), ("content-type", JSON_CONTENT_TYPE)]), &x);
        let Some(processing_response::Response::ImmediateResponse(i)) = resp.response else { panic!("{resp:?}") };
        assert_eq!(i.status.unwrap().code, StatusCode::NotModified as i32);
    }

    #[test]
    fn other_statuses_and_kinds_pass_through() {
        let r = rewriter();
        for (status, ct) in [("401", "application/json"), ("403", "application/json"), ("500", JSON_CONTENT_TYPE), ("200", "application/json")] {
            let mut x = Exchange::default();
            r.on_request_headers(&headers(&[("accept", JSON_CONTENT_TYPE)]), &mut x);
            let resp = r.on_response_headers(&headers(&[(":status", status), ("content-type", ct)]), &x);
            assert!(common(&resp).is_none(), "{status} {ct}: {resp:?}");
        }
        let mut x = Exchange::default();
        let req = r.on_request_headers(&headers(&[("accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer")]), &mut x);
        assert_eq!(req.mode_override.unwrap().response_header_mode, HeaderSendMode::Skip as i32);
    }

    #[test]
    fn request_headers_arrive_as_response_attributes() {
        use envoy_types::pb::google::protobuf::Value;
        let string = |s: &str| Value { kind: Some(Kind::StringValue(s.into())) };
        let attrs = [(
            "envoy.filters.http.ext_proc".to_string(),
            Struct {
                fields: [
                    (REQUEST_ATTRIBUTES[0].to_string(), string(JSON_CONTENT_TYPE)),
                    (REQUEST_ATTRIBUTES[1].to_string(), string("\"x\"")),
                ]
                .into_iter()
                .collect(),
            },
        )]
        .into_iter()
        .collect();
        let x = Exchange::from_attributes(&attrs);
        assert_eq!(x.plan, Some(Plan::Merged(Format::Json)));
        assert_eq!(x.if_none_match.as_deref(), Some("\"x\""));
        assert_eq!(Exchange::from_attributes(&Default::default()).plan, None);
    }

    #[test]
    fn gzip_negotiation() {
        assert!(wants_gzip(Some("gzip")));
        assert!(wants_gzip(Some("deflate, gzip;q=1.0")));
        assert!(!wants_gzip(Some("gzip;q=0")));
        assert!(!wants_gzip(Some("br")));
        assert!(!wants_gzip(None));
    }
}
