//! `serve`'s flags for the other replicas, whose skew-log counts
//! `readiness` and the status page add (`crate::usage::replicas`).

use clap::Args;

use super::certs;
use crate::usage::replicas::ReplicaOptions;

#[derive(Args)]
pub(super) struct ReplicaArgs {
    /// Another replica's operator endpoint (its --metrics-listen, e.g.
    /// https://mvp-ext-proc.mvp-envoy.svc:9091; repeatable): `readiness` and
    /// the status page add its skew-log counts to this one's — each Envoy
    /// logs to the replica it prefers. A name is asked at every address it
    /// resolves to (a headless Service: every replica); this replica finds
    /// itself among them and skips itself.
    #[arg(long = "replica", value_name = "URL")]
    replicas: Vec<String>,
    /// A bearer token to show the other replicas (their operator endpoints'
    /// delegated authorization: `get` on /usage), re-read at each use —
    /// e.g. the pod's projected ServiceAccount token.
    #[arg(long, value_name = "FILE")]
    replica_token_file: Option<std::path::PathBuf>,
    /// The CA (PEM) an https:// --replica's certificate is checked against
    /// (the control channel's ca.crt).
    #[arg(long, value_name = "FILE")]
    replica_ca_file: Option<std::path::PathBuf>,
    /// The name an https:// --replica's certificate carries (`certs
    /// --server-name`), checked whatever address it is reached at.
    #[arg(long, value_name = "NAME", default_value = certs::DEFAULT_SERVER_NAME)]
    replica_server_name: String,
}

impl ReplicaArgs {
    pub(super) fn options(self) -> ReplicaOptions {
        ReplicaOptions { urls: self.replicas, token_file: self.replica_token_file, ca_file: self.replica_ca_file, server_name: self.replica_server_name }
    }
}
