//! The protobuf form of `APIGroupDiscoveryList`: kube's
//! `k8s.io/api/apidiscovery/v2` messages (schema in `protos/k8s.io/`) inside
//! the `k8s\x00` + `runtime.Unknown` envelope kube's protobuf serializer
//! writes.

use mvp_protos::k8s::io::api::apidiscovery::v2 as pbd;
use mvp_protos::k8s::io::apimachinery::pkg::apis::meta::v1 as pbmeta;
use mvp_protos::k8s::io::apimachinery::pkg::runtime as pbrt;
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};

use super::{self as ad, APIGroupDiscovery, APIGroupDiscoveryList};

/// `"k8s\x00"` + `runtime.Unknown{typeMeta, raw}` as kube's protobuf
/// serializer writes it, around the whole list.
pub fn encode(list: &APIGroupDiscoveryList) -> Vec<u8> {
    let mut lengths = Lengths::default();
    let mut items = Vec::new();
    let lens: Vec<usize> = list.items.iter().map(|g| {
        let at = lengths.item(g, &mut items);
        items.len() - at
    }).collect();
    let mut out = Vec::with_capacity(items.len() + 128);
    envelope(&lens, &mut out);
    out.extend_from_slice(&items);
    envelope_end(&mut out);
    out
}

// The list is written straight from the JSON types in field order, as Go's
// generated marshaller does (every `optional string` written even when
// empty; a nil `responseKind` not at all): building prost's message tree
// first would clone every string of a CRD-heavy document (tens of ms).

/// The envelope up to the list's items: magic, `typeMeta`, the head of
/// `raw` (its length from `items`, the encoded length of each group) and
/// the list's empty `metadata`. Each group follows ([`Lengths::item`], or
/// [`item_head`] and the bytes an earlier build wrote), then
/// [`envelope_end`].
pub fn envelope(items: &[usize], out: &mut Vec<u8>) {
    let raw = nested_len(1, LIST_META.len()) + items.iter().map(|&n| nested_len(2, n)).sum::<usize>();
    out.extend_from_slice(b"k8s\x00");
    head(1, str_len(1, ad::API_VERSION) + str_len(2, ad::KIND), out);
    string(1, ad::API_VERSION, out);
    string(2, ad::KIND, out);
    head(2, raw, out);
    head(1, LIST_META.len(), out);
    out.extend_from_slice(&LIST_META);
}

/// `ListMeta` as kube's generated marshaller writes an empty one:
/// `selfLink`, `resourceVersion` and `continue`, each an empty string (a nil
/// `remainingItemCount` not at all).
const LIST_META: [u8; 6] = [0x0a, 0, 0x12, 0, 0x1a, 0];

/// What follows `name` in a group's `ObjectMeta` as kube writes it: the
/// other non-pointer fields, empty — `generateName`, `namespace`,
/// `selfLink`, `uid`, `resourceVersion` (empty strings), `generation` (0)
/// and `creationTimestamp` (the zero Time: an empty message). Byte for byte
/// what real 1.34 and 1.37 servers send (tests/real_kube_mvp.rs).
const OBJECT_META_REST: [u8; 14] = [0x12, 0, 0x1a, 0, 0x22, 0, 0x2a, 0, 0x32, 0, 0x38, 0, 0x42, 0];

/// The most bytes [`envelope`] writes (the length of `raw` at its longest).
pub fn envelope_max_len() -> usize {
    let mut out = Vec::new();
    envelope(&[], &mut out);
    out.len() - encoded_len_varint(nested_len(1, LIST_META.len()) as u64) + encoded_len_varint(u64::MAX)
}

/// The tag and length of a group of the list, `len` the length of its
/// bytes.
pub fn item_head(len: usize, out: &mut Vec<u8>) {
    head(2, len, out);
}

/// `contentEncoding` and `contentType`, both empty.
pub fn envelope_end(out: &mut Vec<u8>) {
    string(3, "", out);
    string(4, "", out);
}

/// The lengths of a group's nested messages (each version, resource and
/// subresource), measured in one pass, in the order they are written.
/// Measuring each message where it is written would measure a subresource
/// once per enclosing level (four times). Reused from group to group:
/// short-lived allocations between the document's long-lived ones fragment
/// the heap.
#[derive(Default)]
pub struct Lengths(Vec<usize>);

