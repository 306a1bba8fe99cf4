//! What the whole Envoy process shares: the table the refresher published
//! (the same keys and order as proxy-wasm shared data,
//! `mvp_contract::shared_data`), that table decoded once, and its
//! announced version. One copy per
//! process: Envoy `dlopen`s this `.so` once for the bootstrap extension and
//! every filter configuration (same path, same handle), so these statics are
//! the same for the refresher on the main thread and every worker.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use mvp_filter_core::table::RouteTable;
use std::sync::atomic::{AtomicU64, Ordering};

static SHARED: Mutex<BTreeMap<String, Vec<u8>>> = Mutex::new(BTreeMap::new());
/// The published version: read by every worker on every request (an
/// atomic load, where proxy-wasm costs a host call).
static VERSION: AtomicU64 = AtomicU64::new(0);

pub fn get(key: &str) -> Option<Vec<u8>> {
    // A poisoned lock only means a panic elsewhere mid-write of a whole
    // value (a `Vec` replace): the map itself is consistent.
    SHARED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(key).cloned()
}

pub fn set(key: &str, value: &[u8]) {
    SHARED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key.to_string(), value.to_vec());
}

/// The published table, decoded once (by the refresher, as it publishes)
/// for every worker; `None` when the published bytes did not decode, so
/// each worker decodes them itself and reports the error as the wasm
/// build's workers do.
static DECODED: Mutex<Option<Arc<RouteTable>>> = Mutex::new(None);

pub fn decoded() -> Option<Arc<RouteTable>> {
    DECODED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
}

pub fn set_decoded(table: Option<RouteTable>) {
    *DECODED.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = table.map(Arc::new);
}

pub fn version() -> u64 {
    VERSION.load(Ordering::Acquire)
}

/// Announces a version after its table is set (`shared_table::publish`'s
/// order: table, version key, gauge).
pub fn announce(version: u64) {
    VERSION.store(version, Ordering::Release);
}
