//! The gRPC side Envoy talks to: where it listens ([`listen`]: TCP and
//! Unix sockets, the graceful stop), with whom over TCP ([`tls`]: mutual
//! TLS) and whether this replica can answer ([`health`]). The services themselves live with their planes (ADS in
//! `xds`, `GetTable` in `table`, ext_proc in `rewrite`).

pub mod health;
pub mod listen;
pub mod tls;
