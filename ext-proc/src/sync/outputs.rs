//! The sync loop's outputs: who is open, Envoy's endpoints, the routing
//! table, the merged `/apis` and OpenAPI documents and the state file —
//! each rebuilt only when what it is made of changed (pointer equality of
//! the views says "unchanged"). The merged documents are built and the
//! state file written off the loop ([`super::latest`]): the table never
//! waits for a merge or a disk.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tokio::sync::watch;

use super::Syncer;
use super::latest::Latest;
use super::persist::Persisted;
use super::state::ServerState;
use crate::discover::ServerView;
use crate::merge::MergedDocument;
use crate::operate::metrics::Metrics;
use crate::openapi::{MergedOpenApi, ServerOpenApi};
use crate::table;
use crate::unchanged::{same, same_named};
use crate::xds::{EndpointMember, Snapshot};

impl Syncer {
    /// Who is open now, and Envoy's endpoints for everyone the table names.
    fn update_open_and_endpoints(&mut self) {
        let accepted = self.xds.as_ref().map(|x| x.accepted.borrow().clone()).unwrap_or_default();
        let mut members = 0;
        let now = Instant::now();
        let tnow = tokio::time::Instant::now();
        for s in &mut self.slots {
            let known = s.state.address.is_some_and(|a| accepted.covers(&a, tnow));
            let open = s.state.may_open(known);
            if open != s.state.open {
                self.metrics.apiserver_open(&s.state.spec.name, open);
            }
            s.state.set_open(open, now, self.options.departed_retention);
            members += usize::from(s.state.departed.is_none());
        }
        self.metrics.membership(members);
        let Some(xds) = &mut self.xds else { return };
        let endpoints: Vec<EndpointMember> = self
            .slots
            .iter()
            .filter_map(|s| {
                Some(EndpointMember { address: s.state.address?, name: s.state.spec.name.clone(), departed: s.state.departed.is_some() })
            })
            .collect();
        // The first publication goes out whatever it holds (ADS answers
        // nothing before it); later ones only when something changed.
        if endpoints != xds.from || !xds.snapshot.borrow().published {
            xds.snapshot.send_replace(Snapshot::build(&xds.options, &endpoints));
            xds.from = endpoints;
        }
    }

    /// The peer TLS files changed: Envoy's clusters get a new version, so
    /// Envoy loads the files again.
    pub(super) fn rotate_tls_files(&mut self, digest: String) {
        let Some(xds) = &mut self.xds else { return };
        if xds.options.tls_files_digest != digest {
            xds.options.tls_files_digest = digest;
            // Before the first publication there is nothing to replace: it
            // will carry the new digest.
            if xds.snapshot.borrow().published {
                xds.snapshot.send_replace(Snapshot::build(&xds.options, &xds.from));
            }
        }
    }

    /// Publishes whatever the applied reports changed: the table depends
    /// only on each member's view, OpenAPI index, health and address, the
    /// merged documents only on views and OpenAPI documents — pointer
    /// equality says unchanged, so an unchanged batch costs no rebuild.
    pub(super) async fn publish(&mut self) {
        self.update_open_and_endpoints();
        self.publish_table_if_changed().await;
        self.rebuild_discovery();
        self.rebuild_openapi();
        self.persist();
        self.states_tx.send_replace(Arc::new(self.states()));
    }

    async fn publish_table_if_changed(&mut self) {
        let inputs: Vec<TableInput> = self.slots.iter().map(|s| TableInput::of(&s.state)).collect();
        if inputs != self.table_from || self.table_tx.borrow().version == 0 {
            self.publish_table().await;
            self.table_from = inputs;
        }
    }

    /// Hands every member's OpenAPI documents to the merger when some
    /// changed.
    fn rebuild_openapi(&mut self) {
        let inputs: Vec<(String, Arc<ServerOpenApi>)> =
            self.slots.iter().map(|s| &s.state).filter(|s| s.address.is_some()).filter_map(|s| Some((s.spec.name.clone(), s.openapi.clone()?))).collect();
        if self.openapi_from.as_ref().is_some_and(|from| same_named(&inputs, from)) {
            return;
        }
        self.openapi_from = Some(inputs.clone());
        self.openapi_merger.hand_over(inputs);
    }

