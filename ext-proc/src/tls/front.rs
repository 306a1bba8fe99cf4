use std::path::{Path, PathBuf};

use super::{TlsError, load_certs, load_identity};

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
