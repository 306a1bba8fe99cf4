//! The route table: the merged documents (`/apis`, `/openapi/v2`, the
//! `/openapi/v3` index) through ext_proc, one route per number of
//! apiservers the filter pinned a request to, and the default route.

use mvp_contract::envoy::{APISERVERS_CLUSTER, APISERVERS_REQUESTHEADER_CLUSTER, EXT_PROC_FALLBACK_FILTER};
use mvp_contract::headers::{DISCOVERY_RESULT, PEER_PROXIED, ROUTE, UNAVAILABLE, UNAVAILABLE_DOCUMENT};
use mvp_contract::limits::{MAX_LISTED_APISERVERS, UNPINNED_RETRIES};
use serde_json::{Value, json};

/// When a request is tried again on another capable apiserver.
#[derive(Clone, Copy)]
enum Retry {
    /// Only failures where the request never reached an apiserver (a
    /// refused connection, a stream refused or GOAWAY'd, a reset before the
    /// request was sent): safe for every verb, writes included.
    NeverReached,
    /// Reads (GET, HEAD; a watch too, whose retry happens only before its
    /// response starts, so nothing was delivered): also a reset or lost
    /// connection before any response byte, and a 429 (kube's answer while
    /// it shuts down with `--shutdown-send-retry-after`, or its priority and
    /// fairness turning the request away: another server may take it).
    Read,
}

/// The methods [`Retry::Read`] applies to.
const READ_METHODS: &str = "^(GET|HEAD)$";

/// To the apiservers cluster, retrying at most `retries` times (see
/// [`Retry`]), each time on a host not tried before. Envoy never retries
/// once response headers went to the client.
fn to_apiservers(cluster: &str, retries: usize, retry: Retry) -> Value {
    let (retry_on, codes) = match retry {
        Retry::NeverReached => ("connect-failure,refused-stream,reset-before-request", json!(null)),
        Retry::Read => ("connect-failure,refused-stream,reset-before-request,reset,retriable-status-codes", json!([429])),
    };
    json!({
        "cluster": cluster,
        "timeout": "0s",
        "retry_policy": {
            "retry_on": retry_on,
            "retriable_status_codes": codes,
            "num_retries": retries,
            "retry_host_predicate": [{
                "name": "envoy.retry_host_predicates.previous_hosts",
                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"},
            }],
            "host_selection_retry_max_attempts": 5,
        },
    })
}

/// The paths whose answers ext_proc may replace with a merged document
/// (`rewrite::exchange::Target` names the same ones).
pub const MERGED_PATHS: [&str; 5] = ["/apis", "/apis/", "/openapi/v2", "/openapi/v3", "/openapi/v3/"];

/// Per-route config that keeps a route out of ext_proc entirely.
fn without_ext_proc() -> Value {
    json!({
        "envoy.filters.http.ext_proc": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute",
            "disabled": true,
        },
    })
}

/// Per-route config of a merged document's route: the fallback ext_proc
/// filter (off by default) on, when there is one.
fn with_ext_proc_fallback() -> Value {
    json!({
        EXT_PROC_FALLBACK_FILTER: {
            "@type": "type.googleapis.com/envoy.config.route.v3.FilterConfig",
            // Present and empty: the filter is on, with its own config.
            "config": {},
        },
    })
}

/// The override-host list's regex for exactly `k` apiservers.
fn hosts_regex(k: usize) -> String {
    if k == 1 { "^[^,]+$".to_string() } else { format!("^[^,]+(,[^,]+){{{}}}$", k - 1) }
}

/// Every route, twice when the front door forwards identities: first for
/// requests carrying the requestheader user header (only the filter can set
/// it: clients' copies are stripped before any filter) to the cluster that
/// presents the proxy client certificate, then for every other request to
/// the cluster that presents none — so tokens and anonymous requests
/// authenticate exactly as they would directly.
///
/// The routes do not depend on the membership: a request the filter pinned
/// lists 1..=[`MAX_LISTED_APISERVERS`] members, and one that only closed
/// members serve is answered here. `fallback`: the front door has the
/// fallback ext_proc filter (mvp-ext-proc replicas).
pub fn routes(identity_header: Option<&str>, fallback: bool) -> Vec<Value> {
    let mut out = vec![unavailable(), unavailable_document()];
    if let Some(header) = identity_header {
        out.extend(route_set(APISERVERS_REQUESTHEADER_CLUSTER, Some(header), fallback));
    }
    out.extend(route_set(APISERVERS_CLUSTER, None, fallback));
    out
}

/// The filter's answer for an API that only closed members serve (draining,
/// not yet re-read, departed): the 503 Status from Envoy itself (the local
/// reply mapper writes the body), with `Retry-After` so client-go retries it
/// on its own.
fn unavailable() -> Value {
    json!({
        "match": {"prefix": "/", "headers": [{"name": ROUTE, "string_match": {"exact": UNAVAILABLE}}]},
        "direct_response": {"status": 503},
        "response_headers_to_add": [{"header": {"key": "retry-after", "value": "1"}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}],
        "typed_per_filter_config": without_ext_proc(),
    })
}

/// The same for a discovery or OpenAPI document only closed members serve:
/// no `Retry-After`, so a new client's discovery fails that group-version at
/// once instead of waiting out ten retries (`UNAVAILABLE_DOCUMENT`).
fn unavailable_document() -> Value {
    json!({
        "match": {"prefix": "/", "headers": [{"name": ROUTE, "string_match": {"exact": UNAVAILABLE_DOCUMENT}}]},
        "direct_response": {"status": 503},
        "typed_per_filter_config": without_ext_proc(),
    })
}

