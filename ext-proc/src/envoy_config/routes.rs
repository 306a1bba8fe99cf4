//! The route table: the merged documents (`/apis`, `/openapi/v2`, the
//! `/openapi/v3` index) through ext_proc, one route per number of
//! apiservers the filter pinned a request to, and the default route.

use mvp_contract::envoy::{APISERVERS_CLUSTER, APISERVERS_REQUESTHEADER_CLUSTER, EXT_PROC_FALLBACK_FILTER, EXT_PROC_FILTER, WARNING_FILTER_STATE, http1_twin};
use mvp_contract::headers::{DISCOVERY_RESULT, ROUTE, UNAVAILABLE, UNAVAILABLE_DOCUMENT};
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
fn to_apiservers(cluster: &str, retries: usize, retry: Retry, t: &Timeouts, idle: bool) -> Value {
    let (retry_on, codes) = match retry {
        Retry::NeverReached => ("connect-failure,refused-stream,reset-before-request", json!(null)),
        Retry::Read => ("connect-failure,refused-stream,reset-before-request,reset,retriable-status-codes", json!([429])),
    };
    json!({
        "cluster": cluster,
        // Long-running requests lift it (the filter: `UPSTREAM_TIMEOUT`).
        "timeout": t.request,
        "retry_policy": {
            "retry_on": retry_on,
            "retriable_status_codes": codes,
            "num_retries": retries,
            "retry_host_predicate": [{
                "name": "envoy.retry_host_predicates.previous_hosts",
                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"},
            }],
            "host_selection_retry_max_attempts": 5,
            // A merged document's read without a byte from its apiserver for
            // this long is tried on another capable one (`reset` covers it),
            // as on a reset: an apiserver serves them from memory, so only a
            // hung one is this slow. No other request has it (`route_set`).
            "per_try_idle_timeout": if idle { t.read_idle.clone().map_or(Value::Null, Value::from) } else { Value::Null },
        },
    })
}

/// The routes' timeouts, rendered.
pub struct Timeouts {
    /// Any request that is not long-running.
    request: String,
    /// A merged document's read attempt without a response byte; `None`:
    /// no bound.
    read_idle: Option<String>,
}

impl Timeouts {
    pub fn new(request: std::time::Duration, read_idle: std::time::Duration) -> Timeouts {
        let secs = |d: std::time::Duration| format!("{:.3}s", d.as_secs_f64());
        Timeouts { request: secs(request), read_idle: (!read_idle.is_zero()).then(|| secs(read_idle)) }
    }
}

/// The paths whose answers ext_proc may replace with a merged document
/// (`rewrite::exchange::Target` names the same ones).
pub const MERGED_PATHS: [&str; 5] = ["/apis", "/apis/", "/openapi/v2", "/openapi/v3", "/openapi/v3/"];

/// Per-route config of a merged document's route: the ext_proc filters,
/// off by default (`super::filters`), on — with their own config — for it
/// alone; the fallback one too when there is one. Every other route has
/// none: Envoy creates no ext_proc filter for its requests (before, a
/// filter disabled per route was still created for each: ~6.5 KiB per
/// watch, `scale_watches.rs`).
fn with_ext_proc(fallback: bool) -> Value {
    // Present and empty: the filter is on, with its own config.
    let on = json!({"@type": "type.googleapis.com/envoy.config.route.v3.FilterConfig", "config": {}});
    let mut filters = serde_json::Map::new();
    filters.insert(EXT_PROC_FILTER.to_string(), on.clone());
    if fallback {
        filters.insert(EXT_PROC_FALLBACK_FILTER.to_string(), on);
    }
    Value::Object(filters)
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
/// `per_list`: the routes per number of listed apiservers, for the wasm
/// build (its route header); the native build pins by override host and
/// its balancer, and matches only the others.
/// `warn`: the per-list routes add the filter's `Warning`
/// (`WARNING_FILTER_STATE`) to the response — only they: the requests they
/// match are the pinned ones, the only ones ever warned.
pub fn routes(identity_header: Option<&str>, fallback: bool, per_list: bool, warn: bool, t: &Timeouts) -> Vec<Value> {
    let mut out = vec![malformed_authority(), unavailable(), unavailable_document()];
    if let Some(header) = identity_header {
        out.extend(route_set(APISERVERS_REQUESTHEADER_CLUSTER, Some(header), fallback, per_list, warn, t));
    }
    out.extend(route_set(APISERVERS_CLUSTER, None, fallback, per_list, warn, t));
    out
}

/// The wasm build's warning, from the property the filter set; a request
/// without one gets no header (an empty value is not added).
fn warning() -> Value {
    json!([{
        "header": {"key": "warning", "value": format!("%FILTER_STATE({WARNING_FILTER_STATE}:PLAIN)%")},
        "append_action": "APPEND_IF_EXISTS_OR_ADD",
        "keep_empty_value": false,
    }])
}

/// A request with more than one `Host` (Envoy joins them with a comma into
/// `:authority`; a substring check, no regex on every request): the 400 Status kube
/// answers it directly (Go: "too many Host headers"), from Envoy — not an
/// HTTP/2 apiserver's protocol error, which would reach the client as a 502.
fn malformed_authority() -> Value {
    json!({
        "match": {"prefix": "/", "headers": [{"name": ":authority", "string_match": {"contains": ","}}]},
        "direct_response": {"status": 400},
    })
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
    })
}

