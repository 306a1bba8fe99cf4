//! Following the membership: a member joins (its own discovery loop, its
//! last known API set if the state file has one), restarts (closed until read
//! again), departs (closed at once, kept for the retention) and is forgotten.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Notify;

use super::state::ServerState;
use super::{Slot, Syncer, poll};
use crate::apiservers::MAX_APISERVERS;
use crate::discover::Discoverer;
use crate::membership::{Desired, MemberSet};

impl Syncer {
    /// Starts following a member: its own discovery loop, its last known
    /// API set if the state file has one. Closed until read.
    pub(super) fn join(&mut self, d: &Desired, gated: bool) {
        let id = self.next_id;
        self.next_id += 1;
        let mut state = ServerState::new(d.spec.clone());
        if let Some(stored) = self.restorable.remove(&(d.spec.name.clone(), d.spec.url.to_string())) {
            tracing::info!(apiserver = %d.spec.name, resources = stored.view.capabilities.resource_count(), "last known API set restored from the state file");
            state.restored(stored);
        }
        state.gated = gated;
        state.incarnation = d.incarnation.clone();
        let wake = Arc::new(Notify::new());
        let mut discoverer = Discoverer::new(&d.spec, self.transport.clone(), self.options.discovery.clone(), self.known.clone());
        // A departed entry of the same name (or address) comes back as this one.
        if let Some(i) = self.slots.iter().position(|s| s.state.spec.name == d.spec.name || s.state.spec.url == d.spec.url) {
            let old = self.slots.remove(i);
            if state.view.is_none() {
                state.view = old.state.view.clone();
                state.openapi = old.state.openapi.clone();
            }
            // Its OpenAPI documents read again against the ones it had: the
            // same documents stay the same `Arc`s, so the merge from before
            // it left is taken again, not rebuilt (`merge::openapi_plane`).
            if let Some(docs) = &old.state.openapi {
                discoverer.seed_openapi(docs.clone());
            }
        }
        let task = tokio::spawn(poll::poll(id, d.spec.clone(), discoverer, self.options.interval, self.reports_tx.clone(), wake.clone()));
        self.insert(Slot { id, state, wake, task: Some(task) });
    }

