//! The state file writer, off the sync loop like the mergers: serialising
//! a CRD-heavy cluster's views and syncing them to disk took 32–61 ms per
//! change here (3,000 CRDs, a 5.9 MB file), and on a control-plane node
//! whose disk etcd keeps busy an fsync can take far longer — a draining
//! apiserver's closing or a new member's table must not wait behind it.
//! The latest views only: a write superseded while another runs is skipped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::persist::Persisted;
use crate::discover::ServerView;
use crate::building::latest::Latest;
use crate::openapi::ServerOpenApi;
use crate::sync::state::ServerState;
use crate::sync::{States, next_publication};
use crate::building::unchanged::same;

/// A member as handed to the writer: name, URL, view, OpenAPI documents.
pub type StoredMember = (String, String, Arc<ServerView>, Option<Arc<ServerOpenApi>>);

/// What the state file keeps of a member, by identity (pointer equality
/// says unchanged).
pub type Persisting = (Option<Arc<ServerView>>, Option<Arc<ServerOpenApi>>);

pub struct StateFilePlane {
    latest: Latest<Vec<StoredMember>>,
    failed: Arc<AtomicBool>,
    /// The views last handed to the writer.
    from: Vec<Persisting>,
}

impl StateFilePlane {
    /// `restored`: the views the file held at start (nothing to write
    /// until one of them changes): [`persisting`] of the states the sync
    /// loop starts with.
    pub fn spawn(file: Persisted, restored: Vec<Persisting>) -> StateFilePlane {
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
        StateFilePlane { latest, failed, from: restored }
    }

    /// Follows the member states until the sync loop ends.
    pub async fn run(mut self, mut states: States) {
        while let Some(s) = next_publication(&mut states).await {
            self.follow(persisting(&s.members), || {
                s.members.iter().filter_map(|s| Some((s.spec.name.clone(), s.spec.url.to_string(), s.view.clone()?, s.openapi.clone()))).collect()
            });
        }
    }

    /// Hands the members to the writer when some member's view changed, or
    /// when the last write failed (tried again each round). `views` is
    /// every member's, in order; `members` those with a view.
    pub fn follow(&mut self, views: Vec<Persisting>, members: impl FnOnce() -> Vec<StoredMember>) {
        let unchanged = views.len() == self.from.len() && views.iter().zip(&self.from).all(|(a, b)| same(&a.0, &b.0) && same(&a.1, &b.1));
        if unchanged && !self.take_failure() {
            return;
        }
        self.latest.hand_over(members());
        self.from = views;
    }

    /// Whether a write failed since the last call.
    fn take_failure(&self) -> bool {
        self.failed.swap(false, Ordering::Relaxed)
    }
}

/// What the state file keeps of every member, in order.
pub fn persisting(states: &[ServerState]) -> Vec<Persisting> {
    states.iter().map(|s| (s.view.clone(), s.openapi.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::Capabilities;
    use std::time::{Duration, Instant};

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
        let writer = StateFilePlane::spawn(Persisted::new(&path), vec![]);
        writer.latest.hand_over(members());
        eventually("the failed write to be reported", || writer.failed.load(Ordering::Relaxed)).await;
        assert!(writer.take_failure(), "the loop learns of the failure once");
        assert!(!writer.take_failure());

        std::fs::remove_dir(&path).unwrap();
        writer.latest.hand_over(members());
        let file = Persisted::new(&path);
        eventually("the state file", || file.load().is_ok_and(|m| m.len() == 1)).await;
        assert!(!writer.take_failure());
    }
}
