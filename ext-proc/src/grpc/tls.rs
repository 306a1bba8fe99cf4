//! mvp-ext-proc's gRPC port over TCP with mutual TLS: ADS (which tells
//! Envoy where the apiservers are), `GetTable` and ext_proc carry what an
//! attacker on the network would most like to read or forge, so a TCP
//! listener serves only TLS 1.2+ and only to a client whose certificate
//! chains to `--client-ca-file` (Envoy's, from `envoy-config
//! --ext-proc-cert-file`); anyone else gets a failed handshake and nothing
//! else. A Unix socket (`--grpc-listen unix:PATH`, the same-host default in
//! the manifests) is authenticated by who can open it, and stays plaintext.
//!
//! Rotation: the three files are read again every [`CHECK_EVERY`]; a changed
//! set that loads (certificate, key that belongs to it, CA) serves every
//! connection from then on, one that does not is logged and counted
//! (`mvp_grpc_tls_reloads_total{result="rejected"}`) and the last good set
//! stays in use. Open connections keep the credentials they were accepted
//! with, as with any TLS server.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::server::WebPkiClientVerifier;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::tls::{TlsError, load_certs, load_identity};

pub use crate::tls::reload::CHECK_EVERY;

/// How long a client may take to finish its handshake: one that does not is
/// dropped, so a half-open handshake holds a descriptor only this long. A
/// client's handshake takes milliseconds, a loaded one's well under this.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);

/// The files, as the flags name them.
#[derive(Clone, Debug)]
pub struct GrpcTlsFiles {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub client_ca_file: PathBuf,
}

impl GrpcTlsFiles {
    /// The server configuration these files make, checked as at start.
    pub fn load(&self) -> Result<rustls::ServerConfig, TlsError> {
        self.server_config(true)
    }

    /// The same certificate for the operator port (`--metrics-listen`),
    /// which asks no client certificate: its callers authenticate with
    /// bearer tokens ([`crate::operate::delegated`]), as on kube's
    /// components' secure port.
    pub fn load_for_operators(&self) -> Result<rustls::ServerConfig, TlsError> {
        self.server_config(false)
    }

    fn server_config(&self, client_certificates: bool) -> Result<rustls::ServerConfig, TlsError> {
        let identity = load_identity("--tls-cert-file", &self.cert_file, "--tls-private-key-file", &self.key_file)?;
        let cas = load_certs("--client-ca-file", &self.client_ca_file)?;
        let mut roots = rustls::RootCertStore::empty();
        for ca in cas {
            roots.add(ca).map_err(|e| TlsError::Flags(format!("--client-ca-file {}: {e}", self.client_ca_file.display())))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| TlsError::Flags(format!("--client-ca-file {}: {e}", self.client_ca_file.display())))?;
        let builder = rustls::ServerConfig::builder_with_provider(provider).with_safe_default_protocol_versions().map_err(|e| TlsError::Flags(e.to_string()))?;
        let builder = if client_certificates { builder.with_client_cert_verifier(verifier) } else { builder.with_no_client_auth() };
        let mut config = builder
            .with_single_cert(identity.certs, identity.key)
            .map_err(|e| TlsError::Flags(format!("--tls-cert-file {}: {e}", self.cert_file.display())))?;
        // gRPC is HTTP/2 only; the operator port also HTTP/1.1 (curl, probes).
        config.alpn_protocols = if client_certificates { vec![b"h2".to_vec()] } else { vec![b"h2".to_vec(), b"http/1.1".to_vec()] };
        Ok(config)
    }

    /// A digest of the files' contents (a missing file digests as empty).
    fn digest(&self) -> String {
        let mut h = Sha256::new();
        for f in [&self.cert_file, &self.key_file, &self.client_ca_file] {
            let bytes = std::fs::read(f).unwrap_or_default();
            h.update((bytes.len() as u64).to_be_bytes());
            h.update(bytes);
        }
        hex::encode(&h.finalize()[..8])
    }

