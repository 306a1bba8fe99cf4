use super::*;
use crate::host_fake::FakeHost;

fn request(headers: &[(&str, &str)], client: &str) -> FakeHost {
    let host = FakeHost { client: Some(client.as_bytes().to_vec()), ..FakeHost::default() };
    *host.headers.borrow_mut() = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    host
}

const IDENTITY: Option<&str> = Some("X-Remote-User");

/// A verified certificate's user first, then the bearer token, then the
/// source — an IPv4 address, an IPv6 /64, whatever the port.
#[test]
fn who_the_client_is() {
    let claim = |headers: &[(&str, &str)], client: &str| Claim::of_request(&request(headers, client), IDENTITY, true);
    let alice = claim(&[("x-remote-user", "alice"), ("authorization", "Bearer t1")], "10.0.0.1:1");
    assert!(alice.verified);
    assert_eq!(alice.client, claim(&[("x-remote-user", "alice")], "10.0.0.2:2").client, "the user, wherever it comes from");
    let token = claim(&[("authorization", "Bearer t1")], "10.0.0.1:1");
    assert!(!token.verified);
    assert_ne!(token.client, alice.client);
    assert_eq!(token.client, claim(&[("authorization", "Bearer t1")], "10.0.0.9:9").client);
    assert_ne!(token.client, claim(&[("authorization", "Bearer t2")], "10.0.0.1:1").client);
    let anonymous = claim(&[], "10.0.0.1:1");
    assert_eq!(anonymous.client, anonymous.source);
    assert_eq!(anonymous.source, token.source);
    assert_eq!(claim(&[], "10.0.0.1:2").client, anonymous.client, "any port");
    assert_ne!(claim(&[], "10.0.0.2:1").client, anonymous.client);
    assert_eq!(claim(&[], "[2001:db8:1:2::1]:1").client, claim(&[], "[2001:db8:1:2:ffff::9]:2").client, "one /64");
    assert_ne!(claim(&[], "[2001:db8:1:2::1]:1").client, claim(&[], "[2001:db8:1:3::1]:1").client);
    assert_eq!(claim(&[], "[::ffff:10.0.0.1]:1").client, anonymous.client, "a mapped IPv4 is its IPv4");
    // Without identity forwarding the header is no certificate's.
    let forged = Claim::of_request(&request(&[("x-remote-user", "alice")], "10.0.0.1:1"), None, true);
    assert!(!forged.verified);
    let unknown = Claim::of_request(&FakeHost::default(), IDENTITY, true);
    assert_eq!((unknown.client, unknown.source), (0, 0));
}

/// No body, the content-length, or (unknown) the most a request buffers.
#[test]
fn what_its_body_costs() {
    let body = |headers: &[(&str, &str)], end: bool| Claim::of_request(&request(headers, "10.0.0.1:1"), IDENTITY, end).body_bytes;
    assert_eq!(body(&[("content-length", "1000")], true), 0);
    assert_eq!(body(&[("content-length", "1000")], false), 1000);
    assert_eq!(body(&[], false), RETRY_BODY_BUFFER_BYTES);
    assert_eq!(body(&[("content-length", "99999999999")], false), RETRY_BODY_BUFFER_BYTES);
    assert_eq!(body(&[("content-length", "x")], false), RETRY_BODY_BUFFER_BYTES);
}

fn bounds() -> Bounds {
    Bounds::of(&HoldConfig { max_held: 16, max_held_per_client: 2, max_held_body_bytes: 10 << 20, ..HoldConfig::default() })
}

fn c(client: u64, verified: bool, source: u64, body_bytes: u64) -> Claim {
    Claim { client, verified, source, body_bytes }
}

/// Each client its share; unverified keys a quarter of the slots per
/// source between them; bodies within the budget; a bodiless request never
/// refused by the budget.
#[test]
fn the_bounds() {
    let b = bounds();
    assert_eq!(b.per_source_unverified, 4);
    let mut held = vec![c(1, true, 9, 0), c(1, true, 9, 0)];
    assert!(!has_room(held.iter(), &c(1, true, 9, 0), &b), "client 1's share");
    assert!(has_room(held.iter(), &c(2, true, 9, 0), &b));
    // Tokens from one source (random ones, say): four between them.
    held = (10..14).map(|t| c(t, false, 9, 0)).collect();
    assert!(!has_room(held.iter(), &c(99, false, 9, 0), &b), "the source's unverified share");
    assert!(has_room(held.iter(), &c(99, false, 8, 0), &b), "another source");
    assert!(has_room(held.iter(), &c(99, true, 9, 0), &b), "a certificate's user behind the same source");
    // Bodies.
    held = vec![c(1, true, 9, 4 << 20), c(2, true, 9, 4 << 20)];
    assert!(has_room(held.iter(), &c(3, true, 9, 2 << 20), &b));
    assert!(!has_room(held.iter(), &c(3, true, 9, (2 << 20) + 1), &b));
    held.push(c(3, true, 9, 2 << 20));
    assert!(has_room(held.iter(), &c(4, true, 9, 0), &b), "no body: no budget");
    // The worker's bound.
    held = (100..116).map(|t| c(t, true, t, 0)).collect();
    assert!(!has_room(held.iter(), &c(1, true, 1, 0), &b));
    // A client the host cannot tell: the other bounds only.
    held = vec![c(0, false, 0, 0); 5];
    assert!(has_room(held.iter(), &c(0, false, 0, 0), &b));
}
