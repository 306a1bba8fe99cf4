//! mvp-envoy's proxy-wasm filter.
//!
//! Data path per request (`router`): the routing decision of `mvp-routing`
//! — `:path` → [`urlpath`] (decode like Go's `URL.Path`) → [`requestinfo`]
//! (classify exactly like kube-apiserver) → [`table`] (which apiservers
//! serve it) → [`route`] (the override-host value). The table arrives through [`refresher`] (a singleton on Envoy's
//! main thread calling mvp-ext-proc's `GetTable`, framed by [`get_table`])
//! and proxy-wasm shared data ([`shared_table`]). [`identity`] turns a
//! verified client certificate into requestheaders. A request only closed
//! apiservers serve is [`hold`]: paused until a newer table (or its time) comes.
//!
//! Everything but `adapter` is plain Rust over the [`host::Host`] trait and
//! tested natively; `adapter` is the thin proxy-wasm glue (the ABI itself, no
//! SDK: see its module comment for why) and exists only in the wasm32 build.

pub mod get_table;
pub mod header_map;
pub mod hold;
pub mod host;
pub mod identity;
pub mod refresher;
pub mod router;
pub mod shared_table;

pub use mvp_routing::{list_options, requestinfo, route, table, urlpath};

#[cfg(test)]
mod host_fake;

#[cfg(target_arch = "wasm32")]
mod adapter;
