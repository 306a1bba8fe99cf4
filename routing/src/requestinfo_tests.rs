//! Tests of `requestinfo.rs`.

#![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]
use super::*;
use crate::list_options::exact_name;

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Renders like kube's test tables: verb, apiPrefix-less group/version,
/// namespace, resource, name, subresource.
fn render(method: &str, raw: &str) -> String {
    let t = DecodedPath::parse(raw.as_bytes());
    match t.classify(Method::from_bytes(method.as_bytes())) {
        RequestInfo::Resource(r) => format!(
            "{:?} g={} v={} ns={} r={} n={} sub={}",
            r.verb,
            s(r.group),
            s(r.version),
            s(r.namespace),
            s(r.resource),
            s(&r.name),
            s(r.subresource)
        ),
        RequestInfo::Discovery { group, version } => {
            format!("discovery g={} v={}", s(group), version.map(s).unwrap_or_default())
        }
        RequestInfo::NonResource => "non-resource".into(),
        RequestInfo::Invalid => "invalid".into(),
    }
}

// Cases follow requestinfo_test.go (TestGetAPIRequestInfo and
// TestGetNonAPIRequestInfo) plus the MVP-relevant forms.
#[test]
fn table() {
    let cases: &[(&str, &str, &str)] = &[
        // resource-based
        ("GET", "/api/v1/namespaces", "List g= v=v1 ns= r=namespaces n= sub="),
        ("GET", "/api/v1/namespaces/other", "Get g= v=v1 ns=other r=namespaces n=other sub="),
        ("GET", "/api/v1/namespaces/other/pods", "List g= v=v1 ns=other r=pods n= sub="),
        ("GET", "/api/v1/namespaces/other/pods/foo", "Get g= v=v1 ns=other r=pods n=foo sub="),
        ("HEAD", "/api/v1/namespaces/other/pods/foo", "Get g= v=v1 ns=other r=pods n=foo sub="),
        ("GET", "/api/v1/pods", "List g= v=v1 ns= r=pods n= sub="),
        ("HEAD", "/api/v1/pods", "List g= v=v1 ns= r=pods n= sub="),
        ("GET", "/api/v1/namespaces/other/pods/foo", "Get g= v=v1 ns=other r=pods n=foo sub="),
        ("GET", "/api/v1/namespaces/other/pods", "List g= v=v1 ns=other r=pods n= sub="),
        // special verbs
        ("GET", "/api/v1/proxy/namespaces/other/pods/foo", "Proxy g= v=v1 ns=other r=pods n=foo sub="),
        ("GET", "/api/v1/proxy/namespaces/other/pods/foo/subpath/not/a/subresource", "Proxy g= v=v1 ns=other r=pods n=foo sub="),
        ("GET", "/api/v1/watch/pods", "Watch g= v=v1 ns= r=pods n= sub="),
        ("GET", "/api/v1/pods?watch=true", "Watch g= v=v1 ns= r=pods n= sub="),
        ("GET", "/api/v1/pods?watch=false", "List g= v=v1 ns= r=pods n= sub="),
        ("GET", "/api/v1/pods?watch=0", "List g= v=v1 ns= r=pods n= sub="),
        ("GET", "/api/v1/pods?watch=FALSE", "List g= v=v1 ns= r=pods n= sub="),
        ("GET", "/api/v1/pods?watch=", "Watch g= v=v1 ns= r=pods n= sub="),
        ("GET", "/api/v1/pods?watch=1&watch=false", "Watch g= v=v1 ns= r=pods n= sub="),
        ("GET", "/api/v1/watch/namespaces/other/pods", "Watch g= v=v1 ns=other r=pods n= sub="),
        ("GET", "/api/v1/namespaces/other/pods?watch=1", "Watch g= v=v1 ns=other r=pods n= sub="),
        // subresources
        ("GET", "/api/v1/namespaces/other/pods/foo/status", "Get g= v=v1 ns=other r=pods n=foo sub=status"),
        ("POST", "/api/v1/namespaces/other/pods/foo/exec", "Create g= v=v1 ns=other r=pods n=foo sub=exec"),
        ("GET", "/api/v1/namespaces/other/pods/foo/log", "Get g= v=v1 ns=other r=pods n=foo sub=log"),
        ("GET", "/api/v1/namespaces/other/pods/foo/proxy/subpath", "Get g= v=v1 ns=other r=pods n=foo sub=proxy"),
        ("PUT", "/api/v1/namespaces/other/finalize", "Update g= v=v1 ns=other r=namespaces n=other sub=finalize"),
        ("PUT", "/api/v1/namespaces/other/status", "Update g= v=v1 ns=other r=namespaces n=other sub=status"),
        // verb identification
        ("PATCH", "/api/v1/namespaces/other/pods/foo", "Patch g= v=v1 ns=other r=pods n=foo sub="),
        ("DELETE", "/api/v1/namespaces/other/pods/foo", "Delete g= v=v1 ns=other r=pods n=foo sub="),
        ("POST", "/api/v1/namespaces/other/pods", "Create g= v=v1 ns=other r=pods n= sub="),
        ("DELETE", "/api/v1/namespaces/other/pods", "DeleteCollection g= v=v1 ns=other r=pods n= sub="),
        ("OPTIONS", "/api/v1/namespaces/other/pods", "Other g= v=v1 ns=other r=pods n= sub="),
        // api group identification
        ("POST", "/apis/extensions/v1/namespaces/other/pods", "Create g=extensions v=v1 ns=other r=pods n= sub="),
        ("GET", "/apis/resource.k8s.io/v1beta1/resourceclaims", "List g=resource.k8s.io v=v1beta1 ns= r=resourceclaims n= sub="),
        ("GET", "/apis/apps/v1/namespaces/ns/deployments/d/scale", "Get g=apps v=v1 ns=ns r=deployments n=d sub=scale"),
        ("GET", "/apis/apps/v1/watch/namespaces/ns/deployments", "Watch g=apps v=v1 ns=ns r=deployments n= sub="),
        // more than one subresource segment: only the first counts
        ("GET", "/api/v1/namespaces/other/pods/foo/proxy/a/b", "Get g= v=v1 ns=other r=pods n=foo sub=proxy"),
        // field selector names a list
        ("GET", "/api/v1/namespaces/other/pods?fieldSelector=metadata.name%3Dfoo", "List g= v=v1 ns=other r=pods n=foo sub="),
        ("GET", "/api/v1/namespaces/other/pods?fieldSelector=metadata.name%3D%3Dfoo&watch=true", "Watch g= v=v1 ns=other r=pods n=foo sub="),
        ("GET", "/api/v1/namespaces/other/pods?fieldSelector=metadata.name%3Da%2Fb", "List g= v=v1 ns=other r=pods n= sub="),
        // trailing and repeated slashes, as Go splits them
        ("GET", "/api/v1/namespaces/other/pods/", "List g= v=v1 ns=other r=pods n= sub="),
        ("GET", "/api/v1//pods", "Get g= v=v1 ns= r= n=pods sub="),
        ("GET", "//api/v1/pods", "List g= v=v1 ns= r=pods n= sub="),
        // percent-encoding is decoded first, like Go's URL.Path
        ("GET", "/apis/apps/v1/namespaces/n%2Fx/deployments", "Get g=apps v=v1 ns=n r=x n=deployments sub="),
        ("GET", "/api/v1/namespaces/default/pods/my%2Dpod", "Get g= v=v1 ns=default r=pods n=my-pod sub="),
        ("GET", "/api/v1/namespaces/default/pods/%zz", "Get g= v=v1 ns=default r=pods n=%zz sub="),
        // discovery forms the front door routes
        ("GET", "/apis/apps", "discovery g=apps v="),
        ("GET", "/apis/apps/v1", "discovery g=apps v=v1"),
        ("GET", "/apis/apps/v1/", "discovery g=apps v=v1"),
        ("GET", "/api/v1", "discovery g= v=v1"),
        // non-resource
        ("GET", "/", "non-resource"),
        ("GET", "/api", "non-resource"),
        ("GET", "/apis", "non-resource"),
        ("GET", "/apis/", "non-resource"),
        ("GET", "/healthz", "non-resource"),
        ("GET", "/version", "non-resource"),
        ("GET", "/openapi/v3/apis/apps/v1", "non-resource"),
        ("GET", "/metrics", "non-resource"),
        ("GET", "/other/api/v1/pods", "non-resource"),
        ("GET", "/apisx/apps/v1/deployments", "non-resource"),
        // errors kube's RequestInfo filter rejects
        ("GET", "/api/v1/watch", "invalid"),
        ("GET", "/apis/apps/v1/proxy", "invalid"),
        ("GET", "/apis/apps/v1/watch/", "invalid"),
    ];
    for (method, path, want) in cases {
        assert_eq!(render(method, path), *want, "{method} {path}");
    }
}

