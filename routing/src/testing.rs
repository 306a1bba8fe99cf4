//! A sample routing table for tests of this crate and of the filter
//! (`features = ["testing"]`).

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use mvp_protos::routing::v1 as pb;

pub fn server(name: &str, addr: &str, healthy: bool) -> pb::Apiserver {
    pb::Apiserver {
        name: name.into(),
        address: addr.into(),
        healthy,
        closed: false,
        pending: false,
        draining: false,
        older: false,
        returning: false,
    }
}

/// a serves apps/v1 deployments (+scale); b serves apps/v1 deployments
/// and resource.k8s.io/v1 resourceclaims (+status); c is unhealthy and
/// alone serves batch/v1 jobs.
pub fn sample() -> pb::RoutingTable {
    pb::RoutingTable {
        version: 7,
        newest_release: String::new(),
        apiservers: vec![
            server("a", "127.0.0.1:1001", true),
            server("b", "127.0.0.1:1002", true),
            server("c", "127.0.0.1:1003", false),
        ],
        groups: vec![
            pb::GroupRoute {
                group: "apps".into(),
                servers: 0b011,
                versions: vec![pb::VersionRoute {
                    version: "v1".into(),
                    servers: 0b011,
                    resources: vec![pb::ResourceRoute {
                        resource: "deployments".into(),
                        servers: 0b011,
                        subresources: vec![pb::SubresourceRoute {
                            subresource: "scale".into(),
                            servers: 0b001,
                        }],
                    }],
                }],
            },
            pb::GroupRoute {
                group: "resource.k8s.io".into(),
                servers: 0b010,
                versions: vec![pb::VersionRoute {
                    version: "v1".into(),
                    servers: 0b010,
                    resources: vec![pb::ResourceRoute {
                        resource: "resourceclaims".into(),
                        servers: 0b010,
                        subresources: vec![],
                    }],
                }],
            },
            pb::GroupRoute {
                group: "batch".into(),
                servers: 0b100,
                versions: vec![pb::VersionRoute {
                    version: "v1".into(),
                    servers: 0b100,
                    resources: vec![pb::ResourceRoute {
                        resource: "jobs".into(),
                        servers: 0b100,
                        subresources: vec![],
                    }],
                }],
            },
            pb::GroupRoute {
                group: "".into(),
                servers: 0b111,
                versions: vec![pb::VersionRoute {
                    version: "v1".into(),
                    servers: 0b111,
                    resources: vec![pb::ResourceRoute {
                        resource: "pods".into(),
                        servers: 0b111,
                        subresources: vec![],
                    }],
                }],
            },
        ],
        // a and b have an /openapi/v3 index; only b lists resource.k8s.io/v1.
        openapi_v3: vec![
            pb::OpenApiV3Route { key: "".into(), servers: 0b011 },
            pb::OpenApiV3Route { key: "api/v1".into(), servers: 0b011 },
            pb::OpenApiV3Route { key: "apis/resource.k8s.io/v1".into(), servers: 0b010 },
        ],
    }
}
