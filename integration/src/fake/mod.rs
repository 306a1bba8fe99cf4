//! Fake kube-apiservers for tests and the demo. They serve real discovery
//! documents of one release (`fixtures/discovery/<release>/`), authenticate
//! like kube-apiserver when asked to, and speak TLS when given certificates.

pub mod auth;
mod connections;
mod control;
pub use connections::serve;
mod digest;
mod discovery;
mod openapi;
pub mod fixtures;
pub mod membership;
mod resources;
pub use resources::TENANT_PROXY_HEADERS;
mod responses;
pub mod server;
mod state;
pub mod tls;
mod upgrade;
