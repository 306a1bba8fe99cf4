//! Rotation of the front door's credentials toward apiservers: the peer CA
//! and the proxy client certificate are files that cert-manager, kubeadm
//! (`kubeadm certs renew`) or a Secret volume replace in place. They are
//! re-read every [`CHECK_EVERY`]; when their contents change:
//!
//! - Envoy: the clusters carry a digest of the contents
//!   ([`crate::xds::ClusterOptions::tls_files_digest`]), so a new digest is a
//!   new cluster version over CDS and Envoy loads the files again. Envoy is
//!   the judge of what it can load: a broken file is rejected there (NACK,
//!   counted in `mvp_xds_nacks_total`) and Envoy keeps the clusters it has.
//! - mvp-ext-proc's own discovery connections: the files are loaded with the
//!   same checks as at start; a broken set is logged and counted
//!   (`mvp_peer_tls_reloads_total{result="rejected"}`) and the last good
//!   credentials stay in use.
//!
//! A half-done rotation (new certificate, old key) is such a broken set until
//! the second file lands; the next check after that loads both.

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::watch;

use super::PeerTls;
use crate::metrics::Metrics;

/// How often the files are read: a few KiB, compared by digest.
pub const CHECK_EVERY: Duration = Duration::from_secs(2);

/// A digest of the files' contents (missing files digest as empty).
pub fn files_digest(p: &PeerTls) -> String {
    let mut h = Sha256::new();
    let files = std::iter::once(&p.ca_file).chain(p.client.iter().flat_map(|(c, k, _)| [c, k]));
    for f in files {
        let bytes = std::fs::read(f).unwrap_or_default();
        h.update((bytes.len() as u64).to_be_bytes());
        h.update(bytes);
    }
    hex::encode(&h.finalize()[..8])
}

/// What the rest of the process follows.
pub struct Rotation {
    /// The digest of the files as they are now (for Envoy's clusters).
    pub digest: watch::Receiver<String>,
    /// The last good client configuration (for discovery connections).
    pub client_config: watch::Receiver<Arc<rustls::ClientConfig>>,
}

/// Starts following the files `peer` was loaded from.
pub fn follow(peer: PeerTls, metrics: Arc<Metrics>) -> Result<(Rotation, tokio::task::JoinHandle<()>), super::TlsError> {
    let digest_of = peer.clone();
    let (client_config, digest, task) = follow_files(
        move || files_digest(&digest_of),
        move || reload(&peer),
        move |now, outcome| match outcome {
            Ok(()) => {
                tracing::info!(digest = %now, "peer TLS files changed; new credentials loaded, Envoy's clusters follow");
                metrics.peer_tls_reload("loaded");
            }
            Err(e) => {
                tracing::error!(digest = %now, error = %e, "peer TLS files changed but do not load; discovery keeps the last good credentials (Envoy judges the files itself and keeps its clusters if it rejects them)");
                metrics.peer_tls_reload("rejected");
            }
        },
    )?;
    Ok((Rotation { digest, client_config }, task))
}

/// What [`follow_files`] gives: the last good credentials, the files'
/// digest, the task that follows them.
pub(crate) type Followed<T> = (watch::Receiver<Arc<T>>, watch::Receiver<String>, tokio::task::JoinHandle<()>);

/// Follows a set of credential files: every [`CHECK_EVERY`] their `digest`;
/// when it changed, `load` them — a set that loads is sent, one that does
/// not leaves the last good one in place — and `outcome` says which (to log
/// and count). The first load's error is returned: a process does not start
/// without its credentials. Also the digest of the files as they are now,
/// loadable or not.
pub(crate) fn follow_files<T: Send + Sync + 'static>(
    digest: impl Fn() -> String + Send + 'static,
    load: impl Fn() -> Result<T, super::TlsError> + Send + 'static,
    outcome: impl Fn(&str, Result<(), &super::TlsError>) + Send + 'static,
) -> Result<Followed<T>, super::TlsError> {
    let (digest_tx, digest_rx) = watch::channel(digest());
    let (loaded_tx, loaded) = watch::channel(Arc::new(load()?));
    let task = tokio::spawn(async move {
        let mut every = tokio::time::interval(CHECK_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        every.tick().await;
        loop {
            every.tick().await;
            let now = digest();
            if *digest_tx.borrow() == now {
                continue;
            }
            match load() {
                Ok(config) => {
                    outcome(&now, Ok(()));
                    loaded_tx.send_replace(Arc::new(config));
                }
                Err(e) => outcome(&now, Err(&e)),
            }
            digest_tx.send_replace(now);
        }
    });
    Ok((loaded, digest_rx, task))
}

fn reload(p: &PeerTls) -> Result<rustls::ClientConfig, super::TlsError> {
    let client = p.client.as_ref().map(|(c, k, _)| (c.as_path(), k.as_path()));
    let loaded = PeerTls::load(Some(&p.ca_file), client.map(|c| c.0), client.map(|c| c.1), &p.server_name)?;
    loaded.ok_or_else(|| super::TlsError::Flags("no peer CA".into()))?.client_config()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_follows_contents() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "a").unwrap();
        let p = PeerTls { ca_file: ca.clone(), ca: vec![], client: None, server_name: "x".into() };
        let first = files_digest(&p);
        assert_eq!(first, files_digest(&p));
        std::fs::write(&ca, "b").unwrap();
        assert_ne!(first, files_digest(&p));
    }
}
