//! The merged document in every form the front door sends, encoded once per
//! change so serving it costs a pointer copy — and built incrementally: a
//! group whose inputs (the servers' shared groups of that name) are the very
//! ones the previous build merged keeps its encodings, copied from the
//! previous document, so one apiserver's change re-merges and re-encodes
//! only the groups it touches. Every body is the concatenation of per-group
//! fragments, exactly what encoding the whole list writes (tested).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use std::sync::Arc;

use serde::Serialize;

use super::{peer_aggregated, stale};
pub use crate::encoded::Encoded;
use crate::apidiscovery::go_json::go_json_into;
use crate::apidiscovery::{self as ad, APIGroupDiscovery, APIGroupDiscoveryList, SharedGroup, Str, etag, go_json, protobuf};

#[derive(Debug, Clone)]
pub struct MergedDocument {
    /// Quoted, as sent in `ETag`.
    pub etag: String,
    pub json: Encoded,
    pub protobuf: Encoded,
    /// Unaggregated `APIGroupList` of the merged groups (no ETag, as kube).
    pub group_list: Encoded,
    /// Apiservers whose views were merged.
    pub sources: Vec<String>,
    /// Number of merged groups.
    pub groups: usize,
    /// How many of them this build merged and encoded (the rest were reused).
    pub groups_encoded: usize,
    /// How long the build took (merge, encodings, gzip).
    pub build_time: std::time::Duration,
    /// The CPU time it took (the build runs on one thread): less than
    /// `build_time` by the time it waited for a core.
    pub build_cpu: std::time::Duration,
    /// Per group name: what the next build may reuse.
    parts: HashMap<Str, Part>,
    /// Every part's inputs, one after another (one allocation, not one per
    /// group: these live as long as the document).
    inputs: Vec<SharedGroup>,
}

/// One merged group: the inputs it was merged from (held, so their
/// addresses cannot be reused by other groups) and where its encodings sit
/// in this document's bodies.
#[derive(Debug, Clone)]
struct Part {
    inputs: Range<usize>,
    json: Range<usize>,
    protobuf: Range<usize>,
    group_list: Option<Range<usize>>,
    /// Some version was marked stale: never reused (the next build may
    /// find its members open again with the very same inputs).
    stale: bool,
}

/// A group's encodings in the previous document, unchanged.
struct Reused<'a> {
    json: &'a [u8],
    protobuf: &'a [u8],
    group_list: Option<&'a [u8]>,
}

