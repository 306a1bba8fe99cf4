//! Classifies a request path the way kube-apiserver's RequestInfo resolver
//! does (`staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`),
//! so the front door and the apiserver behind it always agree on which
//! group/version/resource a request names.
//!
//! The URL forms, as requestinfo.go lists them (`/apis/{group}/{version}`
//! stands wherever `/api/{version}` does; the core group is `""`):
//!
//! ```text
//! Resource paths
//!   /api/{version}/namespaces
//!   /api/{version}/namespaces/{namespace}
//!   /api/{version}/namespaces/{namespace}/{resource}
//!   /api/{version}/namespaces/{namespace}/{resource}/{name}
//!   /api/{version}/namespaces/{namespace}/{resource}/{name}/{subresource}
//!   /api/{version}/{resource}
//!   /api/{version}/{resource}/{name}
//!   /api/{version}/{resource}/{name}/{subresource}
//!   (`namespaces/{ns}/status` and `namespaces/{ns}/finalize` are the
//!   namespace's own subresources, not a namespaced resource)
//! Special verbs without subresources
//!   /api/{version}/proxy/{resource}/{name}
//!   /api/{version}/proxy/namespaces/{namespace}/{resource}/{name}
//! Special verbs with subresources
//!   /api/{version}/watch/{resource}
//!   /api/{version}/watch/namespaces/{namespace}/{resource}
//! Non-resource paths
//!   /apis/{group}/{version}, /apis/{group}, /api/{version}  (routed: `Discovery`)
//!   /apis, /api, /healthz, /version, /openapi/…, /            (`NonResource`)
//!   /openapi/v3, /openapi/v3/{key}   (not RequestInfo's: routed as `OpenApiV3`)
//! ```
//!
//! The verb comes from the method, a `watch`/`proxy` prefix, and on a
//! collection GET the `watch` query parameter; a list's `fieldSelector`
//! `metadata.name` names the object. Routing never needs those, so
//! [`route_key`] stops after the segment walk: no method, no query.
//!
//! Works on bytes and borrows from the decoded path; nothing here can panic.

use std::borrow::Cow;

use crate::list_options::ListOptions;
use crate::urlpath::DecodedPath;

/// Path segments are compared as bytes: Go's `URL.Path` is a byte string
/// after decoding, and a non-UTF-8 segment must classify rather than fail.
pub type Segment<'a> = &'a [u8];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
    Proxy,
    /// Methods kube-apiserver maps to the empty verb (OPTIONS, CONNECT, …).
    Other,
}

/// What a request asks for. `Resource` mirrors RequestInfo with
/// `IsResourceRequest = true`; `Discovery` is the non-resource
/// `/api/{v}`, `/apis/{g}` and `/apis/{g}/{v}` forms that the front door also
/// routes (kube answers 404 there for group-versions only a peer serves).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestInfo<'a> {
    Resource(ResourceRequest<'a>),
    Discovery { group: Segment<'a>, version: Option<Segment<'a>> },
    /// `/api`, `/apis`, `/healthz`, `/version`, `/openapi/…`, … — never rerouted.
    NonResource,
    /// kube-apiserver fails these in its RequestInfo filter (HTTP 500), e.g.
    /// `/api/v1/watch` with nothing after the verb. The front door leaves them
    /// to the apiserver so the client sees kube's own error.
    Invalid,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRequest<'a> {
    pub verb: Verb,
    /// `b""` for the legacy core group under `/api`.
    pub group: Segment<'a>,
    pub version: Segment<'a>,
    pub namespace: Segment<'a>,
    pub resource: Segment<'a>,
    /// Borrowed from the path, or decoded from a `metadata.name` field
    /// selector on a list.
    pub name: Cow<'a, [u8]>,
    pub subresource: Segment<'a>,
}

/// What routing reads of a request: RequestInfo's group, version, resource
/// and subresource, or the unaggregated discovery document it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteKey<'a> {
    Resource { group: Segment<'a>, version: Segment<'a>, resource: Segment<'a>, subresource: Segment<'a> },
    Discovery { group: Segment<'a>, version: Option<Segment<'a>> },
    /// `/openapi/v3` (key `""`) and `/openapi/v3/{key}` — kube-openapi's
    /// index and its documents (`apis/apps/v1`, `api/v1`, `version`, …),
    /// keyed exactly as the index lists them.
    OpenApiV3 { key: Segment<'a> },
    /// Non-resource and invalid requests: never rerouted.
    None,
}

