//! Group-versions only closed members serve (draining, restarting, hung or
//! departed) stay in the merged `/apis` — a client keeps knowing they exist —
//! marked `freshness: Stale`, as kube marks a group-version whose aggregated
//! APIService is unavailable. client-go then reports that group-version as
//! failed discovery at once (kubectl: "the server doesn't have a resource
//! type"; the namespace controller: `NamespaceDeletionDiscoveryFailure`, and
//! nothing finalized) instead of resolving it and waiting out ten
//! `Retry-After` 503s per request (issue 35: 10 s per kubectl).
//!
//! A group-version some open member serves stays `Current`, even when one of
//! its resources only a closed member serves: marking it would fail
//! discovery for the whole group-version, shared resources too. Requests for
//! such a resource keep the 503 Status with `Retry-After`.

use std::collections::HashSet;

use crate::apidiscovery::{APIGroupDiscovery, SharedGroup};

pub const STALE: &str = "Stale";

/// The versions of one planned group (`inputs`, borrowed from `lists`, one
/// list per server) that only closed servers' inputs have; empty at once
/// when no server is closed.
pub fn stale_versions<'a>(inputs: &[&'a SharedGroup], lists: &[&[SharedGroup]], closed: &[bool]) -> Vec<&'a str> {
    if !closed.contains(&true) {
        return vec![];
    }
    let is_closed = |g: &SharedGroup| {
        let at: *const SharedGroup = g;
        let server = lists.iter().position(|l| l.as_ptr_range().contains(&at));
        server.and_then(|i| closed.get(i)).copied().unwrap_or(false)
    };
    let versions = |closed: bool| inputs.iter().filter(move |g| is_closed(g) == closed).flat_map(|g| g.versions.iter().map(|v| v.version.as_str()));
    let open: HashSet<&str> = versions(false).collect();
    let mut stale: Vec<&str> = versions(true).filter(|v| !open.contains(v)).collect();
    stale.sort_unstable();
    stale.dedup();
    stale
}

/// Marks `stale` versions of a merged group.
pub fn mark(g: &mut APIGroupDiscovery, stale: &[&str]) {
    for v in &mut g.versions {
        if stale.contains(&v.version.as_str()) {
            v.freshness = STALE.into();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apidiscovery::APIVersionDiscovery;
    use std::sync::Arc;

    fn group(versions: &[&str]) -> SharedGroup {
        let mut g = APIGroupDiscovery::default();
        g.metadata.name = "g".into();
        g.versions = versions.iter().map(|v| APIVersionDiscovery { version: (*v).into(), resources: vec![], freshness: "Current".into() }).collect();
        Arc::new(g)
    }

    #[test]
    fn only_versions_no_open_server_has_are_stale() {
        let a = [group(&["v1", "v1beta1"])];
        let b = [group(&["v1", "v2"])];
        let lists: [&[SharedGroup]; 2] = [&a, &b];
        let inputs: Vec<&SharedGroup> = vec![&a[0], &b[0]];
        assert!(stale_versions(&inputs, &lists, &[false, false]).is_empty());
        assert_eq!(stale_versions(&inputs, &lists, &[false, true]), ["v2"]);
        assert_eq!(stale_versions(&inputs, &lists, &[true, false]), ["v1beta1"]);
        assert_eq!(stale_versions(&inputs, &lists, &[true, true]), ["v1", "v1beta1", "v2"]);
        let mut merged = (*a[0]).clone();
        mark(&mut merged, &["v1beta1"]);
        assert_eq!(merged.versions.iter().map(|v| v.freshness.as_str()).collect::<Vec<_>>(), ["Current", "Stale"]);
    }
}
