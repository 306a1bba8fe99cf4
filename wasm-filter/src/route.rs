//! request → classify → look up → route: the whole per-request decision, in
//! plain Rust so it is tested natively. The proxy-wasm adapter only moves
//! headers in and out.

use crate::requestinfo::{Method, RequestInfo, Target};
use crate::table::RouteTable;

/// The override-host list (`IP:port,IP:port,…`) for a request, or `None` to
/// leave it to Envoy's normal load balancing. `n` spreads requests over the
/// capable apiservers.
///
/// The method does not change the group/version/resource/subresource that
/// RequestInfo derives, so the adapter need not read `:method`.
pub fn decide<'t>(table: &'t RouteTable, raw_path: &[u8], n: u32) -> Option<&'t str> {
    let target = Target::parse(raw_path);
    let found = match target.classify(Method::Get) {
        RequestInfo::Resource(r) => {
            table.resource_target(r.group, r.version, r.resource, r.subresource)
        }
        RequestInfo::Discovery { group, version } => table.discovery_target(group, version),
        RequestInfo::NonResource | RequestInfo::Invalid => None,
    };
    found.map(|t| t.header_value(n))
}

#[cfg(test)]
#[path = "route_tests.rs"]
mod tests;
