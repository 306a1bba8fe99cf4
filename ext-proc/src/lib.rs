//! `mvp-ext-proc`, the control half of the mvp-envoy front door.
//!
//! Data paths (folders and files in this order):
//! - membership path: the `--apiserver` seeds and [`membership`] (identity
//!   Leases, the `default/kubernetes` Endpoints, through kube-rs reflectors)
//!   → [`sync`] (a poller per member: `/readyz`, [`discover`] — what each
//!   apiserver serves, over plain HTTP or mTLS — and OpenAPI; one loop owns
//!   every member's state, opens a member only once every connected Envoy
//!   acknowledged its endpoint, and publishes the states — nothing else).
//! - The planes follow the member states, each in its own folder and
//!   rebuilding only what changed, in its `plane.rs`, the slow ones off the
//!   loop ([`building`]):
//!   - [`xds`]: Envoy's endpoints over ADS (CDS the apiserver clusters, EDS
//!     every member, DRAINING once departed);
//!   - [`table`]: the routing table (bitmasks, versioned), served as
//!     `GetTable` to Envoy's wasm refresher (long-polled) and explained;
//!   - [`merge`]: kube's peer-aggregated `/apis` (kept [`encoded`]); [`apidiscovery`] holds Kubernetes'
//!     discovery types, their Go-exact JSON, protobuf and ETag;
//!   - [`openapi`]: the merged `/openapi/v2` and v3 index;
//!   - [`state_file`]: every member's last known API set across restarts
//!     (read back into [`sync`] at start).
//! - [`rewrite`]: Envoy's ext_proc on `/apis` and `/openapi/*`, answering
//!   from the merged documents.
//! - [`usage`]: who uses skewed APIs — Envoy's gRPC access log of the
//!   requests the filter marked, counted per API and client (`readiness`).
//! - Envoy's bootstrap: [`envoy_config`], from the same [`apiservers`] and
//!   [`tls`] flags.
//! - [`grpc`]: the listeners Envoy reaches (TCP, Unix socket) and the
//!   `grpc.health.v1` service that tells Envoy which replica can answer.
//! - Operators: [`operate`] (`/` the status page, `/metrics`, `/healthz`,
//!   `/readyz`, `/table`, `/debug/route` = the table's explain, `/readiness`) over
//!   [`metrics`], which every part updates.
//! - [`bearer_token`]: a token read from `Authorization` as kube reads it
//!   (the skew log and delegated authorization).
//! - [`cli`] turns flags into options; [`serve`] wires the processes;
//!   [`stopping`] is their graceful stop.

pub mod apidiscovery;
pub mod apiservers;
pub mod bearer_token;
pub mod building;
pub mod cli;
pub mod discover;
pub mod encoded;
pub mod envoy_config;
pub mod grpc;
pub mod membership;
pub mod merge;
pub mod metrics;
pub mod openapi;
pub mod operate;
pub mod rewrite;
pub mod serve;
pub mod state_file;
pub mod stopping;
pub mod sync;
pub mod table;
pub mod tls;
pub mod usage;
pub mod xds;

#[cfg(test)]
mod testdata;
