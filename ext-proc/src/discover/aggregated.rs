//! Aggregated discovery documents (`/api`, `/apis` as
//! `APIGroupDiscoveryList`), validated and reduced to what routing needs.
//! Unknown fields are ignored, as Kubernetes clients do.

use std::collections::HashMap;
use std::collections::btree_map::Entry;
use std::sync::Arc;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::apidiscovery::{APIGroupDiscovery, SharedGroup};
use crate::discover::capabilities::{Capabilities, Versions};

pub const AGGREGATED_KIND: &str = "APIGroupDiscoveryList";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DocumentError {
    #[error("not valid JSON for {what}: {detail}")]
    Json { what: &'static str, detail: String },
    #[error("expected kind {AGGREGATED_KIND} of apidiscovery.k8s.io/v2 or v2beta1, got kind {kind:?} apiVersion {api_version:?}")]
    WrongKind { kind: String, api_version: String },
    #[error("{0}")]
    Invalid(String),
}

pub fn parse<'a, T: Deserialize<'a>>(what: &'static str, body: &'a [u8]) -> Result<T, DocumentError> {
    serde_json::from_slice(body).map_err(|e| DocumentError::Json { what, detail: e.to_string() })
}

/// Which part of the API an aggregated document covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Root {
    /// `/api`: the legacy core group, named `""`.
    Core,
    /// `/apis`: named groups only.
    Groups,
}

/// What one discovery root of one server says: the routing capabilities
/// and, for `/apis`, the groups as served (input to the peer-aggregated
/// merge; core is never merged).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RootView {
    pub capabilities: Capabilities,
    /// Shared with the [`super::ServerView`] built from it (one copy of a
    /// CRD-heavy list, not two), and each group with the next read's view
    /// while it stays the same (see [`Unchanged`]).
    pub groups: Arc<Vec<SharedGroup>>,
}

/// The previous read's groups by name, to share what did not change: the
/// merged document's builder recognises its inputs by address, so it
/// re-merges and re-encodes only the groups that changed (a CRD added to a
/// 3,000-group cluster re-encodes one group, not 3,000), and the memory of
/// an unchanged group is held once.
struct Unchanged<'a> {
    /// `None` for a name the previous read listed twice: never shared.
    before: HashMap<&'a str, Option<&'a SharedGroup>>,
    previous: Option<&'a RootView>,
}

impl<'a> Unchanged<'a> {
    fn of(previous: Option<&'a RootView>) -> Unchanged<'a> {
        let mut before = HashMap::new();
        for g in previous.iter().flat_map(|p| p.groups.iter()) {
            before.entry(g.name()).and_modify(|seen| *seen = None).or_insert(Some(g));
        }
        Unchanged { before, previous }
    }

    /// `g`, or the previous read's group when equal.
    fn share(&self, mut g: APIGroupDiscovery) -> SharedGroup {
        match self.before.get(g.name()) {
            Some(Some(old)) if ***old == g => Arc::clone(old),
            _ => {
                g.shrink();
                Arc::new(g)
            }
        }
    }

    /// The previous read's capabilities of `g`'s name when `g` is that
    /// read's group, unchanged.
    fn capabilities(&self, g: &SharedGroup) -> Option<&'a Arc<Versions>> {
        match self.before.get(g.name()) {
            Some(Some(old)) if Arc::ptr_eq(old, g) => self.previous?.capabilities.groups.get(g.name()),
            _ => None,
        }
    }
}

/// The view of `groups` read from `root` some other way than one aggregated
/// document (a server without aggregated discovery), sharing what did not
/// change since `previous` exactly as [`from_aggregated`] does.
pub fn view_of_groups(root: Root, groups: Vec<APIGroupDiscovery>, previous: Option<&RootView>) -> Result<RootView, DocumentError> {
    let unchanged = Unchanged::of(previous);
    let groups = groups.into_iter().map(|g| unchanged.share(g)).collect();
    view(root, groups, &unchanged)
}

