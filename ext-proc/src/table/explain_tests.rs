use super::*;
use mvp_routing::testing::sample;

fn action(path: &str) -> (String, Option<String>) {
    let e = explain(&sample(), "GET", path).unwrap();
    (e.decision.action, e.decision.hosts)
}

#[test]
fn explains_what_the_filter_decides() {
    // The sample: a and b serve apps/v1 deployments, only a its scale; b
    // alone resource.k8s.io/v1; c (unhealthy) alone batch/v1 jobs.
    let pinned = |h: &str| ("pinned".to_string(), Some(h.to_string()));
    let balanced = ("loadBalanced".to_string(), None);
    assert_eq!(action("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c"), pinned("127.0.0.1:1002"));
    assert_eq!(action("/apis/apps/v1/namespaces/ns/deployments/d/scale"), pinned("127.0.0.1:1001"));
    assert_eq!(action("/api/v1/pods"), balanced);
    assert_eq!(action("/apis/unknown.example/v1/things"), balanced);
    assert_eq!(action("/healthz"), balanced);
    // Exactly the filter's own answer.
    let rt = RouteTable::from_proto(&sample()).unwrap();
    for path in ["/apis/batch/v1/namespaces/ns/jobs", "/apis/resource.k8s.io/v1", "/api/v1/pods", "/openapi/v3/api/v1"] {
        assert_eq!(action(path).1.as_deref(), mvp_routing::route::decide(&rt, path.as_bytes(), 0), "{path}");
    }
}

#[test]
fn says_why() {
    let e = explain(&sample(), "DELETE", "/apis/batch/v1/namespaces/ns/jobs/j").unwrap();
    assert_eq!((e.request.kind.as_str(), e.request.verb.as_deref(), e.request.name.as_deref()), ("resource", Some("delete"), Some("j")));
    assert_eq!(e.routed_by.as_deref(), Some("batch/v1/jobs"), "the access log's routedBy");
    assert!(e.decision.reason.contains("only c serves") && e.decision.reason.contains("503"), "{}", e.decision.reason);
    assert_eq!(e.apiservers.iter().map(|m| m.serves).collect::<Vec<_>>(), [Some(false), Some(false), Some(true)]);
    let text = render(&e);
    assert!(text.contains("decision:   pinned to 127.0.0.1:1003"), "{text}");
    let e = explain(&sample(), "GET", "/version").unwrap();
    assert!(e.decision.reason.contains("not a path the front door routes"));
    assert_eq!(e.routed_by, None);
    assert!(render(&e).contains("decision:   load balanced over every apiserver"));
    assert!(explain(&pb::RoutingTable::default(), "GET", "/").is_err(), "no table yet");
}

/// Every path of the sample, under every combination of closed, pending
/// and unhealthy members: explain's hosts are the filter's header.
#[test]
fn says_exactly_what_the_filter_does_whatever_the_members_state() {
    let paths = [
        "/api/v1/namespaces/default/pods/p",
        "/apis/apps/v1/namespaces/ns/deployments/d",
        "/apis/apps/v1/namespaces/ns/deployments/d/scale",
        "/apis/resource.k8s.io/v1/resourceclaims",
        "/apis/batch/v1/jobs",
        "/apis/unknown.example/v1/things",
        "/openapi/v3/api/v1",
        "/version",
    ];
    for mask in 0..(1u32 << 12) {
        let mut t = sample();
        for (i, a) in t.apiservers.iter_mut().enumerate() {
            a.closed = mask & (1 << i) != 0;
            a.pending = a.closed && mask & (1 << (i + 3)) != 0;
            a.healthy = mask & (1 << (i + 6)) == 0;
            a.draining = a.closed && mask & (1 << (i + 9)) != 0;
            // Coming back or down (tied to the health bit: both kinds
            // of each).
            a.returning = a.pending && mask & (1 << (i + 6)) != 0;
        }
        let closed: Vec<String> = t.apiservers.iter().filter(|a| a.closed).map(|a| a.address.clone()).collect();
        let rt = RouteTable::from_proto(&t).unwrap();
        for path in paths {
            let e = explain(&t, "GET", path).unwrap();
            let decided = mvp_routing::route::decide(&rt, path.as_bytes(), 0);
            let unavailable = matches!(decided, Some(mvp_contract::headers::UNAVAILABLE | mvp_contract::headers::UNAVAILABLE_DOCUMENT));
            assert_eq!(e.decision.hosts.as_deref(), decided.filter(|_| !unavailable), "{path} with {:?}", t.apiservers);
            let action = match decided {
                None => "loadBalanced",
                Some(_) if unavailable => "unavailable",
                Some(hosts) if hosts.split(',').all(|h| closed.iter().any(|c| c == h)) => "lastResort",
                Some(_) => "pinned",
            };
            assert_eq!(e.decision.action, action, "{path}: {}", e.decision.reason);
            let held = route::route(&rt, &DecodedPath::parse(path.as_bytes())).1.wait_helps();
            assert_eq!(e.decision.does.starts_with("held"), held, "{path}: {}", e.decision.does);
        }
    }
}

