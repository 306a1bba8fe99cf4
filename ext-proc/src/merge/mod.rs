//! `/apis` → merge: the peer-aggregated discovery document, built once per
//! change of any apiserver's groups and kept as ready-to-send bytes.

pub mod merged;
pub mod order;
pub mod peer_aggregated;
pub mod plane;
pub mod stale;

#[cfg(test)]
mod golden_tests;

pub use merged::MergedDocument;
