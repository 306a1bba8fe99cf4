//! The peer-aggregated `/apis` merge of kube-apiserver (added in 1.35, on by
//! default from 1.36)
//! (`aggregated/peer_aggregated_handler.go`, `mergeResources` and helpers),
//! over every apiserver's own (`profile=nopeer`) groups.
//!
//! Servers are walked in lexicographic order of their names (kube: server
//! IDs); the first occurrence of a group is the base and later ones merge
//! into it. kube also distinguishes the "local" server, but only to return
//! its list unchanged when every list is identical, which gives the same
//! result whichever server is local.

use std::borrow::{Borrow, Cow};
use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::order::merge_preserving_relative_order;
use crate::apidiscovery::{APIGroupDiscovery, APIResourceDiscovery, APIVersionDiscovery};

// kube merges whole lists; the result is the same group by group: a merged
// group depends only on the servers' groups of that name (in server order),
// and the order of the groups only on each server's list of names. So the
// merge is planned ([`plan`]) and then done per group ([`merge_group_inputs`]),
// which lets the builder keep the encoding of a group whose inputs did not
// change (`merged.rs`).

/// The merged list in order: for each group, the servers' groups of that
/// name in server order (the first is the base). One server: its list as it
/// is (kube returns the local list unchanged). Several: the first server's
/// order when every server lists the same names, else
/// `MergePreservingRelativeOrder` of their name lists.
pub fn plan<'a, T: Borrow<APIGroupDiscovery>>(lists: &[&'a [T]]) -> Vec<Vec<&'a T>> {
    let [first, rest @ ..] = lists else { return vec![] };
    if rest.is_empty() {
        return first.iter().map(|g| vec![g]).collect();
    }
    let mut by_name: HashMap<&'a str, Vec<&'a T>> = HashMap::new();
    for list in lists {
        for g in list.iter() {
            by_name.entry(g.borrow().name()).or_default().push(g);
        }
    }
    let all_names: Vec<Vec<String>> = lists.iter().map(|l| names(l, &|g: &T| g.borrow().name())).collect();
    let identical = all_names.windows(2).all(|w| w[0] == w[1]);
    let order = match (identical, all_names.first()) {
        (true, Some(first_names)) => first_names.clone(),
        _ => merge_preserving_relative_order(&all_names),
    };
    order.iter().filter_map(|n| by_name.remove(n.as_str())).collect()
}

/// One planned group merged: the first input unchanged (borrowed) unless a
/// later one adds something.
pub fn merge_group_inputs<'a>(inputs: impl IntoIterator<Item = &'a APIGroupDiscovery>) -> Option<Cow<'a, APIGroupDiscovery>> {
    let mut inputs = inputs.into_iter();
    let mut merged = Cow::Borrowed(inputs.next()?);
    for g in inputs {
        // Equal groups merge to the base as it is (every union is
        // unchanged): skip the work and the copy.
        if *merged != *g {
            merged = Cow::Owned(merge_group(merged.into_owned(), g).0);
        }
    }
    Some(merged)
}

/// The whole merge at once (tests; the builder goes group by group).
pub fn merge<L: Borrow<Vec<APIGroupDiscovery>>>(servers: &BTreeMap<String, L>) -> Vec<APIGroupDiscovery> {
    let lists: Vec<&[APIGroupDiscovery]> = servers.values().map(|l| l.borrow().as_slice()).collect();
    plan(&lists)
        .into_iter()
        .filter_map(|inputs| merge_group_inputs(inputs).map(Cow::into_owned))
        .collect()
}

fn names<T>(items: &[T], name: &impl Fn(&T) -> &str) -> Vec<String> {
    items.iter().map(|i| name(i).to_string()).collect()
}

/// Takes each name's entry once, in `order`.
fn assemble<T>(mut by_name: HashMap<String, T>, order: &[String]) -> Vec<T> {
    order.iter().filter_map(|n| by_name.remove(n)).collect()
}

