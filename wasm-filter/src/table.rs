//! The routing table as each Envoy worker holds it: decoded once per table
//! change from the protobuf published in shared data, then only read.
//!
//! Lookups are nested hash maps keyed by the byte slices the classifier
//! borrows from the path, so a lookup allocates nothing and costs the same
//! for 50 or 50,000 resources. Every distinct set of apiservers gets its
//! override-host header values precomputed here.

use std::collections::HashMap;

use mvp_protos::routing::v1 as pb;
use prost::Message;

/// A set of apiservers: bit i is `RoutingTable.apiservers[i]`.
pub type ServerSet = u64;

/// At most this many apiservers, one bit each.
pub const MAX_APISERVERS: usize = 64;

#[derive(Debug)]
pub enum TableError {
    Decode(prost::DecodeError),
    TooManyApiservers(usize),
    ZeroVersion,
    BadAddress(String),
}

impl std::fmt::Display for TableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TableError::Decode(e) => write!(f, "routing table does not decode: {e}"),
            TableError::TooManyApiservers(n) => {
                write!(f, "routing table names {n} apiservers; at most {MAX_APISERVERS} are supported")
            }
            TableError::ZeroVersion => write!(f, "routing table has version 0"),
            TableError::BadAddress(a) => write!(f, "apiserver address {a:?} is not IP:port"),
        }
    }
}

#[derive(Debug, Default)]
struct Resource {
    servers: ServerSet,
    subresources: HashMap<Box<[u8]>, ServerSet>,
}

#[derive(Debug, Default)]
struct Version {
    servers: ServerSet,
    resources: HashMap<Box<[u8]>, Resource>,
}

#[derive(Debug, Default)]
struct Group {
    servers: ServerSet,
    versions: HashMap<Box<[u8]>, Version>,
}

/// Where to send a request that only some apiservers can serve.
#[derive(Debug)]
pub struct Target {
    /// Override-host header values, one per healthy apiserver in the set, each
    /// starting at a different one (load spreading) and listing the rest after
    /// it (Envoy's retries fail over along the list). Unhealthy members come
    /// last in every value.
    rotations: Box<[Box<str>]>,
}

impl Target {
    /// The header value for the `n`th request routed to this set.
    pub fn header_value(&self, n: u32) -> &str {
        let len = self.rotations.len().max(1);
        self.rotations
            .get(n as usize % len)
            .map(|s| &**s)
            .unwrap_or("")
    }
}

#[derive(Debug, Default)]
pub struct RouteTable {
    version: u64,
    all: ServerSet,
    groups: HashMap<Box<[u8]>, Group>,
    targets: HashMap<ServerSet, Target>,
}

impl RouteTable {
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Decodes and indexes a published table. A table that fails any check is
    /// rejected whole, so a worker keeps routing by the last good one.
    pub fn decode(bytes: &[u8]) -> Result<RouteTable, TableError> {
        let t = pb::RoutingTable::decode(bytes).map_err(TableError::Decode)?;
        RouteTable::from_proto(&t)
    }

    pub fn from_proto(t: &pb::RoutingTable) -> Result<RouteTable, TableError> {
        if t.version == 0 {
            return Err(TableError::ZeroVersion);
        }
        let n = t.apiservers.len();
        if n > MAX_APISERVERS {
            return Err(TableError::TooManyApiservers(n));
        }
        for a in &t.apiservers {
            if a.address.parse::<std::net::SocketAddr>().is_err() {
                return Err(TableError::BadAddress(a.address.clone()));
            }
        }
        let all: ServerSet = if n == MAX_APISERVERS {
            u64::MAX
        } else {
            (1u64 << n) - 1
        };
        let mut table = RouteTable {
            version: t.version,
            all,
            ..RouteTable::default()
        };
        for g in &t.groups {
            let group = table.groups.entry(key(&g.group)).or_default();
            group.servers |= g.servers & all;
            for v in &g.versions {
                let version = group.versions.entry(key(&v.version)).or_default();
                version.servers |= v.servers & all;
                for r in &v.resources {
                    let resource = version.resources.entry(key(&r.resource)).or_default();
                    resource.servers |= r.servers & all;
                    for s in &r.subresources {
                        *resource.subresources.entry(key(&s.subresource)).or_default() |=
                            s.servers & all;
                    }
                }
            }
        }
        let mut sets: Vec<ServerSet> = Vec::new();
        for g in table.groups.values() {
            sets.push(g.servers);
            for v in g.versions.values() {
                sets.push(v.servers);
                for r in v.resources.values() {
                    sets.push(r.servers);
                    sets.extend(r.subresources.values().copied());
                }
            }
        }
        sets.sort_unstable();
        sets.dedup();
        for set in sets {
            if set != 0 && set != all {
                table.targets.insert(set, target_for(set, &t.apiservers));
            }
        }
        Ok(table)
    }

