//! Per-apiserver state and the policy for its last known API set.
//!
//! Policy:
//! - A discovery read that succeeds makes the server healthy and replaces
//!   its view (what it serves).
//! - A read that fails (connection, timeout, non-200/304 status, a document
//!   that does not parse, one over the size limit) marks it unhealthy at once
//!   and keeps its last known view for as long as it is a member of the
//!   control plane (a configured `--apiserver`: always). Requests for APIs
//!   only it serves still go to it, so clients get a 503 Status from the
//!   front door — never another server's 404, which client-go reads as
//!   "deleted"; its healthy peers are listed first for everything shared.
//! - The view survives mvp-ext-proc restarts through the state file
//!   (`state_file/persist.rs`): a member that is down when mvp-ext-proc starts keeps
//!   the API set it last had.
//! - One server's failure never changes any other server's entry.
//! - Open (sent new requests) only while it is a member, ready (`/readyz`),
//!   current (its discovery read since it last became ready, joined or
//!   restarted) and, when it joined while mvp-ext-proc ran, known to every
//!   connected Envoy. A closed member keeps its bits in the table: a
//!   request for an API only closed members serve gets the 503 Status.
//! - A member that departs (left every membership source) is closed at
//!   once and forgotten after the retention period (`--departed-retention`),
//!   when its exclusive APIs become the 404s they then are.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use crate::apiservers::ApiserverSpec;
use crate::discover::ServerView;
use crate::openapi::ServerOpenApi;

/// A member's last known API set as an earlier run kept it (the state
/// file, [`crate::state_file::persist`], reads and writes it).
#[derive(Debug)]
pub struct LastKnown {
    pub view: ServerView,
    /// Only its `/openapi/v3` index (the v2 documents are megabytes; they
    /// are read again).
    pub openapi: Option<Arc<ServerOpenApi>>,
}

#[derive(Debug, Clone)]
pub struct ServerState {
    pub spec: ApiserverSpec,
    /// Resolved `IP:port`, matching the host Envoy's cluster holds.
    pub address: Option<SocketAddr>,
    /// Last good discovery, shared with the table and the merged document
    /// builders; replaced only when it changed, so pointer equality means
    /// "unchanged".
    pub view: Option<Arc<ServerView>>,
    /// Its OpenAPI documents (last good read; not persisted: re-read on
    /// start), pointer-equal while unchanged.
    pub openapi: Option<Arc<ServerOpenApi>>,
    pub healthy: bool,
    /// Its release (`/version`), read after each (re)appearance.
    pub version: Option<String>,
    pub last_success: Option<Instant>,
    pub last_error: Option<String>,
    /// Its last `/readyz` answer was 200.
    pub ready: bool,
    /// Its discovery was read since it last became ready, joined or restarted.
    pub current: bool,
    /// Joined while mvp-ext-proc ran: opened only once every connected
    /// Envoy accepted an endpoint for its address.
    pub gated: bool,
    /// When it left every membership source.
    pub departed: Option<Instant>,
    /// What the membership source says identifies this run of it (a
    /// lease's holder identity); a change means it restarted.
    pub incarnation: Option<String>,
    /// Derived when the table is built: sent new requests.
    pub open: bool,
    /// Since when it has been closed (from the start until first opened).
    pub closed_since: Option<Instant>,
    /// Derived with `open`: closed, still a member, and closed for less than
    /// the departed retention — what it serves now is unknown, so an API
    /// nobody is known to serve answers 503 rather than 404
    /// (`Apiserver.pending` in the table).
    pub pending: bool,
    /// Since when it has been shutting down while still answering: its
    /// `/readyz` answered a failure status, or it left the membership while
    /// it was ready (kube withdraws its endpoint at the start of its
    /// shutdown delay). Unset once it is ready again or stops answering.
    pub draining_since: Option<Instant>,
    /// Derived with `open`: closed and draining for less than
    /// [`LAST_RESORT_FOR`] — a request only closed members serve is sent to
    /// it rather than answered 503 (`Apiserver.draining` in the table).
    pub draining: bool,
    /// Since when it has answered while closed and not draining: its
    /// `/readyz` answered a failure status (a server starting), or 200 and
    /// its discovery is being read, or a source says a new run of it began.
    /// Unset while it refuses connections or does not answer, and once open.
    pub answering_since: Option<Instant>,
    /// Derived with `open`: pending, not draining, and answering for less
    /// than [`RETURNING_FOR`] — coming back, so a request only closed
    /// members serve is held for it (`Apiserver.returning` in the table);
    /// a member that is down gets its requests the 503 Status at once.
    pub returning: bool,
}

/// How long a closed member that answers counts as coming back. A
/// kube-apiserver is ready seconds after it listens (RELIABILITY.md: a
/// restarted v1.37 listening → routed); one whose `/readyz` fails longer
/// than this (its etcd unreachable, a post-start hook stuck) is not about
/// to serve, and holding requests for it only delays their 503.
pub const RETURNING_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// How a member that is not ready answered its `/readyz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReady {
    /// It did not: refused, reset, timed out (down or hung).
    Unreachable,
    /// A failure status; `shutting_down` what its `shutdown` check says
    /// (`None`: the answer names none).
    Answered { shutting_down: Option<bool> },
}

impl NotReady {
    /// How a failed `/readyz` probe (`ReadyProbe::check`) answered.
    pub fn of(e: &crate::discover::DiscoveryError) -> NotReady {
        use crate::discover::{DiscoveryError, FetchError};
        match e {
            DiscoveryError::Fetch { source: FetchError::NotReady { shutting_down, .. }, .. } => NotReady::Answered { shutting_down: *shutting_down },
            _ => NotReady::Unreachable,
        }
    }
}

