//! Certificates and keys named by kube-apiserver-style flags, checked at
//! start so a bad file is an error naming it — never a half-configured front
//! door that fails on the first request.
//!
//! Flag names follow kube-apiserver where the concept is the same:
//! `--tls-cert-file`/`--tls-private-key-file` (serving), `--client-ca-file`
//! (client certificates), `--peer-ca-file` (apiserver serving certificates),
//! `--proxy-client-cert-file`/`--proxy-client-key-file` (the front door's
//! identity towards apiservers), `--requestheader-*-headers` (how client
//! identity is forwarded).

mod front;
mod peer;
pub mod reload;
mod requestheader;

use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub use front::FrontTls;
pub use peer::PeerTls;
pub use requestheader::RequestHeaderNames;

/// kube-apiserver's peer proxy verifies peers as this name
/// (`pkg/controlplane/apiserver/peer.go`).
pub const DEFAULT_PEER_SERVER_NAME: &str = "kubernetes.default.svc";

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{flag} {path}: {detail}")]
    File { flag: &'static str, path: PathBuf, detail: String },
    #[error("{0}")]
    Flags(String),
}

pub(crate) fn file_err(flag: &'static str, path: &Path, detail: impl std::fmt::Display) -> TlsError {
    TlsError::File { flag, path: path.to_path_buf(), detail: detail.to_string() }
}

/// Every certificate in a PEM file; each must parse as X.509 and be valid now.
pub fn load_certs(flag: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = std::fs::read(path).map_err(|e| file_err(flag, path, format!("cannot read: {e}")))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| file_err(flag, path, format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(file_err(flag, path, "holds no PEM CERTIFICATE block"));
    }
    for (i, c) in certs.iter().enumerate() {
        let (_, parsed) = x509_parser::parse_x509_certificate(c)
            .map_err(|e| file_err(flag, path, format!("certificate #{} does not parse: {e}", i + 1)))?;
        if !parsed.validity().is_valid() {
            return Err(file_err(
                flag,
                path,
                format!(
                    "certificate #{} ({}) is not valid now: valid from {} to {}",
                    i + 1,
                    parsed.subject(),
                    parsed.validity().not_before,
                    parsed.validity().not_after
                ),
            ));
        }
    }
    Ok(certs)
}

/// A certificate chain and its private key, checked to belong together.
pub struct Identity {
    pub certs: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Identity { certs: self.certs.clone(), key: self.key.clone_key() }
    }
}

pub fn load_identity(
    cert_flag: &'static str,
    cert: &Path,
    key_flag: &'static str,
    key: &Path,
) -> Result<Identity, TlsError> {
    let certs = load_certs(cert_flag, cert)?;
    let key_bytes = std::fs::read(key).map_err(|e| file_err(key_flag, key, format!("cannot read: {e}")))?;
    let private = PrivateKeyDer::from_pem_slice(&key_bytes)
        .map_err(|e| file_err(key_flag, key, format!("no PEM private key: {e}")))?;
    let provider = rustls::crypto::ring::default_provider();
    rustls::sign::CertifiedKey::from_der(certs.clone(), private.clone_key(), &provider).map_err(|e| {
        file_err(key_flag, key, format!("does not belong to the certificate in {} ({e})", cert.display()))
    })?;
    Ok(Identity { certs, key: private })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Files {
        dir: tempfile::TempDir,
    }

    impl Files {
        fn write(&self, name: &str, content: &str) -> PathBuf {
            let p = self.dir.path().join(name);
            std::fs::write(&p, content).unwrap();
            p
        }
    }

    #[test]
    fn bad_files_are_errors_naming_the_file() {
        let f = Files { dir: tempfile::tempdir().unwrap() };
        let a = rcgen::generate_simple_self_signed(vec!["a".into()]).unwrap();
        let b = rcgen::generate_simple_self_signed(vec!["b".into()]).unwrap();
        let cert = f.write("a.crt", &a.cert.pem());
        let key = f.write("a.key", &a.signing_key.serialize_pem());
        let other_key = f.write("b.key", &b.signing_key.serialize_pem());
        let garbage = f.write("garbage.pem", "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n");
        let empty = f.write("empty.pem", "");
        let missing = f.dir.path().join("missing.pem");

        assert!(load_identity("--tls-cert-file", &cert, "--tls-private-key-file", &key).is_ok());
        let cases: Vec<(Result<(), TlsError>, &str)> = vec![
            (load_identity("--tls-cert-file", &cert, "--tls-private-key-file", &other_key).map(|_| ()), "does not belong"),
            (load_identity("--tls-cert-file", &missing, "--tls-private-key-file", &key).map(|_| ()), "cannot read"),
            (load_certs("--peer-ca-file", &garbage).map(|_| ()), "not PEM"),
            (load_certs("--peer-ca-file", &empty).map(|_| ()), "no PEM CERTIFICATE"),
            (load_identity("--tls-cert-file", &cert, "--tls-private-key-file", &cert).map(|_| ()), "no PEM private key"),
            (PeerTls::load(None, Some(&cert), Some(&key), DEFAULT_PEER_SERVER_NAME).map(|_| ()), "needs --peer-ca-file"),
            (PeerTls::load(Some(&cert), Some(&cert), None, DEFAULT_PEER_SERVER_NAME).map(|_| ()), "go together"),
            (PeerTls::load(Some(&cert), None, None, "not a name!").map(|_| ()), "not a valid DNS name"),
            (FrontTls::load(None, None, Some(&cert)).map(|_| ()), "needs --tls-cert-file"),
        ];
        for (result, want) in cases {
            let err = result.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains(want), "{err:?} should contain {want:?}");
        }
        let named = load_certs("--peer-ca-file", &garbage).err().unwrap().to_string();
        assert!(named.starts_with("--peer-ca-file") && named.contains("garbage.pem"), "{named}");
    }
}
