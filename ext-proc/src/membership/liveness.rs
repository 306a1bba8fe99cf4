//! Whether an identity Lease's apiserver is alive, judged by what this
//! process saw, not by comparing the apiserver's `renewTime` with our clock:
//! control-plane nodes' clocks disagree (> 20 s of skew once flapped
//! members), and two mvp-ext-proc replicas with different skew would judge
//! differently and serve different `/apis`.
//!
//! - A lease seen renewed (its `renewTime` changed) is alive for
//!   `stale_after` from the moment *this process* saw the renewal.
//! - A lease not yet seen renewed (the first listing) is judged by the wall
//!   clocks once: alive while its `renewTime` is within `stale_after` of
//!   ours and we first saw it less than `stale_after` ago. With skew the
//!   first judgement can be wrong; the next renewal (kube renews every
//!   10 s) corrects it.
//! - A lease is judged gone only with evidence that the watch worked after
//!   its deadline (an event heard later): a watch that hangs (no error, no
//!   event — the apiserver it reads through froze) sees no renewal from
//!   anyone, and that must not look like every apiserver leaving. Every
//!   live apiserver renews every 10 s, so a working watch hears something.
//! - The caller does not judge while its watch is failing (the store is
//!   frozen, renewals are not seen): what was judged last stands.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What was seen of one lease.
struct Seen {
    renew_ms: i64,
    first_seen: Instant,
    /// When its `renewTime` last changed, as seen here.
    renewed: Option<Instant>,
    /// Stale by the wall clocks when first seen: it was stale before we
    /// looked, so its going needs no evidence from the watch.
    stale_at_first_sight: bool,
}

pub struct Liveness {
    stale_after: Duration,
    seen: HashMap<String, Seen>,
    /// The last judgement kept a lease alive only for want of evidence
    /// (the watch silent since its deadline).
    pub held: bool,
}

impl Liveness {
    pub fn new(stale_after: Duration) -> Liveness {
        Liveness { stale_after, seen: HashMap::new(), held: false }
    }