#[test]
fn field_selector_name_is_recognised() {
    let n = |s: &'static [u8]| exact_name(Cow::Borrowed(s)).map(|c| c.into_owned());
    assert_eq!(n(b"metadata.name=foo"), Some(b"foo".to_vec()));
    assert_eq!(n(b"spec.x=1,metadata.name==foo"), Some(b"foo".to_vec()));
    assert_eq!(n(b"metadata.name!=foo"), None);
    assert_eq!(n(b"metadata.name=.."), None);
    assert_eq!(n(b"metadata.name=a/b"), None);
}

#[test]
fn non_utf8_segments_classify() {
    let raw = b"/apis/\xff\xfe/v1/things/\x80";
    let t = DecodedPath::parse(raw);
    match t.classify(Method::Get) {
        RequestInfo::Resource(r) => {
            assert_eq!(r.group, b"\xff\xfe");
            assert_eq!(r.resource, b"things");
            assert_eq!(&*r.name, b"\x80");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn huge_paths_are_cheap_and_safe() {
    let mut p = b"/apis/apps/v1/namespaces/ns/deployments/d/scale".to_vec();
    for _ in 0..100_000 {
        p.extend_from_slice(b"/x");
    }
    let t = DecodedPath::parse(&p);
    match t.classify(Method::Get) {
        RequestInfo::Resource(r) => assert_eq!(r.subresource, b"scale"),
        other => panic!("{other:?}"),
    }
    let slashes = vec![b'/'; 1 << 20];
    assert_eq!(DecodedPath::parse(&slashes).classify(Method::Get), RequestInfo::NonResource);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]
    #[test]
    fn never_panics_on_arbitrary_bytes(raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
        let t = DecodedPath::parse(&raw);
        let _ = t.classify(Method::Get);
        let _ = t.classify(Method::Delete);
    }

    #[test]
    fn never_panics_on_path_like_input(
        parts in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::strategy::Just("api".to_string()),
                proptest::strategy::Just("apis".to_string()),
                proptest::strategy::Just("namespaces".to_string()),
                proptest::strategy::Just("watch".to_string()),
                proptest::strategy::Just("proxy".to_string()),
                proptest::strategy::Just("status".to_string()),
                proptest::strategy::Just("..".to_string()),
                proptest::strategy::Just("".to_string()),
                proptest::strategy::Just("%2F".to_string()),
                proptest::strategy::Just("%".to_string()),
                "[a-z0-9.%?=&-]{0,12}",
            ],
            0..14,
        )
    ) {
        let raw = format!("/{}", parts.join("/"));
        let t = DecodedPath::parse(raw.as_bytes());
        for m in [Method::Get, Method::Post, Method::Delete, Method::Other] {
            if let RequestInfo::Resource(r) = t.classify(m) {
                // Every field borrows from the decoded path.
                for f in [r.group, r.version, r.resource, r.subresource] {
                    proptest::prop_assert!(f.is_empty() || t.path().windows(f.len()).any(|w| w == f));
                }
            }
        }
    }
}

