//! Following the membership: a member joins (its own discovery loop, its
//! last known API set if the state file has one), restarts (closed until read
//! again), departs (closed at once, kept for the retention) and is forgotten.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Notify;

use super::state::ServerState;
use super::{Slot, Syncer, poll};
use crate::discover::Discoverer;
use crate::membership::{Desired, MemberSet};

impl Syncer {
    /// Starts following a member: its own discovery loop, its last known
    /// API set if the state file has one. Closed until read.
    pub(super) fn join(&mut self, d: &Desired, gated: bool) {
        let id = self.next_id;
        self.next_id += 1;
        let mut state = ServerState::new(d.spec.clone());
        if let Some(view) = self.restorable.remove(&(d.spec.name.clone(), d.spec.url.to_string())) {
            tracing::info!(apiserver = %d.spec.name, resources = view.capabilities.resource_count(), "last known API set restored from the state file");
            state.restored(view);
        }
        state.gated = gated;
        state.incarnation = d.incarnation.clone();
        let wake = Arc::new(Notify::new());
        let discoverer = Discoverer::new(&d.spec, self.transport.clone(), self.options.discovery.clone(), self.known.clone());
        let task = tokio::spawn(poll::poll(id, d.spec.clone(), discoverer, self.options.interval, self.reports_tx.clone(), wake.clone()));
        // A departed entry of the same name (or address) comes back as this one.
        if let Some(i) = self.slots.iter().position(|s| s.state.spec.name == d.spec.name || s.state.spec.url == d.spec.url) {
            let old = self.slots.remove(i);
            if state.view.is_none() {
                state.view = old.state.view.clone();
                state.openapi = old.state.openapi.clone();
            }
        }
        self.insert(Slot { id, state, wake, task: Some(task) });
    }

    /// Follows a new membership: joins, departures, restarts.
    pub(super) fn reconcile(&mut self, desired: &MemberSet) {
        let now = Instant::now();
        for d in desired.iter() {
            let existing = self.slots.iter_mut().find(|s| s.state.spec.url == d.spec.url || s.state.spec.name == d.spec.name);
            match existing {
                Some(slot) if slot.task.is_some() && slot.state.spec == d.spec => {
                    if d.incarnation.is_some() && slot.state.incarnation != d.incarnation {
                        if slot.state.incarnation.is_some() {
                            tracing::info!(apiserver = %d.spec.name, from = ?slot.state.incarnation, to = ?d.incarnation, "apiserver restarted; closed until its discovery is read again");
                            self.metrics.membership_change("restarted");
                            slot.state.restarted();
                            slot.wake.notify_one();
                        }
                        slot.state.incarnation = d.incarnation.clone();
                    }
                }
                _ => {
                    let rejoin = existing.is_some();
                    tracing::info!(apiserver = %d.spec.name, url = %d.spec.url, rejoin, "apiserver joined; routed to once its discovery is read");
                    self.metrics.membership_change("joined");
                    self.join(d, self.started);
                }
            }
        }
        for slot in &mut self.slots {
            let member = desired.iter().any(|d| d.spec == slot.state.spec);
            if !member && slot.state.departed.is_none() {
                tracing::info!(apiserver = %slot.state.spec.name, "apiserver departed; no new request reaches it, its exclusive APIs answer 503 until it is forgotten");
                self.metrics.membership_change("departed");
                slot.state.departed = Some(now);
                slot.state.ready = false;
                if let Some(t) = slot.task.take() {
                    t.abort();
                }
            }
        }
        self.forget_expired();
    }

    /// Departed members are forgotten after the retention period (at once
    /// when nothing about them is known).
    pub(super) fn forget_expired(&mut self) {
        let retention = self.options.departed_retention;
        let before = self.slots.len();
        self.slots.retain(|s| match s.state.departed {
            Some(at) if s.state.view.is_none() || at.elapsed() >= retention => {
                tracing::info!(apiserver = %s.state.spec.name, "departed apiserver forgotten");
                false
            }
            _ => true,
        });
        for _ in self.slots.len()..before {
            self.metrics.membership_change("forgotten");
        }
    }
}
