//! request → classify → look up → pin: the whole per-request decision, in
//! plain Rust so it is tested natively. The adapter only moves headers in
//! and out.

use crate::requestinfo::{RouteKey, route_key};
use crate::table::RouteTable;
use crate::urlpath::DecodedPath;

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
pub fn lookup<'t, 'p>(table: &'t RouteTable, path: &'p DecodedPath<'_>, n: u32) -> (RouteKey<'p>, Option<&'t str>) {
    let key = route_key(path);
    let hosts = table.servers(&key).and_then(|set| table.pinned(set)).map(|u| u.header_value(n));
    (key, hosts)
}

#[cfg(test)]
#[path = "route_tests.rs"]
mod tests;
