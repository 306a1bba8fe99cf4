//! request → classify → look up → decide: the whole per-request decision,
//! in plain Rust so it is tested natively. The filter acts on the
//! [`Decision`] (the adapter only moves headers in and out) and `explain`
//! says it in words — both from this one function, so they cannot disagree.

use crate::requestinfo::{RouteKey, route_key};
use crate::table::{RouteTable, ServerSet, Upstreams};
use crate::urlpath::DecodedPath;
use mvp_contract::headers::{UNAVAILABLE, UNAVAILABLE_DOCUMENT};

/// Where a request goes, and why.
#[derive(Debug, Clone, Copy)]
pub enum Decision<'t> {
    /// Not a path the front door routes (`/healthz`, `/version`, `/apis`,
    /// …): any apiserver answers it itself, as kube serves it locally.
    NotRouted,
    /// No apiserver is known to serve it, and every member's API set is
    /// known: whichever answers gives its own (correct) 404.
    ServedByNone,
    /// Every apiserver serves it and every one is open: Envoy's own load
    /// balancing.
    ServedByAll,
    /// Only `set` serves it, or a member is closed: pinned to the open
    /// members of `set` (healthy ones first).
    Pinned { set: ServerSet, upstreams: &'t Upstreams },
    /// Only closed members serve it, and some of them are draining (shutting
    /// down, still serving): pinned to those as a last resort before the
    /// 503 Status (Envoy's answer once they stop accepting connections).
    LastResort { set: ServerSet, upstreams: &'t Upstreams },
    /// The 503 Status, never a 404: only closed members serve it (`set`),
    /// or nobody is known to (`set == 0`) while some member's API set is
    /// unknown (restarting, or not read yet) — that member may be about to
    /// serve it. With `Retry-After` for a resource request; without for a
    /// discovery or OpenAPI document (see [`UNAVAILABLE_DOCUMENT`]).
    /// `wait_helps`: one of those members is coming back (starting, being
    /// read: `Apiserver.returning`), so the filter may hold the request for
    /// a newer table; otherwise every one is down and the 503 Status is
    /// the answer now.
    Unavailable { set: ServerSet, retry_after: bool, wait_helps: bool },
}

impl<'t> Decision<'t> {
    /// The apiservers that serve what the request names, when the decision
    /// turned on them (pinned, last resort, the 503 Status).
    pub fn served_by(&self) -> Option<ServerSet> {
        match self {
            Decision::Pinned { set, .. } | Decision::LastResort { set, .. } | Decision::Unavailable { set, .. } => Some(*set),
            Decision::NotRouted | Decision::ServedByNone | Decision::ServedByAll => None,
        }
    }

    /// The 503 Status, and a hold for a newer table may turn it into an
    /// answer (see [`Decision::Unavailable`]).
    pub fn wait_helps(&self) -> bool {
        matches!(self, Decision::Unavailable { wait_helps: true, .. })
    }

    /// The route header's value for the `n`th request routed this way
    /// (`n` spreads requests over the capable apiservers), or `None` to
    /// leave the request to Envoy's normal load balancing.
    pub fn hosts(&self, n: u32) -> Option<&'t str> {
        match self {
            Decision::Pinned { upstreams, .. } | Decision::LastResort { upstreams, .. } => Some(upstreams.header_value(n)),
            Decision::Unavailable { retry_after: true, .. } => Some(UNAVAILABLE),
            Decision::Unavailable { retry_after: false, .. } => Some(UNAVAILABLE_DOCUMENT),
            Decision::NotRouted | Decision::ServedByNone | Decision::ServedByAll => None,
        }
    }
}

/// The decision for a request, and what it is routed by (for the access
/// log and `explain`).
///
/// Neither the method nor the query changes the group/version/resource/
/// subresource RequestInfo derives, so routing reads only the path.
pub fn route<'t, 'p>(table: &'t RouteTable, path: &'p DecodedPath<'_>) -> (RouteKey<'p>, Decision<'t>) {
    let key = route_key(path);
    (key, decide_key(table, &key))
}

/// The decision for a request whose key is known already
/// ([`crate::requestinfo::route_key_and_long_running`]).
pub fn decide_key<'t>(table: &'t RouteTable, key: &RouteKey<'_>) -> Decision<'t> {
    let key = *key;
    let retry_after = matches!(key, RouteKey::Resource { .. });
    match table.servers(&key) {
        _ if key == RouteKey::None => Decision::NotRouted,
        None | Some(0) if table.pending() => Decision::Unavailable { set: 0, retry_after, wait_helps: table.pending_returning() },
        None | Some(0) => Decision::ServedByNone,
        Some(set) => match table.pinned(set) {
            None => Decision::ServedByAll,
            Some(u) if u.unavailable() => Decision::Unavailable { set, retry_after, wait_helps: u.returning() },
            Some(upstreams) if upstreams.last_resort() => Decision::LastResort { set, upstreams },
            Some(upstreams) => Decision::Pinned { set, upstreams },
        },
    }
}

/// The route header's value for a request (see [`Decision::hosts`]).
pub fn decide<'t>(table: &'t RouteTable, raw_path: &[u8], n: u32) -> Option<&'t str> {
    route(table, &DecodedPath::parse(raw_path)).1.hosts(n)
}

#[cfg(test)]
#[path = "route_tests.rs"]
mod tests;
