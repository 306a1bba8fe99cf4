//! Tests of `router.rs`.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
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
        router.on_request_headers(&request, 1, true);
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

/// A request the host kept back (the native build holding it) is counted
/// when it is routed at last, once — not also when it was held.
#[test]
fn a_request_kept_back_is_counted_once_when_it_goes_on() {
    let refresher = published();
    let router = Router::new(RouterConfig::default(), &refresher.sibling());
    let request = refresher.sibling().with_path("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c");
    request.keep_back_pins.set(true);
    router.on_request_headers(&request, 1, true);
    router.flush(&request);
    assert_eq!(request.counter(Counter::Rerouted), 0, "held: not routed yet");
    assert!(request.header_values("x-mvp-route").is_empty());
    request.keep_back_pins.set(false);
    router.reroute(&request);
    router.flush(&request);
    assert_eq!(request.counter(Counter::Rerouted), 1);
    assert_eq!(request.header_values("x-mvp-route"), ["127.0.0.1:1002"]);
}

#[test]
fn loads_a_new_table_on_the_next_request() {
    let refresher = FakeHost::default();
    let worker = refresher.sibling();
    let router = Router::new(RouterConfig::default(), &worker);
    let request = refresher.sibling().with_path("/apis/resource.k8s.io/v1/resourceclaims");
    router.on_request_headers(&request, 1, true);
    assert!(request.header_values("x-mvp-route").is_empty(), "no table yet: load balancing");

    let t = sample();
    publish(&refresher, &NewTable { version: t.version, encoded: t.encode_to_vec() }).unwrap();
    let request = refresher.sibling().with_path("/apis/resource.k8s.io/v1/resourceclaims");
    router.on_request_headers(&request, 1, true);
    assert_eq!(request.header_values("x-mvp-route"), ["127.0.0.1:1002"]);
    assert_eq!(request.counter(Counter::TableLoads), 1);

    publish(&refresher, &NewTable { version: 9, encoded: b"junk".to_vec() }).unwrap();
    let request = refresher.sibling().with_path("/apis/resource.k8s.io/v1/resourceclaims");
    router.on_request_headers(&request, 1, true);
    assert_eq!(request.header_values("x-mvp-route"), ["127.0.0.1:1002"], "last good table kept");
    assert_eq!(request.counter(Counter::TableErrors), 1);
}

#[test]
fn forwards_a_verified_certificate_identity() {
    let names = IdentityConfig { username_header: "x-remote-user".into(), group_header: "x-remote-group".into() };
    let config = RouterConfig { identity: Some(names), ..RouterConfig::default() };
    let router = Router::new(config, &FakeHost::default());

    let request = FakeHost { subject: Some(b"CN=alice,O=dev,O=ops".to_vec()), ..FakeHost::default() }.with_path("/api/v1/pods");
    router.on_request_headers(&request, 1, true);
    assert_eq!(request.header_values("x-remote-user"), ["alice"]);
    assert_eq!(request.header_values("x-remote-group"), ["ops", "dev"]);

    for subject in [None, Some(Vec::new()), Some(b"O=no-cn".to_vec())] {
        let request = FakeHost { subject, ..FakeHost::default() }.with_path("/api/v1/pods");
        router.on_request_headers(&request, 1, true);
        assert!(request.header_values("x-remote-user").is_empty());
    }
}

/// A certificate whose user or group a header cannot carry exactly is
/// answered 401 by the filter: nothing forwarded, nothing routed, the
/// route header marked for the local reply mapper's Status.
#[test]
fn refuses_an_identity_a_header_cannot_carry() {
    let names = IdentityConfig { username_header: "x-remote-user".into(), group_header: "x-remote-group".into() };
    let config = RouterConfig { identity: Some(names), ..RouterConfig::default() };
    let router = Router::new(config, &FakeHost::default());
    for (subject, details) in [
        (&b"CN=x\\0D\\0AX-Remote-Group: system:masters"[..], "mvp_identity_refused{CN_control_character}"),
        (b"CN=alice,O=system:masters\\00", "mvp_identity_refused{O_control_character}"),
        (b"CN=system:admin\\ ", "mvp_identity_refused{CN_edge_space}"),
    ] {
        let request = FakeHost { subject: Some(subject.to_vec()), ..FakeHost::default() }.with_path("/apis/resource.k8s.io/v1/resourceclaims");
        assert_eq!(router.on_request_headers(&request, 1, true), Action::Answered);
        assert_eq!(*request.replies.borrow(), [(401, details.to_string())]);
        assert!(request.header_values("x-remote-user").is_empty() && request.header_values("x-remote-group").is_empty());
        assert_eq!(request.header_values("x-mvp-route"), [mvp_contract::headers::IDENTITY_REFUSED]);
        assert_eq!(request.counter(Counter::IdentityRefused), 1);
    }
}

