//! What the fixtures' releases serve, for tests that walk every API.

use anyhow::Result;

use super::tools::fixtures_dir;

/// Union of everything three releases serve, from the fixtures: for every
/// group/version/resource, which releases serve it, its scope and its
/// subresources per release.
#[derive(Debug, Clone)]
pub struct ServedResource {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub namespaced: bool,
    /// release → subresources that release serves for it.
    pub by_release: std::collections::BTreeMap<String, Vec<String>>,
}

pub fn served_resources(releases: &[&str]) -> Result<Vec<ServedResource>> {
    let mut out: std::collections::BTreeMap<(String, String, String), ServedResource> = Default::default();
    for release in releases {
        let docs = crate::fake::fixtures::Documents::load(&fixtures_dir(), release)?;
        for ((group, version, resource), r) in docs.resources {
            let key = (group.clone(), version.clone(), resource.clone());
            let e = out.entry(key).or_insert_with(|| ServedResource {
                group,
                version,
                resource,
                namespaced: r.namespaced,
                by_release: Default::default(),
            });
            e.by_release.insert(release.to_string(), r.subresources.into_iter().collect());
        }
    }
    Ok(out.into_values().collect())
}

impl ServedResource {
    pub fn prefix(&self) -> String {
        if self.group.is_empty() { format!("/api/{}", self.version) } else { format!("/apis/{}/{}", self.group, self.version) }
    }

    pub fn releases_serving_subresource(&self, sub: &str) -> Vec<String> {
        self.by_release.iter().filter(|(_, subs)| subs.iter().any(|s| s == sub)).map(|(r, _)| r.clone()).collect()
    }

    pub fn all_subresources(&self) -> std::collections::BTreeSet<String> {
        self.by_release.values().flatten().cloned().collect()
    }
}