fn route_set(cluster: &str, identity_header: Option<&str>, fallback: bool) -> Vec<Value> {
    let all = UNPINNED_RETRIES;
    // Header matchers, absent (null, dropped when rendered) when there are none.
    let with_identity = |mut headers: Vec<Value>| {
        if let Some(h) = identity_header {
            headers.push(json!({"name": h, "present_match": true}));
        }
        if headers.is_empty() { Value::Null } else { Value::Array(headers) }
    };
    // The merged documents (kubectl also sends `/apis?timeout=32s`; the
    // query is not part of the match) go through ext_proc; every other route
    // has no ext_proc stream at all. A request the filter pinned (the
    // `/openapi/v3` index, to servers that have one) matches here too: the
    // override host is the cluster's, whichever route.
    // An apiserver's own copy of the ext_proc answer's marker would keep the
    // fallback filter from running: removed before any filter sees the
    // response.
    let merged = |path: &str| {
        json!({
            "match": {"path": path, "headers": with_identity(vec![])},
            "route": to_apiservers(cluster, all, Retry::Read),
            "response_headers_to_remove": [DISCOVERY_RESULT],
            "typed_per_filter_config": fallback.then(with_ext_proc_fallback),
        })
    };
    let mut routes: Vec<Value> = MERGED_PATHS.iter().map(|p| merged(p)).collect();
    // Each route below twice: reads first (their retry policy), then any
    // method.
    let read = || json!({"name": ":method", "string_match": {"safe_regex": {"regex": READ_METHODS}}});
    // Requests the filter pinned (it sets only the route header; setting it
    // clears the route cache, so Envoy matches again): one route per number
    // of listed apiservers k, retrying at most k-1 times so a failover never
    // leaves the capable set, and marking the request peer-proxied so an
    // apiserver with its own peer proxy does not proxy it again.
    for k in 1..=MAX_LISTED_APISERVERS {
        let hosts = || json!({"name": ROUTE, "string_match": {"safe_regex": {"regex": hosts_regex(k)}}});
        for (headers, retry) in [(vec![hosts(), read()], Retry::Read), (vec![hosts()], Retry::NeverReached)] {
            routes.push(json!({
                "match": {"prefix": "/", "headers": with_identity(headers)},
                "route": to_apiservers(cluster, k - 1, retry),
                "request_headers_to_add": [{
                    "header": {"key": PEER_PROXIED, "value": "true"},
                    "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
                }],
                "typed_per_filter_config": without_ext_proc(),
            }));
        }
    }
    for (headers, retry) in [(vec![read()], Retry::Read), (vec![], Retry::NeverReached)] {
        routes.push(json!({"match": {"prefix": "/", "headers": with_identity(headers)}, "route": to_apiservers(cluster, all, retry), "typed_per_filter_config": without_ext_proc()}));
    }
    routes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_requests_retry_only_within_their_list() {
        let r = routes(None, false);
        let m = MERGED_PATHS.len();
        let set = m + 2 * (MAX_LISTED_APISERVERS + 1);
        // The two unavailable answers come first: resources with Retry-After,
        // documents without.
        let u = 2;
        assert_eq!(r.len(), u + set);
        assert_eq!(r[0]["direct_response"]["status"], 503);
        assert_eq!(r[0]["response_headers_to_add"][0]["header"]["key"], "retry-after");
        assert_eq!((r[1]["direct_response"]["status"].as_u64(), r[1]["match"]["headers"][0]["string_match"]["exact"].as_str()), (Some(503), Some(UNAVAILABLE_DOCUMENT)));
        assert!(r[1]["response_headers_to_add"].is_null(), "no Retry-After on documents");
        let with_identity = routes(Some("x-remote-user"), false);
        assert_eq!(with_identity.len(), u + 2 * set);
        assert_eq!(with_identity[u]["route"]["cluster"], APISERVERS_REQUESTHEADER_CLUSTER);
        assert_eq!(with_identity[u]["match"]["headers"][0]["name"], "x-remote-user");
        assert_eq!(with_identity[u - 1 + 2 * set]["route"]["cluster"], APISERVERS_CLUSTER);
        // k = 1: reads, then any method; k = 2 likewise.
        assert_eq!(r[u + m]["route"]["retry_policy"]["num_retries"], 0);
        assert_eq!(r[u + m + 2]["route"]["retry_policy"]["num_retries"], 1);
        assert_eq!(r[u + m + 2]["request_headers_to_add"][0]["header"]["key"], PEER_PROXIED);
        let policy = |i: usize| r[u + m + i]["route"]["retry_policy"]["retry_on"].as_str().unwrap().to_string();
        assert_eq!(r[u + m + 2]["match"]["headers"][1]["name"], ":method");
        assert!(policy(2).contains(",reset,") && policy(2).contains("retriable-status-codes"), "reads retry a reset and a 429");
        assert_eq!(r[u + m + 2]["route"]["retry_policy"]["retriable_status_codes"], serde_json::json!([429]));
        assert_eq!(policy(3), "connect-failure,refused-stream,reset-before-request", "writes only what never reached a server");
        assert!(r[u + m + 3]["match"]["headers"].as_array().unwrap().iter().all(|h| h["name"] != ":method"));
        let two = hosts_regex(2);
        let re = regex_lite(&two);
        assert!(re("127.0.0.1:1,127.0.0.1:2") && !re("127.0.0.1:1") && !re("a,b,c"));
    }

    /// Enough of RE2 for the two shapes `hosts_regex` writes.
    fn regex_lite(re: &str) -> impl Fn(&str) -> bool {
        let commas = if re == "^[^,]+$" { 0 } else { re.trim_end_matches("}$").rsplit('{').next().unwrap().parse().unwrap() };
        move |s: &str| s.split(',').all(|p| !p.is_empty()) && s.matches(',').count() == commas
    }
}