/// The view of groups already shared with the previous read: routing
/// capabilities from each group, except that an unchanged group keeps the
/// previous read's (the same `Arc`), and, for `/apis`, the groups.
fn view(root: Root, groups: Vec<SharedGroup>, unchanged: &Unchanged) -> Result<RootView, DocumentError> {
    let mut capabilities = Capabilities::default();
    for g in &groups {
        if let Some(versions) = unchanged.capabilities(g)
            && let Entry::Vacant(e) = capabilities.groups.entry(g.name().to_string())
        {
            e.insert(versions.clone());
            continue;
        }
        add_group(&mut capabilities, root, g)?;
    }
    let groups = if root == Root::Groups { groups } else { vec![] };
    Ok(RootView { capabilities, groups: Arc::new(groups) })
}

/// An aggregated document served at `root`, validated; `previous`, the
/// last view of the same root, shares its unchanged groups.
///
/// Each group is shared or shrunk as soon as it is parsed, not after the
/// whole list: a CRD-heavy document whose groups mostly did not change
/// then never holds a second parsed copy beside the previous view (that
/// copy, 20 MB for 3,000 CRD groups, set the heap's high-water mark, and
/// glibc keeps such pages resident once small live allocations sit among
/// them). Unchanged groups keep their capabilities too.
pub fn from_aggregated(root: Root, body: &[u8], previous: Option<&RootView>) -> Result<RootView, DocumentError> {
    let unchanged = Unchanged::of(previous);
    let json_error = |e: serde_json::Error| DocumentError::Json { what: "APIGroupDiscoveryList", detail: e.to_string() };
    let mut de = serde_json::Deserializer::from_slice(body);
    let list = ListSeed { root, unchanged: &unchanged }.deserialize(&mut de).map_err(json_error)?;
    de.end().map_err(json_error)?;
    let version_ok = matches!(
        list.api_version.as_str(),
        "apidiscovery.k8s.io/v2" | "apidiscovery.k8s.io/v2beta1"
    );
    if list.kind != AGGREGATED_KIND || !version_ok {
        return Err(DocumentError::WrongKind { kind: list.kind, api_version: list.api_version });
    }
    view(root, list.items, &unchanged)
}

/// `APIGroupDiscoveryList` as [`from_aggregated`] reads it: the envelope's
/// kind and apiVersion, and the items shared or shrunk one by one.
#[derive(Default)]
struct Parsed {
    kind: String,
    api_version: String,
    items: Vec<SharedGroup>,
}

struct ListSeed<'a> {
    root: Root,
    unchanged: &'a Unchanged<'a>,
}

impl<'de> DeserializeSeed<'de> for ListSeed<'_> {
    type Value = Parsed;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Parsed, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ListSeed<'_> {
    type Value = Parsed;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an APIGroupDiscoveryList object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parsed, A::Error> {
        let mut out = Parsed::default();
        let mut seen = [false; 3];
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let field = match key.as_ref() {
                "kind" => 0,
                "apiVersion" => 1,
                "items" => 2,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            if std::mem::replace(&mut seen[field], true) {
                return Err(serde::de::Error::duplicate_field(["kind", "apiVersion", "items"][field]));
            }
            match field {
                0 => out.kind = map.next_value()?,
                1 => out.api_version = map.next_value()?,
                _ => out.items = map.next_value_seed(ItemsSeed { root: self.root, unchanged: self.unchanged })?,
            }
        }
        Ok(out)
    }
}

struct ItemsSeed<'a> {
    root: Root,
    unchanged: &'a Unchanged<'a>,
}

impl<'de> DeserializeSeed<'de> for ItemsSeed<'_> {
    type Value = Vec<SharedGroup>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<SharedGroup>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed<'_> {
    type Value = Vec<SharedGroup>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of APIGroupDiscovery")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<SharedGroup>, A::Error> {
        let mut items = Vec::new();
        while let Some(g) = seq.next_element::<APIGroupDiscovery>()? {
            // Core never appears under /apis; an unnamed item there is junk.
            if self.root == Root::Groups && g.name().is_empty() {
                continue;
            }
            items.push(self.unchanged.share(g));
        }
        items.shrink_to_fit();
        Ok(items)
    }
}

/// The routing view of aggregated groups; every name must be a usable path
/// segment, so a broken document cannot poison the table.
pub fn capabilities_of<'a>(root: Root, groups: impl IntoIterator<Item = &'a APIGroupDiscovery>) -> Result<Capabilities, DocumentError> {
    let mut caps = Capabilities::default();
    for g in groups {
        add_group(&mut caps, root, g)?;
    }
    Ok(caps)
}

