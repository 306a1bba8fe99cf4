//! Tests of `hold.rs` (the book and the call); holding as the router does
//! it is tested in `router_tests.rs`.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
use super::*;
use crate::host_fake::FakeHost;

fn config(max_held: u32) -> HoldConfig {
    HoldConfig { max_ms: 1000, max_held, ..HoldConfig::default() }
}

#[test]
fn one_call_per_worker_for_every_request_it_holds() {
    let holds = Holds::new(config(8));
    let host = FakeHost::default();
    host.now.set(5_000);
    assert!(holds.hold(&host, 11, 7, Claim::of_request(&host, None, true)));
    host.now.set(5_100);
    assert!(holds.hold(&host, 12, 7, Claim::of_request(&host, None, true)));
    let calls = host.calls.borrow().clone();
    assert_eq!(calls.len(), 1, "the second waits on the first's call");
    let (cluster, body, timeout) = &calls[0];
    assert_eq!(cluster, "mvp_ext_proc");
    assert_eq!(body, &get_table::request_body(7, 1000));
    assert_eq!(*timeout, Duration::from_millis(1000 + u64::from(ANSWER_MARGIN_MS)));
    assert_eq!(host.counter(Counter::Held), 2);

    assert!(holds.answered(99).is_none(), "not its call");
    let (call, held) = holds.answered(1).unwrap();
    assert_eq!(call, Call { token: 1, asked_with: 7 });
    assert_eq!(held, [Held { context: 11, since_ms: 5_000, deadline_ms: 6_000, claim: Claim::default() }, Held { context: 12, since_ms: 5_100, deadline_ms: 6_100, claim: Claim::default() }]);
    assert!(holds.answered(1).is_none(), "answered once");
    assert!(holds.is_empty());
}

#[test]
fn holds_again_until_the_earliest_deadline_and_returns_what_is_over() {
    let holds = Holds::new(config(8));
    let host = FakeHost::default();
    assert!(holds.hold(&host, 1, 7, Claim::of_request(&host, None, true)));
    host.now.set(400);
    assert!(holds.hold(&host, 2, 7, Claim::of_request(&host, None, true)));
    let (_, held) = holds.answered(1).unwrap();
    host.now.set(1000);
    let over = holds.hold_again(&host, held, 8);
    assert_eq!(over.iter().map(|h| h.context).collect::<Vec<_>>(), [1], "its time is up");
    assert_eq!(host.calls.borrow()[1].1, get_table::request_body(8, 400), "until the second's deadline");
    let (call, held) = holds.answered(2).unwrap();
    assert_eq!((call.asked_with, held.len()), (8, 1));
    assert!(holds.hold_again(&host, vec![], 8).is_empty());
    assert_eq!(host.calls.borrow().len(), 2, "no call for nobody");
}

#[test]
fn refuses_beyond_max_held_or_when_the_call_fails() {
    let holds = Holds::new(config(2));
    let host = FakeHost::default();
    assert!(holds.hold(&host, 1, 7, Claim::of_request(&host, None, true)) && holds.hold(&host, 2, 7, Claim::of_request(&host, None, true)));
    assert!(!holds.hold(&host, 3, 7, Claim::of_request(&host, None, true)), "the worker holds its most");
    assert_eq!(holds.len(), 2);
    assert_eq!(host.counter(Counter::HoldRefused), 1);

    let failing = FakeHost { fail_calls: Some(2), ..FakeHost::default() };
    let holds = Holds::new(config(2));
    assert!(!holds.hold(&failing, 1, 7, Claim::of_request(&failing, None, true)));
    assert!(holds.is_empty(), "a request whose call was not made is not booked");
    assert!(failing.logs.borrow()[0].1.contains("cannot hold requests"));
    // Held again but the call fails: every one is answered now.
    let host = FakeHost::default();
    let holds = Holds::new(config(2));
    assert!(holds.hold(&host, 1, 7, Claim::of_request(&host, None, true)));
    let (_, held) = holds.answered(1).unwrap();
    assert_eq!(holds.hold_again(&failing, held, 8).len(), 1);
    assert!(holds.is_empty());
}

/// One client holds at most its share of a worker's slots, whatever its
/// ports; the others keep theirs (who a client is: `hold_claim_tests.rs`).
#[test]
fn one_client_holds_at_most_its_share() {
    let config = HoldConfig { max_ms: 1000, max_held: 6, max_held_per_client: 2, ..HoldConfig::default() };
    let holds = Holds::new(config);
    let from = |addr: &str| FakeHost { client: Some(addr.as_bytes().to_vec()), ..FakeHost::default() };
    let results: Vec<bool> = ["10.0.0.9:1000", "10.0.0.9:1001", "10.0.0.9:1002", "10.0.0.9:1003", "10.0.0.1:2000", "[fd00::1]:3000", "[fd00::1]:3001", "[fd00::1]:3002"]
        .iter()
        .enumerate()
        .map(|(i, a)| holds.hold(&from(a), i as u32 + 1, 1, Claim::of_request(&from(a), None, true)))
        .collect();
    assert_eq!(results, [true, true, false, false, true, true, true, false]);
    assert_eq!(holds.len(), 5);
}
