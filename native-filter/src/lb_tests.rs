#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use super::*;

/// Healthy hosts by address, and which of them this request tried.
struct Fake {
    healthy: Vec<&'static str>,
    tried: Vec<&'static str>,
}

impl Candidates for Fake {
    fn count(&self) -> usize {
        self.healthy.len()
    }

    fn address(&self, i: usize) -> Option<&[u8]> {
        self.healthy.get(i).map(|a| a.as_bytes())
    }

    fn tried(&self, i: usize) -> bool {
        self.healthy.get(i).is_some_and(|a| self.tried.contains(a))
    }
}

const A: &str = "10.0.0.1:6443";
const B: &str = "10.0.0.2:6443";
const C: &str = "10.0.0.3:6443";

/// (case, healthy, tried, override host, retry, listed, next) → address.
type Case = (&'static str, &'static [&'static str], &'static [&'static str], Option<&'static str>, bool, Option<&'static str>, usize, Option<&'static str>);

#[test]
fn picks() {
    let cases: [Case; 11] = [
        ("first attempt: the override host", &[A, B, C], &[], Some(B), false, Some("10.0.0.2:6443,10.0.0.3:6443"), 0, Some(B)),
        ("a retry walks the list, skipping what was tried", &[A, B, C], &[B], None, true, Some("10.0.0.2:6443,10.0.0.3:6443"), 0, Some(C)),
        ("in the list's order, not the members'", &[A, B, C], &[], None, true, Some("10.0.0.3:6443,10.0.0.1:6443"), 1, Some(C)),
        ("every listed one tried: no host, the retries end", &[A, B, C], &[B, C], None, true, Some("10.0.0.2:6443,10.0.0.3:6443"), 0, None),
        ("an unhealthy listed one is skipped", &[A, C], &[], None, true, Some("10.0.0.2:6443,10.0.0.3:6443"), 0, Some(C)),
        ("none listed is healthy: no host, never another server", &[A], &[], None, true, Some("10.0.0.2:6443,10.0.0.3:6443"), 0, None),
        ("an override host that is not a healthy member: down the list", &[A, C], &[], Some(B), false, Some("10.0.0.2:6443,10.0.0.3:6443"), 0, Some(C)),
        ("an override host the table no longer pins: round robin", &[A, C], &[], Some(B), false, None, 1, Some(C)),
        ("not pinned, first attempt: round robin", &[A, B, C], &[], None, false, Some("10.0.0.1:6443"), 4, Some(B)),
        ("not pinned, a retry: round robin over those not tried", &[A, B, C], &[B], None, true, None, 1, Some(C)),
        ("not pinned, all tried: round robin anyway", &[A, B], &[A, B], None, true, None, 1, Some(B)),
    ];
    for (case, healthy, tried, overridden, retry, listed, next, want) in cases {
        let hosts = Fake { healthy: healthy.to_vec(), tried: tried.to_vec() };
        let got = pick(&hosts, overridden.map(str::as_bytes), retry, || listed.map(str::to_string), next).map(|i| healthy[i]);
        assert_eq!(got, want, "{case}");
    }
    let nothing = Fake { healthy: vec![], tried: vec![] };
    assert_eq!(pick(&nothing, Some(A.as_bytes()), false, || None, 0), None, "no healthy member");
}

/// A first attempt does not route the path again: only a retry, or an
/// override host that is not a healthy member, reads the list.
#[test]
fn only_a_retry_reads_the_list() {
    let hosts = Fake { healthy: vec![A, B], tried: vec![] };
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