/// Routing reads exactly RequestInfo's group/version/resource/subresource
/// (or the discovery document), whatever the method and query.
fn agrees(raw: &[u8]) -> bool {
    let t = DecodedPath::parse(raw);
    let key = route_key(&t);
    [Method::Get, Method::Post, Method::Delete, Method::Other].into_iter().all(|m| match (t.classify(m), key) {
        (RequestInfo::Resource(r), RouteKey::Resource { group, version, resource, subresource }) => {
            (r.group, r.version, r.resource, r.subresource) == (group, version, resource, subresource)
        }
        (RequestInfo::Discovery { group: g, version: v }, RouteKey::Discovery { group, version }) => (g, v) == (group, version),
        (RequestInfo::NonResource | RequestInfo::Invalid, RouteKey::None) => true,
        (RequestInfo::NonResource, RouteKey::OpenApiV3 { .. }) => true,
        _ => false,
    })
}

#[test]
fn route_key_is_classify_without_verb() {
    for raw in [
        &b"/api/v1/namespaces/ns/pods/p/status?watch=1"[..],
        b"/apis/apps/v1/watch/namespaces/ns/deployments?fieldSelector=metadata.name%3Dx",
        b"/apis/apps/v1/proxy/nodes/n/a/b",
        b"/apis/apps/v1",
        b"/api/v1/watch",
        b"/healthz",
        b"/openapi/v3/apis/apps/v1",
    ] {
        assert!(agrees(raw), "{}", String::from_utf8_lossy(raw));
    }
}

