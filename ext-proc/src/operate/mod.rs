//! What operators see: the admin server ([`admin`]: `/metrics`, `/healthz`,
//! `/readyz`, `/table`, `/debug/route`), its status page
//! ([`status_page`]), the metrics ([`metrics`]) and the per-thread CPU
//! time they report ([`thread_cpu`]).

pub mod admin;
pub mod metrics;
pub mod status_page;
pub mod thread_cpu;
