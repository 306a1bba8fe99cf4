//! `mvp-ext-proc certs`: a certificate set for the control channel between
//! Envoy and mvp-ext-proc (ADS, `GetTable`, ext_proc over TCP), for the demo
//! and for clusters without cert-manager. In `--out`:
//!
//! | file | for |
//! |---|---|
//! | `ca.crt`, `ca.key` | the control channel's own CA (kept to re-issue) |
//! | `server.crt`, `server.key` | `serve --tls-cert-file/--tls-private-key-file` (`--client-ca-file ca.crt`) |
//! | `envoy.crt`, `envoy.key` | `envoy-config --ext-proc-cert-file/--ext-proc-key-file` (`--ext-proc-ca-file ca.crt`) |
//!
//! Run again on the same directory, it keeps the CA and re-issues the two
//! leaf certificates, each file replaced by a rename (a reader never sees a
//! half-written one): that is a rotation, which both sides pick up without
//! a restart. Keys are written `0600`.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType};

/// The name mvp-ext-proc's certificate carries and Envoy checks by default
/// (`envoy-config --ext-proc-server-name`).
pub const DEFAULT_SERVER_NAME: &str = "mvp-ext-proc";

/// The identity Envoy's client certificate carries.
pub const ENVOY_CLIENT_CN: &str = "system:mvp-envoy:envoy";

#[derive(clap::Args)]
pub(super) struct CertsArgs {
    /// Directory to write the set into (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// DNS names mvp-ext-proc's certificate is valid for (repeatable; the
    /// first is the one Envoy checks by default).
    #[arg(long = "server-name", default_values_t = [DEFAULT_SERVER_NAME.to_string()])]
    server_names: Vec<String>,
    /// IP addresses mvp-ext-proc's certificate is valid for (repeatable).
    #[arg(long = "server-ip")]
    server_ips: Vec<std::net::IpAddr>,
    /// How long the leaf certificates are valid (the CA: ten times as long).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "8760h")]
    valid_for: Duration,
}

pub(super) fn certs(a: CertsArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&a.out).with_context(|| format!("--out {}", a.out.display()))?;
    let (ca_pem, ca_key) = ca(&a.out, a.valid_for * 10)?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).context("ca.crt: not a certificate this command can sign with")?;

    let mut server = CertificateParams::new(a.server_names.clone()).context("--server-name")?;
    server.subject_alt_names.extend(a.server_ips.iter().map(|ip| SanType::IpAddress(*ip)));
    server.distinguished_name.push(DnType::CommonName, a.server_names.first().map_or(DEFAULT_SERVER_NAME, String::as_str));
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf(&a.out, "server", server, &issuer, a.valid_for)?;

    let mut envoy = CertificateParams::new(Vec::<String>::new())?;
    envoy.distinguished_name.push(DnType::CommonName, ENVOY_CLIENT_CN);
    envoy.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    leaf(&a.out, "envoy", envoy, &issuer, a.valid_for)?;
    eprintln!("certs: wrote {}/{{ca,server,envoy}}.{{crt,key}}", a.out.display());
    Ok(())
}

/// The CA in `dir`, made if it is not there yet: its PEM and key.
fn ca(dir: &Path, valid_for: Duration) -> anyhow::Result<(String, KeyPair)> {
    let (cert, key) = (dir.join("ca.crt"), dir.join("ca.key"));
    if key.exists() {
        let pem = std::fs::read_to_string(&cert).with_context(|| format!("{}", cert.display()))?;
        let k = KeyPair::from_pem(&std::fs::read_to_string(&key).with_context(|| format!("{}", key.display()))?).context("ca.key")?;
        return Ok((pem, k));
    }
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, "mvp-envoy control channel CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    validity(&mut params, valid_for);
    let k = KeyPair::generate()?;
    let pem = params.self_signed(&k)?.pem();
    write(&key, k.serialize_pem().as_bytes(), true)?;
    write(&cert, pem.as_bytes(), false)?;
    Ok((pem, k))
}

fn leaf(dir: &Path, name: &str, mut params: CertificateParams, issuer: &Issuer<'_, KeyPair>, valid_for: Duration) -> anyhow::Result<()> {
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    validity(&mut params, valid_for);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    // The key first: a reader that sees the new certificate with the old key
    // rejects the pair and keeps its last good one until the key lands.
    write(&dir.join(format!("{name}.key")), key.serialize_pem().as_bytes(), true)?;
    write(&dir.join(format!("{name}.crt")), cert.pem().as_bytes(), false)
}

/// From an hour ago (clocks differ) for `valid_for`.
fn validity(params: &mut CertificateParams, valid_for: Duration) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::seconds(i64::try_from(valid_for.as_secs()).unwrap_or(i64::MAX / 2));
}

/// Written beside, then renamed into place.
fn write(path: &Path, bytes: &[u8], secret: bool) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(&tmp)
        .with_context(|| format!("{}", tmp.display()))?;
    f.write_all(bytes).and_then(|()| f.sync_all()).with_context(|| format!("{}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("{}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::tls::GrpcTlsFiles;

    fn run(dir: &Path) {
        certs(CertsArgs { out: dir.to_path_buf(), server_names: vec![DEFAULT_SERVER_NAME.into()], server_ips: vec!["127.0.0.1".parse().unwrap()], valid_for: Duration::from_secs(3600) }).unwrap();
    }

    /// The set loads as mvp-ext-proc's gRPC credentials; a second run keeps
    /// the CA and issues new leaves (a rotation), keys private.
    #[test]
    fn a_set_that_serves_and_rotates_under_the_same_ca() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        run(dir.path());
        let files = GrpcTlsFiles { cert_file: dir.path().join("server.crt"), key_file: dir.path().join("server.key"), client_ca_file: dir.path().join("ca.crt") };
        files.load().unwrap();
        let read = |f: &str| std::fs::read(dir.path().join(f)).unwrap();
        let (ca, server, envoy) = (read("ca.crt"), read("server.crt"), read("envoy.crt"));
        for key in ["ca.key", "server.key", "envoy.key"] {
            assert_eq!(std::fs::metadata(dir.path().join(key)).unwrap().permissions().mode() & 0o777, 0o600, "{key}");
        }
        run(dir.path());
        assert_eq!(read("ca.crt"), ca, "the CA is kept");
        assert_ne!(read("server.crt"), server);
        assert_ne!(read("envoy.crt"), envoy);
        files.load().unwrap();
        let (_, envoy_cert) = x509_parser::pem::parse_x509_pem(&read("envoy.crt")).unwrap();
        let cert = envoy_cert.parse_x509().unwrap();
        assert_eq!(cert.subject().iter_common_name().next().unwrap().as_str().unwrap(), ENVOY_CLIENT_CN);
    }
}
