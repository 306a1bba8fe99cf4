//! The `router` role: the HTTP filter on every Envoy worker. Per request it
//! forwards a verified client certificate's identity, makes sure the
//! worker's table is the published one, and pins the request to the
//! apiservers that serve it by writing one header.
//!
//! Host-independent: the adapter hands it a [`Host`].

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use mvp_contract::envoy::{HELD_PROPERTY, ROUTE_KEY_PROPERTY};
use mvp_contract::headers::UPSTREAM_TIMEOUT;
use mvp_contract::plugin::{IdentityConfig, RouterConfig};

use crate::get_table::{self, Answer};
use crate::hold::{Held, Holds};
use crate::hold_claim::Claim;
use crate::host::{Counter, Gauge, Host, LogLevel};
use crate::identity;
use crate::route::{self, Decision};
use crate::requestinfo::{self, RouteKey};
use crate::table::RouteTable;
use crate::urlpath::DecodedPath;
use crate::shared_table::{Load, WorkerTable};

/// How often a worker flushes its rerouted-request count.
pub const FLUSH_MS: u32 = 1000;

/// What the adapter tells the host after a request's headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Continue,
    /// Held (`hold.rs`): the request goes on from `on_hold_answer`.
    Pause,
    /// Answered by the filter itself (a local reply): it goes no further.
    Answered,
}

/// How a newer table answers a held request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HeldNow {
    /// An apiserver serves it now.
    Routed,
    /// Still the 503 Status, and a member that serves it is coming back.
    StillWaiting,
    /// The 503 Status, and no wait can help any more (the members that
    /// serve it are down): answered now, whatever its hold has left.
    Unavailable,
}

/// State a worker's HTTP contexts share with its root context.
pub struct Router {
    config: RouterConfig,
    table: WorkerTable,
    /// Requests held for a newer table (with `config.hold`).
    holds: Option<Holds>,
    /// The newest table a hold call brought, decoded once, until the
    /// worker loads one the refresher published.
    answered: RefCell<Option<Arc<RouteTable>>>,
    /// Spreads pinned requests over the capable apiservers.
    counter: Cell<u32>,
    /// Rerouted requests not yet added to the metric: flushed every
    /// [`FLUSH_MS`] instead of a host call per request.
    unflushed: Cell<i64>,
    /// The route-key property's bytes, reused across requests.
    key_buf: RefCell<Vec<u8>>,
}

impl Router {
    pub fn new<H: Host>(config: RouterConfig, host: &H) -> Router {
        let holds = config.hold.clone().map(Holds::new);
        let router = Router {
            config,
            table: WorkerTable::default(),
            holds,
            answered: RefCell::new(None),
            counter: Cell::new(0),
            unflushed: Cell::new(0),
            key_buf: RefCell::new(Vec::new()),
        };
        router.load_table(host);
        router
    }