impl MergedDocument {
    /// `servers` in name order, each with its own groups; `closed`, those
    /// of them not open now (their group-versions no open server serves are
    /// marked stale: [`stale`]); `previous`, the last build, whose unchanged
    /// groups are reused.
    ///
    /// One pass over the groups: each is merged (or found unchanged) and
    /// written in all three forms while it is in the cache. A pass per form
    /// fetched each of a CRD-heavy document's 3,000 groups from memory once
    /// per form; one pass takes a quarter less CPU (BENCHMARKS.md).
    pub fn build(servers: &BTreeMap<String, &[SharedGroup]>, closed: &BTreeSet<String>, previous: Option<&MergedDocument>) -> MergedDocument {
        let (started, cpu_started) = (std::time::Instant::now(), crate::building::thread_cpu::now());
        let lists: Vec<&[SharedGroup]> = servers.values().copied().collect();
        let closed: Vec<bool> = servers.keys().map(|n| closed.contains(n)).collect();
        let plan = peer_aggregated::plan(&lists);
        let size = |f: fn(&MergedDocument) -> &Encoded| previous.map_or(0, |p| f(p).identity.len());
        let mut json = ListBody::new(&JSON_LIST, size(|p| &p.json));
        let mut group_list = ListBody::new(&GROUP_LIST, size(|p| &p.group_list));
        // The protobuf envelope holds the length of everything after it, so
        // the items are written first, after room for it.
        let headroom = protobuf::envelope_max_len();
        let mut pb = Vec::with_capacity(headroom + size(|p| &p.protobuf) * 9 / 8);
        pb.resize(headroom, 0);
        let mut lengths = protobuf::Lengths::default();
        let mut item_lens = Vec::with_capacity(plan.len());
        let mut parts = HashMap::with_capacity(plan.len());
        let mut inputs = Vec::with_capacity(plan.iter().map(Vec::len).sum());
        let mut groups_encoded = 0;
        for group_inputs in &plan {
            let Some(first) = group_inputs.first() else { continue };
            let stale = stale::stale_versions(group_inputs, &lists, &closed);
            let reused = if stale.is_empty() { previous.and_then(|p| p.reuse(group_inputs)) } else { None };
            let (json_at, protobuf_at, list_at) = match reused {
                Some(Reused { json: j, protobuf: p, group_list: l }) => {
                    protobuf::item_head(p.len(), &mut pb);
                    let at = pb.len();
                    pb.extend_from_slice(p);
                    (json.item(|out| out.extend_from_slice(j)), at..pb.len(), l.map(|l| group_list.item(|out| out.extend_from_slice(l))))
                }
                None => {
                    let Some(mut g) = peer_aggregated::merge_group_inputs(group_inputs.iter().map(|g| &***g)) else { continue };
                    if !stale.is_empty() {
                        stale::mark(g.to_mut(), &stale);
                    }
                    groups_encoded += 1;
                    let at = lengths.item(&g, &mut pb);
                    let protobuf_at = at..pb.len();
                    let list_at = listed(&g).then(|| group_list.item(|out| write_group_list_entry(out, &g)));
                    (json.item(|out| go_json_into(out, &*g)), protobuf_at, list_at)
                }
            };
            item_lens.push(protobuf_at.len());
            let from = inputs.len();
            inputs.extend(group_inputs.iter().map(|g| Arc::clone(g)));
            parts.insert(Str::from(first.name()), Part { inputs: from..inputs.len(), json: json_at, protobuf: protobuf_at, group_list: list_at, stale: !stale.is_empty() });
        }
        let json = json.finish();
        let group_list = group_list.finish();
        protobuf::envelope_end(&mut pb);
        let mut envelope = Vec::with_capacity(headroom);
        protobuf::envelope(&item_lens, &mut envelope);
        // `envelope_max_len` bounds the envelope, so it always fits.
        let start = headroom.saturating_sub(envelope.len());
        if let Some(room) = pb.get_mut(start..headroom) {
            room.copy_from_slice(&envelope);
        }
        for p in parts.values_mut() {
            p.protobuf = p.protobuf.start - start..p.protobuf.end - start;
        }
        // The prefix is written from the same constants `of_served_json`
        // strips, so it always applies (tested against kube's formula).
        let etag = etag::of_served_json(&json).unwrap_or_else(|| etag::quoted_sha512(&json));
        MergedDocument {
            etag,
            json: Encoded::new(json),
            protobuf: Encoded::from_tail(pb, start),
            group_list: Encoded::new(group_list),
            sources: servers.keys().cloned().collect(),
            groups: item_lens.len(),
            groups_encoded,
            parts,
            inputs,
            build_time: started.elapsed(),
            build_cpu: crate::building::thread_cpu::now().saturating_sub(cpu_started),
        }
    }

    /// This document's encodings of a group, if it merged exactly `inputs`.
    fn reuse(&self, inputs: &[&SharedGroup]) -> Option<Reused<'_>> {
        let part = self.parts.get(inputs.first()?.name()).filter(|p| !p.stale)?;
        let held = self.inputs.get(part.inputs.clone())?;
        let same = held.len() == inputs.len() && held.iter().zip(inputs).all(|(a, b)| Arc::ptr_eq(a, b));
        if !same {
            return None;
        }
        Some(Reused {
            json: self.json.identity.get(part.json.clone())?,
            protobuf: self.protobuf.identity.get(part.protobuf.clone())?,
            group_list: match &part.group_list {
                Some(r) => Some(self.group_list.identity.get(r.clone())?),
                None => None,
            },
        })
    }
}

