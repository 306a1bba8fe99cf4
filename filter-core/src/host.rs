//! The host calls the filter's logic makes, as a trait: the proxy-wasm
//! build implements it with proxy-wasm ABI calls (`wasm-filter/src/adapter/abi.rs`),
//! the native build with Envoy's dynamic-module callbacks
//! (`native-filter/src/host.rs`), the tests with a fake (`host_fake.rs`), so
//! the router and the refresher are tested natively, host-facing code
//! included.

/// A failed host call: the proxy-wasm status other than OK (and other than
/// NotFound where absence is an answer), or, in the native build, where it
/// failed (its ABI answers only "false": `native-filter/src/host.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostError(pub u32);

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "host call failed with status {}", self.0)
    }
}

/// The filter's counters. Envoy 1.40 shows them under `wasmcustom.`, e.g.
/// `wasmcustom.mvp.router.rerouted_requests`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    Rerouted,
    TableLoads,
    TableErrors,
    RefresherErrors,
    /// Requests held for a newer table (`hold.rs`), however they ended.
    Held,
    /// Held requests that still got the 503 Status.
    HeldThenUnavailable,
    /// Requests answered 503 at once that could have been held: the
    /// worker held its most already, or the call could not be made.
    HoldRefused,
    /// Requests answered 401: their client certificate names a user or
    /// group a header cannot carry exactly (`identity.rs`).
    IdentityRefused,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gauge {
    /// The table version the refresher published last: also how workers
    /// learn of it (`mvp_contract::shared_data`).
    TableVersion,
    /// A worker VM's linear memory after its last table load.
    VmMemoryBytes,
}

impl Counter {
    pub const ALL: [Counter; 8] = [
        Counter::Rerouted,
        Counter::TableLoads,
        Counter::TableErrors,
        Counter::RefresherErrors,
        Counter::Held,
        Counter::HeldThenUnavailable,
        Counter::HoldRefused,
        Counter::IdentityRefused,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Counter::Rerouted => "mvp.router.rerouted_requests",
            Counter::TableLoads => "mvp.router.table_loads",
            Counter::TableErrors => "mvp.router.table_errors",
            Counter::RefresherErrors => "mvp.refresher.errors",
            Counter::Held => "mvp.router.held_requests",
            Counter::HeldThenUnavailable => "mvp.router.held_then_unavailable",
            Counter::HoldRefused => "mvp.router.hold_refused",
            Counter::IdentityRefused => "mvp.router.identity_refused",
        }
    }
}

impl Gauge {
    pub const ALL: [Gauge; 2] = [Gauge::TableVersion, Gauge::VmMemoryBytes];

