//! members → Envoy: the apiserver clusters and their endpoints over
//! Envoy's aggregated discovery service (ADS, state of the world), on
//! mvp-ext-proc's gRPC listener beside `GetTable` and ext_proc.
//!
//! - [`clusters`]: CDS, the two apiserver clusters (fixed for the process,
//!   except when a TLS file's content changes).
//! - [`endpoints`]: EDS, one endpoint per member the routing table names.
//! - [`ads`]: the stream loop — push on change, ACK/NACK bookkeeping;
//!   [`acks`]: which endpoints every connected Envoy has accepted
//!   ([`crate::sync::accepted`]): the sync loop opens a newly joined member
//!   for routing only once every Envoy knows its address, so an
//!   override-host address never misses.
//! - [`plane`]: follows the member states, publishes the endpoints.
//! - [`upstream_filters`]: what an apiserver's response may not tell Envoy
//!   (every `x-envoy-` header removed before the router sees it).
//!
//! Versions are digests of the encoded resources: the same members give
//! the same version across mvp-ext-proc restarts, so a reconnecting Envoy
//! changes nothing.

pub mod acks;
pub mod ads;
mod ads_stream;
pub mod clusters;
pub mod native_lb;
pub mod endpoints;
pub mod envoys;
pub mod plane;
pub mod upstream_filters;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::google::protobuf::Any;
use envoy_types::util::pack_any;
use prost::{Message, Name};
use sha2::{Digest, Sha256};

pub use ads::AdsServer;
pub use clusters::{APISERVER_HTTP2_MAX_STREAMS, ClusterOptions};
pub use endpoints::EndpointMember;
pub use envoys::ConnectedEnvoys;
pub use plane::XdsPublisher;

pub const CLUSTER_TYPE: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
pub const ENDPOINT_TYPE: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

/// "From this ADS stream", for CDS and EDS references.
pub fn ads_source() -> core::ConfigSource {
    core::ConfigSource {
        config_source_specifier: Some(core::config_source::ConfigSourceSpecifier::Ads(core::AggregatedConfigSource {})),
        resource_api_version: core::ApiVersion::V3 as i32,
        ..Default::default()
    }
}

/// One resource type's current resources.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resources {
    pub version: String,
    /// (name, resource), sorted by name.
    pub items: Vec<(String, Any)>,
}

impl Resources {
    fn of<M: Message + Name + Clone>(items: Vec<(String, M)>) -> Resources {
        let mut hasher = Sha256::new();
        let items: Vec<(String, Any)> = items
            .into_iter()
            .map(|(n, m)| {
                let any = pack_any(m);
                hasher.update(n.as_bytes());
                hasher.update(&any.value);
                (n, any)
            })
            .collect();
        Resources { version: hex::encode(&hasher.finalize()[..8]), items }
    }
}

/// What every Envoy should hold: the clusters, their endpoints, and which
/// addresses those endpoints name.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub clusters: Resources,
    pub endpoints: Resources,
    pub addresses: BTreeSet<SocketAddr>,
    /// Built by the sync loop's first publication or later. Until then ADS
    /// answers nothing: an Envoy that reconnects to a restarted process
    /// keeps the endpoints it has rather than being sent an empty (or
    /// smaller) set because a read is still pending.
    pub published: bool,
}

impl Snapshot {
    pub fn build(options: &ClusterOptions, members: &[EndpointMember]) -> Arc<Snapshot> {
        let clusters = clusters::clusters(options);
        let endpoints = clusters.iter().map(|c| (c.name.clone(), endpoints::load_assignment(&c.name, members))).collect();
        Arc::new(Snapshot {
            clusters: Resources::of(clusters.into_iter().map(|c| (c.name.clone(), c)).collect()),
            endpoints: Resources::of(endpoints),
            addresses: members.iter().map(|m| m.address).collect(),
            published: true,
        })
    }

    /// What ADS holds from the start until the first publication.
    pub fn unpublished() -> Arc<Snapshot> {
        Arc::new(Snapshot::default())
    }

    pub fn resources(&self, type_url: &str) -> Option<&Resources> {
        match type_url {
            CLUSTER_TYPE => Some(&self.clusters),
            ENDPOINT_TYPE => Some(&self.endpoints),
            _ => None,
        }
    }
}

/// `cluster` / `endpoint` for metrics and logs.
pub fn kind(type_url: &str) -> &'static str {
    match type_url {
        CLUSTER_TYPE => "cluster",
        ENDPOINT_TYPE => "endpoint",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_follow_content_only() {
        let m = |p: u16| EndpointMember { address: SocketAddr::from(([127, 0, 0, 1], p)), name: format!("m{p}"), departed: false };
        let o = ClusterOptions::default();
        let a = Snapshot::build(&o, &[m(1), m(2)]);
        let b = Snapshot::build(&o, &[m(1), m(2)]);
        assert_eq!(a.endpoints.version, b.endpoints.version);
        assert_eq!(a.clusters.version, b.clusters.version);
        let c = Snapshot::build(&o, &[m(1)]);
        assert_ne!(a.endpoints.version, c.endpoints.version);
        assert_eq!(a.clusters.version, c.clusters.version, "a membership change leaves the clusters alone");
        assert_eq!(c.addresses.len(), 1);
    }
}
