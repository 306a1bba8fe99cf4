//! mvp-envoy's own protobuf messages and (with the `grpc` feature) services.

pub mod routing {
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        include!(concat!(env!("OUT_DIR"), "/mvp.routing.v1.rs"));
    }
}

/// Kubernetes' own protobuf messages used by peer-aggregated discovery.
pub mod k8s {
    pub mod io {
        pub mod api {
            pub mod apidiscovery {
                pub mod v2 {
                    #![allow(clippy::all, missing_docs)]
                    include!(concat!(env!("OUT_DIR"), "/k8s.io.api.apidiscovery.v2.rs"));
                }
            }
        }
        pub mod apimachinery {
            pub mod pkg {
                pub mod apis {
                    pub mod meta {
                        pub mod v1 {
                            #![allow(clippy::all, missing_docs)]
                            include!(concat!(env!("OUT_DIR"), "/k8s.io.apimachinery.pkg.apis.meta.v1.rs"));
                        }
                    }
                }
                pub mod runtime {
                    #![allow(clippy::all, missing_docs)]
                    include!(concat!(env!("OUT_DIR"), "/k8s.io.apimachinery.pkg.runtime.rs"));
                }
            }
        }
    }
}