    /// Records every lease the store holds now (`(name, renewTime in ms)`)
    /// and says which are alive; `heard` is when the watch last delivered
    /// anything. Leases no longer listed are forgotten.
    pub fn judge<'a>(&mut self, leases: impl IntoIterator<Item = (&'a str, i64)>, wall_now_ms: i64, now: Instant, heard: Instant) -> Vec<&'a str> {
        let stale = self.stale_after;
        let stale_ms = i64::try_from(stale.as_millis()).unwrap_or(i64::MAX);
        let mut alive = Vec::new();
        let mut present = Vec::new();
        self.held = false;
        for (name, renew_ms) in leases {
            present.push(name);
            let seen = self.seen.entry(name.to_string()).or_insert(Seen {
                renew_ms,
                first_seen: now,
                renewed: None,
                stale_at_first_sight: wall_now_ms.saturating_sub(renew_ms) > stale_ms,
            });
            if seen.renew_ms != renew_ms {
                seen.renew_ms = renew_ms;
                seen.renewed = Some(now);
            }
            // Since when it would be stale, as seen here.
            let since = seen.renewed.unwrap_or(seen.first_seen);
            let fresh = match seen.renewed {
                Some(at) => now.duration_since(at) <= stale,
                None => !seen.stale_at_first_sight && now.duration_since(seen.first_seen) <= stale,
            };
            let unheard_since_deadline = heard.saturating_duration_since(since) <= stale;
            if fresh {
                alive.push(name);
            } else if unheard_since_deadline && !(seen.renewed.is_none() && seen.stale_at_first_sight) {
                self.held = true;
                alive.push(name);
            }
        }
        self.seen.retain(|name, _| present.contains(&name.as_str()));
        alive
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STALE: Duration = Duration::from_secs(30);
    const S: i64 = 1000;

    /// One apiserver renewing every 10 s by its own clock, judged every
    /// second for 3 minutes by a process whose clock is `skew_s` ahead:
    /// how many judgements said "gone" after the first renewal was seen.
    fn flaps(skew_s: i64) -> (usize, bool) {
        let mut l = Liveness::new(STALE);
        let t0 = Instant::now();
        let apiserver_start = 1_000_000 * S;
        let mut gone_after_first_renewal = 0;
        let mut first_judgement = false;
        for sec in 0..180i64 {
            let renew = apiserver_start + sec / 10 * 10 * S;
            let alive = l.judge([("kas-a", renew)], apiserver_start + sec * S + skew_s * S, t0 + Duration::from_secs(sec as u64), t0 + Duration::from_secs(sec as u64));
            if sec == 0 {
                first_judgement = !alive.is_empty();
            } else if sec >= 10 && alive.is_empty() {
                gone_after_first_renewal += 1;
            }
        }
        (gone_after_first_renewal, first_judgement)
    }

    #[test]
    fn clock_skew_does_not_flap_a_renewing_apiserver() {
        for skew in [-60, -21, 0, 21, 60] {
            let (gone, _) = flaps(skew);
            assert_eq!(gone, 0, "skew {skew} s: judged gone {gone} times while it renewed every 10 s");
        }
        // The first judgement uses the wall clocks: 60 s behind looks stale
        // until the first renewal is seen.
        assert!(flaps(0).1 && flaps(-60).1 && !flaps(60).1);
    }

    #[test]
    fn a_lease_no_longer_renewed_is_gone_after_stale_after_as_seen_here() {
        let mut l = Liveness::new(STALE);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let wall = 5_000 * S;
        assert_eq!(l.judge([("a", wall)], wall, t0, t0), ["a"]);
        assert_eq!(l.judge([("a", wall + 10 * S)], wall + 10 * S, at(10), at(10)), ["a"]);
        // Never renewed again; whatever the wall clocks say, 30 s after the
        // last renewal we saw it is gone.
        assert_eq!(l.judge([("a", wall + 10 * S)], 0, at(40), at(40)), ["a"]);
        assert!(l.judge([("a", wall + 10 * S)], 0, at(41), at(41)).is_empty());
    }

    #[test]
    fn a_stale_lease_listed_at_start_is_gone_and_comes_back_when_renewed() {
        let mut l = Liveness::new(STALE);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let wall = 5_000 * S;
        // Renewed an hour ago (the apiserver is gone; kube collects its
        // lease only after leaseDurationSeconds).
        assert!(l.judge([("old", wall - 3600 * S)], wall, t0, t0).is_empty());
        assert!(l.judge([("old", wall - 3600 * S)], wall + S, at(1), at(1)).is_empty());
        assert_eq!(l.judge([("old", wall + 2 * S)], wall + 2 * S, at(2), at(2)), ["old"]);
    }

    #[test]
    fn a_fresh_lease_never_renewed_again_is_gone_stale_after_first_seen() {
        let mut l = Liveness::new(STALE);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let wall = 5_000 * S;
        // Its clock runs 20 s ahead of ours: the wall clocks call it fresh
        // for 50 s; what we saw says gone after 30 s.
        assert_eq!(l.judge([("a", wall + 20 * S)], wall, t0, t0), ["a"]);
        assert!(l.judge([("a", wall + 20 * S)], wall + 31 * S, at(31), at(31)).is_empty());
    }

    #[test]
    fn leases_no_longer_listed_are_forgotten() {
        let mut l = Liveness::new(STALE);
        let t0 = Instant::now();
        l.judge([("a", 0), ("b", 0)], 0, t0, t0);
        l.judge([("b", 0)], 0, t0, t0);
        assert_eq!(l.seen.len(), 1);
    }

    #[test]
    fn a_silent_watch_is_no_evidence_that_a_lease_stopped() {
        let mut l = Liveness::new(STALE);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let wall = 5_000 * S;
        assert_eq!(l.judge([("a", wall)], wall, at(0), at(0)), ["a"]);
        assert_eq!(l.judge([("a", wall + 10 * S)], wall + 10 * S, at(10), at(10)), ["a"]);
        // The watch hangs at 12 s: nothing heard, nothing renewed.
        assert_eq!(l.judge([("a", wall + 10 * S)], wall + 60 * S, at(60), at(12)), ["a"]);
        assert!(l.held);
        // It speaks again (another lease's event) after the deadline: gone.
        assert!(l.judge([("a", wall + 10 * S)], wall + 61 * S, at(61), at(61)).is_empty());
        assert!(!l.held);
    }
}
