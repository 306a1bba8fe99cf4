//! Tests of `route.rs`.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
use super::*;
use crate::testing::sample;
use mvp_contract::headers::UNAVAILABLE_DOCUMENT;

#[test]
fn decisions() {
    let t = RouteTable::from_proto(&sample()).unwrap();
    let cases: &[(&str, Option<&str>)] = &[
        ("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c", Some("127.0.0.1:1002")),
        ("/apis/resource.k8s.io/v1/watch/namespaces/ns/resourceclaims?resourceVersion=1", Some("127.0.0.1:1002")),
        ("/apis/resource.k8s.io/v1/resourceclaims?watch=true", Some("127.0.0.1:1002")),
        ("/apis/resource.k8s.io/v1", Some("127.0.0.1:1002")),
        ("/apis/resource.k8s.io", Some("127.0.0.1:1002")),
        ("/apis/apps/v1/namespaces/ns/deployments/d/scale", Some("127.0.0.1:1001")),
        ("/apis/batch/v1/namespaces/ns/jobs", Some("127.0.0.1:1003")),
        ("/api/v1/namespaces/ns/pods/p", None),
        ("/apis", None),
        ("/api", None),
        ("/healthz", None),
        ("/apis/unknown.example/v1/things", None),
        ("/apis/resource.k8s.io/v1/watch", None),
        ("/openapi/v3", Some("127.0.0.1:1001,127.0.0.1:1002")),
        ("/openapi/v3?timeout=32s", Some("127.0.0.1:1001,127.0.0.1:1002")),
        ("/openapi/v3/api/v1", Some("127.0.0.1:1001,127.0.0.1:1002")),
        ("/openapi/v3/apis/resource.k8s.io/v1?hash=ABC", Some("127.0.0.1:1002")),
        ("/openapi/v3/apis/resource.k8s.io%2Fv1", Some("127.0.0.1:1002")),
        ("/openapi/v3/apis/unknown.example/v1", None),
        ("/openapi/v3x", None),
        ("/openapi/v2", None),
    ];
    for (path, want) in cases {
        assert_eq!(decide(&t, path.as_bytes(), 0), *want, "{path}");
    }
}

#[test]
fn a_pinned_request_names_its_key() {
    let t = RouteTable::from_proto(&sample()).unwrap();
    let label = |p: &str| {
        let path = DecodedPath::parse(p.as_bytes());
        let (k, d) = route(&t, &path);
        d.hosts(0).map(|h| (h.to_string(), k.label()))
    };
    assert_eq!(label("/apis/apps/v1/namespaces/ns/deployments/d/scale"), Some(("127.0.0.1:1001".into(), "apps/v1/deployments/scale".into())));
    assert_eq!(label("/apis/resource.k8s.io/v1"), Some(("127.0.0.1:1002".into(), "apis/resource.k8s.io/v1".into())));
    assert_eq!(label("/openapi/v3"), Some(("127.0.0.1:1001,127.0.0.1:1002".into(), "openapi/v3".into())));
    assert_eq!(label("/api/v1/pods"), None);
}

#[test]
fn every_request_names_what_it_is_routed_by() {
    let t = RouteTable::from_proto(&sample()).unwrap();
    let key = |p: &str| route(&t, &DecodedPath::parse(p.as_bytes())).0.label();
    assert_eq!(key("/api/v1/namespaces/ns/pods/p"), "v1/pods");
    assert_eq!(key("/apis/unknown.example/v1/things"), "unknown.example/v1/things");
    assert_eq!(key("/healthz"), "");
}

#[test]
fn an_unknown_api_is_unavailable_while_a_members_api_set_is_unknown() {
    // c is restarting: closed and pending. It may come back serving more.
    let mut p = sample();
    p.apiservers[2].closed = true;
    p.apiservers[2].pending = true;
    let t = RouteTable::from_proto(&p).unwrap();
    let cases: &[(&str, Option<&str>)] = &[
        ("/apis/unknown.example/v1/things", Some(UNAVAILABLE)),
        // Documents: the same 503 without Retry-After.
        ("/apis/unknown.example/v1", Some(UNAVAILABLE_DOCUMENT)),
        ("/apis/apps/v2/deployments", Some(UNAVAILABLE)),
        ("/openapi/v3/apis/unknown.example/v1", Some(UNAVAILABLE_DOCUMENT)),
        // Known APIs route as before; non-resource paths are never touched.
        ("/apis/apps/v1/namespaces/ns/deployments/d/scale", Some("127.0.0.1:1001")),
        ("/apis", None),
        ("/healthz", None),
        ("/version", None),
    ];
    for (path, want) in cases {
        assert_eq!(decide(&t, path.as_bytes(), 0), *want, "{path}");
    }
    // Closed for good (departed): not pending, the 404 again.
    p.apiservers[2].pending = false;
    let t = RouteTable::from_proto(&p).unwrap();
    assert_eq!(decide(&t, b"/apis/unknown.example/v1/things", 0), None);
}

