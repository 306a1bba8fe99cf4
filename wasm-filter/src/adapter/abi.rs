//! Raw proxy-wasm ABI v0.2.1 imports with every status mapped, as the
//! [`Host`] the logic runs on. An unexpected status is an error the caller
//! handles, never a panic: a panic would break the worker's VM for every
//! later request (the SDK's wrappers `panic!` on statuses they do not expect;
//! one reason this module does without it).

#![allow(clashing_extern_declarations)]

use std::ptr::{null, null_mut};

use mvp_filter_core::host::{Counter, Gauge, Host, HostError, LogLevel};

const OK: u32 = 0;
const NOT_FOUND: u32 = 1;

const REQUEST_HEADERS: u32 = 0;
const CALL_RESPONSE_HEADERS: u32 = 6;
const CALL_RESPONSE_TRAILERS: u32 = 7;
const CALL_RESPONSE_BODY: u32 = 4;
const PLUGIN_CONFIGURATION: u32 = 7;

/// `WasmStreamType::Request`.
const STREAM_REQUEST: u32 = 0;

const METRIC_COUNTER: u32 = 0;
const METRIC_GAUGE: u32 = 1;

/// `connection.subject_peer_certificate`, a property path (parts joined by NUL).
const PEER_SUBJECT: &[u8] = b"connection\0subject_peer_certificate";

/// `source.address`: the downstream remote address, `IP:port`.
const SOURCE_ADDRESS: &[u8] = b"source\0address";

#[link(wasm_import_module = "env")]
unsafe extern "C" {
    fn proxy_get_header_map_value(map_type: u32, key_data: *const u8, key_size: usize, return_value_data: *mut *mut u8, return_value_size: *mut usize) -> u32;
    fn proxy_replace_header_map_value(map_type: u32, key_data: *const u8, key_size: usize, value_data: *const u8, value_size: usize) -> u32;
    fn proxy_add_header_map_value(map_type: u32, key_data: *const u8, key_size: usize, value_data: *const u8, value_size: usize) -> u32;
    fn proxy_get_shared_data(key_data: *const u8, key_size: usize, return_value_data: *mut *mut u8, return_value_size: *mut usize, return_cas: *mut u32) -> u32;
    fn proxy_set_shared_data(key_data: *const u8, key_size: usize, value_data: *const u8, value_size: usize, cas: u32) -> u32;
    fn proxy_get_buffer_bytes(buffer_type: u32, start: usize, max_size: usize, return_buffer_data: *mut *mut u8, return_buffer_size: *mut usize) -> u32;
    fn proxy_get_property(path_data: *const u8, path_size: usize, return_value_data: *mut *mut u8, return_value_size: *mut usize) -> u32;
    fn proxy_set_property(path_data: *const u8, path_size: usize, value_data: *const u8, value_size: usize) -> u32;
    fn proxy_log(level: u32, message_data: *const u8, message_size: usize) -> u32;
    fn proxy_set_tick_period_milliseconds(period: u32) -> u32;
    fn proxy_define_metric(metric_type: u32, name_data: *const u8, name_size: usize, return_id: *mut u32) -> u32;
    fn proxy_increment_metric(metric_id: u32, offset: i64) -> u32;
    fn proxy_record_metric(metric_id: u32, value: u64) -> u32;
    fn proxy_get_metric(metric_id: u32, return_value: *mut u64) -> u32;
    fn proxy_continue_stream(stream_type: u32) -> u32;
    fn proxy_set_effective_context(context_id: u32) -> u32;
    fn proxy_get_current_time_nanoseconds(return_time: *mut u64) -> u32;
    fn proxy_send_local_response(status_code: u32, details_data: *const u8, details_size: usize, body_data: *const u8, body_size: usize, headers_data: *const u8, headers_size: usize, grpc_status: i32) -> u32;
    fn proxy_http_call(upstream_data: *const u8, upstream_size: usize, headers_data: *const u8, headers_size: usize, body_data: *const u8, body_size: usize, trailers_data: *const u8, trailers_size: usize, timeout_ms: u32, return_token: *mut u32) -> u32;
}

