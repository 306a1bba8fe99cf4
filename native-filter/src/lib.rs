//! mvp-envoy's routing filter as a native Envoy dynamic module (`.so`):
//! the same [`Router`](mvp_filter_core::router::Router) and
//! [`Refresher`](mvp_filter_core::refresher::Refresher) as the proxy-wasm
//! filter, on the same [`Host`](mvp_filter_core::host::Host) trait, over
//! Envoy's dynamic-module ABI instead of proxy-wasm — past the proxy-wasm
//! per-request floor (BENCHMARKS.md).
//!
//! - [`filter`]: the HTTP filter on every worker (a router per worker).
//! - [`refresher`]: the bootstrap extension on the main thread that long-
//!   polls mvp-ext-proc's `GetTable` and publishes the table to
//!   [`process`] memory, one copy for every worker.
//! - [`lb`]: the apiserver clusters' balancer; [`handover`]: the pinned
//!   list the filter hands it on the same worker.
//! - [`host`]: the `Host` over the ABI ([`pin`]: how it pins a request); [`abi`]: the ABI, declared by hand;
//!   [`exports`]: the hooks Envoy calls, none of which lets a panic out.
//!
//! The `.wasm` stays the portable default (any Envoy with V8); this build
//! must match the Envoy it is loaded into (`mvp-ext-proc envoy-config
//! --filter native`).

mod abi;
mod exports;
mod filter;
mod handover;
mod hold;
mod host;
mod lb;
mod pin;
mod process;
mod refresher;
mod warn;
