//! Golden tests of the merge over the real v1.30, v1.33 and v1.37 documents:
//! every pair and all three, compared byte for byte with the body the front
//! door sends (`testdata/merged/*.json`; regenerate with
//! `MVP_UPDATE_GOLDEN=1 cargo test -p mvp-ext-proc golden`), plus the
//! invariants a client relies on, and a property test over random
//! reductions and reorderings of the fixtures.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use std::sync::Arc;

use super::merged::MergedDocument;
use crate::apidiscovery::{APIGroupDiscovery, APIGroupDiscoveryList, SharedGroup, etag, protobuf};

fn fixture(release: &str) -> Vec<APIGroupDiscovery> {
    let list: APIGroupDiscoveryList = serde_json::from_slice(&crate::testdata::fixture(release, "apis.json")).unwrap();
    list.items
}

/// Each server's groups, shared as the discoverer hands them over.
type Servers = BTreeMap<String, Vec<SharedGroup>>;

fn shared(inputs: &BTreeMap<String, Vec<APIGroupDiscovery>>) -> Servers {
    inputs.iter().map(|(k, v)| (k.clone(), v.iter().cloned().map(Arc::new).collect())).collect()
}

fn build(servers: &Servers, previous: Option<&MergedDocument>) -> MergedDocument {
    MergedDocument::build(&servers.iter().map(|(k, v)| (k.clone(), v.as_slice())).collect(), &Default::default(), previous)
}

/// The merged groups, read back from the JSON body, and checked against
/// the other forms: the protobuf body is the same groups' encoding, the
/// gzip forms unzip to the bodies, the ETag is kube's formula over them.
fn items(doc: &MergedDocument) -> Vec<APIGroupDiscovery> {
    let list: APIGroupDiscoveryList = serde_json::from_slice(&doc.json.identity).unwrap();
    assert_eq!(protobuf::decode(&doc.protobuf.identity).unwrap().items, list.items);
    assert!(doc.protobuf.identity == protobuf::encode(&list), "the protobuf body is the list's encoding, byte for byte");
    for form in [&doc.json, &doc.protobuf, &doc.group_list] {
        if let Some(gzip) = &form.gzip {
            let mut plain = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gzip[..]), &mut plain).unwrap();
            assert!(plain == form.identity, "a gzip form is its identity form compressed");
        }
    }
    assert_eq!(etag::etag(&list.items), doc.etag);
    assert_eq!(doc.groups, list.items.len());
    list.items
}

fn name(release: &str) -> String {
    release.replace('.', "")
}

/// Every (group, version, resource) and its subresources.
fn gvrs(items: &[APIGroupDiscovery]) -> Vec<(String, String, String, BTreeSet<String>)> {
    let mut out = Vec::new();
    for g in items {
        for v in &g.versions {
            for r in &v.resources {
                let subs = r.subresources.iter().map(|s| s.subresource.to_string()).collect();
                out.push((g.metadata.name.to_string(), v.version.to_string(), r.resource.to_string(), subs));
            }
        }
    }
    out
}

fn check_union(inputs: &BTreeMap<String, Vec<APIGroupDiscovery>>, merged: &[APIGroupDiscovery]) {
    let out = gvrs(merged);
    let keys: Vec<(String, String, String)> = out.iter().map(|(g, v, r, _)| (g.clone(), v.clone(), r.clone())).collect();
    let unique: BTreeSet<_> = keys.iter().cloned().collect();
    assert_eq!(unique.len(), keys.len(), "a group/version/resource appears twice");
    let mut want: BTreeMap<(String, String, String), BTreeSet<String>> = BTreeMap::new();
    for items in inputs.values() {
        for (g, v, r, subs) in gvrs(items) {
            want.entry((g, v, r)).or_default().extend(subs);
        }
    }
    let got: BTreeMap<(String, String, String), BTreeSet<String>> =
        out.into_iter().map(|(g, v, r, s)| ((g, v, r), s)).collect();
    assert_eq!(got, want, "merged document is not the exact union");
    let groups: Vec<&str> = merged.iter().map(|g| g.metadata.name.as_str()).collect();
    assert_eq!(groups.iter().collect::<BTreeSet<_>>().len(), groups.len(), "a group appears twice");
}

