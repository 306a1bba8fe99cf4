//! Certificates for TLS tests, generated per test with rcgen: the CAs and
//! leaf certificates a kube control plane has (serving CA, client CA,
//! requestheader CA) plus an untrusted one, written as PEM files.

use std::path::{Path, PathBuf};

use anyhow::Result;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

pub struct Ca {
    pub name: String,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A leaf certificate and key on disk.
#[derive(Clone, Debug)]
pub struct Leaf {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

impl Leaf {
    pub fn cert_pem(&self) -> String {
        std::fs::read_to_string(&self.cert_file).unwrap_or_default()
    }
    pub fn key_pem(&self) -> String {
        std::fs::read_to_string(&self.key_file).unwrap_or_default()
    }
}

impl Ca {
    pub fn new(dir: &Path, name: &str) -> Result<Ca> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, format!("{name} CA"));
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate()?;
        // On disk too, for certificates rcgen cannot write (openssl signs them).
        let key_file = dir.join(format!("{name}-ca.key"));
        std::fs::write(&key_file, key.serialize_pem())?;
        let issuer = CertifiedIssuer::self_signed(params, key)?;
        let cert_file = dir.join(format!("{name}-ca.crt"));
        std::fs::write(&cert_file, issuer.pem())?;
        Ok(Ca { name: name.into(), cert_file, key_file, issuer })
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A client certificate for an OpenSSL `-subj` (e.g. a multi-valued RDN
    /// `/CN=a+CN=b`, which rcgen cannot write), signed with `openssl`.
    pub fn client_from_openssl_subject(&self, dir: &Path, file: &str, subject: &str) -> Result<Leaf> {
        let (key_file, csr, cert_file, ext) =
            (dir.join(format!("{file}.key")), dir.join(format!("{file}.csr")), dir.join(format!("{file}.crt")), dir.join(format!("{file}.ext")));
        std::fs::write(&ext, "extendedKeyUsage=clientAuth\n")?;
        let run = |args: &[&std::ffi::OsStr]| -> Result<()> {
            let out = std::process::Command::new("openssl").args(args).output()?;
            anyhow::ensure!(out.status.success(), "openssl {:?}: {}", args, String::from_utf8_lossy(&out.stderr));
            Ok(())
        };
        let os = |s: &str| std::ffi::OsString::from(s);
        run(&[&os("req"), &os("-new"), &os("-newkey"), &os("ec"), &os("-pkeyopt"), &os("ec_paramgen_curve:prime256v1"), &os("-nodes"),
            &os("-keyout"), key_file.as_os_str(), &os("-out"), csr.as_os_str(), &os("-subj"), &os(subject), &os("-multivalue-rdn"), &os("-utf8")])?;
        run(&[&os("x509"), &os("-req"), &os("-in"), csr.as_os_str(), &os("-CA"), self.cert_file.as_os_str(), &os("-CAkey"), self.key_file.as_os_str(),
            &os("-CAcreateserial"), &os("-days"), &os("1"), &os("-extfile"), ext.as_os_str(), &os("-out"), cert_file.as_os_str()])?;
        Ok(Leaf { cert_file, key_file })
    }

    /// A serving certificate for `dns` names and `ips`.
    pub fn server(&self, dir: &Path, file: &str, dns: &[&str], ips: &[&str]) -> Result<Leaf> {
        let mut params = CertificateParams::new(dns.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
        for ip in ips {
            params.subject_alt_names.push(SanType::IpAddress(ip.parse()?));
        }
        params.distinguished_name.push(DnType::CommonName, dns.first().copied().unwrap_or("server"));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.leaf(dir, file, params)
    }

    /// A client certificate with CN `user` and one O per group (at most two:
    /// rcgen keeps one value per attribute type, so the second O is written
    /// under its raw OID 2.5.4.10).
    pub fn client(&self, dir: &Path, file: &str, user: &str, groups: &[&str]) -> Result<Leaf> {
        self.client_with_names(dir, file, &[user], groups)
    }

    /// Like [`Pki::client`] with one or two CNs, in this order (the second
    /// under its raw OID 2.5.4.3).
    pub fn client_with_names(&self, dir: &Path, file: &str, names: &[&str], groups: &[&str]) -> Result<Leaf> {
        anyhow::ensure!(groups.len() <= 2 && names.len() <= 2, "at most two groups and two names per test certificate");
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        for (i, g) in groups.iter().enumerate() {
            let kind = if i == 0 { DnType::OrganizationName } else { DnType::CustomDnType(vec![2, 5, 4, 10]) };
            dn.push(kind, *g);
        }
        for (i, n) in names.iter().enumerate() {
            let kind = if i == 0 { DnType::CommonName } else { DnType::CustomDnType(vec![2, 5, 4, 3]) };
            dn.push(kind, *n);
        }
        params.distinguished_name = dn;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.leaf(dir, file, params)
    }

    fn leaf(&self, dir: &Path, file: &str, mut params: CertificateParams) -> Result<Leaf> {
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        let cert_file = dir.join(format!("{file}.crt"));
        let key_file = dir.join(format!("{file}.key"));
        std::fs::write(&cert_file, cert.pem())?;
        std::fs::write(&key_file, key.serialize_pem())?;
        Ok(Leaf { cert_file, key_file })
    }
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ca({}, {})", self.name, self.cert_file.display())
    }
}

/// The certificates of a TLS test, as a kube control plane has them.
#[derive(Debug)]
pub struct Pki {
    /// Signs apiserver serving certificates (the front door's --peer-ca-file).
    pub serving: Ca,
    /// Signs user client certificates (--client-ca-file).
    pub clients: Ca,
    /// Signs the front door's proxy client certificate
    /// (apiservers' --requestheader-client-ca-file).
    pub requestheader: Ca,
    /// Trusted by nobody.
    pub evil: Ca,
    /// The front door's own serving certificate (127.0.0.1, localhost).
    pub front_door: Leaf,
    /// The front door's proxy client certificate, CN front-proxy-client.
    pub proxy_client: Leaf,
}

pub const PROXY_CLIENT_CN: &str = "front-proxy-client";

impl Pki {
    pub fn new(dir: &Path) -> Result<Pki> {
        let serving = Ca::new(dir, "serving")?;
        let clients = Ca::new(dir, "clients")?;
        let requestheader = Ca::new(dir, "requestheader")?;
        let evil = Ca::new(dir, "evil")?;
        let front_door = serving.server(dir, "front-door", &["localhost"], &["127.0.0.1"])?;
        let proxy_client = requestheader.client(dir, "proxy-client", PROXY_CLIENT_CN, &[])?;
        Ok(Pki { serving, clients, requestheader, evil, front_door, proxy_client })
    }

    /// An apiserver serving certificate as kube-apiserver's peers expect it.
    pub fn apiserver(&self, dir: &Path, name: &str) -> Result<Leaf> {
        self.apiserver_at(dir, name, "127.0.0.1")
    }

    /// An apiserver's serving certificate for its address `ip` (and
    /// 127.0.0.1).
    pub fn apiserver_at(&self, dir: &Path, name: &str, ip: &str) -> Result<Leaf> {
        // 10.0.0.1: the `kubernetes` Service's ClusterIP (the apiservers'
        // --service-cluster-ip-range 10.0.0.0/24), what a pod's in-cluster
        // configuration connects to.
        self.serving.server(dir, &format!("apiserver-{name}"), &["kubernetes.default.svc", "kubernetes"], &[ip, "127.0.0.1", "10.0.0.1"])
    }
}