    /// Loads the files (an error if they do not load: the process does not
    /// start without its credentials) and follows them: the receiver always
    /// holds the last good configuration.
    pub fn follow(self, metrics: Arc<Metrics>) -> Result<(watch::Receiver<Arc<rustls::ServerConfig>>, tokio::task::JoinHandle<()>), TlsError> {
        self.follow_as(true, Some(metrics))
    }

    /// [`GrpcTlsFiles::follow`] for the operator port's configuration (the
    /// same files: counted once, by the gRPC port's follower).
    pub fn follow_for_operators(self) -> Result<(watch::Receiver<Arc<rustls::ServerConfig>>, tokio::task::JoinHandle<()>), TlsError> {
        self.follow_as(false, None)
    }

    fn follow_as(self, client_certificates: bool, metrics: Option<Arc<Metrics>>) -> Result<(watch::Receiver<Arc<rustls::ServerConfig>>, tokio::task::JoinHandle<()>), TlsError> {
        let digest_of = self.clone();
        let (config, _, task) = crate::tls::reload::follow_files(
            move || digest_of.digest(),
            move || self.server_config(client_certificates),
            move |now, outcome| match outcome {
                Ok(()) => {
                    if let Some(m) = &metrics {
                        tracing::info!(digest = %now, "gRPC TLS files changed; new connections get the new credentials");
                        m.grpc_tls_reload("loaded");
                    }
                }
                Err(e) => {
                    if let Some(m) = &metrics {
                        tracing::error!(digest = %now, error = %e, "gRPC TLS files changed but do not load; the last good credentials stay in use");
                        m.grpc_tls_reload("rejected");
                    }
                }
            },
        )?;
        Ok((config, task))
    }
}

/// TLS over each accepted TCP connection: the ones whose handshake
/// succeeded, in the order they finish. Accepting never waits for a
/// handshake: each runs in a task of its own, bounded by
/// [`HANDSHAKE_TIMEOUT`], and when [`MAX_HANDSHAKES_PER_CLIENT`] of one
/// client's or [`MAX_HANDSHAKES_IN_FLIGHT`] in all are pending, the oldest
/// is dropped to make room ([`super::handshake_slots`]) — a flood of
/// connections that never finish a handshake holds at most that many
/// descriptors and never keeps a new connection out.
pub fn handshakes(
    tcp: impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> + Send + 'static,
    config: watch::Receiver<Arc<rustls::ServerConfig>>,
) -> impl futures::Stream<Item = std::io::Result<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>> {
    use futures::StreamExt;
    // Finished handshakes wait here for the server to take them (it takes
    // each at once); a slot is freed when the handshake ends, not then.
    let (out, finished) = tokio::sync::mpsc::channel(64);
    tokio::spawn(admit(Box::pin(tcp), config, out));
    tokio_stream::wrappers::ReceiverStream::new(finished).map(Ok)
}

