//! The merged document in every form the front door sends, encoded once per
//! change so serving it costs a pointer copy.

use std::collections::BTreeMap;
use std::io::Write;

use bytes::Bytes;
use serde_json::json;

use super::peer_aggregated;
use crate::apidiscovery::{self as ad, APIGroupDiscovery, APIGroupDiscoveryList, etag, go_json, protobuf};

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
            Bytes::from(enc.finish().unwrap_or_default())
        });
        Encoded { identity: Bytes::from(body), gzip }
    }
}

#[derive(Debug, Clone)]
pub struct MergedDocument {
    pub items: Vec<APIGroupDiscovery>,
    /// Quoted, as sent in `ETag`.
    pub etag: String,
    pub json: Encoded,
    pub protobuf: Encoded,
    /// Unaggregated `APIGroupList` of the merged groups (no ETag, as kube).
    pub group_list: Encoded,
    /// Apiservers whose views were merged.
    pub sources: Vec<String>,
}

impl MergedDocument {
    pub fn build<G: std::borrow::Borrow<Vec<APIGroupDiscovery>>>(servers: &BTreeMap<String, G>) -> MergedDocument {
        let items = peer_aggregated::merge(servers);
        let list = APIGroupDiscoveryList {
            kind: ad::KIND.into(),
            api_version: ad::API_VERSION.into(),
            metadata: Default::default(),
            items,
        };
        let mut json = go_json(&list);
        let etag = etag::of_served_json(&json).unwrap_or_else(|| etag::etag(&list.items));
        json.push(b'\n');
        let protobuf = protobuf::encode(&list);
        let group_list = group_list_json(&list.items);
        MergedDocument {
            etag,
            json: Encoded::new(json),
            protobuf: Encoded::new(protobuf),
            group_list: Encoded::new(group_list),
            sources: servers.keys().cloned().collect(),
            items: list.items,
        }
    }
}

/// The unaggregated `APIGroupList` for the same groups: versions in the
/// merged preference order, the first one preferred.
fn group_list_json(items: &[APIGroupDiscovery]) -> Vec<u8> {
    let groups: Vec<serde_json::Value> = items
        .iter()
        .filter(|g| !g.name().is_empty() && !g.versions.is_empty())
        .map(|g| {
            let versions: Vec<serde_json::Value> = g
                .versions
                .iter()
                .map(|v| json!({"groupVersion": format!("{}/{}", g.name(), v.version), "version": v.version}))
                .collect();
            json!({"name": g.name(), "versions": versions, "preferredVersion": versions[0]})
        })
        .collect();
    let mut out = go_json(&json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}));
    out.push(b'\n');
    out
}
