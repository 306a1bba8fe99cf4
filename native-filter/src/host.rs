//! The [`Host`] the router and the refresher run on, over the dynamic-module
//! ABI: for a request (its Envoy filter pointer) or for the refresher (its
//! bootstrap configuration and the answer to its call).

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use mvp_contract::shared_data::TABLE_KEY;
use mvp_filter_core::host::{Counter, Gauge, Host, HostError, LogLevel};
use mvp_filter_core::table::RouteTable;

use crate::abi::{self, EnvoyBuffer, EnvoyHttpHeader, EnvoyPtr, ModuleBuffer};
use crate::process;

/// Why a host call failed: what the ABI answered has no status, only
/// "false", so each failure is numbered by where it happened.
const SET_HEADER: u32 = 1;
const ADD_HEADER: u32 = 2;
const SET_STATE: u32 = 3;
pub(crate) const NOT_HERE: u32 = 4;
const CALLOUT: u32 = 5;
pub(crate) const OVERRIDE_HOST: u32 = 6;

/// Envoy's ids for the counters (`None`: the definition was refused).
pub type CounterIds = [Option<usize>; Counter::ALL.len()];

fn index(c: Counter) -> usize {
    Counter::ALL.iter().position(|x| *x == c).unwrap_or(0)
}

/// Where host calls go.
pub enum Target<'a> {
    /// A request on a worker; counters defined by its filter configuration;
    /// `log_listed`: the access log is on (it shows the listed apiservers).
    Request { filter: EnvoyPtr, counters: &'a CounterIds, log_listed: bool },
    /// The refresher: its bootstrap configuration, counters and version
    /// gauge, and the answer of its call while it is read.
    Refresher { config: EnvoyPtr, counters: &'a CounterIds, version_gauge: Option<usize>, answer: Option<Answer<'a>> },
}

/// A callout's answer, as Envoy hands it to `..._http_callout_done`: the
/// headers and the body, no trailers.
pub struct Answer<'a> {
    pub success: bool,
    pub headers: &'a [EnvoyHttpHeader],
    pub body: &'a [EnvoyBuffer],
}

pub struct NativeHost<'a> {
    pub(crate) target: Target<'a>,
    /// A header the route table matches was written (identity, an
    /// unavailable answer): the route must be matched again.
    rematch: Cell<bool>,
    /// The request may be held: an unavailable answer is kept back for the
    /// caller (`hold.rs`) instead of written.
    /// Cleared for a request no hold can help (`pin_unavailable`).
    pub(crate) holding: Cell<bool>,
    /// The route's answer was the 503 Status (which of the two).
    pub(crate) unavailable: Cell<Option<&'static str>>,
}

impl<'a> NativeHost<'a> {
    pub fn new(target: Target<'a>) -> NativeHost<'a> {
        NativeHost { target, rematch: Cell::new(false), holding: Cell::new(false), unavailable: Cell::new(None) }
    }

    pub fn set_holding(&mut self, holding: bool) {
        self.holding.set(holding);
    }

    pub fn holding(&self) -> bool {
        self.holding.get()
    }

    /// The unavailable answer the route gave, if it gave one.
    pub fn unavailable(&self) -> Option<&'static str> {
        self.unavailable.get()
    }

    /// Whether Envoy must match the request's route again.
    pub fn rematch(&self) -> bool {
        self.rematch.get()
    }

    /// A header the route table matches was written by an earlier pass (a
    /// held request's): the route must be matched again all the same.
    pub fn carry_rematch(&self) {
        self.rematch.set(true);
    }

    /// Matches the route again now if a header the route table matches was
    /// written, so what is asked of the route next (its cluster) is the
    /// route the request will take; nothing is left to match again after.
    pub(crate) fn rematch_now(&self) -> Result<(), HostError> {
        if self.rematch.replace(false) {
            let filter = self.request()?;
            unsafe { abi::envoy_dynamic_module_callback_http_clear_route_cache(filter) };
        }
        Ok(())
    }

    fn write_header(&self, name: &str, value: &str) -> Result<(), HostError> {
        let filter = self.request()?;
        let ok = unsafe { abi::envoy_dynamic_module_callback_http_set_header(filter, abi::REQUEST_HEADER, ModuleBuffer::of(name.as_bytes()), ModuleBuffer::of(value.as_bytes())) };
        ok.then_some(()).ok_or(HostError(SET_HEADER))
    }

