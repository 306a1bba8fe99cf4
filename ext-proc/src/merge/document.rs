//! The merged document in every form the front door sends, encoded once per
//! change so serving it costs a pointer copy.

use std::collections::BTreeMap;
use std::io::Write;

use bytes::Bytes;
use mvp_protos::k8s::io::api::apidiscovery::v2 as pbd;
use mvp_protos::k8s::io::apimachinery::pkg::apis::meta::v1 as pbmeta;
use mvp_protos::k8s::io::apimachinery::pkg::runtime as pbrt;
use prost::Message;
use serde_json::json;

use super::{etag, peer_aggregated};
use crate::apidiscovery::{self as ad, APIGroupDiscovery, APIGroupDiscoveryList, go_json};

/// kube-apiserver gzips a response only above this size
/// (`responsewriters.defaultGzipThresholdBytes`).
pub const GZIP_THRESHOLD: usize = 128 * 1024;

pub const JSON_CONTENT_TYPE: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
pub const PROTOBUF_CONTENT_TYPE: &str =
    "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// One encoding of the document, with its gzip form when kube would gzip it.
#[derive(Debug, Clone)]
pub struct Encoded {
    pub identity: Bytes,
    pub gzip: Option<Bytes>,
}

impl Encoded {
    fn new(body: Vec<u8>) -> Encoded {
        let gzip = (body.len() > GZIP_THRESHOLD).then(|| {
            let mut enc = flate2::write::GzEncoder::new(Vec::with_capacity(body.len() / 4), flate2::Compression::default());
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
    pub fn build(servers: &BTreeMap<String, Vec<APIGroupDiscovery>>) -> MergedDocument {
        let items = peer_aggregated::merge(servers);
        let etag = etag::etag(&items);
        let list = APIGroupDiscoveryList {
            kind: ad::KIND.into(),
            api_version: ad::API_VERSION.into(),
            metadata: Default::default(),
            items,
        };
        let mut json = go_json(&list);
        json.push(b'\n');
        let protobuf = protobuf_envelope(&list);
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

fn gvk(k: &ad::GroupVersionKind) -> pbmeta::GroupVersionKind {
    pbmeta::GroupVersionKind { group: Some(k.group.clone()), version: Some(k.version.clone()), kind: Some(k.kind.clone()) }
}

/// `"k8s\x00"` + `runtime.Unknown{typeMeta, raw}` as kube's protobuf
/// serializer writes it.
fn protobuf_envelope(list: &APIGroupDiscoveryList) -> Vec<u8> {
    let msg = pbd::ApiGroupDiscoveryList {
        metadata: Some(pbmeta::ListMeta::default()),
        items: list
            .items
            .iter()
            .map(|g| pbd::ApiGroupDiscovery {
                metadata: Some(pbmeta::ObjectMeta { name: Some(g.metadata.name.clone()) }),
                versions: g
                    .versions
                    .iter()
                    .map(|v| pbd::ApiVersionDiscovery {
                        version: Some(v.version.clone()),
                        freshness: Some(v.freshness.clone()),
                        resources: v
                            .resources
                            .iter()
                            .map(|r| pbd::ApiResourceDiscovery {
                                resource: Some(r.resource.clone()),
                                response_kind: r.response_kind.as_ref().map(gvk),
                                scope: Some(r.scope.clone()),
                                singular_resource: Some(r.singular_resource.clone()),
                                verbs: r.verbs.clone().unwrap_or_default(),
                                short_names: r.short_names.clone(),
                                categories: r.categories.clone(),
                                subresources: r
                                    .subresources
                                    .iter()
                                    .map(|s| pbd::ApiSubresourceDiscovery {
                                        subresource: Some(s.subresource.clone()),
                                        response_kind: s.response_kind.as_ref().map(gvk),
                                        accepted_types: s.accepted_types.iter().map(gvk).collect(),
                                        verbs: s.verbs.clone().unwrap_or_default(),
                                    })
                                    .collect(),
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect(),
    };
    let unknown = pbrt::Unknown {
        type_meta: Some(pbrt::TypeMeta { api_version: Some(ad::API_VERSION.into()), kind: Some(ad::KIND.into()) }),
        raw: Some(msg.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = b"k8s\x00".to_vec();
    unknown.encode(&mut out).unwrap_or_default();
    out
}

/// Decodes a protobuf body back into the JSON types (tests and clients).
pub fn decode_protobuf(body: &[u8]) -> Result<APIGroupDiscoveryList, String> {
    let raw = body.strip_prefix(b"k8s\x00").ok_or("missing the k8s protobuf magic")?;
    let unknown = pbrt::Unknown::decode(raw).map_err(|e| e.to_string())?;
    let tm = unknown.type_meta.unwrap_or_default();
    let list = pbd::ApiGroupDiscoveryList::decode(unknown.raw.unwrap_or_default().as_slice()).map_err(|e| e.to_string())?;
    let kind = |k: pbmeta::GroupVersionKind| ad::GroupVersionKind {
        group: k.group.unwrap_or_default(),
        version: k.version.unwrap_or_default(),
        kind: k.kind.unwrap_or_default(),
    };
    let verbs = |v: Vec<String>| if v.is_empty() { None } else { Some(v) };
    Ok(APIGroupDiscoveryList {
        kind: tm.kind.unwrap_or_default(),
        api_version: tm.api_version.unwrap_or_default(),
        metadata: Default::default(),
        items: list
            .items
            .into_iter()
            .map(|g| APIGroupDiscovery {
                metadata: ad::ObjectMeta { name: g.metadata.and_then(|m| m.name).unwrap_or_default() },
                versions: g
                    .versions
                    .into_iter()
                    .map(|v| ad::APIVersionDiscovery {
                        version: v.version.unwrap_or_default(),
                        freshness: v.freshness.unwrap_or_default(),
                        resources: v
                            .resources
                            .into_iter()
                            .map(|r| ad::APIResourceDiscovery {
                                resource: r.resource.unwrap_or_default(),
                                response_kind: r.response_kind.map(kind),
                                scope: r.scope.unwrap_or_default(),
                                singular_resource: r.singular_resource.unwrap_or_default(),
                                verbs: verbs(r.verbs),
                                short_names: r.short_names,
                                categories: r.categories,
                                subresources: r
                                    .subresources
                                    .into_iter()
                                    .map(|s| ad::APISubresourceDiscovery {
                                        subresource: s.subresource.unwrap_or_default(),
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
