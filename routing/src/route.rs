//! request → classify → look up → pin: the whole per-request decision, in
//! plain Rust so it is tested natively. The adapter only moves headers in
//! and out.

use crate::requestinfo::{RouteKey, route_key};
use crate::table::RouteTable;
use crate::urlpath::DecodedPath;
use mvp_contract::headers::UNAVAILABLE;

/// The override-host list (`IP:port,IP:port,…`) for a request, or `None` to
/// leave it to Envoy's normal load balancing. `n` spreads requests over the
/// capable apiservers.
///
/// Neither the method nor the query changes the group/version/resource/
/// subresource RequestInfo derives, so routing reads only the path.
pub fn decide<'t>(table: &'t RouteTable, raw_path: &[u8], n: u32) -> Option<&'t str> {
    lookup(table, &DecodedPath::parse(raw_path), n).1
}

/// [`decide`], also handing back what the request is routed by (for the
/// access log).
///
/// An API the table does not know is left to the apiserver's own 404 —
/// unless some member's current API set is unknown (it is restarting, or
/// not read yet): then the answer is [`UNAVAILABLE`], the 503 Status, since
/// that member may be about to serve it.
pub fn lookup<'t, 'p>(table: &'t RouteTable, path: &'p DecodedPath<'_>, n: u32) -> (RouteKey<'p>, Option<&'t str>) {
    let key = route_key(path);
    let hosts = match table.servers(&key) {
        None | Some(0) if table.pending() && key != RouteKey::None => Some(UNAVAILABLE),
        set => set.and_then(|set| table.pinned(set)).map(|u| u.header_value(n)),
    };
    (key, hosts)
}

#[cfg(test)]
#[path = "route_tests.rs"]
mod tests;
