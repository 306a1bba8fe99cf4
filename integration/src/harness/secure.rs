//! The secure front door's test topology: a fresh PKI (rcgen), fakes that
//! serve TLS and authenticate like kube-apiserver (client certificates,
//! requestheader from the front door's proxy certificate, a token), and the
//! front door with TLS everywhere.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use super::{FakeSpec, FakeTls, FrontDoor, Options};
use crate::pki::{Leaf, PROXY_CLIENT_CN, Pki};

pub const TOKEN: &str = "t0ken-of-tina";

pub fn fake_tls(pki: &Pki, dir: &Path, name: &str, serving: Option<Leaf>) -> FakeTls {
    FakeTls {
        serving: serving.unwrap_or_else(|| pki.apiserver(dir, name).expect("TLS test setup")),
        client_ca: pki.clients.cert_file.clone(),
        requestheader_ca: pki.requestheader.cert_file.clone(),
        requestheader_allowed_names: vec![PROXY_CLIENT_CN.into()],
        tokens: vec![format!("{TOKEN}=tina:token-team")],
    }
}

/// A TLS front door over two kube-authenticating fakes (v1.30, v1.37), its
/// PKI and the directory holding the certificates.
pub struct Setup {
    pub pki_dir: tempfile::TempDir,
    pub pki: Arc<Pki>,
    pub door: FrontDoor,
}

pub async fn setup(options: Options) -> Setup {
    let pki_dir = tempfile::tempdir().expect("TLS test setup");
    let pki = Arc::new(Pki::new(pki_dir.path()).expect("TLS test setup"));
    let specs: Vec<FakeSpec> = [("v130", "v1.30"), ("v137", "v1.37")]
        .iter()
        .map(|(n, r)| FakeSpec::new(n, r).with_tls(fake_tls(&pki, pki_dir.path(), n, None)))
        .collect();
    let door = FrontDoor::start(&specs, Options { tls: Some(pki.clone()), ..options }).await.expect("TLS test setup");
    Setup { pki_dir, pki, door }
}

/// A TLS connection to the front door presenting `identity`, for upgraded
/// streams (WebSocket exec, SPDY port-forward) a test drives by hand.
pub async fn connect(door: &FrontDoor, identity: Option<&Leaf>) -> anyhow::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let pki = door.tls.as_ref().ok_or_else(|| anyhow::anyhow!("not a TLS front door"))?;
    let config = super::tls_client_config(&pki.serving.cert_file, identity, &[b"http/1.1"])?;
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", door.listen_port)).await?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await?)
}

/// The identity a fake apiserver authenticated: (user, groups, how).
pub fn user(v: &Value) -> (String, Vec<String>, String) {
    let u = &v["servedBy"]["user"];
    (
        u["name"].as_str().unwrap_or("").to_string(),
        u["groups"].as_array().map(|g| g.iter().map(|x| x.as_str().unwrap_or("").to_string()).collect()).unwrap_or_default(),
        u["authenticatedBy"].as_str().unwrap_or("").to_string(),
    )
}

pub fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A kubeconfig for `server` trusting `ca`, with `user` (the indented body
/// of a kubeconfig user entry: certificate files or a token).
pub fn kubeconfig(dir: &Path, server: &str, ca: &Path, user: &str) -> std::path::PathBuf {
    let path = dir.join(format!("kubeconfig-{}", user.len()));
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: mvp\n  cluster:\n    server: {server}\n    certificate-authority: {}\ncontexts:\n- name: mvp\n  context:\n    cluster: mvp\n    user: u\nusers:\n- name: u\n  user:\n{user}\ncurrent-context: mvp\n",
        ca.display()
    );
    std::fs::write(&path, text).expect("writing a kubeconfig");
    path
}

/// rustls client configuration trusting `ca`, presenting `identity` if given.
pub fn tls_client_config(ca: &Path, identity: Option<&crate::pki::Leaf>, alpn: &[&[u8]]) -> anyhow::Result<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(ca)? {
        roots.add(c?)?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some(id) => {
            let certs = rustls::pki_types::CertificateDer::pem_file_iter(&id.cert_file)?.collect::<Result<Vec<_>, _>>()?;
            let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&id.key_file)?;
            builder.with_client_auth_cert(certs, key)?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}
