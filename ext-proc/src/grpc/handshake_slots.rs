//! Which TLS handshakes a listener keeps when too many are pending: every
//! new connection is admitted, and makes room by shedding the oldest
//! pending handshake of its own client when that client has
//! [`Slots::per_client`] of them, and the oldest of all when the listener
//! has [`Slots::total`]. A legitimate client's handshake takes milliseconds;
//! one that has not finished is the oldest only while an attacker's stalled
//! ones are newer — so a flood of connections that never finish a handshake
//! cannot keep a new one (a kubelet's probe, an Envoy reconnecting) out,
//! and costs at most `total` descriptors. (Before, accepting stopped while
//! 256 handshakes were pending: 300 idle connections made `/readyz` on the
//! operator port answer after 8.2 s.)
//!
//! Plain bookkeeping, no I/O: `tls.rs` aborts what this sheds.

use std::collections::{BTreeMap, HashMap, VecDeque};

pub type SlotId = u64;

pub struct Slots {
    per_client: usize,
    total: usize,
    next: SlotId,
    /// Every pending handshake, oldest first, with its client.
    pending: BTreeMap<SlotId, u128>,
    /// Each client's pending handshakes, oldest first.
    by_client: HashMap<u128, VecDeque<SlotId>>,
}

impl Slots {
    /// `per_client`, `total`: at least 1.
    pub fn new(per_client: usize, total: usize) -> Slots {
        Slots { per_client: per_client.max(1), total: total.max(1), next: 0, pending: BTreeMap::new(), by_client: HashMap::new() }
    }

    /// Admits a handshake of `client` ([`mvp_contract::clients::client_of`]):
    /// its slot, and the slots shed to make room (to abort).
    pub fn admit(&mut self, client: u128) -> (SlotId, Vec<SlotId>) {
        let mut shed = Vec::new();
        if let Some(oldest) = self.by_client.get(&client).filter(|q| q.len() >= self.per_client).and_then(|q| q.front().copied()) {
            self.finish(oldest);
            shed.push(oldest);
        }
        if self.pending.len() >= self.total
            && let Some(oldest) = self.pending.keys().next().copied()
        {
            self.finish(oldest);
            shed.push(oldest);
        }
        let id = self.next;
        self.next += 1;
        self.pending.insert(id, client);
        self.by_client.entry(client).or_default().push_back(id);
        (id, shed)
    }

    /// A handshake ended (done, failed, timed out, shed): its slot is free.
    pub fn finish(&mut self, id: SlotId) {
        let Some(client) = self.pending.remove(&id) else { return };
        if let Some(q) = self.by_client.get_mut(&client) {
            q.retain(|s| *s != id);
            if q.is_empty() {
                self.by_client.remove(&client);
            }
        }
    }

    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client at its bound sheds its own oldest; the listener at its
    /// bound sheds the oldest of all; a finished slot frees its place.
    #[test]
    fn the_oldest_makes_room_for_the_new() {
        let mut s = Slots::new(2, 3);
        let (a1, shed) = s.admit(1);
        assert!(shed.is_empty());
        let (a2, _) = s.admit(1);
        let (a3, shed) = s.admit(1);
        assert_eq!(shed, [a1], "client 1's oldest");
        let (b1, shed) = s.admit(2);
        assert!(shed.is_empty(), "3 pending: a2, a3, b1");
        let (_c1, shed) = s.admit(3);
        assert_eq!(shed, [a2], "the listener's oldest");
        s.finish(a3);
        s.finish(b1);
        assert_eq!(s.pending(), 1);
        let (_, shed) = s.admit(2);
        assert!(shed.is_empty());
        s.finish(a3);
        assert_eq!(s.pending(), 2, "finishing twice changes nothing");
    }

    /// A client at its own bound when the listener is full too sheds only
    /// its own oldest (then there is room).
    #[test]
    fn one_shed_when_one_makes_room() {
        let mut s = Slots::new(1, 2);
        let (a, _) = s.admit(1);
        let (_, _) = s.admit(2);
        let (_, shed) = s.admit(1);
        assert_eq!(shed, [a]);
        assert_eq!(s.pending(), 2);
    }
}
