//! The rewrite's decision, without gRPC: from the negotiated plan, the
//! apiserver's status and content type and the current merged document to
//! what the client gets.
//!
//! Only a 200 of the negotiated kind of document is replaced: every other
//! answer (401, 403, 5xx, a 304 to the apiserver's own ETag, which only a
//! client holding an unmerged copy can send) passes through untouched. The
//! apiserver saw the client's `If-None-Match` and `Accept-Encoding`; a body
//! it gzipped is replaced anyway.

use bytes::Bytes;

use super::exchange::Exchange;
use super::negotiate::{Format, Plan};
use crate::apidiscovery::{JSON_CONTENT_TYPE, PROTOBUF_CONTENT_TYPE, etag};
use crate::merge::MergedDocument;
use crate::encoded::Encoded;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// Envoy sent no request attributes (misconfigured).
    NoRequestHeaders,
    /// `profile=nopeer`: the answering apiserver's own document.
    NoPeer,
    /// A kind of answer the front door leaves to the apiserver.
    Passthrough,
    /// The apiserver did not answer 200.
    UpstreamStatus,
    /// A 200 of another content type, or no merged document yet.
    NotRewritable,
    /// The apiserver's answer is the merged document already (same ETag).
    Identical,
}

/// kube's aggregated discovery handler sends this with an ETag, overriding
/// the chain default (`WithCacheControl`: `no-cache, private`).
pub const CACHE_CONTROL_WITH_ETAG: &str = "public";
/// kube's chain default, which its OpenAPI handlers keep.
pub const CACHE_CONTROL_DEFAULT: &str = "no-cache, private";

#[derive(Debug, PartialEq, Eq)]
pub enum Outcome<'d> {
    Pass(Pass),
    /// `If-None-Match` equals the merged document's ETag.
    NotModified { etag: &'d str, cache_control: &'static str },
    Replace(Replacement<'d>),
}

#[derive(Debug, PartialEq, Eq)]
pub struct Replacement<'d> {
    pub body: Bytes,
    /// `None`: the apiserver's own stays.
    pub content_type: Option<&'static str>,
    /// The merged ETag; `None` for the unaggregated group list (kube sends
    /// none), and the apiserver's is removed.
    pub etag: Option<&'d str>,
    /// `None`: the apiserver's own stays.
    pub cache_control: Option<&'static str>,
    pub gzipped: bool,
    /// The `result` label.
    pub result: &'static str,
}

impl Outcome<'_> {
    /// The `result` label of `mvp_discovery_rewrites_total`.
    pub fn result(&self) -> &'static str {
        match self {
            Outcome::Pass(Pass::NoRequestHeaders) => "no_request_headers",
            Outcome::Pass(Pass::NoPeer) => "nopeer",
            Outcome::Pass(Pass::Passthrough) => "passthrough",
            Outcome::Pass(Pass::UpstreamStatus) => "upstream_status",
            Outcome::Pass(Pass::NotRewritable) => "not_rewritable",
            Outcome::Pass(Pass::Identical) => "identical",
            Outcome::NotModified { .. } => "not_modified",
            Outcome::Replace(r) => r.result,
        }
    }

    /// Whether the merged document answered (kube's cache-hit metric).
    pub fn served_merged(&self) -> bool {
        matches!(self, Outcome::NotModified { .. } | Outcome::Replace(_))
    }
}

/// The body for a client that does or does not accept gzip.
pub fn body(encoded: &Encoded, gzip: bool) -> (Bytes, bool) {
    match (&encoded.gzip, gzip) {
        (Some(gz), true) => (gz.clone(), true),
        _ => (encoded.identity.clone(), false),
    }
}

