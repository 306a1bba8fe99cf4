//! Header names on the request path.

/// Set by the filter to the `IP:port` list of the apiservers that serve the
/// request; read by the apiservers cluster's override-host policy. Envoy's
/// early header mutation strips it from every client request, so only the
/// filter can set it. The native build writes it only for the unavailable
/// answers and [`IDENTITY_REFUSED`] (it pins by override host:
/// `native-filter/src/lb.rs`).
pub const ROUTE: &str = "x-mvp-route";

/// The [`ROUTE`] value for a request only closed apiservers serve (draining,
/// not yet re-read, departed): Envoy's route table answers it with the 503
/// Status locally, so it reaches no apiserver and no other server's 404.
/// Not `IP:port`, so it can never name a cluster member.
pub const UNAVAILABLE: &str = "unavailable";

/// The [`UNAVAILABLE`] answer for a discovery or OpenAPI document
/// (`/apis/{g}/{v}`, `/apis/{g}`, `/openapi/v3/{key}`): the same 503 Status
/// without `Retry-After`. client-go retries a 503 only when it carries
/// `Retry-After`, up to 10 times per request, and a new client asks for
/// every group-version's document: with the hint, a kubectl with an empty
/// cache stalled 70–190 s while one apiserver was down. kube's own
/// unaggregated discovery answers an unavailable group-version 503 without
/// one; requests for resources keep it.
pub const UNAVAILABLE_DOCUMENT: &str = "unavailable-document";

/// The [`ROUTE`] value on a request the filter answered 401 itself: its
/// client certificate names a user or group a header cannot carry exactly
/// (`filter-core/src/identity.rs`). Envoy's local reply mapper turns the
/// answer into kube's `Unauthorized` Status by it.
pub const IDENTITY_REFUSED: &str = "refused-identity";

/// kube-apiserver's loop guard: a request carrying it is never proxied to a
/// peer again, and a GVR the receiving server lacks becomes its 404. The
/// front door never sets it: a request it pins goes to a server that serves
/// it, and should the table be stale, that server's own peer proxy (1.36+)
/// is a second chance the header would turn into a 404 — "deleted" to
/// client-go. Clients cannot send it either (stripped like [`ROUTE`]): a
/// client must not switch correct routing off.
pub const PEER_PROXIED: &str = "x-kubernetes-peer-proxied";

/// On every answer mvp-ext-proc gave for a merged document (`/apis`, the
/// OpenAPI documents): what it did (`merged`, `not_modified`,
/// `upstream_status`, …, the `result` of `mvp_discovery_rewrites_total`).
/// Envoy's fallback ext_proc filter runs only on an answer without it (the
/// first replica failed open); an apiserver's copy is removed by the route.
pub const DISCOVERY_RESULT: &str = "x-mvp-discovery";

/// Envoy's per-request retry count: the native build sets it on a pinned
/// request whose list is not [`crate::limits::UNPINNED_RETRIES`] + 1 long,
/// so that a request fails over along its whole list and no further — a
/// retry past the list would find no host, and Envoy's `no_healthy_upstream`
/// 503 would replace the last answer (kube's 429 and its `Retry-After`).
/// Clients cannot send it (`x-envoy-` is stripped).
pub const MAX_RETRIES: &str = "x-envoy-max-retries";

/// Envoy's per-request route timeout: the filter sets it to `0` (none) on a
/// request kube-apiserver counts as long-running (a watch, logs, exec,
/// attach, port-forward, proxy: `mvp_routing::requestinfo::route_key_and_long_running`),
/// so that only those are exempt from the front door's `--request-timeout`.
/// Clients cannot send it (`x-envoy-` is stripped); Envoy's router removes
/// it before the request goes upstream.
pub const UPSTREAM_TIMEOUT: &str = "x-envoy-upstream-rq-timeout-ms";

/// Headers removed from every client request before any filter runs.
pub const STRIPPED: &[&str] = &[ROUTE, PEER_PROXIED];

/// Header name prefixes removed from every client request before any filter
/// runs: `x-remote-` are kube's default requestheader identity headers (the
/// configured names are stripped too); `x-envoy-` would let a client steer
/// Envoy's retries and timeouts.
pub const STRIPPED_PREFIXES: &[&str] = &["x-remote-", "x-envoy-"];
