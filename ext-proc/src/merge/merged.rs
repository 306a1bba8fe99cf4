//! The merged document in every form the front door sends, encoded once per
//! change so serving it costs a pointer copy — and built incrementally: a
//! group whose inputs (the servers' shared groups of that name) are the very
//! ones the previous build merged keeps its encodings, copied from the
//! previous document, so one apiserver's change re-merges and re-encodes
//! only the groups it touches. Every body is the concatenation of per-group
//! fragments, exactly what encoding the whole list writes (tested).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;

use super::peer_aggregated;
use crate::apidiscovery::go_json::go_json_into;
use crate::apidiscovery::{self as ad, APIGroupDiscovery, APIGroupDiscoveryList, SharedGroup, Str, etag, go_json, protobuf};

/// kube-apiserver gzips a response only above this size
/// (`responsewriters.defaultGzipThresholdBytes`).
pub const GZIP_THRESHOLD: usize = 128 * 1024;

/// One encoding of the document, with its gzip form when kube would gzip it.
#[derive(Debug, Clone)]
pub struct Encoded {
    pub identity: Bytes,
    pub gzip: Option<Bytes>,
}

impl Encoded {
    pub fn new(body: Vec<u8>) -> Encoded {
        let gzip = (body.len() > GZIP_THRESHOLD).then(|| {
            // Level 1, as kube-apiserver gzips responses
            // (`defaultGzipContentEncodingLevel`): a fraction of level 6's CPU
            // for a similar ratio (5.5 MB CRD-heavy /apis: see docs/discovery.md).
            let mut enc = flate2::write::GzEncoder::new(Vec::with_capacity(body.len() / 4), flate2::Compression::fast());
            // Writing into a Vec cannot fail.
            let _ = enc.write_all(&body);
            tight(enc.finish().unwrap_or_default())
        });
        Encoded { identity: tight(body), gzip }
    }
}

/// Kept for as long as the document is served: no unused capacity.
fn tight(mut v: Vec<u8>) -> Bytes {
    v.shrink_to_fit();
    Bytes::from(v)
}

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
}