    /// Follows a new membership: joins, departures, restarts.
    pub(super) fn reconcile(&mut self, desired: &MemberSet) {
        let now = Instant::now();
        for d in desired.iter() {
            let existing = self.slots.iter_mut().find(|s| s.state.spec.url == d.spec.url || s.state.spec.name == d.spec.name);
            match existing {
                Some(slot) if slot.task.is_some() && slot.state.departed.is_none() && slot.state.spec == d.spec => {
                    if d.incarnation.is_some() && slot.state.incarnation != d.incarnation {
                        if slot.state.incarnation.is_some() {
                            tracing::info!(apiserver = %d.spec.name, from = ?slot.state.incarnation, to = ?d.incarnation, "apiserver restarted; closed until its discovery is read again");
                            self.metrics.membership_change("restarted");
                            slot.state.restarted(now);
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
                slot.state.departed(now);
                // A member that left while draining is still asked
                // `/readyz`, so it stops being the last resort the moment it
                // stops answering (see `Syncer::apply`).
                if slot.state.draining_since.is_none()
                    && let Some(t) = slot.task.take()
                {
                    t.abort();
                }
            }
        }
        self.forget_expired();
    }

    /// The table holds at most `MAX_APISERVERS` members (a set is a
    /// `u64`); members number at most that many (`membership::combine`),
    /// so past it departed ones are forgotten early, the longest departed
    /// first: a member present now always outranks one that left.
    pub(super) fn make_room(&mut self) {
        while self.slots.len() > MAX_APISERVERS {
            let oldest = self.slots.iter().enumerate().filter_map(|(i, s)| Some((s.state.departed?, i))).min();
            let Some((_, i)) = oldest else {
                // Unreachable through `combine`; the table builder keeps the first.
                tracing::error!(members = self.slots.len(), limit = MAX_APISERVERS, "more members than the table holds");
                return;
            };
            let s = self.slots.remove(i);
            tracing::warn!(apiserver = %s.state.spec.name, limit = MAX_APISERVERS, "departed apiserver forgotten before its retention ended: the table is full");
            self.metrics.membership_change("forgotten");
            self.drop_series(&s.state.spec.name);
        }
    }

    /// A forgotten member's per-apiserver metric series go with it (a
    /// control plane that replaces its apiservers for a year must not grow
    /// `/metrics` by every name it ever had), unless the name lives on.
    fn drop_series(&self, name: &str) {
        if !self.slots.iter().any(|s| s.state.spec.name == name) {
            self.metrics.apiserver_forgotten(name);
        }
    }

    /// Departed members are forgotten after the retention period (at once
    /// when nothing about them is known).
    pub(super) fn forget_expired(&mut self) {
        let retention = self.options.departed_retention;
        for s in &mut self.slots {
            let last_resort_over = s.state.draining_since.is_none_or(|at| at.elapsed() >= crate::sync::state::LAST_RESORT_FOR);
            if s.state.departed.is_some() && last_resort_over && let Some(t) = s.task.take() {
                t.abort();
            }
        }
        let mut forgotten = Vec::new();
        self.slots.retain(|s| match s.state.departed {
            Some(at) if s.state.view.is_none() || at.elapsed() >= retention => {
                tracing::info!(apiserver = %s.state.spec.name, "departed apiserver forgotten");
                forgotten.push(s.state.spec.name.clone());
                false
            }
            _ => true,
        });
        for name in forgotten {
            self.metrics.membership_change("forgotten");
            self.drop_series(&name);
        }
        self.make_room();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::ServerView;
    use crate::membership::Desired;
    use crate::table::build::build as build_table;
    use crate::table::plane::TableMember;

    /// A loop with no members, an hour between reads and an hour's
    /// retention: the tests drive it by hand.
    fn syncer() -> Syncer {
        let transport = crate::discover::Transport::new(None, None, "X-Remote-User", false).unwrap();
        let options = super::super::SyncOptions {
            interval: std::time::Duration::from_secs(3600),
            discovery: Default::default(),
            departed_retention: std::time::Duration::from_secs(3600),
        };
        Syncer::new(&Arc::default(), Default::default(), transport, options, crate::metrics::Metrics::new()).0
    }

    fn members(prefix: &str, base: u16) -> MemberSet {
        Arc::new((0..MAX_APISERVERS as u16).map(|i| Desired { spec: format!("{prefix}-{i:02}=http://127.0.0.1:{}", base + i).parse().unwrap(), incarnation: None }).collect())
    }

    /// 64 members leave and 64 others join within the retention: the
    /// departed ones are forgotten early, never a present one, and the
    /// table (one bit per member) holds exactly the present ones.
    #[tokio::test]
    async fn the_table_never_holds_more_members_than_bits() {
        let mut syncer = syncer();
        syncer.reconcile(&members("old", 20000));
        for s in &mut syncer.slots {
            s.state.succeeded(Arc::new(ServerView::default()), Instant::now());
            syncer.metrics.apiserver_healthy(&s.state.spec.name, true);
            syncer.metrics.sync_error(&s.state.spec.name, "fetch_readyz");
        }
        syncer.reconcile(&members("new", 30000));
        assert_eq!(syncer.slots.len(), MAX_APISERVERS);
        assert!(syncer.slots.iter().all(|s| s.state.spec.name.starts_with("new-") && s.state.departed.is_none()));
        let states = syncer.states();
        let members: Vec<TableMember> = states.iter().map(TableMember::of).collect();
        let table = build_table(members.iter().map(TableMember::member));
        assert_eq!(table.apiservers.len(), MAX_APISERVERS);
        let metrics = syncer.metrics.encode();
        assert!(!metrics.contains("apiserver=\"old-"), "a forgotten member's series stayed: {metrics}");
    }

    /// A member whose name resolves to another address once the loop runs
    /// is read again and, like a joining one, opened only once every
    /// connected Envoy has the new address (issue 31: the new address was
    /// not gated, and tables named it before Envoy's endpoints did).
    #[tokio::test]
    async fn a_moved_member_waits_for_envoy_to_know_its_new_address() {
        let mut syncer = syncer();
        let moving = Desired { spec: "kas-a=http://kas-a.example:6443".parse().unwrap(), incarnation: None };
        syncer.reconcile(&Arc::new(vec![moving]));
        syncer.started = true;
        let id = syncer.slots[0].id;
        let report = |ip: [u8; 4]| super::super::poll::Report::Discovery {
            id,
            address: Some(std::net::SocketAddr::from((ip, 6443))),
            resolve_error: None,
            ready: Ok(()),
            result: Some(Ok(Arc::new(ServerView::default()))),
            version: None,
        };
        syncer.apply(report([10, 0, 0, 1]));
        let state = &syncer.slots[0].state;
        assert!(state.may_open(false), "read at its first address: open");
        syncer.apply(report([10, 0, 0, 2]));
        let state = &syncer.slots[0].state;
        assert!(!state.may_open(false), "moved: not open before Envoy has 10.0.0.2");
        assert!(state.may_open(true));
    }
}