    /// Adds a header no client request carries (Envoy's early header
    /// mutation strips each of these): no search for one to replace.
    pub(crate) fn append_header(&self, name: &str, value: &str) -> Result<(), HostError> {
        let filter = self.request()?;
        let ok = unsafe { abi::envoy_dynamic_module_callback_http_add_header(filter, abi::REQUEST_HEADER, ModuleBuffer::of(name.as_bytes()), ModuleBuffer::of(value.as_bytes())) };
        ok.then_some(()).ok_or(HostError(ADD_HEADER))
    }

    /// A string attribute of the request (absent: `None`).
    fn attribute(&self, id: u32) -> Result<Option<Vec<u8>>, HostError> {
        let filter = self.request()?;
        let mut out = EnvoyBuffer::EMPTY;
        let found = unsafe { abi::envoy_dynamic_module_callback_http_filter_get_attribute_string(filter, id, &mut out) };
        Ok(if found { unsafe { out.bytes() }.map(<[u8]>::to_vec) } else { None })
    }

    pub(crate) fn request(&self) -> Result<EnvoyPtr, HostError> {
        match self.target {
            Target::Request { filter, .. } => Ok(filter),
            Target::Refresher { .. } => Err(HostError(NOT_HERE)),
        }
    }

    fn answer_header(&self, name: &str) -> Option<Vec<u8>> {
        let Target::Refresher { answer: Some(a), .. } = &self.target else { return None };
        a.headers.iter().find_map(|h| {
            let key = unsafe { EnvoyBuffer { ptr: h.key_ptr, length: h.key_length }.bytes() }?;
            key.eq_ignore_ascii_case(name.as_bytes()).then(|| unsafe { EnvoyBuffer { ptr: h.value_ptr, length: h.value_length }.bytes() }.unwrap_or_default().to_vec())
        })
    }
}