    /// `context`: the request's proxy-wasm context, for a hold's answer;
    /// `end_of_stream`: the request has no body (what a hold would buffer).
    pub fn on_request_headers<H: Host>(&self, host: &H, context: u32, end_of_stream: bool) -> Action {
        if let Some(names) = &self.config.identity
            && forward_identity(host, names, &self.config.route_header).is_err()
        {
            return Action::Answered;
        }
        self.load_table(host);
        let Some(path) = request_path(host) else { return Action::Continue };
        let table = self.table.current();
        let decoded = DecodedPath::parse(&path);
        let (key, long_running) = requestinfo::route_key_and_long_running(&decoded);
        let decision = route::decide_key(&table, &key);
        // Kube applies no request timeout to these: neither does Envoy.
        if long_running
            && let Err(e) = host.set_request_header(UPSTREAM_TIMEOUT, "0")
        {
            host.log(LogLevel::Warn, &format!("mvp router: lifting the request timeout of a long-running request: {e}"));
        }
        // What it is routed by, for the access log (when it is on).
        if self.config.export_route_key
            && key != RouteKey::None
            && let Ok(mut buf) = self.key_buf.try_borrow_mut()
        {
            buf.clear();
            key.write_label(&mut buf);
            if let Err(e) = host.set_property(ROUTE_KEY_PROPERTY, &buf) {
                host.log(LogLevel::Warn, &format!("mvp router: setting {ROUTE_KEY_PROPERTY}: {e}"));
            }
        }
        // A skewed API's record, for who would lose it (`readiness`), and
        // a warning for what only older releases serve (not with the 503
        // Status: that request reaches no apiserver). Both name the API in
        // the table's own names, looked up once, only for these requests.
        let skewed = self.config.record_skew && crate::skew::is_skewed(&key, &decision, table.all());
        let warned = self.config.warn_on_skew
            && !matches!(decision, Decision::Unavailable { .. })
            && matches!(key, RouteKey::Resource { .. })
            && decision.served_by().is_some_and(|set| table.only_older(set));
        if skewed || warned {
            let named = table.known_key(&key);
            if skewed {
                self.mark_skew(host, &named);
            }
            if warned && let Ok(mut buf) = self.key_buf.try_borrow_mut() {
                crate::skew::write_warning(&named, table.newest_release(), &mut buf);
                if let Err(e) = host.warn_client(&buf) {
                    host.log(LogLevel::Warn, &format!("mvp router: warning a client: {e}"));
                }
            }
        }
        // Held only while a wait can help: a member that serves it is
        // coming back. Every one down: the 503 Status now (issue 63).
        if decision.wait_helps()
            && let Some(holds) = &self.holds
            && holds.hold(host, context, table.version(), self.claim(host, end_of_stream))
        {
            return Action::Pause;
        }
        self.pin(host, &decision);
        Action::Continue
    }

    /// Marks the current request with its skew record ([`crate::skew`]).
    fn mark_skew<H: Host>(&self, host: &H, key: &RouteKey<'_>) {
        let Ok(mut buf) = self.key_buf.try_borrow_mut() else { return };
        let authorization = match host.request_header("authorization") {
            Ok(a) => a,
            Err(e) => {
                host.log(LogLevel::Warn, &format!("mvp router: reading the authorization header: {e}"));
                None
            }
        };
        crate::skew::write_record(key, authorization.as_deref(), &mut buf);
        if let Err(e) = host.mark_skew(&buf) {
            host.log(LogLevel::Warn, &format!("mvp router: marking a skewed request: {e}"));
        }
    }

    /// What the current request would claim of the hold (its client, its
    /// body): only asked of a request to be held.
    pub fn claim<H: Host>(&self, host: &H, end_of_stream: bool) -> Claim {
        Claim::of_request(host, self.config.identity.as_ref().map(|i| i.username_header.as_str()), end_of_stream)
    }

    /// The published version this worker last acted on (the table its
    /// decisions use, or a newer one it rejected): what a held request
    /// waits to see replaced.
    pub fn acted_on(&self) -> u64 {
        self.table.acted_on()
    }

    /// Routes the current request again by the worker's newest table: the
    /// native build's hold (`native-filter/src/hold.rs`), whose requests
    /// wait for the process's table instead of a call of the worker's own.
    pub fn reroute<H: Host>(&self, host: &H) {
        self.load_table(host);
        self.pin_by(host, &self.table.current());
    }

    /// Pins the current request as `table` routes its path.
    fn pin_by<H: Host>(&self, host: &H, table: &RouteTable) {
        if let Some(path) = request_path(host) {
            self.pin(host, &route::route(table, &DecodedPath::parse(&path)).1);
        }
    }

    /// The answer to the worker's hold call (`token`), in the root context:
    /// routes every held request by the newest table, holds again those it
    /// still cannot route while their time lasts, and lets the others go
    /// on — with the 503 Status if that is still the answer.
    pub fn on_hold_answer<H: Host>(&self, host: &H, token: u32) {
        let Some(holds) = &self.holds else { return };
        let Some((call, held)) = holds.answered(token) else { return };
        // The call's answer is the root context's: read before switching.
        let answer = get_table::read_answer(host);
        self.load_table(host);
        let table = self.newest_table(host, call.asked_with, &answer);
        // Held again only on an answer that waited (no busy loop on a
        // failing or non-long-polling server).
        let may_wait = matches!(answer, Ok(Answer::New(_) | Answer::Current { waited: true }));
        let mut still = Vec::new();
        for h in held {
            match self.route_held(host, h, &table) {
                Some(HeldNow::StillWaiting) if may_wait => still.push(h),
                Some(now) => self.release(host, h, &table, now != HeldNow::Routed),
                None => {}
            }
        }
        for h in holds.hold_again(host, still, table.version()) {
            if self.route_held(host, h, &table).is_some() {
                self.release(host, h, &table, true);
            }
        }
    }

