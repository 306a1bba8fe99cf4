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
        assert_eq!(from_rfc2253(subject), Ok(want.clone()), "{}", String::from_utf8_lossy(subject));
    }
}

type Parsed = Result<Option<ClientIdentity>, Uncarriable>;

/// A user or group a header cannot carry exactly is refused: the bytes
/// real certificates produced against real kube-apiservers (issue 47).
#[test]
fn identities_a_header_cannot_carry_are_refused() {
    let refused = |attribute, holds| Err(Uncarriable { attribute, holds });
    let cases: &[(&[u8], Parsed)] = &[
        (b"CN=x\\0D\\0AX-Remote-Group: system:masters", refused("CN", "control_character")),
        (b"CN=y\\0AX-Remote-Group: system:masters", refused("CN", "control_character")),
        (b"CN=z\\00admin", refused("CN", "control_character")),
        (b"CN=tab\\09", refused("CN", "control_character")),
        (b"CN=del\\7F", refused("CN", "control_character")),
        (b"CN=alice,O=dev\\0D\\0AX-Remote-User: admin", refused("O", "control_character")),
        (b"CN=\\ system:admin", refused("CN", "edge_space")),
        (b"CN=system:admin\\ ", refused("CN", "edge_space")),
        (b"CN=alice,O=system:masters\\ ", refused("O", "edge_space")),
        (b"CN=\\FF\\FE", refused("CN", "not_utf8")),
        (b"CN=alice,O=\\C3", refused("O", "not_utf8")),
        // Only what is forwarded counts: an earlier CN (the last one wins),
        // an OU, a space inside.
        (b"CN=alice,CN=x\\0Ay", Ok(id("alice", &[]))),
        (b"CN=alice,OU=x\\0Ay", Ok(id("alice", &[]))),
        (b"CN=Alice Smith,O=dev ops", Ok(id("Alice Smith", &["dev ops"]))),
    ];
    for (subject, want) in cases {
        assert_eq!(from_rfc2253(subject), *want, "{}", String::from_utf8_lossy(subject));
    }
    assert_eq!(Uncarriable { attribute: "CN", holds: "control_character" }.details(), "mvp_identity_refused{CN_control_character}");
}

proptest::proptest! {
    #[test]
    fn never_panics(s in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
        // Whatever it lets through, a header carries exactly.
        if let Ok(Some(id)) = from_rfc2253(&s) {
            for v in std::iter::once(&id.user).chain(&id.groups) {
                proptest::prop_assert!(!v.bytes().any(|b| b < 0x20 || b == 0x7f) && !v.starts_with(' ') && !v.ends_with(' '), "{v:?}");
            }
        }
    }
}