/// The accept side of [`handshakes`]: admits every connection, starts its
/// handshake, aborts the ones shed; ends when the server stops taking.
async fn admit(
    mut tcp: std::pin::Pin<Box<dyn futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> + Send>>,
    config: watch::Receiver<Arc<rustls::ServerConfig>>,
    out: tokio::sync::mpsc::Sender<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>,
) {
    use futures::StreamExt;
    use super::handshake_slots::{SlotId, Slots};
    let mut slots = Slots::new(MAX_HANDSHAKES_PER_CLIENT, MAX_HANDSHAKES_IN_FLIGHT);
    let mut running: std::collections::HashMap<SlotId, tokio::task::AbortHandle> = Default::default();
    let (ended_tx, mut ended) = tokio::sync::mpsc::unbounded_channel::<SlotId>();
    loop {
        tokio::select! {
            biased;
            Some(id) = ended.recv() => {
                slots.finish(id);
                running.remove(&id);
            }
            accepted = tcp.next() => {
                // The accept loop retries its errors itself and never ends.
                let Some(Ok(stream)) = accepted else { continue };
                let peer = stream.peer_addr().ok();
                let client = peer.map(|a| mvp_contract::clients::client_of(a.ip())).unwrap_or(0);
                let (id, shed) = slots.admit(client);
                for s in shed {
                    if let Some(task) = running.remove(&s) {
                        tracing::debug!(?peer, "gRPC TLS handshake shed for a newer connection");
                        task.abort();
                    }
                }
                let acceptor = tokio_rustls::TlsAcceptor::from(config.borrow().clone());
                let (out, ended_tx) = (out.clone(), ended_tx.clone());
                let task = tokio::spawn(async move {
                    let shaken = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
                    let _ = ended_tx.send(id);
                    match shaken {
                        Ok(Ok(tls)) => {
                            let _ = out.send(tls).await;
                        }
                        Ok(Err(e)) => tracing::debug!(?peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(?peer, "TLS handshake timed out"),
                    }
                });
                running.insert(id, task.abort_handle());
            }
            () = out.closed() => break,
        }
    }
    for task in running.into_values() {
        task.abort();
    }
}

/// A TCP listener that hands axum only connections whose TLS handshake
/// succeeded ([`handshakes`]): the operator port over HTTPS.
pub struct TlsListener {
    incoming: std::pin::Pin<Box<dyn futures::Stream<Item = std::io::Result<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>> + Send>>,
    addr: std::net::SocketAddr,
}

impl TlsListener {
    pub fn new(l: tokio::net::TcpListener, config: watch::Receiver<Arc<rustls::ServerConfig>>) -> std::io::Result<TlsListener> {
        let addr = l.local_addr()?;
        Ok(TlsListener { incoming: Box::pin(handshakes(super::listen::tcp_incoming(l), config)), addr })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        use futures::StreamExt;
        loop {
            // The stream never ends (the accept loop retries) and yields
            // only finished handshakes.
            if let Some(Ok(tls)) = self.incoming.next().await {
                let peer = tls.get_ref().0.peer_addr().unwrap_or(self.addr);
                return (tls, peer);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

/// Pending handshakes per listener: a flood of connections that never
/// finish one costs at most this many descriptors; past it the oldest goes.
pub const MAX_HANDSHAKES_IN_FLIGHT: usize = 256;

/// Pending handshakes per client ([`mvp_contract::clients`]): an Envoy
/// with many workers reconnects them all at once, well within it.
pub const MAX_HANDSHAKES_PER_CLIENT: usize = 32;

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &std::path::Path) -> GrpcTlsFiles {
        GrpcTlsFiles { cert_file: dir.join("server.crt"), key_file: dir.join("server.key"), client_ca_file: dir.join("ca.crt") }
    }

    /// A rotation that does not load (a certificate without its key, a
    /// broken file) changes nothing: the last good credentials keep
    /// serving, the rejection is counted; the next good set is taken.
    #[tokio::test(start_paused = true)]
    async fn a_broken_rotation_keeps_the_last_good_credentials() {
        let dir = tempfile::tempdir().unwrap();
        crate::cli::write_cert_set(dir.path());
        let metrics = Metrics::new();
        let (config, task) = files(dir.path()).follow(metrics.clone()).unwrap();
        let first = config.borrow().clone();
        std::fs::write(dir.path().join("server.crt"), "not a certificate").unwrap();
        tokio::time::sleep(CHECK_EVERY * 2).await;
        assert!(Arc::ptr_eq(&first, &config.borrow()), "a broken set replaced the good one");
        assert!(metrics.encode().contains("mvp_grpc_tls_reloads_total{result=\"rejected\"} 1"), "{}", metrics.encode());
        crate::cli::write_cert_set(dir.path());
        tokio::time::sleep(CHECK_EVERY * 2).await;
        assert!(!Arc::ptr_eq(&first, &config.borrow()), "the good set was not taken");
        assert!(metrics.encode().contains("mvp_grpc_tls_reloads_total{result=\"loaded\"} 1"));
        task.abort();
    }
}
