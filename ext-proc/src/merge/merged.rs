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
use crate::apidiscovery::{self as ad, APIGroupDiscovery, APIGroupDiscoveryList, SharedGroup, etag, go_json, protobuf};

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
    /// Per group name: what the next build may reuse.
    parts: HashMap<String, Part>,
}

/// One merged group: the inputs it was merged from (held, so their
/// addresses cannot be reused by other groups) and where its encodings sit
/// in this document's bodies.
#[derive(Debug, Clone)]
struct Part {
    inputs: Vec<SharedGroup>,
    json: Range<usize>,
    protobuf: Range<usize>,
    group_list: Option<Range<usize>>,
}

/// One group's encodings for the document being built: borrowed from the
/// previous document or freshly encoded.
struct Fragments<'a> {
    json: Cow<'a, [u8]>,
    protobuf: Cow<'a, [u8]>,
    group_list: Option<Cow<'a, [u8]>>,
}

impl MergedDocument {
    /// `servers` in name order, each with its own groups; `previous`, the
    /// last build, whose unchanged groups are reused.
    pub fn build(servers: &BTreeMap<String, &[SharedGroup]>, previous: Option<&MergedDocument>) -> MergedDocument {
        let started = std::time::Instant::now();
        let lists: Vec<&[SharedGroup]> = servers.values().copied().collect();
        let plan = peer_aggregated::plan(&lists);
        let mut groups_encoded = 0;
        let fragments: Vec<Fragments> = plan
            .iter()
            .map(|inputs| {
                previous.and_then(|p| p.reuse(inputs)).unwrap_or_else(|| {
                    groups_encoded += 1;
                    encode(inputs)
                })
            })
            .collect();

        let mut parts = HashMap::with_capacity(plan.len());
        let (json, json_ranges) = join(&JSON_LIST.0, fragments.iter().map(|f| &*f.json), &JSON_LIST.1);
        let (group_list, list_ranges) = join(&GROUP_LIST.0, fragments.iter().filter_map(|f| f.group_list.as_deref()), &GROUP_LIST.1);
        let protobuf_lens: Vec<usize> = fragments.iter().map(|f| f.protobuf.len()).collect();
        let mut pb = Vec::with_capacity(protobuf_lens.iter().map(|n| n + 6).sum::<usize>() + 128);
        protobuf::envelope(&protobuf_lens, &mut pb);
        let mut list_ranges = list_ranges.into_iter();
        for ((inputs, f), json) in plan.iter().zip(&fragments).zip(json_ranges) {
            protobuf::item(&f.protobuf, &mut pb);
            let protobuf = pb.len() - f.protobuf.len()..pb.len();
            let group_list = f.group_list.as_ref().and_then(|_| list_ranges.next());
            if let Some(first) = inputs.first() {
                let inputs = inputs.iter().map(|g| Arc::clone(g)).collect();
                parts.insert(first.name().to_string(), Part { inputs, json, protobuf, group_list });
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
            groups: plan.len(),
            groups_encoded,
            parts,
            build_time: started.elapsed(),
        }
    }

    /// This document's encodings of a group, if it merged exactly `inputs`.
    fn reuse(&self, inputs: &[&SharedGroup]) -> Option<Fragments<'_>> {
        let part = self.parts.get(inputs.first()?.name())?;
        let same = part.inputs.len() == inputs.len() && part.inputs.iter().zip(inputs).all(|(a, b)| Arc::ptr_eq(a, b));
        if !same {
            return None;
        }
        Some(Fragments {
            json: Cow::Borrowed(self.json.identity.get(part.json.clone())?),
            protobuf: Cow::Borrowed(self.protobuf.identity.get(part.protobuf.clone())?),
            group_list: match &part.group_list {
                Some(r) => Some(Cow::Borrowed(self.group_list.identity.get(r.clone())?)),
                None => None,
            },
        })
    }
}

/// Merges one planned group and encodes it in every form.
fn encode<'a>(inputs: &[&SharedGroup]) -> Fragments<'a> {
    let merged = peer_aggregated::merge_group_inputs(inputs.iter().map(|g| &***g));
    let Some(g) = merged else {
        return Fragments { json: Cow::Owned(b"{}".to_vec()), protobuf: Cow::Owned(vec![]), group_list: None };
    };
    let mut pb = Vec::new();
    protobuf::group(&g, &mut pb);
    Fragments { json: Cow::Owned(go_json(&*g)), protobuf: Cow::Owned(pb), group_list: group_list_entry(&g).map(Cow::Owned) }
}

/// Each list body is `head` + fragments joined by `,` + `tail`: the halves
/// of the list encoded with no items, so the framing is exactly the
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

/// `head` + items joined by `,` + `tail`, and where each item landed.
fn join<'a>(head: &[u8], items: impl Iterator<Item = &'a [u8]> + Clone, tail: &[u8]) -> (Vec<u8>, Vec<Range<usize>>) {
    let len = head.len() + tail.len() + items.clone().map(|i| i.len() + 1).sum::<usize>();
    let mut out = Vec::with_capacity(len);
    let mut ranges = Vec::new();
    out.extend_from_slice(head);
    for (n, item) in items.enumerate() {
        if n > 0 {
            out.push(b',');
        }
        ranges.push(out.len()..out.len() + item.len());
        out.extend_from_slice(item);
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

/// The group's entry in the unaggregated `APIGroupList`: versions in the
/// merged preference order, the first one preferred. None for a group with
/// no name or no versions (kube lists neither).
fn group_list_entry(g: &APIGroupDiscovery) -> Option<Vec<u8>> {
    if g.name().is_empty() {
        return None;
    }
    let versions: Vec<GroupVersionForDiscovery> = g
        .versions
        .iter()
        .map(|v| GroupVersionForDiscovery { group_version: format!("{}/{}", g.name(), v.version), version: v.version.to_string() })
        .collect();
    let preferred_version = versions.first()?.clone();
    Some(go_json(&GroupEntry { name: g.name(), versions, preferred_version }))
}