    /// Hands the views to the state file writer when some member's view
    /// changed, or when the last write failed (tried again each round).
    fn persist(&mut self) {
        let Some(writer) = &self.state_writer else { return };
        let views: Vec<Persisting> = self.slots.iter().map(|s| (s.state.view.clone(), s.state.openapi.clone())).collect();
        let same = views.len() == self.persisted_from.len()
            && views.iter().zip(&self.persisted_from).all(|(a, b)| same(&a.0, &b.0) && same(&a.1, &b.1));
        if same && !writer.take_failure() {
            return;
        }
        let members: Vec<StoredMember> = self
            .slots
            .iter()
            .map(|s| &s.state)
            .filter_map(|s| Some((s.spec.name.clone(), s.spec.url.to_string(), s.view.clone()?, s.openapi.clone())))
            .collect();
        writer.hand_over(members);
        self.persisted_from = views;
    }

    /// Built on a blocking thread: a CRD-heavy table is large enough to
    /// stall ext_proc answers on the runtime.
    async fn publish_table(&mut self) {
        let states = self.states();
        let Ok(new) = tokio::task::spawn_blocking(move || table::build::build(states.iter().map(ServerState::member))).await else {
            tracing::error!("routing table build did not complete; keeping the last table");
            return;
        };
        if new.version != self.table_tx.borrow().version {
            // A walk over the whole table (about a millisecond at CRD
            // scale): once per change, for the log line and the gauge.
            let resources = table::build::resource_count(&new);
            tracing::info!(version = format!("{:016x}", new.version), apiservers = new.apiservers.len(), resources, "routing table changed");
            self.metrics.table_changed(resources);
            self.table_tx.send_replace(Arc::new(new));
            self.table_changed_tx.send_replace(std::time::SystemTime::now());
        }
    }

    /// Merges the same servers routing uses (healthy, or unhealthy with
    /// their last known API set), and only when one of their views changed
    /// or one of them opened or closed (group-versions only closed members
    /// serve are marked stale: `merge::stale`): views are replaced only when
    /// different, so pointer equality means unchanged. The merge runs off
    /// this loop and off the runtime's threads (the merger, on the blocking
    /// pool): a CRD-heavy document takes long enough to delay table updates
    /// and stall ext_proc answers.
    fn rebuild_discovery(&mut self) {
        let members = self.slots.iter().map(|s| &s.state).filter(|s| s.address.is_some());
        let views: Vec<(String, Arc<ServerView>)> = members.clone().filter_map(|s| Some((s.spec.name.clone(), s.view.clone()?))).collect();
        let closed: BTreeSet<String> = members.filter(|s| !s.open).map(|s| s.spec.name.clone()).collect();
        if self.merged_from.as_ref().is_some_and(|from| same_named(&views, &from.views) && closed == from.closed) {
            return;
        }
        let inputs = DiscoveryInputs { views, closed };
        self.merged_from = Some(inputs.clone());
        self.merger.hand_over(inputs);
    }
}

/// What the merged `/apis` is built from: every member's view, and which of
/// them are closed.
#[derive(Clone, Default)]
pub(super) struct DiscoveryInputs {
    pub views: Vec<(String, Arc<ServerView>)>,
    pub closed: BTreeSet<String>,
}

/// The state file writer, off the sync loop like the mergers: serialising
/// a CRD-heavy cluster's views and syncing them to disk took 32–61 ms per
/// change here (3,000 CRDs, a 5.9 MB file), and on a control-plane node
/// whose disk etcd keeps busy an fsync can take far longer — a draining
/// apiserver's closing or a new member's table must not wait behind it.
/// The latest views only: a write superseded while another runs is skipped.
/// What the state file keeps of a member, by identity (pointer equality
/// says unchanged).
pub(super) type Persisting = (Option<Arc<ServerView>>, Option<Arc<ServerOpenApi>>);

/// A member as handed to the writer: name, URL, view, OpenAPI documents.
type StoredMember = (String, String, Arc<ServerView>, Option<Arc<ServerOpenApi>>);

pub(super) struct StateWriter {
    latest: Latest<Vec<StoredMember>>,
    failed: Arc<AtomicBool>,
}

