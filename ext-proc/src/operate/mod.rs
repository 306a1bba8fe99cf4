//! What operators see: the admin server ([`admin`]: `/metrics`, `/healthz`,
//! `/readyz`, `/table`, `/debug/route`, `/readiness`) and its status page
//! ([`status_page`]), which APIs members leaving would take away
//! ([`readiness`]), and who may read them ([`delegated`]: TokenReview and
//! SubjectAccessReview, as kube's components). The metrics themselves are [`crate::metrics`], which
//! every part updates.

pub mod admin;
pub mod delegated;
pub mod readiness;
mod readiness_text;
pub mod status_page;
