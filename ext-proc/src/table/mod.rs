//! The routing table plane: built from the member states ([`build`]),
//! served to every Envoy's wasm refresher ([`get_table`], `GetTable`, a long
//! poll), and explained to operators with the filter's own decision
//! ([`explain`]).

pub mod build;
pub mod explain;
pub mod get_table;
pub mod plane;
