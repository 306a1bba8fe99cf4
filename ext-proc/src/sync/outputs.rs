//! What the sync loop publishes: who is open (decided here, from what the
//! connected Envoys acknowledged), then each member's state handed to the
//! planes that follow it — Envoy's endpoints ([`crate::xds::plane`]),
//! the routing table ([`crate::table::plane`]), the merged `/apis`
//! ([`crate::merge::plane`]) and OpenAPI ([`crate::openapi::plane`]), the
//! state file ([`crate::state_file::plane`]). Each plane keeps what it was
//! last built from and rebuilds only when that changed (pointer equality of
//! the views says "unchanged"); the merges and the state file are built off
//! the loop, so the table never waits for a merge or a disk.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use super::Syncer;
use super::state::ServerState;
use crate::merge::plane::DiscoveryInputs;
use crate::table::plane::TableMember;
use crate::xds::EndpointMember;

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
        xds.follow(endpoints);
    }

    /// The peer TLS files changed (see [`crate::xds::XdsPublisher`]).
    pub(super) fn rotate_tls_files(&mut self, digest: String) {
        if let Some(xds) = &mut self.xds {
            xds.rotate_tls_files(digest);
        }
    }

    /// Hands the members' states to every plane; an unchanged batch costs
    /// no rebuild anywhere.
    pub(super) async fn publish(&mut self) {
        self.update_open_and_endpoints();
        let Syncer { slots, table, discovery, openapi, state_file, .. } = self;
        let states = || slots.iter().map(|s| &s.state);
        table.follow(states().map(table_member).collect()).await;
        // The merged documents are made of the members Envoy can reach
        // (healthy, or unhealthy with their last known API set).
        let reachable = || states().filter(|s| s.address.is_some());
        discovery.follow(DiscoveryInputs {
            views: reachable().filter_map(|s| Some((s.spec.name.clone(), s.view.clone()?))).collect(),
            closed: reachable().filter(|s| !s.open).map(|s| s.spec.name.clone()).collect::<BTreeSet<String>>(),
        });
        openapi.follow(reachable().filter_map(|s| Some((s.spec.name.clone(), s.openapi.clone()?))).collect());
        if let Some(file) = state_file {
            let views = states().map(|s| (s.view.clone(), s.openapi.clone())).collect();
            file.follow(views, || states().filter_map(|s| Some((s.spec.name.clone(), s.spec.url.to_string(), s.view.clone()?, s.openapi.clone()))).collect());
        }
        self.states_tx.send_replace(Arc::new(self.states()));
    }
}

/// A member's part in the routing table.
pub(super) fn table_member(s: &ServerState) -> TableMember {
    TableMember {
        name: s.spec.name.clone(),
        address: s.address,
        healthy: s.healthy,
        open: s.open,
        pending: s.pending,
        draining: s.draining,
        view: s.view.clone(),
        openapi: s.openapi.clone(),
    }
}