    /// Switches to a held request's context; how the table answers it now.
    /// None: the request is gone.
    fn route_held<H: Host>(&self, host: &H, h: Held, table: &RouteTable) -> Option<HeldNow> {
        host.set_effective_context(h.context).ok()?;
        let path = request_path(host).unwrap_or_default();
        Some(match route::route(table, &DecodedPath::parse(&path)).1 {
            Decision::Unavailable { wait_helps: true, .. } => HeldNow::StillWaiting,
            Decision::Unavailable { wait_helps: false, .. } => HeldNow::Unavailable,
            _ => HeldNow::Routed,
        })
    }

    /// Lets a held request (the current context) go on, routed by `table`.
    fn release<H: Host>(&self, host: &H, h: Held, table: &RouteTable, unavailable: bool) {
        self.pin_by(host, table);
        self.held_for(host, h, unavailable);
        if let Err(e) = host.continue_request() {
            host.log(LogLevel::Warn, &format!("mvp router: resuming a held request: {e}"));
        }
    }

    /// The newest table the worker knows: its own, or one a hold call
    /// brought before the refresher published it (kept until the worker
    /// loads a table, so it is the newer while kept), or the one this
    /// call brings if it asked with the newest. An answer "current" names
    /// the table the call asked with: a kept table that is not that one is
    /// dropped. Versions are content hashes, so the published table can go
    /// back to a version this worker holds while it is idle (a server
    /// restarted, read, killed again): it then loads nothing, and only the
    /// server's answer says the kept table is no longer the newest.
    fn newest_table<H: Host>(&self, host: &H, asked_with: u64, answer: &Result<Answer, get_table::GetTableError>) -> Arc<RouteTable> {
        let Ok(mut answered) = self.answered.try_borrow_mut() else { return self.table.current() };
        let base = answered.clone().unwrap_or_else(|| self.table.current());
        let t = match answer {
            Ok(Answer::New(t)) => t,
            Ok(Answer::Current { .. }) if base.version() != asked_with && self.table.current().version() == asked_with => {
                *answered = None;
                return self.table.current();
            }
            _ => return base,
        };
        if t.version == base.version() || asked_with != base.version() {
            return base;
        }
        match RouteTable::decode(&t.encoded) {
            Ok(a) => {
                let a = Arc::new(a);
                *answered = Some(a.clone());
                a
            }
            Err(e) => {
                host.log(LogLevel::Warn, &format!("mvp router: the hold call's table: {e}"));
                base
            }
        }
    }

    /// Counts a held request's end and, with the access log on, says how
    /// long it was held and how it ended (`HELD_PROPERTY`).
    fn held_for<H: Host>(&self, host: &H, held: Held, unavailable: bool) {
        if unavailable {
            host.count(Counter::HeldThenUnavailable, 1);
        }
        if self.config.export_route_key {
            let ms = host.now_ms().saturating_sub(held.since_ms);
            let how = if unavailable { "unavailable" } else { "routed" };
            if let Err(e) = host.set_property(HELD_PROPERTY, format!("{ms} {how}").as_bytes()) {
                host.log(LogLevel::Warn, &format!("mvp router: setting {HELD_PROPERTY}: {e}"));
            }
        }
    }

    /// Pins the request as the decision asks ([`Host::pin`]).
    fn pin<H: Host>(&self, host: &H, decision: &Decision<'_>) {
        let n = self.counter.get();
        let Some(hosts) = decision.hosts(n) else {
            return;
        };
        self.counter.set(n.wrapping_add(1));
        let pinned = match decision {
            Decision::LastResort { .. } => host.pin_last_resort(&self.config.route_header, hosts),
            Decision::Unavailable { wait_helps: false, .. } => host.pin_unavailable(&self.config.route_header, hosts),
            _ => host.pin(&self.config.route_header, hosts),
        };
        match pinned {
            Ok(true) => self.unflushed.set(self.unflushed.get() + 1),
            Ok(false) => {}
            Err(e) => host.log(LogLevel::Warn, &format!("mvp router: setting the route header: {e}")),
        }
    }

