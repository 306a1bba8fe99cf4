//! HTTP behaviour of a fake kube-apiserver: discovery with kube's content
//! negotiation and caching headers, `/version`, health endpoints, and
//! resource requests answered with JSON that names the server and what it
//! understood — or kube's 404 Status when it does not serve the API.
//!
//! Request parsing here is written independently of the wasm filter's
//! classifier on purpose: a test oracle that shared the code under test
//! would agree with its bugs.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::documents::Documents;

pub use mvp_ext_proc::apidiscovery::JSON_CONTENT_TYPE as AGGREGATED_V2;

#[derive(Clone)]
pub struct FakeState {
    pub name: String,
    /// Old servers (< 1.26) have no aggregated discovery at all.
    pub aggregated: bool,
    pub fixtures: std::path::PathBuf,
    pub docs: Arc<RwLock<Arc<Documents>>>,
    /// `group/version`s the unaggregated `/apis` lists without serving them,
    /// as kube-aggregator does for APIService objects served elsewhere.
    pub listed_only: Vec<String>,
    /// `v2`, or `v2beta1` for Kubernetes 1.26–1.32 servers that lack v2.
    pub aggregated_version: String,
    pub stats: Arc<Stats>,
    /// When set, served verbatim as the aggregated `/apis` body (tests of
    /// broken and oversized documents).
    pub apis_override: Arc<RwLock<Option<Bytes>>>,
    /// Who may call: API requests (not health, not test control) that no
    /// configured authenticator accepts get kube's 401 Status.
    pub auth: super::auth::AuthConfig,
}

/// What the fake counted, at `GET /__fake/stats`.
#[derive(Default)]
pub struct Stats {
    pub aggregated_ok: AtomicU64,
    pub not_modified: AtomicU64,
    pub resource_requests: AtomicU64,
}

impl FakeState {
    fn docs(&self) -> Arc<Documents> {
        self.docs.read().map(|d| d.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }
}

pub fn router(state: FakeState) -> axum::Router {
    axum::Router::new()
        .route("/__fake/release", axum::routing::post(set_release))
        .route("/__fake/documents", axum::routing::post(set_documents))
        .route("/__fake/stats", axum::routing::get(stats))
        .route("/__fake/apis-body", axum::routing::post(set_apis_body).delete(clear_apis_body))
        .fallback(handle)
        // Tests post multi-MiB discovery documents to the control endpoints.
        .layer(axum::extract::DefaultBodyLimit::max(256 << 20))
        .with_state(state)
}

#[derive(serde::Deserialize)]
struct ReleaseQuery {
    name: String,
}

/// Test control: serve another release's documents from now on.
async fn set_release(State(s): State<FakeState>, Query(q): Query<ReleaseQuery>) -> Response {
    match Documents::load(&s.fixtures, &q.name) {
        Ok(d) => {
            *s.docs.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(d);
            (StatusCode::OK, format!("now serving {}\n", q.name)).into_response()
        }
        Err(e) => (StatusCode::BAD_REQUEST, format!("{e:#}\n")).into_response(),
    }
}

/// Test control: serve arbitrary aggregated documents
/// `{"api": …, "apis": …, "apiV1": …}` from now on.
async fn set_documents(State(s): State<FakeState>, body: Bytes) -> Response {
    let parsed: Result<Value, _> = serde_json::from_slice(&body);
    let result = parsed.map_err(anyhow::Error::from).and_then(|v| {
        let release = s.docs().release.clone();
        Documents::from_values(&release, v["api"].clone(), v["apis"].clone(), v["apiV1"].clone())
    });
    match result {
        Ok(d) => {
            *s.docs.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(d);
            (StatusCode::OK, "documents replaced\n").into_response()
        }
        Err(e) => (StatusCode::BAD_REQUEST, format!("{e:#}\n")).into_response(),
    }
}

async fn stats(State(s): State<FakeState>) -> Response {
    let st = &s.stats;
    json_response(
        StatusCode::OK,
        &json!({
            "aggregatedOk": st.aggregated_ok.load(Ordering::Relaxed),
            "notModified": st.not_modified.load(Ordering::Relaxed),
            "resourceRequests": st.resource_requests.load(Ordering::Relaxed),
        }),
    )
}

async fn set_apis_body(State(s): State<FakeState>, body: Bytes) -> Response {
    *s.apis_override.write().unwrap_or_else(|p| p.into_inner()) = Some(body);
    "apis body overridden\n".into_response()
}

async fn clear_apis_body(State(s): State<FakeState>) -> Response {
    *s.apis_override.write().unwrap_or_else(|p| p.into_inner()) = None;
    "apis body restored\n".into_response()
}

fn json_response(status: StatusCode, v: &Value) -> Response {
    let mut body = serde_json::to_vec(v).unwrap_or_default();
    body.push(b'\n');
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub fn status_json(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "details": {}, "code": code,
    })
}

fn not_found() -> Response {
    json_response(StatusCode::NOT_FOUND, &status_json(404, "NotFound", "the server could not find the requested resource"))
}

