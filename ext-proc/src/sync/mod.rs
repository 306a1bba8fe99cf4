//! membership → discover → member states: the sync loop (this file)
//! follows the membership ([`reconcile`]: joins, departures, restarts),
//! every member is read by its own loop ([`poll`]: its own schedule, its
//! own deadline), the loop applies their reports to each member's
//! [`state`], decides who is open ([`open`]) and publishes the states —
//! nothing else. The planes follow them, each in its own folder and each
//! rebuilding only what changed: Envoy's endpoints ([`crate::xds::plane`]),
//! the routing table ([`crate::table::plane`]), the merged `/apis`
//! ([`crate::merge::apis_plane`]) and OpenAPI ([`crate::merge::openapi_plane`]), the
//! state file ([`crate::state_file::plane`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, mpsc, watch};

pub mod accepted;
mod open;
pub mod poll;
mod reconcile;
pub mod state;

use crate::apiservers::ApiserverSpec;
use crate::discover::{DiscoveryOptions, Transport};
use crate::membership::MemberSet;
use crate::metrics::Metrics;
use accepted::Accepted;
use poll::MemberId;
use state::NotReady;
use state::{LastKnown, ServerState};

#[derive(Debug, Clone)]
pub struct SyncOptions {
    pub interval: Duration,
    pub discovery: DiscoveryOptions,
    /// How long a departed member's last known API set is kept (its
    /// exclusive APIs answer 503 meanwhile, then 404).
    pub departed_retention: Duration,
}

/// What the sync loop publishes: every member's state.
#[derive(Debug, Default)]
pub struct MemberStates {
    /// Every member, departed ones until forgotten, sorted by name (the
    /// table's bit order).
    pub members: Vec<ServerState>,
    /// Every member at start has answered (or failed) once. Before that the
    /// states are the configured and restored members, for operators; the
    /// planes publish nothing (an Envoy is sent no table and no endpoints).
    pub complete: bool,
}

/// The member states as the planes and operators follow them.
pub type States = watch::Receiver<Arc<MemberStates>>;

/// The next complete publication of the member states not seen yet — the
/// newest, when several came meanwhile; `None` once the sync loop ended.
/// Each plane's loop: `while let Some(s) = next_publication(&mut states)`.
pub async fn next_publication(states: &mut States) -> Option<Arc<MemberStates>> {
    loop {
        states.changed().await.ok()?;
        let now = states.borrow_and_update().clone();
        if now.complete {
            return Some(now);
        }
    }
}

pub struct Syncer {
    /// Every member, departed ones until forgotten, sorted by name (the
    /// table's bit order).
    slots: Vec<Slot>,
    transport: Transport,
    known: crate::discover::KnownGroupVersions,
    options: SyncOptions,
    reports_tx: mpsc::Sender<poll::Report>,
    reports_rx: Option<mpsc::Receiver<poll::Report>>,
    next_id: MemberId,
    /// Last known API sets (the state file's) of members that have not
    /// joined yet, by `(name, url)`.
    restorable: BTreeMap<(String, String), LastKnown>,
    /// Set once the first table is out: members joining after it are gated
    /// on Envoy knowing their address.
    started: bool,
    /// What the connected Envoys acknowledged (see [`accepted`]); none
    /// without ADS.
    accepted: Option<watch::Receiver<Accepted>>,
    states_tx: watch::Sender<Arc<MemberStates>>,
    metrics: Arc<Metrics>,
}

