//! proxy-wasm glue: moves headers and shared data between Envoy and the plain
//! modules. Kept thin on purpose; every decision lives in `route`, `table`
//! and `refresh`.
//!
//! Host calls on the request path go through `host`, which maps every status
//! to a `Result`: the SDK's own wrappers `panic!` on statuses they do not
//! expect, and a panic would break this worker's VM for every later request.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};

use crate::config::{IdentityConfig, PluginConfig, RefresherConfig, RouterConfig, TABLE_KEY, VERSION_KEY};
use crate::identity;
use crate::refresh;
use crate::route;
use crate::table::RouteTable;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root::default()) });
}}

mod host {
    //! Raw ABI v0.2.1 imports with every status mapped. Signatures match the
    //! SDK's declarations, returning the status as a plain u32 so an
    //! unexpected value from the host is an error, not undefined behaviour.
    #![allow(clashing_extern_declarations)]
    use std::ptr::{null, null_mut};

    const OK: u32 = 0;
    const NOT_FOUND: u32 = 1;
    pub const REQUEST_HEADERS: u32 = 0;
    pub const CALL_RESPONSE_HEADERS: u32 = 6;
    pub const CALL_RESPONSE_TRAILERS: u32 = 7;
    pub const CALL_RESPONSE_BODY: u32 = 4;
    pub const PLUGIN_CONFIGURATION: u32 = 7;

    #[link(wasm_import_module = "env")]
    unsafe extern "C" {
        fn proxy_get_header_map_value(
            map_type: u32,
            key_data: *const u8,
            key_size: usize,
            return_value_data: *mut *mut u8,
            return_value_size: *mut usize,
        ) -> u32;
        fn proxy_replace_header_map_value(
            map_type: u32,
            key_data: *const u8,
            key_size: usize,
            value_data: *const u8,
            value_size: usize,
        ) -> u32;
        fn proxy_get_shared_data(
            key_data: *const u8,
            key_size: usize,
            return_value_data: *mut *mut u8,
            return_value_size: *mut usize,
            return_cas: *mut u32,
        ) -> u32;
        fn proxy_set_shared_data(
            key_data: *const u8,
            key_size: usize,
            value_data: *const u8,
            value_size: usize,
            cas: u32,
        ) -> u32;
        fn proxy_get_buffer_bytes(
            buffer_type: u32,
            start: usize,
            max_size: usize,
            return_buffer_data: *mut *mut u8,
            return_buffer_size: *mut usize,
        ) -> u32;
        fn proxy_add_header_map_value(
            map_type: u32,
            key_data: *const u8,
            key_size: usize,
            value_data: *const u8,
            value_size: usize,
        ) -> u32;
        fn proxy_get_property(
            path_data: *const u8,
            path_size: usize,
            return_value_data: *mut *mut u8,
            return_value_size: *mut usize,
        ) -> u32;
        fn proxy_log(level: u32, message_data: *const u8, message_size: usize) -> u32;
        fn proxy_set_tick_period_milliseconds(period: u32) -> u32;
        fn proxy_define_metric(
            metric_type: u32,
            name_data: *const u8,
            name_size: usize,
            return_id: *mut u32,
        ) -> u32;
        fn proxy_increment_metric(metric_id: u32, offset: i64) -> u32;
        fn proxy_record_metric(metric_id: u32, value: u64) -> u32;
    }

    /// The host allocated `data` through this module's
    /// `proxy_on_memory_allocate` (the SDK's, backed by the global allocator),
    /// so ownership passes to a Vec.
    unsafe fn take(data: *mut u8, size: usize) -> Vec<u8> {
        if data.is_null() {
            Vec::new()
        } else {
            unsafe { Vec::from_raw_parts(data, size, size) }
        }
    }

    pub fn map_value(map: u32, name: &str) -> Result<Option<Vec<u8>>, u32> {
        let mut data = null_mut();
        let mut size = 0;
        match unsafe { proxy_get_header_map_value(map, name.as_ptr(), name.len(), &mut data, &mut size) } {
            OK => Ok(Some(unsafe { take(data, size) })),
            NOT_FOUND => Ok(None),
            s => Err(s),
        }
    }

    pub fn buffer(kind: u32, max: usize) -> Result<Option<Vec<u8>>, u32> {
        let mut data = null_mut();
        let mut size = 0;
        match unsafe { proxy_get_buffer_bytes(kind, 0, max, &mut data, &mut size) } {
            OK => Ok(Some(unsafe { take(data, size) })),
            NOT_FOUND => Ok(None),
            s => Err(s),
        }
    }