impl Host for NativeHost<'_> {
    fn request_header(&self, name: &str) -> Result<Option<Vec<u8>>, HostError> {
        let filter = self.request()?;
        let mut out = EnvoyBuffer::EMPTY;
        let found = unsafe { abi::envoy_dynamic_module_callback_http_get_header(filter, abi::REQUEST_HEADER, ModuleBuffer::of(name.as_bytes()), &mut out, 0, std::ptr::null_mut()) };
        Ok(if found { unsafe { out.bytes() }.map(<[u8]>::to_vec) } else { None })
    }

    /// Envoy's own bytes, valid for the hook this host lives in: the filter
    /// writes other headers meanwhile, never `:path`, and a header map
    /// keeps an entry's value where it is when others are added.
    fn request_path(&self) -> Result<Option<std::borrow::Cow<'_, [u8]>>, HostError> {
        let filter = self.request()?;
        let mut out = EnvoyBuffer::EMPTY;
        let found = unsafe { abi::envoy_dynamic_module_callback_http_get_header(filter, abi::REQUEST_HEADER, ModuleBuffer::of(b":path"), &mut out, 0, std::ptr::null_mut()) };
        Ok(if found { unsafe { out.bytes() }.map(std::borrow::Cow::Borrowed) } else { None })
    }

    fn set_request_header(&self, name: &str, value: &str) -> Result<(), HostError> {
        self.rematch.set(true);
        self.write_header(name, value)
    }

    fn add_request_header(&self, name: &str, value: &str) -> Result<(), HostError> {
        let filter = self.request()?;
        let ok = unsafe { abi::envoy_dynamic_module_callback_http_add_header(filter, abi::REQUEST_HEADER, ModuleBuffer::of(name.as_bytes()), ModuleBuffer::of(value.as_bytes())) };
        self.rematch.set(true);
        ok.then_some(()).ok_or(HostError(ADD_HEADER))
    }

    /// The native build's pin (`pin.rs`).
    fn pin(&self, header: &str, hosts: &str) -> Result<bool, HostError> {
        self.pin_request(header, hosts)
    }

    /// The 503 Status now: every apiserver that serves it is down, so the
    /// request is not held (`filter.rs` parks only while `holding`).
    fn pin_unavailable(&self, header: &str, hosts: &str) -> Result<bool, HostError> {
        self.holding.set(false);
        self.pin_request(header, hosts)
    }

    /// The override host (`pin.rs`).
    fn pin_last_resort(&self, _header: &str, hosts: &str) -> Result<bool, HostError> {
        self.pin_to(hosts, true)
    }

    /// Filter state under the key proxy-wasm gives a property (`wasm.` and
    /// its name), so the access log reads either build the same way.
    fn set_property(&self, name: &str, value: &[u8]) -> Result<(), HostError> {
        let filter = self.request()?;
        let key = format!("wasm.{name}");
        let ok = unsafe { abi::envoy_dynamic_module_callback_http_set_filter_state_bytes(filter, ModuleBuffer::of(key.as_bytes()), ModuleBuffer::of(value)) };
        ok.then_some(()).ok_or(HostError(SET_STATE))
    }

    /// Dynamic metadata: what the skew access log's metadata filter
    /// matches (a filter-state object it cannot).
    fn mark_skew(&self, record: &[u8]) -> Result<(), HostError> {
        use mvp_contract::envoy::{SKEW_METADATA_KEY, SKEW_METADATA_NAMESPACE};
        let filter = self.request()?;
        // SAFETY: Envoy reads the three buffers during the call only.
        unsafe {
            abi::envoy_dynamic_module_callback_http_set_dynamic_metadata_string(
                filter,
                ModuleBuffer::of(SKEW_METADATA_NAMESPACE.as_bytes()),
                ModuleBuffer::of(SKEW_METADATA_KEY.as_bytes()),
                ModuleBuffer::of(record),
            );
        }
        Ok(())
    }

    /// Kept for the response hook (`warn.rs`).
    fn warn_client(&self, warning: &[u8]) -> Result<(), HostError> {
        let filter = self.request()?;
        crate::warn::keep(filter, warning).then_some(()).ok_or(HostError(SET_STATE))
    }

    fn send_local_reply(&self, status_code: u32, details: &str) -> Result<(), HostError> {
        let filter = self.request()?;
        // No body, no headers: the local reply mapper writes the Status.
        unsafe {
            abi::envoy_dynamic_module_callback_http_send_response(filter, status_code, std::ptr::null(), 0, ModuleBuffer::of(&[]), ModuleBuffer::of(details.as_bytes()));
        }
        Ok(())
    }

    fn client_address(&self) -> Result<Option<Vec<u8>>, HostError> {
        self.attribute(abi::ATTRIBUTE_SOURCE_ADDRESS)
    }

    fn peer_certificate_subject(&self) -> Result<Option<Vec<u8>>, HostError> {
        self.attribute(abi::ATTRIBUTE_SUBJECT_PEER_CERTIFICATE)
    }

    fn shared_data(&self, key: &str) -> Result<Option<Vec<u8>>, HostError> {
        Ok(process::get(key))
    }

    /// The refresher publishing the table also decodes it, once for every
    /// worker (before the version is announced: `shared_table::publish`).
    fn set_shared_data(&self, key: &str, value: &[u8]) -> Result<(), HostError> {
        if key == TABLE_KEY {
            process::set_decoded(RouteTable::decode(value).ok());
        }
        process::set(key, value);
        Ok(())
    }

    fn decoded_table(&self) -> Option<Arc<RouteTable>> {
        process::decoded()
    }

    /// The refresher's `GetTable` call (a bootstrap callout; its answer
    /// comes to `on_bootstrap_extension_http_callout_done`).
    fn http_call(&self, cluster: &str, headers: &[(&str, &str)], body: &[u8], timeout: Duration) -> Result<u32, HostError> {
        let Target::Refresher { config, .. } = self.target else { return Err(HostError(NOT_HERE)) };
        let mut headers = abi::module_headers(headers);
        let mut id = 0u64;
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let result = unsafe { abi::envoy_dynamic_module_callback_bootstrap_extension_http_callout(config, &mut id, ModuleBuffer::of(cluster.as_bytes()), headers.as_mut_ptr(), headers.len(), ModuleBuffer::of(body), timeout_ms) };
        if result != abi::CALLOUT_INIT_SUCCESS {
            return Err(HostError(CALLOUT * 100 + result));
        }
        Ok(u32::try_from(id).unwrap_or(u32::MAX))
    }

    fn set_effective_context(&self, _context: u32) -> Result<(), HostError> {
        Err(HostError(NOT_HERE))
    }

    fn continue_request(&self) -> Result<(), HostError> {
        let filter = self.request()?;
        unsafe { abi::envoy_dynamic_module_callback_http_filter_continue_decoding(filter) };
        Ok(())
    }

    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    fn call_response_header(&self, name: &str) -> Option<Vec<u8>> {
        self.answer_header(name)
    }

    /// Envoy hands a callout's answer over without its trailers. gRPC puts
    /// an error's `grpc-status` in the headers (trailers-only), which
    /// [`Host::call_response_header`] finds; a 200 whose headers carry none
    /// and whose body is a message is the OK reply (the message is still
    /// length-checked and decoded before use).
    fn call_response_trailer(&self, name: &str) -> Option<Vec<u8>> {
        let Target::Refresher { answer: Some(a), .. } = &self.target else { return None };
        let ok_reply = a.success && !a.body.is_empty() && self.answer_header("grpc-status").is_none();
        (name == "grpc-status" && ok_reply).then(|| b"0".to_vec())
    }

    fn call_response_body(&self, max: usize) -> Vec<u8> {
        let Target::Refresher { answer: Some(a), .. } = &self.target else { return Vec::new() };
        let mut out = Vec::new();
        for chunk in a.body {
            let bytes = unsafe { chunk.bytes() }.unwrap_or_default();
            let room = max.saturating_sub(out.len());
            out.extend_from_slice(bytes.get(..room.min(bytes.len())).unwrap_or_default());
        }
        out
    }

    fn count(&self, counter: Counter, n: i64) {
        let value = u64::try_from(n).unwrap_or(0);
        match &self.target {
            Target::Request { filter, counters, .. } => {
                if let Some(Some(id)) = counters.get(index(counter)) {
                    unsafe { abi::envoy_dynamic_module_callback_http_filter_increment_counter(*filter, *id, std::ptr::null_mut(), 0, value) };
                }
            }
            Target::Refresher { config, counters, .. } => {
                if let Some(Some(id)) = counters.get(index(counter)) {
                    unsafe { abi::envoy_dynamic_module_callback_bootstrap_extension_config_increment_counter(*config, *id, std::ptr::null_mut(), 0, value) };
                }
            }
        }
    }

    /// The table version is announced in process memory (and, by the
    /// refresher, in Envoy's gauge for operators); the memory gauge is the
    /// wasm VM's and has no meaning here.
    fn set_gauge(&self, gauge: Gauge, value: u64) -> Result<(), HostError> {
        if gauge != Gauge::TableVersion {
            return Ok(());
        }
        process::announce(value);
        if let Target::Refresher { config, version_gauge: Some(id), .. } = self.target {
            unsafe { abi::envoy_dynamic_module_callback_bootstrap_extension_config_set_gauge(config, id, std::ptr::null_mut(), 0, value) };
        }
        Ok(())
    }

    fn gauge(&self, gauge: Gauge) -> Result<u64, HostError> {
        match gauge {
            Gauge::TableVersion => Ok(process::version()),
            Gauge::VmMemoryBytes => Ok(0),
        }
    }

    fn log(&self, level: LogLevel, msg: &str) {
        abi::log(
            match level {
                LogLevel::Info => abi::LOG_INFO,
                LogLevel::Warn => abi::LOG_WARN,
            },
            msg,
        )
    }

    fn vm_memory_bytes(&self) -> u64 {
        0
    }
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;
    use mvp_filter_core::get_table::{self, Answer as TableAnswer, GetTableError};

    fn header(k: &'static str, v: &'static str) -> EnvoyHttpHeader {
        EnvoyHttpHeader { key_ptr: k.as_ptr(), key_length: k.len(), value_ptr: v.as_ptr(), value_length: v.len() }
    }

    /// The refresher reading a `GetTable` answer as Envoy's bootstrap
    /// callout hands it over: headers and body, never trailers.
    fn read(headers: &[EnvoyHttpHeader], body: &[u8]) -> Result<TableAnswer, GetTableError> {
        let counters: CounterIds = [None; Counter::ALL.len()];
        let chunks = [EnvoyBuffer { ptr: body.as_ptr(), length: body.len() }];
        let body = if body.is_empty() { &[][..] } else { &chunks[..] };
        let answer = Answer { success: true, headers, body };
        let host = NativeHost::new(Target::Refresher { config: std::ptr::null_mut(), counters: &counters, version_gauge: None, answer: Some(answer) });
        get_table::read_answer(&host)
    }

    /// An error is an error whether it came in the headers (trailers-only)
    /// or in trailers Envoy dropped (no message then); a message with no
    /// status in the headers is the OK reply.
    #[test]
    fn get_table_errors_are_errors_without_trailers() {
        let grpc = [header(":status", "200"), header("content-type", "application/grpc")];
        let trailers_only = [header(":status", "200"), header("content-type", "application/grpc"), header("grpc-status", "14"), header("grpc-message", "no table yet")];
        match read(&trailers_only, b"") {
            Err(GetTableError::GrpcStatus(s, m)) => assert_eq!((s.as_str(), m.as_str()), ("14", "no table yet")),
            other => panic!("trailers-only error: {other:?}"),
        }
        assert!(matches!(read(&grpc, b""), Err(GetTableError::GrpcStatus(..))), "the error was in the trailers: no message");
        let current = [0u8, 0, 0, 0, 2, 0x10, 1]; // GetTableResponse { waited: true }
        assert!(matches!(read(&grpc, &current), Ok(TableAnswer::Current { waited: true })));
        assert!(matches!(read(&[header(":status", "503")], b""), Err(GetTableError::HttpStatus(_))));
    }
}
