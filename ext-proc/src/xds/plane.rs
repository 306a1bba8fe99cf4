//! The endpoints plane: follows the members and publishes Envoy's clusters
//! and endpoints (a [`Snapshot`] the ADS streams send) when they changed;
//! what the connected Envoys acknowledged comes back as [`Accepted`], which
//! the sync loop reads to open a joining member.

use std::sync::Arc;

use tokio::sync::watch;

use super::{Accepted, ClusterOptions, EndpointMember, Snapshot};

pub struct XdsPublisher {
    pub options: ClusterOptions,
    /// The peer TLS files' digest as they rotate
    /// ([`crate::tls::reload`]): a change is a new cluster version.
    pub tls_files: Option<watch::Receiver<String>>,
    pub snapshot: watch::Sender<Arc<Snapshot>>,
    pub accepted: watch::Receiver<Accepted>,
    /// The members the current snapshot was built from.
    pub from: Vec<EndpointMember>,
}

impl XdsPublisher {
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
