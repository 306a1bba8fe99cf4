//! The routing table as each Envoy worker holds it: decoded once per table
//! change from the protobuf published in shared data, then only read.
//!
//! Lookups are nested hash maps keyed by the byte slices the classifier
//! borrows from the path, so a lookup allocates nothing and costs the same
//! for 50 or 50,000 resources. Every distinct set of apiservers gets its
//! override-host header values precomputed here.

/// The table's maps: hashed with foldhash's per-process seeded hash
/// rather than std's SipHash (a request's four lookups cost ~750
/// instructions with SipHash, a third of routing). The keys are the
/// table's (mvp-ext-proc's, from the apiservers' discovery); a client
/// chooses only what it looks up, which cannot lengthen a probe sequence.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

use mvp_protos::routing::v1 as pb;

use crate::requestinfo::RouteKey;
use mvp_contract::headers::UNAVAILABLE;
use prost::Message;

/// A set of apiservers: bit i is `RoutingTable.apiservers[i]`.
pub type ServerSet = u64;

pub use mvp_contract::limits::{MAX_APISERVERS, MAX_LISTED_APISERVERS};

#[derive(Debug)]
pub enum TableError {
    Decode(prost::DecodeError),
    TooManyApiservers(usize),
    ZeroVersion,
    BadAddress(String),
    BadRelease(String),
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
            TableError::BadRelease(r) => write!(f, "newest release {r:?} is not MAJOR.MINOR"),
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

/// The apiservers a request that only some of them serve is pinned to.
#[derive(Debug)]
pub struct Upstreams {
    /// Override-host header values, one per healthy apiserver in the set, each
    /// starting at a different one (load spreading) and listing the rest after
    /// it (Envoy's retries fail over along the list). Unhealthy members come
    /// last in every value; closed ones never appear. With no open member,
    /// the one value is [`UNAVAILABLE`].
    rotations: Box<[Box<str>]>,
    /// Only closed members are in the set, none draining (decided once per
    /// table, not per request).
    unavailable: bool,
    /// Only closed members are in the set, some still draining: the values
    /// list those (see `Apiserver.draining`).
    last_resort: bool,
    /// Only closed members are in the set, and one of them is coming back
    /// (`Apiserver.returning`): a request held for a newer table may be
    /// served by it. Otherwise every one is down, and a hold only delays
    /// the 503 Status.
    returning: bool,
}

impl Upstreams {
    /// Only closed members are in the set, none draining: the one value is
    /// [`UNAVAILABLE`].
    pub fn unavailable(&self) -> bool {
        self.unavailable
    }

    /// Only closed members are in the set and the values name the draining
    /// ones: a last resort before the 503 Status.
    pub fn last_resort(&self) -> bool {
        self.last_resort
    }

    /// Only closed members are in the set and one of them is coming back:
    /// a wait for a newer table can help (see [`Upstreams::unavailable`]).
    pub fn returning(&self) -> bool {
        self.returning
    }

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
    /// Every member is open: a request every member serves needs no pin.
    all_open: bool,
    /// Some member's current API set is unknown (`Apiserver.pending`): a
    /// request for an API the table does not know is answered 503, not 404.
    pending: bool,
    /// Some pending member is coming back (`Apiserver.returning`): a
    /// request for an API the table does not know may be served by it
    /// within a hold.
    pending_returning: bool,
    groups: HashMap<Box<[u8]>, Group>,
    /// `/openapi/v3/{key}` → the servers whose index lists it.
    openapi_v3: HashMap<Box<[u8]>, ServerSet>,
    upstreams: HashMap<ServerSet, Upstreams>,
    /// Members on a release older than the newest (`Apiserver.older`).
    older: ServerSet,
    /// The newest release while some member is older (`1.37`), else empty.
    newest_release: Box<str>,
}

impl RouteTable {
    /// Whether only members older than the newest release serve `set`:
    /// what the finished upgrade takes away.
    pub fn only_older(&self, set: ServerSet) -> bool {
        set != 0 && self.older != 0 && set & !self.older == 0
    }

