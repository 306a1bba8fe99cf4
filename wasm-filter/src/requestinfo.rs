//! Classifies a request path the way kube-apiserver's RequestInfo resolver does
//! (`staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`), so the
//! front door and the apiserver behind it always agree on which
//! group/version/resource a request names.
//!
//! Works on bytes and borrows from the (percent-decoded) path: no allocation
//! unless the path holds a `%` escape, and nothing here can panic.

use std::borrow::Cow;

/// Path segments are compared as bytes: Go's `URL.Path` is a byte string after
/// decoding, and a non-UTF-8 segment must classify rather than fail.
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
    Discovery {
        group: Segment<'a>,
        version: Option<Segment<'a>>,
    },
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
    /// selector on a list (informational: routing never reads it).
    pub name: Cow<'a, [u8]>,
    pub subresource: Segment<'a>,
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
}

/// A request target split into its decoded path and raw query. Kept separate
/// from [`RequestInfo`] so the decoded bytes outlive the slices borrowed from
/// them.
pub struct Target<'a> {
    path: Cow<'a, [u8]>,
    query: &'a [u8],
}

impl<'a> Target<'a> {
    /// Splits `:path` at the first `?` and percent-decodes the path part,
    /// as Go's `url.URL.Path` does. An invalid escape is kept literally
    /// (Go would reject the request line; the apiserver answers it, not us).
    pub fn parse(raw: &'a [u8]) -> Target<'a> {
        let (path, query) = match raw.iter().position(|b| *b == b'?') {
            Some(i) => (raw.get(..i).unwrap_or(raw), raw.get(i + 1..).unwrap_or(b"")),
            None => (raw, &b""[..]),
        };
        Target {
            path: percent_decode(path),
            query,
        }
    }

    pub fn path(&self) -> &[u8] {
        &self.path
    }

    pub fn classify(&self, method: Method) -> RequestInfo<'_> {
        classify(method, &self.path, self.query)
    }

    pub fn query(&self) -> &[u8] {
        self.query
    }
}

fn percent_decode(input: &[u8]) -> Cow<'_, [u8]> {
    if !input.contains(&b'%') {
        return Cow::Borrowed(input);
    }
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while let Some(&b) = input.get(i) {
        if b == b'%'
            && let (Some(h), Some(l)) = (
                input.get(i + 1).and_then(|c| hex_val(*c)),
                input.get(i + 2).and_then(|c| hex_val(*c)),
            )
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(b);
        i += 1;
    }
    Cow::Owned(out)
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
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
        let mut s = Segments {
            parts: [b""; MAX_SEGMENTS],
            len: 0,
        };
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
        if i < self.len {
            self.parts.get(i).copied()
        } else {
            None
        }
    }
}

/// RequestInfo for `method` on `path` (already percent-decoded) with `query`.
pub fn classify<'a>(method: Method, path: &'a [u8], query: &'a [u8]) -> RequestInfo<'a> {
    let seg = Segments::split(path);
    // Capped at MAX_SEGMENTS, which is above every count RequestInfo compares.
    let total = seg.len;
    let (prefix, mut i) = match seg.get(0) {
        Some(p @ (b"api" | b"apis")) => (p, 1usize),
        _ => return RequestInfo::NonResource,
    };
    let group: Segment<'a> = if prefix == b"apis" {
        let Some(group) = seg.get(1) else {
            return RequestInfo::NonResource;
        };
        if total < 4 {
            return RequestInfo::Discovery {
                group,
                version: seg.get(2),
            };
        }
        i += 1;
        group
    } else {
        if total < 3 {
            return match seg.get(1) {
                Some(version) => RequestInfo::Discovery {
                    group: b"",
                    version: Some(version),
                },
                None => RequestInfo::NonResource,
            };
        }
        b""
    };
    let Some(version) = seg.get(i) else {
        return RequestInfo::NonResource;
    };
    i += 1;

    let mut verb = match seg.get(i) {
        Some(b"watch") => Some(Verb::Watch),
        Some(b"proxy") => Some(Verb::Proxy),
        _ => None,
    };
    if verb.is_some() {
        if seg.get(i + 1).is_none() {
            return RequestInfo::Invalid;
        }
        i += 1;
    }
    let method_verb = match method {
        Method::Post => Verb::Create,
        Method::Get | Method::Head => Verb::Get,
        Method::Put => Verb::Update,
        Method::Patch => Verb::Patch,
        Method::Delete => Verb::Delete,
        Method::Other => Verb::Other,
    };

    let mut namespace: Segment<'a> = b"";
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
    let subresource = match (verb, seg.get(i + 2)) {
        (Some(Verb::Proxy), _) | (_, None) => &b""[..],
        (_, Some(s)) => s,
    };

    let mut name = Cow::Borrowed(name);
    let verb = match verb.take().unwrap_or(method_verb) {
        Verb::Get if name.is_empty() => {
            let q = QueryInfo::parse(query);
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
        group,
        version,
        namespace,
        resource,
        name,
        subresource,
    })
}

