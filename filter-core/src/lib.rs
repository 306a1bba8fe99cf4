//! The routing filter without its host: everything both builds run — the
//! proxy-wasm module (`wasm-filter/`) and the Envoy dynamic module
//! (`native-filter/`) — as plain Rust over the [`host::Host`] trait, tested
//! natively against a fake host (`host_fake.rs`). Each build is only the
//! glue between its ABI and this crate, the way Kuadrant's wasm-shim keeps
//! its logic apart from proxy-wasm.
//!
//! Data path per request ([`router`]): the routing decision of
//! `mvp-routing` — `:path` → [`urlpath`] (decode like Go's `URL.Path`) →
//! [`requestinfo`] (classify exactly like kube-apiserver) → [`table`]
//! (which apiservers serve it) → [`route`] (the apiservers to pin it to).
//! The table arrives through [`refresher`] (on Envoy's main thread, calling
//! mvp-ext-proc's `GetTable`, framed by [`get_table`]) and is published to
//! the workers ([`shared_table`]). [`identity`] turns a verified client
//! certificate into requestheaders. A request only closed apiservers serve
//! held ([`hold`]) until a newer table, or its time, comes, within the
//! bounds of what each request claims ([`hold_claim`]).

pub mod get_table;
pub mod hold;
pub mod hold_claim;
pub mod host;
pub mod identity;
pub mod refresher;
pub mod router;
pub mod shared_table;
pub mod skew;

pub use mvp_routing::{list_options, requestinfo, route, table, urlpath};

#[cfg(test)]
mod host_fake;
