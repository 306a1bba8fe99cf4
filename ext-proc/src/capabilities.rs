//! What one apiserver serves, as read from its own discovery.

use std::collections::{BTreeMap, BTreeSet};

/// group → version → resource → subresources. The core group is `""`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Capabilities {
    pub groups: BTreeMap<String, BTreeMap<String, BTreeMap<String, BTreeSet<String>>>>,
}

impl Capabilities {
    /// Records a group-version even when it lists no resources: it is served
    /// (its unaggregated document answers 200) and routes `/apis/{g}/{v}`.
    pub fn add_version(&mut self, group: &str, version: &str) -> &mut BTreeMap<String, BTreeSet<String>> {
        self.groups
            .entry(group.to_string())
            .or_default()
            .entry(version.to_string())
            .or_default()
    }

    /// Adds an unaggregated resource name: `pods` or `pods/status`.
    #[cfg(test)]
    pub fn add_resource_name(&mut self, group: &str, version: &str, name: &str) {
        let resources = self.add_version(group, version);
        match name.split_once('/') {
            Some((parent, sub)) => {
                resources.entry(parent.to_string()).or_default().insert(sub.to_string());
            }
            None => {
                resources.entry(name.to_string()).or_default();
            }
        }
    }

    pub fn merge(&mut self, other: Capabilities) {
        for (g, versions) in other.groups {
            let mine = self.groups.entry(g).or_default();
            for (v, resources) in versions {
                let mv = mine.entry(v).or_default();
                for (r, subs) in resources {
                    mv.entry(r).or_default().extend(subs);
                }
            }
        }
    }

    /// Number of group/version/resource triples.
    pub fn resource_count(&self) -> usize {
        self.groups.values().flat_map(|v| v.values()).map(|r| r.len()).sum()
    }
}
