//! discover → table: folds every apiserver's capabilities into the routing
//! table the wasm filter indexes. Built only when some server's view or
//! health changed; its version is a digest of its content, so an unchanged
//! table keeps its version across polls and across ext-proc restarts.

use std::collections::BTreeMap;

use mvp_protos::routing::v1 as pb;
use prost::Message;
use sha2::{Digest, Sha256};

use std::net::SocketAddr;

use crate::apiservers::MAX_APISERVERS;
use crate::discover::capabilities::{Capabilities, SortedMap};
use crate::openapi::ServerOpenApi;

type Bits = u64;

// Within a group, sorted lists: a CRD group has a version or two of a few
// resources, and a `BTreeMap` per level took a ~540-byte node however few
// entries it held (~10 MB of short-lived heap for 3,000 CRD groups).
#[derive(Default)]
struct ResourceBits {
    servers: Bits,
    subresources: SortedMap<Bits>,
}

#[derive(Default)]
struct VersionBits {
    servers: Bits,
    resources: SortedMap<ResourceBits>,
}

#[derive(Default)]
struct GroupBits {
    servers: Bits,
    versions: SortedMap<VersionBits>,
}

/// One apiserver as the table sees it.
pub struct Member<'a> {
    pub name: &'a str,
    /// Resolved `IP:port`, matching the host Envoy's cluster holds.
    pub address: Option<SocketAddr>,
    pub healthy: bool,
    /// Sent new requests (see `sync::state`); a closed member's API set
    /// still counts.
    pub open: bool,
    /// Closed and what it serves now is unknown (see `sync::state`).
    pub pending: bool,
    /// Closed, shutting down and still serving (see `sync::state`).
    pub draining: bool,
    /// Closed, pending and coming back: it answers (see `sync::state`).
    pub returning: bool,
    /// What it serves (its last good view), if anything is known.
    pub capabilities: Option<&'a Capabilities>,
    /// Its OpenAPI documents, if read.
    pub openapi: Option<&'a ServerOpenApi>,
    /// Its release, if read.
    pub release: Option<crate::discover::release::Release>,
}