    /// The target for a resource request, or `None` to leave the request to
    /// Envoy's normal load balancing (every apiserver serves it, or none does
    /// and the apiserver's own 404 is the right answer).
    pub fn resource_target(
        &self,
        group: &[u8],
        version: &[u8],
        resource: &[u8],
        subresource: &[u8],
    ) -> Option<&Target> {
        let r = self.groups.get(group)?.versions.get(version)?.resources.get(resource)?;
        // A subresource nobody advertises (or none named) falls back to the
        // resource's servers; one that some advertise narrows to those.
        let set = if subresource.is_empty() {
            r.servers
        } else {
            r.subresources.get(subresource).copied().unwrap_or(r.servers)
        };
        self.target(set)
    }

    /// The target for the unaggregated discovery documents `/apis/{g}` and
    /// `/apis/{g}/{v}` (and `/api/{v}`).
    pub fn discovery_target(&self, group: &[u8], version: Option<&[u8]>) -> Option<&Target> {
        let g = self.groups.get(group)?;
        let set = match version {
            Some(v) => g.versions.get(v)?.servers,
            None => g.servers,
        };
        self.target(set)
    }

    fn target(&self, set: ServerSet) -> Option<&Target> {
        if set == 0 || set == self.all {
            return None;
        }
        self.targets.get(&set)
    }
}

fn key(s: &str) -> Box<[u8]> {
    s.as_bytes().into()
}

