//! The apiserver clusters' upstream HTTP filters: what an apiserver's
//! response may not tell Envoy.
//!
//! Envoy's router acts on `x-envoy-*` headers of an upstream response before
//! any HTTP filter or route option sees it (Envoy 1.40, `router.cc`
//! `onUpstreamHeaders` and `retry_state_impl.cc`):
//! - `x-envoy-immediate-health-check-fail`: the host is marked failed at
//!   once (any cluster with active health checks) — with the panic
//!   threshold at 0 every member out means `503 no_healthy_upstream` for
//!   every request not pinned;
//! - `x-envoy-overloaded`: the request is never retried;
//! - `x-envoy-ratelimited`: a retry condition (`retry_on: envoy-ratelimited`);
//! - `x-envoy-upstream-canary`: counted as a canary's answer;
//! - `x-envoy-degraded`, `x-envoy-upstream-healthchecked-cluster`: what a
//!   health check answer says of the host;
//! - `x-envoy-decorator-operation`: the trace span's name.
//!
//! An apiserver passes a backend's response headers through on
//! `pods/proxy`, `services/proxy`, `nodes/proxy` and aggregated APIs, and
//! kube's `edit` and `admin` roles grant `pods/proxy` and `services/proxy`
//! in a namespace: a tenant whose pod answers with the first of them, asked
//! through the front door a few times a second, kept every apiserver out of
//! the balancer (235 of 511 requests for `/api/v1/namespaces` a 503). So
//! every `x-envoy-` header of an apiserver's response is removed in the
//! cluster's upstream filter chain, before the router sees the response
//! (a route's `response_headers_to_remove` acts only after it) — the whole
//! prefix, so a header a later Envoy learns is covered too. Nothing an
//! apiserver legitimately sends starts with it.

use envoy_types::pb::envoy::config::common::mutation_rules::v3 as rules;
use envoy_types::pb::envoy::extensions::filters::http::header_mutation::v3::{HeaderMutation, Mutations};
use envoy_types::pb::envoy::extensions::filters::http::upstream_codec::v3::UpstreamCodec;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{HttpFilter, http_filter};
use envoy_types::pb::envoy::r#type::matcher::v3 as matcher;
use envoy_types::util::pack_any;

/// Envoy's own header prefix (the bootstrap's `header_prefix`, unset).
pub const ENVOY_HEADER_PREFIX: &str = "x-envoy-";

/// The upstream filter chain of every apiserver cluster: the removal, then
/// the codec (which must end it).
pub fn apiserver_upstream_filters() -> Vec<HttpFilter> {
    let remove_envoy_headers = rules::HeaderMutation {
        action: Some(rules::header_mutation::Action::RemoveOnMatch(rules::header_mutation::RemoveOnMatch {
            key_matcher: Some(matcher::StringMatcher {
                match_pattern: Some(matcher::string_matcher::MatchPattern::Prefix(ENVOY_HEADER_PREFIX.to_string())),
                ..Default::default()
            }),
        })),
    };
    vec![
        HttpFilter {
            name: "mvp.upstream.remove_envoy_headers".to_string(),
            config_type: Some(http_filter::ConfigType::TypedConfig(pack_any(HeaderMutation {
                mutations: Some(Mutations { response_mutations: vec![remove_envoy_headers], ..Default::default() }),
                ..Default::default()
            }))),
            ..Default::default()
        },
        HttpFilter {
            name: "envoy.filters.http.upstream_codec".to_string(),
            config_type: Some(http_filter::ConfigType::TypedConfig(pack_any(UpstreamCodec {}))),
            ..Default::default()
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// The removal comes first, on the response, by the prefix; the codec
    /// ends the chain (Envoy refuses a chain without it last).
    #[test]
    fn every_envoy_header_of_a_response_is_removed_before_the_router() {
        let filters = apiserver_upstream_filters();
        assert_eq!(filters.last().map(|f| f.name.as_str()), Some("envoy.filters.http.upstream_codec"));
        let Some(http_filter::ConfigType::TypedConfig(any)) = &filters[0].config_type else { panic!() };
        let m = HeaderMutation::decode(any.value.as_slice()).unwrap().mutations.unwrap();
        assert!(m.request_mutations.is_empty());
        let Some(rules::header_mutation::Action::RemoveOnMatch(r)) = &m.response_mutations[0].action else { panic!() };
        let Some(matcher::string_matcher::MatchPattern::Prefix(p)) = &r.key_matcher.as_ref().unwrap().match_pattern else { panic!() };
        assert_eq!(p, "x-envoy-");
    }
}
