//! Servers without aggregated discovery (before Kubernetes 1.26): `/api`,
//! `/apis` and every group-version's own `APIResourceList`, converted to the
//! aggregated form kube would serve.

use serde::Deserialize;

use super::aggregated::{DocumentError, Root, RootView, check_segment, parse, view_of_groups};
use super::{Discoverer, DiscoveryError, FetchError, Fetched};
use crate::apidiscovery::Str;
use crate::apidiscovery::{APIGroupDiscovery, ObjectMeta};
use crate::apidiscovery::{APIResourceDiscovery, APISubresourceDiscovery, APIVersionDiscovery, GroupVersionKind};

/// Unaggregated `APIVersions` (`/api`).
#[derive(Debug, Deserialize)]
pub struct ApiVersions {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub versions: Vec<String>,
}

/// Unaggregated `APIGroupList` (`/apis`).
#[derive(Debug, Deserialize)]
pub struct ApiGroupList {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub groups: Vec<ApiGroup>,
}

/// A list of another kind (an aggregated document under a wrong content
/// type, an error page) or an empty one is a broken answer — every
/// kube-apiserver serves `v1` and some groups — never "serves nothing":
/// that would drop the server's APIs and turn them into 404s.
fn check_list(kind: &str, want: &'static str, empty: bool) -> Result<(), DocumentError> {
    if kind != want {
        return Err(DocumentError::Invalid(format!("expected kind {want}, got kind {kind:?}")));
    }
    if empty {
        return Err(DocumentError::Invalid(format!("the {want} lists nothing; a kube-apiserver never serves nothing")));
    }
    Ok(())
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
    pub name: Str,
    #[serde(default)]
    pub singular_name: Str,
    #[serde(default)]
    pub namespaced: bool,
    #[serde(default)]
    pub group: Option<Str>,
    #[serde(default)]
    pub version: Option<Str>,
    #[serde(default)]
    pub kind: Str,
    #[serde(default)]
    pub verbs: Vec<Str>,
    #[serde(default)]
    pub short_names: Vec<Str>,
    #[serde(default)]
    pub categories: Vec<Str>,
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

/// Converts an unaggregated `APIResourceList` into the aggregated form,
/// as kube-apiserver's `ConvertGroupVersionIntoToDiscovery` does: entries
/// `parent/sub` become subresources of `parent`, in source order.
pub fn version_from_resource_list(version: &str, list: &ApiResourceList) -> APIVersionDiscovery {
    let mut resources: Vec<APIResourceDiscovery> = Vec::new();
    for r in list.resources.iter().filter(|r| !r.name.contains('/')) {
        resources.push(APIResourceDiscovery {
            resource: r.name.clone(),
            response_kind: Some(GroupVersionKind {
                group: r.group.clone().unwrap_or_default(),
                version: r.version.clone().unwrap_or_default(),
                kind: r.kind.clone(),
            }),
            scope: if r.namespaced { "Namespaced" } else { "Cluster" }.into(),
            singular_resource: r.singular_name.clone(),
            verbs: Some(r.verbs.clone()),
            short_names: r.short_names.clone(),
            categories: r.categories.clone(),
            subresources: vec![],
        });
    }
    for r in &list.resources {
        let Some((parent, sub)) = r.name.split_once('/') else { continue };
        let Some(p) = resources.iter_mut().find(|p| p.resource == parent) else { continue };
        p.subresources.push(APISubresourceDiscovery {
            subresource: sub.into(),
            response_kind: Some(GroupVersionKind {
                group: r.group.clone().unwrap_or_default(),
                version: r.version.clone().unwrap_or_default(),
                kind: r.kind.clone(),
            }),
            accepted_types: vec![],
            verbs: Some(r.verbs.clone()),
        });
    }
    APIVersionDiscovery { version: version.into(), resources, freshness: "Current".into() }
}

/// One old server's probe of a root: its view, and the group-versions
/// whose documents failed (kept from the previous probe, `Stale`).
pub(super) struct Probe {
    pub view: RootView,
    pub failing: Vec<(String, String)>,
}

/// What one group-version's document said.
enum Answer {
    Served(APIVersionDiscovery),
    NotServed,
    /// Its backend failed (an aggregated APIService down: kube-aggregator's
    /// 503), or its document is broken: one group-version, not the server.
    Failed(String),
}

impl Discoverer {
    /// Servers without aggregated discovery: every listed group-version's
    /// own document, converted to the aggregated form kube would serve.
    ///
    /// A group-version whose own document fails with an HTTP status or does
    /// not parse (metrics-server down behind its APIService, say) keeps
    /// what the previous probe read of it, marked `Stale` as kube's
    /// aggregated discovery marks it, and the rest of the read stands; a
    /// transport failure is the server's and fails the read. With `only`,
    /// the list being unchanged, just those group-versions are asked again
    /// and the others are taken from the previous probe.
    pub(super) async fn unaggregated(
        &self,
        client: &reqwest::Client,
        path: &str,
        root: Root,
        body: &[u8],
        only: Option<&[(String, String)]>,
    ) -> Result<Probe, DiscoveryError> {
        let doc_err = |path: &str| {
            let path = path.to_string();
            move |source| DiscoveryError::Document { path, source }
        };
        let mut groups: Vec<APIGroupDiscovery> = Vec::new();
        let listed: Vec<(String, String)> = match root {
            Root::Core => {
                let list = parse::<ApiVersions>("APIVersions", body).map_err(doc_err(path))?;
                check_list(&list.kind, "APIVersions", list.versions.is_empty()).map_err(doc_err(path))?;
                list.versions.into_iter().map(|v| (String::new(), v)).collect()
            }
            Root::Groups => {
                let list = parse::<ApiGroupList>("APIGroupList", body).map_err(doc_err(path))?;
                check_list(&list.kind, "APIGroupList", list.groups.is_empty()).map_err(doc_err(path))?;
                list.groups
                    .into_iter()
                    .flat_map(|g| {
                        let name = g.name;
                        g.versions.into_iter().map(move |v| (name.clone(), v.version))
                    })
                    .collect()
            }
        };
        // The list first (it keeps kube's group and version order), then
        // every other group-version any server listed or Kubernetes has
        // built in: the list alone is not the truth (see `known`).
        let mut group_versions = listed.clone();
        if root == Root::Groups {
            self.known.record(listed.iter().map(|(g, v)| (g.as_str(), v.as_str())));
            group_versions.extend(self.known.snapshot().into_iter().filter(|gv| !listed.contains(gv)));
        }
        let previous = self.probed.get(path).map(|p| p.view.clone());
        let before = |group: &str, version: &str| -> Option<APIVersionDiscovery> {
            let g = previous.as_ref()?.groups.iter().find(|g| g.name() == group)?;
            g.versions.iter().find(|v| v.version.as_str() == version).cloned()
        };
        let mut failing = Vec::new();
        for (group, version) in group_versions {
            let answer = match only {
                Some(only) if !only.contains(&(group.clone(), version.clone())) => before(&group, &version).map_or(Answer::NotServed, Answer::Served),
                _ => self.group_version(client, &group, &version).await?,
            };
            let v = match answer {
                Answer::Served(v) => v,
                Answer::NotServed => continue,
                // The core group has no previous groups to keep (and a
                // server whose core v1 fails is broken): the read fails.
                Answer::Failed(e) if root == Root::Core => {
                    return Err(DiscoveryError::Document { path: format!("/api/{version}"), source: super::aggregated::DocumentError::Invalid(e) });
                }
                Answer::Failed(e) => {
                    tracing::debug!(apiserver = %self.spec.name, group, version, error = %e, "group-version unavailable; keeping what was read of it before");
                    failing.push((group.clone(), version.clone()));
                    match before(&group, &version) {
                        Some(mut v) => {
                            v.freshness = "Stale".into();
                            v
                        }
                        None => continue,
                    }
                }
            };
            match groups.iter_mut().find(|g| g.name() == group) {
                Some(g) => g.versions.push(v),
                None => groups.push(APIGroupDiscovery { metadata: ObjectMeta { name: group.as_str().into() }, versions: vec![v] }),
            }
        }
        let view = view_of_groups(root, groups, previous.as_deref()).map_err(doc_err(path))?;
        Ok(Probe { view, failing })
    }

    /// One group-version's own document.
    async fn group_version(&self, client: &reqwest::Client, group: &str, version: &str) -> Result<Answer, DiscoveryError> {
        let gv_path = if group.is_empty() { format!("/api/{version}") } else { format!("/apis/{group}/{version}") };
        match self.get(client, &gv_path, "application/json", None).await {
            Ok(Fetched::Ok { body, .. }) => Ok(match resource_list(group, version, &body) {
                Ok(list) => Answer::Served(version_from_resource_list(version, &list)),
                Err(e) => Answer::Failed(format!("{gv_path}: {e}")),
            }),
            // Not served here, whatever a list says.
            Ok(Fetched::NotFound | Fetched::NotModified) => Ok(Answer::NotServed),
            Err(DiscoveryError::Fetch { source: FetchError::Status(status), .. }) => Ok(Answer::Failed(format!("{gv_path}: answered HTTP {status}"))),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apidiscovery::APIGroupDiscoveryList;
    use crate::discover::aggregated::capabilities_of;

    use crate::testdata::fixture;

    #[test]
    fn aggregated_and_unaggregated_agree_for_core() {
        // api.json was converted from api__v1.json the way kube does it; our
        // conversion back to aggregated form must give the same document.
        let agg: APIGroupDiscoveryList = parse("list", &fixture("v1.37", "api.json")).unwrap();
        let list = resource_list("", "v1", &fixture("v1.37", "api__v1.json")).unwrap();
        let converted = version_from_resource_list("v1", &list);
        assert_eq!(agg.items[0].versions[0], converted);
        let caps = capabilities_of(Root::Core, &agg.items).unwrap();
        assert!(caps.groups[""]["v1"]["pods"].contains("eviction"));
    }

    #[test]
    fn mismatched_group_version_is_rejected() {
        assert!(resource_list("apps", "v1", br#"{"groupVersion":"batch/v1","resources":[]}"#).is_err());
    }
}
