//! Limits both halves enforce.

/// Apiservers in one table: a set of them is a `u64` bitmask.
pub const MAX_APISERVERS: usize = 64;

/// Largest encoded routing table a `GetTable` answer may carry (a
/// 5,000-resource table is ~85 KiB).
pub const MAX_TABLE_BYTES: usize = 16 << 20;

/// How long the refresher waits for one `GetTable` answer.
pub const GET_TABLE_TIMEOUT_MS: u32 = 2000;

/// Default interval of the refresher's `GetTable` polls.
pub const DEFAULT_TABLE_POLL_MS: u32 = 200;
