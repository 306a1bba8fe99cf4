//! The refresher as Envoy's bootstrap extension: the proxy-wasm filter's
//! [`Refresher`] on the main thread, its `GetTable` long poll made with
//! bootstrap callouts and paced with a bootstrap timer, publishing into
//! process memory ([`crate::process`]) instead of proxy-wasm shared data.

use std::cell::RefCell;
use std::ffi::c_void;

use mvp_contract::plugin::PluginConfig;
use mvp_filter_core::host::{Counter, Gauge};
use mvp_filter_core::refresher::{Next, Refresher};

use crate::abi::{self, EnvoyBuffer, EnvoyHttpHeader, EnvoyPtr, ModuleBuffer};
use crate::hold;
use crate::host::{Answer, CounterIds, NativeHost, Target};

pub struct RefresherExtension {
    refresher: RefCell<Refresher>,
    timer: *mut c_void,
    counters: CounterIds,
    version_gauge: Option<usize>,
}

impl RefresherExtension {
    /// From the extension's configuration (the refresher's JSON). Envoy
    /// holds traffic until a bootstrap extension signals it is ready; the
    /// refresher does at once — until the first table, requests are load
    /// balanced as without mvp-envoy, as with the wasm refresher.
    pub fn new(envoy: EnvoyPtr, raw: &[u8]) -> Result<RefresherExtension, String> {
        let config = match PluginConfig::parse(raw) {
            Ok(PluginConfig::Refresher(r)) => r,
            Ok(PluginConfig::Router(_)) => return Err("the router is the HTTP filter, not the bootstrap extension".into()),
            Err(e) => return Err(e.to_string()),
        };
        let mut counters: CounterIds = [None; Counter::ALL.len()];
        for (slot, c) in counters.iter_mut().zip(Counter::ALL) {
            let mut id = 0usize;
            let r = unsafe { abi::envoy_dynamic_module_callback_bootstrap_extension_config_define_counter(envoy, ModuleBuffer::of(c.name().as_bytes()), std::ptr::null_mut(), 0, &mut id) };
            *slot = (r == abi::METRICS_SUCCESS).then_some(id);
        }
        let mut id = 0usize;
        let r = unsafe { abi::envoy_dynamic_module_callback_bootstrap_extension_config_define_gauge(envoy, ModuleBuffer::of(Gauge::TableVersion.name().as_bytes()), std::ptr::null_mut(), 0, &mut id) };
        let version_gauge = (r == abi::METRICS_SUCCESS).then_some(id);
        let timer = unsafe { abi::envoy_dynamic_module_callback_bootstrap_extension_timer_new(envoy) };
        if timer.is_null() {
            return Err("Envoy gave the refresher no timer".into());
        }
        // Workers tell the main thread of a held request through it.
        let scheduler = unsafe { abi::envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_new(envoy) };
        if !scheduler.is_null() {
            hold::set_main(scheduler);
        }
        // The first call goes out from the event loop, once the clusters exist.
        unsafe { abi::envoy_dynamic_module_callback_bootstrap_extension_timer_enable(timer, 0) };
        unsafe { abi::envoy_dynamic_module_callback_bootstrap_extension_config_signal_init_complete(envoy) };
        Ok(RefresherExtension { refresher: RefCell::new(Refresher::new(config)), timer, counters, version_gauge })
    }

    fn host<'a>(&'a self, envoy: EnvoyPtr, answer: Option<Answer<'a>>) -> NativeHost<'a> {
        NativeHost::new(Target::Refresher { config: envoy, counters: &self.counters, version_gauge: self.version_gauge, answer })
    }

    /// Its timer fired.
    pub fn on_timer_fired(&self, envoy: EnvoyPtr) {
        self.on_timer(envoy);
    }

    /// Wakes the held requests a new table may serve. Also the main
    /// thread's answer to a worker that held one (the table may have moved
    /// on while it did).
    pub fn wake_held(&self) {
        hold::wake_moved();
    }

    /// The timer: the next call (none while one is in flight).
    fn on_timer(&self, envoy: EnvoyPtr) {
        let Ok(mut r) = self.refresher.try_borrow_mut() else { return };
        let Some(call) = r.next_call() else { return };
        let host = self.host(envoy, None);
        let sent = mvp_filter_core::host::Host::http_call(&host, &call.cluster, &call.headers(), &call.body, call.timeout).map(|_| ()).map_err(|e| e.to_string());
        let failed = sent.is_err();
        r.dispatched(&host, sent);
        if failed {
            self.arm(r.poll_interval_ms());
        }
    }

    /// The call's answer; the next call now (long poll) or at the next tick.
    pub fn on_answer(&self, envoy: EnvoyPtr, success: bool, headers: &[EnvoyHttpHeader], body: &[EnvoyBuffer]) {
        let next = {
            let Ok(mut r) = self.refresher.try_borrow_mut() else { return };
            let host = self.host(envoy, Some(Answer { success, headers, body }));
            let next = r.on_response(&host);
            (next, r.poll_interval_ms())
        };
        // A new table may be what held requests wait for.
        self.wake_held();
        match next {
            (Next::Now, _) => self.on_timer(envoy),
            (Next::Tick, ms) => self.arm(ms),
        }
    }

    fn arm(&self, ms: u32) {
        unsafe { abi::envoy_dynamic_module_callback_bootstrap_extension_timer_enable(self.timer, u64::from(ms)) };
    }
}

impl Drop for RefresherExtension {
    fn drop(&mut self) {
        hold::clear_main();
        unsafe { abi::envoy_dynamic_module_callback_bootstrap_extension_timer_delete(self.timer) };
    }
}
