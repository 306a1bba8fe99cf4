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

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

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

fn file_err(flag: &'static str, path: &Path, detail: impl std::fmt::Display) -> TlsError {
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

/// How the front door talks TLS to apiservers (Envoy's cluster and
/// mvp-ext-proc's discovery alike).
#[derive(Clone)]
pub struct PeerTls {
    pub ca_file: PathBuf,
    pub ca: Vec<CertificateDer<'static>>,
    pub client: Option<(PathBuf, PathBuf, Identity)>,
    /// SNI and the DNS name the apiserver's certificate must carry.
    pub server_name: String,
}

impl PeerTls {
    pub fn load(
        ca_file: Option<&Path>,
        client_cert: Option<&Path>,
        client_key: Option<&Path>,
        server_name: &str,
    ) -> Result<Option<PeerTls>, TlsError> {
        let client = match (client_cert, client_key) {
            (Some(c), Some(k)) => Some((
                c.to_path_buf(),
                k.to_path_buf(),
                load_identity("--proxy-client-cert-file", c, "--proxy-client-key-file", k)?,
            )),
            (None, None) => None,
            _ => {
                return Err(TlsError::Flags(
                    "--proxy-client-cert-file and --proxy-client-key-file go together".into(),
                ));
            }
        };
        let Some(ca_file) = ca_file else {
            if client.is_some() {
                return Err(TlsError::Flags(
                    "--proxy-client-cert-file needs --peer-ca-file: apiservers are always verified".into(),
                ));
            }
            return Ok(None);
        };
        if rustls::pki_types::ServerName::try_from(server_name.to_string()).is_err() {
            return Err(TlsError::Flags(format!("--peer-server-name {server_name:?} is not a valid DNS name")));
        }
        Ok(Some(PeerTls {
            ca: load_certs("--peer-ca-file", ca_file)?,
            ca_file: ca_file.to_path_buf(),
            client,
            server_name: server_name.to_string(),
        }))
    }

    /// rustls client configuration for mvp-ext-proc's discovery requests:
    /// the apiserver must present a certificate from `--peer-ca-file` for
    /// `server_name`; the front door presents its proxy client certificate.
    pub fn client_config(&self) -> Result<rustls::ClientConfig, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        for c in &self.ca {
            roots.add(c.clone()).map_err(|e| file_err("--peer-ca-file", &self.ca_file, e))?;
        }
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Flags(e.to_string()))?
            .with_root_certificates(roots);
        let mut config = match &self.client {
            Some((cert, _, id)) => builder
                .with_client_auth_cert(id.certs.clone(), id.key.clone_key())
                .map_err(|e| file_err("--proxy-client-cert-file", cert, e))?,
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// The front door's own listener TLS and client-certificate identity.
#[derive(Clone)]
pub struct FrontTls {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub client_ca_file: Option<PathBuf>,
}

impl FrontTls {
    pub fn load(
        cert: Option<&Path>,
        key: Option<&Path>,
        client_ca: Option<&Path>,
    ) -> Result<Option<FrontTls>, TlsError> {
        match (cert, key) {
            (Some(c), Some(k)) => {
                load_identity("--tls-cert-file", c, "--tls-private-key-file", k)?;
                if let Some(ca) = client_ca {
                    load_certs("--client-ca-file", ca)?;
                }
                Ok(Some(FrontTls {
                    cert_file: c.to_path_buf(),
                    key_file: k.to_path_buf(),
                    client_ca_file: client_ca.map(Path::to_path_buf),
                }))
            }
            (None, None) if client_ca.is_some() => {
                Err(TlsError::Flags("--client-ca-file needs --tls-cert-file and --tls-private-key-file".into()))
            }
            (None, None) => Ok(None),
            _ => Err(TlsError::Flags("--tls-cert-file and --tls-private-key-file go together".into())),
        }
    }
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
