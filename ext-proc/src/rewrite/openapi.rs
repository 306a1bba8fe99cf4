//! The rewrite's decision for `/openapi/v2` and the `/openapi/v3` index,
//! without gRPC. Only a 200 is replaced, in the form the apiserver chose
//! (it negotiated `Accept` itself): JSON (kube 1.20 labels it `text/plain`)
//! or protobuf (`application/octet-stream`, or a `+protobuf` type). An
//! answer whose ETag is the merged document's is already right and passes.

use super::decide::{CACHE_CONTROL_DEFAULT, Outcome, Pass, Replacement, body};
use super::exchange::Exchange;
use crate::apidiscovery::etag;
use crate::openapi::{Merged, MergedOpenApi};

/// The apiserver's answer as the decision sees it.
pub struct Upstream<'a> {
    pub status: &'a str,
    pub content_type: &'a str,
    pub etag: Option<&'a str>,
}

pub fn decide_v2<'d>(x: &Exchange, up: &Upstream<'_>, merged: &'d MergedOpenApi) -> Outcome<'d> {
    if up.status != "200" {
        return Outcome::Pass(Pass::UpstreamStatus);
    }
    let ct = up.content_type.to_ascii_lowercase();
    let doc = if ct.contains("protobuf") || ct.starts_with("application/octet-stream") {
        merged.v2_protobuf.as_ref()
    } else if ct.starts_with("application/json") || ct.starts_with("text/plain") {
        merged.v2_json.as_ref()
    } else {
        return Outcome::Pass(Pass::NotRewritable);
    };
    replace(x, up, doc, None, "merged")
}

pub fn decide_v3_index<'d>(x: &Exchange, up: &Upstream<'_>, merged: &'d MergedOpenApi) -> Outcome<'d> {
    if up.status != "200" {
        return Outcome::Pass(Pass::UpstreamStatus);
    }
    // kube-openapi's handler3 writes the index with http.ServeContent and
    // no Content-Type, so real 1.27+ servers label it `text/plain;
    // charset=utf-8` (found behind real 1.34/1.37 servers); the merged index
    // keeps whatever label the apiserver chose.
    let ct = up.content_type.to_ascii_lowercase();
    if !(ct.starts_with("application/json") || ct.starts_with("text/plain")) {
        return Outcome::Pass(Pass::NotRewritable);
    }
    replace(x, up, merged.v3_index.as_ref(), None, "merged")
}

fn replace<'d>(x: &Exchange, up: &Upstream<'_>, doc: Option<&'d Merged>, content_type: Option<&'static str>, result: &'static str) -> Outcome<'d> {
    let Some(doc) = doc else { return Outcome::Pass(Pass::NotRewritable) };
    if up.etag == Some(doc.etag.as_str()) {
        return Outcome::Pass(Pass::Identical);
    }
    if etag::matches(x.if_none_match.as_deref(), &doc.etag) {
        return Outcome::NotModified { etag: &doc.etag, cache_control: CACHE_CONTROL_DEFAULT };
    }
    let (body, gzipped) = body(&doc.body, x.gzip);
    Outcome::Replace(Replacement { body, content_type, etag: Some(&doc.etag), cache_control: None, gzipped, result })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoded::Encoded;

    fn merged() -> MergedOpenApi {
        let m = |b: &str| Some(Merged { etag: format!("\"{b}\""), body: Encoded::new(b.as_bytes().to_vec()) });
        MergedOpenApi { v2_json: m("JSON"), v2_protobuf: m("PB"), v3_index: m("INDEX"), sources: vec![] }
    }

    fn up<'a>(status: &'a str, content_type: &'a str, etag: Option<&'a str>) -> Upstream<'a> {
        Upstream { status, content_type, etag }
    }

    #[test]
    fn v2_replaces_each_form_the_apiserver_chose() {
        let m = merged();
        let x = Exchange::new(None, None, None);
        for (ct, body) in [("text/plain; charset=utf-8", "JSON"), ("application/json", "JSON"), ("application/octet-stream", "PB"), ("application/com.github.proto-openapi.spec.v2.v1.0+protobuf", "PB")] {
            let Outcome::Replace(r) = decide_v2(&x, &up("200", ct, Some("\"theirs\"")), &m) else { panic!("{ct}") };
            assert_eq!((&r.body[..], r.content_type, r.cache_control, r.etag), (body.as_bytes(), None, None, Some(format!("\"{body}\"").as_str())));
        }
        assert_eq!(decide_v2(&x, &up("200", "application/yaml", None), &m), Outcome::Pass(Pass::NotRewritable));
        assert_eq!(decide_v2(&x, &up("403", "application/json", None), &m), Outcome::Pass(Pass::UpstreamStatus));
        assert_eq!(decide_v2(&x, &up("200", "text/plain", Some("\"JSON\"")), &m), Outcome::Pass(Pass::Identical));
        assert_eq!(decide_v2(&x, &up("200", "text/plain", None), &MergedOpenApi::default()), Outcome::Pass(Pass::NotRewritable));
    }

    #[test]
    fn revalidation_against_the_merged_etag() {
        let m = merged();
        let x = Exchange::new(None, Some("\"PB\""), None);
        assert_eq!(decide_v2(&x, &up("200", "application/octet-stream", None), &m), Outcome::NotModified { etag: "\"PB\"", cache_control: "no-cache, private" });
        // The apiserver's own 304 (the client held its document, which is
        // the merged one) passes.
        assert_eq!(decide_v2(&x, &up("304", "", None), &m), Outcome::Pass(Pass::UpstreamStatus));
    }

    #[test]
    fn v3_index_is_replaced_in_the_label_the_apiserver_chose() {
        let m = merged();
        let x = Exchange::new(None, None, None);
        for ct in ["application/json", "text/plain; charset=utf-8"] {
            let Outcome::Replace(r) = decide_v3_index(&x, &up("200", ct, None), &m) else { panic!("{ct}") };
            assert_eq!((&r.body[..], r.content_type), (&b"INDEX"[..], None), "{ct}");
        }
        assert_eq!(decide_v3_index(&x, &up("200", "application/yaml", None), &m), Outcome::Pass(Pass::NotRewritable));
        assert_eq!(decide_v3_index(&x, &up("404", "application/json", None), &m), Outcome::Pass(Pass::UpstreamStatus));
    }
}