proptest::proptest! {
    #[test]
    fn route_key_agrees_with_classify(raw in "(/(api|apis|v1|apps|namespaces|ns|watch|proxy|status|finalize|pods|p|%2F|)){0,10}(\\?(watch=1|fieldSelector=metadata.name=x))?") {
        proptest::prop_assert!(agrees(raw.as_bytes()));
    }
}

/// kube-apiserver's long-running requests (no request timeout), as its
/// `BasicLongRunningRequestCheck` names them, and ordinary ones.
#[test]
fn long_running_requests_are_kubes() {
    let cases = [
        ("/api/v1/namespaces/default/pods?watch=true", true),
        ("/api/v1/namespaces/default/pods?watch=1&resourceVersion=5", true),
        ("/api/v1/namespaces/default/pods?allowWatchBookmarks=true&watch=true", true),
        ("/apis/apps/v1/watch/namespaces/default/deployments", true),
        ("/api/v1/watch/pods", true),
        ("/api/v1/namespaces/default/pods/p/log?follow=true", true),
        ("/api/v1/namespaces/default/pods/p/log", true),
        ("/api/v1/namespaces/default/pods/p/exec?command=sh", true),
        ("/api/v1/namespaces/default/pods/p/attach", true),
        ("/api/v1/namespaces/default/pods/p/portforward", true),
        ("/api/v1/namespaces/default/services/s/proxy/metrics", true),
        ("/api/v1/proxy/namespaces/default/pods/p", true),
        ("/api/v1/namespaces/default/pods", false),
        ("/api/v1/namespaces/default/pods?watch=false", false),
        ("/api/v1/namespaces/default/pods?limit=500&continue=watch", false),
        ("/api/v1/namespaces/default/pods/p?watch=true", false),
        ("/api/v1/namespaces/watch/pods", false),
        ("/api/v1/namespaces/default/pods/p/status", false),
        ("/apis/apps/v1/namespaces/default/deployments/d/scale", false),
        ("/apis", false),
        ("/openapi/v2", false),
        ("/healthz?watch=true", false),
        ("/debug/pprof/profile?seconds=30", true),
        ("/debug/pprof/", true),
        ("/debug/pprof", false),
        ("/debug/flags/v", false),
    ];
    for (raw, want) in cases {
        let path = DecodedPath::parse(raw.as_bytes());
        assert_eq!(route_key_and_long_running(&path).1, want, "{raw}");
    }
}

/// kube's long-running check read off the full RequestInfo of a GET: the
/// verbs watch and proxy, or one of the long-running subresources; or a
/// non-resource path under `/debug/pprof/`.
fn kube_long_running(t: &DecodedPath<'_>) -> bool {
    match t.classify(Method::Get) {
        RequestInfo::Resource(r) => {
            matches!(r.verb, Verb::Watch | Verb::Proxy) || matches!(r.subresource, b"attach" | b"exec" | b"proxy" | b"log" | b"portforward")
        }
        RequestInfo::NonResource => t.path().starts_with(b"/debug/pprof/"),
        _ => false,
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]
    /// The one walk the filter makes per request gives the key and the
    /// long-running answer the full classification gives.
    #[test]
    fn one_walk_gives_the_key_and_kubes_long_running(raw in "(/(api|apis|v1|apps|namespaces|ns|watch|proxy|status|log|exec|pods|p|%2F|debug|pprof|)){0,10}(\\?(watch=1|watch=false|w=watch|fieldSelector=metadata.name=x|watch=true&limit=1))?") {
        let t = DecodedPath::parse(raw.as_bytes());
        let (key, long_running) = route_key_and_long_running(&t);
        proptest::prop_assert_eq!(key, route_key(&t));
        proptest::prop_assert_eq!(long_running, kube_long_running(&t), "{}", raw);
    }
}