/// The same for a discovery or OpenAPI document only closed members serve:
/// no `Retry-After`, so a new client's discovery fails that group-version at
/// once instead of waiting out ten retries (`UNAVAILABLE_DOCUMENT`).
fn unavailable_document() -> Value {
    json!({
        "match": {"prefix": "/", "headers": [{"name": ROUTE, "string_match": {"exact": UNAVAILABLE_DOCUMENT}}]},
        "direct_response": {"status": 503},
    })
}

fn route_set(cluster: &str, identity_header: Option<&str>, fallback: bool, per_list: bool, warn: bool, t: &Timeouts) -> Vec<Value> {
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
    // Over the HTTP/1.1 twin: ext_proc replaces these bodies at the
    // response-headers phase (CONTINUE_AND_REPLACE), and over HTTP/2 the
    // apiserver's own body could already be buffered when the multi-MiB
    // replacement joined it: Envoy's stream buffer limit answered the 500
    // `response_payload_too_large` (2 of 160 concurrent CRD-heavy `/apis`,
    // `peer_discovery::large_crd_heavy_documents_are_merged_and_gzipped`).
    // Discovery is a few requests per client; nothing to multiplex.
    let merged = |path: &str| {
        json!({
            "match": {"path": path, "headers": with_identity(vec![])},
            "route": to_apiservers(http1_twin(cluster), all, Retry::Read, t, true),
            "response_headers_to_remove": [DISCOVERY_RESULT],
            "typed_per_filter_config": with_ext_proc(fallback),
        })
    };
    let mut routes: Vec<Value> = MERGED_PATHS.iter().map(|p| merged(p)).collect();
    // Each route below three times: upgrade requests first (exec, attach,
    // port-forward: to the HTTP/1.1 twin, retried only where they never
    // reached a server), then reads (their retry policy), then any method.
    // No idle bound on any of them: a slow LIST (a consistent read from a
    // slow etcd, priority-and-fairness queueing) is a healthy server's, and
    // re-sending it multiplied etcd's load when etcd was slowest; Envoy's
    // idle timer counts only upstream data, so a client that stopped reading
    // had its LIST cut mid-body; a CPU profile runs for its `seconds`. What
    // moves a read off an apiserver that is actually hung is its HTTP/2
    // connection's PING going unanswered (`xds::clusters`): the connection is
    // closed, its streams reset, and `reset` retries the reads.
    let http1 = http1_twin(cluster);
    let upgrade = || json!({"name": "upgrade", "present_match": true});
    let read = || json!({"name": ":method", "string_match": {"safe_regex": {"regex": READ_METHODS}}});
    let variants = |first: Vec<Value>| {
        vec![
            ([first.clone(), vec![upgrade()]].concat(), http1, Retry::NeverReached, false),
            ([first.clone(), vec![read()]].concat(), cluster, Retry::Read, false),
            (first, cluster, Retry::NeverReached, false),
        ]
    };
    // Requests the wasm filter pinned (it sets only the route header;
    // setting it clears the route cache, so Envoy matches again): one route
    // per number of listed apiservers k, retrying at most k-1 times so a
    // failover never leaves the capable set. No `x-kubernetes-peer-proxied`
    // (`mvp_contract::headers::PEER_PROXIED`: it would turn a stale pin into
    // the server's 404 instead of its own peer proxy's second chance).
    for k in (1..=MAX_LISTED_APISERVERS).filter(|_| per_list) {
        let hosts = json!({"name": ROUTE, "string_match": {"safe_regex": {"regex": hosts_regex(k)}}});
        for (headers, cluster, retry, idle) in variants(vec![hosts]) {
            let mut route = json!({"match": {"prefix": "/", "headers": with_identity(headers)}, "route": to_apiservers(cluster, k - 1, retry, t, idle)});
            if warn && let Some(r) = route.as_object_mut() {
                r.insert("response_headers_to_add".into(), warning());
            }
            routes.push(route);
        }
    }
    for (headers, cluster, retry, idle) in variants(vec![]) {
        routes.push(json!({"match": {"prefix": "/", "headers": with_identity(headers)}, "route": to_apiservers(cluster, all, retry, t, idle)}));
    }
    routes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Timeouts {
        Timeouts::new(std::time::Duration::from_secs(70), std::time::Duration::from_secs(20))
    }

    #[test]
    fn pinned_requests_retry_only_within_their_list() {
        let r = routes(None, false, true, false, &t());
        let m = MERGED_PATHS.len();
        let set = m + 3 * (MAX_LISTED_APISERVERS + 1);
        // A malformed authority's 400 first, then the two unavailable
        // answers: resources with Retry-After, documents without.
        let u = 3;
        assert_eq!(r.len(), u + set);
        assert_eq!((r[0]["direct_response"]["status"].as_u64(), r[0]["match"]["headers"][0]["name"].as_str()), (Some(400), Some(":authority")));
        assert_eq!(r[1]["direct_response"]["status"], 503);
        assert_eq!(r[1]["response_headers_to_add"][0]["header"]["key"], "retry-after");
        assert_eq!((r[2]["direct_response"]["status"].as_u64(), r[2]["match"]["headers"][0]["string_match"]["exact"].as_str()), (Some(503), Some(UNAVAILABLE_DOCUMENT)));
        assert!(r[2]["response_headers_to_add"].is_null(), "no Retry-After on documents");
        let with_identity = routes(Some("x-remote-user"), false, true, false, &t());
        assert_eq!(with_identity.len(), u + 2 * set);
        assert_eq!(with_identity[u]["route"]["cluster"], mvp_contract::envoy::APISERVERS_REQUESTHEADER_HTTP1_CLUSTER, "a merged document");
        assert_eq!(with_identity[u]["match"]["headers"][0]["name"], "x-remote-user");
        assert_eq!(with_identity[u - 1 + 2 * set]["route"]["cluster"], APISERVERS_CLUSTER);
        // k = 1: upgrades, reads, any method; k = 2 likewise.
        assert_eq!(r[u + m]["route"]["retry_policy"]["num_retries"], 0);
        assert_eq!(r[u + m + 3]["route"]["retry_policy"]["num_retries"], 1);
        assert_eq!(r[u + m + 4]["route"]["retry_policy"]["num_retries"], 1);
        assert!(r.iter().all(|r| r.get("request_headers_to_add").is_none()), "no route adds x-kubernetes-peer-proxied");
        let policy = |i: usize| r[u + m + i]["route"]["retry_policy"]["retry_on"].as_str().unwrap().to_string();
        assert_eq!(r[u + m + 4]["match"]["headers"][1]["name"], ":method");
        assert!(policy(4).contains(",reset,") && policy(4).contains("retriable-status-codes"), "reads retry a reset and a 429");
        assert_eq!(r[u + m + 4]["route"]["retry_policy"]["retriable_status_codes"], serde_json::json!([429]));
        assert_eq!(policy(5), "connect-failure,refused-stream,reset-before-request", "writes only what never reached a server");
        assert!(r[u + m + 5]["match"]["headers"].as_array().unwrap().iter().all(|h| h["name"] != ":method"));
        let two = hosts_regex(2);
        let re = regex_lite(&two);
        assert!(re("127.0.0.1:1,127.0.0.1:2") && !re("127.0.0.1:1") && !re("a,b,c"));
    }

    /// Every route times out but for long-running requests (the filter's
    /// mark lifts it); only the merged documents' reads have the idle bound
    /// — a slow LIST, a client that stops reading, a profile are never cut
    /// or re-sent by it.
    #[test]
    fn only_merged_documents_have_the_idle_bound() {
        let r = routes(None, false, true, false, &t());
        for route in r.iter().filter(|r| r.get("route").is_some()) {
            let idle = &route["route"]["retry_policy"]["per_try_idle_timeout"];
            let merged = route["match"].get("path").is_some();
            assert_eq!(route["route"]["timeout"], "70.000s", "{route}");
            assert_eq!(*idle == "20.000s", merged, "{route}");
        }
        let none = routes(None, false, true, false, &Timeouts::new(std::time::Duration::from_secs(70), std::time::Duration::ZERO));
        assert!(none.iter().all(|r| r["route"]["retry_policy"]["per_try_idle_timeout"].is_null()));
    }

    /// Only upgrade requests go to the HTTP/1.1 twins, before any other
    /// route of their set could take them, and the merged documents (whose
    /// bodies ext_proc replaces); everything else to the HTTP/2 clusters. An
    /// upgrade is never retried once it reached a server.
    #[test]
    fn upgrades_and_only_upgrades_go_to_the_http1_twins() {
        use mvp_contract::envoy::{APISERVERS_HTTP1_CLUSTER, APISERVERS_REQUESTHEADER_HTTP1_CLUSTER};
        for per_list in [true, false] {
            let r = routes(Some("x-remote-user"), false, per_list, false, &t());
            let mut seen_upgrade_last = false;
            for route in r.iter().filter(|r| r.get("route").is_some()) {
                let headers = route["match"]["headers"].as_array().cloned().unwrap_or_default();
                let upgrade = headers.iter().any(|h| h["name"] == "upgrade" && h["present_match"] == true);
                let merged = route["match"].get("path").is_some();
                let identity = headers.iter().any(|h| h["name"] == "x-remote-user");
                let cluster = route["route"]["cluster"].as_str().unwrap();
                let want = match (upgrade || merged, identity) {
                    (true, true) => APISERVERS_REQUESTHEADER_HTTP1_CLUSTER,
                    (true, false) => APISERVERS_HTTP1_CLUSTER,
                    (false, true) => APISERVERS_REQUESTHEADER_CLUSTER,
                    (false, false) => APISERVERS_CLUSTER,
                };
                assert_eq!(cluster, want, "{route}");
                if upgrade {
                    assert_eq!(route["route"]["retry_policy"]["retry_on"], "connect-failure,refused-stream,reset-before-request");
                    assert!(route["route"]["retry_policy"]["per_try_idle_timeout"].is_null());
                } else if route["match"].get("prefix").is_some() && !seen_upgrade_last {
                    panic!("a prefix route before its set's upgrade route: {route}");
                }
                // Within a set, the upgrade route opens each group.
                seen_upgrade_last = upgrade || (seen_upgrade_last && route["match"].get("prefix").is_some());
            }
        }
    }

    /// The native build never writes a host list into the route header:
    /// it matches no per-list route, and is not made to walk them.
    #[test]
    fn the_native_build_has_no_per_list_routes() {
        let r = routes(None, false, false, false, &t());
        assert_eq!(r.len(), 3 + MERGED_PATHS.len() + 3);
        assert!(r.iter().all(|route| route["match"]["headers"].as_array().is_none_or(|h| h.iter().all(|h| h["name"] != ROUTE || route.get("direct_response").is_some()))));
    }

    /// Enough of RE2 for the two shapes `hosts_regex` writes.
    fn regex_lite(re: &str) -> impl Fn(&str) -> bool {
        let commas = if re == "^[^,]+$" { 0 } else { re.trim_end_matches("}$").rsplit('{').next().unwrap().parse().unwrap() };
        move |s: &str| s.split(',').all(|p| !p.is_empty()) && s.matches(',').count() == commas
    }

    /// The warning rides only the pinned routes (the wasm build's), and
    /// only when asked for.
    #[test]
    fn only_pinned_routes_carry_the_warning() {
        let carries = |r: &Value| r["response_headers_to_add"].as_array().is_some_and(|a| a.iter().any(|h| h["header"]["key"] == "warning"));
        let r = routes(None, false, true, true, &t());
        let pinned: Vec<&Value> = r.iter().filter(|r| r["match"]["headers"].as_array().is_some_and(|h| h.iter().any(|h| h["name"] == ROUTE && h["string_match"]["safe_regex"].is_object()))).collect();
        assert_eq!(pinned.len(), 3 * MAX_LISTED_APISERVERS);
        assert!(pinned.iter().all(|r| carries(r)));
        assert_eq!(r.iter().filter(|r| carries(r)).count(), pinned.len(), "no other route");
        assert_eq!(pinned[0]["response_headers_to_add"][0]["header"]["value"], "%FILTER_STATE(wasm.mvp_warning:PLAIN)%");
        assert!(!routes(None, false, true, false, &t()).iter().any(carries));
    }
}
