//! What each ADS stream acknowledged ([`Streams`]), and from it what every
//! connected Envoy has ([`Accepted`], which the sync loop waits on).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;

use crate::sync::accepted::Accepted;

#[derive(Default)]
pub(super) struct Streams {
    /// Per stream that subscribed to endpoints: the addresses of the
    /// endpoints it last ACKed.
    pub(super) acked: HashMap<u64, BTreeSet<SocketAddr>>,
    /// Streams past the grace or rejecting: not counted.
    pub(super) lagging: HashSet<u64>,
}

impl Streams {
    /// What the streams say now: the addresses every counted stream
    /// acknowledged (a stream past the grace or rejecting does not count).
    /// `before` carries since when none has counted.
    pub(super) fn accepted(&self, before: &Accepted) -> Accepted {
        let counted: Vec<&BTreeSet<SocketAddr>> = self.acked.iter().filter(|(id, _)| !self.lagging.contains(id)).map(|(_, a)| a).collect();
        let addresses = match counted.split_first() {
            None => BTreeSet::new(),
            Some((first, rest)) => rest.iter().fold((*first).clone(), |acc, s| acc.intersection(s).copied().collect()),
        };
        let quiet_since = if counted.is_empty() && before.streams > 0 { tokio::time::Instant::now() } else { before.quiet_since };
        Accepted { streams: counted.len(), addresses, quiet_since }
    }
}
