//! `apidiscovery.k8s.io/v2` types, complete, serialised exactly as Go's
//! `encoding/json` serialises `k8s.io/api/apidiscovery/v2` (field order,
//! `omitempty`, `null` for a nil `verbs`, HTML-safe escaping) so the ETag of a
//! document we build is the one kube-apiserver would compute for it.

use serde::{Deserialize, Serialize};

fn is_empty<T>(v: &[T]) -> bool {
    v.is_empty()
}

/// `metav1.ObjectMeta` as discovery uses it: only `name` is ever set. From
/// Kubernetes 1.34 `creationTimestamp` is `omitzero`; older servers send
/// `"creationTimestamp": null`, which decodes to nothing here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// `metav1.GroupVersionKind` (no `omitempty` on any field).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct APISubresourceDiscovery {
    pub subresource: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_kind: Option<GroupVersionKind>,
    #[serde(default, skip_serializing_if = "is_empty")]
    pub accepted_types: Vec<GroupVersionKind>,
    /// Go `[]string` without omitempty: `None` is `null`.
    #[serde(default)]
    pub verbs: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct APIResourceDiscovery {
    pub resource: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_kind: Option<GroupVersionKind>,
    #[serde(default)]
    pub scope: String,
    #[serde(default)]
    pub singular_resource: String,
    #[serde(default)]
    pub verbs: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "is_empty")]
    pub short_names: Vec<String>,
    #[serde(default, skip_serializing_if = "is_empty")]
    pub categories: Vec<String>,
    #[serde(default, skip_serializing_if = "is_empty")]
    pub subresources: Vec<APISubresourceDiscovery>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct APIVersionDiscovery {
    pub version: String,
    #[serde(default, skip_serializing_if = "is_empty")]
    pub resources: Vec<APIResourceDiscovery>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub freshness: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct APIGroupDiscovery {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "is_empty")]
    pub versions: Vec<APIVersionDiscovery>,
}

impl APIGroupDiscovery {
    pub fn name(&self) -> &str {
        &self.metadata.name
    }
}

/// `metav1.ListMeta`: always `{}` in discovery.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListMeta {}

pub const KIND: &str = "APIGroupDiscoveryList";
pub const API_VERSION: &str = "apidiscovery.k8s.io/v2";

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

/// Go `encoding/json` output: serde_json's, plus the HTML-safe escapes Go
/// applies inside strings (`<`, `>`, `&`, U+2028, U+2029). Those characters
/// can only occur inside strings in JSON, so a byte-level rewrite is exact.
pub fn go_json<T: Serialize>(v: &T) -> Vec<u8> {
    let raw = serde_json::to_vec(v).unwrap_or_default();
    if !raw.iter().any(|b| matches!(b, b'<' | b'>' | b'&' | 0xE2)) {
        return raw;
    }
    let mut out = Vec::with_capacity(raw.len() + 16);
    let mut i = 0;
    while let Some(&b) = raw.get(i) {
        match b {
            b'<' => out.extend_from_slice(b"\\u003c"),
            b'>' => out.extend_from_slice(b"\\u003e"),
            b'&' => out.extend_from_slice(b"\\u0026"),
            0xE2 if raw.get(i + 1) == Some(&0x80) && matches!(raw.get(i + 2), Some(0xA8 | 0xA9)) => {
                out.extend_from_slice(if raw.get(i + 2) == Some(&0xA8) { b"\\u2028" } else { b"\\u2029" });
                i += 3;
                continue;
            }
            _ => out.push(b),
        }
        i += 1;
    }
    out
}

/// Converts an unaggregated `APIResourceList` into the aggregated form,
/// as kube-apiserver's `ConvertGroupVersionIntoToDiscovery` does: entries
/// `parent/sub` become subresources of `parent`, in source order.
pub fn version_from_resource_list(version: &str, list: &crate::discover::documents::ApiResourceList) -> APIVersionDiscovery {
    let mut resources: Vec<APIResourceDiscovery> = Vec::new();
    for r in list.resources.iter().filter(|r| !r.name.contains('/')) {
        resources.push(APIResourceDiscovery {
            resource: r.name.clone(),
            response_kind: Some(GroupVersionKind {
                group: r.group.clone().unwrap_or_default(),
                version: r.version.clone().unwrap_or_default(),
                kind: r.kind.clone(),
            }),
            scope: if r.namespaced { "Namespaced" } else { "Cluster" }.into(),
            singular_resource: r.singular_name.clone(),
            verbs: Some(r.verbs.clone()),
            short_names: r.short_names.clone(),
            categories: r.categories.clone(),
            subresources: vec![],
        });
    }
    for r in &list.resources {
        let Some((parent, sub)) = r.name.split_once('/') else { continue };
        let Some(p) = resources.iter_mut().find(|p| p.resource == parent) else { continue };
        p.subresources.push(APISubresourceDiscovery {
            subresource: sub.to_string(),
            response_kind: Some(GroupVersionKind {
                group: r.group.clone().unwrap_or_default(),
                version: r.version.clone().unwrap_or_default(),
                kind: r.kind.clone(),
            }),
            accepted_types: vec![],
            verbs: Some(r.verbs.clone()),
        });
    }
    APIVersionDiscovery { version: version.to_string(), resources, freshness: "Current".into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialises_like_go() {
        let g = APIGroupDiscovery {
            metadata: ObjectMeta { name: "apps".into() },
            versions: vec![APIVersionDiscovery {
                version: "v1".into(),
                resources: vec![APIResourceDiscovery {
                    resource: "deployments".into(),
                    response_kind: Some(GroupVersionKind { group: "".into(), version: "".into(), kind: "Deployment".into() }),
                    scope: "Namespaced".into(),
                    singular_resource: "deployment".into(),
                    verbs: None,
                    short_names: vec![],
                    categories: vec!["a<b>&c".into()],
                    subresources: vec![],
                }],
                freshness: "Current".into(),
            }],
        };
        let list = APIGroupDiscoveryList { items: vec![g, APIGroupDiscovery::default()], ..Default::default() };
        assert_eq!(
            String::from_utf8(go_json(&list)).unwrap(),
            r#"{"metadata":{},"items":[{"metadata":{"name":"apps"},"versions":[{"version":"v1","resources":[{"resource":"deployments","responseKind":{"group":"","version":"","kind":"Deployment"},"scope":"Namespaced","singularResource":"deployment","verbs":null,"categories":["a\u003cb\u003e\u0026c"]}],"freshness":"Current"}]},{"metadata":{}}]}"#
        );
    }

    #[test]
    fn old_creation_timestamps_decode_away() {
        let g: APIGroupDiscovery = serde_json::from_str(r#"{"metadata":{"name":"apps","creationTimestamp":null},"versions":[]}"#).unwrap();
        assert_eq!(String::from_utf8(go_json(&g)).unwrap(), r#"{"metadata":{"name":"apps"}}"#);
    }
}
