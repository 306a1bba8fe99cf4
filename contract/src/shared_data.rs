//! How the routing table travels from the refresher (Envoy's main thread) to
//! every worker through proxy-wasm shared data.
//!
//! The refresher writes the encoded `mvp.routing.v1.RoutingTable` under
//! [`TABLE_KEY`] first and its version under [`VERSION_KEY`] second, so a
//! worker that sees a new version always finds a table at least that new.
//! Workers read only the 8-byte version per request and decode the table
//! only when it changed.

/// The encoded `mvp.routing.v1.RoutingTable`.
pub const TABLE_KEY: &str = "mvp.routing.v1.table";

/// The table's version, [`encode_version`]d.
pub const VERSION_KEY: &str = "mvp.routing.v1.version";

/// 8 bytes, little-endian.
pub fn encode_version(v: u64) -> [u8; 8] {
    v.to_le_bytes()
}

pub fn decode_version(b: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_round_trip() {
        assert_eq!(decode_version(&encode_version(u64::MAX - 3)), Some(u64::MAX - 3));
        assert_eq!(decode_version(b"short"), None);
    }
}
