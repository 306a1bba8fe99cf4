//! Per-apiserver health and the retention policy for its last good view.
//!
//! Policy:
//! - A discovery read that succeeds makes the server healthy and replaces its
//!   capabilities.
//! - A read that fails (connection, timeout, non-200/304 status, a document
//!   that does not parse, one over the size limit) marks it unhealthy at once
//!   but keeps its last good capabilities for `retention` after its last
//!   success. Requests for APIs only it serves still go to it, so clients see
//!   a 503 Status from the front door rather than another server's 404; its
//!   healthy peers are listed first for everything they share with it.
//! - After `retention` the stale capabilities are dropped: the server stays
//!   in the table (so shared APIs still fail over past it) but no API is
//!   routed to it until it answers discovery again.
//! - One server's failure never changes any other server's entry.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::apiservers::ApiserverSpec;
use crate::discover::ServerView;
use crate::routing_table::Member;

#[derive(Debug, Clone)]
pub struct ServerState {
    pub spec: ApiserverSpec,
    /// Resolved `IP:port`, matching the host Envoy's cluster holds.
    pub address: Option<SocketAddr>,
    /// Last good discovery, shared with the table and the merged document
    /// builders; replaced only when it changed, so pointer equality means
    /// "unchanged".
    pub view: Option<Arc<ServerView>>,
    pub healthy: bool,
    pub last_success: Option<Instant>,
    pub last_error: Option<String>,
}

impl ServerState {
    pub fn new(spec: ApiserverSpec) -> ServerState {
        ServerState {
            address: spec.ip_address(),
            spec,
            view: None,
            healthy: false,
            last_success: None,
            last_error: None,
        }
    }

    /// A read that found `view`. The same `Arc` (nothing changed, the usual
    /// case) costs nothing; a new one replaces the old only when its content
    /// differs, so pointer equality keeps meaning "unchanged" downstream.
    pub fn succeeded(&mut self, view: Arc<ServerView>, now: Instant) {
        let unchanged = self.view.as_ref().is_some_and(|old| Arc::ptr_eq(old, &view) || **old == *view);
        if !unchanged {
            self.view = Some(view);
        }
        self.healthy = true;
        self.last_success = Some(now);
        self.last_error = None;
    }

    /// How the routing table sees it.
    pub fn member(&self) -> Member<'_> {
        Member {
            name: &self.spec.name,
            address: self.address,
            healthy: self.healthy,
            capabilities: self.view.as_deref().map(|v| &v.capabilities),
        }
    }

    pub fn failed(&mut self, error: String, now: Instant, retention: Duration) {
        self.healthy = false;
        self.last_error = Some(error);
        let expired = self.last_success.is_none_or(|t| now.saturating_duration_since(t) >= retention);
        if expired {
            self.view = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::Capabilities;

    fn view(caps: Capabilities) -> ServerView {
        ServerView { capabilities: caps, groups: vec![] }
    }

    #[test]
    fn keeps_last_good_view_until_retention() {
        let spec: ApiserverSpec = "a=http://127.0.0.1:1".parse().unwrap();
        let mut s = ServerState::new(spec);
        let t0 = Instant::now();
        let mut caps = Capabilities::default();
        caps.add_resource_name("apps", "v1", "deployments");
        s.succeeded(Arc::new(view(caps.clone())), t0);
        assert!(s.healthy);

        let retention = Duration::from_secs(60);
        s.failed("boom".into(), t0 + Duration::from_secs(10), retention);
        assert!(!s.healthy);
        assert_eq!(s.view.as_deref(), Some(&view(caps.clone())));

        s.failed("boom".into(), t0 + Duration::from_secs(60), retention);
        assert_eq!(s.view, None);

        s.succeeded(Arc::new(view(caps.clone())), t0 + Duration::from_secs(61));
        assert!(s.healthy);
        assert_eq!(s.view.as_deref(), Some(&view(caps)));
    }

    #[test]
    fn never_seen_server_has_nothing_to_keep() {
        let mut s = ServerState::new("a=http://127.0.0.1:1".parse().unwrap());
        s.failed("refused".into(), Instant::now(), Duration::from_secs(300));
        assert_eq!(s.view, None);
        assert_eq!(s.last_error.as_deref(), Some("refused"));
    }
}