/// The host allocated `data` through this module's
/// `proxy_on_memory_allocate` (`exports.rs`: a `Vec<u8>` of capacity
/// `size`), so ownership passes back to a Vec.
unsafe fn take(data: *mut u8, size: usize) -> Vec<u8> {
    if data.is_null() { Vec::new() } else { unsafe { Vec::from_raw_parts(data, size, size) } }
}

/// A value the host returns in memory it allocated: OK → Some, NotFound → None.
fn returned(call: impl FnOnce(*mut *mut u8, *mut usize) -> u32) -> Result<Option<Vec<u8>>, HostError> {
    let mut data = null_mut();
    let mut size = 0;
    match call(&mut data, &mut size) {
        OK => Ok(Some(unsafe { take(data, size) })),
        NOT_FOUND => Ok(None),
        s => Err(HostError(s)),
    }
}

fn status(s: u32) -> Result<(), HostError> {
    if s == OK { Ok(()) } else { Err(HostError(s)) }
}

fn map_value(map: u32, name: &str) -> Result<Option<Vec<u8>>, HostError> {
    returned(|d, s| unsafe { proxy_get_header_map_value(map, name.as_ptr(), name.len(), d, s) })
}

fn buffer(kind: u32, max: usize) -> Result<Option<Vec<u8>>, HostError> {
    returned(|d, s| unsafe { proxy_get_buffer_bytes(kind, 0, max, d, s) })
}

pub fn plugin_configuration() -> Result<Option<Vec<u8>>, HostError> {
    buffer(PLUGIN_CONFIGURATION, usize::MAX)
}

pub fn set_tick_period_ms(ms: u32) -> Result<(), HostError> {
    status(unsafe { proxy_set_tick_period_milliseconds(ms) })
}

/// An HTTP call to `cluster`; the host makes it on the calling context's
/// root, whose `proxy_on_http_call_response` gets the answer. A cluster the bootstrap does not
/// define is an error status here, not a panic.
pub fn http_call(cluster: &str, headers: &[(&str, &str)], body: &[u8], timeout: std::time::Duration) -> Result<u32, HostError> {
    let headers = crate::header_map::serialize(headers);
    let trailers = crate::header_map::serialize(&[]);
    let timeout_ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
    let mut token = 0;
    status(unsafe {
        proxy_http_call(cluster.as_ptr(), cluster.len(), headers.as_ptr(), headers.len(), body.as_ptr(), body.len(), trailers.as_ptr(), trailers.len(), timeout_ms, &mut token)
    })?;
    Ok(token)
}

/// Metric ids of this VM, defined once per root context.
#[derive(Clone, Copy, Default)]
pub struct AbiHost {
    counters: [Option<u32>; Counter::ALL.len()],
    gauges: [Option<u32>; Gauge::ALL.len()],
}

fn define_metric(kind: u32, name: &str) -> Option<u32> {
    let mut id = 0;
    (unsafe { proxy_define_metric(kind, name.as_ptr(), name.len(), &mut id) } == OK).then_some(id)
}

impl AbiHost {
    pub fn new() -> AbiHost {
        let mut h = AbiHost::default();
        for (slot, c) in h.counters.iter_mut().zip(Counter::ALL) {
            *slot = define_metric(METRIC_COUNTER, c.name());
        }
        for (slot, g) in h.gauges.iter_mut().zip(Gauge::ALL) {
            *slot = define_metric(METRIC_GAUGE, g.name());
        }
        h
    }

    /// A gauge the host would not define is NotFound.
    fn gauge_id(&self, gauge: Gauge) -> Result<u32, HostError> {
        self.gauges.iter().zip(Gauge::ALL).find(|(_, g)| *g == gauge).and_then(|(id, _)| *id).ok_or(HostError(NOT_FOUND))
    }
}

impl Host for AbiHost {
    fn request_header(&self, name: &str) -> Result<Option<Vec<u8>>, HostError> {
        map_value(REQUEST_HEADERS, name)
    }

    fn set_request_header(&self, name: &str, value: &str) -> Result<(), HostError> {
        status(unsafe { proxy_replace_header_map_value(REQUEST_HEADERS, name.as_ptr(), name.len(), value.as_ptr(), value.len()) })
    }

    fn add_request_header(&self, name: &str, value: &str) -> Result<(), HostError> {
        status(unsafe { proxy_add_header_map_value(REQUEST_HEADERS, name.as_ptr(), name.len(), value.as_ptr(), value.len()) })
    }

