//! The HTTP filter on every worker: the proxy-wasm filter's [`Router`],
//! one per worker thread and filter configuration, over [`NativeHost`].
//!
//! No per-request state: the module pointer Envoy keeps for a stream is
//! the configuration's own, so a request costs no allocation and its
//! destroy hook nothing (a held request is in its worker's list,
//! `hold.rs`, keyed by its stream).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use mvp_contract::envoy::HELD_PROPERTY;
use mvp_contract::plugin::{HoldConfig, PluginConfig, RouterConfig};
use mvp_filter_core::host::{Counter, Host, LogLevel};
use mvp_filter_core::hold_claim::{Bounds, Claim};
use mvp_filter_core::router::{Action, Router};

use crate::abi::{self, EnvoyPtr, ModuleBuffer};
use crate::host::{CounterIds, NativeHost, Target};
use crate::{handover, hold};

/// One HTTP filter configuration (main thread creates and drops it;
/// workers read it).
pub struct FilterConfig {
    id: u64,
    router: RouterConfig,
    /// Holding requests for a newer table (`hold.rs`).
    hold: Option<HoldConfig>,
    counters: CounterIds,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This worker's router for each filter configuration it has served.
    /// A configuration Envoy replaced leaves its router here until the
    /// worker exits: the rendered bootstrap configures the filter once.
    static ROUTERS: RefCell<Vec<(u64, Router)>> = const { RefCell::new(Vec::new()) };
}

impl FilterConfig {
    /// From the filter's configuration (the router's JSON, as the wasm
    /// plugin gets it); an error rejects the configuration in Envoy.
    pub fn new(envoy: EnvoyPtr, raw: &[u8]) -> Result<FilterConfig, String> {
        let mut router = match PluginConfig::parse(raw) {
            Ok(PluginConfig::Router(r)) => r,
            Ok(PluginConfig::Refresher(_)) => return Err("the refresher is the bootstrap extension, not the HTTP filter".into()),
            Err(e) => return Err(e.to_string()),
        };
        // Held here (`hold.rs`), not by the router's own call.
        let hold = router.hold.take();
        let mut counters: CounterIds = [None; Counter::ALL.len()];
        for (slot, c) in counters.iter_mut().zip(Counter::ALL) {
            let mut id = 0usize;
            let r = unsafe { abi::envoy_dynamic_module_callback_http_filter_config_define_counter(envoy, ModuleBuffer::of(c.name().as_bytes()), std::ptr::null_mut(), 0, &mut id) };
            *slot = (r == abi::METRICS_SUCCESS).then_some(id);
        }
        Ok(FilterConfig { id: NEXT_ID.fetch_add(1, Ordering::Relaxed), router, hold, counters })
    }

    /// Runs `f` with this worker's router for this configuration.
    fn with_router<R>(&self, host: &NativeHost<'_>, fallback: R, f: impl FnOnce(&Router) -> R) -> R {
        ROUTERS.with(|routers| {
            let Ok(mut routers) = routers.try_borrow_mut() else { return fallback };
            let router = match routers.iter().position(|(id, _)| *id == self.id) {
                Some(i) => routers.get(i).map(|(_, r)| r),
                None => {
                    routers.push((self.id, Router::new(self.router.clone(), host)));
                    routers.last().map(|(_, r)| r)
                }
            };
            match router {
                Some(r) => f(r),
                None => fallback,
            }
        })
    }

