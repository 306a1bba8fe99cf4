//! The `envoy.service.ext_proc.v3.ExternalProcessor` gRPC service, writing
//! its response stream itself so a replaced body goes out as the bytes the
//! merge already holds.
//!
//! envoy-types' generated server encodes every message with prost into
//! tonic's send buffer, and a prost message owns its `bytes` fields: each
//! answer with a multi-MiB merged document copied it into a new `Vec`, then
//! into the buffer — per request, so 16 concurrent clients of a 5.5 MB
//! `/apis` held 16 copies (mvp-ext-proc RSS ~200 MiB, measured). Here an
//! answer that replaces the body ([`Outgoing::Replace`]) is sent as two
//! HTTP/2 data chunks: the gRPC frame prefix with the few hundred bytes of
//! protobuf before the body (computed in `response.rs`), then the shared
//! body itself, never copied. Requests are decoded by tonic's own
//! [`Streaming`].

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{BufMut, Bytes, BytesMut};
use envoy_types::pb::envoy::service::ext_proc::v3::{ProcessingRequest, ProcessingResponse};
use http_body::Frame;
use prost::Message;
use tokio::sync::mpsc;
use tonic::codec::{BufferSettings, DecodeBuf, Decoder};
use tonic::codegen::{Body as HttpBody, BoxFuture, Service, StdError, http};
use tonic::server::NamedService;
use tonic::{Code, Status, Streaming};

use super::stream::Responses;

/// One message on the response stream. (Few per stream, moved once: the
/// size difference between the variants does not matter.)
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum Outgoing {
    Message(ProcessingResponse),
    /// An encoded `ProcessingResponse` whose last field is `body`: `head`
    /// holds everything before the body's bytes.
    Replace { head: Vec<u8>, body: Bytes },
}

impl Outgoing {
    /// The message's protobuf encoding, as Envoy receives it.
    pub fn encoded(&self) -> Vec<u8> {
        match self {
            Outgoing::Message(m) => m.encode_to_vec(),
            Outgoing::Replace { head, body } => [head.as_slice(), body].concat(),
        }
    }

    fn encoded_len(&self) -> usize {
        match self {
            Outgoing::Message(m) => m.encoded_len(),
            Outgoing::Replace { head, body } => head.len() + body.len(),
        }
    }
}

/// The handler side of the service: the answers to one `Process` stream.
pub trait Processor: Send + Sync + 'static {
    /// Whether a new stream can be answered; `Err` ends it at once with that
    /// status, before any message (a trailers-only answer, which Envoy's
    /// ext_proc retry policy sends to another replica on `UNAVAILABLE`).
    fn ready(&self) -> Result<(), Status> {
        Ok(())
    }

    fn process(&self, inbound: Streaming<ProcessingRequest>) -> Responses<Outgoing>;
}

#[derive(Debug, Default, Clone, Copy)]
struct RequestDecoder;

impl Decoder for RequestDecoder {
    type Item = ProcessingRequest;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<ProcessingRequest>, Status> {
        ProcessingRequest::decode(buf).map(Some).map_err(|e| Status::internal(e.to_string()))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

/// The gRPC response body: each answer as a length-prefixed message, then
/// `grpc-status` trailers.
struct ResponseBody {
    answers: mpsc::Receiver<Result<Outgoing, Status>>,
    /// A replaced body, sent right after its head.
    body: Option<Bytes>,
    max_message: usize,
    done: bool,
}

fn trailers(status: &Status) -> Frame<Bytes> {
    let mut map = http::HeaderMap::new();
    if status.add_header(&mut map).is_err() {
        // Only a message that is not a valid header value fails; the code
        // alone still tells Envoy what happened.
        map.insert("grpc-status", http::HeaderValue::from(status.code() as i32));
    }
    Frame::trailers(map)
}

impl HttpBody for ResponseBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        if let Some(body) = this.body.take() {
            return Poll::Ready(Some(Ok(Frame::data(body))));
        }
        if this.done {
            return Poll::Ready(None);
        }
        let answer = match ready!(this.answers.poll_recv(cx)) {
            Some(Ok(a)) => a,
            Some(Err(status)) => {
                this.done = true;
                return Poll::Ready(Some(Ok(trailers(&status))));
            }
            None => {
                this.done = true;
                return Poll::Ready(Some(Ok(trailers(&Status::new(Code::Ok, "")))));
            }
        };
        let len = answer.encoded_len();
        let Some(prefix_len) = u32::try_from(len).ok().filter(|_| len <= this.max_message) else {
            this.done = true;
            let status = Status::resource_exhausted(format!("answer of {len} bytes exceeds the {} byte limit", this.max_message));
            return Poll::Ready(Some(Ok(trailers(&status))));
        };
        let head_len = match &answer {
            Outgoing::Message(_) => len,
            Outgoing::Replace { head, .. } => head.len(),
        };
        let mut frame = BytesMut::with_capacity(5 + head_len);
        frame.put_u8(0); // not compressed
        frame.put_u32(prefix_len);
        match answer {
            Outgoing::Message(m) => {
                if let Err(e) = m.encode(&mut frame) {
                    this.done = true;
                    return Poll::Ready(Some(Ok(trailers(&Status::internal(e.to_string())))));
                }
            }
            Outgoing::Replace { head, body } => {
                frame.put_slice(&head);
                this.body = (!body.is_empty()).then_some(body);
            }
        }
        Poll::Ready(Some(Ok(Frame::data(frame.freeze()))))
    }
}

/// The service as tonic's router mounts it.
pub struct ExternalProcessorServer<T> {
    inner: Arc<T>,
    max_decoding_message_size: usize,
    max_encoding_message_size: usize,
}

