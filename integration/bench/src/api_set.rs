//! Generated discovery for the benchmark: N group/version/resources over
//! three apiservers `a`, `b`, `c`, so that some are served by all, some by
//! two, some by one.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::{Value, json};

pub struct Entry {
    pub group: String,
    pub version: String,
    pub resource: String,
    /// bit 0: a, bit 1: b, bit 2: c
    pub mask: u8,
}

pub struct ApiSet {
    pub servers: Vec<String>,
    pub entries: Vec<Entry>,
}

const ALL: u8 = 0b111;

impl ApiSet {
    /// 50 → 10 groups × 1 version × 5 resources; 5,000 → 100 × 2 × 25.
    pub fn generate(gvrs: usize) -> ApiSet {
        let (groups, versions, resources) = if gvrs <= 50 { (10, 1, 5) } else { (100, 2, 25) };
        let mut entries = Vec::new();
        let mut i = 0usize;
        for g in 0..groups {
            for v in 0..versions {
                for r in 0..resources {
                    let mut mask = 0b001;
                    if !i.is_multiple_of(5) {
                        mask |= 0b010;
                    }
                    if i.is_multiple_of(3) {
                        mask |= 0b100;
                    }
                    entries.push(Entry {
                        group: format!("g{g}.bench.example"),
                        version: format!("v{}", v + 1),
                        resource: format!("r{r}"),
                        mask,
                    });
                    i += 1;
                }
            }
        }
        ApiSet { servers: vec!["a".into(), "b".into(), "c".into()], entries }
    }

    /// A namespaced get of a resource served by a and b only: the filter
    /// must reroute it (the expensive path).
    fn routed(&self) -> &Entry {
        self.entries.iter().find(|e| e.mask == 0b011).unwrap_or(&self.entries[0])
    }

    /// A namespaced get of a resource every apiserver serves: balanced, not
    /// pinned.
    pub fn unpinned_path(&self) -> String {
        let e = self.entries.iter().find(|e| e.mask == ALL).unwrap_or(&self.entries[0]);
        format!("/apis/{}/{}/namespaces/default/{}/obj1", e.group, e.version, e.resource)
    }

    pub fn routed_path(&self) -> String {
        let e = self.routed();
        format!("/apis/{}/{}/namespaces/default/{}/obj1", e.group, e.version, e.resource)
    }

    pub fn routed_servers(&self) -> Vec<String> {
        vec!["a".into(), "b".into()]
    }

    fn resource(name: &str) -> Value {
        json!({"resource": name, "responseKind": {"group": "", "version": "", "kind": name.to_uppercase()},
               "scope": "Namespaced", "singularResource": name, "verbs": ["get", "list"]})
    }

    pub fn apis(&self, server: usize) -> Value {
        let mut groups: Vec<Value> = Vec::new();
        for e in self.entries.iter().filter(|e| e.mask & (1 << server) != 0) {
            let gi = match groups.iter().position(|g| g["metadata"]["name"] == e.group.as_str()) {
                Some(i) => i,
                None => {
                    groups.push(json!({"metadata": {"name": e.group}, "versions": []}));
                    groups.len() - 1
                }
            };
            let versions = groups[gi]["versions"].as_array_mut().expect("array");
            let vi = match versions.iter().position(|v| v["version"] == e.version.as_str()) {
                Some(i) => i,
                None => {
                    versions.push(json!({"version": e.version, "resources": [], "freshness": "Current"}));
                    versions.len() - 1
                }
            };
            versions[vi]["resources"].as_array_mut().expect("array").push(Self::resource(&e.resource));
        }
        json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": groups})
    }

    pub fn apis_with_extra_group(&self, server: &str, group: &str) -> Value {
        let idx = self.servers.iter().position(|s| s == server).unwrap_or(0);
        let mut doc = self.apis(idx);
        doc["items"].as_array_mut().expect("array").push(json!({
            "metadata": {"name": group},
            "versions": [{"version": "v1", "resources": [Self::resource("things")], "freshness": "Current"}],
        }));
        doc
    }

    pub fn write(&self, dir: &Path) -> Result<Vec<(String, PathBuf)>> {
        let core = json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
            "items": [{"metadata": {}, "versions": [{"version": "v1", "resources": [Self::resource("pods")], "freshness": "Current"}]}]});
        let mut out = Vec::new();
        for (i, name) in self.servers.iter().enumerate() {
            let d = dir.join(name);
            std::fs::create_dir_all(&d)?;
            std::fs::write(d.join("api.json"), serde_json::to_vec(&core)?)?;
            std::fs::write(d.join("apis.json"), serde_json::to_vec(&self.apis(i))?)?;
            out.push((name.clone(), d));
        }
        Ok(out)
    }

    /// The routing decisions as a Lua table literal: group → version →
    /// resource → {override hosts, max retries}, for every strict subset.
    pub fn lua_table(&self, address: &dyn Fn(&str) -> String) -> String {
        let mut out = String::from("{\n");
        let mut by_group: std::collections::BTreeMap<&str, std::collections::BTreeMap<&str, Vec<&Entry>>> = Default::default();
        for e in self.entries.iter().filter(|e| e.mask != ALL) {
            by_group.entry(&e.group).or_default().entry(&e.version).or_default().push(e);
        }
        for (g, versions) in by_group {
            out.push_str(&format!("  [\"{g}\"] = {{\n"));
            for (v, entries) in versions {
                out.push_str(&format!("    [\"{v}\"] = {{\n"));
                for e in entries {
                    let hosts: Vec<String> = (0..3).filter(|i| e.mask & (1 << i) != 0).map(|i| address(&self.servers[i])).collect();
                    out.push_str(&format!("      [\"{}\"] = {{\"{}\", \"{}\"}},\n", e.resource, hosts.join(","), hosts.len() - 1));
                }
                out.push_str("    },\n");
            }
            out.push_str("  },\n");
        }
        out.push('}');
        out
    }
}