impl Lengths {
    /// Writes `g` as one item of the list — [`item_head`] and the group —
    /// measured now; returns where the group's own bytes start in `out`.
    pub fn item(&mut self, g: &APIGroupDiscovery, out: &mut Vec<u8>) -> usize {
        self.0.clear();
        let len = self.measure(g);
        item_head(len, out);
        let at = out.len();
        self.writer().group(g, out);
        at
    }

    /// Appends `g`'s nested lengths; returns the length of `g` itself (what
    /// [`item_head`] needs).
    fn measure(&mut self, g: &APIGroupDiscovery) -> usize {
        let mut group = nested_len(1, object_meta_len(&g.metadata.name));
        for v in &g.versions {
            let version_at = self.slot();
            let mut version = str_len(1, &v.version) + str_len(3, &v.freshness);
            for r in &v.resources {
                let resource_at = self.slot();
                let mut resource = resource_fields_len(r);
                for s in &r.subresources {
                    let sub = subresource_len(s);
                    self.0.push(sub);
                    resource += nested_len(8, sub);
                }
                self.set(resource_at, resource);
                version += nested_len(2, resource);
            }
            self.set(version_at, version);
            group += nested_len(2, version);
        }
        group
    }

    fn writer(&self) -> Writer<'_> {
        Writer(self.0.iter())
    }

    fn slot(&mut self) -> usize {
        self.0.push(0);
        self.0.len() - 1
    }

    fn set(&mut self, at: usize, len: usize) {
        if let Some(slot) = self.0.get_mut(at) {
            *slot = len;
        }
    }
}

/// Writes a group with the lengths [`Lengths::measure`] found.
struct Writer<'a>(std::slice::Iter<'a, usize>);

impl Writer<'_> {
    /// One `APIGroupDiscovery`, without its own tag and length.
    fn group(&mut self, g: &APIGroupDiscovery, out: &mut Vec<u8>) {
        head(1, object_meta_len(&g.metadata.name), out);
        string(1, &g.metadata.name, out);
        out.extend_from_slice(&OBJECT_META_REST);
        for v in &g.versions {
            head(2, self.next(), out);
            string(1, &v.version, out);
            for r in &v.resources {
                head(2, self.next(), out);
                self.resource(r, out);
            }
            string(3, &v.freshness, out);
        }
    }

    fn resource(&mut self, r: &ad::APIResourceDiscovery, out: &mut Vec<u8>) {
        string(1, &r.resource, out);
        if let Some(k) = &r.response_kind {
            gvk(2, k, out);
        }
        string(3, &r.scope, out);
        string(4, &r.singular_resource, out);
        strings(5, r.verbs.iter().flatten(), out);
        strings(6, &r.short_names, out);
        strings(7, &r.categories, out);
        for s in &r.subresources {
            head(8, self.next(), out);
            string(1, &s.subresource, out);
            if let Some(k) = &s.response_kind {
                gvk(2, k, out);
            }
            for k in &s.accepted_types {
                gvk(3, k, out);
            }
            strings(4, s.verbs.iter().flatten(), out);
        }
    }

    /// Measured and written in the same order (tested against prost on
    /// every fixture), so there always is a next length.
    fn next(&mut self) -> usize {
        self.0.next().copied().unwrap_or_default()
    }
}

fn gvk(tag: u32, k: &ad::GroupVersionKind, out: &mut Vec<u8>) {
    head(tag, gvk_len(k), out);
    string(1, &k.group, out);
    string(2, &k.version, out);
    string(3, &k.kind, out);
}

/// A resource's own fields, without its subresources.
fn resource_fields_len(r: &ad::APIResourceDiscovery) -> usize {
    str_len(1, &r.resource)
        + r.response_kind.as_ref().map_or(0, |k| nested_len(2, gvk_len(k)))
        + str_len(3, &r.scope)
        + str_len(4, &r.singular_resource)
        + strings_len(5, r.verbs.iter().flatten())
        + strings_len(6, &r.short_names)
        + strings_len(7, &r.categories)
}

