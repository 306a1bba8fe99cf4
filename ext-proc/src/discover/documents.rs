//! The discovery documents we read, reduced to the names routing needs.
//! Unknown fields are ignored, as Kubernetes clients do.

use serde::Deserialize;

use super::capabilities::Capabilities;

use crate::apidiscovery::{APIGroupDiscovery, APIGroupDiscoveryList};

pub const AGGREGATED_KIND: &str = "APIGroupDiscoveryList";

/// Unaggregated `APIVersions` (`/api`).
#[derive(Debug, Deserialize)]
pub struct ApiVersions {
    #[serde(default)]
    pub versions: Vec<String>,
}

/// Unaggregated `APIGroupList` (`/apis`).
#[derive(Debug, Deserialize)]
pub struct ApiGroupList {
    #[serde(default)]
    pub groups: Vec<ApiGroup>,
}

#[derive(Debug, Deserialize)]
pub struct ApiGroup {
    pub name: String,
    #[serde(default)]
    pub versions: Vec<GroupVersionForDiscovery>,
}

#[derive(Debug, Deserialize)]
pub struct GroupVersionForDiscovery {
    pub version: String,
}

/// Unaggregated `APIResourceList` (`/api/{v}`, `/apis/{g}/{v}`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiResourceList {
    #[serde(default)]
    pub group_version: String,
    #[serde(default)]
    pub resources: Vec<ApiResource>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiResource {
    pub name: String,
    #[serde(default)]
    pub singular_name: String,
    #[serde(default)]
    pub namespaced: bool,
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub short_names: Vec<String>,
    #[serde(default)]
    pub categories: Vec<String>,
}

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
    pub groups: Vec<APIGroupDiscovery>,
}

/// An aggregated document served at `root`, validated.
pub fn from_aggregated(root: Root, body: &[u8]) -> Result<RootView, DocumentError> {
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
    Ok(RootView { capabilities, groups: if root == Root::Groups { groups } else { vec![] } })
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
                let subs = resources.entry(r.resource.clone()).or_default();
                for s in &r.subresources {
                    subs.insert(s.subresource.clone());
                }
            }
        }
    }
    Ok(caps)
}

/// Names become path segments and table keys: reject what no apiserver
/// would serve, so a broken document cannot poison the table.
fn check_segment(what: &str, s: &str) -> Result<(), DocumentError> {
    let ok = !s.is_empty() && s.len() <= 253 && !s.contains('/') && !s.chars().any(char::is_control);
    if ok {
        Ok(())
    } else {
        Err(DocumentError::Invalid(format!("{what} name {s:?} is not a valid path segment")))
    }
}

/// An unaggregated `APIResourceList` for `group`/`version`, validated.
pub fn resource_list(group: &str, version: &str, body: &[u8]) -> Result<ApiResourceList, DocumentError> {
    let list: ApiResourceList = parse("APIResourceList", body)?;
    let want = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    if !list.group_version.is_empty() && list.group_version != want {
        return Err(DocumentError::Invalid(format!(
            "APIResourceList for {want} says groupVersion {:?}",
            list.group_version
        )));
    }
    for r in &list.resources {
        let resource = r.name.split('/').next().unwrap_or_default();
        check_segment("resource", resource)?;
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(release: &str, file: &str) -> Vec<u8> {
        let p = format!("{}/../integration/fixtures/discovery/{release}/{file}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    #[test]
    fn real_fixtures_parse() {
        // Counts from the fixtures' README: group-versions and
        // resources+subresources per release (core counted separately).
        for (release, gvs) in [("v1.30", 33), ("v1.33", 34), ("v1.37", 35)] {
            let caps = from_aggregated(Root::Groups, &fixture(release, "apis.json")).unwrap().capabilities;
            let n: usize = caps.groups.values().map(|v| v.len()).sum();
            assert_eq!(n, gvs, "{release}");
            let core = from_aggregated(Root::Core, &fixture(release, "api.json")).unwrap().capabilities;
            assert!(core.groups[""]["v1"]["pods"].contains("status"));
        }
        let v137 = from_aggregated(Root::Groups, &fixture("v1.37", "apis.json")).unwrap().capabilities;
        assert!(v137.groups["lifecycle.k8s.io"]["v1alpha1"].contains_key("evictionrequests"));
        assert!(v137.groups["storage.k8s.io"]["v1"]["csinodes"].is_empty() || v137.groups["storage.k8s.io"]["v1"]["csinodes"].contains("status"));
    }

    #[test]
    fn aggregated_and_unaggregated_agree_for_core() {
        // api.json was converted from api__v1.json the way kube does it; our
        // conversion back to aggregated form must give the same document.
        let agg: APIGroupDiscoveryList = parse("list", &fixture("v1.37", "api.json")).unwrap();
        let list = resource_list("", "v1", &fixture("v1.37", "api__v1.json")).unwrap();
        let converted = crate::apidiscovery::version_from_resource_list("v1", &list);
        assert_eq!(agg.items[0].versions[0], converted);
        let caps = capabilities_of(Root::Core, &agg.items).unwrap();
        assert!(caps.groups[""]["v1"]["pods"].contains("eviction"));
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
            assert!(from_aggregated(Root::Groups, body).is_err(), "{why}");
        }
        assert!(resource_list("apps", "v1", br#"{"groupVersion":"batch/v1","resources":[]}"#).is_err());
    }
}
