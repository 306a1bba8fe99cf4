//! mvp-envoy's own protobuf messages and (with the `grpc` feature) services.

pub mod routing {
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        include!(concat!(env!("OUT_DIR"), "/mvp.routing.v1.rs"));
    }
}
