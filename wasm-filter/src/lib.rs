//! mvp-envoy's proxy-wasm filter.
//!
//! Data path per request: `:path` → [`requestinfo`] (classify exactly like
//! kube-apiserver) → [`table`] (look up which apiservers serve it) →
//! [`route`] (pick the override-host value). The routing table arrives
//! through [`refresh`] (a singleton on Envoy's main thread pulling it from
//! mvp-ext-proc over gRPC) and proxy-wasm shared data.
//!
//! Everything but `adapter` is plain Rust, tested natively; `adapter` is the
//! thin proxy-wasm glue and exists only in the wasm32 build.

pub mod config;
pub mod identity;
pub mod refresh;
pub mod requestinfo;
pub mod route;
pub mod table;

#[cfg(target_arch = "wasm32")]
mod adapter;
