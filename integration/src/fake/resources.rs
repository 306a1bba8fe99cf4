//! Resource requests on a fake apiserver: parsed independently of the
//! filter's classifier, answered with what was understood, or kube's 404.

use std::collections::BTreeMap;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use std::sync::atomic::Ordering;

use super::fixtures::Documents;
use super::responses::{json_response, not_found};
use super::state::FakeState;

pub(super) fn echo_headers(headers: &HeaderMap) -> BTreeMap<String, Vec<String>> {
    headers
        .keys()
        .map(|k| {
            let values = headers.get_all(k).iter().map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()).collect();
            (k.as_str().to_string(), values)
        })
        .collect()
}

#[derive(Debug, Default)]
pub(super) struct ResourcePath<'a> {
    pub(super) group: &'a str,
    pub(super) version: &'a str,
    pub(super) namespace: &'a str,
    pub(super) resource: &'a str,
    pub(super) name: &'a str,
    pub(super) subresource: &'a str,
    pub(super) special_verb: &'a str,
}

/// Reads `/api/v1/...` and `/apis/g/v/...` the way the URL forms in the
/// Kubernetes API conventions describe them.
pub(super) fn parse_resource_path<'a>(parts: &[&'a str]) -> Option<ResourcePath<'a>> {
    let mut p = ResourcePath::default();
    let rest: &[&'a str] = match parts {
        ["api", v, rest @ ..] => {
            p.version = v;
            rest
        }
        ["apis", g, v, rest @ ..] => {
            p.group = g;
            p.version = v;
            rest
        }
        _ => return None,
    };
    let rest = match rest {
        [verb @ ("watch" | "proxy"), rest @ ..] if !rest.is_empty() => {
            p.special_verb = verb;
            rest
        }
        other => other,
    };
    let rest = match rest {
        ["namespaces", ns, next, rest @ ..] if *next != "status" && *next != "finalize" => {
            p.namespace = ns;
            std::slice::from_ref(next).iter().chain(rest.iter()).copied().collect::<Vec<_>>()
        }
        ["namespaces", ns, rest @ ..] => {
            p.namespace = ns;
            std::iter::once("namespaces").chain(std::iter::once(*ns)).chain(rest.iter().copied()).collect()
        }
        other => other.to_vec(),
    };
    p.resource = rest.first().copied()?;
    p.name = rest.get(1).copied().unwrap_or("");
    if p.special_verb != "proxy" {
        p.subresource = rest.get(2).copied().unwrap_or("");
    }
    Some(p)
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn resource(
    s: &FakeState,
    docs: &Documents,
    p: ResourcePath<'_>,
    method: &str,
    query: &str,
    headers: &HeaderMap,
    raw_path: &str,
    user: &super::auth::UserInfo,
) -> Response {
    s.stats.resource_requests.fetch_add(1, Ordering::Relaxed);
    let failing = {
        let mut f = s.fail_next.lock().unwrap_or_else(|p| p.into_inner());
        (f.0 > 0).then(|| {
            f.0 -= 1;
            f.1
        })
    };
    match failing {
        // Dropping the connection before any response byte: this
        // connection's task ends here (hyper closes it without an answer).
        Some(super::state::FailHow::Reset) => std::panic::resume_unwind(Box::new("fail-next: connection reset")),
        Some(super::state::FailHow::ShuttingDown) => {
            let mut r = super::responses::json_response(
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                &serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "The apiserver is shutting down, please try again later.", "reason": "TooManyRequests", "code": 429}),
            );
            r.headers_mut().insert("retry-after", axum::http::HeaderValue::from_static("5"));
            r.headers_mut().insert("connection", axum::http::HeaderValue::from_static("close"));
            return r;
        }
        None => {}
    }
    let key = (p.group.to_string(), p.version.to_string(), p.resource.to_string());
    let Some(found) = docs.resources.get(&key) else {
        return not_found();
    };
    // `?delay_ms=N`: the answer starts N ms late — a LIST that waits on a
    // slow etcd, or in priority and fairness's queue.
    if let Some(ms) = query.split('&').find_map(|kv| kv.strip_prefix("delay_ms=")?.parse::<u64>().ok()) {
        tokio::time::sleep(std::time::Duration::from_millis(ms.min(600_000))).await;
    }
    let kind = &found.kind;
    if !p.subresource.is_empty() && !found.subresources.contains(p.subresource) {
        return not_found();
    }
    let echoed = echo_headers(headers);
    let watch = p.special_verb == "watch"
        || query.split('&').any(|kv| kv.starts_with("watch=") && !matches!(kv, "watch=0" | "watch=false" | "watch=False"));
    let api_version = if p.group.is_empty() { p.version.to_string() } else { format!("{}/{}", p.group, p.version) };
    let served = json!({
        "server": s.name,
        "release": docs.release,
        "method": method,
        "path": raw_path,
        "query": query,
        "group": p.group,
        "version": p.version,
        "resource": p.resource,
        "subresource": p.subresource,
        "namespace": p.namespace,
        "name": p.name,
        "watch": watch,
        "headers": echoed,
        "user": user,
    });
    let mut resp = if watch {
        // An ADDED event at once, then (with ?bookmarks=N) N bookmarks 100 ms
        // apart, flushed one by one: a front door that buffered the stream
        // would deliver the first event only at the end. With ?hold=S the
        // watch then stays open until S seconds after it began (as most of a
        // cluster's watches are: scale tests hold thousands) — quiet, or
        // with ?events_every_ms=N a MODIFIED event of about a pod's size
        // every N ms (the scale benchmark's CPU per event).
        let event = json!({"type": "ADDED", "object": {"apiVersion": api_version, "kind": kind, "metadata": {"name": "fake", "namespace": p.namespace, "resourceVersion": "1"}}, "servedBy": served});
        let param = |name: &str| query.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')?.parse::<u64>().ok());
        let bookmarks = param("bookmarks").unwrap_or(0).min(u64::from(u32::MAX)) as u32;
        let hold_until = param("hold").map(|s| tokio::time::Instant::now() + std::time::Duration::from_secs(s.min(3600)));
        let every = param("events_every_ms").filter(|ms| *ms > 0).map(std::time::Duration::from_millis);
        let mut first = serde_json::to_vec(&event).unwrap_or_default();
        first.push(b'\n');
        let modified = Bytes::from(modified_event(&api_version, kind, p.namespace));
        let kind = kind.clone();
        let stats = s.stats.clone();
        let stream = futures::stream::unfold(0u32, move |i| {
            let first = first.clone();
            let kind = kind.clone();
            let (modified, stats) = (modified.clone(), stats.clone());
            async move {
                if i == 0 {
                    return Some((Ok::<_, std::io::Error>(Bytes::from(first)), 1));
                }
                if i > bookmarks {
                    let until = hold_until?;
                    if let Some(every) = every {
                        let next = tokio::time::Instant::now() + every;
                        if next < until {
                            tokio::time::sleep_until(next).await;
                            stats.watch_events.fetch_add(1, Ordering::Relaxed);
                            return Some((Ok(modified), i));
                        }
                    }
                    tokio::time::sleep_until(until).await;
                    return None;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                let mut line = serde_json::to_vec(&json!({"type": "BOOKMARK", "object": {"kind": kind, "metadata": {"resourceVersion": (i + 1).to_string()}}})).unwrap_or_default();
                line.push(b'\n');
                Some((Ok(Bytes::from(line)), i + 1))
            }
        });
        Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from_stream(stream))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
    } else if p.name.is_empty() && method == "GET" {
        match query.split('&').find_map(|kv| kv.strip_prefix("items_bytes=")?.parse::<u64>().ok()) {
            Some(bytes) => big_list(&api_version, kind, bytes, &served),
            None => json_response(StatusCode::OK, &json!({"apiVersion": api_version, "kind": format!("{kind}List"), "metadata": {"resourceVersion": "1"}, "items": [], "servedBy": served})),
        }
    } else {
        json_response(StatusCode::OK, &json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": if p.name.is_empty() { "fake" } else { p.name }, "namespace": p.namespace}, "servedBy": served}))
    };
    if let Ok(v) = HeaderValue::from_str(&s.name) {
        resp.headers_mut().insert("x-fake-apiserver", v);
    }
    if p.subresource == "proxy" || p.special_verb == "proxy" {
        // kube-apiserver passes the backend's response headers through on
        // `.../proxy`: the fake's tenants answer with every header Envoy's
        // router acts on (issue 55 item 1).
        for (k, v) in TENANT_PROXY_HEADERS {
            resp.headers_mut().insert(*k, HeaderValue::from_static(v));
        }
    }
    resp
}

