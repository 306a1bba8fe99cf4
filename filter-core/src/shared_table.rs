//! The routing table in proxy-wasm shared data: the refresher publishes,
//! each worker loads. The protocol (keys, order, version encoding) is
//! `mvp_contract::shared_data`.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use mvp_contract::shared_data::{TABLE_KEY, VERSION_KEY, decode_version, encode_version};

use crate::get_table::NewTable;
use crate::host::{Gauge, Host, HostError};
use crate::table::{RouteTable, TableError};

/// Table first, version second, the announcing gauge last: a worker that
/// sees the new version always finds a table at least that new. An error
/// means the version may be unannounced; the refresher publishes again.
pub fn publish<H: Host>(host: &H, t: &NewTable) -> Result<(), HostError> {
    host.set_shared_data(TABLE_KEY, &t.encoded)?;
    host.set_shared_data(VERSION_KEY, &encode_version(t.version))?;
    host.set_gauge(Gauge::TableVersion, t.version)
}

/// What a worker's check of the published version found.
#[derive(Debug)]
pub enum Load {
    /// Nothing published yet, or the version it holds.
    Unchanged,
    /// A newer table, now in use.
    Loaded,
    /// A newer table that does not decode or validate: the last good one stays.
    Rejected(TableError),
    /// A shared-data read failed: the last good table stays.
    Unreadable(&'static str, HostError),
}

/// A worker's table: decoded and indexed once per published version.
#[derive(Default)]
pub struct WorkerTable {
    current: RefCell<Arc<RouteTable>>,
    /// The announced version last acted on (loaded, or rejected: a bad
    /// table is read once per announcement, not once per request).
    acted_on: Cell<u64>,
}

impl WorkerTable {
    pub fn current(&self) -> Arc<RouteTable> {
        self.current.borrow().clone()
    }

    /// The announced version last acted on: the table in use, or one
    /// rejected since.
    pub fn acted_on(&self) -> u64 {
        self.acted_on.get()
    }

    /// One gauge read per call (the shared-data version where the gauge
    /// cannot be read or reads 0); the table itself is copied and decoded
    /// only when a version not yet acted on is announced.
    pub fn load_published<H: Host>(&self, host: &H) -> Load {
        // 0 is also what a gauge reads that Envoy's stats configuration
        // rejected (a null gauge ignores the refresher's writes), so it is
        // checked against shared data rather than trusted; it costs the
        // shared-data read only until something is published.
        let announced = match host.gauge(Gauge::TableVersion) {
            Ok(v) if v != 0 => v,
            _ => match host.shared_data(VERSION_KEY) {
                Ok(v) => v.as_deref().and_then(decode_version).unwrap_or(0),
                Err(e) => return Load::Unreadable(VERSION_KEY, e),
            },
        };
        if announced == 0 || announced == self.acted_on.get() {
            return Load::Unchanged;
        }
        // Decoded once for the whole process where the host can (the
        // native build); a table it holds that this worker already acted
        // on is no news, and the worker decodes the published bytes itself.
        if let Some(t) = host.decoded_table()
            && t.version() != self.acted_on.get()
        {
            self.acted_on.set(t.version());
            *self.current.borrow_mut() = t;
            return Load::Loaded;
        }
        match host.shared_data(TABLE_KEY) {
            Ok(Some(bytes)) => match RouteTable::decode(&bytes) {
                Ok(t) => {
                    // The table may be newer than the announcement read a
                    // moment before; its own version is what was acted on.
                    self.acted_on.set(t.version());
                    *self.current.borrow_mut() = Arc::new(t);
                    Load::Loaded
                }
                Err(e) => {
                    self.acted_on.set(announced);
                    Load::Rejected(e)
                }
            },
            Ok(None) => Load::Unchanged,
            Err(e) => Load::Unreadable(TABLE_KEY, e),
        }
    }
}

#[cfg(test)]
#[path = "shared_table_tests.rs"]
mod tests;
