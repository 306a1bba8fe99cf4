//! The callbacks this module exports, and so the only ones Envoy makes: the
//! host skips any callback a module does not export (proxy-wasm-cpp-host
//! looks each export up once at load). Per request that is one callback,
//! `proxy_on_request_headers`, plus one `proxy_on_memory_allocate` per value
//! the host hands back (and, for a request held for a newer table, its
//! call's `proxy_on_http_call_response`). Context creation, the response phases, logging and
//! deletion are not exported: the filter keeps no per-request state.
//! Nothing here may panic: a trap breaks the worker's VM.

use super::with_vm;
use mvp_filter_core::router::Action;

unsafe extern "C" {
    /// wasi-libc's static constructors (a reactor module runs them in
    /// `_initialize`).
    fn __wasm_call_ctors();
}

/// Envoy calls this once after instantiating the module.
#[unsafe(no_mangle)]
pub extern "C" fn _initialize() {
    unsafe { __wasm_call_ctors() }
}

/// Declares the ABI version the host speaks to this module with.
#[unsafe(no_mangle)]
pub extern "C" fn proxy_abi_version_0_2_1() {}

/// The host's allocation in this module's memory for a value it returns;
/// `abi.rs` takes ownership of it as a `Vec<u8>` of this capacity. Out of
/// memory is a null pointer, which the host turns into a failed host call
/// (an error the caller handles), not a trap.
#[unsafe(no_mangle)]
pub extern "C" fn proxy_on_memory_allocate(size: usize) -> *mut u8 {
    let mut v = Vec::<u8>::new();
    if v.try_reserve_exact(size).is_err() {
        return std::ptr::null_mut();
    }
    std::mem::ManuallyDrop::new(v).as_mut_ptr()
}

#[unsafe(no_mangle)]
pub extern "C" fn proxy_on_vm_start(_root: u32, _vm_configuration_size: u32) -> u32 {
    1
}

#[unsafe(no_mangle)]
pub extern "C" fn proxy_on_configure(root: u32, _plugin_configuration_size: u32) -> u32 {
    u32::from(with_vm(false, |vm| vm.configure(root)))
}

#[unsafe(no_mangle)]
pub extern "C" fn proxy_on_tick(root: u32) {
    with_vm((), |vm| vm.tick(root))
}

#[unsafe(no_mangle)]
pub extern "C" fn proxy_on_http_call_response(root: u32, token: u32, _headers: u32, _body_size: u32, _trailers: u32) {
    with_vm((), |vm| vm.http_call_response(root, token))
}

/// Returns Action::Continue (0), or Action::Pause (1) for a request held
/// for a newer table (`hold.rs`; the host makes it StopAllIterationAndWatermark,
/// so its body waits too; its call's answer lets it go on) or answered by the
/// filter itself (its local reply is on its way).
#[unsafe(no_mangle)]
pub extern "C" fn proxy_on_request_headers(context: u32, _headers: u32, end_of_stream: u32) -> u32 {
    match with_vm(Action::Continue, |vm| vm.request_headers(context, end_of_stream != 0)) {
        Action::Continue => 0,
        Action::Pause | Action::Answered => 1,
    }
}
