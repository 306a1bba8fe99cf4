use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::CertificateDer;

use super::{Identity, TlsError, file_err, load_certs, load_identity};

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
