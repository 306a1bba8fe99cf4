//! Which endpoints the connected Envoys have: what the sync loop waits on
//! before it opens a joining member. The ADS stream loop keeps it
//! ([`crate::xds::acks`]).

use std::collections::BTreeSet;
use std::net::SocketAddr;
/// The endpoint addresses every connected Envoy has accepted (see
/// [`Accepted::covers`] for what holds while none is connected).
///
/// One broken Envoy must not hold the others: a stream that subscribes
/// with the current endpoints' version already has them (a reconnect, an
/// mvp-ext-proc restart: versions are content digests); one that leaves an
/// endpoint push unacknowledged for [`ACK_GRACE`], or rejects it, stops
/// counting until it acknowledges one (logged, `mvp_xds_lagging_streams`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    pub streams: usize,
    pub addresses: BTreeSet<SocketAddr>,
    /// Since when no stream has counted (the start, or the last one gone).
    pub quiet_since: tokio::time::Instant,
}

impl Default for Accepted {
    fn default() -> Self {
        Accepted { streams: 0, addresses: BTreeSet::new(), quiet_since: tokio::time::Instant::now() }
    }
}

impl Accepted {
    /// Whether every Envoy that routes by this process's tables has an
    /// endpoint for `a`. With no stream, only once none has been for
    /// [`ACK_GRACE`]: an Envoy reconnecting (after its stream broke, or
    /// after this process restarted) polls tables before its ADS stream is
    /// back, and an override host it does not have falls back to round
    /// robin — another server's 404 for an API only `a` serves.
    pub fn covers(&self, a: &SocketAddr, now: tokio::time::Instant) -> bool {
        if self.streams == 0 {
            return now.duration_since(self.quiet_since) >= ACK_GRACE;
        }
        self.addresses.contains(a)
    }
}

/// How long an Envoy may leave an endpoint push unacknowledged before
/// joining members stop waiting for it (Envoy ACKs in milliseconds; a
/// frozen one is dropped by the gRPC keepalive after 15 s).
pub const ACK_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

#[cfg(test)]
mod tests {
    use super::*;

    /// No Envoy connected: a joining member's address counts as known only
    /// after the grace (an Envoy may be reconnecting); with one connected,
    /// only what it acknowledged counts.
    #[test]
    fn with_no_stream_an_address_is_known_only_after_the_grace() {
        let a: SocketAddr = "10.0.0.1:6443".parse().unwrap();
        let quiet = Accepted::default();
        let t = quiet.quiet_since;
        assert!(!quiet.covers(&a, t));
        assert!(!quiet.covers(&a, t + ACK_GRACE / 2));
        assert!(quiet.covers(&a, t + ACK_GRACE));
        let one = Accepted { streams: 1, addresses: [a].into(), quiet_since: t };
        assert!(one.covers(&a, t));
        assert!(!one.covers(&"10.0.0.2:6443".parse().unwrap(), t + ACK_GRACE * 10));
    }
}