/// The operator's case: one member closed (hung). The filter pins even
/// an API every member serves to the open ones, and explain says so.
#[test]
fn a_closed_member_is_named_and_not_routed_to() {
    let mut t = sample();
    t.apiservers[0].closed = true;
    let e = explain(&t, "GET", "/api/v1/namespaces/default/pods").unwrap();
    assert_eq!((e.decision.action.as_str(), e.decision.hosts.as_deref()), ("pinned", Some("127.0.0.1:1002,127.0.0.1:1003")));
    assert!(e.decision.reason.contains("every apiserver serves v1 pods, but a is closed"), "{}", e.decision.reason);
    assert!(render(&e).contains("CLOSED"), "{}", render(&e));
    // Only a closed member serves the scale subresource: the 503.
    let e = explain(&t, "GET", "/apis/apps/v1/namespaces/ns/deployments/d/scale").unwrap();
    assert_eq!((e.decision.action.as_str(), e.decision.hosts.as_deref()), ("unavailable", None));
    assert_eq!(e.routed_by.as_deref(), Some("apps/v1/deployments/scale"));
    let text = render(&e);
    assert!(text.contains("  routed by:  apps/v1/deployments/scale\n"), "{text}");
    assert!(text.contains("  decision:   the 503 Status at once, not held"), "a is down: {text}");
    assert!(e.decision.reason.contains("none of them is coming back"), "{}", e.decision.reason);
    // a coming back (it answers, not read yet): held for it.
    t.apiservers[0].pending = true;
    t.apiservers[0].returning = true;
    let e = explain(&t, "GET", "/apis/apps/v1/namespaces/ns/deployments/d/scale").unwrap();
    let text = render(&e);
    assert!(e.decision.reason.contains("a is coming back"), "{}", e.decision.reason);
    assert!(
        text.contains("  decision:   held for a newer table, up to the front door's --hold-unavailable (5s unless set; 0s: not held): routed if an apiserver that serves it opens meanwhile, else the 503 Status"),
        "what the filter does first, before the 503: {text}"
    );
    assert!(!text.contains("unavailable to unavailable"), "{text}");
    assert!(e.decision.reason.contains("only a serves apps/v1 deployments/scale, and it is closed"), "{}", e.decision.reason);
    let e = explain(&t, "GET", "/apis/apps/v1/namespaces/ns/deployments/d").unwrap();
    assert!(e.decision.reason.contains("only b serve") || e.decision.reason.contains("only a, b serve"), "{}", e.decision.reason);
    assert!(e.decision.reason.contains("a closed, not routed to"), "{}", e.decision.reason);
}

#[test]
fn an_unknown_api_while_a_member_is_pending_is_unavailable() {
    let mut t = sample();
    t.apiservers[2].closed = true;
    t.apiservers[2].pending = true;
    let e = explain(&t, "GET", "/apis/unknown.example/v1/things").unwrap();
    assert_eq!(e.decision.action, "unavailable");
    assert!(e.decision.reason.contains("what c serves now is not known") && e.decision.reason.contains("503"), "{}", e.decision.reason);
}
