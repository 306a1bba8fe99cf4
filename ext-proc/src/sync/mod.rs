//! apiservers → discover → table → publish: every apiserver is read by its
//! own loop ([`poll`]: its own schedule, its own deadline), and one sync
//! loop applies their reports and publishes a new table, merged `/apis` and
//! merged OpenAPI only when something changed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mvp_protos::routing::v1 as pb;
use tokio::sync::watch;

pub mod persist;
pub mod poll;
pub mod state;

use crate::apiservers::ApiserverSpec;
use crate::discover::{Discoverer, DiscoveryOptions, ServerView, Transport};
use crate::merge::MergedDocument;
use crate::metrics::Metrics;
use crate::openapi::{MergedOpenApi, ServerOpenApi};
use crate::routing_table;
use crate::unchanged::{same, same_named};
use state::ServerState;

#[derive(Debug, Clone)]
pub struct SyncOptions {
    pub interval: Duration,
    pub discovery: DiscoveryOptions,
    /// Where every member's last known API set survives restarts.
    pub state_file: Option<std::path::PathBuf>,
}

/// What the rest of the process sees of the sync loop.
#[derive(Clone)]
pub struct Published {
    pub table: watch::Receiver<Arc<pb::RoutingTable>>,
    /// When the table last changed.
    pub table_changed: watch::Receiver<std::time::SystemTime>,
    pub states: watch::Receiver<Arc<Vec<ServerState>>>,
    /// The peer-aggregated `/apis`, rebuilt only when some server's view changed.
    pub merged: watch::Receiver<Option<Arc<MergedDocument>>>,
    /// The merged `/openapi/v2` and `/openapi/v3` index, rebuilt only when
    /// some server's documents changed.
    pub openapi: watch::Receiver<Arc<MergedOpenApi>>,
}

pub struct Syncer {
    states: Vec<ServerState>,
    discoverers: Vec<Discoverer>,
    options: SyncOptions,
    table_tx: watch::Sender<Arc<pb::RoutingTable>>,
    table_changed_tx: watch::Sender<std::time::SystemTime>,
    states_tx: watch::Sender<Arc<Vec<ServerState>>>,
    merged_tx: watch::Sender<Option<Arc<MergedDocument>>>,
    openapi_tx: watch::Sender<Arc<MergedOpenApi>>,
    /// The documents the current merged OpenAPI was built from.
    openapi_from: Vec<(String, Arc<ServerOpenApi>)>,
    /// The views the current merged document was built from.
    merged_from: Vec<(String, Arc<ServerView>)>,
    /// What the current table was built from.
    table_from: Vec<TableInput>,
    persisted: Option<persist::Persisted>,
    /// The views the state file holds.
    persisted_from: Vec<Option<Arc<ServerView>>>,
    metrics: Arc<Metrics>,
}