/// Servers without a resolved address are left out: Envoy cannot be told to
/// send anything to them.
pub fn build<'a>(all: impl IntoIterator<Item = Member<'a>>) -> pb::RoutingTable {
    // At most `MAX_APISERVERS` (one bit each): the sync loop keeps no more.
    let members: Vec<Member<'a>> = all.into_iter().filter(|s| s.address.is_some()).take(MAX_APISERVERS).collect();
    let mut groups: BTreeMap<String, GroupBits> = BTreeMap::new();
    let mut openapi_v3: BTreeMap<&str, Bits> = BTreeMap::new();
    for (i, s) in members.iter().enumerate() {
        let bit = 1u64 << i;
        if let Some(o) = s.openapi
            && o.v3_index.is_some()
        {
            for key in std::iter::once("").chain(o.v3_keys()) {
                *openapi_v3.entry(key).or_default() |= bit;
            }
        }
        let Some(caps) = s.capabilities else { continue };
        for (g, versions) in &caps.groups {
            let gb = groups.entry(g.clone()).or_default();
            gb.servers |= bit;
            for (v, resources) in versions.iter() {
                let vb = gb.versions.entry(v);
                vb.servers |= bit;
                for (r, subs) in resources.iter() {
                    let rb = vb.resources.entry(r);
                    rb.servers |= bit;
                    for sub in subs.iter() {
                        *rb.subresources.entry(sub) |= bit;
                    }
                }
            }
        }
    }
    // The newest release, while some member runs an older one.
    let newest = members.iter().filter_map(|m| m.release).max().filter(|n| members.iter().any(|m| m.release.is_some_and(|r| r < *n)));
    let mut table = pb::RoutingTable {
        version: 0,
        newest_release: newest.map(|n| n.to_string()).unwrap_or_default(),
        apiservers: members
            .iter()
            .map(|s| pb::Apiserver {
                name: s.name.to_string(),
                address: s.address.map(|a| a.to_string()).unwrap_or_default(),
                healthy: s.healthy,
                closed: !s.open,
                pending: !s.open && s.pending,
                draining: !s.open && s.draining,
                returning: !s.open && s.returning,
                older: newest.is_some_and(|n| s.release.is_some_and(|r| r < n)),
            })
            .collect(),
        groups: groups
            .into_iter()
            .map(|(group, gb)| pb::GroupRoute {
                group,
                servers: gb.servers,
                versions: gb
                    .versions
                    .into_iter()
                    .map(|(version, vb)| pb::VersionRoute {
                        version: version.into(),
                        servers: vb.servers,
                        resources: vb
                            .resources
                            .into_iter()
                            .map(|(resource, rb)| pb::ResourceRoute {
                                resource: resource.into(),
                                servers: rb.servers,
                                subresources: rb
                                    .subresources
                                    .into_iter()
                                    .map(|(subresource, servers)| pb::SubresourceRoute { subresource: subresource.into(), servers })
                                    .collect(),
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect(),
        openapi_v3: openapi_v3.into_iter().map(|(key, servers)| pb::OpenApiV3Route { key: key.to_string(), servers }).collect(),
    };
    let digest = Sha256::digest(table.encode_to_vec());
    let mut v = [0u8; 8];
    v.copy_from_slice(&digest[..8]);
    table.version = u64::from_be_bytes(v).max(1);
    table
}

pub fn resource_count(t: &pb::RoutingTable) -> usize {
    t.groups.iter().flat_map(|g| &g.versions).map(|v| v.resources.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::plane::TableMember;

    fn build(members: &[TableMember]) -> pb::RoutingTable {
        super::build(members.iter().map(TableMember::member))
    }

    /// A healthy, open member at 127.0.0.1:`port` serving `resources`.
    fn member(name: &str, port: u16, resources: &[(&str, &str, &str)]) -> TableMember {
        let mut caps = Capabilities::default();
        for (g, v, r) in resources {
            caps.add_resource_name(g, v, r);
        }
        TableMember {
            name: name.into(),
            address: Some(format!("127.0.0.1:{port}").parse().unwrap()),
            healthy: true,
            open: true,
            pending: false,
            draining: false,
            returning: false,
            view: Some(std::sync::Arc::new(crate::discover::ServerView { capabilities: caps, groups: Default::default() })),
            openapi: None,
            release: None,
        }
    }

    /// Members on an older release are marked, with the newest named; one
    /// release everywhere (or none known) marks nobody.
    #[test]
    fn older_members_are_marked_while_releases_differ() {
        use crate::discover::release::Release;
        let with = |m: TableMember, r: Option<&str>| TableMember { release: r.and_then(Release::parse), ..m };
        let a = with(member("a", 1, &[("", "v1", "pods")]), Some("v1.36.3"));
        let b = with(member("b", 2, &[("", "v1", "pods")]), Some("v1.37.2"));
        let c = with(member("c", 3, &[("", "v1", "pods")]), None);
        let t = build(&[a.clone(), b.clone(), c.clone()]);
        assert_eq!(t.newest_release, "1.37");
        assert_eq!(t.apiservers.iter().map(|s| s.older).collect::<Vec<_>>(), [true, false, false]);
        let same = build(&[with(a.clone(), Some("v1.37.0")), b.clone(), c]);
        assert_eq!((same.newest_release.as_str(), same.apiservers.iter().any(|s| s.older)), ("", false));
        assert_ne!(t.version, same.version, "a release change is a table change");
    }

    #[test]
    fn builds_bitmasks_and_stable_versions() {
        let a = member("a", 1, &[("", "v1", "pods"), ("", "v1", "pods/status"), ("apps", "v1", "deployments")]);
        let b = member("b", 2, &[("", "v1", "pods"), ("resource.k8s.io", "v1", "resourceclaims")]);
        let t = build(&[a.clone(), b.clone()]);
        assert_eq!(t.apiservers.len(), 2);
        assert_eq!(t.apiservers[1].address, "127.0.0.1:2");
        let core = t.groups.iter().find(|g| g.group.is_empty()).unwrap();
        assert_eq!(core.servers, 0b11);
        let pods = &core.versions[0].resources[0];
        assert_eq!((pods.resource.as_str(), pods.servers), ("pods", 0b11));
        assert_eq!(pods.subresources[0].servers, 0b01);
        let rc = t.groups.iter().find(|g| g.group == "resource.k8s.io").unwrap();
        assert_eq!(rc.servers, 0b10);
        assert_eq!(resource_count(&t), 3);

        assert_eq!(build(&[a.clone(), b.clone()]).version, t.version);
        let mut b2 = b.clone();
        b2.healthy = false;
        assert_ne!(build(&[a, b2]).version, t.version);
    }

    #[test]
    fn unresolved_servers_are_left_out() {
        let a = member("a", 1, &[("", "v1", "pods")]);
        let b = TableMember { name: "b".into(), address: None, ..member("b", 0, &[]) };
        let t = build(&[b, a]);
        assert_eq!(t.apiservers.len(), 1);
        assert_eq!(t.apiservers[0].name, "a");
        assert_eq!(t.groups[0].servers, 0b1);
    }
}