mod hold {
    use super::*;
    use mvp_contract::headers::UNAVAILABLE;
    use mvp_contract::plugin::HoldConfig;
    use mvp_protos::routing::v1 as pb;

    const JOBS: &str = "/apis/batch/v1/namespaces/ns/jobs/j";

    /// The sample with c — alone serving batch/v1 jobs — closed
    /// (restarting: it answers, not read yet), or open again in a newer
    /// version.
    fn table(c_open: bool, version: u64) -> pb::RoutingTable {
        let mut t = sample();
        t.version = version;
        t.apiservers[2].closed = !c_open;
        t.apiservers[2].pending = !c_open;
        t.apiservers[2].returning = !c_open;
        t.apiservers[2].healthy = c_open;
        t
    }

    /// c closed and down: its port refuses connections, nothing says it
    /// is coming back.
    fn c_down(version: u64) -> pb::RoutingTable {
        let mut t = table(false, version);
        t.apiservers[2].returning = false;
        t
    }

    fn publish_table(host: &FakeHost, t: &pb::RoutingTable) {
        publish(host, &NewTable { version: t.version, encoded: t.encode_to_vec() }).unwrap();
    }

    fn router(refresher: &FakeHost, max_held: u32) -> Router {
        let config = RouterConfig { export_route_key: true, hold: Some(HoldConfig { max_held, ..HoldConfig::default() }), ..RouterConfig::default() };
        Router::new(config, &refresher.sibling())
    }

    /// The worker's root context when its call answers: the call's answer
    /// (none: it failed), the held requests (context → path), the time.
    fn answering(refresher: &FakeHost, reply: Option<pb::GetTableResponse>, requests: &[(u32, &str)], now: u64) -> FakeHost {
        let mut host = refresher.sibling();
        host.now.set(now);
        for (c, p) in requests {
            host.add_request(*c, p);
        }
        if let Some(msg) = reply {
            let msg = msg.encode_to_vec();
            host.call_headers = vec![(":status".into(), b"200".to_vec())];
            host.call_trailers = vec![("grpc-status".into(), b"0".to_vec())];
            host.call_body = vec![0];
            host.call_body.extend_from_slice(&(msg.len() as u32).to_be_bytes());
            host.call_body.extend_from_slice(&msg);
        }
        host
    }

    fn new_table(t: pb::RoutingTable) -> Option<pb::GetTableResponse> {
        Some(pb::GetTableResponse { table: Some(t), waited: false })
    }

    fn held_property(host: &FakeHost) -> Option<String> {
        host.properties.borrow().get("mvp_held").map(|v| String::from_utf8_lossy(v).into_owned())
    }

    /// Holds `n` requests for jobs (contexts 1..=n) at time `at`.
    fn hold_jobs(router: &Router, refresher: &FakeHost, contexts: std::ops::RangeInclusive<u32>, at: u64) {
        for c in contexts {
            let request = refresher.sibling().with_path(JOBS);
            request.now.set(at);
            assert_eq!(router.on_request_headers(&request, c, true), Action::Pause);
            assert!(request.header_values("x-mvp-route").is_empty(), "not answered yet");
        }
    }

    #[test]
    fn requests_only_a_restarting_server_serves_are_served_once_it_is_read() {
        let refresher = FakeHost::default();
        publish_table(&refresher, &table(false, 7));
        let router = router(&refresher, 8);
        hold_jobs(&router, &refresher, 1..=2, 0);

        // One answer for both; a request gone meanwhile is skipped.
        let answer = answering(&refresher, new_table(table(true, 8)), &[(1, JOBS)], 120);
        router.on_hold_answer(&answer, 1);
        assert_eq!(answer.request_values(1, "x-mvp-route"), ["127.0.0.1:1003"]);
        assert_eq!(*answer.continued.borrow(), [1]);
        assert_eq!(held_property(&answer).as_deref(), Some("120 routed"));
        assert_eq!(answer.counter(Counter::HeldThenUnavailable), 0);
        assert!(answer.calls.borrow().is_empty(), "nothing left to hold");

        // A request held before the refresher publishes the new table asks
        // with the old version; the answer's table, decoded once, routes it.
        hold_jobs(&router, &refresher, 3..=3, 200);
        let answer = answering(&refresher, new_table(table(true, 8)), &[(3, JOBS)], 205);
        router.on_hold_answer(&answer, 1);
        assert_eq!(answer.request_values(3, "x-mvp-route"), ["127.0.0.1:1003"]);

        // Once it is published, nothing is held.
        publish_table(&refresher, &table(true, 8));
        let request = refresher.sibling().with_path(JOBS);
        assert_eq!(router.on_request_headers(&request, 4, true), Action::Continue);
        assert_eq!(request.header_values("x-mvp-route"), ["127.0.0.1:1003"]);
    }