impl Syncer {
    pub fn new(specs: &[ApiserverSpec], transport: Transport, options: SyncOptions, metrics: Arc<Metrics>) -> (Syncer, Published) {
        let mut states: Vec<ServerState> = specs.iter().cloned().map(ServerState::new).collect();
        let persisted = options.state_file.as_deref().map(persist::Persisted::new);
        if let Some(p) = &persisted {
            match p.load() {
                Ok(mut stored) => {
                    for s in &mut states {
                        if let Some(view) = stored.remove(&(s.spec.name.clone(), s.spec.url.to_string())) {
                            tracing::info!(apiserver = %s.spec.name, resources = view.capabilities.resource_count(), "last known API set restored from the state file");
                            s.restored(view);
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "starting without the state file; it is rewritten on the next change"),
            }
        }
        let persisted_from = states.iter().map(|s| s.view.clone()).collect();
        let known = crate::discover::KnownGroupVersions::default();
        let discoverers = specs
            .iter()
            .map(|s| Discoverer::new(s, transport.clone(), options.discovery.clone(), known.clone()))
            .collect();
        let (table_tx, table) = watch::channel(Arc::new(pb::RoutingTable::default()));
        let (table_changed_tx, table_changed) = watch::channel(std::time::SystemTime::now());
        let (states_tx, states_rx) = watch::channel(Arc::new(states.clone()));
        let (merged_tx, merged) = watch::channel(None);
        let (openapi_tx, openapi) = watch::channel(Arc::new(MergedOpenApi::default()));
        let syncer = Syncer {
            states,
            discoverers,
            options,
            table_tx,
            table_changed_tx,
            states_tx,
            merged_tx,
            openapi_tx,
            openapi_from: vec![],
            merged_from: vec![],
            table_from: vec![],
            persisted,
            persisted_from,
            metrics,
        };
        (syncer, Published { table, table_changed, states: states_rx, merged, openapi })
    }

    /// Starts one discovery loop per apiserver and applies their reports
    /// until the process ends. The first table is published once every
    /// member has answered (or failed) once; after that, each batch of
    /// reports publishes at once.
    pub async fn run(mut self) {
        let (tx, mut rx) = tokio::sync::mpsc::channel(4 * self.states.len().max(1));
        let loops: Vec<_> = std::mem::take(&mut self.discoverers)
            .into_iter()
            .zip(&self.states)
            .enumerate()
            .map(|(i, (d, s))| tokio::spawn(poll::poll(i, s.spec.clone(), d, self.options.interval, tx.clone())))
            .collect();
        drop(tx);
        let mut reported = vec![false; self.states.len()];
        while let Some(first) = rx.recv().await {
            // Everything already waiting goes into the same publication.
            let mut batch = vec![first];
            while let Ok(r) = rx.try_recv() {
                batch.push(r);
            }
            for report in batch {
                if let poll::Report::Discovery { index, .. } = &report
                    && let Some(r) = reported.get_mut(*index)
                {
                    *r = true;
                }
                self.apply(report);
            }
            if reported.iter().all(|r| *r) {
                self.publish().await;
            }
        }
        for l in loops {
            l.abort();
        }
    }

    /// Applies one member's report to its state.
    fn apply(&mut self, report: poll::Report) {
        let now = Instant::now();
        match report {
            poll::Report::Discovery { index, address, resolve_error, result, version } => {
                let Some(state) = self.states.get_mut(index) else { return };
                let name = state.spec.name.clone();
                if let Some(e) = resolve_error {
                    self.metrics.sync_error(&name, "hostport_resolution");
                    tracing::warn!(apiserver = %name, error = %e, "cannot resolve apiserver address; keeping the last one");
                }
                state.address = address;
                if version.is_some() {
                    state.version = version;
                }
                match result {
                    Ok(view) => {
                        let resources = view.capabilities.resource_count();
                        if !state.healthy {
                            tracing::info!(apiserver = %name, resources, "apiserver discovery is healthy");
                        }
                        self.metrics.apiserver_resources(&name, resources);
                        state.succeeded(view, now);
                    }
                    Err(e) => {
                        self.metrics.sync_error(&name, "fetch_discovery");
                        let had = state.view.is_some();
                        if state.healthy || state.last_error.is_none() {
                            tracing::warn!(apiserver = %name, error = %e, keeping_last_known = had, "apiserver discovery failed");
                        }
                        state.failed(e.to_string());
                    }
                }
                self.metrics.apiserver_healthy(&name, state.healthy);
            }
            poll::Report::OpenApi { index, result } => {
                let Some(state) = self.states.get_mut(index) else { return };
                match result {
                    Ok(docs) => {
                        if !state.openapi.as_ref().is_some_and(|o| Arc::ptr_eq(o, &docs)) {
                            state.openapi = Some(docs);
                        }
                    }
                    Err(e) => {
                        self.metrics.sync_error(&state.spec.name, "fetch_openapi");
                        tracing::warn!(apiserver = %state.spec.name, error = %e, "apiserver OpenAPI read failed; keeping its last documents");
                    }
                }
            }
        }
    }

    /// Publishes whatever the applied reports changed: the table depends
    /// only on each member's view, OpenAPI index, health and address, the
    /// merged documents only on views and OpenAPI documents — pointer
    /// equality says unchanged, so an unchanged batch costs no rebuild.
    async fn publish(&mut self) {
        self.publish_table_if_changed().await;
        self.rebuild_discovery().await;
        self.rebuild_openapi().await;
        self.persist().await;
        self.states_tx.send_replace(Arc::new(self.states.clone()));
    }

    async fn publish_table_if_changed(&mut self) {
        let inputs: Vec<TableInput> = self.states.iter().map(TableInput::of).collect();
        if inputs != self.table_from || self.table_tx.borrow().version == 0 {
            self.publish_table().await;
            self.table_from = inputs;
        }
    }

    /// Merges every member's OpenAPI documents when some changed, on a
    /// blocking thread (megabytes of JSON and protobuf).
    async fn rebuild_openapi(&mut self) {
        let inputs: Vec<(String, Arc<ServerOpenApi>)> =
            self.states.iter().filter(|s| s.address.is_some()).filter_map(|s| Some((s.spec.name.clone(), s.openapi.clone()?))).collect();
        let unchanged = same_named(&inputs, &self.openapi_from);
        if unchanged {
            return;
        }
        let started = Instant::now();
        let built = {
            let inputs = inputs.clone();
            tokio::task::spawn_blocking(move || MergedOpenApi::build(&inputs)).await
        };
        let Ok(merged) = built else {
            tracing::error!("OpenAPI merge did not complete; keeping the last merged documents");
            return;
        };
        let bytes = |m: &Option<crate::openapi::Merged>| m.as_ref().map_or(0, |m| m.body.identity.len());
        tracing::info!(
            sources = ?merged.sources,
            v2_json_bytes = bytes(&merged.v2_json),
            v2_protobuf_bytes = bytes(&merged.v2_protobuf),
            v3_index_bytes = bytes(&merged.v3_index),
            took = ?started.elapsed(),
            "merged OpenAPI rebuilt"
        );
        self.openapi_tx.send_replace(Arc::new(merged));
        self.openapi_from = inputs;
    }

    /// Writes the state file when some member's view changed.
    /// Serialising megabytes of views and writing them happens on a
    /// blocking thread.
    async fn persist(&mut self) {
        let Some(p) = self.persisted.clone() else { return };
        let views: Vec<Option<Arc<ServerView>>> = self.states.iter().map(|s| s.view.clone()).collect();
        let same = views.len() == self.persisted_from.len()
            && views.iter().zip(&self.persisted_from).all(|(a, b)| same(a, b));
        if same {
            return;
        }
        let members: Vec<(String, String, Arc<ServerView>)> =
            self.states.iter().filter_map(|s| Some((s.spec.name.clone(), s.spec.url.to_string(), s.view.clone()?))).collect();
        let saved = tokio::task::spawn_blocking(move || p.save(members.iter().map(|(n, u, v)| (n.as_str(), u.as_str(), &**v))))
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
        match saved {
            Ok(()) => self.persisted_from = views,
            Err(e) => tracing::warn!(error = %e, "cannot write the state file; trying again on the next round"),
        }
    }

    /// Built on a blocking thread: a CRD-heavy table is large enough to
    /// stall ext_proc answers on the runtime.
    async fn publish_table(&mut self) {
        let states = self.states.clone();
        let Ok(new) = tokio::task::spawn_blocking(move || routing_table::build(states.iter().map(ServerState::member))).await else {
            tracing::error!("routing table build did not complete; keeping the last table");
            return;
        };
        if new.version != self.table_tx.borrow().version {
            tracing::info!(
                version = format!("{:016x}", new.version),
                apiservers = new.apiservers.len(),
                resources = routing_table::resource_count(&new),
                "routing table changed"
            );
            self.metrics.table_changed(&new);
            self.table_tx.send_replace(Arc::new(new));
            self.table_changed_tx.send_replace(std::time::SystemTime::now());
        }
    }

    /// Merges the same servers routing uses (healthy, or unhealthy with
    /// their last known API set), and only when one of their views changed:
    /// views are replaced only when different, so pointer equality means
    /// unchanged. The merge runs on a blocking thread: a CRD-heavy document
    /// takes long enough to stall ext_proc answers on the runtime.
    async fn rebuild_discovery(&mut self) {
        let inputs: Vec<(String, Arc<ServerView>)> = self
            .states
            .iter()
            .filter(|s| s.address.is_some())
            .filter_map(|s| Some((s.spec.name.clone(), s.view.clone()?)))
            .collect();
        let unchanged = same_named(&inputs, &self.merged_from);
        if unchanged && self.merged_tx.borrow().is_some() {
            return;
        }
        let servers = inputs.iter().map(|(n, v)| (n.clone(), v.groups.clone())).collect();
        let started = Instant::now();
        let Ok(doc) = tokio::task::spawn_blocking(move || MergedDocument::build(&servers)).await else {
            tracing::error!("peer-aggregated merge did not complete; keeping the last merged document");
            return;
        };
        self.metrics.peer_aggregated_cache_miss();
        tracing::info!(
            etag = %doc.etag.get(1..17).unwrap_or(""),
            groups = doc.items.len(),
            bytes = doc.json.identity.len(),
            sources = ?doc.sources,
            took = ?started.elapsed(),
            "peer-aggregated discovery rebuilt"
        );
        self.merged_tx.send_replace(Some(Arc::new(doc)));
        self.merged_from = inputs;
    }
}

/// One member's part in the table: its view and OpenAPI documents (by
/// identity: held, so their addresses cannot be reused by others), health
/// and address.
struct TableInput(Option<Arc<ServerView>>, Option<Arc<ServerOpenApi>>, bool, Option<SocketAddr>);

impl TableInput {
    fn of(s: &ServerState) -> TableInput {
        TableInput(s.view.clone(), s.openapi.clone(), s.healthy, s.address)
    }
}

impl PartialEq for TableInput {
    fn eq(&self, other: &Self) -> bool {
        same(&self.0, &other.0) && same(&self.1, &other.1) && self.2 == other.2 && self.3 == other.3
    }
}
