//! The merged documents' planes: they follow the member states and rebuild
//! off the sync loop when a member's documents changed.
//! - `/apis`: the peer-aggregated discovery document ([`merged`], with
//!   [`peer_aggregated`], [`order`] and [`stale`]), built once per change of
//!   any apiserver's groups and kept as ready-to-send bytes; its plane
//!   [`apis_plane`].
//! - `/openapi/v2` and the `/openapi/v3` index: merged by
//!   [`crate::openapi`] (the OpenAPI formats, as [`crate::apidiscovery`]
//!   holds discovery's); its plane [`openapi_plane`].

pub mod merged;
pub mod order;
pub mod peer_aggregated;
pub mod apis_plane;
pub mod openapi_plane;
pub mod stale;

#[cfg(test)]
mod golden_tests;

pub use merged::MergedDocument;
