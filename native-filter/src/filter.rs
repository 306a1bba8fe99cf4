//! The HTTP filter on every worker: the proxy-wasm filter's [`Router`],
//! one per worker thread and filter configuration, over [`NativeHost`].
//!
//! No per-request state: the module pointer Envoy keeps for a stream is
//! the configuration's own, so a request costs no allocation and its
//! destroy hook nothing.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use mvp_contract::plugin::{PluginConfig, RouterConfig};
use mvp_wasm_filter::host::{Counter, Host, LogLevel};
use mvp_wasm_filter::router::{Action, Router};

use crate::abi::{self, EnvoyPtr, ModuleBuffer};
use crate::host::{CounterIds, NativeHost, Target};

/// One HTTP filter configuration (main thread creates and drops it;
/// workers read it).
pub struct FilterConfig {
    id: u64,
    router: RouterConfig,
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
        if router.hold.take().is_some() {
            abi::log(abi::LOG_WARN, "mvp router (native): holding requests for a newer table is not in the native build yet; the 503 Status at once");
        }
        let mut counters: CounterIds = [None; Counter::ALL.len()];
        for (slot, c) in counters.iter_mut().zip(Counter::ALL) {
            let mut id = 0usize;
            let r = unsafe { abi::envoy_dynamic_module_callback_http_filter_config_define_counter(envoy, ModuleBuffer::of(c.name().as_bytes()), std::ptr::null_mut(), 0, &mut id) };
            *slot = (r == abi::METRICS_SUCCESS).then_some(id);
        }
        Ok(FilterConfig { id: NEXT_ID.fetch_add(1, Ordering::Relaxed), router, counters })
    }

    /// A request's headers: route it, then have Envoy match the route
    /// again if a header changed (the route table matches the route header).
    pub fn on_request_headers(&self, filter: EnvoyPtr) -> u32 {
        let host = NativeHost::new(Target::Request { filter, counters: &self.counters });
        let action = ROUTERS.with(|routers| {
            let Ok(mut routers) = routers.try_borrow_mut() else { return Action::Continue };
            let router = match routers.iter().position(|(id, _)| *id == self.id) {
                Some(i) => routers.get(i).map(|(_, r)| r),
                None => {
                    routers.push((self.id, Router::new(self.router.clone(), &host)));
                    routers.last().map(|(_, r)| r)
                }
            };
            let Some(router) = router else { return Action::Continue };
            let action = router.on_request_headers(&host, 0);
            router.flush(&host);
            action
        });
        if host.wrote_header() {
            unsafe { abi::envoy_dynamic_module_callback_http_clear_route_cache(filter) };
        }
        match action {
            Action::Continue => abi::HEADERS_CONTINUE,
            // Not reached without a hold configuration (see `new`).
            Action::Pause => {
                host.log(LogLevel::Warn, "mvp router (native): a request was held without a hold; let go");
                abi::HEADERS_CONTINUE
            }
        }
    }
}
