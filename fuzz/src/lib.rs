//! The fuzz targets' bodies (the `fuzz_targets/` files only call these).
//! Each checks a property a user relies on, beyond "does not panic":
//! a routing decision only ever names apiservers of the table, a rejected
//! table or document changes nothing, a merged document re-parses.

use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

use mvp_ext_proc::discover::aggregated::{Root, RootView, from_aggregated};
use mvp_ext_proc::merge::MergedDocument;
use mvp_ext_proc::rewrite::{decide, exchange::Exchange, response};
use mvp_protos::routing::v1 as pb;
use mvp_routing::requestinfo::{Method, classify as request_info};
use mvp_routing::route::decide as route;
use mvp_routing::table::RouteTable;
use mvp_routing::urlpath::DecodedPath;
use prost::Message;

/// The route header's two "503 Status" values (`mvp_contract::headers`).
const UNAVAILABLE: [&str; 2] = ["unavailable", "unavailable-document"];

/// A real discovery document (`integration/fixtures/discovery/`).
pub fn fixture(release: &str, file: &str) -> Vec<u8> {
    let p = format!("{}/../integration/fixtures/discovery/{release}/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// The v1.30 and v1.37 servers' real `/apis`, merged (the document the
/// ext_proc target serves).
static MERGED: LazyLock<MergedDocument> = LazyLock::new(|| {
    let views: Vec<(&str, RootView)> = ["v1.30", "v1.37"]
        .into_iter()
        .map(|r| (r, from_aggregated(Root::Groups, &fixture(r, "apis.json"), None).unwrap_or_else(|e| panic!("{r}: {e}"))))
        .collect();
    let servers = views.iter().map(|(r, v)| (r.to_string(), v.groups.as_slice())).collect();
    MergedDocument::build(&servers, &Default::default(), None)
});

static V133: LazyLock<RootView> =
    LazyLock::new(|| from_aggregated(Root::Groups, &fixture("v1.33", "apis.json"), None).unwrap_or_else(|e| panic!("v1.33: {e}")));

/// Every address an override-host value names is one of `table`'s.
fn names_only_members(value: Option<&str>, table: &pb::RoutingTable) {
    let Some(v) = value else { return };
    if UNAVAILABLE.contains(&v) {
        return;
    }
    for host in v.split(',') {
        assert!(table.apiservers.iter().any(|a| a.address == host), "routed to {host}, not a member: {v}");
    }
}

static SAMPLE: LazyLock<(pb::RoutingTable, RouteTable)> = LazyLock::new(|| {
    let mut p = mvp_routing::testing::sample();
    // One closed and pending member, so every branch of the decision runs.
    if let Some(c) = p.apiservers.get_mut(2) {
        c.closed = true;
        c.pending = true;
    }
    let t = RouteTable::from_proto(&p).unwrap_or_else(|e| panic!("sample: {e}"));
    (p, t)
});

pub fn classify(data: &[u8]) {
    let path = DecodedPath::parse(data);
    for m in [&b"GET"[..], b"POST", b"DELETE", b"PATCH"] {
        let _ = request_info(Method::from_bytes(m), &path);
    }
    let (proto, table) = &*SAMPLE;
    for n in [0, 1, 7] {
        names_only_members(route(table, data, n), proto);
    }
}

pub fn table_decode(data: &[u8]) {
    let Ok(table) = RouteTable::decode(data) else { return };
    let proto = pb::RoutingTable::decode(data).unwrap_or_else(|e| panic!("the table decoded but its proto does not: {e}"));
    for path in [&b"/apis/apps/v1/namespaces/ns/deployments/d"[..], b"/api/v1/pods", b"/apis/x/v1", b"/openapi/v3/apis/apps/v1", b"/apis/resource.k8s.io/v1/resourceclaims"] {
        for n in [0, 3] {
            names_only_members(route(&table, path, n), &proto);
        }
    }
}

/// Any bytes where Envoy's RFC 2253 subject would be: no panic (a panic
/// would break the worker's VM), and no identity let through that a header
/// value cannot carry exactly (a control character, a space at either end:
/// an identity the apiserver would read differently, or Envoy refuse).
/// Envoy never sends most of these; the parser must survive them anyway.
pub fn subject(data: &[u8]) {
    if let Ok(Some(id)) = mvp_filter_core::identity::from_rfc2253(data) {
        for v in std::iter::once(&id.user).chain(&id.groups) {
            let carried = !v.bytes().any(|b| b < 0x20 || b == 0x7f) && !v.starts_with(' ') && !v.ends_with(' ');
            assert!(carried, "an identity a header cannot carry exactly was let through: {v:?}");
        }
    }
}

pub fn discovery_merge(data: &[u8]) {
    let Ok(view) = from_aggregated(Root::Groups, data, None) else { return };
    let mut servers = BTreeMap::new();
    servers.insert("real".to_string(), V133.groups.as_slice());
    servers.insert("fuzzed".to_string(), view.groups.as_slice());
    let merged = MergedDocument::build(&servers, &Default::default(), None);
    // What we serve must be a document clients (and we) accept.
    let again = from_aggregated(Root::Groups, &merged.json.identity, None);
    assert!(again.is_ok(), "the merged document does not parse: {:?}", again.err());
    // Built again from it, with the fuzzed server's groups read anew: the
    // same bytes, whatever was reused.
    let Ok(reread) = from_aggregated(Root::Groups, data, Some(&view)) else { return };
    servers.insert("fuzzed".to_string(), reread.groups.as_slice());
    let rebuilt = MergedDocument::build(&servers, &Default::default(), Some(&merged));
    assert!(rebuilt.json.identity == merged.json.identity && rebuilt.protobuf.identity == merged.protobuf.identity, "an incremental build differs");
}

pub fn ext_proc_message(data: &[u8]) {
    use envoy_types::pb::envoy::service::ext_proc::v3::{ProcessingRequest, ProcessingResponse, processing_request};
    use envoy_types::pb::google::protobuf::Struct;
    let Ok(req) = ProcessingRequest::decode(data) else { return };
    let attributes: HashMap<String, Struct> = req.attributes.clone().into_iter().collect();
    let x = Exchange::from_attributes(&attributes);
    if let Some(processing_request::Request::ResponseHeaders(h)) = &req.request {
        let header = |name: &str| {
            h.headers.as_ref()?.headers.iter().find(|v| v.key.eq_ignore_ascii_case(name)).map(|v| {
                if v.raw_value.is_empty() { v.value.clone() } else { String::from_utf8_lossy(&v.raw_value).into_owned() }
            })
        };
        let (status, content_type) = (header(":status").unwrap_or_default(), header("content-type").unwrap_or_default());
        let outcome = decide::decide(&x, &status, &content_type, Some(&MERGED));
        let answers = response::answer(&outcome);
        assert!(!answers.is_empty(), "no answer to a response-headers message");
        for a in answers {
            // What Envoy receives (a pre-encoded head and the shared body
            // included) is a message it can decode.
            assert!(ProcessingResponse::decode(a.encoded().as_slice()).is_ok(), "an answer does not decode");
        }
    }
}