impl RouteKey<'_> {
    /// A short name for logs: `apps/v1/deployments/scale`, `v1/pods`,
    /// `apis/batch/v1` (a discovery document), `openapi/v3/apis/apps/v1`.
    pub fn label(&self) -> String {
        let mut out = Vec::new();
        self.write_label(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// [`RouteKey::label`] appended to `out` as the path's bytes: no
    /// allocation once `out` has grown (the filter reuses one buffer).
    pub fn write_label(&self, out: &mut Vec<u8>) {
        let mut put = |parts: &[&[u8]]| {
            for (i, p) in parts.iter().enumerate() {
                if i > 0 {
                    out.push(b'/');
                }
                out.extend_from_slice(p);
            }
        };
        match *self {
            RouteKey::Resource { group: b"", version, resource, subresource: b"" } => put(&[version, resource]),
            RouteKey::Resource { group: b"", version, resource, subresource } => put(&[version, resource, subresource]),
            RouteKey::Resource { group, version, resource, subresource: b"" } => put(&[group, version, resource]),
            RouteKey::Resource { group, version, resource, subresource } => put(&[group, version, resource, subresource]),
            RouteKey::Discovery { group: b"", version: Some(v) } => put(&[b"api", v]),
            RouteKey::Discovery { group, version: Some(v) } => put(&[b"apis", group, v]),
            RouteKey::Discovery { group, version: None } => put(&[b"apis", group]),
            RouteKey::OpenApiV3 { key: b"" } => put(&[b"openapi/v3"]),
            RouteKey::OpenApiV3 { key } => put(&[b"openapi/v3", key]),
            RouteKey::None => {}
        }
    }
}

/// The HTTP method, reduced to what RequestInfo distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Patch,
    Delete,
    Other,
}

impl Method {
    pub fn from_bytes(m: &[u8]) -> Method {
        match m {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"POST" => Method::Post,
            b"PUT" => Method::Put,
            b"PATCH" => Method::Patch,
            b"DELETE" => Method::Delete,
            _ => Method::Other,
        }
    }

    fn verb(self) -> Verb {
        match self {
            Method::Post => Verb::Create,
            Method::Get | Method::Head => Verb::Get,
            Method::Put => Verb::Update,
            Method::Patch => Verb::Patch,
            Method::Delete => Verb::Delete,
            Method::Other => Verb::Other,
        }
    }
}

/// The routing key of a request: the segment walk only.
pub fn route_key<'a>(path: &'a DecodedPath<'_>) -> RouteKey<'a> {
    route_key_and_long_running(path).0
}

/// [`route_key`], and whether kube-apiserver counts the request as
/// long-running — its `BasicLongRunningRequestCheck`: the verbs watch and
/// proxy, the subresources attach, exec, proxy, log and portforward, and
/// the profiler (a non-resource path under `/debug/pprof/`) — so
/// that no request timeout applies to it; from one segment walk, what the
/// filter asks of every request. Read without the method: a collection path
/// with `watch` set is a watch only for GET in kube; another method with it
/// is exempt here from the front door's timeout, and nothing else. The query
/// is read only for a collection (a name-less resource path) whose query
/// mentions `watch`.
pub fn route_key_and_long_running<'a>(path: &'a DecodedPath<'_>) -> (RouteKey<'a>, bool) {
    if let Some(rest) = path.path().strip_prefix(b"/openapi/v3")
        && (rest.is_empty() || rest.starts_with(b"/"))
    {
        // kube-openapi's handler3 takes everything after `/openapi/v3/` as
        // the key (`strings.SplitAfterN(path, "/", 4)[3]`).
        return (RouteKey::OpenApiV3 { key: rest.strip_prefix(b"/").unwrap_or(rest) }, false);
    }
    match walk(path.path()) {
        Walked::Resource(w) => {
            let long_running = long_running_subresource(w.subresource)
                || matches!(w.prefix_verb, Some(Verb::Watch | Verb::Proxy))
                || (w.name.is_empty() && watch_query(path.query()));
            (RouteKey::Resource { group: w.group, version: w.version, resource: w.resource, subresource: w.subresource }, long_running)
        }
        Walked::Discovery { group, version } => (RouteKey::Discovery { group, version }, false),
        Walked::NonResource => (RouteKey::None, path.path().starts_with(PROFILER)),
        Walked::Invalid => (RouteKey::None, false),
    }
}

/// kube's long-running non-resource prefix: a CPU profile runs for its
/// `seconds`.
const PROFILER: &[u8] = b"/debug/pprof/";

/// The subresources kube counts as long-running whatever the verb.
fn long_running_subresource(subresource: &[u8]) -> bool {
    matches!(subresource, b"attach" | b"exec" | b"proxy" | b"log" | b"portforward")
}

/// Whether a collection request's query sets `watch` (parsed only when the
/// bytes mention it).
fn watch_query(q: &[u8]) -> bool {
    q.windows(5).any(|w| w == b"watch") && ListOptions::parse(q).watch
}

