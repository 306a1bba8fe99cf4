//! `/apis` → merge → rewrite: Envoy's `ext_proc` server for the `/apis`
//! route, and the same for `/openapi/v2` and `/openapi/v3` ([`openapi`]).
//!
//! The request still goes to an apiserver, which authenticates and
//! authorizes it; only when it answers 200 with the discovery document the
//! client negotiated is the body replaced, already at the response-headers
//! phase (the upstream body is never buffered). Every other status passes
//! through untouched.
//!
//! [`exchange`] (what the response phase knows of the request) →
//! [`negotiate`] (which answer the client asked for) → [`decide`] (what it
//! gets) → [`response`] (the ext_proc message), by [`server`] (the phase
//! handler) on [`stream`] (the stream loop), served by [`grpc`] (the service,
//! with a codec that sends a merged body without copying it into a message).

pub mod decide;
pub mod exchange;
pub mod service;
pub mod negotiate;
pub mod openapi;
pub mod response;
pub mod handler;
pub mod stream;

pub use exchange::REQUEST_ATTRIBUTES;
