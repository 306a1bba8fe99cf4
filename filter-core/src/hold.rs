//! Holding a request the table can only answer with the 503 Status: every
//! apiserver that serves it is closed (restarting, not read yet), or its API
//! is unknown while some member's API set is. Instead of answering at once,
//! the router pauses the request and asks mvp-ext-proc for a newer table —
//! the refresher's `GetTable` long poll — and routes it again by the
//! answer. mvp-ext-proc reads a restarted apiserver within ~100 ms of its
//! `/readyz` turning 200, so a request that arrives in between is served
//! instead of refused.
//!
//! Bounded: at most `max_ms` per request (then the 503 Status it would have
//! had, so a client loses at most the `Retry-After: 1` second it would have
//! waited anyway), and by what each held request claims (`hold_claim.rs`):
//! at most `max_held` requests per worker, `max_held_per_client` of them per
//! client, `max_held_body_bytes` of bodies in all (beyond any, the 503 at
//! once): a client that asks for an unavailable API over and over, by
//! accident or to fill the slots, leaves the others theirs.
//!
//! One call per worker, whatever it holds: proxy-wasm makes every call on
//! the root context (cpp-host `http_call` uses `root_context()`), and
//! answers it there, so one answer serves every held request of the worker
//! (each resumed through `proxy_set_effective_context`, as the SDKs resume
//! a request after a call; a request gone meanwhile is no context any more
//! and is skipped). The call waits until the earliest held request's
//! deadline, so that one gets its 503 on time.
//!
//! This file keeps the book (which requests are held, until when; the call
//! in flight) and makes the calls; `router.rs` decides what to hold and
//! routes the answers.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use mvp_contract::plugin::HoldConfig;

use crate::get_table;
use crate::hold_claim::{Bounds, Claim, has_room};
use crate::host::{Counter, Host, LogLevel};

/// How long past the wait it allows the server a held call's answer may
/// take before the call fails (and the requests get their 503): the server
/// answers "current" exactly at the end of the wait, so this is transfer
/// time, not a second wait.
pub const ANSWER_MARGIN_MS: u32 = 250;

/// One held request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// The proxy-wasm context of its request.
    pub context: u32,
    pub since_ms: u64,
    pub deadline_ms: u64,
    /// What it claims of the worker's hold.
    pub claim: Claim,
}

/// The call in flight: its token and the version it asked to be newer than.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    pub token: u32,
    pub asked_with: u64,
}

pub struct Holds {
    config: HoldConfig,
    held: RefCell<Vec<Held>>,
    in_flight: Cell<Option<Call>>,
}

impl Holds {
    pub fn new(config: HoldConfig) -> Holds {
        Holds { config, held: RefCell::new(Vec::new()), in_flight: Cell::new(None) }
    }

    /// Holds the request of `context`, claiming `claim`, until a table
    /// newer than `version` comes. False when it cannot — the claim does
    /// not fit the worker's bounds, or the call cannot be made — and the
    /// caller answers now.
    pub fn hold<H: Host>(&self, host: &H, context: u32, version: u64, claim: Claim) -> bool {
        let now = host.now_ms();
        let held = Held { context, since_ms: now, deadline_ms: now.saturating_add(u64::from(self.config.max_ms)), claim };
        let bounds = Bounds::of(&self.config);
        let room = self.held.try_borrow().is_ok_and(|h| has_room(h.iter().map(|x| &x.claim), &claim, &bounds));
        // A call in flight waits at most until an earlier deadline than
        // this one: its answer comes in time for this request too.
        if !room || (self.in_flight.get().is_none() && !self.ask(host, version, self.config.max_ms)) {
            host.count(Counter::HoldRefused, 1);
            return false;
        }
        let Ok(mut book) = self.held.try_borrow_mut() else { return false };
        book.push(held);
        host.count(Counter::Held, 1);
        true
    }

    /// The call `token` answered (or failed): every request held, for the
    /// router to route again, and the call. None for a call not ours.
    pub fn answered(&self, token: u32) -> Option<(Call, Vec<Held>)> {
        let call = self.in_flight.get().filter(|c| c.token == token)?;
        self.in_flight.set(None);
        let held = self.held.try_borrow_mut().map(|mut h| std::mem::take(&mut *h)).unwrap_or_default();
        Some((call, held))
    }

    /// Holds again what a newer table still cannot route and whose time
    /// is not up, with one call until the earliest deadline; what cannot
    /// be held again is returned to be answered now.
    pub fn hold_again<H: Host>(&self, host: &H, still: Vec<Held>, version: u64) -> Vec<Held> {
        let now = host.now_ms();
        let (mut keep, over): (Vec<Held>, Vec<Held>) = still.into_iter().partition(|h| h.deadline_ms > now);
        let wait = keep.iter().map(|h| h.deadline_ms - now).min().map(|w| u32::try_from(w).unwrap_or(u32::MAX));
        if let Some(wait) = wait
            && !self.ask(host, version, wait)
        {
            return over.into_iter().chain(keep).collect();
        }
        if let Ok(mut book) = self.held.try_borrow_mut() {
            book.append(&mut keep);
        }
        over
    }

    pub fn len(&self) -> usize {
        self.held.try_borrow().map_or(0, |h| h.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes the worker's call; false if the host refuses it.
    fn ask<H: Host>(&self, host: &H, version: u64, wait_ms: u32) -> bool {
        let timeout = Duration::from_millis(u64::from(wait_ms) + u64::from(ANSWER_MARGIN_MS));
        let headers = get_table::request_headers(&self.config.authority);
        match host.http_call(&self.config.cluster, &headers, &get_table::request_body(version, wait_ms), timeout) {
            Ok(token) => {
                self.in_flight.set(Some(Call { token, asked_with: version }));
                true
            }
            Err(e) => {
                let cluster = &self.config.cluster;
                host.log(LogLevel::Warn, &format!("mvp router: cannot hold requests, calling cluster {cluster:?}: {e}"));
                false
            }
        }
    }
}

#[cfg(test)]
#[path = "hold_tests.rs"]
mod tests;
