//! The discovery documents one fake apiserver serves, derived from a real
//! release's fixtures: aggregated v2 for `/api` and `/apis` exactly as
//! stored, and the unaggregated `APIVersions` / `APIGroupList` /
//! `APIResourceList` converted from them the way kube-apiserver builds both
//! from the same registry.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use super::digest::sha512_upper_hex;

/// An aggregated document with the ETag kube-apiserver would send for it:
/// quoted uppercase-hex SHA-512 of the list's JSON.
#[derive(Clone, Debug)]
pub struct Aggregated {
    pub body: Vec<u8>,
    pub etag: String,
}

impl Aggregated {
    pub fn new(doc: &Value) -> Aggregated {
        let body = serde_json::to_vec(doc).unwrap_or_default();
        let etag = format!("\"{}\"", sha512_upper_hex(&body));
        Aggregated { body, etag }
    }
}

/// What the fake serves; replaced whole when a test changes it at runtime.
#[derive(Clone, Debug)]
pub struct Documents {
    pub release: String,
    pub api: Aggregated,
    pub apis: Aggregated,
    /// `/api/v1` as upstream stores it.
    pub api_v1: Value,
    /// `"{group}/{version}"` → its unaggregated APIResourceList.
    pub group_versions: BTreeMap<String, Value>,
    pub group_list: Value,
    /// (group, version, resource) → what resource requests need to know.
    pub resources: BTreeMap<(String, String, String), Resource>,
}

#[derive(Clone, Debug)]
pub struct Resource {
    pub kind: String,
    pub namespaced: bool,
    pub subresources: BTreeSet<String>,
}

impl Documents {
    pub fn load(fixtures: &Path, release: &str) -> Result<Documents> {
        let dir = fixtures.join(release);
        let read = |f: &str| -> Result<Value> {
            let p = dir.join(f);
            let bytes = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
            serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", p.display()))
        };
        Documents::from_values(release, read("api.json")?, read("apis.json")?, read("api__v1.json")?)
    }

    pub fn from_values(release: &str, api: Value, apis: Value, api_v1: Value) -> Result<Documents> {
        for (name, doc) in [("api", &api), ("apis", &apis)] {
            if doc["kind"] != "APIGroupDiscoveryList" {
                bail!("{name} document is not an APIGroupDiscoveryList");
            }
        }
        let mut group_versions = BTreeMap::new();
        let mut groups = Vec::new();
        let mut resources = BTreeMap::new();
        for item in apis["items"].as_array().into_iter().flatten() {
            let group = item["metadata"]["name"].as_str().unwrap_or_default().to_string();
            let mut versions = Vec::new();
            for v in item["versions"].as_array().into_iter().flatten() {
                let version = v["version"].as_str().unwrap_or_default().to_string();
                let gv = format!("{group}/{version}");
                versions.push(json!({"groupVersion": gv, "version": version}));
                group_versions.insert(gv.clone(), resource_list(&gv, v));
                index_resources(&mut resources, &group, &version, v);
            }
            if let Some(first) = versions.first().cloned() {
                groups.push(json!({"name": group, "versions": versions, "preferredVersion": first}));
            }
        }
        for item in api["items"].as_array().into_iter().flatten() {
            for v in item["versions"].as_array().into_iter().flatten() {
                let version = v["version"].as_str().unwrap_or_default().to_string();
                index_resources(&mut resources, "", &version, v);
            }
        }
        Ok(Documents {
            release: release.to_string(),
            api: Aggregated::new(&api),
            apis: Aggregated::new(&apis),
            api_v1,
            group_versions,
            group_list: json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
            resources,
        })
    }

    pub fn minor(&self) -> String {
        self.release.rsplit('.').next().unwrap_or("0").to_string()
    }
}

/// Unaggregated APIResourceList for one version entry of an aggregated
/// document (`ConvertGroupVersionIntoToDiscovery` in reverse).
fn resource_list(gv: &str, version: &Value) -> Value {
    let mut out = Vec::new();
    for r in version["resources"].as_array().into_iter().flatten() {
        let name = r["resource"].as_str().unwrap_or_default();
        let namespaced = r["scope"] == "Namespaced";
        let mut entry = json!({
            "name": name,
            "singularName": r["singularResource"],
            "namespaced": namespaced,
            "kind": r["responseKind"]["kind"],
            "verbs": r["verbs"],
        });
        for f in ["shortNames", "categories"] {
            if r.get(f).is_some() {
                entry[f] = r[f].clone();
            }
        }
        out.push(entry);
        for s in r["subresources"].as_array().into_iter().flatten() {
            out.push(json!({
                "name": format!("{name}/{}", s["subresource"].as_str().unwrap_or_default()),
                "singularName": "",
                "namespaced": namespaced,
                "kind": s["responseKind"]["kind"],
                "verbs": s["verbs"],
            }));
        }
    }
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out})
}

type ResourceIndex = BTreeMap<(String, String, String), Resource>;

fn index_resources(into: &mut ResourceIndex, group: &str, version: &str, v: &Value) {
    for r in v["resources"].as_array().into_iter().flatten() {
        let name = r["resource"].as_str().unwrap_or_default().to_string();
        let resource = Resource {
            kind: r["responseKind"]["kind"].as_str().unwrap_or_default().to_string(),
            namespaced: r["scope"] == "Namespaced",
            subresources: r["subresources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s["subresource"].as_str().map(str::to_string))
                .collect(),
        };
        into.insert((group.to_string(), version.to_string(), name), resource);
    }
}
