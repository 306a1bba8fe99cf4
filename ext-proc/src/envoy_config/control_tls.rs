//! Envoy's side of the control channel's mutual TLS (`serve
//! --tls-cert-file …`, [`crate::grpc::tls`]): the `mvp_ext_proc` clusters
//! present Envoy's client certificate and accept only an mvp-ext-proc whose
//! certificate chains to the control channel's CA and names
//! `--ext-proc-server-name` — so no one on the path, nor a pod that joins
//! the replicas' Service, can serve this Envoy xDS and point the apiserver
//! clusters at itself.
//!
//! Both come to Envoy by SDS from files (the way Envoy Gateway and Contour
//! hand their Envoys the xDS credentials): `envoy-config` writes the two
//! SDS documents into `--sds-dir`; they name the certificate files, and
//! Envoy reloads those when a file is renamed into their directory (a
//! Secret volume's update, `mvp-ext-proc certs` again): rotation without a
//! restart. Connections open keep their session; new ones use the new files.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// Envoy's control-channel credentials, as the flags give them.
#[derive(Clone, Debug)]
pub struct ControlTls {
    /// The CA mvp-ext-proc's serving certificate must chain to.
    pub ca_file: PathBuf,
    /// Envoy's client certificate and key.
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// The DNS name mvp-ext-proc's certificate must carry (also the SNI).
    pub server_name: String,
    /// Where the SDS documents are written, as Envoy sees the path.
    pub sds_dir: PathBuf,
}

const CLIENT_SECRET: &str = "mvp_ext_proc_client";
const CA_SECRET: &str = "mvp_ext_proc_ca";
const SECRET_TYPE: &str = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";

fn parent(p: &Path) -> String {
    p.parent().map_or_else(|| ".".to_string(), |d| d.display().to_string())
}

impl ControlTls {
    fn sds_path(&self, secret: &str) -> PathBuf {
        self.sds_dir.join(format!("{secret}.json"))
    }

    fn sds_config(&self, secret: &str) -> Value {
        json!({
            "name": secret,
            "sds_config": {"path_config_source": {"path": self.sds_path(secret).display().to_string()}, "resource_api_version": "V3"},
        })
    }

    /// The `mvp_ext_proc` clusters' transport socket.
    pub fn transport_socket(&self) -> Value {
        json!({
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "sni": self.server_name,
                "common_tls_context": {
                    "alpn_protocols": ["h2"],
                    "tls_certificate_sds_secret_configs": [self.sds_config(CLIENT_SECRET)],
                    "combined_validation_context": {
                        "default_validation_context": {
                            "match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": self.server_name}}],
                        },
                        "validation_context_sds_secret_config": self.sds_config(CA_SECRET),
                    },
                },
            },
        })
    }

    /// The SDS documents to write, each `(path, contents)`. Each watches
    /// its files' directory: a rename into it (a Secret volume's `..data`
    /// swap, `mvp-ext-proc certs`) reloads them.
    pub fn sds_files(&self) -> Vec<(PathBuf, String)> {
        let client = json!({"resources": [{
            "@type": SECRET_TYPE,
            "name": CLIENT_SECRET,
            "tls_certificate": {
                "certificate_chain": {"filename": self.cert_file.display().to_string()},
                "private_key": {"filename": self.key_file.display().to_string()},
                "watched_directory": {"path": parent(&self.cert_file)},
            },
        }]});
        let ca = json!({"resources": [{
            "@type": SECRET_TYPE,
            "name": CA_SECRET,
            "validation_context": {
                "trusted_ca": {"filename": self.ca_file.display().to_string()},
                "watched_directory": {"path": parent(&self.ca_file)},
            },
        }]});
        [(CLIENT_SECRET, client), (CA_SECRET, ca)]
            .into_iter()
            .map(|(name, doc)| (self.sds_path(name), serde_json::to_string_pretty(&doc).unwrap_or_default()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls() -> ControlTls {
        ControlTls {
            ca_file: "/pki/ca.crt".into(),
            cert_file: "/pki/envoy.crt".into(),
            key_file: "/pki/envoy.key".into(),
            server_name: "mvp-ext-proc".into(),
            sds_dir: "/etc/mvp/envoy/sds".into(),
        }
    }

    /// The socket names both secrets by the files the SDS documents hold;
    /// the server's name is checked, not only its CA.
    #[test]
    fn the_socket_and_its_sds_documents_agree() {
        let t = tls();
        let socket = t.transport_socket();
        let ctx = &socket["typed_config"]["common_tls_context"];
        assert_eq!(socket["typed_config"]["sni"], "mvp-ext-proc");
        assert_eq!(ctx["combined_validation_context"]["default_validation_context"]["match_typed_subject_alt_names"][0]["matcher"]["exact"], "mvp-ext-proc");
        let files = t.sds_files();
        let by_path = |p: &Value| -> Value {
            let path = p.as_str().unwrap();
            let (_, doc) = files.iter().find(|(f, _)| f.to_str() == Some(path)).expect("an SDS document for the path");
            serde_json::from_str(doc).unwrap()
        };
        let client = by_path(&ctx["tls_certificate_sds_secret_configs"][0]["sds_config"]["path_config_source"]["path"]);
        assert_eq!(client["resources"][0]["name"], ctx["tls_certificate_sds_secret_configs"][0]["name"]);
        assert_eq!(client["resources"][0]["tls_certificate"]["private_key"]["filename"], "/pki/envoy.key");
        assert_eq!(client["resources"][0]["tls_certificate"]["watched_directory"]["path"], "/pki");
        let ca = by_path(&ctx["combined_validation_context"]["validation_context_sds_secret_config"]["sds_config"]["path_config_source"]["path"]);
        assert_eq!(ca["resources"][0]["validation_context"]["trusted_ca"]["filename"], "/pki/ca.crt");
    }
}
