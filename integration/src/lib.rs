//! Test support for mvp-envoy: fake apiservers, and a harness that starts
//! the real front door (Envoy + mvp-ext-proc) on loopback.

pub mod fake;
pub mod harness;
pub mod pki;
