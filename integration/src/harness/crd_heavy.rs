//! A CRD-heavy cluster's discovery: the real v1.37 `/apis` plus `groups`
//! generated CRD groups (two versions, two resources each, with categories
//! and short names as crossplane-style providers have). 3,000 groups make a
//! 5.5 MB aggregated document — the size issue 11 measured with.

use serde_json::{Value, json};

use super::fixtures_dir;

fn fixture(name: &str) -> Value {
    let path = fixtures_dir().join("v1.37").join(name);
    std::fs::read(&path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or(Value::Null)
}

/// The v1.37 aggregated `/apis` with `groups` extra CRD groups appended.
pub fn apis(groups: usize) -> Value {
    apis_revision(groups, 0)
}

/// [`apis`] with every CRD group changed by `revision` (its short names):
/// a new revision is a document whose every group must be merged and
/// encoded again.
pub fn apis_revision(groups: usize, revision: usize) -> Value {
    let mut apis = fixture("apis.json");
    let template = apis["items"][0]["versions"][0]["resources"][0].clone();
    let mut extra = Vec::with_capacity(groups);
    for i in 0..groups {
        let resource = |plural: String| {
            let mut r = template.clone();
            r["resource"] = json!(plural);
            r["singularResource"] = json!(format!("widget{i}"));
            r["responseKind"] = json!({"group": "", "version": "", "kind": format!("Widget{i}")});
            r["categories"] = json!(["all", "example"]);
            r["shortNames"] = json!([if revision == 0 { format!("w{i}") } else { format!("w{i}r{revision}") }]);
            r
        };
        let versions: Vec<Value> = ["v1", "v1beta1"]
            .iter()
            .map(|v| json!({"version": v, "resources": [resource(format!("widgets{i}")), resource(format!("gadgets{i}"))], "freshness": "Current"}))
            .collect();
        extra.push(json!({"metadata": {"name": format!("crd{i}.example.com")}, "versions": versions}));
    }
    if let Some(items) = apis["items"].as_array_mut() {
        items.extend(extra);
    }
    apis
}

/// The fake apiserver's `/__fake/documents` body serving [`apis`]`(groups)`
/// with v1.37's `/api` and `/api/v1`.
pub fn fake_documents(groups: usize) -> Value {
    json!({"api": fixture("api.json"), "apis": apis(groups), "apiV1": fixture("api__v1.json")})
}
