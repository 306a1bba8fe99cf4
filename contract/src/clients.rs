//! Who one client is, where the front door bounds what a client may hold
//! (held requests in the filter, TLS handshakes and connections on
//! mvp-ext-proc's ports): an IPv4 address, or an IPv6 /64 — the prefix one
//! host or one subscriber is handed (RFC 6177 / SLAAC), inside which a
//! single client may pick any address it likes. An IPv4-mapped IPv6 address
//! is its IPv4 client.

use std::net::IpAddr;

/// The client an address belongs to, as one number (IPv4 and IPv6 keys
/// never collide: a mapped IPv4 lives in `::ffff:0:0/96`, which is not a
/// /64 any IPv6 key ends in zeros like).
pub fn client_of(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => u128::from(v4.to_ipv6_mapped()),
            None => u128::from(v6) & !u128::from(u64::MAX),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_per_address_ipv6_per_64() {
        let key = |s: &str| client_of(s.parse().unwrap_or(IpAddr::from([0, 0, 0, 0])));
        assert_ne!(key("10.0.0.1"), key("10.0.0.2"));
        assert_eq!(key("10.0.0.1"), key("::ffff:10.0.0.1"));
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff:ffff:ffff:ffff"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_ne!(key("::"), key("0.0.0.0"));
    }
}
