//! How the routing table travels from the refresher (Envoy's main thread) to
//! every worker through proxy-wasm shared data.
//!
//! The refresher writes the encoded `mvp.routing.v1.RoutingTable` under
//! [`TABLE_KEY`] first, its version under [`VERSION_KEY`] second, and then
//! announces that version in the gauge [`VERSION_GAUGE`], so a worker that
//! sees a new version always finds a table at least that new.
//!
//! Workers read the gauge per request and copy and decode the table only
//! when it announces a version they have not loaded. The gauge, not the
//! shared-data version, is read per request because it costs one host call
//! that writes 8 bytes into the VM, where a shared-data read also takes a
//! lock and calls back into the VM to allocate the value; Envoy's stats are
//! process-wide, so every VM that defines the gauge by this name reads the
//! one the refresher set (an atomic written after the table). The
//! shared-data version stays for a gauge that cannot be read or reads 0
//! (also what a stat rejected by Envoy's stats configuration reads).

/// The encoded `mvp.routing.v1.RoutingTable`.
pub const TABLE_KEY: &str = "mvp.routing.v1.table";

/// The table's version, [`encode_version`]d.
pub const VERSION_KEY: &str = "mvp.routing.v1.version";

/// The gauge announcing the published version, as the filter defines it;
/// 0 while nothing is published.
pub const VERSION_GAUGE: &str = "mvp.refresher.table_version";

/// [`VERSION_GAUGE`] as Envoy's admin `/stats` shows it (Envoy puts metrics
/// a wasm module defines under `wasmcustom.`).
pub const VERSION_STAT: &str = "wasmcustom.mvp.refresher.table_version";

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

    #[test]
    fn the_stat_is_the_gauge_under_envoys_prefix() {
        assert_eq!(VERSION_STAT, format!("wasmcustom.{VERSION_GAUGE}"));
    }
}
