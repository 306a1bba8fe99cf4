//! The merged `/openapi/v2`: the union of every apiserver's `paths` and
//! `definitions`, in both forms kube serves (JSON and the gnostic protobuf
//! `openapi.v2.Document` kubectl asks for).
//!
//! The documents come ordered newest release first (`info.version`), so a
//! type every server defines (`io.k8s.api.core.v1.Pod`) is described as the
//! newest release does; a name only some servers define comes from the
//! first that does. Entries are written sorted by name, as kube writes them
//! (Go sorts map keys), and copied as the exact bytes the apiserver sent.
//! When no server adds a name to the first, the result IS the first
//! document, byte for byte (same ETag), and the apiserver's own answer can
//! pass through.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::protowire::{self, WireError};
use crate::apidiscovery::go_json;

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("protobuf: {0}")]
    Wire(#[from] WireError),
    #[error("no documents")]
    Empty,
}

/// `openapi.v2.Document` field numbers (gnostic `openapiv2/OpenAPIv2.proto`).
mod field {
    /// `Document.paths` (`Paths`).
    pub const DOCUMENT_PATHS: u32 = 8;
    /// `Document.definitions` (`Definitions`).
    pub const DOCUMENT_DEFINITIONS: u32 = 9;
    /// `Paths.path` (`repeated NamedPathItem`); `Paths.vendor_extension` is 1.
    pub const PATHS_PATH: u32 = 2;
    /// `Definitions.additional_properties` (`repeated NamedSchema`).
    pub const DEFINITIONS_ENTRY: u32 = 1;
    /// `Named*.name`.
    pub const NAME: u32 = 1;
}

/// The two maps the merge unions, by their JSON names.
const MERGED_KEYS: [&str; 2] = ["paths", "definitions"];

/// `info.version` as numbers (`v1.20.2` → `[1, 20, 2]`), for ordering
/// documents newest first; unparsable parts count as 0.
pub fn release(json: &[u8]) -> Vec<u64> {
    #[derive(Deserialize)]
    struct Info<'a> {
        #[serde(borrow)]
        version: Option<std::borrow::Cow<'a, str>>,
    }
    #[derive(Deserialize)]
    struct Doc<'a> {
        #[serde(borrow)]
        info: Option<Info<'a>>,
    }
    let version = serde_json::from_slice::<Doc<'_>>(json).ok().and_then(|d| d.info?.version).unwrap_or_default();
    if version.is_empty() {
        return Vec::new();
    }
    version
        .trim_start_matches('v')
        .split(['.', '-', '+'])
        .take(3)
        .map(|p| p.chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap_or(0))
        .collect()
}

/// A JSON object's members in document order.
struct Ordered<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Ordered<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Ordered<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, mut m: M) -> Result<Ordered<'a>, M::Error> {
                let mut out = Vec::new();
                while let Some(entry) = m.next_entry::<String, &'de RawValue>()? {
                    out.push(entry);
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// A merge of documents (first = base) into one; `None`: nothing to add to
/// the base.
pub type Merge = fn(&[&[u8]]) -> Result<Option<Vec<u8>>, MergeError>;

/// Merges JSON documents (first = base). `None`: nothing to add to the base.
pub fn merge_json(docs: &[&[u8]]) -> Result<Option<Vec<u8>>, MergeError> {
    let parsed: Vec<Ordered<'_>> = docs.iter().map(|d| serde_json::from_slice(d)).collect::<Result<_, _>>()?;
    let base = parsed.first().ok_or(MergeError::Empty)?;
    let mut maps: BTreeMap<&str, BTreeMap<String, &RawValue>> = BTreeMap::new();
    let mut added = false;
    for (i, doc) in parsed.iter().enumerate() {
        for (key, value) in &doc.0 {
            let Some(name) = MERGED_KEYS.iter().find(|k| *k == key) else { continue };
            let entries: BTreeMap<String, &RawValue> = serde_json::from_str(value.get())?;
            let merged = maps.entry(name).or_default();
            for (k, v) in entries {
                if let std::collections::btree_map::Entry::Vacant(e) = merged.entry(k) {
                    added |= i > 0;
                    e.insert(v);
                }
            }
        }
    }
    // A document without `paths` or `definitions` at all: the others' are
    // appended after the base's own members.
    let missing: Vec<&str> = MERGED_KEYS.iter().copied().filter(|k| maps.contains_key(k) && !base.0.iter().any(|(b, _)| b == k)).collect();
    if !added {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(docs.iter().map(|d| d.len()).max().unwrap_or(0) + 4096);
    out.push(b'{');
    let members = base.0.iter().map(|(k, v)| (k.as_str(), Some(*v))).chain(missing.iter().map(|k| (*k, None)));
    for (i, (key, value)) in members.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend(go_json(&key));
        out.push(b':');
        match (maps.get(key), value) {
            (Some(entries), _) => {
                out.push(b'{');
                for (j, (k, v)) in entries.iter().enumerate() {
                    if j > 0 {
                        out.push(b',');
                    }
                    out.extend(go_json(k));
                    out.push(b':');
                    out.extend_from_slice(v.get().as_bytes());
                }
                out.push(b'}');
            }
            (None, Some(v)) => out.extend_from_slice(v.get().as_bytes()),
            (None, None) => out.extend_from_slice(b"null"),
        }
    }
    out.push(b'}');
    Ok(Some(out))
}