    pub fn set_request_header(name: &str, value: &str) -> Result<(), u32> {
        match unsafe {
            proxy_replace_header_map_value(
                REQUEST_HEADERS,
                name.as_ptr(),
                name.len(),
                value.as_ptr(),
                value.len(),
            )
        } {
            OK => Ok(()),
            s => Err(s),
        }
    }

    pub fn add_request_header(name: &str, value: &str) -> Result<(), u32> {
        match unsafe {
            proxy_add_header_map_value(REQUEST_HEADERS, name.as_ptr(), name.len(), value.as_ptr(), value.len())
        } {
            OK => Ok(()),
            s => Err(s),
        }
    }

    /// A property by its serialized path (parts joined by NUL bytes).
    pub fn property(path: &[u8]) -> Result<Option<Vec<u8>>, u32> {
        let mut data = null_mut();
        let mut size = 0;
        match unsafe { proxy_get_property(path.as_ptr(), path.len(), &mut data, &mut size) } {
            OK => Ok(Some(unsafe { take(data, size) })),
            NOT_FOUND => Ok(None),
            s => Err(s),
        }
    }

    pub fn shared_data(key: &str) -> Result<Option<Vec<u8>>, u32> {
        let mut data = null_mut();
        let mut size = 0;
        let mut cas = 0;
        match unsafe { proxy_get_shared_data(key.as_ptr(), key.len(), &mut data, &mut size, &mut cas) } {
            OK => Ok(Some(unsafe { take(data, size) })),
            NOT_FOUND => Ok(None),
            s => Err(s),
        }
    }

    pub fn set_shared_data(key: &str, value: &[u8]) -> Result<(), u32> {
        let ptr = if value.is_empty() { null() } else { value.as_ptr() };
        match unsafe { proxy_set_shared_data(key.as_ptr(), key.len(), ptr, value.len(), 0) } {
            OK => Ok(()),
            s => Err(s),
        }
    }

    pub fn log(level: u32, msg: &str) {
        // Nothing sensible to do if logging itself fails.
        let _ = unsafe { proxy_log(level, msg.as_ptr(), msg.len()) };
    }

    pub fn set_tick_period_ms(ms: u32) -> Result<(), u32> {
        match unsafe { proxy_set_tick_period_milliseconds(ms) } {
            OK => Ok(()),
            s => Err(s),
        }
    }

    pub const COUNTER: u32 = 0;
    pub const GAUGE: u32 = 1;

    pub fn define_metric(kind: u32, name: &str) -> Option<u32> {
        let mut id = 0;
        match unsafe { proxy_define_metric(kind, name.as_ptr(), name.len(), &mut id) } {
            OK => Some(id),
            _ => None,
        }
    }

    pub fn increment(id: Option<u32>) {
        add(id, 1);
    }

    pub fn add(id: Option<u32>, n: i64) {
        if let Some(id) = id {
            let _ = unsafe { proxy_increment_metric(id, n) };
        }
    }

    pub fn record(id: Option<u32>, value: u64) {
        if let Some(id) = id {
            let _ = unsafe { proxy_record_metric(id, value) };
        }
    }
}

const WARN: u32 = 3;
const INFO: u32 = 2;

fn warn(msg: &str) {
    host::log(WARN, msg);
}

/// Envoy 1.40's `/stats` shows these under `wasmcustom.`, e.g.
/// `wasmcustom.mvp.router.rerouted_requests`.
struct Metrics {
    rerouted: Option<u32>,
    table_loads: Option<u32>,
    table_errors: Option<u32>,
    published_version: Option<u32>,
    publish_errors: Option<u32>,
    memory_bytes: Option<u32>,
}

impl Metrics {
    fn define() -> Metrics {
        Metrics {
            rerouted: host::define_metric(host::COUNTER, "mvp.router.rerouted_requests"),
            table_loads: host::define_metric(host::COUNTER, "mvp.router.table_loads"),
            table_errors: host::define_metric(host::COUNTER, "mvp.router.table_errors"),
            published_version: host::define_metric(host::GAUGE, "mvp.refresher.table_version"),
            publish_errors: host::define_metric(host::COUNTER, "mvp.refresher.errors"),
            memory_bytes: host::define_metric(host::GAUGE, "mvp.router.vm_memory_bytes"),
        }
    }
}

/// State a worker's HTTP contexts share with its root context.
struct Router {
    config: RouterConfig,
    table: std::cell::RefCell<Rc<RouteTable>>,
    /// Spreads routed requests over the capable apiservers.
    counter: Cell<u32>,
    /// Rerouted requests not yet added to the metric: flushed once a second
    /// instead of a host call per request.
    unflushed: Cell<i64>,
    metrics: Metrics,
}

