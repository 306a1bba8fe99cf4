//! Aggregated discovery documents (`/api`, `/apis` as
//! `APIGroupDiscoveryList`), validated and reduced to what routing needs.
//! Unknown fields are ignored, as Kubernetes clients do.

use std::sync::Arc;

use serde::Deserialize;

use crate::capabilities::Capabilities;

use crate::apidiscovery::{APIGroupDiscovery, APIGroupDiscoveryList, SharedGroup};

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
    /// while it stays the same (see [`share_unchanged`]).
    pub groups: Arc<Vec<SharedGroup>>,
}

/// The groups of a new read, each replaced by the previous read's group of
/// that name when equal: memory is shared, and the merged document's
/// builder, which recognises its inputs by address, re-merges and
/// re-encodes only the groups that changed (a CRD added to a 3,000-group
/// cluster re-encodes one group, not 3,000).
pub fn share_unchanged(groups: Vec<APIGroupDiscovery>, previous: Option<&RootView>) -> Vec<SharedGroup> {
    let before: std::collections::HashMap<&str, &SharedGroup> =
        previous.map(|p| p.groups.iter().map(|g| (g.name(), g)).collect()).unwrap_or_default();
    groups
        .into_iter()
        .map(|mut g| match before.get(g.name()) {
            Some(old) if ***old == g => Arc::clone(old),
            _ => {
                g.shrink();
                Arc::new(g)
            }
        })
        .collect()
}

/// An aggregated document served at `root`, validated; `previous`, the
/// last view of the same root, shares its unchanged groups.
pub fn from_aggregated(root: Root, body: &[u8], previous: Option<&RootView>) -> Result<RootView, DocumentError> {
    let list: APIGroupDiscoveryList = parse("APIGroupDiscoveryList", body)?;
    let version_ok = matches!(
        list.api_version.as_str(),
        "apidiscovery.k8s.io/v2" | "apidiscovery.k8s.io/v2beta1"
    );
    if list.kind != AGGREGATED_KIND || !version_ok {
        return Err(DocumentError::WrongKind { kind: list.kind, api_version: list.api_version });
    }
    let mut groups = list.items;
    if root == Root::Groups {
        // Core never appears under /apis; an unnamed item there is junk.
        groups.retain(|g| !g.name().is_empty());
    }
    let capabilities = capabilities_of(root, &groups)?;
    let groups = if root == Root::Groups { share_unchanged(groups, previous) } else { vec![] };
    Ok(RootView { capabilities, groups: Arc::new(groups) })
}

/// The routing view of aggregated groups; every name must be a usable path
/// segment, so a broken document cannot poison the table.
pub fn capabilities_of(root: Root, groups: &[APIGroupDiscovery]) -> Result<Capabilities, DocumentError> {
    let mut caps = Capabilities::default();
    for g in groups {
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
    }
    Ok(caps)
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