/// How long a draining member stays a last resort. kube's
/// `--shutdown-delay-duration` is seconds to a minute or so; past this the
/// member is assumed gone even if nothing said so.
pub const LAST_RESORT_FOR: std::time::Duration = std::time::Duration::from_secs(120);

impl ServerState {
    pub fn new(spec: ApiserverSpec) -> ServerState {
        ServerState {
            address: spec.ip_address(),
            spec,
            view: None,
            openapi: None,
            healthy: false,
            version: None,
            last_success: None,
            last_error: None,
            ready: false,
            current: false,
            gated: false,
            departed: None,
            incarnation: None,
            open: false,
            closed_since: Some(Instant::now()),
            pending: true,
            draining_since: None,
            draining: false,
            answering_since: None,
            returning: false,
        }
    }

    /// Whether it may be sent new requests (see the module policy);
    /// `known_to_envoy` says every connected Envoy has its endpoint.
    pub fn may_open(&self, known_to_envoy: bool) -> bool {
        self.departed.is_none() && self.ready && self.current && (!self.gated || known_to_envoy)
    }

    /// Derives `open` (see [`ServerState::may_open`]) and `pending`.
    pub fn set_open(&mut self, open: bool, now: Instant, retention: std::time::Duration) {
        if open {
            self.closed_since = None;
        } else if self.open || self.closed_since.is_none() {
            self.closed_since = Some(now);
        }
        self.open = open;
        self.pending = !open && self.departed.is_none() && self.closed_since.is_some_and(|at| now.duration_since(at) < retention);
        if open {
            self.draining_since = None;
        }
        self.draining = !open && self.draining_since.is_some_and(|at| now.duration_since(at) < LAST_RESORT_FOR);
        if open {
            self.answering_since = None;
        }
        self.returning = self.pending && self.draining_since.is_none() && self.answering_since.is_some_and(|at| now.duration_since(at) < RETURNING_FOR);
    }

    /// It answered (its `/readyz` 200 before its discovery is read, a
    /// failure while it starts, a read, a new run of it): coming back while
    /// it is closed, unless it is draining (`set_open` forgets it once open).
    pub fn answered(&mut self, now: Instant) {
        if self.draining_since.is_none() {
            self.answering_since.get_or_insert(now);
        }
    }

    /// Not ready: closed until it is ready and read again; `how` it answered.
    pub fn not_ready(&mut self, error: String, how: NotReady, now: Instant) {
        // Draining only when it was ready: a server still starting answers
        // `/readyz` with a failure too, and may not serve yet what it will
        // (a starting kube-apiserver can answer 404 for a CRD whose handler
        // is not installed yet) — it is never a last resort. kube's answer
        // says which (its `shutdown` check); without that, having been
        // ready is the sign (a restart between two probes looks the same).
        let was_ready = self.ready || self.draining_since.is_some();
        match how {
            NotReady::Answered { shutting_down } if shutting_down.unwrap_or(was_ready) => {
                // Going away: a last resort if it was ready, never coming back.
                if was_ready {
                    self.draining_since.get_or_insert(now);
                }
                self.answering_since = None;
            }
            NotReady::Answered { .. } => {
                // Starting (or not ready for another reason): coming back.
                self.draining_since = None;
                self.answered(now);
            }
            NotReady::Unreachable => {
                // Down: nothing says when it comes back.
                self.draining_since = None;
                self.answering_since = None;
            }
        }
        self.ready = false;
        self.healthy = false;
        self.current = false;
        self.last_error = Some(error);
    }

    /// Left every membership source: closed at once. Left while it was
    /// ready, it is most likely in its shutdown delay (kube withdraws its
    /// endpoint first): draining from now, unless already.
    pub fn departed(&mut self, now: Instant) {
        if self.ready {
            self.draining_since.get_or_insert(now);
        }
        self.departed = Some(now);
        self.ready = false;
    }

    /// A source says it restarted (or moved): closed until read again, and
    /// not draining (a new process may still be starting).
    pub fn restarted(&mut self, now: Instant) {
        self.current = false;
        self.draining_since = None;
        // A new run of it said so (a lease holder, an endpoint): it is up.
        self.answered(now);
    }

    /// A read that found `view`. The same `Arc` (nothing changed, the usual
    /// case) costs nothing; a new one replaces the old only when its content
    /// differs, so pointer equality keeps meaning "unchanged" downstream.
    pub fn succeeded(&mut self, view: Arc<ServerView>, now: Instant) {
        let unchanged = self.view.as_ref().is_some_and(|old| Arc::ptr_eq(old, &view) || **old == *view);
        if !unchanged {
            self.view = Some(view);
        }
        self.answered(now);
        self.healthy = true;
        self.ready = true;
        self.current = true;
        self.last_success = Some(now);
        self.last_error = None;
    }

    /// A read that failed: unhealthy, the last known view kept.
    pub fn failed(&mut self, error: String) {
        self.healthy = false;
        self.last_error = Some(error);
    }

    /// Starts from what an earlier run persisted: unhealthy (not read yet),
    /// but routing by what it last served (its OpenAPI v3 keys too).
    pub fn restored(&mut self, stored: LastKnown) {
        self.view = Some(Arc::new(stored.view));
        self.openapi = stored.openapi;
        self.last_error = Some("not read since mvp-ext-proc started (API set from the state file)".into());
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
