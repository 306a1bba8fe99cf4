//! The routing decision, in plain Rust with no host dependency: the wasm
//! filter makes it for every request, and mvp-ext-proc's `explain` makes
//! the same one for an operator — one implementation.
//!
//! `:path` → [`urlpath`] (decode like Go's `URL.Path`) → [`requestinfo`]
//! (classify exactly like kube-apiserver, [`list_options`] for the query) →
//! [`table`] (which apiservers serve it, decoded once per table change) →
//! [`route`] (the override-host value, or none).
//!
//! Nothing here can panic (the crate denies `unwrap`, `expect`, `panic!`
//! and fallible indexing).

pub mod list_options;
pub mod requestinfo;
pub mod route;
pub mod table;
pub mod urlpath;

#[cfg(any(test, feature = "testing"))]
pub mod testing;
