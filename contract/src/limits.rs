//! Limits both halves enforce.

/// Apiservers in one table: a set of them is a `u64` bitmask.
pub const MAX_APISERVERS: usize = 64;

/// Most apiservers one override-host list names: a pinned request fails
/// over along at most this many capable members (Envoy's route table has one
/// route per list length, so the set of routes does not depend on how many
/// members the control plane has at any moment).
pub const MAX_LISTED_APISERVERS: usize = 8;

/// Retries of a request every apiserver may answer (served by all, or by
/// none): any other member will do. In the native build it is also the
/// retry count of a pinned request (no route per list length there), which
/// the filter corrects to (listed − 1) with [`crate::headers::MAX_RETRIES`]
/// when the list is not this long plus one.
pub const UNPINNED_RETRIES: usize = 3;

/// Largest encoded routing table a `GetTable` answer may carry (a
/// 5,000-resource table is ~85 KiB).
pub const MAX_TABLE_BYTES: usize = 16 << 20;

/// How long the refresher waits for one `GetTable` answer, beyond the time it
/// lets the server hold the call.
pub const GET_TABLE_TIMEOUT_MS: u32 = 2000;

/// Default interval of the refresher's `GetTable` polls: how often it asks
/// when the last call failed or the server cannot hold calls.
pub const DEFAULT_TABLE_POLL_MS: u32 = 200;

/// How long the refresher lets mvp-ext-proc hold a `GetTable` call when there
/// is no newer table (a long poll): a new table is answered the moment it is
/// published. Short enough that a call through a half-dead connection is
/// given up and retried within seconds of this; well inside Envoy's idle and
/// gRPC keepalive timeouts.
pub const DEFAULT_TABLE_WAIT_MS: u32 = 20_000;

/// The longest the filter holds a request only closed apiservers serve,
/// waiting for a table that opens one (`RouterConfig::hold`). mvp-ext-proc
/// reads a restarted apiserver within ~100 ms of its `/readyz` turning 200;
/// a second covers that under load, and is what client-go waits anyway on
/// the 503's `Retry-After: 1`.
pub const DEFAULT_HOLD_MS: u32 = 1000;

/// Requests one worker holds at once (`envoy-config --hold-max-per-worker`;
/// the worker's one `GetTable` call answers them all). Sized for a
/// reconnect storm: every node re-watching an API only a restarting
/// apiserver serves asks at once, each node a client of its own — 64 held
/// 128 of 300 nodes on two workers and refused the rest
/// (`scale_watches::a_storm_on_an_api_only_a_restarting_apiserver_serves_is_held_then_served`).
/// A held request costs what any request in flight does (its stream), for
/// at most `--hold-unavailable`; one client still holds at most
/// [`DEFAULT_MAX_HELD_PER_CLIENT`].
pub const DEFAULT_MAX_HELD: u32 = 1024;

/// Of those, the most one client holds: a client asking for an API only a
/// restarting apiserver serves — by accident or to fill the slots — leaves
/// the others room; its requests beyond it get the 503 Status at once, as
/// they would without holding. Who one client is: the certificate's user,
/// else the bearer token, else the source (an IPv4 address, an IPv6 /64 —
/// the client's own behind a load balancer that sends the PROXY protocol);
/// `mvp_filter_core::hold_claim`.
pub const DEFAULT_MAX_HELD_PER_CLIENT: u32 = 8;

/// What the requests one worker holds may buffer of their bodies in all
/// (`envoy-config --hold-max-body-bytes`): a held request's body waits in
/// Envoy, up to [`RETRY_BODY_BUFFER_BYTES`] each — 1024 held 4 MiB bodies
/// per worker would be 4 GiB. A request whose body does not fit gets the
/// 503 Status at once, as it would without holding; requests without a
/// body (reads, watches: a storm's) are never refused by it.
pub const DEFAULT_MAX_HELD_BODY_BYTES: u64 = 32 << 20;

/// `GetTable` calls mvp-ext-proc holds open at once (each Envoy holds its
/// refresher's, and the wasm build one per worker that holds requests: a
/// few thousand Envoys' worth). A call beyond it is answered at once, as a
/// call that allows no wait: whoever opens calls by the thousand pins no
/// memory or task, and a legitimate refresher only polls instead.
pub const MAX_HELD_TABLE_CALLS: usize = 8192;

/// ADS streams mvp-ext-proc serves at once (one per Envoy): beyond it a new
/// stream is refused `RESOURCE_EXHAUSTED` (Envoy retries with backoff), so
/// whoever opens streams by the thousand cannot make it hold a snapshot
/// copy and a task for each.
pub const MAX_ADS_STREAMS: usize = 4096;

/// Concurrent streams per gRPC connection to mvp-ext-proc (HTTP/2
/// `SETTINGS_MAX_CONCURRENT_STREAMS`): Envoy opens another connection when
/// one is full; one client connection cannot open streams without bound.
pub const MAX_GRPC_STREAMS_PER_CONNECTION: u32 = 1000;

/// The longest a server holds one `GetTable` call, whatever the caller asks.
pub const MAX_TABLE_WAIT_MS: u32 = 60_000;

/// How much of a request body Envoy keeps to resend it to another apiserver
/// when the first cannot be reached. kube-apiserver rejects bodies above
/// 3 MiB (`MaxRequestBodyBytes`) with 413, so every body it would accept can
/// fail over; a larger one that cannot be resent gets the 503 Status.
pub const RETRY_BODY_BUFFER_BYTES: u64 = 4 << 20;

/// An ext_proc answer carrying a body at least this large first asks Envoy
/// for more time ([`EXT_PROC_LARGE_BODY_TIMEOUT_MS`]): a CRD-heavy merged
/// `/apis` or a merged `/openapi/v2` is megabytes, and under load its
/// encoding and transfer can outlast the per-message timeout, which would
/// serve the client one apiserver's unmerged document.
pub const EXT_PROC_LARGE_BODY_BYTES: usize = 256 << 10;

/// The message timeout for such an answer (Envoy's `max_message_timeout`
/// caps it; the renderer sets both from here).
pub const EXT_PROC_LARGE_BODY_TIMEOUT_MS: u64 = 2000;
