//! The Envoys connected over ADS, for `/table`: each stream's node, the
//! routing filter build its bootstrap says it runs (`mvp_filter` in the node
//! metadata, rendered by `envoy-config`), and since when — so an operator
//! sees which build routes, Envoy by Envoy, during a rollout of either.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::google::protobuf::value::Kind;
use serde_json::{Value, json};

use mvp_contract::envoy::NODE_FILTER_BUILD;

/// Shared by the ADS streams (which write it) and `/table` (which reads it);
/// it also admits streams, up to a bound.
#[derive(Clone, Default)]
pub struct ConnectedEnvoys(Arc<Registry>);

#[derive(Default)]
struct Registry {
    nodes: Mutex<BTreeMap<u64, Connected>>,
    /// Streams admitted and not yet gone (a stream names its node only
    /// with its first request).
    open: AtomicUsize,
}

struct Connected {
    node: String,
    filter: Option<String>,
    since: SystemTime,
}

/// A string in the node's metadata, if it has one there.
pub fn node_metadata(node: &core::Node, key: &str) -> Option<String> {
    match node.metadata.as_ref()?.fields.get(key)?.kind.as_ref()? {
        Kind::StringValue(s) if !s.is_empty() => Some(s.clone()),
        _ => None,
    }
}

impl ConnectedEnvoys {
    /// A new stream, if fewer than `max` are open; each admitted stream
    /// ends with [`ConnectedEnvoys::gone`].
    pub(super) fn admit(&self, max: usize) -> bool {
        if self.0.open.fetch_add(1, Ordering::AcqRel) < max {
            return true;
        }
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        false
    }

    /// The stream `id` speaks for `node` (every request may carry it; the
    /// first one does). Keeps `since`.
    pub(super) fn seen(&self, id: u64, node: &core::Node) {
        let mut m = self.0.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        let filter = node_metadata(node, NODE_FILTER_BUILD);
        let e = m.entry(id).or_insert_with(|| Connected { node: String::new(), filter: None, since: SystemTime::now() });
        e.node.clone_from(&node.id);
        e.filter = filter;
    }

    /// An admitted stream ended.
    pub(super) fn gone(&self, id: u64) {
        self.0.nodes.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }

    /// `/table`'s `envoys`: one entry per stream, oldest first. `filter` is
    /// null for an Envoy whose bootstrap does not say (rendered before it
    /// did: the wasm build).
    pub fn to_json(&self) -> Value {
        let m = self.0.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        let now = SystemTime::now();
        Value::Array(
            m.values()
                .map(|c| {
                    let secs = now.duration_since(c.since).map(|d| d.as_secs()).unwrap_or(0);
                    json!({"node": c.node, "filter": c.filter, "connectedSeconds": secs})
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::google::protobuf::{Struct, Value as PbValue};

    fn node(id: &str, filter: Option<&str>) -> core::Node {
        let fields = filter.map(|f| (NODE_FILTER_BUILD.to_string(), PbValue { kind: Some(Kind::StringValue(f.into())) })).into_iter().collect();
        core::Node { id: id.into(), metadata: Some(Struct { fields }), ..Default::default() }
    }

    #[test]
    fn admits_streams_up_to_the_bound_and_again_once_one_ends() {
        let e = ConnectedEnvoys::default();
        assert!(e.admit(2) && e.admit(2));
        assert!(!e.admit(2), "a third is refused");
        e.gone(1);
        assert!(e.admit(2), "admitted again once one ended");
    }

    #[test]
    fn lists_each_connected_envoy_with_its_build_until_its_stream_ends() {
        let e = ConnectedEnvoys::default();
        for _ in 0..3 {
            assert!(e.admit(3));
        }
        e.seen(1, &node("front-a", Some("native")));
        e.seen(2, &node("front-b", Some("wasm")));
        e.seen(3, &node("old", None));
        e.seen(1, &node("front-a", Some("native")));
        let v = e.to_json();
        let builds: Vec<(&str, Value)> = v.as_array().unwrap().iter().map(|c| (c["node"].as_str().unwrap(), c["filter"].clone())).collect();
        assert_eq!(builds, [("front-a", json!("native")), ("front-b", json!("wasm")), ("old", Value::Null)]);
        e.gone(2);
        e.gone(3);
        assert_eq!(e.to_json().as_array().unwrap().len(), 1);
    }
}