    /// Adds the requests rerouted since the last flush to the metric.
    pub fn flush<H: Host>(&self, host: &H) {
        let n = self.unflushed.replace(0);
        if n > 0 {
            host.count(Counter::Rerouted, n);
        }
    }

    fn load_table<H: Host>(&self, host: &H) {
        match self.table.load_published(host) {
            Load::Unchanged => {}
            Load::Loaded => {
                host.count(Counter::TableLoads, 1);
                // A hold call's table, if any, is this one or older.
                if let Ok(mut answered) = self.answered.try_borrow_mut() {
                    *answered = None;
                }
                // The old table is dropped: this is the VM's high-water mark
                // (linear memory never shrinks). A failed write only leaves
                // the gauge stale.
                let _ = host.set_gauge(Gauge::VmMemoryBytes, host.vm_memory_bytes());
            }
            Load::Rejected(e) => {
                host.count(Counter::TableErrors, 1);
                host.log(LogLevel::Warn, &format!("mvp router: keeping the previous table: {e}"));
            }
            Load::Unreadable(key, e) => host.log(LogLevel::Warn, &format!("mvp router: reading {key}: {e}")),
        }
    }
}

fn request_path<H: Host>(host: &H) -> Option<std::borrow::Cow<'_, [u8]>> {
    match host.request_path() {
        Ok(p) => p,
        Err(e) => {
            host.log(LogLevel::Warn, &format!("mvp router: reading :path: {e}"));
            None
        }
    }
}

/// Forwards a verified client certificate's identity. Envoy's early header
/// mutation already removed any client-sent identity headers, so these are
/// the only ones the apiserver sees; without a certificate the client's own
/// credentials (e.g. a bearer token) speak for it. An identity a header
/// cannot carry exactly is answered 401 here (the error): forwarded altered
/// it would be someone else, and dropped the request would go on as
/// nobody — or, left to Envoy, be refused with a 503 clients retry forever.
fn forward_identity<H: Host>(host: &H, names: &IdentityConfig, route_header: &str) -> Result<(), identity::Uncarriable> {
    let subject = match host.peer_certificate_subject() {
        Ok(Some(s)) if !s.is_empty() => s,
        Ok(_) => return Ok(()),
        Err(e) => {
            host.log(LogLevel::Warn, &format!("mvp router: reading the client certificate subject: {e}"));
            return Ok(());
        }
    };
    let id = match identity::from_rfc2253(&subject) {
        Ok(Some(id)) => id,
        Ok(None) => return Ok(()),
        Err(refused) => {
            refuse_identity(host, route_header, refused);
            return Err(refused);
        }
    };
    let mut result = host.set_request_header(&names.username_header, &id.user);
    for g in &id.groups {
        result = result.and_then(|_| host.add_request_header(&names.group_header, g));
    }
    if let Err(e) = result {
        host.log(LogLevel::Warn, &format!("mvp router: setting identity headers: {e}"));
    }
    Ok(())
}

/// The 401: marked on the route header (clients cannot send it), so
/// Envoy's local reply mapper writes kube's `Unauthorized` Status for it;
/// the details name the attribute and what it holds (the access log's
/// `details`).
fn refuse_identity<H: Host>(host: &H, route_header: &str, refused: identity::Uncarriable) {
    host.count(Counter::IdentityRefused, 1);
    let marked = host.set_request_header(route_header, mvp_contract::headers::IDENTITY_REFUSED);
    if let Err(e) = marked.and_then(|()| host.send_local_reply(401, &refused.details())) {
        host.log(LogLevel::Warn, &format!("mvp router: answering 401 for a client certificate it cannot forward: {e}"));
    }
}

#[cfg(test)]
#[path = "router_tests.rs"]
mod tests;