    pub fn name(self) -> &'static str {
        match self {
            Gauge::TableVersion => mvp_contract::shared_data::VERSION_GAUGE,
            Gauge::VmMemoryBytes => "mvp.router.vm_memory_bytes",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Info,
    Warn,
}

pub trait Host {
    fn request_header(&self, name: &str) -> Result<Option<Vec<u8>>, HostError>;
    /// The request's `:path`: borrowed where the host can lend its own
    /// bytes for the call (the native build: Envoy's header map), else a
    /// copy. Read once per request.
    fn request_path(&self) -> Result<Option<std::borrow::Cow<'_, [u8]>>, HostError> {
        Ok(self.request_header(":path")?.map(std::borrow::Cow::Owned))
    }
    /// Replaces every value of `name`.
    fn set_request_header(&self, name: &str, value: &str) -> Result<(), HostError>;
    fn add_request_header(&self, name: &str, value: &str) -> Result<(), HostError>;
    /// Pins the request to `hosts` (the route header's value: a list of
    /// apiservers, or one of the unavailable answers). The wasm build's
    /// way: one header write, which clears Envoy's route cache (ABI 0.2.1),
    /// so the route table, matching the header, adds
    /// x-kubernetes-peer-proxied and caps retries by the number listed. A
    /// host that can do that itself without matching the route again
    /// overrides it (the native build).
    ///
    /// `Ok(false)`: the host kept the answer back instead (the native build
    /// holding a request the table answers with the 503: it is routed, and
    /// counted, when it goes on).
    fn pin(&self, header: &str, hosts: &str) -> Result<bool, HostError> {
        self.set_request_header(header, hosts).map(|()| true)
    }
    /// Pins a request only closed apiservers still draining serve (the
    /// table's last resort): as [`Host::pin`], for a host whose balancer
    /// would not pick an unhealthy server (the native build's).
    fn pin_last_resort(&self, header: &str, hosts: &str) -> Result<bool, HostError> {
        self.pin(header, hosts)
    }
    /// Writes the 503 Status's route value for a request no hold can help
    /// (every apiserver that serves it is down, none coming back): as
    /// [`Host::pin`], for a host that would otherwise keep the answer back
    /// to hold the request (the native build's).
    fn pin_unavailable(&self, header: &str, hosts: &str) -> Result<bool, HostError> {
        self.set_request_header(header, hosts).map(|()| true)
    }
    /// Sets a request property (Envoy: filter state `wasm.<name>`, readable
    /// by the access log).
    fn set_property(&self, name: &str, value: &[u8]) -> Result<(), HostError>;
    /// Marks the request as one for a skewed API with its record
    /// (`mvp_contract::envoy::SKEW_PROPERTY`): the wasm build's way, a
    /// property; the native build writes dynamic metadata, which the skew
    /// access log's filter matches.
    fn mark_skew(&self, record: &[u8]) -> Result<(), HostError> {
        self.set_property(mvp_contract::envoy::SKEW_PROPERTY, record)
    }
    /// Adds `warning` (a `Warning` header's value) to the request's
    /// response: the wasm build's way, a property its pinned routes add
    /// (proxy-wasm's response callback would cost every request a VM
    /// crossing); the native build adds it in its response hook.
    fn warn_client(&self, warning: &[u8]) -> Result<(), HostError> {
        self.set_property(mvp_contract::envoy::WARNING_PROPERTY, warning)
    }
    /// Answers the current request with `status` and no body (Envoy's local
    /// reply, whose mapper writes kube's Status), `details` its response
    /// code details (no spaces). The request goes no further.
    fn send_local_reply(&self, status: u32, details: &str) -> Result<(), HostError>;
    /// The client's address as Envoy sees the connection (`IP:port`; the
    /// downstream remote address): asked only for a request about to be
    /// held, to cap what one client holds.
    fn client_address(&self) -> Result<Option<Vec<u8>>, HostError>;
    /// The verified client certificate's subject (RFC 2253), empty or absent
    /// without one (Envoy's `connection.subject_peer_certificate`).
    fn peer_certificate_subject(&self) -> Result<Option<Vec<u8>>, HostError>;

    fn shared_data(&self, key: &str) -> Result<Option<Vec<u8>>, HostError>;
    /// The published table, decoded once for every worker of the process,
    /// where the host shares memory between them (the native build);
    /// proxy-wasm VMs share only bytes, so each worker decodes its copy.
    fn decoded_table(&self) -> Option<std::sync::Arc<crate::table::RouteTable>> {
        None
    }
    fn set_shared_data(&self, key: &str, value: &[u8]) -> Result<(), HostError>;

    /// An HTTP call; its token. The host makes it on the root context,
    /// whose `on_http_call_response` gets the answer (or the failure).
    fn http_call(&self, cluster: &str, headers: &[(&str, &str)], body: &[u8], timeout: std::time::Duration) -> Result<u32, HostError>;
    /// Makes the request of `context` the one later host calls act on; an
    /// error when it is gone.
    fn set_effective_context(&self, context: u32) -> Result<(), HostError>;
    /// Lets the current request, paused in its request headers, go on.
    fn continue_request(&self) -> Result<(), HostError>;
    /// Wall-clock milliseconds (only differences are used).
    fn now_ms(&self) -> u64;

    /// The answer to the current context's last `http_call`, read in its
    /// `on_http_call_response`.
    fn call_response_header(&self, name: &str) -> Option<Vec<u8>>;
    fn call_response_trailer(&self, name: &str) -> Option<Vec<u8>>;
    fn call_response_body(&self, max: usize) -> Vec<u8>;

    fn count(&self, counter: Counter, n: i64);
    fn set_gauge(&self, gauge: Gauge, value: u64) -> Result<(), HostError>;
    /// The gauge's value, process-wide: whichever VM set it last.
    fn gauge(&self, gauge: Gauge) -> Result<u64, HostError>;
    fn log(&self, level: LogLevel, msg: &str);
    fn vm_memory_bytes(&self) -> u64;
}