/// Each list body is `head` + items joined by `,` + `tail`: the halves of
/// the list encoded with no items, so the framing is exactly the
/// serializer's own.
type Framing = (Vec<u8>, Vec<u8>);

static JSON_LIST: std::sync::LazyLock<Framing> = std::sync::LazyLock::new(|| {
    framing(&go_json(&APIGroupDiscoveryList { kind: ad::KIND.into(), api_version: ad::API_VERSION.into(), ..Default::default() }))
});

static GROUP_LIST: std::sync::LazyLock<Framing> = std::sync::LazyLock::new(|| {
    framing(&go_json(&GroupList { kind: "APIGroupList", api_version: "v1", groups: vec![] }))
});

/// Splits an encoded empty list (`…"items":[]}`) between its brackets; the
/// tail gets the newline Go's encoder writes after a body.
fn framing(empty: &[u8]) -> Framing {
    let at = empty.len().saturating_sub(2);
    let (head, tail) = empty.split_at(at);
    let mut tail = tail.to_vec();
    tail.push(b'\n');
    (head.to_vec(), tail)
}

/// A JSON list body being written: `head`, items joined by `,`, `tail`.
struct ListBody {
    out: Vec<u8>,
    tail: &'static [u8],
    items: usize,
}

impl ListBody {
    /// `expected`: the size of the last such body, to allocate once.
    fn new((head, tail): &'static Framing, expected: usize) -> ListBody {
        let mut out = Vec::with_capacity(expected + expected / 8);
        out.extend_from_slice(head);
        ListBody { out, tail, items: 0 }
    }

    /// Appends an item; where it landed.
    fn item(&mut self, write: impl FnOnce(&mut Vec<u8>)) -> Range<usize> {
        if self.items > 0 {
            self.out.push(b',');
        }
        self.items += 1;
        let start = self.out.len();
        write(&mut self.out);
        start..self.out.len()
    }

    fn finish(mut self) -> Vec<u8> {
        self.out.extend_from_slice(self.tail);
        self.out
    }
}

/// `metav1.APIGroupList` and its parts, in Go's field order.
#[derive(Serialize)]
struct GroupList<'a> {
    kind: &'a str,
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    groups: Vec<GroupEntry<'a>>,
}

#[derive(Serialize)]
struct GroupEntry<'a> {
    name: &'a str,
    versions: Vec<GroupVersionForDiscovery>,
    #[serde(rename = "preferredVersion")]
    preferred_version: GroupVersionForDiscovery,
}

#[derive(Serialize, Clone)]
struct GroupVersionForDiscovery {
    #[serde(rename = "groupVersion")]
    group_version: String,
    version: String,
}

/// Whether the unaggregated `APIGroupList` lists the group: kube lists
/// neither a group with no name nor one with no versions.
fn listed(g: &APIGroupDiscovery) -> bool {
    !g.name().is_empty() && !g.versions.is_empty()
}

/// The group's entry in the unaggregated `APIGroupList` (a [`listed`]
/// group): versions in the merged preference order, the first preferred.
fn write_group_list_entry(out: &mut Vec<u8>, g: &APIGroupDiscovery) {
    let versions: Vec<GroupVersionForDiscovery> = g
        .versions
        .iter()
        .map(|v| GroupVersionForDiscovery { group_version: format!("{}/{}", g.name(), v.version), version: v.version.to_string() })
        .collect();
    let preferred_version = versions.first().cloned().unwrap_or(GroupVersionForDiscovery { group_version: String::new(), version: String::new() });
    go_json_into(out, &GroupEntry { name: g.name(), versions, preferred_version });
}