impl StateWriter {
    pub(super) fn spawn(file: Persisted) -> StateWriter {
        let failed = Arc::new(AtomicBool::new(false));
        let flag = failed.clone();
        let latest = Latest::spawn(
            "state file",
            move |members: &Vec<StoredMember>| file.save(members.iter().map(|(n, u, v, o)| (n.as_str(), u.as_str(), &**v, o.as_deref()))),
            move |saved, took| match saved {
                Ok(()) => tracing::debug!(took = ?took, "state file written"),
                Err(e) => {
                    flag.store(true, Ordering::Relaxed);
                    tracing::warn!(error = %e, "cannot write the state file; trying again on the next round");
                }
            },
        );
        StateWriter { latest, failed }
    }

    fn hand_over(&self, members: Vec<StoredMember>) {
        self.latest.hand_over(members);
    }

    /// Whether a write failed since the last call.
    fn take_failure(&self) -> bool {
        self.failed.swap(false, Ordering::Relaxed)
    }
}

/// The peer-aggregated `/apis` merger: merged and encoded off the sync loop.
pub(super) fn merger(merged: watch::Sender<Option<Arc<MergedDocument>>>, metrics: Arc<Metrics>) -> Latest<DiscoveryInputs> {
    // Builds run one at a time; each starts from the last one's encodings.
    let last: std::sync::Mutex<Option<Arc<MergedDocument>>> = Default::default();
    Latest::spawn(
        "peer-aggregated discovery",
        move |inputs: &DiscoveryInputs| {
            let servers: std::collections::BTreeMap<String, &[_]> = inputs.views.iter().map(|(n, v)| (n.clone(), v.groups.as_slice())).collect();
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

/// The OpenAPI merger (megabytes of JSON and protobuf), off the sync loop.
pub(super) fn openapi_merger(merged: watch::Sender<Arc<MergedOpenApi>>) -> Latest<Vec<(String, Arc<ServerOpenApi>)>> {
    Latest::spawn(
        "merged OpenAPI",
        |inputs: &Vec<(String, Arc<ServerOpenApi>)>| MergedOpenApi::build(inputs),
        move |m, took| {
            let bytes = |m: &Option<crate::openapi::Merged>| m.as_ref().map_or(0, |m| m.body.identity.len());
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

/// One member's part in the table: its view and OpenAPI documents (by
/// identity: held, so their addresses cannot be reused by others), health,
/// open/pending/draining and address.
pub(super) struct TableInput(String, Option<Arc<ServerView>>, Option<Arc<ServerOpenApi>>, bool, (bool, bool, bool), Option<SocketAddr>);

impl TableInput {
    fn of(s: &ServerState) -> TableInput {
        TableInput(s.spec.name.clone(), s.view.clone(), s.openapi.clone(), s.healthy, (s.open, s.pending, s.draining), s.address)
    }
}

impl PartialEq for TableInput {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0 && same(&self.1, &other.1) && same(&self.2, &other.2) && (self.3, self.4, self.5) == (other.3, other.4, other.5)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::Capabilities;
    use std::time::Duration;

    fn members() -> Vec<StoredMember> {
        let mut caps = Capabilities::default();
        caps.add_resource_name("batch", "v2alpha1", "cronjobs");
        let view = Arc::new(ServerView { capabilities: caps, groups: Default::default() });
        vec![("kas-b".into(), "https://127.0.0.1:6443/".into(), view, None)]
    }

    /// Polls `done` every 5 ms for at most 10 s.
    async fn eventually(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn the_state_file_is_written_off_the_loop_and_a_failed_write_is_tried_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        // A directory where the file belongs: the rename onto it fails.
        std::fs::create_dir(&path).unwrap();
        let writer = StateWriter::spawn(Persisted::new(&path));
        writer.hand_over(members());
        eventually("the failed write to be reported", || writer.failed.load(Ordering::Relaxed)).await;
        assert!(writer.take_failure(), "the loop learns of the failure once");
        assert!(!writer.take_failure());

        std::fs::remove_dir(&path).unwrap();
        writer.hand_over(members());
        let file = Persisted::new(&path);
        eventually("the state file", || file.load().is_ok_and(|m| m.len() == 1)).await;
        assert!(!writer.take_failure());
    }
}