/// What a hostile tenant's pod answers a `.../proxy` request with: the
/// `x-envoy-` response headers Envoy 1.40's router interprets.
pub const TENANT_PROXY_HEADERS: &[(&str, &str)] = &[
    ("x-envoy-immediate-health-check-fail", "true"),
    ("x-envoy-overloaded", "true"),
    ("x-envoy-ratelimited", "true"),
    ("x-envoy-degraded", "true"),
    ("x-envoy-upstream-canary", "true"),
    ("x-envoy-decorator-operation", "tenant"),
];

/// A MODIFIED watch event of about 2 KiB, the size of a pod's (what a
/// kubelet's pod watch carries most).
fn modified_event(api_version: &str, kind: &str, namespace: &str) -> Vec<u8> {
    let labels: serde_json::Map<String, serde_json::Value> = (0..24).map(|i| (format!("label-{i:02}"), json!(format!("value-{i:02}-{}", "x".repeat(40))))).collect();
    let event = json!({"type": "MODIFIED", "object": {"apiVersion": api_version, "kind": kind, "metadata": {"name": "fake", "namespace": namespace, "resourceVersion": "2", "labels": labels}}});
    let mut line = serde_json::to_vec(&event).unwrap_or_default();
    line.push(b'\n');
    line
}

/// A LIST of about `bytes` (at most 4 GiB) of ~1 KiB items, made as it is
/// sent (`?items_bytes=N`: the scale tests' big LIST, issue 48): the fake
/// holds one 64 KiB block, whatever the size, and sends only as fast as the
/// connection takes it.
fn big_list(api_version: &str, kind: &str, bytes: u64, served: &serde_json::Value) -> Response {
    const ITEMS_PER_BLOCK: usize = 64;
    let item = |i: usize| json!({"metadata": {"name": format!("item-{i:05}"), "namespace": "default", "resourceVersion": "1"}, "data": {"pad": "x".repeat(900)}}).to_string();
    let head = format!(
        "{{\"apiVersion\":{},\"kind\":\"{kind}List\",\"metadata\":{{\"resourceVersion\":\"1\"}},\"servedBy\":{served},\"items\":[{}",
        serde_json::Value::from(api_version),
        item(0)
    );
    let block: String = (1..=ITEMS_PER_BLOCK).map(|i| format!(",{}", item(i))).collect();
    let (head, block) = (Bytes::from(head), Bytes::from(block));
    let blocks = bytes.min(4 << 30).saturating_sub(head.len() as u64) / block.len() as u64;
    let chunks = std::iter::once(head).chain(std::iter::repeat_n(block, usize::try_from(blocks).unwrap_or(0))).chain(std::iter::once(Bytes::from_static(b"]}")));
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(futures::stream::iter(chunks.map(Ok::<_, std::io::Error>))))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(path: &str) -> Option<String> {
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        parse_resource_path(&parts).map(|p| format!("{}|{}|{}|{}|{}|{}", p.group, p.version, p.namespace, p.resource, p.name, p.subresource))
    }

    #[test]
    fn url_forms() {
        assert_eq!(parse("/api/v1/pods").as_deref(), Some("|v1||pods||"));
        assert_eq!(parse("/api/v1/namespaces/ns/pods/p/log").as_deref(), Some("|v1|ns|pods|p|log"));
        assert_eq!(parse("/api/v1/namespaces/ns").as_deref(), Some("|v1|ns|namespaces|ns|"));
        assert_eq!(parse("/api/v1/namespaces/ns/status").as_deref(), Some("|v1|ns|namespaces|ns|status"));
        assert_eq!(parse("/apis/apps/v1/watch/namespaces/ns/deployments").as_deref(), Some("apps|v1|ns|deployments||"));
        assert_eq!(parse("/api/v1/proxy/nodes/n/x/y").as_deref(), Some("|v1||nodes|n|"));
        assert_eq!(parse("/other"), None);
    }
}