/// One level of kube's merge (`mergeVersionsAcrossGroup` for versions,
/// `mergeResourcesAcrossVersion` for resources): the union of `a` and `b` by
/// name, entries in both combined by `combine` (which says whether that
/// changed anything). Returns `None` when the result is exactly `a` (nothing
/// combined changed and the name lists are identical); otherwise the union,
/// in `a`'s order if the name lists are identical, else by
/// `MergePreservingRelativeOrder`.
fn union<T: Clone>(a: &[T], b: &[T], name: impl Fn(&T) -> &str, combine: impl Fn(T, &T) -> (T, bool)) -> Option<Vec<T>> {
    let a_names = names(a, &name);
    let b_names = names(b, &name);
    let mut changed = false;
    let mut by_name: HashMap<String, T> = a.iter().map(|x| (name(x).to_string(), x.clone())).collect();
    for x in b {
        let key = name(x).to_string();
        let merged = match by_name.remove(&key) {
            None => x.clone(),
            Some(existing) => {
                let (m, c) = combine(existing, x);
                changed |= c;
                m
            }
        };
        by_name.insert(key, merged);
    }
    let identical = a_names == b_names;
    if !changed && identical {
        return None;
    }
    let order = if identical { a_names } else { merge_preserving_relative_order(&[a_names, b_names]) };
    Some(assemble(by_name, &order))
}

/// Versions unioned; `a`'s metadata kept.
fn merge_group(a: APIGroupDiscovery, b: &APIGroupDiscovery) -> (APIGroupDiscovery, bool) {
    match union(&a.versions, &b.versions, |v| v.version.as_str(), merge_version) {
        None => (a, false),
        Some(versions) => (APIGroupDiscovery { metadata: a.metadata, versions }, true),
    }
}

/// Resources unioned (deep-equal ones kept as they are); `a`'s freshness kept.
fn merge_version(a: APIVersionDiscovery, b: &APIVersionDiscovery) -> (APIVersionDiscovery, bool) {
    let combine = |existing: APIResourceDiscovery, r: &APIResourceDiscovery| {
        if existing == *r { (existing, false) } else { (merge_capabilities(&existing, r), true) }
    };
    match union(&a.resources, &b.resources, |r| r.resource.as_str(), combine) {
        None => (a, false),
        Some(resources) => (APIVersionDiscovery { version: a.version, resources, freshness: a.freshness }, true),
    }
}

