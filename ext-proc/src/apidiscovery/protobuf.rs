//! The protobuf form of `APIGroupDiscoveryList`: kube's
//! `k8s.io/api/apidiscovery/v2` messages (schema in `protos/k8s.io/`) inside
//! the `k8s\x00` + `runtime.Unknown` envelope kube's protobuf serializer
//! writes.

use mvp_protos::k8s::io::api::apidiscovery::v2 as pbd;
use mvp_protos::k8s::io::apimachinery::pkg::apis::meta::v1 as pbmeta;
use mvp_protos::k8s::io::apimachinery::pkg::runtime as pbrt;
use prost::Message;

use super::{self as ad, APIGroupDiscovery, APIGroupDiscoveryList};

fn gvk(k: &ad::GroupVersionKind) -> pbmeta::GroupVersionKind {
    pbmeta::GroupVersionKind { group: Some(k.group.clone()), version: Some(k.version.clone()), kind: Some(k.kind.clone()) }
}

/// `"k8s\x00"` + `runtime.Unknown{typeMeta, raw}` as kube's protobuf
/// serializer writes it.
pub fn encode(list: &APIGroupDiscoveryList) -> Vec<u8> {
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
pub fn decode(body: &[u8]) -> Result<APIGroupDiscoveryList, String> {
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