#[test]
fn golden_merges_of_real_releases() {
    let combos: &[&[&str]] = &[
        &["v1.30", "v1.33"],
        &["v1.30", "v1.37"],
        &["v1.33", "v1.37"],
        &["v1.30", "v1.33", "v1.37"],
    ];
    let update = std::env::var_os("MVP_UPDATE_GOLDEN").is_some();
    for combo in combos {
        let inputs: BTreeMap<String, Vec<APIGroupDiscovery>> = combo.iter().map(|r| (name(r), fixture(r))).collect();
        let doc = build(&shared(&inputs), None);
        check_union(&inputs, &items(&doc));
        let path = format!("{}/testdata/merged/{}.json", env!("CARGO_MANIFEST_DIR"), combo.join("+"));
        if update {
            std::fs::create_dir_all(std::path::Path::new(&path).parent().unwrap()).unwrap();
            std::fs::write(&path, &doc.json.identity).unwrap();
        }
        let golden = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(golden == doc.json.identity, "{path} differs from the merge (MVP_UPDATE_GOLDEN=1 to regenerate after review)");
        // Order is deterministic whatever order servers were added in.
        let reversed: BTreeMap<String, Vec<APIGroupDiscovery>> = combo.iter().rev().map(|r| (name(r), fixture(r))).collect();
        assert_eq!(build(&shared(&reversed), None).etag, doc.etag);
    }
}

#[test]
fn known_facts_of_the_three_release_merge() {
    let inputs: BTreeMap<String, Vec<APIGroupDiscovery>> =
        ["v1.30", "v1.33", "v1.37"].iter().map(|r| (name(r), fixture(r))).collect();
    let doc = build(&shared(&inputs), None);
    let merged = items(&doc);
    let find = |g: &str| merged.iter().find(|x| x.metadata.name == g).unwrap();
    // v1.37-only group and v1.30-only versions are both there.
    assert!(find("lifecycle.k8s.io").versions.iter().any(|v| v.version == "v1alpha1"));
    let fc: Vec<&str> = find("flowcontrol.apiserver.k8s.io").versions.iter().map(|v| v.version.as_str()).collect();
    assert_eq!(fc, ["v1", "v1beta3", "v1beta2", "v1beta1"]);
    // v1.30 lists only v1alpha2, so nothing orders it against v1.33's and
    // v1.37's versions: kube's Kahn sort takes free items lexicographically
    // ("v1" < "v1alpha2" < "v1beta2"), not by version priority.
    let rk: Vec<&str> = find("resource.k8s.io").versions.iter().map(|v| v.version.as_str()).collect();
    assert_eq!(rk, ["v1", "v1alpha2", "v1beta2", "v1beta1", "v1alpha3"]);
    // csinodes/status is new in v1.37 and survives the merge with older releases.
    let storage_v1 = find("storage.k8s.io").versions.iter().find(|v| v.version == "v1").unwrap();
    let csinodes = storage_v1.resources.iter().find(|r| r.resource == "csinodes").unwrap();
    assert!(csinodes.subresources.iter().any(|s| s.subresource == "status"));
    assert_eq!(protobuf::decode(&doc.protobuf.identity).unwrap().kind, "APIGroupDiscoveryList");
}

/// Above kube's gzip threshold every form has its gzip form, and a rebuild
/// that reuses most groups writes the same bytes as one from scratch.
#[test]
fn large_documents_in_every_form() {
    let crds: Vec<APIGroupDiscovery> = (0..40)
        .flat_map(|i| {
            fixture("v1.37").into_iter().filter(|g| !g.name().is_empty()).map(move |mut g| {
                g.metadata.name = format!("{}.crd{i}.example.com", g.name()).into();
                g
            })
        })
        .collect();
    let servers = shared(&BTreeMap::from([("big".to_string(), crds), ("v130".to_string(), fixture("v1.30"))]));
    let first = build(&servers, None);
    items(&first);
    assert!(first.json.gzip.is_some() && first.protobuf.gzip.is_some() && first.group_list.gzip.is_some(), "{} bytes of protobuf, {} of the group list", first.protobuf.identity.len(), first.group_list.identity.len());
    // One CRD group gone: every other group's bytes are reused.
    let mut fewer = servers.clone();
    fewer.get_mut("big").unwrap().remove(7);
    let again = build(&fewer, Some(&first));
    assert_eq!(again.groups_encoded, 0);
    items(&again);
    let fresh = build(&fewer, None);
    assert!(again.protobuf.identity == fresh.protobuf.identity && again.json.identity == fresh.json.identity);
    assert!(again.group_list.identity == fresh.group_list.identity && again.etag == fresh.etag);
}

