//! EDS: the apiserver clusters' members. Every member the routing table
//! names is an endpoint here, so an override-host address from the table
//! always finds its host (an unknown one would fall back to round robin).
//! A member that left the control plane stays, marked DRAINING (no
//! load-balanced request reaches it), for as long as the table keeps its
//! last known API set.

use std::net::SocketAddr;

use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::config::endpoint::v3 as endpoint;

/// One endpoint as EDS publishes it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct EndpointMember {
    pub address: SocketAddr,
    /// The member's name: Envoy's `hostname` (access log, admin `/clusters`).
    pub name: String,
    /// Departed: kept only so the table's last known API set stays valid.
    pub departed: bool,
}

pub fn load_assignment(cluster: &str, members: &[EndpointMember]) -> endpoint::ClusterLoadAssignment {
    let lb_endpoints = members
        .iter()
        .map(|m| endpoint::LbEndpoint {
            host_identifier: Some(endpoint::lb_endpoint::HostIdentifier::Endpoint(endpoint::Endpoint {
                address: Some(socket_address(m.address)),
                hostname: m.name.clone(),
                ..Default::default()
            })),
            // UNKNOWN: active health checking decides.
            health_status: if m.departed { core::HealthStatus::Draining } else { core::HealthStatus::Unknown } as i32,
            ..Default::default()
        })
        .collect();
    endpoint::ClusterLoadAssignment {
        cluster_name: cluster.to_string(),
        endpoints: vec![endpoint::LocalityLbEndpoints { lb_endpoints, ..Default::default() }],
        ..Default::default()
    }
}

fn socket_address(a: SocketAddr) -> core::Address {
    core::Address {
        address: Some(core::address::Address::SocketAddress(core::SocketAddress {
            address: a.ip().to_string(),
            port_specifier: Some(core::socket_address::PortSpecifier::PortValue(u32::from(a.port()))),
            ..Default::default()
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn departed_members_drain() {
        let m = |a: &str, departed| EndpointMember { address: a.parse().unwrap(), name: "x".into(), departed };
        let cla = load_assignment("apiservers", &[m("127.0.0.1:1", false), m("[::1]:2", true)]);
        let eps = &cla.endpoints[0].lb_endpoints;
        assert_eq!(eps.len(), 2);
        assert_eq!(eps[1].health_status, core::HealthStatus::Draining as i32);
        let Some(endpoint::lb_endpoint::HostIdentifier::Endpoint(e)) = &eps[1].host_identifier else { panic!() };
        let Some(core::address::Address::SocketAddress(sa)) = &e.address.as_ref().unwrap().address else { panic!() };
        assert_eq!(sa.address, "::1");
    }
}
