//! `/apis` → merge → rewrite: Envoy's `ext_proc` server for the `/apis` route.
//!
//! The request still goes to an apiserver, which authenticates and
//! authorizes it; only when it answers 200 with the discovery document the
//! client negotiated is the body replaced, already at the response-headers
//! phase (the upstream body is never buffered). Every other status passes
//! through untouched.

pub mod negotiate;
pub mod processor;
pub mod routing;
