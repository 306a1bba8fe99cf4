//! The native build's routes with the module as their cluster specifier
//! (`envoy.router.cluster_specifier_plugin.dynamic_modules`): each route's
//! cluster named by the module, and one route action override per retry
//! count (`retries-N`: the route's own retry policy with N retries) for the
//! module to select for a pinned request — the retry count without the
//! `x-envoy-max-retries` header (`native-filter/src/retries.rs`).

use serde_json::{Value, json};

use mvp_contract::limits::MAX_LISTED_APISERVERS;

/// `routes` with every prefix route's cluster given by the module at
/// `module` (the merged documents' routes, matched by path, keep theirs).
pub fn by_module(routes: Vec<Value>, module: &str) -> Vec<Value> {
    routes
        .into_iter()
        .map(|mut r| {
            let prefix = r["match"].get("prefix").is_some();
            if let (true, Some(route)) = (prefix, r.get_mut("route").and_then(Value::as_object_mut))
                && let Some(Value::String(cluster)) = route.remove("cluster")
            {
                let policy = route.get("retry_policy").cloned().unwrap_or(Value::Null);
                let overrides: serde_json::Map<String, Value> = (0..MAX_LISTED_APISERVERS)
                    .map(|n| {
                        let mut p = policy.clone();
                        p["num_retries"] = json!(n);
                        (format!("retries-{n}"), json!({"retry_policy": p}))
                    })
                    .collect();
                route.insert(
                    "inline_cluster_specifier_plugin".into(),
                    json!({"extension": {
                        "name": "mvp.cluster",
                        "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.router.cluster_specifiers.dynamic_modules.v3.DynamicModuleClusterSpecifier",
                            "dynamic_module_config": {"module": {"local": {"filename": module}}, "do_not_close": true},
                            "specifier_name": "mvp.cluster",
                            "specifier_config": {"@type": "type.googleapis.com/google.protobuf.StringValue", "value": cluster},
                            "route_action_overrides": overrides,
                        },
                    }}),
                );
            }
            r
        })
        .collect()
}
