//! Tests of `identity.rs`.

#![allow(clippy::unwrap_used)]
use super::*;

fn id(user: &str, groups: &[&str]) -> Option<ClientIdentity> {
    Some(ClientIdentity { user: user.into(), groups: groups.iter().map(|g| g.to_string()).collect() })
}

#[test]
fn table() {
    let cases: &[(&[u8], Option<ClientIdentity>)] = &[
        (b"CN=alice,O=dev,O=ops", id("alice", &["ops", "dev"])),
        (b"CN=system:admin,O=system:masters", id("system:admin", &["system:masters"])),
        (b"CN=bob", id("bob", &[])),
        (b"O=acme\\, inc.,CN=carol", id("carol", &["acme, inc."])),
        // a multi-valued RDN is printed reversed too: certificate order is b, a
        (b"CN=dave\\+eve,O=a+O=b", id("dave+eve", &["b", "a"])),
        // several CNs: Go keeps the last in certificate order (printed first)
        (b"CN=admin,CN=alice,O=dev", id("admin", &["dev"])),
        (b"CN=admin+CN=alice", id("admin", &[])),
        (b"CN=,CN=alice", None),
        (b"CN=J\\C3\\BCrgen,O=caf\\C3\\A9", id("J\u{fc}rgen", &["caf\u{e9}"])),
        (b"CN=x\\\\y,O=\\\"quoted\\\"", id("x\\y", &["\"quoted\""])),
        (b"CN=node:n1,OU=nodes,O=system:nodes,C=DE", id("node:n1", &["system:nodes"])),
        (b"O=no-cn", None),
        (b"CN=,O=empty", None),
        (b"", None),
        (b"garbage", None),
        (b"\\", None),
    ];
    for (subject, want) in cases {
        assert_eq!(from_rfc2253(subject), *want, "{}", String::from_utf8_lossy(subject));
    }
}

proptest::proptest! {
    #[test]
    fn never_panics(s in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
        let _ = from_rfc2253(&s);
    }
}
