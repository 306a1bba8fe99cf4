//! The part of Envoy's dynamic-module ABI this module uses, declared by
//! hand from `source/extensions/dynamic_modules/abi/abi.h` (no SDK: it is
//! not in the crate registry, and its bindgen build needs Envoy's tree).
//! Envoy 1.40 speaks ABI `v0.2.0`; Envoy only compares the string a module
//! returns from `envoy_dynamic_module_on_program_init` (a mismatch is a
//! warning), so what keeps these declarations right is that every
//! end-to-end suite runs with this `.so` loaded into the project's Envoy
//! (`MVP_FILTER=native` in `scripts/test.sh`). Every callback used is resolved
//! by the dynamic linker when Envoy `dlopen`s the module: a name Envoy does
//! not export fails the load with the name in the error, not a crash later.

use std::ffi::c_void;

/// The ABI version this module was written against (Envoy 1.40.x).
pub const ABI_VERSION: &[u8] = b"v0.2.0\0";

/// A buffer Envoy owns, valid during the hook that hands it over.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EnvoyBuffer {
    pub ptr: *const u8,
    pub length: usize,
}

impl EnvoyBuffer {
    pub const EMPTY: EnvoyBuffer = EnvoyBuffer { ptr: std::ptr::null(), length: 0 };

    /// # Safety
    /// `ptr` must point at `length` readable bytes for the returned lifetime.
    pub unsafe fn bytes<'a>(self) -> Option<&'a [u8]> {
        if self.ptr.is_null() {
            return None;
        }
        Some(unsafe { std::slice::from_raw_parts(self.ptr, self.length) })
    }
}

/// A buffer the module owns, read by Envoy during the call.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ModuleBuffer {
    pub ptr: *const u8,
    pub length: usize,
}

impl ModuleBuffer {
    pub fn of(b: &[u8]) -> ModuleBuffer {
        ModuleBuffer { ptr: b.as_ptr(), length: b.len() }
    }
}