/// Only a closed member serves it: a resource request gets the 503 with
/// Retry-After, its discovery and OpenAPI documents the 503 without (a new
/// client's discovery must not wait out ten retries per document).
#[test]
fn documents_only_closed_members_serve_are_unavailable_without_retry_after() {
    let mut p = sample();
    p.apiservers[1].closed = true;
    let t = RouteTable::from_proto(&p).unwrap();
    let cases: &[(&str, &str)] = &[
        ("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims", UNAVAILABLE),
        ("/apis/resource.k8s.io/v1/resourceclaims?watch=1", UNAVAILABLE),
        ("/apis/resource.k8s.io/v1", UNAVAILABLE_DOCUMENT),
        ("/apis/resource.k8s.io", UNAVAILABLE_DOCUMENT),
        ("/openapi/v3/apis/resource.k8s.io/v1", UNAVAILABLE_DOCUMENT),
    ];
    for (path, want) in cases {
        assert_eq!(decide(&t, path.as_bytes(), 0), Some(*want), "{path}");
    }
}

/// Only closed members serve it and one of them is draining (shutting
/// down, still serving): pinned to the draining one as a last resort, for
/// resources and documents alike, instead of the 503.
#[test]
fn a_draining_member_is_the_last_resort_for_what_only_closed_members_serve() {
    let mut p = sample();
    p.apiservers[1].closed = true;
    p.apiservers[1].draining = true;
    let t = RouteTable::from_proto(&p).unwrap();
    for path in ["/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims", "/apis/resource.k8s.io/v1", "/openapi/v3/apis/resource.k8s.io/v1"] {
        let (_, d) = route(&t, &DecodedPath::parse(path.as_bytes()));
        assert!(matches!(d, Decision::LastResort { .. }), "{path}: {d:?}");
        assert_eq!(d.hosts(0), Some("127.0.0.1:1002"), "{path}");
    }
    // What an open member serves is never sent to the draining one.
    assert_eq!(decide(&t, b"/apis/apps/v1/namespaces/ns/deployments", 0), Some("127.0.0.1:1001"));
}

/// A hold helps only while a closed member that serves it is coming back
/// (`returning`: starting, being read); while every one is down — its port
/// refuses connections — the 503 Status is the answer at once (issue 63
/// item 1). The same for an API nobody is known to serve while a member's
/// API set is unknown.
#[test]
fn a_wait_helps_only_while_a_closed_member_that_serves_it_is_coming_back() {
    let helps = |p: &mvp_protos::routing::v1::RoutingTable, path: &str| {
        let t = RouteTable::from_proto(p).unwrap();
        let (_, d) = route(&t, &DecodedPath::parse(path.as_bytes()));
        assert!(matches!(d, Decision::Unavailable { .. }), "{path}: {d:?}");
        d.wait_helps()
    };
    let claims = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims";
    let unknown = "/apis/unknown.example/v1/things";
    let mut p = sample();
    // b alone serves resourceclaims; c is pending too.
    for i in [1, 2] {
        p.apiservers[i].closed = true;
        p.apiservers[i].pending = true;
    }
    assert!(!helps(&p, claims), "b down: no hold");
    assert!(!helps(&p, unknown), "b and c down: no hold for an unknown API either");
    p.apiservers[2].returning = true;
    assert!(!helps(&p, claims), "c coming back does not serve resourceclaims");
    assert!(helps(&p, unknown), "c coming back may serve an unknown API");
    p.apiservers[1].returning = true;
    assert!(helps(&p, claims) && helps(&p, "/apis/resource.k8s.io/v1"), "b coming back: held, resources and documents");
    // Not pending (departed): not coming back, whatever the flag says.
    p.apiservers[1].pending = false;
    assert!(!helps(&p, claims));
    // Nothing else changes: an open member's API is pinned as before.
    let t = RouteTable::from_proto(&p).unwrap();
    assert_eq!(decide(&t, b"/apis/apps/v1/namespaces/ns/deployments", 0), Some("127.0.0.1:1001"));
}
