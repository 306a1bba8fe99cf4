//! The routing table plane: follows the member states — each one's part in
//! the table (its view and OpenAPI index by identity, health,
//! open/pending/draining, address) — and builds and publishes a new table
//! when one changed — on a
//! blocking thread: a CRD-heavy table is large enough to stall ext_proc
//! answers on the runtime. [`super::get_table`] serves what it publishes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use mvp_protos::routing::v1 as pb;
use tokio::sync::watch;

use super::build::{self, Member};
use crate::discover::ServerView;
use crate::openapi::ServerOpenApi;
use crate::metrics::Metrics;
use crate::sync::state::ServerState;
use crate::sync::{MemberStates, States, next_publication};
use crate::building::unchanged::same;

/// One member's part in the table, owned (it goes to the building thread);
/// its view and OpenAPI documents compared by identity.
#[derive(Clone)]
pub struct TableMember {
    pub name: String,
    pub address: Option<SocketAddr>,
    pub healthy: bool,
    pub open: bool,
    pub pending: bool,
    pub draining: bool,
    pub returning: bool,
    pub view: Option<Arc<ServerView>>,
    pub openapi: Option<Arc<ServerOpenApi>>,
    pub release: Option<crate::discover::release::Release>,
}

impl TableMember {
    pub fn of(s: &ServerState) -> TableMember {
        TableMember {
            name: s.spec.name.clone(),
            address: s.address,
            healthy: s.healthy,
            open: s.open,
            pending: s.pending,
            draining: s.draining,
            returning: s.returning,
            view: s.view.clone(),
            openapi: s.openapi.clone(),
            release: s.version.as_deref().and_then(crate::discover::release::Release::parse),
        }
    }

    pub fn member(&self) -> Member<'_> {
        Member {
            name: &self.name,
            address: self.address,
            healthy: self.healthy,
            open: self.open,
            pending: self.pending,
            draining: self.draining,
            returning: self.returning,
            capabilities: self.view.as_deref().map(|v| &v.capabilities),
            openapi: self.openapi.as_deref(),
            release: self.release,
        }
    }
}

impl PartialEq for TableMember {
    fn eq(&self, o: &Self) -> bool {
        self.name == o.name
            && same(&self.view, &o.view)
            && same(&self.openapi, &o.openapi)
            && (self.healthy, self.open, self.pending, self.draining, self.returning, self.address, self.release) == (o.healthy, o.open, o.pending, o.draining, o.returning, o.address, o.release)
    }
}

pub struct TablePlane {
    table: watch::Sender<Arc<pb::RoutingTable>>,
    changed: watch::Sender<SystemTime>,
    /// The states the current table was built from.
    routed: watch::Sender<Arc<MemberStates>>,
    /// What the current table was built from.
    from: Vec<TableMember>,
    metrics: Arc<Metrics>,
}

/// What the rest of the process reads of the table plane.
pub struct Tables {
    pub table: watch::Receiver<Arc<pb::RoutingTable>>,
    /// When the table last changed.
    pub changed: watch::Receiver<SystemTime>,
    /// The member states the current table was built from (and, after a
    /// publication that moved no table, the newest): what `/table` shows
    /// beside the table's version, so the two never disagree. The sync
    /// loop's own publication runs ahead of the table by a build.
    pub routed: watch::Receiver<Arc<MemberStates>>,
}

impl TablePlane {
    /// `initial`: the states before the first publication (the configured
    /// members, unread), shown until there is a table.
    pub fn new(metrics: Arc<Metrics>, initial: Arc<MemberStates>) -> (TablePlane, Tables) {
        let (table_tx, table) = watch::channel(Arc::new(pb::RoutingTable::default()));
        let (changed_tx, changed) = watch::channel(SystemTime::now());
        let (routed_tx, routed) = watch::channel(initial);
        (TablePlane { table: table_tx, changed: changed_tx, routed: routed_tx, from: vec![], metrics }, Tables { table, changed, routed })
    }

    /// Follows the member states until the sync loop ends.
    pub async fn run(mut self, mut states: States) {
        while let Some(s) = next_publication(&mut states).await {
            if self.follow(s.members.iter().map(TableMember::of).collect()).await {
                self.routed.send_replace(s);
            }
        }
    }

    /// Builds and publishes the table when a member's part changed (and the
    /// first time, whatever it holds). Whether the table now is `members`'
    /// (false: its build failed, the last table stays).
    pub async fn follow(&mut self, members: Vec<TableMember>) -> bool {
        if members == self.from && self.table.borrow().version != 0 {
            return true;
        }
        let built = tokio::task::spawn_blocking(move || {
            let table = build::build(members.iter().map(TableMember::member));
            (table, members)
        })
        .await;
        let Ok((new, members)) = built else {
            tracing::error!("routing table build did not complete; keeping the last table");
            return false;
        };
        self.from = members;
        if new.version != self.table.borrow().version {
            // A walk over the whole table (about a millisecond at CRD
            // scale): once per change, for the log line and the gauge.
            let resources = build::resource_count(&new);
            tracing::info!(version = format!("{:016x}", new.version), apiservers = new.apiservers.len(), resources, "routing table changed");
            self.metrics.table_changed(resources);
            self.table.send_replace(Arc::new(new));
            self.changed.send_replace(SystemTime::now());
        }
        true
    }
}