/// Where a group's encodings come from in the document being built.
enum Source<'a> {
    /// The previous document's bytes.
    Reused { json: &'a [u8], protobuf: &'a [u8], group_list: Option<&'a [u8]> },
    /// Merged now and encoded straight into the new bodies (no
    /// intermediate buffers: short-lived allocations between the
    /// document's long-lived ones would fragment the heap).
    Fresh(Cow<'a, APIGroupDiscovery>),
}

impl MergedDocument {
    /// `servers` in name order, each with its own groups; `previous`, the
    /// last build, whose unchanged groups are reused.
    pub fn build(servers: &BTreeMap<String, &[SharedGroup]>, previous: Option<&MergedDocument>) -> MergedDocument {
        let (started, cpu_started) = (std::time::Instant::now(), crate::thread_cpu::now());
        let lists: Vec<&[SharedGroup]> = servers.values().copied().collect();
        let plan = peer_aggregated::plan(&lists);
        let mut groups_encoded = 0;
        let groups: Vec<(&[&SharedGroup], Source)> = plan
            .iter()
            .filter_map(|inputs| {
                let source = match previous.and_then(|p| p.reuse(inputs)) {
                    Some(reused) => reused,
                    None => {
                        groups_encoded += 1;
                        Source::Fresh(peer_aggregated::merge_group_inputs(inputs.iter().map(|g| &***g))?)
                    }
                };
                Some((inputs.as_slice(), source))
            })
            .collect();

        let (json, json_ranges) = join(&JSON_LIST, previous.map_or(0, |p| p.json.identity.len()), groups.iter().map(|(_, s)| match s {
            Source::Reused { json, .. } => Item::Copy(json),
            Source::Fresh(g) => Item::Json(g),
        }));
        let (group_list, list_ranges) = join(&GROUP_LIST, previous.map_or(0, |p| p.group_list.identity.len()), groups.iter().filter_map(|(_, s)| match s {
            Source::Reused { group_list, .. } => group_list.map(Item::Copy),
            Source::Fresh(g) => listed(g).then_some(Item::ListEntry(g)),
        }));
        let lens: Vec<usize> = groups
            .iter()
            .map(|(_, s)| match s {
                Source::Reused { protobuf, .. } => protobuf.len(),
                Source::Fresh(g) => protobuf::group_len(g),
            })
            .collect();
        let mut pb = Vec::with_capacity(lens.iter().map(|n| n + 6).sum::<usize>() + 128);
        protobuf::envelope(&lens, &mut pb);
        let mut parts = HashMap::with_capacity(groups.len());
        let mut inputs = Vec::with_capacity(groups.iter().map(|(i, _)| i.len()).sum());
        let mut list_ranges = list_ranges.into_iter();
        for (((group_inputs, source), json), len) in groups.iter().zip(json_ranges).zip(lens) {
            protobuf::item_head(len, &mut pb);
            let at = pb.len();
            let listed = match source {
                Source::Reused { protobuf, group_list, .. } => {
                    pb.extend_from_slice(protobuf);
                    group_list.is_some()
                }
                Source::Fresh(g) => {
                    protobuf::group(g, &mut pb);
                    listed(g)
                }
            };
            let group_list = if listed { list_ranges.next() } else { None };
            if let Some(first) = group_inputs.first() {
                let from = inputs.len();
                inputs.extend(group_inputs.iter().map(|g| Arc::clone(g)));
                parts.insert(Str::from(first.name()), Part { inputs: from..inputs.len(), json, protobuf: at..pb.len(), group_list });
            }
        }
        protobuf::envelope_end(&mut pb);
        // The prefix is written from the same constants `of_served_json`
        // strips, so it always applies (tested against kube's formula).
        let etag = etag::of_served_json(&json).unwrap_or_else(|| etag::quoted_sha512(&json));
        MergedDocument {
            etag,
            json: Encoded::new(json),
            protobuf: Encoded::new(pb),
            group_list: Encoded::new(group_list),
            sources: servers.keys().cloned().collect(),
            groups: groups.len(),
            groups_encoded,
            parts,
            inputs,
            build_time: started.elapsed(),
            build_cpu: crate::thread_cpu::now().saturating_sub(cpu_started),
        }
    }

    /// This document's encodings of a group, if it merged exactly `inputs`.
    fn reuse(&self, inputs: &[&SharedGroup]) -> Option<Source<'_>> {
        let part = self.parts.get(inputs.first()?.name())?;
        let held = self.inputs.get(part.inputs.clone())?;
        let same = held.len() == inputs.len() && held.iter().zip(inputs).all(|(a, b)| Arc::ptr_eq(a, b));
        if !same {
            return None;
        }
        Some(Source::Reused {
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

/// One item of a JSON list body.
enum Item<'a> {
    Copy(&'a [u8]),
    Json(&'a APIGroupDiscovery),
    ListEntry(&'a APIGroupDiscovery),
}

/// `head` + items joined by `,` + `tail`, and where each item landed.
/// `expected`: the size of the last such body, to allocate once.
fn join<'a>((head, tail): &Framing, expected: usize, items: impl Iterator<Item = Item<'a>>) -> (Vec<u8>, Vec<Range<usize>>) {
    let mut out = Vec::with_capacity(expected + expected / 8);
    let mut ranges = Vec::new();
    out.extend_from_slice(head);
    for (n, item) in items.enumerate() {
        if n > 0 {
            out.push(b',');
        }
        let start = out.len();
        match item {
            Item::Copy(bytes) => out.extend_from_slice(bytes),
            Item::Json(g) => go_json_into(&mut out, g),
            Item::ListEntry(g) => write_group_list_entry(&mut out, g),
        }
        ranges.push(start..out.len());
    }
    out.extend_from_slice(tail);
    (out, ranges)
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