/// One merged `Document` field: the base's members other than the entries
/// (`Paths`' vendor extensions), then the entries by name.
type MergedField<'a> = (Vec<&'a [u8]>, BTreeMap<&'a str, &'a [u8]>);

/// Merges protobuf documents (first = base). `None`: nothing to add.
pub fn merge_protobuf(docs: &[&[u8]]) -> Result<Option<Vec<u8>>, MergeError> {
    let base = protowire::fields(docs.first().ok_or(MergeError::Empty)?)?;
    // Per merged Document field: the base's other members (Paths'
    // vendor extensions), then entries by name, first document wins.
    let mut merged: BTreeMap<u32, MergedField<'_>> = BTreeMap::new();
    let mut added = false;
    for (i, doc) in docs.iter().enumerate() {
        let fields = if i == 0 { base.clone() } else { protowire::fields(doc)? };
        for f in fields {
            let entry_number = match f.number {
                field::DOCUMENT_PATHS => field::PATHS_PATH,
                field::DOCUMENT_DEFINITIONS => field::DEFINITIONS_ENTRY,
                _ => continue,
            };
            let (others, entries) = merged.entry(f.number).or_default();
            for e in protowire::fields(f.payload.unwrap_or_default())? {
                if e.number != entry_number {
                    if i == 0 {
                        others.push(e.raw);
                    }
                    continue;
                }
                let name = protowire::string_field(e.payload.unwrap_or_default(), field::NAME)?.unwrap_or("");
                if !entries.contains_key(name) {
                    added |= i > 0;
                    entries.insert(name, e.raw);
                }
            }
        }
    }
    if !added {
        return Ok(None);
    }
    let encode = |number: u32, out: &mut Vec<u8>| {
        if let Some((others, entries)) = merged.get(&number) {
            let payload: Vec<u8> = others.iter().chain(entries.values()).flat_map(|r| r.iter().copied()).collect();
            protowire::write_message(out, number, &payload);
        }
    };
    let mut out = Vec::with_capacity(docs.iter().map(|d| d.len()).max().unwrap_or(0) + 4096);
    let mut written = Vec::new();
    for f in &base {
        if merged.contains_key(&f.number) {
            // Every occurrence of a message field merges into one (protobuf
            // semantics); written once, where the first stood.
            if !written.contains(&f.number) {
                encode(f.number, &mut out);
                written.push(f.number);
            }
        } else {
            out.extend_from_slice(f.raw);
        }
    }
    for number in merged.keys() {
        if !written.contains(number) {
            encode(*number, &mut out);
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::encoding::{WireType, encode_key, encode_varint};

    fn doc(version: &str, paths: &[&str], definitions: &[(&str, &str)]) -> String {
        let paths: Vec<String> = paths.iter().map(|p| format!("{p:?}:{{\"get\":{{\"operationId\":\"x\"}}}}")).collect();
        let defs: Vec<String> = definitions.iter().map(|(n, d)| format!("{n:?}:{{\"description\":{d:?}}}")).collect();
        format!(
            r#"{{"swagger":"2.0","info":{{"title":"Kubernetes","version":"{version}"}},"paths":{{{}}},"definitions":{{{}}},"security":[{{"BearerToken":[]}}]}}"#,
            paths.join(","),
            defs.join(",")
        )
    }

    #[test]
    fn json_union_sorted_first_wins_rest_verbatim() {
        let a = doc("v1.21.0", &["/api/", "/apis/apps/v1/deployments"], &[("io.k8s.Pod", "new <pod>"), ("io.k8s.apps.v1.Deployment", "d")]);
        let b = doc("v1.20.2", &["/api/", "/apis/batch/v2alpha1/cronjobs"], &[("io.k8s.Pod", "old"), ("io.k8s.batch.v2alpha1.CronJob", "c")]);
        let merged = merge_json(&[a.as_bytes(), b.as_bytes()]).unwrap().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&merged).unwrap();
        assert_eq!(v["paths"].as_object().unwrap().keys().collect::<Vec<_>>(), ["/api/", "/apis/apps/v1/deployments", "/apis/batch/v2alpha1/cronjobs"]);
        assert_eq!(v["definitions"]["io.k8s.Pod"]["description"], "new <pod>", "the first (newest) document's wins");
        assert_eq!(v["definitions"]["io.k8s.batch.v2alpha1.CronJob"]["description"], "c");
        assert_eq!(v["security"], serde_json::json!([{"BearerToken": []}]));
        let text = String::from_utf8(merged).unwrap();
        assert!(text.starts_with(r#"{"swagger":"2.0","info":"#), "members keep the base's order: {text}");
        assert!(text.contains(r#"{"description":"new <pod>"}"#), "values are copied as the apiserver sent them");
    }

    #[test]
    fn nothing_added_means_the_base_itself() {
        let a = doc("v1.21.0", &["/api/", "/x"], &[("P", "p")]);
        let b = doc("v1.20.2", &["/api/"], &[("P", "other")]);
        assert!(merge_json(&[a.as_bytes(), b.as_bytes()]).unwrap().is_none());
        assert!(merge_json(&[a.as_bytes()]).unwrap().is_none());
        assert!(merge_json(&[a.as_bytes(), b"{not json"]).is_err());
        assert!(merge_json(&[]).is_err());
    }

    #[test]
    fn releases_order_newest_first() {
        assert_eq!(release(doc("v1.20.2", &[], &[]).as_bytes()), [1, 20, 2]);
        assert_eq!(release(doc("v1.33.0-rc.1+abc", &[], &[]).as_bytes()), [1, 33, 0]);
        assert!(release(doc("v1.9.9", &[], &[]).as_bytes()) < release(doc("v1.10.0", &[], &[]).as_bytes()));
        assert!(release(b"{}").is_empty());
    }

    fn named(number: u32, name: &str, value: &[u8]) -> Vec<u8> {
        let mut entry = Vec::new();
        protowire::write_message(&mut entry, field::NAME, name.as_bytes());
        protowire::write_message(&mut entry, 2, value);
        let mut out = Vec::new();
        protowire::write_message(&mut out, number, &entry);
        out
    }

    fn pb(paths: &[&str], definitions: &[(&str, &str)]) -> Vec<u8> {
        let mut doc = Vec::new();
        protowire::write_message(&mut doc, 1, b"2.0");
        let mut p = Vec::new();
        protowire::write_message(&mut p, 1, b"vendor-extension");
        for path in paths {
            p.extend(named(field::PATHS_PATH, path, b"item"));
        }
        protowire::write_message(&mut doc, field::DOCUMENT_PATHS, &p);
        let d: Vec<u8> = definitions.iter().flat_map(|(n, v)| named(field::DEFINITIONS_ENTRY, n, v.as_bytes())).collect();
        protowire::write_message(&mut doc, field::DOCUMENT_DEFINITIONS, &d);
        encode_key(12, WireType::Varint, &mut doc);
        encode_varint(1, &mut doc);
        doc
    }

    #[test]
    fn protobuf_union_matches_a_document_built_whole() {
        let a = pb(&["/a", "/c"], &[("P", "new"), ("X", "x")]);
        let b = pb(&["/b", "/c"], &[("P", "old"), ("Y", "y")]);
        let merged = merge_protobuf(&[&a, &b]).unwrap().unwrap();
        assert_eq!(merged, pb(&["/a", "/b", "/c"], &[("P", "new"), ("X", "x"), ("Y", "y")]));
        assert!(merge_protobuf(&[&a, &pb(&["/a"], &[("X", "other")])]).unwrap().is_none());
        assert!(merge_protobuf(&[&a, b"\x42\x05ab"]).is_err());
    }
}
