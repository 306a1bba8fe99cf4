//! Fake kube-apiservers for tests and the demo. They serve real discovery
//! documents of one release (`fixtures/discovery/<release>/`).

pub mod documents;
pub mod server;