    fn set_property(&self, name: &str, value: &[u8]) -> Result<(), HostError> {
        // A one-segment property path is the name itself (segments are
        // NUL-separated).
        status(unsafe { proxy_set_property(name.as_ptr(), name.len(), value.as_ptr(), value.len()) })
    }

    fn send_local_reply(&self, status_code: u32, details: &str) -> Result<(), HostError> {
        let none: &[u8] = &[];
        // No body, no headers: the local reply mapper writes the Status.
        status(unsafe { proxy_send_local_response(status_code, details.as_ptr(), details.len(), none.as_ptr(), 0, none.as_ptr(), 0, -1) })
    }

    fn client_address(&self) -> Result<Option<Vec<u8>>, HostError> {
        returned(|d, s| unsafe { proxy_get_property(SOURCE_ADDRESS.as_ptr(), SOURCE_ADDRESS.len(), d, s) })
    }

    fn peer_certificate_subject(&self) -> Result<Option<Vec<u8>>, HostError> {
        returned(|d, s| unsafe { proxy_get_property(PEER_SUBJECT.as_ptr(), PEER_SUBJECT.len(), d, s) })
    }

    fn shared_data(&self, key: &str) -> Result<Option<Vec<u8>>, HostError> {
        let mut cas = 0;
        returned(|d, s| unsafe { proxy_get_shared_data(key.as_ptr(), key.len(), d, s, &mut cas) })
    }

    fn set_shared_data(&self, key: &str, value: &[u8]) -> Result<(), HostError> {
        let ptr = if value.is_empty() { null() } else { value.as_ptr() };
        status(unsafe { proxy_set_shared_data(key.as_ptr(), key.len(), ptr, value.len(), 0) })
    }

    fn http_call(&self, cluster: &str, headers: &[(&str, &str)], body: &[u8], timeout: std::time::Duration) -> Result<u32, HostError> {
        http_call(cluster, headers, body, timeout)
    }

    fn set_effective_context(&self, context: u32) -> Result<(), HostError> {
        status(unsafe { proxy_set_effective_context(context) })
    }

    fn continue_request(&self) -> Result<(), HostError> {
        status(unsafe { proxy_continue_stream(STREAM_REQUEST) })
    }

    fn now_ms(&self) -> u64 {
        let mut ns = 0;
        // A failed read is time 0: a hold then lasts until a whole wait
        // passes with no newer table.
        let _ = unsafe { proxy_get_current_time_nanoseconds(&mut ns) };
        ns / 1_000_000
    }

    fn call_response_header(&self, name: &str) -> Option<Vec<u8>> {
        map_value(CALL_RESPONSE_HEADERS, name).ok().flatten()
    }

    fn call_response_trailer(&self, name: &str) -> Option<Vec<u8>> {
        map_value(CALL_RESPONSE_TRAILERS, name).ok().flatten()
    }

    fn call_response_body(&self, max: usize) -> Vec<u8> {
        buffer(CALL_RESPONSE_BODY, max).ok().flatten().unwrap_or_default()
    }

    fn count(&self, counter: Counter, n: i64) {
        let id = self.counters.iter().zip(Counter::ALL).find(|(_, c)| *c == counter).and_then(|(id, _)| *id);
        if let Some(id) = id {
            let _ = unsafe { proxy_increment_metric(id, n) };
        }
    }

    fn set_gauge(&self, gauge: Gauge, value: u64) -> Result<(), HostError> {
        let id = self.gauge_id(gauge)?;
        status(unsafe { proxy_record_metric(id, value) })
    }

    fn gauge(&self, gauge: Gauge) -> Result<u64, HostError> {
        let id = self.gauge_id(gauge)?;
        let mut value = 0;
        status(unsafe { proxy_get_metric(id, &mut value) })?;
        Ok(value)
    }

    fn log(&self, level: LogLevel, msg: &str) {
        let level = match level {
            LogLevel::Info => 2,
            LogLevel::Warn => 3,
        };
        // Nothing sensible to do if logging itself fails.
        let _ = unsafe { proxy_log(level, msg.as_ptr(), msg.len()) };
    }

    fn vm_memory_bytes(&self) -> u64 {
        (core::arch::wasm32::memory_size(0) as u64) * 65536
    }
}
