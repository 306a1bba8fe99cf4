//! TLS serving for the fake apiserver: rustls with optional client
//! certificates, each connection's verified certificate classified for
//! authentication, and HTTP upgrades (exec/attach/port-forward) kept working.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;

use super::auth::ConnInfo;

pub struct TlsServing {
    acceptor: tokio_rustls::TlsAcceptor,
    client_ca: Option<Arc<dyn ClientCertVerifier>>,
    requestheader_ca: Option<Arc<dyn ClientCertVerifier>>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn verifier(cas: &[CertificateDer<'static>]) -> Result<Arc<dyn ClientCertVerifier>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in cas {
        roots.add(c.clone())?;
    }
    Ok(WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider()).allow_unauthenticated().build()?)
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    CertificateDer::pem_file_iter(path)
        .with_context(|| format!("reading {}", path.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("parsing {}", path.display()))
}

impl TlsServing {
    pub fn new(cert: &Path, key: &Path, client_ca: Option<&Path>, requestheader_ca: Option<&Path>) -> Result<TlsServing> {
        let chain = certs(cert)?;
        let key = PrivateKeyDer::from_pem_file(key).with_context(|| format!("reading {}", key.display()))?;
        let client_cas = client_ca.map(certs).transpose()?;
        let rh_cas = requestheader_ca.map(certs).transpose()?;
        let all: Vec<CertificateDer<'static>> = client_cas.iter().chain(rh_cas.iter()).flatten().cloned().collect();
        let builder = rustls::ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
        let builder = if all.is_empty() { builder.with_no_client_auth() } else { builder.with_client_cert_verifier(verifier(&all)?) };
        let mut config = builder.with_single_cert(chain, key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(TlsServing {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            client_ca: client_cas.as_deref().map(verifier).transpose()?,
            requestheader_ca: rh_cas.as_deref().map(verifier).transpose()?,
        })
    }

    fn classify(&self, chain: Option<&[CertificateDer<'static>]>) -> ConnInfo {
        let mut info = ConnInfo::default();
        let Some((leaf, intermediates)) = chain.and_then(|c| c.split_first()) else { return info };
        let chains_to = |v: &Option<Arc<dyn ClientCertVerifier>>| {
            v.as_ref().is_some_and(|v| v.verify_client_cert(leaf, intermediates, UnixTime::now()).is_ok())
        };
        let Ok((_, parsed)) = x509_parser::parse_x509_certificate(leaf) else { return info };
        let subject = parsed.subject();
        // Go's pkix.Name: with several CNs the last (in certificate order) wins.
        let cn = subject.iter_common_name().filter_map(|a| a.as_str().ok().map(str::to_string)).last();
        let orgs: Vec<String> = subject.iter_organization().filter_map(|a| a.as_str().ok().map(str::to_string)).collect();
        if chains_to(&self.requestheader_ca) {
            info.requestheader_cn = cn.clone();
        }
        if chains_to(&self.client_ca) {
            info.x509 = cn.map(|cn| (cn, orgs));
        }
        info
    }

    /// The TLS handshake of an accepted connection, and what its client
    /// certificate authenticates as; `None` if the handshake failed.
    pub async fn accept(&self, tcp: tokio::net::TcpStream) -> Option<(tokio_rustls::server::TlsStream<tokio::net::TcpStream>, ConnInfo)> {
        let stream = self.acceptor.accept(tcp).await.ok()?;
        let info = self.classify(stream.get_ref().1.peer_certificates());
        Some((stream, info))
    }
}
