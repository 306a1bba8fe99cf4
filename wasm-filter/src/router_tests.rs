//! Tests of `router.rs`.

#![allow(clippy::unwrap_used)]
use super::*;
use crate::get_table::NewTable;
use crate::host_fake::FakeHost;
use crate::shared_table::publish;
use mvp_routing::testing::sample;
use prost::Message;

fn published() -> FakeHost {
    let refresher = FakeHost::default();
    let t = sample();
    publish(&refresher, &NewTable { version: t.version, encoded: t.encode_to_vec() }).unwrap();
    refresher
}

#[test]
fn pins_requests_only_some_apiservers_serve() {
    let refresher = published();
    let router = Router::new(RouterConfig { export_route_key: true, ..RouterConfig::default() }, &refresher.sibling());
    for (path, want, key) in [
        ("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c", vec!["127.0.0.1:1002"], Some("resource.k8s.io/v1/resourceclaims")),
        // a and b serve it (c does not): the second pinned request starts
        // the rotation at b
        ("/apis/apps/v1/namespaces/ns/deployments", vec!["127.0.0.1:1002,127.0.0.1:1001"], Some("apps/v1/deployments")),
        ("/apis/unknown.example/v1/things", vec![], Some("unknown.example/v1/things")),
        ("/healthz", vec![], None),
    ] {
        let request = refresher.sibling().with_path(path);
        router.on_request_headers(&request);
        assert_eq!(request.header_values("x-mvp-route"), want, "{path}");
        // Every routed request names its key (for the access log).
        let property = request.properties.borrow().get("mvp_route_key").cloned();
        assert_eq!(property.as_deref(), key.map(str::as_bytes), "{path}");
    }
    let worker = refresher.sibling();
    router.flush(&worker);
    assert_eq!(worker.counter(Counter::Rerouted), 2);
    router.flush(&worker);
    assert_eq!(worker.counter(Counter::Rerouted), 2);
}

#[test]
fn loads_a_new_table_on_the_next_request() {
    let refresher = FakeHost::default();
    let worker = refresher.sibling();
    let router = Router::new(RouterConfig::default(), &worker);
    let request = refresher.sibling().with_path("/apis/resource.k8s.io/v1/resourceclaims");
    router.on_request_headers(&request);
    assert!(request.header_values("x-mvp-route").is_empty(), "no table yet: load balancing");

    let t = sample();
    publish(&refresher, &NewTable { version: t.version, encoded: t.encode_to_vec() }).unwrap();
    let request = refresher.sibling().with_path("/apis/resource.k8s.io/v1/resourceclaims");
    router.on_request_headers(&request);
    assert_eq!(request.header_values("x-mvp-route"), ["127.0.0.1:1002"]);
    assert_eq!(request.counter(Counter::TableLoads), 1);

    publish(&refresher, &NewTable { version: 9, encoded: b"junk".to_vec() }).unwrap();
    let request = refresher.sibling().with_path("/apis/resource.k8s.io/v1/resourceclaims");
    router.on_request_headers(&request);
    assert_eq!(request.header_values("x-mvp-route"), ["127.0.0.1:1002"], "last good table kept");
    assert_eq!(request.counter(Counter::TableErrors), 1);
}

#[test]
fn forwards_a_verified_certificate_identity() {
    let names = IdentityConfig { username_header: "x-remote-user".into(), group_header: "x-remote-group".into() };
    let config = RouterConfig { identity: Some(names), ..RouterConfig::default() };
    let router = Router::new(config, &FakeHost::default());

    let request = FakeHost { subject: Some(b"CN=alice,O=dev,O=ops".to_vec()), ..FakeHost::default() }.with_path("/api/v1/pods");
    router.on_request_headers(&request);
    assert_eq!(request.header_values("x-remote-user"), ["alice"]);
    assert_eq!(request.header_values("x-remote-group"), ["ops", "dev"]);

    for subject in [None, Some(Vec::new()), Some(b"O=no-cn".to_vec())] {
        let request = FakeHost { subject, ..FakeHost::default() }.with_path("/api/v1/pods");
        router.on_request_headers(&request);
        assert!(request.header_values("x-remote-user").is_empty());
    }
}
