//! The routing floor the benchmark reads the filter's cost against: what any
//! proxy-wasm filter that routes by a header pays per request, with nothing of
//! our own. One callback (`proxy_on_request_headers`), one read of `:path` (a
//! host call, plus the host's allocation callback for the value: the only way
//! proxy-wasm hands a value to a module), one header write (which clears the
//! route cache, so Envoy matches the route again and pins the upstream) —
//! no classification, no table: the value is fixed, from the plugin
//! configuration `<header name>\n<header value>`. What our filter costs
//! beyond this module is its own work. Not part of the product; built for
//! wasm32 only (empty elsewhere). Nothing here may panic: a trap would break
//! the worker's VM mid-measurement.

#![cfg(target_arch = "wasm32")]

use std::cell::RefCell;
use std::ptr::null_mut;

const OK: u32 = 0;
const REQUEST_HEADERS: u32 = 0;
const PLUGIN_CONFIGURATION: u32 = 7;

#[link(wasm_import_module = "env")]
unsafe extern "C" {
    fn proxy_get_header_map_value(map_type: u32, key_data: *const u8, key_size: usize, return_value_data: *mut *mut u8, return_value_size: *mut usize) -> u32;
    fn proxy_replace_header_map_value(map_type: u32, key_data: *const u8, key_size: usize, value_data: *const u8, value_size: usize) -> u32;
    fn proxy_get_buffer_bytes(buffer_type: u32, start: usize, max_size: usize, return_buffer_data: *mut *mut u8, return_buffer_size: *mut usize) -> u32;
}

unsafe extern "C" {
    fn __wasm_call_ctors();
}

thread_local! {
    /// The configured header name and value.
    static ROUTE: RefCell<Option<(Vec<u8>, Vec<u8>)>> = const { RefCell::new(None) };
}

/// A value the host allocated through `proxy_on_memory_allocate`.
unsafe fn take(data: *mut u8, size: usize) -> Vec<u8> {
    if data.is_null() { Vec::new() } else { unsafe { Vec::from_raw_parts(data, size, size) } }
}

#[unsafe(no_mangle)]
pub extern "C" fn _initialize() {
    unsafe { __wasm_call_ctors() }
}

#[unsafe(no_mangle)]
pub extern "C" fn proxy_abi_version_0_2_1() {}

#[unsafe(no_mangle)]
pub extern "C" fn proxy_on_memory_allocate(size: usize) -> *mut u8 {
    let mut v = Vec::<u8>::new();
    if v.try_reserve_exact(size).is_err() {
        return null_mut();
    }
    std::mem::ManuallyDrop::new(v).as_mut_ptr()
}

#[unsafe(no_mangle)]
pub extern "C" fn proxy_on_vm_start(_root: u32, _size: u32) -> u32 {
    1
}

#[unsafe(no_mangle)]
pub extern "C" fn proxy_on_configure(_root: u32, size: u32) -> u32 {
    let (mut data, mut len) = (null_mut(), 0);
    if unsafe { proxy_get_buffer_bytes(PLUGIN_CONFIGURATION, 0, size as usize, &mut data, &mut len) } != OK {
        return 0;
    }
    let config = unsafe { take(data, len) };
    let Some(at) = config.iter().position(|b| *b == b'\n') else { return 0 };
    let (name, value) = config.split_at(at);
    let route = (name.to_vec(), value.get(1..).unwrap_or_default().to_vec());
    ROUTE.with(|r| *r.borrow_mut() = Some(route));
    1
}

/// Returns Action::Continue (0).
#[unsafe(no_mangle)]
pub extern "C" fn proxy_on_request_headers(_context: u32, _headers: u32, _end_of_stream: u32) -> u32 {
    let (mut data, mut len) = (null_mut(), 0);
    let path = b":path";
    if unsafe { proxy_get_header_map_value(REQUEST_HEADERS, path.as_ptr(), path.len(), &mut data, &mut len) } == OK {
        // Read, as a routing filter must, and dropped.
        drop(unsafe { take(data, len) });
    }
    ROUTE.with(|r| {
        if let Ok(r) = r.try_borrow()
            && let Some((name, value)) = r.as_ref()
        {
            unsafe { proxy_replace_header_map_value(REQUEST_HEADERS, name.as_ptr(), name.len(), value.as_ptr(), value.len()) };
        }
    });
    0
}
