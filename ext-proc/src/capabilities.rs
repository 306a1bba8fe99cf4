//! What one apiserver serves, as read from its own discovery.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// version → resource → subresources.
pub type Versions = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// group → version → resource → subresources. The core group is `""`.
/// Each group's part is shared: a server's view is its two roots' parts
/// together ([`Capabilities::merge`]), and copying a CRD-heavy cluster's
/// thousands of groups would keep every resource name twice.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Capabilities {
    pub groups: BTreeMap<String, Arc<Versions>>,
}

impl Capabilities {
    /// Records a group-version even when it lists no resources: it is served
    /// (its unaggregated document answers 200) and routes `/apis/{g}/{v}`.
    pub fn add_version(&mut self, group: &str, version: &str) -> &mut BTreeMap<String, BTreeSet<String>> {
        Arc::make_mut(self.groups.entry(group.to_string()).or_default()).entry(version.to_string()).or_default()
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

    /// Adds `other`'s groups: a group only one side has is shared, not copied.
    pub fn merge(&mut self, other: Capabilities) {
        for (g, versions) in other.groups {
            let mine = match self.groups.entry(g) {
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(versions);
                    continue;
                }
                std::collections::btree_map::Entry::Occupied(e) => Arc::make_mut(e.into_mut()),
            };
            for (v, resources) in Arc::unwrap_or_clone(versions) {
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