/// A server's view reduced and reordered: groups, versions and resources
/// dropped or rotated, as an older or differently configured apiserver
/// would serve them.
fn reduce(items: &[APIGroupDiscovery], seed: &[u8]) -> Vec<APIGroupDiscovery> {
    let mut k = 0usize;
    let mut next = || {
        k += 1;
        seed.get(k % seed.len().max(1)).copied().unwrap_or(0)
    };
    let mut out = Vec::new();
    for g in items {
        if next() % 5 == 0 {
            continue;
        }
        let mut g = g.clone();
        g.versions.retain(|_| next() % 4 != 0);
        for v in &mut g.versions {
            v.resources.retain(|_| next() % 4 != 0);
            let n = v.resources.len();
            if n > 1 && next() % 3 == 0 {
                v.resources.rotate_left(1);
            }
        }
        out.push(g);
    }
    if out.len() > 1 && next() % 2 == 0 {
        out.rotate_left(1);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn union_is_exact_and_output_deterministic(
        seeds in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..64), 2..5),
    ) {
        let releases = ["v1.30", "v1.33", "v1.37"];
        let inputs: BTreeMap<String, Vec<APIGroupDiscovery>> = seeds
            .iter()
            .enumerate()
            .map(|(i, seed)| (format!("server-{i}"), reduce(&fixture(releases[i % 3]), seed)))
            .collect();
        let servers = shared(&inputs);
        let a = build(&servers, None);
        check_union(&inputs, &items(&a));
        let b = build(&shared(&inputs), None);
        prop_assert_eq!(&a.etag, &b.etag);
        prop_assert!(a.json.identity == b.json.identity);
        // Built again from `a` with one server's groups new (as parsed
        // anew) and the others the same: identical to a build from scratch.
        let mut changed = servers.clone();
        if let Some(first) = changed.values_mut().next() {
            *first = first.iter().map(|g| Arc::new((**g).clone())).collect();
        }
        let again = build(&changed, Some(&a));
        let fresh = build(&changed, None);
        prop_assert!(again.json.identity == fresh.json.identity);
        prop_assert!(again.protobuf.identity == fresh.protobuf.identity);
        prop_assert!(again.group_list.identity == fresh.group_list.identity);
        prop_assert_eq!(&again.etag, &fresh.etag);
        // Only groups holding one of the new inputs were encoded again.
        let touched = servers.values().next().map_or(0, |g| g.iter().map(|g| g.name()).collect::<BTreeSet<_>>().len());
        prop_assert_eq!(again.groups_encoded, touched);
        prop_assert_eq!(build(&changed, Some(&again)).groups_encoded, 0);
    }
}

/// A closed member's group-versions no open member serves are listed stale;
/// once it is open again (the very same inputs) they are current again — a
/// stale group's encodings are never reused.
#[test]
fn group_versions_only_closed_members_serve_are_stale_until_they_open() {
    let servers = shared(&[(name("v1.30"), fixture("v1.30")), (name("v1.37"), fixture("v1.37"))].into_iter().collect());
    let freshness = |doc: &MergedDocument, group: &str, version: &str| {
        let items = items(doc);
        let g = items.iter().find(|g| g.name() == group).unwrap_or_else(|| panic!("{group} listed"));
        g.versions.iter().find(|v| v.version == version).map(|v| v.freshness.to_string()).unwrap()
    };
    let all_open = build(&servers, None);
    let only_137 = ("lifecycle.k8s.io", "v1alpha1");
    let shared_gv = ("apps", "v1");
    assert_eq!(freshness(&all_open, only_137.0, only_137.1), "Current");
    let closed: BTreeSet<String> = [name("v1.37")].into();
    let doc = MergedDocument::build(&servers.iter().map(|(k, v)| (k.clone(), v.as_slice())).collect(), &closed, Some(&all_open));
    assert_eq!(freshness(&doc, only_137.0, only_137.1), "Stale", "only the closed v1.37 serves it");
    assert_eq!(freshness(&doc, shared_gv.0, shared_gv.1), "Current", "the open v1.30 serves it too");
    assert_ne!(doc.etag, all_open.etag);
    let reopened = build(&servers, Some(&doc));
    assert_eq!(freshness(&reopened, only_137.0, only_137.1), "Current");
    assert_eq!(reopened.etag, all_open.etag);
    assert!(reopened.json.identity == all_open.json.identity);
}