/// One member and its discovery loop.
struct Slot {
    id: MemberId,
    state: ServerState,
    wake: Arc<Notify>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

impl Syncer {
    /// `initial` is the membership at start (the static seed, if any);
    /// `restorable` the last known API sets an earlier run kept; members
    /// there that are not in `initial` are restored when the loop runs
    /// ([`Syncer::restore_the_rest`]).
    pub fn new(
        initial: &MemberSet,
        restorable: BTreeMap<(String, String), LastKnown>,
        transport: Transport,
        options: SyncOptions,
        metrics: Arc<Metrics>,
    ) -> (Syncer, States) {
        let (states_tx, states) = watch::channel(Arc::default());
        let (reports_tx, reports_rx) = mpsc::channel(64);
        let mut syncer = Syncer {
            slots: Vec::new(),
            transport,
            known: crate::discover::KnownGroupVersions::default(),
            options,
            reports_tx,
            reports_rx: Some(reports_rx),
            next_id: 1,
            restorable,
            started: false,
            accepted: None,
            states_tx,
            metrics,
        };
        for d in initial.iter() {
            syncer.join(d, false);
        }
        syncer.states_tx.send_replace(Arc::new(MemberStates { members: syncer.states(), complete: false }));
        (syncer, states)
    }

    /// Members in the state file but not in the initial membership: with
    /// the membership `listed`, departed (their last known API sets answer
    /// 503 until they rejoin or are forgotten); with a membership not
    /// listed yet (`--membership`, the Kubernetes API slow or unreachable
    /// at start), members as they were — read directly — until it is:
    /// the process does not know they left.
    fn restore_the_rest(&mut self, listed: bool) {
        let now = Instant::now();
        for ((name, url), stored) in std::mem::take(&mut self.restorable) {
            let spec: Result<ApiserverSpec, _> = format!("{name}={url}").parse();
            let Ok(spec) = spec else { continue };
            if self.slots.iter().any(|s| s.state.spec.name == name || s.state.spec.url == spec.url) {
                continue;
            }
            if listed {
                tracing::info!(apiserver = %name, url = %url, "not a member at start; its last known API set is kept as departed");
                let mut state = ServerState::new(spec);
                state.restored(stored);
                state.departed = Some(now);
                self.insert(Slot { id: 0, state, wake: Arc::default(), task: None });
            } else {
                tracing::info!(apiserver = %name, url = %url, "a member in the state file; followed as one until the membership is listed");
                self.restorable.insert((name, url), stored);
                self.join(&crate::membership::Desired { spec, incarnation: None }, false);
            }
        }
        self.make_room();
    }

    /// Opens a member only once every connected Envoy acknowledged its
    /// endpoint (see [`accepted`]; the ADS server keeps it).
    pub fn gated_on(mut self, accepted: watch::Receiver<Accepted>) -> Syncer {
        self.accepted = Some(accepted);
        self
    }

    fn states(&self) -> Vec<ServerState> {
        self.slots.iter().map(|s| s.state.clone()).collect()
    }

    fn insert(&mut self, slot: Slot) {
        let at = self.slots.partition_point(|s| s.state.spec.name < slot.state.spec.name);
        self.slots.insert(at, slot);
    }

    fn slot_mut(&mut self, id: MemberId) -> Option<&mut Slot> {
        self.slots.iter_mut().find(|s| s.id == id && s.task.is_some())
    }

