//! `mvp-ext-proc`, the control half of the mvp-envoy front door.
//!
//! Data paths (folders and files in this order):
//! - table path: [`apiservers`] (the configured set) → [`discover`] (what
//!   each apiserver serves — its capabilities — over plain HTTP or mTLS) → [`sync`] (one loop;
//!   per-apiserver state and health policy) → [`table`] (bitmasks,
//!   versioned; `GetTable` for Envoy's wasm refresher, long-polled; the
//!   routing decision explained).
//! - `/apis` path: [`sync`] → [`merge`] (kube's peer-aggregated merge, kept
//!   [`encoded`], built off the loop, freed memory handed back by [`memory`]) →
//!   [`rewrite`] (Envoy's ext_proc on `/apis`). [`apidiscovery`] holds
//!   Kubernetes' discovery types, their Go-exact JSON, protobuf and ETag.
//! - membership path: the `--apiserver` seeds and [`membership`] (identity
//!   Leases, the `default/kubernetes` Endpoints, through kube-rs reflectors)
//!   → [`sync`] (a poller per member: `/readyz`, discovery, OpenAPI; opens a
//!   member only once every connected Envoy acknowledged its endpoint) →
//!   [`xds`] (ADS: CDS the apiserver clusters, EDS every member, DRAINING
//!   once departed); the [`state_file`] keeps API sets across restarts.
//! - Each plane (endpoints, table, merged `/apis`, OpenAPI, state file)
//!   follows the member states [`sync`] hands it and rebuilds only what
//!   changed, in its folder's `plane.rs`; the slow ones off the loop
//!   ([`latest`]).
//! - OpenAPI path: [`discover`] → [`openapi`] (the merged `/openapi/v2` and
//!   v3 index) → [`rewrite`].
//! - Envoy's bootstrap: [`envoy_config`], from the same [`apiservers`] and
//!   [`tls`] flags.
//! - [`grpc`]: the listeners Envoy reaches (TCP, Unix socket) and the
//!   `grpc.health.v1` service that tells Envoy which replica can answer.
//! - Operators: [`operate`] (`/` the status page, `/metrics`, `/healthz`,
//!   `/readyz`, `/table`, `/debug/route` = the table's explain) over
//!   [`metrics`], which every part updates.
//! - [`cli`] turns flags into options; [`serve`] wires the processes;
//!   [`stopping`] is their graceful stop.

pub mod apidiscovery;
pub mod apiservers;
pub mod cli;
pub mod discover;
pub mod encoded;
pub mod envoy_config;
pub mod grpc;
pub mod latest;
pub mod membership;
pub mod memory;
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
pub mod thread_cpu;
pub mod tls;
pub mod unchanged;
pub mod xds;

#[cfg(test)]
mod testdata;