pub fn decide<'d>(x: &Exchange, status: &str, content_type: &str, doc: Option<&'d MergedDocument>) -> Outcome<'d> {
    let Some(plan) = x.plan else { return Outcome::Pass(Pass::NoRequestHeaders) };
    let content_type = content_type.to_ascii_lowercase();
    match plan {
        Plan::NoPeer => return Outcome::Pass(Pass::NoPeer),
        Plan::Passthrough => return Outcome::Pass(Pass::Passthrough),
        Plan::Merged(_) | Plan::GroupList => {}
    }
    if status != "200" {
        return Outcome::Pass(Pass::UpstreamStatus);
    }
    let aggregated = content_type.contains("g=apidiscovery.k8s.io") && content_type.contains("as=apigroupdiscoverylist");
    let group_list = content_type.starts_with("application/json") && !content_type.contains("as=");
    let expected = match plan {
        // A server without aggregated discovery (< 1.26) answers a client
        // that asked for it first with its plain APIGroupList, which names
        // what cluster-wide APIService objects say, not what the servers
        // serve: the client gets the merged document it asked for instead.
        Plan::Merged(_) => aggregated || group_list,
        _ => group_list,
    };
    let (true, Some(doc)) = (expected, doc) else {
        return Outcome::Pass(Pass::NotRewritable);
    };
    let (encoded, content_type, etag) = match plan {
        Plan::Merged(Format::Json) => (&doc.json, JSON_CONTENT_TYPE, Some(doc.etag.as_str())),
        Plan::Merged(Format::Protobuf) => (&doc.protobuf, PROTOBUF_CONTENT_TYPE, Some(doc.etag.as_str())),
        _ => (&doc.group_list, "application/json", None),
    };
    if let Some(etag) = etag
        && etag::matches(x.if_none_match.as_deref(), etag)
    {
        return Outcome::NotModified { etag, cache_control: CACHE_CONTROL_WITH_ETAG };
    }
    let (body, gzipped) = body(encoded, x.gzip);
    Outcome::Replace(Replacement {
        body,
        content_type: Some(content_type),
        etag,
        cache_control: etag.map(|_| CACHE_CONTROL_WITH_ETAG),
        gzipped,
        result: if plan == Plan::GroupList { "group_list" } else { "merged" },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> MergedDocument {
        let servers = [("a".to_string(), &[][..]), ("b".to_string(), &[][..])].into_iter().collect();
        MergedDocument::build(&servers, &Default::default(), None)
    }

    fn asking(accept: &str) -> Exchange {
        Exchange::new(Some(accept), None, Some("gzip"))
    }

    #[test]
    fn merged_json_replaces_a_200_and_304s_on_our_etag() {
        let doc = doc();
        let x = asking(JSON_CONTENT_TYPE);
        let Outcome::Replace(r) = decide(&x, "200", JSON_CONTENT_TYPE, Some(&doc)) else { panic!() };
        assert_eq!((r.body.clone(), r.content_type, r.etag, r.gzipped), (doc.json.identity.clone(), Some(JSON_CONTENT_TYPE), Some(doc.etag.as_str()), false));
        assert_eq!(r.cache_control, Some("public"));

        let x = Exchange::new(Some(JSON_CONTENT_TYPE), Some(&doc.etag), None);
        assert_eq!(decide(&x, "200", JSON_CONTENT_TYPE, Some(&doc)), Outcome::NotModified { etag: &doc.etag, cache_control: "public" });
        let x = Exchange::new(Some(JSON_CONTENT_TYPE), Some(&format!("W/{}", doc.etag)), None);
        assert!(matches!(decide(&x, "200", JSON_CONTENT_TYPE, Some(&doc)), Outcome::Replace(_)));
    }

    #[test]
    fn protobuf_and_group_list() {
        let doc = doc();
        let x = asking(PROTOBUF_CONTENT_TYPE);
        let Outcome::Replace(r) = decide(&x, "200", PROTOBUF_CONTENT_TYPE, Some(&doc)) else { panic!() };
        assert_eq!(r.body, doc.protobuf.identity);
        let x = asking("application/json");
        let out = decide(&x, "200", "application/json", Some(&doc));
        assert_eq!(out.result(), "group_list");
        let Outcome::Replace(r) = out else { panic!() };
        assert_eq!((r.etag, r.body), (None, doc.group_list.identity.clone()));
    }

    #[test]
    fn an_old_servers_group_list_is_replaced_by_the_merged_document() {
        let doc = doc();
        let out = decide(&asking(&format!("{JSON_CONTENT_TYPE},application/json")), "200", "application/json", Some(&doc));
        let Outcome::Replace(r) = out else { panic!("{out:?}") };
        assert_eq!((r.content_type, r.body), (Some(JSON_CONTENT_TYPE), doc.json.identity.clone()));
    }

    #[test]
    fn other_statuses_and_kinds_pass_through() {
        let doc = doc();
        for (status, ct) in [("401", "application/json"), ("403", "application/json"), ("500", JSON_CONTENT_TYPE), ("200", "application/yaml")] {
            let out = decide(&asking(JSON_CONTENT_TYPE), status, ct, Some(&doc));
            assert!(matches!(out, Outcome::Pass(_)), "{status} {ct}: {out:?}");
        }
        let nopeer = asking("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer");
        assert_eq!(decide(&nopeer, "200", JSON_CONTENT_TYPE, Some(&doc)), Outcome::Pass(Pass::NoPeer));
        assert_eq!(decide(&asking("application/yaml"), "200", "application/yaml", Some(&doc)), Outcome::Pass(Pass::Passthrough));
        assert_eq!(decide(&Exchange::default(), "200", JSON_CONTENT_TYPE, Some(&doc)), Outcome::Pass(Pass::NoRequestHeaders));
        assert_eq!(decide(&asking(JSON_CONTENT_TYPE), "200", JSON_CONTENT_TYPE, None), Outcome::Pass(Pass::NotRewritable));
    }
}
