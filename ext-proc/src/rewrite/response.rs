//! ext_proc response messages for each [`Outcome`].
//!
//! A replaced body is not copied into a message: [`replace`] encodes the
//! protobuf around it and [`super::grpc`] writes the shared body after that.

use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption, header_value_option::HeaderAppendAction};
use envoy_types::pb::envoy::r#type::v3::{HttpStatus, StatusCode};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    CommonResponse, HeaderMutation, HeadersResponse, ImmediateResponse, ProcessingResponse,
    common_response::ResponseStatus, processing_response,
};

use bytes::Bytes;
use mvp_contract::headers::DISCOVERY_RESULT;
use mvp_contract::limits::{EXT_PROC_LARGE_BODY_BYTES, EXT_PROC_LARGE_BODY_TIMEOUT_MS};
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};

use super::decide::{Outcome, Replacement};
use super::service::Outgoing;

/// A header to set (overwriting).
fn set(key: &str, value: impl Into<Vec<u8>>) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue { key: key.into(), value: String::new(), raw_value: value.into() }),
        append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
        ..Default::default()
    }
}

fn reply(response: processing_response::Response) -> ProcessingResponse {
    ProcessingResponse { response: Some(response), ..Default::default() }
}

/// Every message answering a response-headers message: a large body is
/// preceded by a timeout extension (`override_message_timeout`), so Envoy
/// waits for a multi-MiB answer instead of falling back to the apiserver's
/// unmerged document; a genuinely hung mvp-ext-proc still falls back, after
/// the extended timeout.
pub fn answer(outcome: &Outcome<'_>) -> Vec<Outgoing> {
    let large = matches!(outcome, Outcome::Replace(r) if r.body.len() >= EXT_PROC_LARGE_BODY_BYTES);
    let extend = large.then(|| {
        Outgoing::Message(ProcessingResponse {
            override_message_timeout: Some(envoy_types::pb::google::protobuf::Duration {
                seconds: (EXT_PROC_LARGE_BODY_TIMEOUT_MS / 1000) as i64,
                nanos: ((EXT_PROC_LARGE_BODY_TIMEOUT_MS % 1000) * 1_000_000) as i32,
            }),
            ..Default::default()
        })
    });
    extend.into_iter().chain([response_headers(outcome)]).collect()
}

/// The marker every answer carries: what was done, and that it was done
/// (Envoy's fallback ext_proc filter skips a response that has it).
fn answered(outcome: &Outcome<'_>) -> HeaderValueOption {
    set(DISCOVERY_RESULT, outcome.result())
}

/// The answer to a response-headers message.
pub fn response_headers(outcome: &Outcome<'_>) -> Outgoing {
    match outcome {
        Outcome::Pass(_) => Outgoing::Message(reply(processing_response::Response::ResponseHeaders(HeadersResponse {
            response: Some(CommonResponse {
                header_mutation: Some(HeaderMutation { set_headers: vec![answered(outcome)], ..Default::default() }),
                ..Default::default()
            }),
        }))),
        Outcome::NotModified { etag, cache_control } => Outgoing::Message(reply(processing_response::Response::ImmediateResponse(ImmediateResponse {
            status: Some(HttpStatus { code: StatusCode::NotModified as i32 }),
            headers: Some(HeaderMutation {
                set_headers: vec![set("etag", *etag), set("cache-control", *cache_control), set("vary", "Accept"), answered(outcome)],
                ..Default::default()
            }),
            details: "mvp_discovery_not_modified".into(),
            ..Default::default()
        }))),
        Outcome::Replace(r) => replace(r, answered(outcome)),
    }
}