/// True when a clause of `Accept` asks for aggregated discovery in the one
/// version this server speaks (kube 1.33+ serves only v2; 1.26–1.32 servers
/// of this fake's v2beta1 mode only v2beta1).
fn wants_aggregated(headers: &HeaderMap, version: &str) -> bool {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    let v = format!("v={version}");
    accept.split(',').any(|clause| {
        let params: Vec<&str> = clause.split(';').map(str::trim).collect();
        params.contains(&"g=apidiscovery.k8s.io") && params.contains(&v.as_str()) && params.contains(&"as=APIGroupDiscoveryList")
    })
}

fn aggregated(s: &FakeState, headers: &HeaderMap, doc: &super::documents::Aggregated, is_apis: bool) -> Response {
    let overridden = if is_apis { s.apis_override.read().ok().and_then(|o| o.clone()) } else { None };
    if let Some(body) = overridden {
        s.stats.aggregated_ok.fetch_add(1, Ordering::Relaxed);
        return (StatusCode::OK, [(header::CONTENT_TYPE, AGGREGATED_V2)], body).into_response();
    }
    let converted;
    let doc = if s.aggregated_version == "v2" {
        doc
    } else {
        let mut v: Value = serde_json::from_slice(&doc.body).unwrap_or_default();
        v["apiVersion"] = json!(format!("apidiscovery.k8s.io/{}", s.aggregated_version));
        converted = super::documents::Aggregated::new(&v);
        &converted
    };
    let mut h = HeaderMap::new();
    let etag = HeaderValue::from_str(&doc.etag).unwrap_or(HeaderValue::from_static("\"\""));
    h.insert(header::ETAG, etag);
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public"));
    // Exact string compare, as kube's ServeHTTPWithETag does.
    if headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) == Some(doc.etag.as_str()) {
        s.stats.not_modified.fetch_add(1, Ordering::Relaxed);
        return (StatusCode::NOT_MODIFIED, h).into_response();
    }
    s.stats.aggregated_ok.fetch_add(1, Ordering::Relaxed);
    let content_type = AGGREGATED_V2.replace("v=v2;", &format!("v={};", s.aggregated_version));
    h.insert(header::CONTENT_TYPE, HeaderValue::from_str(&content_type).unwrap_or(HeaderValue::from_static(AGGREGATED_V2)));
    (StatusCode::OK, h, doc.body.clone()).into_response()
}

fn unauthorized() -> Response {
    json_response(StatusCode::UNAUTHORIZED, &status_json(401, "Unauthorized", "Unauthorized"))
}

async fn handle(State(s): State<FakeState>, req: Request) -> Response {
    let docs = s.docs();
    let path = req.uri().path().to_string();
    let health = matches!(path.as_str(), "/healthz" | "/readyz" | "/livez");
    let user = s.auth.authenticate(req.extensions().get::<super::auth::ConnInfo>(), req.headers());
    let user = match (user, health) {
        (Some(u), _) => u,
        (None, true) => return "ok".into_response(),
        (None, false) => return unauthorized(),
    };
    if req.headers().contains_key(header::UPGRADE) {
        return upgrade(&s, user, req).await;
    }
    let query = req.uri().query().unwrap_or("").to_string();
    let headers = req.headers().clone();
    let method = req.method().as_str().to_string();
    let agg = s.aggregated && wants_aggregated(&headers, &s.aggregated_version);
    let trimmed = path.trim_end_matches('/');
    match trimmed {
        "/healthz" | "/readyz" | "/livez" => return "ok".into_response(),
        "/version" => {
            return json_response(
                StatusCode::OK,
                &json!({"major": "1", "minor": docs.minor(), "gitVersion": format!("{}.0-fake+{}", docs.release, s.name), "platform": "linux/amd64"}),
            );
        }
        "/api" if agg => return aggregated(&s, &headers, &docs.api, false),
        "/apis" if agg => return aggregated(&s, &headers, &docs.apis, true),
        "/api" => {
            return json_response(
                StatusCode::OK,
                &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": s.name}]}),
            );
        }
        "/apis" => return json_response(StatusCode::OK, &with_listed_only(&docs.group_list, &s.listed_only)),
        "/api/v1" => return json_response(StatusCode::OK, &docs.api_v1),
        _ => {}
    }
    let parts: Vec<&str> = trimmed.trim_start_matches('/').split('/').collect();
    // /apis/{g} and /apis/{g}/{v}: unaggregated per-group documents.
    if parts.first() == Some(&"apis") && (parts.len() == 2 || parts.len() == 3) {
        let group = parts[1];
        if parts.len() == 3 {
            return match docs.group_versions.get(&format!("{group}/{}", parts[2])) {
                Some(list) => json_response(StatusCode::OK, list),
                None => not_found(),
            };
        }
        return match docs.group_list["groups"].as_array().into_iter().flatten().find(|g| g["name"] == group) {
            Some(g) => json_response(StatusCode::OK, &json!({"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": g["versions"], "preferredVersion": g["preferredVersion"]})),
            None => not_found(),
        };
    }
    match parse_resource_path(&parts) {
        Some(p) => resource(&s, &docs, p, &method, &query, &headers, &path, &user).await,
        None => not_found(),
    }
}

