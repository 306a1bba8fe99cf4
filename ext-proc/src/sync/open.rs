//! Who is open — decided here, from each member's state and what the
//! connected Envoys acknowledged — and the publication of the states the
//! planes follow.

use std::sync::Arc;
use std::time::Instant;

use super::{MemberStates, Syncer};

impl Syncer {
    /// Decides who is open now and publishes every member's state.
    pub(super) fn publish(&mut self) {
        let accepted = self.accepted.as_ref().map(|a| a.borrow().clone()).unwrap_or_default();
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
        self.states_tx.send_replace(Arc::new(MemberStates { members: self.states(), complete: true }));
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::super::next_publication;
    use crate::discover::Transport;
    use crate::metrics::Metrics;
    use crate::table::plane::{TablePlane, Tables};

    /// The planes follow complete publications only: before the first one
    /// (members at start still unread) there is nothing to follow and no
    /// table; after it, the table plane publishes a table.
    #[tokio::test]
    async fn the_planes_follow_complete_publications_only() {
        let transport = Transport::new(None, None, "X-Remote-User", false).unwrap();
        let options = super::super::SyncOptions { interval: std::time::Duration::from_secs(3600), discovery: Default::default(), departed_retention: std::time::Duration::from_secs(3600) };
        let member = crate::membership::Desired { spec: "a=http://127.0.0.1:1".parse().unwrap(), incarnation: None };
        let (mut syncer, states) = super::Syncer::new(&std::sync::Arc::new(vec![member]), Default::default(), transport, options, Metrics::new());
        assert_eq!(states.borrow().members.len(), 1, "operators see the configured member at once");
        let mut follower = states.clone();
        assert!(next_publication(&mut follower).now_or_never().is_none(), "nothing to follow before the first publication");
        let (plane, Tables { mut table, .. }) = TablePlane::new(Metrics::new(), states.borrow().clone());
        let plane = tokio::spawn(plane.run(states.clone()));
        syncer.publish();
        let first = next_publication(&mut follower).now_or_never().flatten().expect("the first publication");
        assert!(first.complete && first.members.len() == 1);
        tokio::time::timeout(std::time::Duration::from_secs(10), table.wait_for(|t| t.version != 0)).await.unwrap().unwrap();
        assert_eq!(table.borrow().apiservers.len(), 1);
        drop(syncer);
        tokio::time::timeout(std::time::Duration::from_secs(10), plane).await.unwrap().unwrap();
    }
}
