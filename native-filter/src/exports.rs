//! The event hooks Envoy resolves in this module. Each one is wrapped in
//! [`guard`]: a panic unwinding into Envoy's C++ would abort the whole
//! process, every worker with it, so a panic in a hook is caught and the
//! hook answers as if nothing was done (a request goes on, load balanced).
//! Hooks of features this module does not use answer "nothing to do".

#![allow(clippy::missing_safety_doc)]

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};

use mvp_contract::envoy::NATIVE_LB_NAME;

use crate::abi::{self, EnvoyBuffer, EnvoyHttpHeader, EnvoyPtr, ModulePtr};
use crate::filter::FilterConfig;
use crate::hold;
use crate::lb::Lb;
use crate::refresher::RefresherExtension;

fn guard<R>(fallback: R, f: impl FnOnce() -> R) -> R {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// # Safety
/// `b` is a buffer Envoy handed to the current hook.
unsafe fn bytes<'a>(b: EnvoyBuffer) -> &'a [u8] {
    unsafe { b.bytes() }.unwrap_or_default()
}

/// A configuration as Envoy's module pointer, or null (Envoy rejects the
/// configuration) with the reason logged.
fn boxed<T>(what: &str, made: Result<T, String>) -> ModulePtr {
    match made {
        Ok(t) => Box::into_raw(Box::new(t)) as ModulePtr,
        Err(e) => {
            abi::log(abi::LOG_WARN, &format!("mvp {what}: configuration rejected: {e}"));
            std::ptr::null()
        }
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const u8 {
    abi::ABI_VERSION.as_ptr()
}

// ----------------------------------------------------------- HTTP filter

#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_new(envoy: EnvoyPtr, _name: EnvoyBuffer, config: EnvoyBuffer) -> ModulePtr {
    guard(std::ptr::null(), || boxed("router", FilterConfig::new(envoy, unsafe { bytes(config) })))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(config: ModulePtr) {
    guard((), || {
        if !config.is_null() {
            drop(unsafe { Box::from_raw(config as *mut FilterConfig) });
        }
    })
}

/// The stream's module pointer is its configuration's (no per-request state).
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_new(config: ModulePtr, _filter: EnvoyPtr) -> ModulePtr {
    config
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(filter: EnvoyPtr, module: ModulePtr, end_of_stream: bool) -> u32 {
    guard(abi::HEADERS_CONTINUE, || match unsafe { (module as *const FilterConfig).as_ref() } {
        Some(config) => config.on_request_headers(filter, end_of_stream),
        None => abi::HEADERS_CONTINUE,
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_destroy(_module: ModulePtr) {}

/// A held request's wake (`hold.rs`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_scheduled(filter: EnvoyPtr, module: ModulePtr, event: u64) {
    guard((), || {
        if event == hold::WAKE
            && let Some(config) = unsafe { (module as *const FilterConfig).as_ref() }
        {
            config.on_wake(filter);
        }
    })
}

/// A stream's end: forgets it if it was held (nothing to do for the
/// others, which is every request but a held one).
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_stream_complete(filter: EnvoyPtr, _module: ModulePtr) {
    guard((), || {
        if hold::any_parked() {
            hold::unpark(filter);
        }
        crate::warn::forget(filter);
    })
}

/// A response's headers: the stream's `Warning`, if it has one.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(filter: EnvoyPtr, _module: ModulePtr, _end_of_stream: bool) -> u32 {
    guard(0, || {
        crate::warn::on_response_headers(filter);
        0
    })
}

macro_rules! continue_hooks {
    ($($name:ident($($arg:ident: $ty:ty),*)),* $(,)?) => {$(
        #[unsafe(no_mangle)]
        pub extern "C" fn $name($($arg: $ty),*) -> u32 { 0 }
    )*};
}

macro_rules! nothing_hooks {
    ($($name:ident($($arg:ident: $ty:ty),*)),* $(,)?) => {$(
        #[unsafe(no_mangle)]
        pub extern "C" fn $name($($arg: $ty),*) {}
    )*};
}

// Status 0 is Continue for each of these.
continue_hooks! {
    envoy_dynamic_module_on_http_filter_request_body(_f: EnvoyPtr, _m: ModulePtr, _eos: bool),
    envoy_dynamic_module_on_http_filter_request_trailers(_f: EnvoyPtr, _m: ModulePtr),
    envoy_dynamic_module_on_http_filter_response_body(_f: EnvoyPtr, _m: ModulePtr, _eos: bool),
    envoy_dynamic_module_on_http_filter_response_trailers(_f: EnvoyPtr, _m: ModulePtr),
    envoy_dynamic_module_on_http_filter_local_reply(_f: EnvoyPtr, _m: ModulePtr, _code: u32, _details: EnvoyBuffer, _reset: bool),
}

nothing_hooks! {
    envoy_dynamic_module_on_http_filter_config_scheduled(_c: EnvoyPtr, _m: ModulePtr, _event: u64),
    envoy_dynamic_module_on_http_filter_http_callout_done(_f: EnvoyPtr, _m: ModulePtr, _id: u64, _result: u32, _h: *const EnvoyHttpHeader, _hn: usize, _b: *const EnvoyBuffer, _bn: usize),
    envoy_dynamic_module_on_http_filter_config_http_callout_done(_c: EnvoyPtr, _m: ModulePtr, _id: u64, _result: u32, _h: *const EnvoyHttpHeader, _hn: usize, _b: *const EnvoyBuffer, _bn: usize),
    envoy_dynamic_module_on_http_filter_http_stream_headers(_f: EnvoyPtr, _m: ModulePtr, _id: u64, _h: *const EnvoyHttpHeader, _hn: usize, _eos: bool),
    envoy_dynamic_module_on_http_filter_http_stream_data(_f: EnvoyPtr, _m: ModulePtr, _id: u64, _d: *const EnvoyBuffer, _dn: usize, _eos: bool),
    envoy_dynamic_module_on_http_filter_http_stream_trailers(_f: EnvoyPtr, _m: ModulePtr, _id: u64, _h: *const EnvoyHttpHeader, _hn: usize),
    envoy_dynamic_module_on_http_filter_http_stream_complete(_f: EnvoyPtr, _m: ModulePtr, _id: u64),
    envoy_dynamic_module_on_http_filter_http_stream_reset(_f: EnvoyPtr, _m: ModulePtr, _id: u64, _reason: u32),
    envoy_dynamic_module_on_http_filter_config_http_stream_headers(_c: EnvoyPtr, _m: ModulePtr, _id: u64, _h: *const EnvoyHttpHeader, _hn: usize, _eos: bool),
    envoy_dynamic_module_on_http_filter_config_http_stream_data(_c: EnvoyPtr, _m: ModulePtr, _id: u64, _d: *const EnvoyBuffer, _dn: usize, _eos: bool),
    envoy_dynamic_module_on_http_filter_config_http_stream_trailers(_c: EnvoyPtr, _m: ModulePtr, _id: u64, _h: *const EnvoyHttpHeader, _hn: usize),
    envoy_dynamic_module_on_http_filter_config_http_stream_complete(_c: EnvoyPtr, _m: ModulePtr, _id: u64),
    envoy_dynamic_module_on_http_filter_config_http_stream_reset(_c: EnvoyPtr, _m: ModulePtr, _id: u64, _reason: u32),
    envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark(_f: EnvoyPtr, _m: ModulePtr),
    envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark(_f: EnvoyPtr, _m: ModulePtr),
    envoy_dynamic_module_on_http_filter_per_route_config_destroy(_m: ModulePtr),
}

/// Per-route configuration is not used: null rejects one.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_per_route_config_new(_name: EnvoyBuffer, _config: EnvoyBuffer) -> ModulePtr {
    std::ptr::null()
}

// ----------------------------------------------------------- bootstrap

#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_bootstrap_extension_config_new(envoy: EnvoyPtr, _name: EnvoyBuffer, config: EnvoyBuffer) -> ModulePtr {
    guard(std::ptr::null(), || boxed("refresher", RefresherExtension::new(envoy, unsafe { bytes(config) })))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_bootstrap_extension_config_destroy(config: ModulePtr) {
    guard((), || {
        if !config.is_null() {
            drop(unsafe { Box::from_raw(config as *mut RefresherExtension) });
        }
    })
}

/// The extension's module pointer is its configuration's: all the
/// refresher's state is there.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_new(config: ModulePtr, _extension: EnvoyPtr) -> ModulePtr {
    config
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_bootstrap_extension_timer_fired(envoy: EnvoyPtr, config: ModulePtr, _timer: *mut c_void) {
    guard((), || {
        if let Some(r) = unsafe { (config as *const RefresherExtension).as_ref() } {
            r.on_timer_fired(envoy);
        }
    })
}

/// A worker held a request: the main thread wakes it if the table moved
/// on meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_bootstrap_extension_config_scheduled(_envoy: EnvoyPtr, config: ModulePtr, event: u64) {
    guard((), || {
        if event == hold::HELD
            && let Some(r) = unsafe { (config as *const RefresherExtension).as_ref() }
        {
            r.wake_held();
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_bootstrap_extension_http_callout_done(
    envoy: EnvoyPtr,
    config: ModulePtr,
    _callout_id: u64,
    result: u32,
    headers: *const EnvoyHttpHeader,
    headers_size: usize,
    body: *const EnvoyBuffer,
    body_size: usize,
) {
    guard((), || {
        let Some(r) = (unsafe { (config as *const RefresherExtension).as_ref() }) else { return };
        let headers = if headers.is_null() { &[][..] } else { unsafe { std::slice::from_raw_parts(headers, headers_size) } };
        let body = if body.is_null() { &[][..] } else { unsafe { std::slice::from_raw_parts(body, body_size) } };
        r.on_answer(envoy, result == abi::CALLOUT_SUCCESS, headers, body);
    })
}

nothing_hooks! {
    envoy_dynamic_module_on_bootstrap_extension_destroy(_m: ModulePtr),
    envoy_dynamic_module_on_bootstrap_extension_server_initialized(_e: EnvoyPtr, _m: ModulePtr),
    envoy_dynamic_module_on_bootstrap_extension_worker_thread_initialized(_e: EnvoyPtr, _m: ModulePtr),
    envoy_dynamic_module_on_bootstrap_extension_drain_started(_e: EnvoyPtr, _m: ModulePtr),
    envoy_dynamic_module_on_bootstrap_extension_file_changed(_e: EnvoyPtr, _m: ModulePtr, _path: EnvoyBuffer, _events: u32),
    envoy_dynamic_module_on_bootstrap_extension_cluster_add_or_update(_e: EnvoyPtr, _m: ModulePtr, _name: EnvoyBuffer),
    envoy_dynamic_module_on_bootstrap_extension_cluster_removal(_e: EnvoyPtr, _m: ModulePtr, _name: EnvoyBuffer),
    envoy_dynamic_module_on_bootstrap_extension_listener_add_or_update(_e: EnvoyPtr, _m: ModulePtr, _name: EnvoyBuffer),
    envoy_dynamic_module_on_bootstrap_extension_listener_removal(_e: EnvoyPtr, _m: ModulePtr, _name: EnvoyBuffer),
}

/// No admin handler is registered; 404 for any that reached here.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_admin_request(_e: EnvoyPtr, _m: ModulePtr, _method: EnvoyBuffer, _path: EnvoyBuffer, _body: EnvoyBuffer) -> u32 {
    404
}

/// Envoy waits at exit until each bootstrap extension calls its completion:
/// the refresher has nothing to finish.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_bootstrap_extension_shutdown(_e: EnvoyPtr, _m: ModulePtr, done: Option<unsafe extern "C" fn(*mut c_void)>, context: *mut c_void) {
    if let Some(done) = done {
        unsafe { done(context) };
    }
}

// --------------------------------------------------------- load balancer

/// The load balancer's configuration holds nothing: its module pointer
/// only has to be non-null.
static LB_CONFIG: u8 = 0;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_lb_config_new(_config: EnvoyPtr, name: EnvoyBuffer, _value: EnvoyBuffer) -> ModulePtr {
    guard(std::ptr::null(), || {
        let name = unsafe { bytes(name) };
        if name == NATIVE_LB_NAME.as_bytes() {
            &LB_CONFIG as *const u8 as ModulePtr
        } else {
            abi::log(abi::LOG_WARN, &format!("mvp load balancer: configuration rejected: no policy {:?} (this module has {NATIVE_LB_NAME:?})", String::from_utf8_lossy(name)));
            std::ptr::null()
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_lb_config_destroy(_config: ModulePtr) {}

#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_lb_new(_config: ModulePtr, _lb: EnvoyPtr) -> ModulePtr {
    guard(std::ptr::null(), || Box::into_raw(Box::new(Lb::new())) as ModulePtr)
}

/// No host on a panic: the request gets Envoy's 503, never a host the
/// filter did not list.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_lb_choose_host(lb: EnvoyPtr, module: ModulePtr, context: EnvoyPtr, priority: *mut u32, index: *mut u32) -> bool {
    guard(false, || {
        let Some(balancer) = (unsafe { (module as *const Lb).as_ref() }) else { return false };
        match balancer.choose(lb, context).and_then(|i| u32::try_from(i).ok()) {
            Some(i) if !priority.is_null() && !index.is_null() => {
                unsafe {
                    *priority = 0;
                    *index = i;
                }
                true
            }
            _ => false,
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_lb_destroy(module: ModulePtr) {
    guard((), || {
        if !module.is_null() {
            drop(unsafe { Box::from_raw(module as *mut Lb) });
        }
    })
}

/// Hosts are looked up by address on every choice: nothing to update.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_lb_on_host_membership_update(_lb: EnvoyPtr, _module: ModulePtr, _added: usize, _removed: usize) {}
