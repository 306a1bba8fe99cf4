//! The routing table in proxy-wasm shared data: the refresher publishes,
//! each worker loads. The protocol (keys, order, version encoding) is
//! `mvp_contract::shared_data`.

use std::cell::RefCell;
use std::rc::Rc;

use mvp_contract::shared_data::{TABLE_KEY, VERSION_KEY, decode_version, encode_version};

use crate::get_table::NewTable;
use crate::host::{Host, HostError};
use crate::table::{RouteTable, TableError};

/// Table first, version second: a worker that sees the new version always
/// finds a table at least that new.
pub fn publish<H: Host>(host: &H, t: &NewTable) -> Result<(), HostError> {
    host.set_shared_data(TABLE_KEY, &t.encoded)?;
    host.set_shared_data(VERSION_KEY, &encode_version(t.version))
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
    current: RefCell<Rc<RouteTable>>,
}

impl WorkerTable {
    pub fn current(&self) -> Rc<RouteTable> {
        self.current.borrow().clone()
    }

    /// One 8-byte shared-data read per call; the table itself is copied and
    /// decoded only when its version changed.
    pub fn load_published<H: Host>(&self, host: &H) -> Load {
        let published = match host.shared_data(VERSION_KEY) {
            Ok(Some(v)) => decode_version(&v),
            Ok(None) => None,
            Err(e) => return Load::Unreadable(VERSION_KEY, e),
        };
        let Some(published) = published else { return Load::Unchanged };
        if published == self.current.borrow().version() {
            return Load::Unchanged;
        }
        match host.shared_data(TABLE_KEY) {
            Ok(Some(bytes)) => match RouteTable::decode(&bytes) {
                Ok(t) => {
                    *self.current.borrow_mut() = Rc::new(t);
                    Load::Loaded
                }
                Err(e) => Load::Rejected(e),
            },
            Ok(None) => Load::Unchanged,
            Err(e) => Load::Unreadable(TABLE_KEY, e),
        }
    }
}

#[cfg(test)]
#[path = "shared_table_tests.rs"]
mod tests;