    #[test]
    fn held_requests_get_the_503_when_no_table_opens_their_server_in_time() {
        let refresher = FakeHost::default();
        publish_table(&refresher, &table(false, 7));
        let router = router(&refresher, 8);
        hold_jobs(&router, &refresher, 1..=1, 0);
        hold_jobs(&router, &refresher, 2..=2, 600);
        let both = [(1, JOBS), (2, JOBS)];

        // A newer table that still has c closed: both held again, until
        // the first one's deadline.
        let answer = answering(&refresher, new_table(table(false, 9)), &both, 300);
        router.on_hold_answer(&answer, 1);
        assert!(answer.continued.borrow().is_empty(), "still held");
        assert_eq!(answer.calls.borrow()[0].1, crate::get_table::request_body(9, 700));

        // That wait passed with nothing newer: the first gets the 503 (as
        // unheld), the second is held on until its own deadline.
        let answer = answering(&refresher, Some(pb::GetTableResponse { table: None, waited: true }), &both, 1000);
        router.on_hold_answer(&answer, 1);
        assert_eq!(answer.request_values(1, "x-mvp-route"), [UNAVAILABLE]);
        assert_eq!(*answer.continued.borrow(), [1]);
        assert_eq!(held_property(&answer).as_deref(), Some("1000 unavailable"));
        assert_eq!(answer.counter(Counter::HeldThenUnavailable), 1);
        assert_eq!(answer.calls.borrow()[0].1, crate::get_table::request_body(9, 600));
    }

    /// The published table went back to the version this worker holds
    /// while it was idle (c read, then killed again: the same content, the
    /// same version). The table a hold call brought in between (c open) is
    /// old news: the answer "current" for the worker's version drops it, and
    /// the held request gets its 503 instead of c's dead address.
    #[test]
    fn an_answer_current_drops_a_kept_table_the_published_one_went_back_from() {
        let refresher = FakeHost::default();
        publish_table(&refresher, &table(false, 7));
        let router = router(&refresher, 8);
        hold_jobs(&router, &refresher, 1..=1, 0);
        let answer = answering(&refresher, new_table(table(true, 8)), &[(1, JOBS)], 50);
        router.on_hold_answer(&answer, 1);
        assert_eq!(answer.request_values(1, "x-mvp-route"), ["127.0.0.1:1003"]);

        publish_table(&refresher, &table(true, 8));
        publish_table(&refresher, &table(false, 7));
        hold_jobs(&router, &refresher, 2..=2, 100);
        let current = Some(pb::GetTableResponse { table: None, waited: true });
        let answer = answering(&refresher, current, &[(2, JOBS)], 1100);
        router.on_hold_answer(&answer, 1);
        assert_eq!(answer.request_values(2, "x-mvp-route"), [UNAVAILABLE]);
        assert_eq!(held_property(&answer).as_deref(), Some("1000 unavailable"));
    }

    #[test]
    fn a_failed_call_lets_every_held_request_go_by_the_newest_table_at_once() {
        let refresher = FakeHost::default();
        publish_table(&refresher, &table(false, 7));
        let router = router(&refresher, 8);
        hold_jobs(&router, &refresher, 1..=1, 0);
        // mvp-ext-proc unreachable: no status, no body; never held again.
        let answer = answering(&refresher, None, &[(1, JOBS)], 5);
        router.on_hold_answer(&answer, 1);
        assert_eq!((answer.request_values(1, "x-mvp-route"), answer.continued.borrow().clone()), (vec![UNAVAILABLE.to_string()], vec![1]));
        assert!(answer.calls.borrow().is_empty());

        // The refresher published meanwhile: the worker's table routes it.
        hold_jobs(&router, &refresher, 2..=2, 10);
        publish_table(&refresher, &table(true, 8));
        let answer = answering(&refresher, None, &[(2, JOBS)], 20);
        router.on_hold_answer(&answer, 1);
        assert_eq!(answer.request_values(2, "x-mvp-route"), ["127.0.0.1:1003"]);

        // An answer to a call not the router's changes nothing.
        let answer = answering(&refresher, None, &[(3, JOBS)], 30);
        router.on_hold_answer(&answer, 77);
        assert!(answer.continued.borrow().is_empty());
    }

