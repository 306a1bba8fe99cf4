//! Tests of `table.rs`.

#![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]
use super::*;
use crate::testing::{sample, server};


fn values(t: Option<&Upstreams>) -> Vec<String> {
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
        let got = values(t.resource_upstreams(g.as_bytes(), v.as_bytes(), r.as_bytes(), s.as_bytes()));
        assert_eq!(got, *want, "{g}/{v}/{r}/{s}");
    }
    assert_eq!(values(t.discovery_upstreams(b"resource.k8s.io", None)), ["127.0.0.1:1002"]);
    assert_eq!(values(t.discovery_upstreams(b"resource.k8s.io", Some(b"v1"))), ["127.0.0.1:1002"]);
    assert_eq!(values(t.discovery_upstreams(b"resource.k8s.io", Some(b"v9"))), Vec::<String>::new());
    assert_eq!(values(t.discovery_upstreams(b"", Some(b"v1"))), Vec::<String>::new());
}

/// Only names the table holds are written where a client's bytes must not
/// go: an advertised subresource stays, an invented one is cut.
#[test]
fn a_key_in_the_tables_own_names() {
    let t = RouteTable::decode(&sample().encode_to_vec()).unwrap();
    let key = |subresource: &'static [u8]| RouteKey::Resource { group: b"apps", version: b"v1", resource: b"deployments", subresource };
    assert_eq!(t.known_key(&key(b"scale")), key(b"scale"));
    assert_eq!(t.known_key(&key(b"")), key(b""));
    for invented in [&b"status"[..], b"x\"\r\n", b"\\"] {
        assert_eq!(t.known_key(&key(invented)), key(b""), "{invented:?}");
    }
    let other = RouteKey::Resource { group: b"nope", version: b"v1", resource: b"x", subresource: b"y" };
    assert_eq!(t.known_key(&other), RouteKey::Resource { group: b"nope", version: b"v1", resource: b"x", subresource: b"" });
    assert_eq!(t.known_key(&RouteKey::Discovery { group: b"apps", version: None }), RouteKey::Discovery { group: b"apps", version: None });
}

#[test]
fn unhealthy_members_come_last() {
    let mut p = sample();
    p.groups[0].servers = 0b101;
    p.groups[0].versions[0].servers = 0b101;
    let t = RouteTable::from_proto(&p).unwrap();
    assert_eq!(values(t.discovery_upstreams(b"apps", None)), ["127.0.0.1:1001,127.0.0.1:1003"]);
}

#[test]
fn rotation_spreads_requests() {
    let t = RouteTable::from_proto(&sample()).unwrap();
    let target = t.resource_upstreams(b"apps", b"v1", b"deployments", b"").unwrap();
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
    assert_eq!(values(t.resource_upstreams(b"resource.k8s.io", b"v1", b"resourceclaims", b"")), ["127.0.0.1:1002"]);
}

#[test]
fn closed_members_get_no_request_and_alone_give_the_unavailable_answer() {
    // c (alone serving batch/v1 jobs) is draining; a is not re-read yet.
    let mut p = sample();
    p.apiservers[2].closed = true;
    let t = RouteTable::from_proto(&p).unwrap();
    assert_eq!(values(t.resource_upstreams(b"batch", b"v1", b"jobs", b"")), [mvp_contract::headers::UNAVAILABLE]);
    p.apiservers[0].closed = true;
    let t = RouteTable::from_proto(&p).unwrap();
    assert_eq!(values(t.resource_upstreams(b"apps", b"v1", b"deployments", b"")), ["127.0.0.1:1002"]);
    assert_eq!(values(t.resource_upstreams(b"apps", b"v1", b"deployments", b"scale")), [mvp_contract::headers::UNAVAILABLE]);
    // Served by every member, but not every member is open: pinned to the
    // open ones, never left to Envoy's round robin (which would reach a
    // member whose current API set is unknown).
    assert_eq!(values(t.resource_upstreams(b"", b"v1", b"pods", b"")), ["127.0.0.1:1002"]);
    // Nobody serves it: still the apiserver's own 404 through round robin.
    assert_eq!(values(t.resource_upstreams(b"nope", b"v1", b"x", b"")), Vec::<String>::new());
}

/// What only members older than the newest release serve; a malformed
/// release rejects the table.
#[test]
fn only_older_members_serve_what_the_upgrade_takes_away() {
    let mut p = sample();
    p.apiservers[0].older = true;
    let t = RouteTable::from_proto(&p).unwrap();
    assert!(!t.only_older(0b001), "no newest release named: nothing is older");
    p.newest_release = "1.37".into();
    let t = RouteTable::from_proto(&p).unwrap();
    assert_eq!(t.newest_release(), "1.37");
    assert!(t.only_older(0b001));
    assert!(!t.only_older(0b011), "b is not older");
    assert!(!t.only_older(0));
    for bad in ["1.37\"", "v1.37", "1.37 x", "11111111111111111"] {
        p.newest_release = bad.into();
        assert!(matches!(RouteTable::from_proto(&p), Err(TableError::BadRelease(_))), "{bad}");
    }
}
