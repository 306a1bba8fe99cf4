//! mvp-envoy's routing filter as a proxy-wasm module: only the glue between
//! the proxy-wasm ABI and the filter core (crate `mvp-filter-core`, where
//! the router, the refresher, holds and identity live and are tested).
//!
//! `adapter` is the thin proxy-wasm glue (the ABI itself, no SDK: see its
//! module comment for why) and exists only in the wasm32 build;
//! [`header_map`] is proxy-wasm's serialized header map, tested natively.

pub mod header_map;

#[cfg(target_arch = "wasm32")]
mod adapter;