    /// Issue 63 item 1: a hold only while a wait can help. c down: the
    /// 503 Status at once, no call, nothing held (the native host writes
    /// it though it keeps other pins back). c coming back: held; and when a
    /// newer table says c is down again, the held request gets its 503 at
    /// once instead of at its deadline.
    #[test]
    fn holds_only_while_the_server_that_serves_it_is_coming_back() {
        let refresher = FakeHost::default();
        publish_table(&refresher, &c_down(7));
        let router = router(&refresher, 8);
        let request = refresher.sibling().with_path(JOBS);
        request.keep_back_pins.set(true);
        assert_eq!(router.on_request_headers(&request, 1, true), Action::Continue);
        assert_eq!(request.header_values("x-mvp-route"), [UNAVAILABLE]);
        assert_eq!((request.unavailable_written.get(), request.counter(Counter::Held), request.counter(Counter::HoldRefused)), (1, 0, 0));
        assert!(request.calls.borrow().is_empty(), "no call: nothing to wait for");

        publish_table(&refresher, &table(false, 8));
        hold_jobs(&router, &refresher, 2..=2, 0);
        let answer = answering(&refresher, new_table(c_down(9)), &[(2, JOBS)], 40);
        router.on_hold_answer(&answer, 1);
        assert_eq!(answer.request_values(2, "x-mvp-route"), [UNAVAILABLE]);
        assert_eq!(*answer.continued.borrow(), [2]);
        assert_eq!(held_property(&answer).as_deref(), Some("40 unavailable"), "answered when c went down, not at its deadline");
        assert!(answer.calls.borrow().is_empty(), "not held again");
    }

    #[test]
    fn holds_only_what_would_be_a_503_and_at_most_max_held() {
        let refresher = FakeHost::default();
        publish_table(&refresher, &table(false, 7));
        let router = router(&refresher, 2);
        let served = refresher.sibling().with_path("/apis/apps/v1/namespaces/ns/deployments");
        assert_eq!(router.on_request_headers(&served, 1, true), Action::Continue);
        assert!(served.calls.borrow().is_empty());

        hold_jobs(&router, &refresher, 2..=3, 0);
        let third = refresher.sibling().with_path(JOBS);
        assert_eq!(router.on_request_headers(&third, 4, true), Action::Continue, "max_held is 2");
        assert_eq!(third.header_values("x-mvp-route"), [UNAVAILABLE]);
        assert_eq!(third.counter(Counter::HoldRefused), 1);

        // Without hold configured: the 503 at once.
        let unheld = Router::new(RouterConfig::default(), &refresher.sibling());
        let request = refresher.sibling().with_path(JOBS);
        assert_eq!(unheld.on_request_headers(&request, 5, true), Action::Continue);
        assert_eq!(request.header_values("x-mvp-route"), [UNAVAILABLE]);
    }
}

/// A request kube counts as long-running (a watch, logs, exec, …) gets no
/// route timeout; any other keeps the front door's.
#[test]
fn only_long_running_requests_lift_the_route_timeout() {
    let router = Router::new(RouterConfig::default(), &FakeHost::default());
    for (path, lifted) in [
        ("/api/v1/namespaces/default/pods?watch=true", true),
        ("/api/v1/namespaces/default/pods/p/log?follow=true", true),
        ("/api/v1/namespaces/default/pods/p/exec?command=sh", true),
        ("/api/v1/namespaces/default/pods", false),
        ("/api/v1/namespaces/default/pods/p", false),
        ("/apis", false),
    ] {
        let request = FakeHost::default().with_path(path);
        router.on_request_headers(&request, 1, true);
        let want: &[&str] = if lifted { &["0"] } else { &[] };
        assert_eq!(request.header_values(mvp_contract::headers::UPSTREAM_TIMEOUT), want, "{path}");
    }
}