fn target_for(set: ServerSet, servers: &[pb::Apiserver]) -> Target {
    let members = servers
        .iter()
        .enumerate()
        .filter(|(i, _)| set & (1u64 << i) != 0)
        .map(|(_, a)| a);
    let (healthy, unhealthy): (Vec<&pb::Apiserver>, Vec<&pb::Apiserver>) =
        members.partition(|a| a.healthy);
    // With no healthy member, the first unhealthy one still gets the request:
    // the client then sees a 503 Status rather than another server's 404.
    let leaders: &[&pb::Apiserver] = if healthy.is_empty() { &unhealthy } else { &healthy };
    let rotations = (0..leaders.len().max(1))
        .map(|start| {
            let ordered = leaders
                .iter()
                .cycle()
                .skip(start)
                .take(leaders.len())
                .chain(if healthy.is_empty() { [].iter() } else { unhealthy.iter() });
            ordered
                .map(|a| a.address.as_str())
                .collect::<Vec<_>>()
                .join(",")
                .into_boxed_str()
        })
        .collect();
    Target { rotations }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]
    use super::*;

    pub fn server(name: &str, addr: &str, healthy: bool) -> pb::Apiserver {
        pb::Apiserver {
            name: name.into(),
            address: addr.into(),
            healthy,
        }
    }

    /// a serves apps/v1 deployments (+scale); b serves apps/v1 deployments
    /// and resource.k8s.io/v1 resourceclaims (+status); c is unhealthy and
    /// alone serves batch/v1 jobs.
    pub fn sample() -> pb::RoutingTable {
        pb::RoutingTable {
            version: 7,
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
        }
    }

    fn values(t: Option<&Target>) -> Vec<String> {
        match t {
            None => vec![],
            Some(t) => t.rotations.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn lookups() {
        let t = RouteTable::decode(&sample().encode_to_vec()).unwrap();
        assert_eq!(t.version(), 7);
        let cases: &[(&str, &str, &str, &str, &[&str])] = &[
            // a and b both serve deployments, c does not: route to a or b.
            ("apps", "v1", "deployments", "", &["127.0.0.1:1001,127.0.0.1:1002", "127.0.0.1:1002,127.0.0.1:1001"]),
            // only a advertises the scale subresource
            ("apps", "v1", "deployments", "scale", &["127.0.0.1:1001"]),
            // a subresource nobody advertises falls back to the resource's set
            ("apps", "v1", "deployments", "status", &["127.0.0.1:1001,127.0.0.1:1002", "127.0.0.1:1002,127.0.0.1:1001"]),
            ("resource.k8s.io", "v1", "resourceclaims", "", &["127.0.0.1:1002"]),
            // only the unhealthy server serves it: still its target (503 if down)
            ("batch", "v1", "jobs", "", &["127.0.0.1:1003"]),
            // everyone serves it, or nobody: Envoy's own load balancing
            ("", "v1", "pods", "", &[]),
            ("", "v1", "nothing", "", &[]),
            ("nope", "v1", "x", "", &[]),
            ("apps", "v2", "deployments", "", &[]),
        ];
        for (g, v, r, s, want) in cases {
            let got = values(t.resource_target(g.as_bytes(), v.as_bytes(), r.as_bytes(), s.as_bytes()));
            assert_eq!(got, *want, "{g}/{v}/{r}/{s}");
        }
        assert_eq!(values(t.discovery_target(b"resource.k8s.io", None)), ["127.0.0.1:1002"]);
        assert_eq!(values(t.discovery_target(b"resource.k8s.io", Some(b"v1"))), ["127.0.0.1:1002"]);
        assert_eq!(values(t.discovery_target(b"resource.k8s.io", Some(b"v9"))), Vec::<String>::new());
        assert_eq!(values(t.discovery_target(b"", Some(b"v1"))), Vec::<String>::new());
    }

    #[test]
    fn unhealthy_members_come_last() {
        let mut p = sample();
        p.groups[0].servers = 0b101;
        p.groups[0].versions[0].servers = 0b101;
        let t = RouteTable::from_proto(&p).unwrap();
        assert_eq!(values(t.discovery_target(b"apps", None)), ["127.0.0.1:1001,127.0.0.1:1003"]);
    }

    #[test]
    fn rotation_spreads_requests() {
        let t = RouteTable::from_proto(&sample()).unwrap();
        let target = t.resource_target(b"apps", b"v1", b"deployments", b"").unwrap();
        let firsts: Vec<&str> = (0..4).map(|n| &target.header_value(n)[..14]).collect();
        assert_eq!(firsts, ["127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1001", "127.0.0.1:1002"]);
    }

    #[test]
    fn bad_tables_are_rejected() {
        assert!(matches!(RouteTable::decode(b"\xff\xff\xff"), Err(TableError::Decode(_))));
        let mut p = sample();
        p.version = 0;
        assert!(matches!(RouteTable::from_proto(&p), Err(TableError::ZeroVersion)));
        let mut p = sample();
        p.apiservers[0].address = "apiserver-a:6443".into();
        assert!(matches!(RouteTable::from_proto(&p), Err(TableError::BadAddress(_))));
        let mut p = sample();
        p.apiservers = (0..65).map(|i| server("x", &format!("127.0.0.1:{}", 2000 + i), true)).collect();
        assert!(matches!(RouteTable::from_proto(&p), Err(TableError::TooManyApiservers(65))));
    }

    #[test]
    fn bits_beyond_the_server_list_are_ignored() {
        let mut p = sample();
        p.groups[1].servers = 0b1010;
        p.groups[1].versions[0].resources[0].servers = u64::MAX ^ 0b101;
        let t = RouteTable::from_proto(&p).unwrap();
        assert_eq!(values(t.resource_target(b"resource.k8s.io", b"v1", b"resourceclaims", b"")), ["127.0.0.1:1002"]);
    }
}
