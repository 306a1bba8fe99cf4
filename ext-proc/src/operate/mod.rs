//! What operators see: the admin server ([`admin`]: `/metrics`, `/healthz`,
//! `/readyz`, `/table`, `/debug/route`) and its status page
//! ([`status_page`]). The metrics themselves are [`crate::metrics`], which
//! every part updates.

pub mod admin;
pub mod status_page;