/// Requests for resources only some apiservers serve carry the skew record
/// (label, tab, the bearer token's claimed subject); a resource every
/// apiserver serves — pinned or not — and anything not a resource carry
/// none; and none at all unless the config asks.
#[test]
fn marks_requests_for_skewed_resources_only() {
    use base64::Engine;
    let refresher = published();
    let b = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let token = format!("Bearer {}.{}.sig", b("{}"), b(r#"{"sub":"system:serviceaccount:ns:sa"}"#));
    for record_skew in [true, false] {
        let router = Router::new(RouterConfig { record_skew, ..RouterConfig::default() }, &refresher.sibling());
        for (path, bearer, want) in [
            ("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c", true, Some("resource.k8s.io/v1/resourceclaims\tsystem:serviceaccount:ns:sa")),
            ("/apis/apps/v1/namespaces/ns/deployments/d/scale", false, Some("apps/v1/deployments/scale\t")),
            // A subresource the table does not know: labelled as the
            // resource it routes as, the client's bytes (a tab would split
            // the record) left out.
            ("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/x%09system:masters", false, Some("resource.k8s.io/v1/resourceclaims\t")),
            // Only closed c serves it: the 503, still a skewed API.
            ("/apis/batch/v1/jobs", false, Some("batch/v1/jobs\t")),
            // Every member serves it (c is closed: pinned, not skewed).
            ("/api/v1/namespaces/ns/pods", true, None),
            ("/apis/resource.k8s.io/v1", true, None),
            ("/healthz", true, None),
        ] {
            let request = refresher.sibling().with_path(path);
            if bearer {
                request.headers.borrow_mut().push(("authorization".into(), token.clone()));
            }
            router.on_request_headers(&request, 1, true);
            let got = request.properties.borrow().get("mvp_skew").cloned();
            let want = want.filter(|_| record_skew);
            assert_eq!(got.as_deref(), want.map(str::as_bytes), "{path} (record_skew {record_skew})");
        }
    }
}

/// A resource only members older than the newest release serve gets the
/// warning; one a newer member serves too does not; none unless asked.
#[test]
fn warns_of_what_only_older_releases_serve() {
    let refresher = FakeHost::default();
    let mut t = sample();
    t.apiservers[0].older = true;
    t.newest_release = "1.37".into();
    publish(&refresher, &NewTable { version: t.version, encoded: t.encode_to_vec() }).unwrap();
    for warn_on_skew in [true, false] {
        let router = Router::new(RouterConfig { warn_on_skew, ..RouterConfig::default() }, &refresher.sibling());
        for (path, warned) in [
            ("/apis/apps/v1/namespaces/ns/deployments/d/scale", true),
            ("/apis/apps/v1/namespaces/ns/deployments", false),
            ("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims", false),
            ("/apis/apps/v1", false),
        ] {
            let request = refresher.sibling().with_path(path);
            router.on_request_headers(&request, 1, true);
            let got = request.properties.borrow().get("mvp_warning").cloned();
            assert_eq!(got.is_some(), warned && warn_on_skew, "{path} (warn_on_skew {warn_on_skew})");
            if let Some(w) = got {
                assert!(w.starts_with(b"299 - \"apps/v1 deployments/scale is served only by kube-apiservers older than 1.37"), "{}", String::from_utf8_lossy(&w));
            }
        }
    }
}

/// The warning names what the table knows, never a client's bytes: an
/// invented subresource with a quote, a backslash or a line break (kube's
/// `NewWarningHeader` refuses control characters) is left out.
#[test]
fn the_warning_carries_no_client_bytes() {
    let refresher = FakeHost::default();
    let mut t = sample();
    t.apiservers[0].older = true;
    t.apiservers[1].older = true;
    t.newest_release = "1.37".into();
    publish(&refresher, &NewTable { version: t.version, encoded: t.encode_to_vec() }).unwrap();
    let router = Router::new(RouterConfig { warn_on_skew: true, ..RouterConfig::default() }, &refresher.sibling());
    for path in ["/apis/apps/v1/namespaces/ns/deployments/d/%22x%0D%0AX-Evil:%201", "/apis/apps/v1/namespaces/ns/deployments/d/%5C%22", "/apis/apps/v1/namespaces/ns/deployments/d"] {
        let request = refresher.sibling().with_path(path);
        router.on_request_headers(&request, 1, true);
        let got = request.properties.borrow().get("mvp_warning").cloned().unwrap_or_default();
        assert_eq!(
            String::from_utf8_lossy(&got),
            "299 - \"apps/v1 deployments is served only by kube-apiservers older than 1.37: unavailable once the upgrade to 1.37 finishes\"",
            "{path}"
        );
    }
}
