//! What one apiserver serves, as read from its own discovery.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::apidiscovery::Str;

/// version → resource → subresources.
pub type Versions = SortedMap<Resources>;
/// resource → subresources.
pub type Resources = SortedMap<SortedSet>;

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
    pub fn add_version(&mut self, group: &str, version: &str) -> &mut Resources {
        Arc::make_mut(self.groups.entry(group.to_string()).or_default()).entry(version)
    }

    /// Adds an unaggregated resource name: `pods` or `pods/status`.
    #[cfg(test)]
    pub fn add_resource_name(&mut self, group: &str, version: &str, name: &str) {
        let resources = self.add_version(group, version);
        match name.split_once('/') {
            Some((parent, sub)) => resources.entry(parent).insert(sub),
            None => {
                resources.entry(name);
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
                let mv = mine.entry(&v);
                for (r, subs) in resources {
                    let mine = mv.entry(&r);
                    for s in subs.iter() {
                        mine.insert(s);
                    }
                }
            }
        }
    }

    /// Number of group/version/resource triples.
    pub fn resource_count(&self) -> usize {
        self.groups.values().flat_map(|v| v.values()).map(|r| r.len()).sum()
    }
}

/// A map from names kept as one sorted list. A CRD group's two versions of
/// two resources take a few hundred bytes this way; as `BTreeMap`s (a
/// ~540-byte node per map, however few entries) they took ~3 KB, 9 MB for
/// 3,000 CRD groups. Serialized as a map, like the `BTreeMap` it replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortedMap<V>(Vec<(Str, V)>);

impl<V> Default for SortedMap<V> {
    fn default() -> Self {
        SortedMap(Vec::new())
    }
}

impl<V> SortedMap<V> {
    fn find(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    /// The value of `key`, added (default) if missing.
    pub fn entry(&mut self, key: &str) -> &mut V
    where
        V: Default,
    {
        let at = match self.find(key) {
            Ok(at) => at,
            Err(at) => {
                self.0.insert(at, (key.into(), V::default()));
                at
            }
        };
        &mut self.0[at].1
    }

    pub fn get(&self, key: &str) -> Option<&V> {
        self.find(key).ok().map(|at| &self.0[at].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Str, &V)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &Str> {
        self.0.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<V> std::ops::Index<&str> for SortedMap<V> {
    type Output = V;

    /// Panics when `key` is missing, as `BTreeMap`'s does (tests).
    fn index(&self, key: &str) -> &V {
        match self.get(key) {
            Some(v) => v,
            None => panic!("no entry {key:?}"),
        }
    }
}

impl<V> IntoIterator for SortedMap<V> {
    type Item = (Str, V);
    type IntoIter = std::vec::IntoIter<(Str, V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<V: Serialize> Serialize for SortedMap<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for SortedMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(SortedMap(BTreeMap::<Str, V>::deserialize(d)?.into_iter().collect()))
    }
}

/// A set of names kept as one sorted list (see [`SortedMap`]); serialized
/// as a list, like the `BTreeSet` it replaces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SortedSet(Vec<Str>);

impl SortedSet {
    pub fn insert(&mut self, name: &str) {
        if let Err(at) = self.0.binary_search_by(|n| n.as_str().cmp(name)) {
            self.0.insert(at, name.into());
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.0.binary_search_by(|n| n.as_str().cmp(name)).is_ok()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Str> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for SortedSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for SortedSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(SortedSet(BTreeSet::<Str>::deserialize(d)?.into_iter().collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_map_and_set_serialize_as_the_btree_forms_they_replace() {
        let mut caps = Capabilities::default();
        for (g, v, r, sub) in [("apps", "v1", "deployments", Some("status")), ("", "v1", "pods", Some("log")), ("", "v1", "pods", Some("exec")), ("", "v1", "configmaps", None), ("", "v1", "pods", Some("log"))] {
            let rs = caps.add_version(g, v).entry(r);
            if let Some(s) = sub {
                rs.insert(s);
            }
        }
        let mut want: BTreeMap<String, BTreeMap<String, BTreeMap<String, BTreeSet<String>>>> = BTreeMap::new();
        let pods: BTreeSet<String> = ["exec", "log"].map(String::from).into();
        want.entry("".into()).or_default().entry("v1".into()).or_default().insert("pods".into(), pods);
        want.entry("".into()).or_default().entry("v1".into()).or_default().insert("configmaps".into(), BTreeSet::new());
        want.entry("apps".into()).or_default().entry("v1".into()).or_default().insert("deployments".into(), ["status".to_string()].into());
        let json = serde_json::to_string(&caps).unwrap();
        assert_eq!(json, serde_json::to_string(&serde_json::json!({ "groups": want })).unwrap());
        assert_eq!(serde_json::from_str::<Capabilities>(&json).unwrap(), caps);
        assert!(caps.groups[""]["v1"]["pods"].contains("log") && !caps.groups[""]["v1"]["pods"].contains("status"));
        assert_eq!(caps.groups[""]["v1"].keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["configmaps", "pods"]);
        assert_eq!(caps.resource_count(), 3);
    }
}