    fn host<'a>(&'a self, filter: EnvoyPtr) -> NativeHost<'a> {
        NativeHost::new(Target::Request { filter, counters: &self.counters, log_listed: self.router.export_route_key })
    }

    /// A request's headers: route it, then have Envoy match the route
    /// again if a header the route table matches changed (identity
    /// headers, an unavailable answer; a pinned request does not need it:
    /// [`NativeHost`]'s `pin`). A request only closed apiservers serve is
    /// held when the configuration allows ([`hold`]).
    pub fn on_request_headers(&self, filter: EnvoyPtr, end_of_stream: bool) -> u32 {
        // Nothing handed to the balancer survives a pass (`handover.rs`).
        handover::disarm();
        // Requests this worker holds past any wake are woken here too (a
        // thread-local check per request; the clock only when some are).
        if hold::any_parked() {
            hold::sweep(hold::now_ms());
        }
        let mut host = self.host(filter);
        host.set_holding(self.hold.is_some());
        let (action, seen) = self.with_router(&host, (Action::Continue, 0), |router| {
            let action = router.on_request_headers(&host, 0, end_of_stream);
            router.flush(&host);
            (action, router.acted_on())
        });
        if action == Action::Answered {
            return abi::HEADERS_STOP_ITERATION;
        }
        self.finish(&host, filter, seen, None, end_of_stream)
    }

    /// A held request's wake: route it again by the newest table.
    pub fn on_wake(&self, filter: EnvoyPtr) {
        handover::disarm();
        let Some(held) = hold::unpark(filter) else { return };
        // Unparked: from here the request goes on, is parked again, or is
        // answered — also if routing it panics (the hook's guard catches
        // the panic; this answers instead of leaving it paused for good).
        let unanswered = Unanswered(filter);
        let mut host = self.host(filter);
        host.set_holding(hold::now_ms() < held.deadline_ms);
        if held.rematch {
            host.carry_rematch();
        }
        let seen = self.with_router(&host, 0, |router| {
            router.reroute(&host);
            router.flush(&host);
            router.acted_on()
        });
        let status = self.finish(&host, filter, seen, Some(held), true);
        std::mem::forget(unanswered);
        if status == abi::HEADERS_CONTINUE {
            unsafe { abi::envoy_dynamic_module_callback_http_filter_continue_decoding(filter) };
        }
    }

    /// After routing: parks a request the table answered with the 503
    /// while it may wait, or writes that answer; the status for Envoy.
    /// `seen`: the table version the decision was made with (a table
    /// published meanwhile wakes the request at once); `held`: since when
    /// and until when it was held already, if it was.
    ///
    /// The route is matched again, as the request goes on, whenever a header
    /// the route table matches was written — by this pass or, for a held
    /// request, by the pass that held it (carried into this pass's host by
    /// [`Self::on_wake`]): the identity headers pick the cluster that
    /// presents the front proxy's certificate, and a request held with them
    /// and let go on the route matched before them would reach the
    /// apiserver as nobody (kube: 401, or anonymous). A pin matched it again
    /// already when it asked the route's cluster (`pin.rs`), unless a header
    /// was written since.
    /// `end_of_stream`: the request has no body (a held one's claim was
    /// made when it was first held).
    fn finish(&self, host: &NativeHost<'_>, filter: EnvoyPtr, seen: u64, held: Option<hold::Released>, end_of_stream: bool) -> u32 {
        let answer = host.unavailable();
        // Headers the route table matches were written by this pass, or by
        // the pass that held the request: carried while it waits, acted on
        // when it goes on.
        let rematch = || host.rematch();
        let was_held = held.is_some();
        if let Some(answer) = answer
            && host.holding()
        {
            let bounds = self.hold.as_ref().map_or(Bounds { max_held: 0, per_client: 0, per_source_unverified: 0, max_body_bytes: 0 }, Bounds::of);
            let span = held.unwrap_or_else(|| {
                let now = hold::now_ms();
                // What it claims (its client, its body), only now that it
                // is to be held (not per request).
                let claim = self.with_router(host, Claim::default(), |router| router.claim(host, end_of_stream));
                hold::Released { since_ms: now, deadline_ms: now.saturating_add(self.hold.as_ref().map_or(0, |h| u64::from(h.max_ms))), rematch: false, claim }
            });
            if hold::park(filter, seen, hold::Released { rematch: rematch(), ..span }, &bounds) {
                if !was_held {
                    host.count(Counter::Held, 1);
                }
                return abi::HEADERS_STOP_ALL_WATERMARK;
            }
            if !was_held {
                host.count(Counter::HoldRefused, 1);
            }
            // Answered now: counted as the router counts an answer it writes.
            host.count(Counter::Rerouted, 1);
            if let Err(e) = host.set_request_header(&self.router.route_header, answer) {
                host.log(LogLevel::Warn, &format!("mvp router: setting the route header: {e}"));
            }
        }
        if rematch() {
            unsafe { abi::envoy_dynamic_module_callback_http_clear_route_cache(filter) };
        }
        if let Some(held) = held {
            self.held_for(host, held, answer.is_some());
        }
        abi::HEADERS_CONTINUE
    }

    /// Counts a held request's end and, with the access log on, says how
    /// long it was held and how it ended (the wasm build's property).
    fn held_for(&self, host: &NativeHost<'_>, held: hold::Released, unavailable: bool) {
        if unavailable {
            host.count(Counter::HeldThenUnavailable, 1);
        }
        if self.router.export_route_key {
            let ms = hold::now_ms().saturating_sub(held.since_ms);
            let how = if unavailable { "unavailable" } else { "routed" };
            if let Err(e) = host.set_property(HELD_PROPERTY, format!("{ms} {how}").as_bytes()) {
                host.log(LogLevel::Warn, &format!("mvp router: setting {HELD_PROPERTY}: {e}"));
            }
        }
    }
}

/// A held request taken off its worker's list and not yet sent on: if it
/// is dropped so (a panic while routing it), the request gets the 503
/// Status (the local reply mapper writes it) rather than waiting forever.
struct Unanswered(EnvoyPtr);

impl Drop for Unanswered {
    fn drop(&mut self) {
        let details = b"mvp_hold_resume_failed";
        unsafe {
            abi::envoy_dynamic_module_callback_http_send_response(self.0, 503, std::ptr::null(), 0, ModuleBuffer::of(&[]), ModuleBuffer::of(details));
        }
    }
}
