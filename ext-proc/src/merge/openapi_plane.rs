//! The merged OpenAPI plane: follows the member states' OpenAPI documents and
//! merges them (megabytes of JSON and protobuf) off the sync loop
//! ([`crate::building::latest`]) when some changed — pointer equality says unchanged.
//!
//! What a reconnect storm or a flapping member costs: a merge from scratch
//! (0.7–2.3 s of CPU at CRD scale) on one blocking thread, at most one at a
//! time and only of the latest inputs, never holding up the routing table;
//! and none for a set of documents merged just before — a member that
//! leaves and comes back with the same documents (a restart, a flap) gets
//! the merge from before it left ([`Recent`]).

use std::sync::Arc;

use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::openapi::{Merged, MergedOpenApi, ServerOpenApi};
use crate::building::latest::Latest;
use crate::sync::{States, next_publication};
use crate::building::unchanged::same_named;

/// Each member's documents, by name.
pub type OpenApiInputs = Vec<(String, Arc<ServerOpenApi>)>;

pub struct OpenApiPlane {
    merger: Latest<OpenApiInputs>,
    /// What the last merge handed over was made of.
    from: Option<OpenApiInputs>,
}

impl OpenApiPlane {
    pub fn new(merged: watch::Sender<Arc<MergedOpenApi>>, metrics: Arc<Metrics>) -> OpenApiPlane {
        OpenApiPlane { merger: merger(merged, metrics), from: None }
    }

    /// Hands the documents to the merger when some changed.
    /// Follows the member states until the sync loop ends: the members
    /// Envoy can reach, as for the merged `/apis`.
    pub async fn run(mut self, mut states: States) {
        while let Some(s) = next_publication(&mut states).await {
            let reachable = s.members.iter().filter(|s| s.address.is_some());
            self.follow(reachable.filter_map(|s| Some((s.spec.name.clone(), s.openapi.clone()?))).collect());
        }
    }

    pub fn follow(&mut self, inputs: OpenApiInputs) {
        if self.from.as_ref().is_some_and(|from| same_named(&inputs, from)) {
            return;
        }
        self.from = Some(inputs.clone());
        self.merger.hand_over(inputs);
    }
}

/// The last merges and what each was made of: a set of documents merged
/// again is taken from here. Two: the current set and the one before (a
/// member gone, then back) — each holds a merged document's bytes.
#[derive(Default)]
struct Recent(std::collections::VecDeque<(OpenApiInputs, Arc<MergedOpenApi>)>);

impl Recent {
    const KEPT: usize = 2;

    /// The merge of `inputs`, and whether it was built now.
    fn merge(&mut self, inputs: &OpenApiInputs, build: impl FnOnce(&OpenApiInputs) -> MergedOpenApi) -> (Arc<MergedOpenApi>, bool) {
        // The set taken is the current one: first, so it is the last to go.
        if let Some(hit) = self.0.iter().position(|(from, _)| same_named(from, inputs)).and_then(|i| self.0.remove(i)) {
            let m = hit.1.clone();
            self.0.push_front(hit);
            return (m, false);
        }
        let m = Arc::new(build(inputs));
        self.0.push_front((inputs.clone(), m.clone()));
        self.0.truncate(Self::KEPT);
        (m, true)
    }
}

fn merger(merged: watch::Sender<Arc<MergedOpenApi>>, metrics: Arc<Metrics>) -> Latest<OpenApiInputs> {
    let recent = std::sync::Mutex::new(Recent::default());
    Latest::spawn(
        "merged OpenAPI",
        move |inputs: &OpenApiInputs| match recent.lock() {
            Ok(mut recent) => recent.merge(inputs, |i| MergedOpenApi::build(i)),
            Err(_) => (Arc::new(MergedOpenApi::build(inputs)), true),
        },
        move |(m, built): (Arc<MergedOpenApi>, bool), took| {
            let bytes = |m: &Option<Merged>| m.as_ref().map_or(0, |m| m.body.identity.len());
            let what = if built { "merged OpenAPI rebuilt" } else { "merged OpenAPI: the same documents as a recent merge, taken from it" };
            tracing::info!(
                sources = ?m.sources,
                v2_json_bytes = bytes(&m.v2_json),
                v2_protobuf_bytes = bytes(&m.v2_protobuf),
                v3_index_bytes = bytes(&m.v3_index),
                ?took,
                "{what}"
            );
            metrics.openapi_merged(built);
            merged.send_replace(m);
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs() -> Arc<ServerOpenApi> {
        Arc::new(ServerOpenApi { v2_json: None, v2_protobuf: None, v3_index: None })
    }

    /// A member that leaves and comes back with the same documents costs
    /// no merge; new documents do; only the last two sets are kept.
    #[test]
    fn a_set_merged_just_before_is_not_merged_again() {
        let (a, b, b2) = (docs(), docs(), docs());
        let both: OpenApiInputs = vec![("a".into(), a.clone()), ("b".into(), b.clone())];
        let alone: OpenApiInputs = vec![("a".into(), a.clone())];
        let updated: OpenApiInputs = vec![("a".into(), a.clone()), ("b".into(), b2)];
        let mut recent = Recent::default();
        let mut builds = 0;
        let mut merge = |recent: &mut Recent, inputs: &OpenApiInputs| {
            recent
                .merge(inputs, |i| {
                    builds += 1;
                    MergedOpenApi::build(i)
                })
                .1
        };
        let flaps: Vec<bool> = [&both, &alone, &both, &alone, &both].iter().map(|i| merge(&mut recent, i)).collect();
        assert_eq!(flaps, [true, true, false, false, false], "b flapping: two merges");
        assert!(merge(&mut recent, &updated), "b came back with new documents");
        assert!(!merge(&mut recent, &both), "the set before: kept");
        assert!(merge(&mut recent, &alone), "three sets ago: not kept");
        assert_eq!(builds, 4);
    }
}