    /// The newest member release while some member is older (`1.37`).
    pub fn newest_release(&self) -> &str {
        &self.newest_release
    }

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
        // Words for a client's warning: digits and dots only, or no table.
        let release = &t.newest_release;
        if release.len() > 16 || !release.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return Err(TableError::BadRelease(release.chars().take(32).collect()));
        }
        let older = t.apiservers.iter().enumerate().filter(|(_, a)| a.older).fold(0, |set, (i, _)| set | u32::try_from(i).ok().and_then(|i| 1u64.checked_shl(i)).unwrap_or(0));
        let mut table = RouteTable {
            version: t.version,
            older: if release.is_empty() { 0 } else { older },
            newest_release: release.as_str().into(),
            all,
            all_open: t.apiservers.iter().all(|a| !a.closed),
            pending: t.apiservers.iter().any(|a| a.closed && a.pending),
            pending_returning: t.apiservers.iter().any(|a| a.closed && a.pending && a.returning),
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
        for o in &t.openapi_v3 {
            *table.openapi_v3.entry(key(&o.key)).or_default() |= o.servers & all;
        }
        let mut sets: Vec<ServerSet> = table.openapi_v3.values().copied().collect();
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
            if set != 0 && (set != all || !table.all_open) {
                table.upstreams.insert(set, upstreams_for(set, &t.apiservers));
            }
        }
        Ok(table)
    }

    /// Every apiserver in the table.
    pub fn all(&self) -> ServerSet {
        self.all
    }

    /// The apiservers the table says serve what `key` names, or `None` when
    /// the table does not know it (then no apiserver serves it, or it is not
    /// something the front door routes).
    ///
    /// A subresource nobody advertises (or none named) falls back to the
    /// resource's servers; one that some advertise narrows to those.
    pub fn servers(&self, key: &RouteKey<'_>) -> Option<ServerSet> {
        match *key {
            RouteKey::Resource { group, version, resource, subresource } => {
                let r = self.groups.get(group)?.versions.get(version)?.resources.get(resource)?;
                Some(if subresource.is_empty() { r.servers } else { r.subresources.get(subresource).copied().unwrap_or(r.servers) })
            }
            RouteKey::Discovery { group, version } => {
                let g = self.groups.get(group)?;
                match version {
                    Some(v) => Some(g.versions.get(v)?.servers),
                    None => Some(g.servers),
                }
            }
            RouteKey::OpenApiV3 { key } => self.openapi_v3.get(key).copied(),
            RouteKey::None => None,
        }
    }

    /// `key` in the table's own names: a subresource the table does not
    /// know for its resource (routed as the resource, see
    /// [`RouteTable::servers`]) cut off. What the front door writes where
    /// a client's bytes must not go — a `Warning`, the skew log's labels —
    /// is then a name some apiserver's discovery gave, from a set the
    /// apiservers bound: a client cannot invent labels, nor put quotes or
    /// line breaks into a header.
    pub fn known_key<'k>(&self, key: &RouteKey<'k>) -> RouteKey<'k> {
        match *key {
            RouteKey::Resource { group, version, resource, subresource } if !subresource.is_empty() => {
                let known = self.groups.get(group).and_then(|g| g.versions.get(version)).and_then(|v| v.resources.get(resource)).is_some_and(|r| r.subresources.contains_key(subresource));
                RouteKey::Resource { group, version, resource, subresource: if known { subresource } else { b"" } }
            }
            other => other,
        }
    }

    /// Whether a member's current API set is unknown, so an API the table
    /// does not know may be about to be served (see `Apiserver.pending`).
    pub fn pending(&self) -> bool {
        self.pending
    }

    /// Whether a pending member is coming back (see [`RouteTable::pending`]).
    pub fn pending_returning(&self) -> bool {
        self.pending_returning
    }

    /// The upstreams a request for `set` is pinned to, or `None` to leave it
    /// to Envoy's normal load balancing: every apiserver serves it and every
    /// one is open, or none serves it and the apiserver's own 404 is the
    /// right answer.
    pub fn pinned(&self, set: ServerSet) -> Option<&Upstreams> {
        if set == 0 || (set == self.all && self.all_open) {
            return None;
        }
        self.upstreams.get(&set)
    }

    /// The upstreams for a resource request (see [`RouteTable::servers`]).
    pub fn resource_upstreams(&self, group: &[u8], version: &[u8], resource: &[u8], subresource: &[u8]) -> Option<&Upstreams> {
        self.pinned(self.servers(&RouteKey::Resource { group, version, resource, subresource })?)
    }

    /// The upstreams for the unaggregated discovery documents `/apis/{g}` and
    /// `/apis/{g}/{v}` (and `/api/{v}`).
    pub fn discovery_upstreams(&self, group: &[u8], version: Option<&[u8]>) -> Option<&Upstreams> {
        self.pinned(self.servers(&RouteKey::Discovery { group, version })?)
    }
}

fn key(s: &str) -> Box<[u8]> {
    s.as_bytes().into()
}

fn upstreams_for(set: ServerSet, servers: &[pb::Apiserver]) -> Upstreams {
    let members = servers
        .iter()
        .enumerate()
        .filter(|(i, a)| set & (1u64 << i) != 0 && !a.closed)
        .map(|(_, a)| a);
    let (healthy, unhealthy): (Vec<&pb::Apiserver>, Vec<&pb::Apiserver>) =
        members.partition(|a| a.healthy);
    if healthy.is_empty() && unhealthy.is_empty() {
        let draining: Vec<&pb::Apiserver> =
            servers.iter().enumerate().filter(|(i, a)| set & (1u64 << i) != 0 && a.closed && a.draining).map(|(_, a)| a).collect();
        if draining.is_empty() {
            // Only closed members serve it: answered 503 by Envoy itself
            // (after a hold, if one of them is coming back).
            let returning = servers.iter().enumerate().any(|(i, a)| set & (1u64 << i) != 0 && a.closed && a.pending && a.returning);
            return Upstreams { rotations: Box::new([UNAVAILABLE.into()]), unavailable: true, last_resort: false, returning };
        }
        // Still serving while it shuts down: better its answer than a 503.
        return Upstreams { rotations: rotations(&draining, &[]), unavailable: false, last_resort: true, returning: false };
    }
    // With no healthy member, the first unhealthy one still gets the request:
    // the client then sees a 503 Status rather than another server's 404.
    let (leaders, rest): (&[&pb::Apiserver], &[&pb::Apiserver]) = if healthy.is_empty() { (&unhealthy, &[]) } else { (&healthy, &unhealthy) };
    Upstreams { rotations: rotations(leaders, rest), unavailable: false, last_resort: false, returning: false }
}

/// One header value per leader, each starting at a different one and
/// listing the other leaders, then `rest`.
fn rotations(leaders: &[&pb::Apiserver], rest: &[&pb::Apiserver]) -> Box<[Box<str>]> {
    (0..leaders.len().max(1))
        .map(|start| {
            let ordered = leaders.iter().cycle().skip(start).take(leaders.len()).chain(rest.iter());
            ordered
                .take(MAX_LISTED_APISERVERS)
                .map(|a| a.address.as_str())
                .collect::<Vec<_>>()
                .join(",")
                .into_boxed_str()
        })
        .collect()
}

#[cfg(test)]
#[path = "table_tests.rs"]
pub(crate) mod tests;
