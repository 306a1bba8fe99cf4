//! The endpoints plane: follows the member states and publishes Envoy's
//! clusters and endpoints (a [`Snapshot`] the ADS streams send) when they
//! changed; what the connected Envoys acknowledged goes back to the sync
//! loop ([`crate::sync::accepted`]), which opens a joining member only then.

use std::sync::Arc;

use tokio::sync::watch;

use super::{ClusterOptions, EndpointMember, Snapshot};
use crate::sync::{States, next_publication};
use crate::sync::state::ServerState;

pub struct XdsPublisher {
    pub options: ClusterOptions,
    /// The peer TLS files' digest as they rotate
    /// ([`crate::tls::reload`]): a change is a new cluster version.
    pub tls_files: Option<watch::Receiver<String>>,
    pub snapshot: watch::Sender<Arc<Snapshot>>,
    /// The members the current snapshot was built from.
    pub from: Vec<EndpointMember>,
}

impl XdsPublisher {
    /// Follows the member states (complete publications only: ADS answers
    /// nothing before the first) and the TLS files until the sync loop ends.
    pub async fn run(mut self, mut states: States) {
        let mut tls_files = self.tls_files.clone();
        loop {
            tokio::select! {
                s = next_publication(&mut states) => match s {
                    Some(s) => self.follow(endpoints(&s.members)),
                    None => return,
                },
                Some(digest) = async {
                    match tls_files.as_mut() {
                        Some(t) => t.changed().await.ok().map(|()| t.borrow_and_update().clone()),
                        None => std::future::pending().await,
                    }
                } => self.rotate_tls_files(digest),
            }
        }
    }

    /// Publishes the endpoints when they changed. The first publication
    /// goes out whatever it holds (ADS answers nothing before it).
    pub fn follow(&mut self, endpoints: Vec<EndpointMember>) {
        if endpoints != self.from || !self.snapshot.borrow().published {
            self.snapshot.send_replace(Snapshot::build(&self.options, &endpoints));
            self.from = endpoints;
        }
    }

    /// The peer TLS files changed: Envoy's clusters get a new version, so
    /// Envoy loads the files again.
    pub fn rotate_tls_files(&mut self, digest: String) {
        if self.options.tls_files_digest != digest {
            self.options.tls_files_digest = digest;
            // Before the first publication there is nothing to replace: it
            // will carry the new digest.
            if self.snapshot.borrow().published {
                self.snapshot.send_replace(Snapshot::build(&self.options, &self.from));
            }
        }
    }
}

/// Envoy's endpoints: every member with an address (a departed one
/// DRAINING until forgotten).
fn endpoints(states: &[ServerState]) -> Vec<EndpointMember> {
    states
        .iter()
        .filter_map(|s| Some(EndpointMember { address: s.address?, name: s.spec.name.clone(), departed: s.departed.is_some() }))
        .collect()
}