impl<T> ExternalProcessorServer<T> {
    pub fn new(inner: T, max_decoding_message_size: usize, max_encoding_message_size: usize) -> Self {
        ExternalProcessorServer { inner: Arc::new(inner), max_decoding_message_size, max_encoding_message_size }
    }
}

impl<T> Clone for ExternalProcessorServer<T> {
    fn clone(&self) -> Self {
        ExternalProcessorServer {
            inner: self.inner.clone(),
            max_decoding_message_size: self.max_decoding_message_size,
            max_encoding_message_size: self.max_encoding_message_size,
        }
    }
}

impl<T> NamedService for ExternalProcessorServer<T> {
    const NAME: &'static str = "envoy.service.ext_proc.v3.ExternalProcessor";
}

const PROCESS_PATH: &str = "/envoy.service.ext_proc.v3.ExternalProcessor/Process";

impl<T, B> Service<http::Request<B>> for ExternalProcessorServer<T>
where
    T: Processor,
    B: HttpBody + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != PROCESS_PATH {
            return Box::pin(async { Ok(Status::unimplemented("only Process is served").into_http()) });
        }
        if let Err(status) = self.inner.ready() {
            return Box::pin(async move { Ok(status.into_http()) });
        }
        let inbound = Streaming::new_request(RequestDecoder, req.into_body(), None, Some(self.max_decoding_message_size));
        let answers = self.inner.process(inbound).into_inner();
        let body = ResponseBody { answers, body: None, max_message: self.max_encoding_message_size, done: false };
        let mut resp = http::Response::new(tonic::body::Body::new(body));
        resp.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
        Box::pin(async move { Ok(resp) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewrite::decide::{Outcome, Replacement};
    use crate::rewrite::response::response_headers;
    use http_body_util::BodyExt;

    fn body(answers: Vec<Result<Outgoing, Status>>, max_message: usize) -> ResponseBody {
        let (tx, rx) = mpsc::channel(answers.len().max(1));
        for a in answers {
            tx.try_send(a).unwrap();
        }
        ResponseBody { answers: rx, body: None, max_message, done: false }
    }

    /// A processor not ready yet: every stream is refused at once.
    struct NotReady;

    impl Processor for NotReady {
        fn ready(&self) -> Result<(), Status> {
            Err(Status::unavailable("not yet"))
        }

        fn process(&self, _: Streaming<ProcessingRequest>) -> Responses<Outgoing> {
            unreachable!("a refused stream is never processed")
        }
    }

    /// Refused before any message: a trailers-only answer, `grpc-status` 14
    /// in the headers — what Envoy's retry policy (`unavailable`) retries on
    /// another replica.
    #[tokio::test]
    async fn a_processor_not_ready_refuses_the_stream_unavailable() {
        let mut server = ExternalProcessorServer::new(NotReady, 1 << 20, 1 << 20);
        let req = http::Request::builder().uri(PROCESS_PATH).body(http_body_util::Empty::<Bytes>::new()).unwrap();
        let resp = Service::call(&mut server, req).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers().get("grpc-status").map(|v| v.as_bytes()), Some(&b"14"[..]), "{:?}", resp.headers());
    }

    /// gRPC frames → the messages Envoy decodes, and the trailers.
    async fn read(b: ResponseBody) -> (Vec<ProcessingResponse>, Vec<usize>, http::HeaderMap) {
        let (mut data, mut chunks, mut trailers) = (Vec::new(), Vec::new(), http::HeaderMap::new());
        let mut b = std::pin::pin!(b);
        while let Some(frame) = b.frame().await {
            let frame = frame.unwrap();
            if frame.is_data() {
                let d = frame.into_data().unwrap();
                chunks.push(d.len());
                data.extend_from_slice(&d);
            } else {
                trailers = frame.into_trailers().unwrap();
            }
        }
        let (mut msgs, mut rest) = (Vec::new(), data.as_slice());
        while let [0, a, b, c, d, tail @ ..] = rest {
            let n = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
            msgs.push(ProcessingResponse::decode(&tail[..n]).unwrap());
            rest = &tail[n..];
        }
        assert!(rest.is_empty());
        (msgs, chunks, trailers)
    }

    #[tokio::test]
    async fn answers_are_length_prefixed_and_a_replaced_body_is_its_own_chunk() {
        let timeout = ProcessingResponse { override_message_timeout: Some(Default::default()), ..Default::default() };
        let doc = Bytes::from(vec![7u8; 300_000]);
        let replacement = Replacement { body: doc.clone(), content_type: None, etag: None, cache_control: None, gzipped: false, result: "merged" };
        let replace = response_headers(&Outcome::Replace(replacement));
        let (msgs, chunks, trailers) = read(body(vec![Ok(Outgoing::Message(timeout.clone())), Ok(replace.clone())], usize::MAX)).await;
        assert_eq!(msgs, [timeout, ProcessingResponse::decode(replace.encoded().as_slice()).unwrap()]);
        assert_eq!(chunks.last(), Some(&doc.len()), "the body is sent as it is held");
        assert_eq!(trailers["grpc-status"], "0");
    }

    #[tokio::test]
    async fn errors_and_oversized_answers_end_the_stream_with_their_status() {
        let (msgs, _, trailers) = read(body(vec![Err(Status::failed_precondition("no"))], usize::MAX)).await;
        assert!(msgs.is_empty());
        assert_eq!(trailers["grpc-status"], (Code::FailedPrecondition as i32).to_string().as_str());
        let big = Outgoing::Replace { head: vec![], body: Bytes::from(vec![0u8; 100]) };
        let (msgs, _, trailers) = read(body(vec![Ok(big)], 99)).await;
        assert!(msgs.is_empty());
        assert_eq!(trailers["grpc-status"], (Code::ResourceExhausted as i32).to_string().as_str());
    }
}
