//! The contract between the two halves of the front door.
//!
//! mvp-ext-proc renders Envoy's bootstrap (the control plane's side) and the
//! wasm filter runs inside it (the data plane's side). Everything both must
//! agree on is defined here once: the filter's plugin configuration
//! ([`plugin`]), how the routing table travels through proxy-wasm shared
//! data ([`shared_data`]), the header names ([`headers`]), the names of
//! Envoy objects both refer to ([`envoy`]), the limits ([`limits`]) and who
//! one client is where a client's share is bounded ([`clients`]).
//! mvp-ext-proc serialises these types; the filter parses them.

pub mod clients;
pub mod envoy;
pub mod headers;
pub mod limits;
pub mod plugin;
pub mod shared_data;
