#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use super::*;

/// The cluster as Envoy shows it to the balancer: all hosts (what the
/// previous-hosts predicate indexes), the healthy ones (what the answer
/// and the healthy addresses index), in an order of their own, and which
/// hosts this request tried.
struct Fake {
    all: Vec<&'static str>,
    healthy: Vec<&'static str>,
    tried: Vec<&'static str>,
}

impl Candidates for Fake {
    fn healthy_count(&self) -> usize {
        self.healthy.len()
    }

    fn healthy_address(&self, i: usize) -> Option<&[u8]> {
        self.healthy.get(i).map(|a| a.as_bytes())
    }

    fn host_count(&self) -> usize {
        self.all.len()
    }

    fn host_address(&self, j: usize) -> Option<&[u8]> {
        self.all.get(j).map(|a| a.as_bytes())
    }

    /// Envoy's predicate: the host at `j` of *all* hosts.
    fn host_tried(&self, j: usize) -> bool {
        self.all.get(j).is_some_and(|a| self.tried.contains(a))
    }
}

const A: &str = "10.0.0.1:6443";
const B: &str = "10.0.0.2:6443";
const C: &str = "10.0.0.3:6443";

/// (case, all, healthy, tried, override host, retry, listed, next) → address.
type Case = (&'static str, &'static [&'static str], &'static [&'static str], &'static [&'static str], Option<&'static str>, bool, Option<&'static str>, usize, Option<&'static str>);

#[test]
fn picks() {
    let abc: &[&str] = &[A, B, C];
    let cases: [Case; 15] = [
        ("first attempt: the override host", abc, abc, &[], Some(B), false, Some("10.0.0.2:6443,10.0.0.3:6443"), 0, Some(B)),
        ("a retry walks the list, skipping what was tried", abc, abc, &[B], None, true, Some("10.0.0.2:6443,10.0.0.3:6443"), 0, Some(C)),
        ("in the list's order, not the members'", abc, abc, &[], None, true, Some("10.0.0.3:6443,10.0.0.1:6443"), 1, Some(C)),
        ("every listed one tried: no host, the retries end", abc, abc, &[B, C], None, true, Some("10.0.0.2:6443,10.0.0.3:6443"), 0, None),
        ("an unhealthy listed one is skipped", abc, &[A, C], &[], None, true, Some("10.0.0.2:6443,10.0.0.3:6443"), 0, Some(C)),
        ("none listed is healthy: no host, never another server", abc, &[A], &[], None, true, Some("10.0.0.2:6443,10.0.0.3:6443"), 0, None),
        ("an override host that is not a healthy member: down the list", abc, &[A, C], &[], Some(B), false, Some("10.0.0.2:6443,10.0.0.3:6443"), 0, Some(C)),
        ("an override host the table no longer pins: round robin", abc, &[A, C], &[], Some(B), false, None, 1, Some(C)),
        ("not pinned, first attempt: round robin", abc, abc, &[], None, false, Some("10.0.0.1:6443"), 4, Some(B)),
        ("not pinned, a retry: round robin over those not tried", abc, abc, &[B], None, true, None, 1, Some(C)),
        ("not pinned, all tried: round robin anyway", &[A, B], &[A, B], &[A, B], None, true, None, 1, Some(B)),
        // A rolling upgrade: a member down (unhealthy, not listed) before
        // the listed ones in Envoy's host list. Asking the predicate with
        // the healthy index asked it about the wrong host: B again.
        ("a member down before the list: the failed server is not tried again", abc, &[B, C], &[B], None, true, Some("10.0.0.2:6443,10.0.0.3:6443"), 0, Some(C)),
        // The draining last resort B failed as the override host: C, which
        // the healthy index would have mistaken for B, is still tried.
        ("the draining override host failed: the next listed one, not the end", abc, &[A, C], &[B], None, true, Some("10.0.0.2:6443,10.0.0.3:6443"), 0, Some(C)),
        ("healthy hosts in another order than all hosts", &[C, A, B], &[B, C], &[C], None, true, Some("10.0.0.3:6443,10.0.0.2:6443"), 0, Some(B)),
        ("not pinned, a member down: round robin skips the one tried", abc, &[B, C], &[B], None, true, None, 0, Some(C)),
    ];
    for (case, all, healthy, tried, overridden, retry, listed, next, want) in cases {
        let hosts = Fake { all: all.to_vec(), healthy: healthy.to_vec(), tried: tried.to_vec() };
        let got = pick(&hosts, overridden.map(str::as_bytes), retry, || listed.map(str::to_string), next).map(|i| healthy[i]);
        assert_eq!(got, want, "{case}");
    }
    let nothing = Fake { all: vec![A], healthy: vec![], tried: vec![] };
    assert_eq!(pick(&nothing, Some(A.as_bytes()), false, || None, 0), None, "no healthy member");
}

/// A first attempt (an unpinned request's: round robin) asks Envoy's
/// predicate nothing — nothing was tried — where each question is host
/// calls on every request.
#[test]
fn a_first_attempt_asks_nothing_of_what_was_tried() {
    struct Counting(Fake, std::cell::Cell<u32>);
    impl Candidates for Counting {
        fn healthy_count(&self) -> usize {
            self.0.healthy_count()
        }
        fn healthy_address(&self, i: usize) -> Option<&[u8]> {
            self.0.healthy_address(i)
        }
        fn host_count(&self) -> usize {
            self.0.host_count()
        }
        fn host_address(&self, j: usize) -> Option<&[u8]> {
            self.0.host_address(j)
        }
        fn host_tried(&self, j: usize) -> bool {
            self.1.set(self.1.get() + 1);
            self.0.host_tried(j)
        }
    }
    let hosts = Counting(Fake { all: vec![A, B, C], healthy: vec![A, B, C], tried: vec![] }, std::cell::Cell::new(0));
    assert_eq!(pick(&hosts, None, false, || None, 4), Some(1));
    assert_eq!(hosts.1.get(), 0);
    assert_eq!(pick(&hosts, None, true, || None, 4), Some(1));
    assert_eq!(hosts.1.get(), 1, "a retry asks");
}

/// A first attempt does not route the path again: only a retry, or an
/// override host that is not a healthy member, reads the list.
#[test]
fn only_a_retry_reads_the_list() {
    let hosts = Fake { all: vec![A, B], healthy: vec![A, B], tried: vec![] };
    let read = std::cell::Cell::new(0);
    let listed = || {
        read.set(read.get() + 1);
        Some(B.to_string())
    };
    pick(&hosts, Some(A.as_bytes()), false, listed, 0);
    pick(&hosts, None, false, listed, 0);
    assert_eq!(read.get(), 0);
    pick(&hosts, None, true, listed, 0);
    assert_eq!(read.get(), 1);
}

/// A first attempt with the list the filter handed over: the first listed
/// healthy member, in the list's order; never one it did not list.
#[test]
fn a_handed_over_list_gives_the_first_listed_healthy_member() {
    let abc: &[&str] = &[A, B, C];
    let fake = |healthy: &[&'static str]| Fake { all: abc.to_vec(), healthy: healthy.to_vec(), tried: vec![] };
    let at = |f: &Fake, i: Option<usize>| i.and_then(|i| f.healthy.get(i).copied());
    let all = fake(abc);
    assert_eq!(at(&all, first_listed(&all, "10.0.0.3:6443,10.0.0.1:6443")), Some(C));
    let b_down = fake(&[A, C]);
    assert_eq!(at(&b_down, first_listed(&b_down, "10.0.0.2:6443,10.0.0.3:6443")), Some(C), "health changed after the hand-over");
    let only_a = fake(&[A]);
    assert_eq!(at(&only_a, first_listed(&only_a, "10.0.0.2:6443,10.0.0.3:6443")), None, "never a server it did not list");
}