fn add_group(caps: &mut Capabilities, root: Root, g: &APIGroupDiscovery) -> Result<(), DocumentError> {
    let group = if root == Root::Core { "" } else { g.name() };
    if !group.is_empty() {
        check_segment("group", group)?;
    }
    for v in &g.versions {
        check_segment("version", &v.version)?;
        let resources = caps.add_version(group, &v.version);
        for r in &v.resources {
            check_segment("resource", &r.resource)?;
            let subs = resources.entry(&r.resource);
            for s in &r.subresources {
                subs.insert(&s.subresource);
            }
        }
    }
    Ok(())
}

/// Names become path segments and table keys: reject what no apiserver
/// would serve, so a broken document cannot poison the table.
pub(super) fn check_segment(what: &str, s: &str) -> Result<(), DocumentError> {
    let ok = !s.is_empty() && s.len() <= 253 && !s.contains('/') && !s.chars().any(char::is_control);
    if ok {
        Ok(())
    } else {
        Err(DocumentError::Invalid(format!("{what} name {s:?} is not a valid path segment")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testdata::fixture;

    #[test]
    fn real_fixtures_parse() {
        // Counts from the fixtures' README: group-versions and
        // resources+subresources per release (core counted separately).
        for (release, gvs) in [("v1.30", 33), ("v1.33", 34), ("v1.37", 35)] {
            let caps = from_aggregated(Root::Groups, &fixture(release, "apis.json"), None).unwrap().capabilities;
            let n: usize = caps.groups.values().map(|v| v.len()).sum();
            assert_eq!(n, gvs, "{release}");
            let core = from_aggregated(Root::Core, &fixture(release, "api.json"), None).unwrap().capabilities;
            assert!(core.groups[""]["v1"]["pods"].contains("status"));
        }
        let v137 = from_aggregated(Root::Groups, &fixture("v1.37", "apis.json"), None).unwrap().capabilities;
        assert!(v137.groups["lifecycle.k8s.io"]["v1alpha1"].contains_key("evictionrequests"));
        assert!(v137.groups["storage.k8s.io"]["v1"]["csinodes"].is_empty() || v137.groups["storage.k8s.io"]["v1"]["csinodes"].contains("status"));
    }

    /// The groups of v1.33 with `extra` appended as a document.
    fn document(extra: &[serde_json::Value]) -> Vec<u8> {
        let mut doc: serde_json::Value = serde_json::from_slice(&fixture("v1.33", "apis.json")).unwrap();
        doc["items"].as_array_mut().unwrap().extend(extra.iter().cloned());
        serde_json::to_vec(&doc).unwrap()
    }

    fn crd(name: &str, resource: &str) -> serde_json::Value {
        serde_json::json!({"metadata": {"name": name}, "versions": [{"version": "v1", "resources": [
            {"resource": resource, "scope": "Namespaced", "verbs": ["get"], "subresources": [{"subresource": "status", "verbs": ["get"]}]}
        ]}]})
    }

    #[test]
    fn a_reread_shares_what_did_not_change() {
        let first = from_aggregated(Root::Groups, &document(&[crd("a.example.com", "as"), crd("b.example.com", "bs")]), None).unwrap();
        let body = document(&[crd("a.example.com", "as"), crd("b.example.com", "bs2"), crd("c.example.com", "cs")]);
        let second = from_aggregated(Root::Groups, &body, Some(&first)).unwrap();
        // Everything equals a read from scratch...
        assert_eq!(second, from_aggregated(Root::Groups, &body, None).unwrap());
        // ...and what did not change is the previous read's memory.
        let by_name = |v: &RootView, n: &str| v.groups.iter().find(|g| g.name() == n).unwrap().clone();
        assert!(Arc::ptr_eq(&by_name(&first, "apps"), &by_name(&second, "apps")));
        assert!(Arc::ptr_eq(&by_name(&first, "a.example.com"), &by_name(&second, "a.example.com")));
        assert!(!Arc::ptr_eq(&by_name(&first, "b.example.com"), &by_name(&second, "b.example.com")));
        let caps = |v: &RootView, n: &str| v.capabilities.groups[n].clone();
        assert!(Arc::ptr_eq(&caps(&first, "a.example.com"), &caps(&second, "a.example.com")));
        assert!(second.capabilities.groups["b.example.com"]["v1"].contains_key("bs2"));
        assert!(!second.capabilities.groups["b.example.com"]["v1"].contains_key("bs"));
        assert!(second.capabilities.groups["c.example.com"]["v1"]["cs"].contains("status"));
    }

    #[test]
    fn groups_read_one_by_one_share_like_a_document() {
        // A server without aggregated discovery: its groups come from one
        // document per group-version, then share exactly as a document's.
        let first = from_aggregated(Root::Groups, &document(&[crd("a.example.com", "as"), crd("b.example.com", "bs")]), None).unwrap();
        let body = document(&[crd("a.example.com", "as"), crd("b.example.com", "bs2")]);
        let list: crate::apidiscovery::APIGroupDiscoveryList = parse("list", &body).unwrap();
        let second = view_of_groups(Root::Groups, list.items, Some(&first)).unwrap();
        assert_eq!(second, from_aggregated(Root::Groups, &body, None).unwrap());
        let group = |v: &RootView, n: &str| v.groups.iter().find(|g| g.name() == n).unwrap().clone();
        let caps = |v: &RootView, n: &str| v.capabilities.groups[n].clone();
        assert!(Arc::ptr_eq(&group(&first, "a.example.com"), &group(&second, "a.example.com")));
        assert!(Arc::ptr_eq(&caps(&first, "a.example.com"), &caps(&second, "a.example.com")));
        assert!(!Arc::ptr_eq(&caps(&first, "b.example.com"), &caps(&second, "b.example.com")));
        // Core keeps no groups, only capabilities.
        let core: crate::apidiscovery::APIGroupDiscoveryList = parse("list", &fixture("v1.37", "api.json")).unwrap();
        let core = view_of_groups(Root::Core, core.items, None).unwrap();
        assert!(core.groups.is_empty());
        assert!(core.capabilities.groups[""]["v1"]["pods"].contains("status"));
    }

    #[test]
    fn a_name_listed_twice_is_read_whole_every_time() {
        // Both items' resources route; neither is taken from a previous
        // read that listed the name once (or twice).
        let once = from_aggregated(Root::Groups, &document(&[crd("a.example.com", "as")]), None).unwrap();
        let twice_body = document(&[crd("a.example.com", "as"), crd("a.example.com", "more")]);
        let twice = from_aggregated(Root::Groups, &twice_body, Some(&once)).unwrap();
        assert_eq!(twice, from_aggregated(Root::Groups, &twice_body, None).unwrap());
        assert!(twice.capabilities.groups["a.example.com"]["v1"].contains_key("more"));
        let back = from_aggregated(Root::Groups, &document(&[crd("a.example.com", "as")]), Some(&twice)).unwrap();
        assert_eq!(back, once);
        assert!(!back.capabilities.groups["a.example.com"]["v1"].contains_key("more"));
    }

    #[test]
    fn bad_envelopes() {
        let doc = |s: &str| from_aggregated(Root::Groups, s.as_bytes(), None);
        assert!(doc(r#"{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[]}"#).is_ok());
        for (body, why) in [
            (r#"{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[]} x"#, "trailing characters"),
            (r#"{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[],"items":[]}"#, "items twice"),
            (r#"{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":null}"#, "null items"),
            (r#"{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":{}}"#, "items not a list"),
        ] {
            assert!(matches!(doc(body), Err(DocumentError::Json { .. })), "{why}");
        }
    }

    #[test]
    fn bad_documents() {
        for (body, why) in [
            (&b"{"[..], "truncated"),
            (b"[]", "not an object"),
            (br#"{"kind":"APIGroupList","apiVersion":"v1","groups":[]}"#, "unaggregated"),
            (br#"{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v3","items":[]}"#, "unknown version"),
            (br#"{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"metadata":{"name":"a"},"versions":[{"version":"v1","resources":[{"resource":"x/y"}]}]}]}"#, "slash in resource"),
            (br#"{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"metadata":{"name":"a/b"},"versions":[{"version":"v1"}]}]}"#, "slash in group"),
            (br#"{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"metadata":{"name":"a"},"versions":[{"version":""}]}]}"#, "empty version"),
        ] {
            assert!(from_aggregated(Root::Groups, body, None).is_err(), "{why}");
        }
    }
}