/// exec, attach and port-forward: the first message (WebSocket) or line
/// (any other upgrade, e.g. SPDY/3.1) names the server, the path and the
/// authenticated user; then everything the client sends is echoed back.
async fn upgrade(s: &FakeState, user: super::auth::UserInfo, mut req: Request) -> Response {
    let path = req.uri().path().to_string();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let sub = parse_resource_path(&parts).map(|p| p.subresource.to_string()).unwrap_or_default();
    if !matches!(sub.as_str(), "exec" | "attach" | "portforward") {
        return (StatusCode::BAD_REQUEST, "upgrade only on exec, attach, portforward\n").into_response();
    }
    let hello = json!({"server": s.name, "path": path, "user": user, "headers": echo_headers(req.headers())}).to_string();
    let is_websocket = req.headers().get(header::UPGRADE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if is_websocket {
        use axum::extract::FromRequest;
        use axum::extract::ws::{Message, WebSocketUpgrade};
        let Ok(ws) = WebSocketUpgrade::from_request(req, &()).await else {
            return (StatusCode::BAD_REQUEST, "bad websocket request\n").into_response();
        };
        return ws
            .protocols(["v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io"])
            .on_upgrade(move |mut socket| async move {
                if socket.send(Message::Text(hello.into())).await.is_err() {
                    return;
                }
                while let Some(Ok(m)) = socket.recv().await {
                    if matches!(m, Message::Close(_)) || socket.send(m).await.is_err() {
                        break;
                    }
                }
            });
    }
    let protocol = req.headers().get(header::UPGRADE).cloned().unwrap_or(HeaderValue::from_static("SPDY/3.1"));
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Ok(upgraded) = on_upgrade.await else { return };
        let mut io = hyper_util::rt::TokioIo::new(upgraded);
        if io.write_all(format!("{hello}\n").as_bytes()).await.is_err() {
            return;
        }
        let mut buf = [0u8; 4096];
        while let Ok(n) = io.read(&mut buf).await {
            if n == 0 || io.write_all(buf.get(..n).unwrap_or_default()).await.is_err() {
                break;
            }
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, protocol)
        .body(Body::empty())
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn echo_headers(headers: &HeaderMap) -> BTreeMap<String, Vec<String>> {
    headers
        .keys()
        .map(|k| {
            let values = headers.get_all(k).iter().map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()).collect();
            (k.as_str().to_string(), values)
        })
        .collect()
}

fn with_listed_only(list: &Value, extra: &[String]) -> Value {
    let mut list = list.clone();
    for gv in extra {
        let Some((group, version)) = gv.split_once('/') else { continue };
        let entry = json!({"groupVersion": gv, "version": version});
        let groups = list["groups"].as_array_mut();
        let Some(groups) = groups else { continue };
        match groups.iter_mut().find(|g| g["name"] == group) {
            Some(g) => {
                if let Some(vs) = g["versions"].as_array_mut() {
                    vs.push(entry);
                }
            }
            None => groups.push(json!({"name": group, "versions": [entry.clone()], "preferredVersion": entry})),
        }
    }
    list
}

#[derive(Debug, Default)]
struct ResourcePath<'a> {
    group: &'a str,
    version: &'a str,
    namespace: &'a str,
    resource: &'a str,
    name: &'a str,
    subresource: &'a str,
    special_verb: &'a str,
}

/// Reads `/api/v1/...` and `/apis/g/v/...` the way the URL forms in the
/// Kubernetes API conventions describe them.
fn parse_resource_path<'a>(parts: &[&'a str]) -> Option<ResourcePath<'a>> {
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
async fn resource(
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
    let key = (p.group.to_string(), p.version.to_string(), p.resource.to_string());
    let Some(found) = docs.resources.get(&key) else {
        return not_found();
    };
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
        // would deliver the first event only at the end.
        let event = json!({"type": "ADDED", "object": {"apiVersion": api_version, "kind": kind, "metadata": {"name": "fake", "namespace": p.namespace, "resourceVersion": "1"}}, "servedBy": served});
        let bookmarks: u32 = query.split('&').find_map(|kv| kv.strip_prefix("bookmarks=")?.parse().ok()).unwrap_or(0);
        let mut first = serde_json::to_vec(&event).unwrap_or_default();
        first.push(b'\n');
        let kind = kind.clone();
        let stream = futures::stream::unfold(0u32, move |i| {
            let first = first.clone();
            let kind = kind.clone();
            async move {
                if i == 0 {
                    return Some((Ok::<_, std::io::Error>(Bytes::from(first)), 1));
                }
                if i > bookmarks {
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
        json_response(StatusCode::OK, &json!({"apiVersion": api_version, "kind": format!("{kind}List"), "metadata": {"resourceVersion": "1"}, "items": [], "servedBy": served}))
    } else {
        json_response(StatusCode::OK, &json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": if p.name.is_empty() { "fake" } else { p.name }, "namespace": p.namespace}, "servedBy": served}))
    };
    if let Ok(v) = HeaderValue::from_str(&s.name) {
        resp.headers_mut().insert("x-fake-apiserver", v);
    }
    resp
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