fn subresource_len(s: &ad::APISubresourceDiscovery) -> usize {
    str_len(1, &s.subresource)
        + s.response_kind.as_ref().map_or(0, |k| nested_len(2, gvk_len(k)))
        + s.accepted_types.iter().map(|k| nested_len(3, gvk_len(k))).sum::<usize>()
        + strings_len(4, s.verbs.iter().flatten())
}

fn gvk_len(k: &ad::GroupVersionKind) -> usize {
    str_len(1, &k.group) + str_len(2, &k.version) + str_len(3, &k.kind)
}

fn object_meta_len(name: &str) -> usize {
    str_len(1, name) + OBJECT_META_REST.len()
}

fn nested_len(tag: u32, len: usize) -> usize {
    key_len(tag) + encoded_len_varint(len as u64) + len
}

fn str_len(tag: u32, s: &str) -> usize {
    nested_len(tag, s.len())
}

fn strings_len<'a>(tag: u32, all: impl IntoIterator<Item = &'a ad::Str>) -> usize {
    all.into_iter().map(|s| str_len(tag, s)).sum()
}

/// A length-delimited field's tag and length.
fn head(tag: u32, len: usize, out: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(len as u64, out);
}

fn string(tag: u32, s: &str, out: &mut Vec<u8>) {
    head(tag, s.len(), out);
    out.extend_from_slice(s.as_bytes());
}

fn strings<'a>(tag: u32, all: impl IntoIterator<Item = &'a ad::Str>, out: &mut Vec<u8>) {
    for s in all {
        string(tag, s, out);
    }
}

/// Decodes a protobuf body back into the JSON types (tests and clients).
pub fn decode(body: &[u8]) -> Result<APIGroupDiscoveryList, String> {
    let raw = body.strip_prefix(b"k8s\x00").ok_or("missing the k8s protobuf magic")?;
    let unknown = pbrt::Unknown::decode(raw).map_err(|e| e.to_string())?;
    let tm = unknown.type_meta.unwrap_or_default();
    let list = pbd::ApiGroupDiscoveryList::decode(unknown.raw.unwrap_or_default().as_slice()).map_err(|e| e.to_string())?;
    let kind = |k: pbmeta::GroupVersionKind| ad::GroupVersionKind {
        group: k.group.unwrap_or_default().into(),
        version: k.version.unwrap_or_default().into(),
        kind: k.kind.unwrap_or_default().into(),
    };
    let strs = |v: Vec<String>| v.into_iter().map(ad::Str::from).collect::<Vec<_>>();
    let verbs = |v: Vec<String>| if v.is_empty() { None } else { Some(strs(v)) };
    Ok(APIGroupDiscoveryList {
        kind: tm.kind.unwrap_or_default(),
        api_version: tm.api_version.unwrap_or_default(),
        metadata: Default::default(),
        items: list
            .items
            .into_iter()
            .map(|g| APIGroupDiscovery {
                metadata: ad::ObjectMeta { name: g.metadata.and_then(|m| m.name).unwrap_or_default().into() },
                versions: g
                    .versions
                    .into_iter()
                    .map(|v| ad::APIVersionDiscovery {
                        version: v.version.unwrap_or_default().into(),
                        freshness: v.freshness.unwrap_or_default().into(),
                        resources: v
                            .resources
                            .into_iter()
                            .map(|r| ad::APIResourceDiscovery {
                                resource: r.resource.unwrap_or_default().into(),
                                response_kind: r.response_kind.map(kind),
                                scope: r.scope.unwrap_or_default().into(),
                                singular_resource: r.singular_resource.unwrap_or_default().into(),
                                verbs: verbs(r.verbs),
                                short_names: strs(r.short_names),
                                categories: strs(r.categories),
                                subresources: r
                                    .subresources
                                    .into_iter()
                                    .map(|s| ad::APISubresourceDiscovery {
                                        subresource: s.subresource.unwrap_or_default().into(),
                                        response_kind: s.response_kind.map(kind),
                                        accepted_types: s.accepted_types.into_iter().map(kind).collect(),
                                        verbs: verbs(s.verbs),
                                    })
                                    .collect(),
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect(),
    })
}

#[cfg(test)]
#[path = "protobuf_tests.rs"]
mod tests;
