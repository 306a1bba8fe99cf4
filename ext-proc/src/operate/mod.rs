//! What operators see: the admin server ([`admin`]: `/metrics`, `/healthz`,
//! `/readyz`, `/table`, `/debug/route`) and its status page
//! ([`status_page`]), and who may read them ([`delegated`]: TokenReview and
//! SubjectAccessReview, as kube's components). The metrics themselves are [`crate::metrics`], which
//! every part updates.

pub mod admin;
pub mod delegated;
pub mod status_page;
