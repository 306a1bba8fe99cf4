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
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use crate::table::tests::sample;

    #[test]
    fn decisions() {
        let t = RouteTable::from_proto(&sample()).unwrap();
        let cases: &[(&str, Option<&str>)] = &[
            ("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c", Some("127.0.0.1:1002")),
            ("/apis/resource.k8s.io/v1/watch/namespaces/ns/resourceclaims?resourceVersion=1", Some("127.0.0.1:1002")),
            ("/apis/resource.k8s.io/v1/resourceclaims?watch=true", Some("127.0.0.1:1002")),
            ("/apis/resource.k8s.io/v1", Some("127.0.0.1:1002")),
            ("/apis/resource.k8s.io", Some("127.0.0.1:1002")),
            ("/apis/apps/v1/namespaces/ns/deployments/d/scale", Some("127.0.0.1:1001")),
            ("/apis/batch/v1/namespaces/ns/jobs", Some("127.0.0.1:1003")),
            ("/api/v1/namespaces/ns/pods/p", None),
            ("/apis", None),
            ("/api", None),
            ("/healthz", None),
            ("/apis/unknown.example/v1/things", None),
            ("/apis/resource.k8s.io/v1/watch", None),
        ];
        for (path, want) in cases {
            assert_eq!(decide(&t, path.as_bytes(), 0), *want, "{path}");
        }
    }
}
