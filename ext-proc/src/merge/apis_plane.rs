//! The merged `/apis` plane: follows the member states' views and rebuilds the
//! peer-aggregated document when one of them changed or one opened or
//! closed (group-versions only closed members serve are marked stale:
//! [`super::stale`]). Views are replaced only when different, so pointer
//! equality means unchanged. The merge runs off the sync loop and off the
//! runtime's threads ([`crate::building::latest`], on the blocking pool): a CRD-heavy
//! document takes long enough to delay table updates and stall ext_proc
//! answers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio::sync::watch;

use super::MergedDocument;
use crate::discover::ServerView;
use crate::building::latest::Latest;
use crate::metrics::Metrics;
use crate::sync::state::ServerState;
use crate::sync::{States, next_publication};
use crate::building::unchanged::same_named;

/// What the merged `/apis` is built from: every member's view, and which of
/// them are closed.
#[derive(Clone, Default)]
pub struct DiscoveryInputs {
    pub views: Vec<(String, Arc<ServerView>)>,
    pub closed: BTreeSet<String>,
}

impl DiscoveryInputs {
    /// The merged document is made of the members Envoy can reach
    /// (healthy, or unhealthy with their last known API set).
    pub fn of(states: &[ServerState]) -> DiscoveryInputs {
        let reachable = || states.iter().filter(|s| s.address.is_some());
        DiscoveryInputs {
            views: reachable().filter_map(|s| Some((s.spec.name.clone(), s.view.clone()?))).collect(),
            closed: reachable().filter(|s| !s.open).map(|s| s.spec.name.clone()).collect(),
        }
    }
}

pub struct DiscoveryPlane {
    merger: Latest<DiscoveryInputs>,
    /// What the last merge handed over was made of.
    from: Option<DiscoveryInputs>,
}

impl DiscoveryPlane {
    pub fn new(merged: watch::Sender<Option<Arc<MergedDocument>>>, metrics: Arc<Metrics>) -> DiscoveryPlane {
        DiscoveryPlane { merger: merger(merged, metrics), from: None }
    }

    /// Hands the inputs to the merger when they differ from the last ones.
    /// Follows the member states until the sync loop ends.
    pub async fn run(mut self, mut states: States) {
        while let Some(s) = next_publication(&mut states).await {
            self.follow(DiscoveryInputs::of(&s.members));
        }
    }

    pub fn follow(&mut self, inputs: DiscoveryInputs) {
        if self.from.as_ref().is_some_and(|from| same_named(&inputs.views, &from.views) && inputs.closed == from.closed) {
            return;
        }
        self.from = Some(inputs.clone());
        self.merger.hand_over(inputs);
    }
}

/// The peer-aggregated `/apis` merger: merged and encoded off the sync loop.
fn merger(merged: watch::Sender<Option<Arc<MergedDocument>>>, metrics: Arc<Metrics>) -> Latest<DiscoveryInputs> {
    // Builds run one at a time; each starts from the last one's encodings.
    let last: std::sync::Mutex<Option<Arc<MergedDocument>>> = Default::default();
    Latest::spawn(
        "peer-aggregated discovery",
        move |inputs: &DiscoveryInputs| {
            let servers: BTreeMap<String, &[_]> = inputs.views.iter().map(|(n, v)| (n.clone(), v.groups.as_slice())).collect();
            let mut last = last.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let doc = Arc::new(MergedDocument::build(&servers, &inputs.closed, last.as_deref()));
            *last = Some(doc.clone());
            doc
        },
        move |doc, _| {
            metrics.peer_aggregated_rebuilt(doc.build_time);
            tracing::info!(
                etag = %doc.etag.get(1..17).unwrap_or(""),
                groups = doc.groups,
                groups_encoded = doc.groups_encoded,
                bytes = doc.json.identity.len(),
                sources = ?doc.sources,
                took = ?doc.build_time,
                cpu = ?doc.build_cpu,
                "peer-aggregated discovery rebuilt"
            );
            merged.send_replace(Some(doc));
        },
    )
}