#[repr(C)]
pub struct ModuleHttpHeader {
    pub key_ptr: *const u8,
    pub key_length: usize,
    pub value_ptr: *const u8,
    pub value_length: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct EnvoyHttpHeader {
    pub key_ptr: *const u8,
    pub key_length: usize,
    pub value_ptr: *const u8,
    pub value_length: usize,
}

pub type EnvoyPtr = *mut c_void;
pub type ModulePtr = *const c_void;

/// `envoy_dynamic_module_type_http_header_type_RequestHeader`.
pub const REQUEST_HEADER: u32 = 0;
/// `envoy_dynamic_module_type_attribute_id_SourceAddress`.
pub const ATTRIBUTE_SOURCE_ADDRESS: u32 = 24;
/// `envoy_dynamic_module_type_attribute_id_ConnectionSubjectPeerCertificate`.
pub const ATTRIBUTE_SUBJECT_PEER_CERTIFICATE: u32 = 33;
/// `envoy_dynamic_module_type_metrics_result_Success`.
pub const METRICS_SUCCESS: u32 = 0;
/// `envoy_dynamic_module_type_http_callout_init_result_Success`.
pub const CALLOUT_INIT_SUCCESS: u32 = 0;
/// `envoy_dynamic_module_type_http_callout_result_Success`.
pub const CALLOUT_SUCCESS: u32 = 0;
/// `..._on_http_filter_request_headers_status_Continue`.
pub const HEADERS_CONTINUE: u32 = 0;
/// `..._on_http_filter_request_headers_status_StopIteration`: a request the
/// filter answered itself.
pub const HEADERS_STOP_ITERATION: u32 = 1;
/// `..._on_http_filter_request_headers_status_StopAllIterationAndWatermark`:
/// a held request, its body held too (what proxy-wasm's pause becomes).
pub const HEADERS_STOP_ALL_WATERMARK: u32 = 4;

/// `envoy_dynamic_module_type_log_level`.
pub const LOG_INFO: u32 = 2;
pub const LOG_WARN: u32 = 3;

unsafe extern "C" {
    pub fn envoy_dynamic_module_callback_log(level: u32, message: ModuleBuffer);

    // The HTTP filter: one stream.
    pub fn envoy_dynamic_module_callback_http_get_header(filter: EnvoyPtr, header_type: u32, key: ModuleBuffer, result: *mut EnvoyBuffer, index: usize, optional_size: *mut usize) -> bool;
    pub fn envoy_dynamic_module_callback_http_set_header(filter: EnvoyPtr, header_type: u32, key: ModuleBuffer, value: ModuleBuffer) -> bool;
    pub fn envoy_dynamic_module_callback_http_add_header(filter: EnvoyPtr, header_type: u32, key: ModuleBuffer, value: ModuleBuffer) -> bool;
    pub fn envoy_dynamic_module_callback_http_clear_route_cache(filter: EnvoyPtr);
    // Envoy's local reply (the mapper applies). Earlier ABIs took the body
    // as (ptr, length) and no details: the same registers for the body.
    pub fn envoy_dynamic_module_callback_http_send_response(
        filter: EnvoyPtr,
        status_code: u32,
        headers: *const ModuleHttpHeader,
        headers_count: usize,
        body: ModuleBuffer,
        details: ModuleBuffer,
    );
    // The router's first attempt goes to this host when it is a member
    // (Envoy accepts only an IP address and port); retries ask the load
    // balancer, which sees it no more.
    pub fn envoy_dynamic_module_callback_http_set_upstream_override_host(filter: EnvoyPtr, host: ModuleBuffer, strict: bool) -> bool;
    // The route's cluster's host counts at a priority (its thread-local
    // copy: what this worker's balancer sees).
    pub fn envoy_dynamic_module_callback_http_get_cluster_host_count(filter: EnvoyPtr, priority: u32, total: *mut usize, healthy: *mut usize, degraded: *mut usize) -> bool;
    pub fn envoy_dynamic_module_callback_http_set_filter_state_bytes(filter: EnvoyPtr, key: ModuleBuffer, value: ModuleBuffer) -> bool;
    // Returns nothing in 1.40's abi.h (a string value under a namespace).
    pub fn envoy_dynamic_module_callback_http_set_dynamic_metadata_string(filter: EnvoyPtr, namespace: ModuleBuffer, key: ModuleBuffer, value: ModuleBuffer);
    pub fn envoy_dynamic_module_callback_http_filter_get_attribute_string(filter: EnvoyPtr, attribute: u32, result: *mut EnvoyBuffer) -> bool;
    pub fn envoy_dynamic_module_callback_http_filter_increment_counter(filter: EnvoyPtr, id: usize, labels: *mut ModuleBuffer, labels_length: usize, value: u64) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_continue_decoding(filter: EnvoyPtr);
    // Any thread may commit; the event runs on the stream's worker, or is
    // dropped when the stream is gone.
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_new(filter: EnvoyPtr) -> *mut c_void;
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_commit(scheduler: *mut c_void, event_id: u64);
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_delete(scheduler: *mut c_void);

    // The HTTP filter's configuration (main thread).
    pub fn envoy_dynamic_module_callback_http_filter_config_define_counter(config: EnvoyPtr, name: ModuleBuffer, label_names: *mut ModuleBuffer, label_names_length: usize, id: *mut usize) -> u32;

    // The load balancer (a worker's, for one cluster): it picks among the
    // cluster's healthy hosts, by index into them — but Envoy's
    // previous-hosts predicate takes an index into *all* hosts (`lb.rs`).
    pub fn envoy_dynamic_module_callback_lb_get_hosts_count(lb: EnvoyPtr, priority: u32) -> usize;
    pub fn envoy_dynamic_module_callback_lb_get_host_address(lb: EnvoyPtr, priority: u32, index: usize, result: *mut EnvoyBuffer) -> bool;
    pub fn envoy_dynamic_module_callback_lb_get_healthy_hosts_count(lb: EnvoyPtr, priority: u32) -> usize;
    pub fn envoy_dynamic_module_callback_lb_get_healthy_host_address(lb: EnvoyPtr, priority: u32, index: usize, result: *mut EnvoyBuffer) -> bool;
    pub fn envoy_dynamic_module_callback_lb_context_get_override_host(context: EnvoyPtr, result: *mut EnvoyBuffer, strict: *mut bool) -> bool;
    pub fn envoy_dynamic_module_callback_lb_context_get_downstream_header(context: EnvoyPtr, key: ModuleBuffer, result: *mut EnvoyBuffer, index: usize, optional_size: *mut usize) -> bool;
    pub fn envoy_dynamic_module_callback_lb_context_should_select_another_host(lb: EnvoyPtr, context: EnvoyPtr, priority: u32, index: usize) -> bool;
    pub fn envoy_dynamic_module_callback_lb_context_get_host_selection_retry_count(context: EnvoyPtr) -> u32;

    // The bootstrap extension (main thread): the refresher.
    pub fn envoy_dynamic_module_callback_bootstrap_extension_config_signal_init_complete(config: EnvoyPtr);
    pub fn envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_new(config: EnvoyPtr) -> *mut c_void;
    pub fn envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_commit(scheduler: *mut c_void, event_id: u64);
    pub fn envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_delete(scheduler: *mut c_void);
    pub fn envoy_dynamic_module_callback_bootstrap_extension_timer_new(config: EnvoyPtr) -> *mut c_void;
    pub fn envoy_dynamic_module_callback_bootstrap_extension_timer_enable(timer: *mut c_void, delay_ms: u64);
    pub fn envoy_dynamic_module_callback_bootstrap_extension_timer_delete(timer: *mut c_void);
    pub fn envoy_dynamic_module_callback_bootstrap_extension_http_callout(config: EnvoyPtr, callout_id: *mut u64, cluster: ModuleBuffer, headers: *mut ModuleHttpHeader, headers_size: usize, body: ModuleBuffer, timeout_ms: u64) -> u32;
    pub fn envoy_dynamic_module_callback_bootstrap_extension_config_define_counter(config: EnvoyPtr, name: ModuleBuffer, label_names: *mut ModuleBuffer, label_names_length: usize, id: *mut usize) -> u32;
    pub fn envoy_dynamic_module_callback_bootstrap_extension_config_increment_counter(config: EnvoyPtr, id: usize, labels: *mut ModuleBuffer, labels_length: usize, value: u64) -> u32;
    pub fn envoy_dynamic_module_callback_bootstrap_extension_config_define_gauge(config: EnvoyPtr, name: ModuleBuffer, label_names: *mut ModuleBuffer, label_names_length: usize, id: *mut usize) -> u32;
    pub fn envoy_dynamic_module_callback_bootstrap_extension_config_set_gauge(config: EnvoyPtr, id: usize, labels: *mut ModuleBuffer, labels_length: usize, value: u64) -> u32;
}

/// Logs under Envoy's `dynamic_modules` logger.
pub fn log(level: u32, msg: &str) {
    unsafe { envoy_dynamic_module_callback_log(level, ModuleBuffer::of(msg.as_bytes())) }
}

/// Module-owned headers for a callout; `owned` must outlive the call.
pub fn module_headers(headers: &[(&str, &str)]) -> Vec<ModuleHttpHeader> {
    headers
        .iter()
        .map(|(k, v)| ModuleHttpHeader { key_ptr: k.as_ptr(), key_length: k.len(), value_ptr: v.as_ptr(), value_length: v.len() })
        .collect()
}
