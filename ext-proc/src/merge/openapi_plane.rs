//! The merged OpenAPI plane: follows the member states' OpenAPI documents and
//! merges them (megabytes of JSON and protobuf) off the sync loop
//! ([`crate::building::latest`]) when some changed — pointer equality says unchanged.

use std::sync::Arc;

use tokio::sync::watch;

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
    pub fn new(merged: watch::Sender<Arc<MergedOpenApi>>) -> OpenApiPlane {
        OpenApiPlane { merger: merger(merged), from: None }
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

fn merger(merged: watch::Sender<Arc<MergedOpenApi>>) -> Latest<OpenApiInputs> {
    Latest::spawn(
        "merged OpenAPI",
        |inputs: &OpenApiInputs| MergedOpenApi::build(inputs),
        move |m, took| {
            let bytes = |m: &Option<Merged>| m.as_ref().map_or(0, |m| m.body.identity.len());
            tracing::info!(
                sources = ?m.sources,
                v2_json_bytes = bytes(&m.v2_json),
                v2_protobuf_bytes = bytes(&m.v2_protobuf),
                v3_index_bytes = bytes(&m.v3_index),
                ?took,
                "merged OpenAPI rebuilt"
            );
            merged.send_replace(Arc::new(m));
        },
    )
}
