//! `apidiscovery.k8s.io/v2`: the types, complete, serialised exactly as Go's
//! `encoding/json` serialises `k8s.io/api/apidiscovery/v2` (field order,
//! `omitempty`, `null` for a nil `verbs`; HTML-safe escaping in
//! [`go_json`]) so the ETag ([`etag`]) of a document we build is the one
//! kube-apiserver would compute for it; their protobuf form ([`protobuf`]);
//! and the media types.

pub mod etag;
pub mod go_json;
pub mod protobuf;

pub use go_json::go_json;

use serde::{Deserialize, Serialize};

/// Every name, verb and kind in the documents: ≤ 24 bytes is stored inline,
/// so a CRD-heavy server's 12,000 resources are not 200,000 small
/// allocations (their heap overhead alone was ~8 MB).
pub type Str = compact_str::CompactString;

fn is_empty<T>(v: &[T]) -> bool {
    v.is_empty()
}

/// `metav1.ObjectMeta` as discovery uses it: only `name` is ever set. From
/// Kubernetes 1.34 `creationTimestamp` is `omitzero`; older servers send
/// `"creationTimestamp": null`, which decodes to nothing here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    #[serde(default, skip_serializing_if = "Str::is_empty")]
    pub name: Str,
}

/// `metav1.GroupVersionKind` (no `omitempty` on any field).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: Str,
    #[serde(default)]
    pub version: Str,
    #[serde(default)]
    pub kind: Str,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct APISubresourceDiscovery {
    pub subresource: Str,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_kind: Option<GroupVersionKind>,
    #[serde(default, skip_serializing_if = "is_empty")]
    pub accepted_types: Vec<GroupVersionKind>,
    /// Go `[]string` without omitempty: `None` is `null`.
    #[serde(default)]
    pub verbs: Option<Vec<Str>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct APIResourceDiscovery {
    pub resource: Str,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_kind: Option<GroupVersionKind>,
    #[serde(default)]
    pub scope: Str,
    #[serde(default)]
    pub singular_resource: Str,
    #[serde(default)]
    pub verbs: Option<Vec<Str>>,
    #[serde(default, skip_serializing_if = "is_empty")]
    pub short_names: Vec<Str>,
    #[serde(default, skip_serializing_if = "is_empty")]
    pub categories: Vec<Str>,
    #[serde(default, skip_serializing_if = "is_empty")]
    pub subresources: Vec<APISubresourceDiscovery>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct APIVersionDiscovery {
    pub version: Str,
    #[serde(default, skip_serializing_if = "is_empty")]
    pub resources: Vec<APIResourceDiscovery>,
    #[serde(default, skip_serializing_if = "Str::is_empty")]
    pub freshness: Str,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct APIGroupDiscovery {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "is_empty")]
    pub versions: Vec<APIVersionDiscovery>,
}

/// A server's group as parsed, shared by its views and the merged
/// document's record of what it merged (by address: see `merge::merged`).
pub type SharedGroup = std::sync::Arc<APIGroupDiscovery>;

impl APIGroupDiscovery {
    pub fn name(&self) -> &str {
        &self.metadata.name
    }

    /// Drops the spare capacity deserializing leaves in every list (a
    /// `Vec` grows to 4 for its first item; most lists here hold one or
    /// two): a kept CRD-heavy view takes half the memory.
    pub fn shrink(&mut self) {
        self.versions.shrink_to_fit();
        for v in &mut self.versions {
            v.resources.shrink_to_fit();
            for r in &mut v.resources {
                r.verbs.iter_mut().for_each(Vec::shrink_to_fit);
                r.short_names.shrink_to_fit();
                r.categories.shrink_to_fit();
                r.subresources.shrink_to_fit();
                for s in &mut r.subresources {
                    s.verbs.iter_mut().for_each(Vec::shrink_to_fit);
                    s.accepted_types.shrink_to_fit();
                }
            }
        }
    }
}

/// `metav1.ListMeta`: always `{}` in discovery.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListMeta {}

pub const KIND: &str = "APIGroupDiscoveryList";
pub const API_VERSION: &str = "apidiscovery.k8s.io/v2";

/// The aggregated document's media types, as kube-apiserver sends them.
pub const JSON_CONTENT_TYPE: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
pub const PROTOBUF_CONTENT_TYPE: &str =
    "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct APIGroupDiscoveryList {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(default)]
    pub metadata: ListMeta,
    #[serde(default)]
    pub items: Vec<APIGroupDiscovery>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_creation_timestamps_decode_away() {
        let g: APIGroupDiscovery = serde_json::from_str(r#"{"metadata":{"name":"apps","creationTimestamp":null},"versions":[]}"#).unwrap();
        assert_eq!(String::from_utf8(go_json(&g)).unwrap(), r#"{"metadata":{"name":"apps"}}"#);
    }
}
