//! The gRPC side Envoy talks to: where it listens ([`listen`]: TCP and
//! Unix sockets, the graceful stop), with whom over TCP ([`tls`]: mutual
//! TLS; [`handshake_slots`]: which pending handshakes a flood sheds) and
//! whether this replica can answer ([`health`]). The services themselves live with their planes (ADS in
//! `xds`, `GetTable` in `table`, ext_proc in `rewrite`).

pub mod handshake_slots;
pub mod health;
pub mod listen;
pub mod tls;
