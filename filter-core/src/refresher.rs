//! The `refresher` role: a singleton on Envoy's main thread that asks
//! mvp-ext-proc for a newer routing table and publishes it to the workers
//! through shared data.
//!
//! A long poll: each call lets mvp-ext-proc hold it until a newer table is
//! published (up to `wait_ms`), and once it is answered — with a table, or
//! after the whole wait with none — the next call goes out at once, so a
//! table reaches the workers the moment it exists. After a failure, or from
//! a server that answers at once (one that predates the long poll), the
//! next call waits for the poll interval's tick: never a busy loop.
//!
//! Host-independent: the adapter makes the call it asks for and hands it the
//! answer.

use std::time::Duration;

use mvp_contract::plugin::RefresherConfig;

use crate::get_table::{self, Answer};
use crate::host::{Counter, Host, LogLevel};
use crate::shared_table;

pub struct Refresher {
    config: RefresherConfig,
    known_version: u64,
    in_flight: bool,
}

/// When the adapter should make the next call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// At once: the server long-polls and the caller holds the newest table.
    Now,
    /// At the next tick of the poll interval.
    Tick,
}

/// One `GetTable` call for the adapter to dispatch.
pub struct Call {
    pub cluster: String,
    pub authority: String,
    pub body: Vec<u8>,
    pub timeout: Duration,
}

impl Call {
    pub fn headers(&self) -> [(&str, &str); 5] {
        get_table::request_headers(&self.authority)
    }
}

impl Refresher {
    pub fn new(config: RefresherConfig) -> Refresher {
        Refresher { config, known_version: 0, in_flight: false }
    }

    pub fn poll_interval_ms(&self) -> u32 {
        self.config.poll_interval_ms
    }

    /// On each tick: the call to make, unless the last one is unanswered.
    pub fn next_call(&self) -> Option<Call> {
        if self.in_flight {
            return None;
        }
        Some(Call {
            cluster: self.config.cluster.clone(),
            authority: self.config.authority.clone(),
            body: get_table::request_body(self.known_version, self.config.wait_ms),
            timeout: Duration::from_millis(u64::from(self.config.wait_ms) + u64::from(self.config.timeout_ms)),
        })
    }

    /// Whether the host accepted the call (`Err` carries its reason).
    pub fn dispatched<H: Host>(&mut self, host: &H, sent: Result<(), String>) {
        match sent {
            Ok(()) => self.in_flight = true,
            Err(e) => {
                host.count(Counter::RefresherErrors, 1);
                host.log(
                    LogLevel::Warn,
                    &format!("mvp refresher: cannot call cluster {:?} ({e}); is it defined in the bootstrap?", self.config.cluster),
                );
            }
        }
    }

    /// The call's answer (or its failure: no status, no body), and when to
    /// make the next call.
    pub fn on_response<H: Host>(&mut self, host: &H) -> Next {
        self.in_flight = false;
        let parsed = get_table::read_answer(host);
        let long_poll = self.config.wait_ms > 0;
        match parsed {
            Ok(Answer::Current { waited }) if waited && long_poll => Next::Now,
            Ok(Answer::Current { .. }) => Next::Tick,
            Ok(Answer::New(t)) => match shared_table::publish(host, &t) {
                Ok(()) => {
                    self.known_version = t.version;
                    host.log(LogLevel::Info, &format!("mvp refresher: published routing table {:016x}", t.version));
                    // Asking again with the new version is held by a
                    // long-polling server and answered "current" at once by
                    // an old one — which `waited` then tells apart.
                    if long_poll { Next::Now } else { Next::Tick }
                }
                Err(e) => {
                    host.count(Counter::RefresherErrors, 1);
                    host.log(LogLevel::Warn, &format!("mvp refresher: writing shared data: {e}"));
                    Next::Tick
                }
            },
            Err(e) => {
                host.count(Counter::RefresherErrors, 1);
                host.log(LogLevel::Warn, &format!("mvp refresher: {e}"));
                Next::Tick
            }
        }
    }
}

#[cfg(test)]
#[path = "refresher_tests.rs"]
mod tests;