/// The two list options RequestInfo reads from the query.
struct QueryInfo<'q> {
    watch: bool,
    name_from_field_selector: Option<Cow<'q, [u8]>>,
}

impl<'q> QueryInfo<'q> {
    fn parse(query: &'q [u8]) -> QueryInfo<'q> {
        let mut watch = None;
        let mut name = None;
        for pair in query.split(|b| *b == b'&') {
            let (k, v) = match pair.iter().position(|b| *b == b'=') {
                Some(i) => (pair.get(..i).unwrap_or(b""), pair.get(i + 1..).unwrap_or(b"")),
                None => (pair, &b""[..]),
            };
            let k = query_decode(k);
            let v = query_decode(v);
            match &*k {
                // First value wins, as with Go's url.Values; any value but
                // "0"/"false" (case-insensitive) means watch, even an empty one.
                b"watch" if watch.is_none() => {
                    watch = Some(!(&*v == b"0" || v.eq_ignore_ascii_case(b"false")));
                }
                b"fieldSelector" if name.is_none() => {
                    name = exact_name(v);
                }
                _ => {}
            }
        }
        QueryInfo {
            watch: watch.unwrap_or(false),
            name_from_field_selector: name,
        }
    }
}

/// Form-decoding of one query key or value (`+` is a space), as Go's
/// `url.ParseQuery`.
fn query_decode(v: &[u8]) -> Cow<'_, [u8]> {
    if v.contains(&b'+') {
        let spaced: Vec<u8> = v.iter().map(|b| if *b == b'+' { b' ' } else { *b }).collect();
        Cow::Owned(percent_decode(&spaced).into_owned())
    } else {
        percent_decode(v)
    }
}

/// `metadata.name=X` / `metadata.name==X` from a decoded field selector, if X
/// is a valid path segment name (`fields.RequiresExactMatch` +
/// `path.IsValidPathSegmentName`). Selectors with `\\` escapes are left alone:
/// the name is informational and never affects routing.
fn exact_name(selector: Cow<'_, [u8]>) -> Option<Cow<'_, [u8]>> {
    let (start, end) = {
        let s: &[u8] = &selector;
        let mut offset = 0;
        let mut found = None;
        for term in s.split(|b| *b == b',') {
            let here = offset;
            offset += term.len() + 1;
            let Some(rest) = term.strip_prefix(b"metadata.name") else {
                continue;
            };
            let op = if rest.starts_with(b"==") {
                2
            } else if rest.starts_with(b"=") {
                1
            } else {
                continue;
            };
            let value = rest.get(op..).unwrap_or(b"");
            let valid = !value.is_empty()
                && value != b"."
                && value != b".."
                && !value.iter().any(|b| matches!(b, b'/' | b'%' | b'\\'));
            if valid {
                let start = here + b"metadata.name".len() + op;
                found = Some((start, start + value.len()));
            }
            break;
        }
        found?
    };
    match selector {
        Cow::Borrowed(b) => b.get(start..end).map(Cow::Borrowed),
        Cow::Owned(o) => o.get(start..end).map(|v| Cow::Owned(v.to_vec())),
    }
}

#[cfg(test)]
#[path = "requestinfo_tests.rs"]
mod tests;