/// How often a worker flushes its rerouted-request count.
const FLUSH_MS: u32 = 1000;

impl Router {
    /// Re-reads the table when its 8-byte version key changed. This is the
    /// only per-request shared-data read; the table itself is copied and
    /// indexed once per change.
    fn refresh(&self) {
        let published = match host::shared_data(VERSION_KEY) {
            Ok(Some(v)) => refresh::decode_version(&v),
            Ok(None) => None,
            Err(s) => {
                warn(&format!("mvp router: reading {VERSION_KEY} failed with status {s}"));
                None
            }
        };
        let Some(published) = published else { return };
        if published == self.table.borrow().version() {
            return;
        }
        match host::shared_data(TABLE_KEY) {
            Ok(Some(bytes)) => match RouteTable::decode(&bytes) {
                Ok(t) => {
                    // Drop the old table before measuring: the new one is
                    // what this worker's VM now holds (linear memory never
                    // shrinks, so this is its high-water mark).
                    *self.table.borrow_mut() = Rc::new(t);
                    host::increment(self.metrics.table_loads);
                    host::record(self.metrics.memory_bytes, (core::arch::wasm32::memory_size(0) as u64) * 65536);
                }
                Err(e) => {
                    host::increment(self.metrics.table_errors);
                    warn(&format!("mvp router: keeping the previous table: {e}"));
                }
            },
            Ok(None) => {}
            Err(s) => warn(&format!("mvp router: reading {TABLE_KEY} failed with status {s}")),
        }
    }
}

#[derive(Default)]
struct Root {
    router: Option<Rc<Router>>,
    refresher: Option<Refresher>,
    noop: bool,
}

struct Refresher {
    config: RefresherConfig,
    known_version: u64,
    in_flight: bool,
    metrics: Metrics,
}

impl Context for Root {
    fn on_http_call_response(&mut self, _token: u32, _headers: usize, _body: usize, _trailers: usize) {
        let Some(r) = self.refresher.as_mut() else { return };
        r.in_flight = false;
        let header = |name| host::map_value(host::CALL_RESPONSE_HEADERS, name).ok().flatten();
        // A trailers-only gRPC reply carries grpc-status in the headers.
        let header_or_trailer = |name| {
            host::map_value(host::CALL_RESPONSE_TRAILERS, name)
                .ok()
                .flatten()
                .or_else(|| header(name))
        };
        let status = header(":status");
        let grpc_status = header_or_trailer("grpc-status");
        let grpc_message = header_or_trailer("grpc-message");
        let body = host::buffer(host::CALL_RESPONSE_BODY, refresh::MAX_TABLE_BYTES + 5)
            .ok()
            .flatten()
            .unwrap_or_default();
        match refresh::parse_response(status.as_deref(), grpc_status.as_deref(), grpc_message.as_deref(), &body) {
            Ok(None) => {}
            Ok(Some(t)) => {
                // Table first, version second: a worker that sees the new
                // version always finds a table at least that new.
                let published = host::set_shared_data(TABLE_KEY, &t.encoded)
                    .and_then(|_| host::set_shared_data(VERSION_KEY, &refresh::encode_version(t.version)));
                match published {
                    Ok(()) => {
                        r.known_version = t.version;
                        host::record(r.metrics.published_version, t.version);
                        host::log(INFO, &format!("mvp refresher: published routing table {:016x}", t.version));
                    }
                    Err(s) => {
                        host::increment(r.metrics.publish_errors);
                        warn(&format!("mvp refresher: writing shared data failed with status {s}"));
                    }
                }
            }
            Err(e) => {
                host::increment(r.metrics.publish_errors);
                warn(&format!("mvp refresher: {e}"));
            }
        }
    }
}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        let Ok(Some(raw)) = host::buffer(host::PLUGIN_CONFIGURATION, usize::MAX) else {
            warn("mvp: plugin configuration is missing");
            return false;
        };
        match PluginConfig::parse(&raw) {
            Ok(PluginConfig::Router(config)) => {
                let router = Router {
                    config,
                    table: Default::default(),
                    counter: Cell::new(0),
                    unflushed: Cell::new(0),
                    metrics: Metrics::define(),
                };
                router.refresh();
                self.router = Some(Rc::new(router));
                if let Err(s) = host::set_tick_period_ms(FLUSH_MS) {
                    warn(&format!("mvp router: cannot start its timer (status {s}); metrics will lag"));
                }
                true
            }
            Ok(PluginConfig::Noop(_)) => {
                self.noop = true;
                true
            }
            Ok(PluginConfig::Refresher(config)) => {
                if let Err(s) = host::set_tick_period_ms(config.poll_interval_ms) {
                    warn(&format!("mvp refresher: cannot start its timer (status {s})"));
                    return false;
                }
                self.refresher = Some(Refresher {
                    config,
                    known_version: 0,
                    in_flight: false,
                    metrics: Metrics::define(),
                });
                self.on_tick();
                true
            }
            Err(e) => {
                warn(&e);
                false
            }
        }
    }

    fn on_tick(&mut self) {
        if let Some(router) = &self.router {
            let n = router.unflushed.replace(0);
            if n > 0 {
                host::add(router.metrics.rerouted, n);
            }
        }
        let Some(r) = self.refresher.as_ref() else { return };
        if r.in_flight {
            return;
        }
        let headers = refresh::request_headers(&r.config.authority);
        let body = refresh::request_body(r.known_version);
        let timeout = Duration::from_millis(u64::from(r.config.timeout_ms));
        let sent = self.dispatch_http_call(&r.config.cluster, headers.to_vec(), Some(&body), vec![], timeout);
        let Some(r) = self.refresher.as_mut() else { return };
        match sent {
            Ok(_) => r.in_flight = true,
            Err(s) => {
                host::increment(r.metrics.publish_errors);
                warn(&format!(
                    "mvp refresher: cannot call cluster {:?} ({s:?}); is it defined in the bootstrap?",
                    r.config.cluster
                ));
            }
        }
    }

    /// Never `None`: the SDK panics on it. A root without a router (the
    /// benchmark's noop role, or a refresher configuration mistakenly used as
    /// an HTTP filter) lets every request pass untouched.
    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        match (&self.router, self.noop) {
            (Some(router), false) => Some(Box::new(Request { router: router.clone() })),
            _ => Some(Box::new(Noop)),
        }
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Request {
    router: Rc<Router>,
}

