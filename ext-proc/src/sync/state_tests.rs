use super::*;
use crate::discover::Capabilities;
use std::time::Duration;

fn view(caps: Capabilities) -> ServerView {
    ServerView { capabilities: caps, groups: Default::default() }
}

#[test]
fn keeps_the_last_known_view_while_a_member() {
    let spec: ApiserverSpec = "a=http://127.0.0.1:1".parse().unwrap();
    let mut s = ServerState::new(spec);
    let t0 = Instant::now();
    let mut caps = Capabilities::default();
    caps.add_resource_name("apps", "v1", "deployments");
    s.succeeded(Arc::new(view(caps.clone())), t0);
    assert!(s.healthy);

    // Down for as long as you like: unhealthy, the API set kept (its
    // exclusive APIs get a 503 Status, never a 404).
    for _ in 0..3 {
        s.failed("boom".into());
        assert!(!s.healthy);
        assert_eq!(s.view.as_deref(), Some(&view(caps.clone())));
    }

    s.succeeded(Arc::new(view(caps.clone())), t0 + Duration::from_secs(3600));
    assert!(s.healthy);
    assert_eq!(s.view.as_deref(), Some(&view(caps)));
}

#[test]
fn never_seen_server_has_nothing_to_keep() {
    let mut s = ServerState::new("a=http://127.0.0.1:1".parse().unwrap());
    s.failed("refused".into());
    assert_eq!(s.view, None);
    assert_eq!(s.last_error.as_deref(), Some("refused"));
}

#[test]
fn a_restored_view_routes_until_the_first_read() {
    let mut s = ServerState::new("a=http://127.0.0.1:1".parse().unwrap());
    let mut caps = Capabilities::default();
    caps.add_resource_name("batch", "v2alpha1", "cronjobs");
    s.restored(LastKnown { view: view(caps.clone()), openapi: None });
    assert!(!s.healthy);
    assert_eq!(s.view.as_deref(), Some(&view(caps)));
}

/// Only a server that was ready is draining when its `/readyz` fails:
/// one still starting is not a last resort (it may answer 404 for what
/// it will serve); one that stops answering, or restarted, is not
/// draining any more.
#[test]
fn draining_is_a_ready_server_shutting_down_not_one_starting() {
    let t0 = Instant::now();
    let retention = Duration::from_secs(600);
    let mut starting = ServerState::new("a=http://127.0.0.1:1".parse().unwrap());
    starting.not_ready("/readyz: 500".into(), NotReady::Answered { shutting_down: None }, t0);
    starting.set_open(false, t0, retention);
    assert!(!starting.draining, "starting, not draining");

    let mut s = ServerState::new("a=http://127.0.0.1:1".parse().unwrap());
    s.succeeded(Arc::new(view(Capabilities::default())), t0);
    s.not_ready("/readyz: 500".into(), NotReady::Answered { shutting_down: None }, t0);
    s.set_open(false, t0, retention);
    assert!(s.draining);
    s.not_ready("/readyz: 500".into(), NotReady::Answered { shutting_down: None }, t0 + Duration::from_secs(1));
    s.set_open(false, t0 + Duration::from_secs(1), retention);
    assert!(s.draining, "still draining");
    s.set_open(false, t0 + LAST_RESORT_FOR, retention);
    assert!(!s.draining, "a last resort for at most LAST_RESORT_FOR");

    let mut gone = s.clone();
    gone.not_ready("connection refused".into(), NotReady::Unreachable, t0);
    gone.set_open(false, t0, retention);
    assert!(!gone.draining);
    let mut restarted = s.clone();
    restarted.restarted(Instant::now());
    restarted.set_open(false, t0, retention);
    assert!(!restarted.draining);
}

/// Coming back (issue 63 item 1): a closed member that answers — its
/// `/readyz` a failure while it starts, or 200 before its read — for
/// at most RETURNING_FOR; not one that refuses connections, nor one
/// draining, nor one departed; and no longer once open.
#[test]
fn returning_is_a_closed_member_that_answers_again() {
    let t0 = Instant::now();
    let retention = Duration::from_secs(600);
    let mut s = ServerState::new("a=http://127.0.0.1:1".parse().unwrap());
    s.succeeded(Arc::new(view(Capabilities::default())), t0);
    s.set_open(true, t0, retention);
    assert!(!s.returning, "open");
    s.not_ready("connection refused".into(), NotReady::Unreachable, t0);
    s.set_open(false, t0, retention);
    assert!(s.pending && !s.returning, "down: refuses connections");
    let t1 = t0 + Duration::from_secs(5);
    s.not_ready("/readyz: 500".into(), NotReady::Answered { shutting_down: None }, t1);
    s.set_open(false, t1, retention);
    assert!(s.returning, "starting: its /readyz answers");
    s.set_open(false, t1 + RETURNING_FOR, retention);
    assert!(!s.returning, "answering but not ready for RETURNING_FOR: not about to serve");
    s.not_ready("connection refused".into(), NotReady::Unreachable, t1 + RETURNING_FOR);
    let t2 = t1 + RETURNING_FOR + Duration::from_secs(1);
    s.answered(t2);
    s.set_open(false, t2, retention);
    assert!(s.returning, "its /readyz 200, its discovery being read");
    s.succeeded(Arc::new(view(Capabilities::default())), t2);
    s.set_open(false, t2, retention);
    assert!(s.returning, "read, waiting for every Envoy to know it (gated)");
    s.set_open(true, t2, retention);
    assert!(!s.returning && s.answering_since.is_none());

    // Draining (shutting down, still answering): not coming back.
    s.not_ready("/readyz: 500".into(), NotReady::Answered { shutting_down: None }, t2);
    s.set_open(false, t2, retention);
    assert!(s.draining && !s.returning);
    // kube's own answer decides where it names its shutdown check: a
    // restart between two probes (500s only, no refusal seen) is a
    // start, not a drain; a server shutting down never comes back.
    let mut restarted = ServerState::new("c=http://127.0.0.1:3".parse().unwrap());
    restarted.succeeded(Arc::new(view(Capabilities::default())), t0);
    restarted.set_open(true, t0, retention);
    restarted.not_ready("/readyz: 500".into(), NotReady::Answered { shutting_down: Some(false) }, t0);
    restarted.set_open(false, t0, retention);
    assert!(!restarted.draining && restarted.returning, "its shutdown check passes: starting");
    restarted.not_ready("/readyz: 500".into(), NotReady::Answered { shutting_down: Some(true) }, t0);
    restarted.set_open(false, t0, retention);
    assert!(!restarted.draining && !restarted.returning, "shutting down before it was ready again: neither");
    let mut draining = ServerState::new("d=http://127.0.0.1:4".parse().unwrap());
    draining.succeeded(Arc::new(view(Capabilities::default())), t0);
    draining.set_open(true, t0, retention);
    draining.not_ready("/readyz: 500".into(), NotReady::Answered { shutting_down: Some(true) }, t0);
    draining.set_open(false, t0, retention);
    assert!(draining.draining && !draining.returning);
    // Departed: not pending, not coming back.
    let mut gone = ServerState::new("b=http://127.0.0.1:2".parse().unwrap());
    gone.not_ready("/readyz: 500".into(), NotReady::Answered { shutting_down: None }, t0);
    gone.departed(t0);
    gone.set_open(false, t0, retention);
    assert!(!gone.returning);
}