/// Full RequestInfo for `method` on `path`.
pub fn classify<'a>(method: Method, path: &'a DecodedPath<'_>) -> RequestInfo<'a> {
    let w = match walk(path.path()) {
        Walked::Resource(w) => w,
        Walked::Discovery { group, version } => return RequestInfo::Discovery { group, version },
        Walked::NonResource => return RequestInfo::NonResource,
        Walked::Invalid => return RequestInfo::Invalid,
    };
    let mut name = Cow::Borrowed(w.name);
    let verb = match w.prefix_verb.unwrap_or(method.verb()) {
        Verb::Get if name.is_empty() => {
            let q = ListOptions::parse(path.query());
            if let Some(n) = q.name_from_field_selector {
                name = n;
            }
            if q.watch { Verb::Watch } else { Verb::List }
        }
        Verb::Delete if name.is_empty() => Verb::DeleteCollection,
        v => v,
    };
    RequestInfo::Resource(ResourceRequest {
        verb,
        group: w.group,
        version: w.version,
        namespace: w.namespace,
        resource: w.resource,
        name,
        subresource: w.subresource,
    })
}

impl<'a> DecodedPath<'a> {
    pub fn classify(&self, method: Method) -> RequestInfo<'_> {
        classify(method, self)
    }
}

/// Up to this many segments are looked at; RequestInfo never reads past the
/// ninth (`apis/g/v/watch/namespaces/ns/r/name/sub`), so a pathological path of
/// thousands of segments costs no more than a normal one.
const MAX_SEGMENTS: usize = 10;

struct Segments<'a> {
    parts: [Segment<'a>; MAX_SEGMENTS],
    len: usize,
}

impl<'a> Segments<'a> {
    /// `strings.Split(strings.Trim(path, "/"), "/")`, keeping empty segments
    /// between repeated slashes exactly like Go.
    fn split(path: &'a [u8]) -> Segments<'a> {
        let start = path.iter().position(|b| *b != b'/').unwrap_or(path.len());
        let end = path.iter().rposition(|b| *b != b'/').map_or(start, |e| e + 1);
        let trimmed = path.get(start..end).unwrap_or(b"");
        let mut s = Segments { parts: [b""; MAX_SEGMENTS], len: 0 };
        if trimmed.is_empty() {
            return s;
        }
        for (slot, part) in s.parts.iter_mut().zip(trimmed.split(|b| *b == b'/')) {
            *slot = part;
            s.len += 1;
        }
        s
    }

    fn get(&self, i: usize) -> Option<Segment<'a>> {
        if i < self.len { self.parts.get(i).copied() } else { None }
    }
}

/// A resource path's parts, before the method and query decide the verb.
struct Walk<'a> {
    /// `watch` or `proxy` before the resource.
    prefix_verb: Option<Verb>,
    group: Segment<'a>,
    version: Segment<'a>,
    namespace: Segment<'a>,
    resource: Segment<'a>,
    name: Segment<'a>,
    subresource: Segment<'a>,
}

enum Walked<'a> {
    Resource(Walk<'a>),
    Discovery { group: Segment<'a>, version: Option<Segment<'a>> },
    NonResource,
    Invalid,
}

/// The segment walk of requestinfo.go's `NewRequestInfo`.
fn walk(path: &[u8]) -> Walked<'_> {
    let seg = Segments::split(path);
    // Capped at MAX_SEGMENTS, which is above every count RequestInfo compares.
    let total = seg.len;
    let (prefix, mut i) = match seg.get(0) {
        Some(p @ (b"api" | b"apis")) => (p, 1usize),
        _ => return Walked::NonResource,
    };
    let group = if prefix == b"apis" {
        let Some(group) = seg.get(1) else {
            return Walked::NonResource;
        };
        if total < 4 {
            return Walked::Discovery { group, version: seg.get(2) };
        }
        i += 1;
        group
    } else {
        if total < 3 {
            return match seg.get(1) {
                Some(version) => Walked::Discovery { group: b"", version: Some(version) },
                None => Walked::NonResource,
            };
        }
        &b""[..]
    };
    let Some(version) = seg.get(i) else {
        return Walked::NonResource;
    };
    i += 1;

    let prefix_verb = match seg.get(i) {
        Some(b"watch") => Some(Verb::Watch),
        Some(b"proxy") => Some(Verb::Proxy),
        _ => None,
    };
    if prefix_verb.is_some() {
        if seg.get(i + 1).is_none() {
            return Walked::Invalid;
        }
        i += 1;
    }

    let mut namespace = &b""[..];
    if seg.get(i) == Some(b"namespaces")
        && let Some(ns) = seg.get(i + 1)
    {
        namespace = ns;
        if let Some(next) = seg.get(i + 2)
            && next != b"status"
            && next != b"finalize"
        {
            i += 2;
        }
    }

    let resource = seg.get(i).unwrap_or(b"");
    let name = seg.get(i + 1).unwrap_or(b"");
    let subresource = match (prefix_verb, seg.get(i + 2)) {
        (Some(Verb::Proxy), _) | (_, None) => &b""[..],
        (_, Some(s)) => s,
    };
    Walked::Resource(Walk { prefix_verb, group, version, namespace, resource, name, subresource })
}

#[cfg(test)]
#[path = "requestinfo_tests.rs"]
mod tests;
