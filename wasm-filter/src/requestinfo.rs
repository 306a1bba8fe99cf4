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
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]
    use super::*;

    fn s(b: &[u8]) -> String {
        String::from_utf8_lossy(b).into_owned()
    }

    /// Renders like kube's test tables: verb, apiPrefix-less group/version,
    /// namespace, resource, name, subresource.
    fn render(method: &str, raw: &str) -> String {
        let t = Target::parse(raw.as_bytes());
        match t.classify(Method::from_bytes(method.as_bytes())) {
            RequestInfo::Resource(r) => format!(
                "{:?} g={} v={} ns={} r={} n={} sub={}",
                r.verb,
                s(r.group),
                s(r.version),
                s(r.namespace),
                s(r.resource),
                s(&r.name),
                s(r.subresource)
            ),
            RequestInfo::Discovery { group, version } => {
                format!("discovery g={} v={}", s(group), version.map(s).unwrap_or_default())
            }
            RequestInfo::NonResource => "non-resource".into(),
            RequestInfo::Invalid => "invalid".into(),
        }
    }

    // Cases follow requestinfo_test.go (TestGetAPIRequestInfo and
    // TestGetNonAPIRequestInfo) plus the MVP-relevant forms.
    #[test]
    fn table() {
        let cases: &[(&str, &str, &str)] = &[
            // resource-based
            ("GET", "/api/v1/namespaces", "List g= v=v1 ns= r=namespaces n= sub="),
            ("GET", "/api/v1/namespaces/other", "Get g= v=v1 ns=other r=namespaces n=other sub="),
            ("GET", "/api/v1/namespaces/other/pods", "List g= v=v1 ns=other r=pods n= sub="),
            ("GET", "/api/v1/namespaces/other/pods/foo", "Get g= v=v1 ns=other r=pods n=foo sub="),
            ("HEAD", "/api/v1/namespaces/other/pods/foo", "Get g= v=v1 ns=other r=pods n=foo sub="),
            ("GET", "/api/v1/pods", "List g= v=v1 ns= r=pods n= sub="),
            ("HEAD", "/api/v1/pods", "List g= v=v1 ns= r=pods n= sub="),
            ("GET", "/api/v1/namespaces/other/pods/foo", "Get g= v=v1 ns=other r=pods n=foo sub="),
            ("GET", "/api/v1/namespaces/other/pods", "List g= v=v1 ns=other r=pods n= sub="),
            // special verbs
            ("GET", "/api/v1/proxy/namespaces/other/pods/foo", "Proxy g= v=v1 ns=other r=pods n=foo sub="),
            ("GET", "/api/v1/proxy/namespaces/other/pods/foo/subpath/not/a/subresource", "Proxy g= v=v1 ns=other r=pods n=foo sub="),
            ("GET", "/api/v1/watch/pods", "Watch g= v=v1 ns= r=pods n= sub="),
            ("GET", "/api/v1/pods?watch=true", "Watch g= v=v1 ns= r=pods n= sub="),
            ("GET", "/api/v1/pods?watch=false", "List g= v=v1 ns= r=pods n= sub="),
            ("GET", "/api/v1/pods?watch=0", "List g= v=v1 ns= r=pods n= sub="),
            ("GET", "/api/v1/pods?watch=FALSE", "List g= v=v1 ns= r=pods n= sub="),
            ("GET", "/api/v1/pods?watch=", "Watch g= v=v1 ns= r=pods n= sub="),
            ("GET", "/api/v1/pods?watch=1&watch=false", "Watch g= v=v1 ns= r=pods n= sub="),
            ("GET", "/api/v1/watch/namespaces/other/pods", "Watch g= v=v1 ns=other r=pods n= sub="),
            ("GET", "/api/v1/namespaces/other/pods?watch=1", "Watch g= v=v1 ns=other r=pods n= sub="),
            // subresources
            ("GET", "/api/v1/namespaces/other/pods/foo/status", "Get g= v=v1 ns=other r=pods n=foo sub=status"),
            ("POST", "/api/v1/namespaces/other/pods/foo/exec", "Create g= v=v1 ns=other r=pods n=foo sub=exec"),
            ("GET", "/api/v1/namespaces/other/pods/foo/log", "Get g= v=v1 ns=other r=pods n=foo sub=log"),
            ("GET", "/api/v1/namespaces/other/pods/foo/proxy/subpath", "Get g= v=v1 ns=other r=pods n=foo sub=proxy"),
            ("PUT", "/api/v1/namespaces/other/finalize", "Update g= v=v1 ns=other r=namespaces n=other sub=finalize"),
            ("PUT", "/api/v1/namespaces/other/status", "Update g= v=v1 ns=other r=namespaces n=other sub=status"),
            // verb identification
            ("PATCH", "/api/v1/namespaces/other/pods/foo", "Patch g= v=v1 ns=other r=pods n=foo sub="),
            ("DELETE", "/api/v1/namespaces/other/pods/foo", "Delete g= v=v1 ns=other r=pods n=foo sub="),
            ("POST", "/api/v1/namespaces/other/pods", "Create g= v=v1 ns=other r=pods n= sub="),
            ("DELETE", "/api/v1/namespaces/other/pods", "DeleteCollection g= v=v1 ns=other r=pods n= sub="),
            ("OPTIONS", "/api/v1/namespaces/other/pods", "Other g= v=v1 ns=other r=pods n= sub="),
            // api group identification
            ("POST", "/apis/extensions/v1/namespaces/other/pods", "Create g=extensions v=v1 ns=other r=pods n= sub="),
            ("GET", "/apis/resource.k8s.io/v1beta1/resourceclaims", "List g=resource.k8s.io v=v1beta1 ns= r=resourceclaims n= sub="),
            ("GET", "/apis/apps/v1/namespaces/ns/deployments/d/scale", "Get g=apps v=v1 ns=ns r=deployments n=d sub=scale"),
            ("GET", "/apis/apps/v1/watch/namespaces/ns/deployments", "Watch g=apps v=v1 ns=ns r=deployments n= sub="),
            // more than one subresource segment: only the first counts
            ("GET", "/api/v1/namespaces/other/pods/foo/proxy/a/b", "Get g= v=v1 ns=other r=pods n=foo sub=proxy"),
            // field selector names a list
            ("GET", "/api/v1/namespaces/other/pods?fieldSelector=metadata.name%3Dfoo", "List g= v=v1 ns=other r=pods n=foo sub="),
            ("GET", "/api/v1/namespaces/other/pods?fieldSelector=metadata.name%3D%3Dfoo&watch=true", "Watch g= v=v1 ns=other r=pods n=foo sub="),
            ("GET", "/api/v1/namespaces/other/pods?fieldSelector=metadata.name%3Da%2Fb", "List g= v=v1 ns=other r=pods n= sub="),
            // trailing and repeated slashes, as Go splits them
            ("GET", "/api/v1/namespaces/other/pods/", "List g= v=v1 ns=other r=pods n= sub="),
            ("GET", "/api/v1//pods", "Get g= v=v1 ns= r= n=pods sub="),
            ("GET", "//api/v1/pods", "List g= v=v1 ns= r=pods n= sub="),
            // percent-encoding is decoded first, like Go's URL.Path
            ("GET", "/apis/apps/v1/namespaces/n%2Fx/deployments", "Get g=apps v=v1 ns=n r=x n=deployments sub="),
            ("GET", "/api/v1/namespaces/default/pods/my%2Dpod", "Get g= v=v1 ns=default r=pods n=my-pod sub="),
            ("GET", "/api/v1/namespaces/default/pods/%zz", "Get g= v=v1 ns=default r=pods n=%zz sub="),
            // discovery forms the front door routes
            ("GET", "/apis/apps", "discovery g=apps v="),
            ("GET", "/apis/apps/v1", "discovery g=apps v=v1"),
            ("GET", "/apis/apps/v1/", "discovery g=apps v=v1"),
            ("GET", "/api/v1", "discovery g= v=v1"),
            // non-resource
            ("GET", "/", "non-resource"),
            ("GET", "/api", "non-resource"),
            ("GET", "/apis", "non-resource"),
            ("GET", "/apis/", "non-resource"),
            ("GET", "/healthz", "non-resource"),
            ("GET", "/version", "non-resource"),
            ("GET", "/openapi/v3/apis/apps/v1", "non-resource"),
            ("GET", "/metrics", "non-resource"),
            ("GET", "/other/api/v1/pods", "non-resource"),
            ("GET", "/apisx/apps/v1/deployments", "non-resource"),
            // errors kube's RequestInfo filter rejects
            ("GET", "/api/v1/watch", "invalid"),
            ("GET", "/apis/apps/v1/proxy", "invalid"),
            ("GET", "/apis/apps/v1/watch/", "invalid"),
        ];
        for (method, path, want) in cases {
            assert_eq!(render(method, path), *want, "{method} {path}");
        }
    }

    #[test]
    fn field_selector_name_is_recognised() {
        let n = |s: &'static [u8]| exact_name(Cow::Borrowed(s)).map(|c| c.into_owned());
        assert_eq!(n(b"metadata.name=foo"), Some(b"foo".to_vec()));
        assert_eq!(n(b"spec.x=1,metadata.name==foo"), Some(b"foo".to_vec()));
        assert_eq!(n(b"metadata.name!=foo"), None);
        assert_eq!(n(b"metadata.name=.."), None);
        assert_eq!(n(b"metadata.name=a/b"), None);
    }

    #[test]
    fn non_utf8_segments_classify() {
        let raw = b"/apis/\xff\xfe/v1/things/\x80";
        let t = Target::parse(raw);
        match t.classify(Method::Get) {
            RequestInfo::Resource(r) => {
                assert_eq!(r.group, b"\xff\xfe");
                assert_eq!(r.resource, b"things");
                assert_eq!(&*r.name, b"\x80");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn huge_paths_are_cheap_and_safe() {
        let mut p = b"/apis/apps/v1/namespaces/ns/deployments/d/scale".to_vec();
        for _ in 0..100_000 {
            p.extend_from_slice(b"/x");
        }
        let t = Target::parse(&p);
        match t.classify(Method::Get) {
            RequestInfo::Resource(r) => assert_eq!(r.subresource, b"scale"),
            other => panic!("{other:?}"),
        }
        let slashes = vec![b'/'; 1 << 20];
        assert_eq!(Target::parse(&slashes).classify(Method::Get), RequestInfo::NonResource);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]
        #[test]
        fn never_panics_on_arbitrary_bytes(raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let t = Target::parse(&raw);
            let _ = t.classify(Method::Get);
            let _ = t.classify(Method::Delete);
        }

        #[test]
        fn never_panics_on_path_like_input(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just("api".to_string()),
                    proptest::strategy::Just("apis".to_string()),
                    proptest::strategy::Just("namespaces".to_string()),
                    proptest::strategy::Just("watch".to_string()),
                    proptest::strategy::Just("proxy".to_string()),
                    proptest::strategy::Just("status".to_string()),
                    proptest::strategy::Just("..".to_string()),
                    proptest::strategy::Just("".to_string()),
                    proptest::strategy::Just("%2F".to_string()),
                    proptest::strategy::Just("%".to_string()),
                    "[a-z0-9.%?=&-]{0,12}",
                ],
                0..14,
            )
        ) {
            let raw = format!("/{}", parts.join("/"));
            let t = Target::parse(raw.as_bytes());
            for m in [Method::Get, Method::Post, Method::Delete, Method::Other] {
                if let RequestInfo::Resource(r) = t.classify(m) {
                    // Every field borrows from the decoded path.
                    for f in [r.group, r.version, r.resource, r.subresource] {
                        proptest::prop_assert!(f.is_empty() || t.path().windows(f.len()).any(|w| w == f));
                    }
                }
            }
        }
    }
}
