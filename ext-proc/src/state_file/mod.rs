//! The state file plane: every member's last known API set (view and
//! OpenAPI documents) kept across mvp-ext-proc restarts — the format and
//! its reading ([`persist`]) and the writer that follows the members' views
//! off the sync loop ([`plane`]).

pub mod persist;
pub mod plane;