    /// Follows `members` (`None`: not listed yet) and applies every
    /// member's reports until the process ends. The first table is published once every member at
    /// start has answered (or failed) once; after that, each batch of
    /// events publishes at once.
    pub async fn run(mut self, mut members: watch::Receiver<Option<MemberSet>>) {
        let Some(mut rx) = self.reports_rx.take() else { return };
        let mut accepted = self.accepted.clone();
        let initial = members.borrow_and_update().clone();
        self.restore_the_rest(initial.is_some());
        let mut waiting: Vec<MemberId> = self.slots.iter().filter(|s| s.task.is_some()).map(|s| s.id).collect();
        if let Some(initial) = initial {
            self.reconcile(&initial);
        }
        let mut retention = tokio::time::interval(Duration::from_secs(1));
        retention.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                first = rx.recv() => {
                    let Some(first) = first else { break };
                    // Everything already waiting goes into the same publication.
                    let mut batch = vec![first];
                    while let Ok(r) = rx.try_recv() {
                        batch.push(r);
                    }
                    for report in batch {
                        if let poll::Report::Discovery { id, .. } = &report {
                            waiting.retain(|w| w != id);
                        }
                        self.apply(report);
                    }
                }
                changed = members.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    if let Some(m) = members.borrow_and_update().clone() {
                        self.reconcile(&m);
                    }
                }
                Some(()) = async {
                    match accepted.as_mut() {
                        Some(a) => a.changed().await.ok(),
                        None => std::future::pending().await,
                    }
                } => {}
                _ = retention.tick() => self.forget_expired(),
            }
            waiting.retain(|id| self.slots.iter().any(|s| s.id == *id && s.task.is_some()));
            if waiting.is_empty() {
                self.publish();
                self.started = true;
            }
        }
    }

    /// Applies one member's report to its state.
    fn apply(&mut self, report: poll::Report) {
        let now = Instant::now();
        let metrics = self.metrics.clone();
        let started = self.started;
        match report {
            poll::Report::Discovery { id, address, resolve_error, ready, result, version } => {
                let Some(slot) = self.slot_mut(id) else { return };
                let state = &mut slot.state;
                let name = state.spec.name.clone();
                if let Some(e) = resolve_error {
                    metrics.sync_error(&name, "hostport_resolution");
                    tracing::warn!(apiserver = %name, error = %e, "cannot resolve apiserver address; keeping the last one");
                }
                if state.address != address && state.address.is_some() {
                    // Another machine now: read before it is sent anything,
                    // and (like a joining member) opened only once every
                    // Envoy has the new address — until then an
                    // override-host would name a host Envoy does not have.
                    state.current = false;
                    state.gated = started;
                }
                state.address = address;
                if version.is_some() {
                    state.version = version;
                }
                if let Err(e) = ready {
                    // Unreachable is an error; a failure status is a
                    // server starting or draining (its answer says which).
                    let how = NotReady::of(&e);
                    let answering = how != NotReady::Unreachable;
                    if !answering {
                        metrics.sync_error(&name, "fetch_readyz");
                    }
                    if state.ready || state.last_error.is_none() {
                        tracing::info!(apiserver = %name, error = %e, answering, "apiserver not ready; no new request reaches it until it is ready and read again");
                    }
                    state.not_ready(e.to_string(), how, now);
                }
                match result {
                    None => {}
                    Some(Ok(view)) => {
                        let resources = view.capabilities.resource_count();
                        if !state.healthy || !state.current {
                            tracing::info!(apiserver = %name, resources, "apiserver discovery read; routed to");
                        }
                        metrics.apiserver_resources(&name, resources);
                        state.succeeded(view, now);
                    }
                    Some(Err(e)) => {
                        metrics.sync_error(&name, "fetch_discovery");
                        let had = state.view.is_some();
                        if state.healthy || state.last_error.is_none() {
                            tracing::warn!(apiserver = %name, error = %e, keeping_last_known = had, "apiserver discovery failed");
                        }
                        state.ready = true;
                        state.failed(e.to_string());
                    }
                }
                metrics.apiserver_healthy(&name, state.healthy);
                // Departed and no longer draining: nothing left to ask it.
                if slot.state.departed.is_some()
                    && slot.state.draining_since.is_none()
                    && let Some(t) = slot.task.take()
                {
                    t.abort();
                }
            }
            poll::Report::Ready { id } => {
                if let Some(slot) = self.slot_mut(id) {
                    slot.state.answered(now);
                }
            }
            poll::Report::OpenApi { id, result } => {
                let Some(slot) = self.slot_mut(id) else { return };
                let state = &mut slot.state;
                match result {
                    Ok(docs) => {
                        let changed = !state.openapi.as_ref().is_some_and(|o| Arc::ptr_eq(o, &docs));
                        metrics.openapi_read(&state.spec.name, changed);
                        if changed {
                            state.openapi = Some(docs);
                        }
                    }
                    Err(e) => {
                        metrics.sync_error(&state.spec.name, "fetch_openapi");
                        tracing::warn!(apiserver = %state.spec.name, error = %e, "apiserver OpenAPI read failed; keeping its last documents");
                    }
                }
            }
        }
    }

}