/// Does nothing: the benchmark floor (SDK dispatch only), and the safe
/// answer for a root that has no router.
struct Noop;

impl Context for Noop {}

impl HttpContext for Noop {}

impl Context for Request {}

/// `connection.subject_peer_certificate`: the verified client certificate's
/// subject (RFC 2253), empty without one.
const PEER_SUBJECT: &[u8] = b"connection\0subject_peer_certificate";

impl Request {
    /// Forwards a verified client certificate's identity. Envoy's early
    /// header mutation already removed any client-sent identity headers, so
    /// these are the only ones the apiserver sees; without a certificate the
    /// client's own credentials (e.g. a bearer token) speak for it.
    fn forward_identity(&self, names: &IdentityConfig) {
        let subject = match host::property(PEER_SUBJECT) {
            Ok(Some(s)) if !s.is_empty() => s,
            Ok(_) => return,
            Err(s) => {
                warn(&format!("mvp router: reading the client certificate subject failed with status {s}"));
                return;
            }
        };
        let Some(id) = identity::from_rfc2253(&subject) else { return };
        let mut result = host::set_request_header(&names.username_header, &id.user);
        for g in &id.groups {
            result = result.and_then(|_| host::add_request_header(&names.group_header, g));
        }
        if let Err(s) = result {
            warn(&format!("mvp router: setting identity headers failed with status {s}"));
        }
    }
}

impl HttpContext for Request {
    fn on_http_request_headers(&mut self, _headers: usize, _end_of_stream: bool) -> Action {
        let r = &self.router;
        if let Some(names) = &r.config.identity {
            self.forward_identity(names);
        }
        r.refresh();
        let path = match host::map_value(host::REQUEST_HEADERS, ":path") {
            Ok(Some(p)) => p,
            Ok(None) => return Action::Continue,
            Err(s) => {
                warn(&format!("mvp router: reading :path failed with status {s}"));
                return Action::Continue;
            }
        };
        let table = r.table.borrow().clone();
        let n = r.counter.get();
        let Some(hosts) = route::decide(&table, &path, n) else {
            return Action::Continue;
        };
        r.counter.set(n.wrapping_add(1));
        // One header: Envoy's route table adds x-kubernetes-peer-proxied and
        // caps retries by the number of hosts listed (ABI 0.2.1 clears the
        // route cache on this write, so the router matches again).
        match host::set_request_header(&r.config.route_header, hosts) {
            Ok(()) => r.unflushed.set(r.unflushed.get() + 1),
            Err(s) => warn(&format!("mvp router: setting the route header failed with status {s}")),
        }
        Action::Continue
    }
}