/// Replaces the body at the response-headers phase (`CONTINUE_AND_REPLACE`):
/// the apiserver's body is never buffered.
///
/// The message is `ProcessingResponse{response_headers: HeadersResponse{
/// response: CommonResponse{status, header_mutation, body_mutation:
/// BodyMutation{body}}}}`; the body is the last field at every level, so the
/// encoding is a head (keys, lengths, status, headers) and then the body.
fn replace(r: &Replacement<'_>, answered: HeaderValueOption) -> Outgoing {
    let mut headers = vec![answered];
    // The apiserver's Last-Modified dates its own document; a client
    // revalidating with it must not get a 304 for the merged one.
    let mut remove = vec!["last-modified".to_string()];
    match r.etag {
        Some(etag) => headers.push(set("etag", etag)),
        None => remove.push("etag".to_string()),
    }
    if let Some(cc) = r.cache_control {
        headers.push(set("cache-control", cc));
    }
    if let Some(ct) = r.content_type {
        headers.push(set("content-type", ct));
    }
    headers.push(set("content-length", r.body.len().to_string()));
    if r.gzipped {
        headers.push(set("content-encoding", "gzip"));
        headers.push(set("vary", "Accept, Accept-Encoding"));
    } else {
        remove.push("content-encoding".to_string());
        headers.push(set("vary", "Accept"));
    }
    let common = CommonResponse {
        status: ResponseStatus::ContinueAndReplace as i32,
        header_mutation: Some(HeaderMutation { set_headers: headers, remove_headers: remove }),
        ..Default::default()
    };
    let body = Bytes::clone(&r.body);
    // Field numbers: BodyMutation.body 1, CommonResponse.body_mutation 3,
    // HeadersResponse.response 1, ProcessingResponse.response_headers 2.
    let mutation_len = key_len(1) + encoded_len_varint(body.len() as u64) + body.len();
    let common_len = common.encoded_len() + key_len(3) + encoded_len_varint(mutation_len as u64) + mutation_len;
    let headers_len = key_len(1) + encoded_len_varint(common_len as u64) + common_len;
    let mut head = Vec::with_capacity(common.encoded_len() + 32);
    encode_key(2, WireType::LengthDelimited, &mut head);
    encode_varint(headers_len as u64, &mut head);
    encode_key(1, WireType::LengthDelimited, &mut head);
    encode_varint(common_len as u64, &mut head);
    common.encode_raw(&mut head);
    encode_key(3, WireType::LengthDelimited, &mut head);
    encode_varint(mutation_len as u64, &mut head);
    encode_key(1, WireType::LengthDelimited, &mut head);
    encode_varint(body.len() as u64, &mut head);
    Outgoing::Replace { head, body }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewrite::decide::Pass;
    use envoy_types::pb::envoy::service::ext_proc::v3::body_mutation;

    /// The message as Envoy decodes it.
    fn sent(o: Outgoing) -> ProcessingResponse {
        ProcessingResponse::decode(o.encoded().as_slice()).unwrap()
    }

    /// The marker's value among headers set.
    fn marker(set: &[HeaderValueOption]) -> Option<String> {
        set.iter().filter_map(|h| h.header.as_ref()).find(|h| h.key == DISCOVERY_RESULT).map(|h| String::from_utf8_lossy(&h.raw_value).into_owned())
    }

    /// Each outcome is one message, and each carries the marker that keeps
    /// Envoy's fallback ext_proc filter from asking again.
    #[test]
    fn each_outcome_is_one_message() {
        let pass = sent(response_headers(&Outcome::Pass(Pass::UpstreamStatus)));
        let Some(processing_response::Response::ResponseHeaders(HeadersResponse { response: Some(c) })) = pass.response else { panic!() };
        assert_eq!(c.status, ResponseStatus::Continue as i32, "the apiserver's answer goes on");
        let m = c.header_mutation.unwrap();
        assert_eq!(marker(&m.set_headers).as_deref(), Some("upstream_status"));
        assert_eq!(m.set_headers.len(), 1);

        let not_modified = sent(response_headers(&Outcome::NotModified { etag: "\"E\"", cache_control: "public" }));
        let Some(processing_response::Response::ImmediateResponse(i)) = not_modified.response else { panic!() };
        assert_eq!(i.status.unwrap().code, StatusCode::NotModified as i32);
        assert_eq!(marker(&i.headers.unwrap().set_headers).as_deref(), Some("not_modified"));

        let r = Replacement { body: "{}".into(), content_type: Some("application/json"), etag: None, cache_control: None, gzipped: true, result: "group_list" };
        let Some(processing_response::Response::ResponseHeaders(h)) = sent(response_headers(&Outcome::Replace(r))).response else { panic!() };
        let c = h.response.unwrap();
        assert_eq!(c.status, ResponseStatus::ContinueAndReplace as i32);
        let m = c.header_mutation.unwrap();
        assert_eq!(m.remove_headers, ["last-modified", "etag"], "the apiserver's Cache-Control stays");
        let set: Vec<(String, Vec<u8>)> = m.set_headers.into_iter().map(|h| h.header.unwrap()).map(|h| (h.key, h.raw_value)).collect();
        assert!(set.contains(&("content-encoding".into(), b"gzip".to_vec())));
        assert!(set.contains(&("content-length".into(), b"2".to_vec())));
        assert!(set.contains(&(DISCOVERY_RESULT.into(), b"group_list".to_vec())));
        let Some(body_mutation::Mutation::Body(b)) = c.body_mutation.unwrap().mutation else { panic!() };
        assert_eq!(b, b"{}");
    }

    #[test]
    fn a_large_body_first_asks_for_more_time() {
        let small = Replacement { body: "{}".into(), content_type: None, etag: None, cache_control: None, gzipped: false, result: "merged" };
        assert_eq!(answer(&Outcome::Replace(small)).len(), 1);
        let large = Replacement { body: vec![b' '; EXT_PROC_LARGE_BODY_BYTES].into(), content_type: None, etag: None, cache_control: None, gzipped: false, result: "merged" };
        let msgs: Vec<ProcessingResponse> = answer(&Outcome::Replace(large)).into_iter().map(sent).collect();
        assert_eq!(msgs.len(), 2);
        let t = msgs[0].override_message_timeout.unwrap();
        assert_eq!((t.seconds, t.nanos), (2, 0));
        assert!(msgs[0].response.is_none() && msgs[1].response.is_some());
    }

    /// The head + shared body is byte for byte what prost encodes for the
    /// message with the body inside, for bodies whose length prefix takes
    /// one to four bytes.
    #[test]
    fn a_replacement_is_the_message_prost_would_encode() {
        for n in [0, 1, 127, 128, 16_383, 16_384, 2_097_152] {
            let body: Bytes = (0..n).map(|i| (i % 251) as u8).collect::<Vec<u8>>().into();
            let r = Replacement { body: body.clone(), content_type: Some("application/json"), etag: Some("\"E\""), cache_control: Some("public"), gzipped: false, result: "merged" };
            let out = response_headers(&Outcome::Replace(r));
            let Outgoing::Replace { head, body: shared } = &out else { panic!("not pre-encoded") };
            assert_eq!(shared.as_ptr(), body.as_ptr(), "the body is shared, not copied");
            let mut message = sent(out.clone());
            assert_eq!(message.encode_to_vec(), out.encoded(), "{n} bytes");
            // And it is the message replace() describes.
            let Some(processing_response::Response::ResponseHeaders(h)) = message.response.take() else { panic!() };
            let Some(body_mutation::Mutation::Body(b)) = h.response.unwrap().body_mutation.unwrap().mutation else { panic!() };
            assert_eq!(b, body);
            assert!(head.len() < 400);
        }
    }
}