/// `mergeResourceCapabilities`: verbs a sorted union (nil when empty),
/// subresources a union by name (`b` wins a clash) sorted by name; every
/// other field from `a` (from `b` if `a` has no resource name).
fn merge_capabilities(a: &APIResourceDiscovery, b: &APIResourceDiscovery) -> APIResourceDiscovery {
    let verbs: BTreeSet<&crate::apidiscovery::Str> = a.verbs.iter().flatten().chain(b.verbs.iter().flatten()).collect();
    let mut subs: BTreeMap<&str, &crate::apidiscovery::APISubresourceDiscovery> = BTreeMap::new();
    for s in a.subresources.iter().chain(&b.subresources) {
        subs.insert(&s.subresource, s);
    }
    let mut merged = if a.resource.is_empty() { b.clone() } else { a.clone() };
    merged.verbs = if verbs.is_empty() { None } else { Some(verbs.into_iter().cloned().collect()) };
    merged.subresources = subs.into_values().cloned().collect();
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apidiscovery::{APISubresourceDiscovery, ObjectMeta};

    fn res(name: &str, verbs: &[&str], subs: &[&str]) -> APIResourceDiscovery {
        APIResourceDiscovery {
            resource: name.into(),
            scope: "Namespaced".into(),
            singular_resource: name.trim_end_matches('s').into(),
            verbs: Some(verbs.iter().map(|s| (*s).into()).collect()),
            subresources: subs
                .iter()
                .map(|s| APISubresourceDiscovery { subresource: (*s).into(), verbs: Some(vec!["get".into()]), ..Default::default() })
                .collect(),
            ..Default::default()
        }
    }

    fn group(name: &str, versions: &[(&str, Vec<APIResourceDiscovery>)]) -> APIGroupDiscovery {
        APIGroupDiscovery {
            metadata: ObjectMeta { name: name.into() },
            versions: versions
                .iter()
                .map(|(v, r)| APIVersionDiscovery { version: (*v).into(), resources: r.clone(), freshness: "Current".into() })
                .collect(),
        }
    }

    fn servers(list: Vec<(&str, Vec<APIGroupDiscovery>)>) -> BTreeMap<String, Vec<APIGroupDiscovery>> {
        list.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    fn group_names(g: &[APIGroupDiscovery]) -> Vec<&str> {
        g.iter().map(|g| g.name()).collect()
    }

    // The spec's conflict cases (peer_aggregated_handler_test.go).
    #[test]
    fn conflicting_group_orders_follow_the_first_server_holding_everything() {
        let g1 = group("g1", &[("v1", vec![res("a", &["get"], &[])])]);
        let g2 = group("g2", &[("v1", vec![res("b", &["get"], &[])])]);
        let out = merge(&servers(vec![("A", vec![g1.clone(), g2.clone()]), ("B", vec![g2.clone(), g1.clone()])]));
        assert_eq!(group_names(&out), ["g1", "g2"]);
        let out = merge(&servers(vec![("B", vec![g1.clone(), g2.clone()]), ("A", vec![g2, g1])]));
        assert_eq!(group_names(&out), ["g2", "g1"]);
    }

    #[test]
    fn verbs_and_subresources_are_unioned() {
        let a = group("apps", &[("v1", vec![res("deployments", &["get", "list"], &["status"])])]);
        let b = group("apps", &[("v1", vec![res("deployments", &["get", "watch"], &["log"])])]);
        let out = merge(&servers(vec![("a", vec![a]), ("b", vec![b])]));
        let d = &out[0].versions[0].resources[0];
        assert_eq!(d.verbs.as_deref().unwrap(), ["get", "list", "watch"]);
        let subs: Vec<&str> = d.subresources.iter().map(|s| s.subresource.as_str()).collect();
        assert_eq!(subs, ["log", "status"]);
    }

    #[test]
    fn other_fields_come_from_the_base() {
        let mut ra = res("widgets", &["get"], &[]);
        ra.short_names = vec!["w".into()];
        let mut rb = res("widgets", &["list"], &[]);
        rb.short_names = vec!["wd".into()];
        rb.scope = "Cluster".into();
        let out = merge(&servers(vec![("a", vec![group("x", &[("v1", vec![ra])])]), ("b", vec![group("x", &[("v1", vec![rb])])])]));
        let w = &out[0].versions[0].resources[0];
        assert_eq!((w.short_names.clone(), w.scope.as_str()), (vec!["w".into()], "Namespaced"));
        assert_eq!(w.verbs.as_deref().unwrap(), ["get", "list"]);
    }

    #[test]
    fn versions_and_resources_merge_preserving_order() {
        let a = group("resource.k8s.io", &[("v1beta2", vec![res("a", &["get"], &[])]), ("v1beta1", vec![res("a", &["get"], &[])])]);
        let b = group(
            "resource.k8s.io",
            &[("v1", vec![res("a", &["get"], &[])]), ("v1beta2", vec![res("a", &["get"], &[]), res("b", &["get"], &[])])],
        );
        let out = merge(&servers(vec![("a", vec![a]), ("b", vec![b])]));
        let versions: Vec<&str> = out[0].versions.iter().map(|v| v.version.as_str()).collect();
        assert_eq!(versions, ["v1", "v1beta2", "v1beta1"]);
        let v1beta2: Vec<&str> = out[0].versions[1].resources.iter().map(|r| r.resource.as_str()).collect();
        assert_eq!(v1beta2, ["a", "b"]);
    }

    #[test]
    fn identical_servers_return_the_document_unchanged() {
        let g = vec![group("b", &[("v1", vec![res("x", &["get"], &[])])]), group("a", &[("v1", vec![res("y", &["get"], &[])])])];
        assert_eq!(merge(&servers(vec![("s1", g.clone()), ("s2", g.clone()), ("s3", g.clone())])), g);
        assert_eq!(merge(&servers(vec![("only", g.clone())])), g);
        assert!(merge(&BTreeMap::<String, Vec<APIGroupDiscovery>>::new()).is_empty());
    }
}
