//! Names of Envoy objects that the rendered bootstrap defines and the filter
//! refers to.

/// The cluster of apiservers, with the override-host load balancer that
/// reads [`crate::headers::ROUTE`] (the native build's own balancer for an
/// Envoy that runs it: [`NATIVE_LB_NAME`]). Upstream TLS presents no client
/// certificate: requests authenticate with their own credentials (tokens)
/// or none (anonymous), as if they went to the apiserver directly.
pub const APISERVERS_CLUSTER: &str = "apiservers";

/// The same apiservers, reached with the front door's proxy client
/// certificate: only for requests whose identity the front door asserts in
/// requestheaders (a client certificate it verified).
pub const APISERVERS_REQUESTHEADER_CLUSTER: &str = "apiservers_requestheader";

/// The two clusters above speak HTTP/2: every request from every client to
/// one apiserver shares a worker's one connection (as many as the server's
/// `SETTINGS_MAX_CONCURRENT_STREAMS` needs). These twins speak HTTP/1.1,
/// for upgrade requests only (exec, attach, port-forward: SPDY and
/// WebSocket take over a connection of their own); the routes send a
/// request with an `upgrade` header here.
pub const APISERVERS_HTTP1_CLUSTER: &str = "apiservers_http1";
pub const APISERVERS_REQUESTHEADER_HTTP1_CLUSTER: &str = "apiservers_requestheader_http1";

/// The HTTP/1.1 twin of an apiserver cluster (itself for any other name).
pub fn http1_twin(cluster: &str) -> &str {
    match cluster {
        APISERVERS_CLUSTER => APISERVERS_HTTP1_CLUSTER,
        APISERVERS_REQUESTHEADER_CLUSTER => APISERVERS_REQUESTHEADER_HTTP1_CLUSTER,
        other => other,
    }
}

/// The cluster that reaches mvp-ext-proc's gRPC listener (HTTP/2): the
/// refresher's `GetTable` calls and ext_proc for `/apis`.
pub const EXT_PROC_CLUSTER: &str = "mvp_ext_proc";

/// The same replicas in another order (the second first), for the second
/// ext_proc filter of a front door with replicas: an `/apis` exchange the
/// first filter's replica could not finish goes to another one.
pub const EXT_PROC_FALLBACK_CLUSTER: &str = "mvp_ext_proc_fallback";

/// The ext_proc filter for the merged documents: off by default, on for
/// their routes only (so no other request creates it).
pub const EXT_PROC_FILTER: &str = "envoy.filters.http.ext_proc";

/// That second ext_proc filter: off by default, on for the merged
/// documents' routes.
pub const EXT_PROC_FALLBACK_FILTER: &str = "mvp.ext_proc_fallback";

/// The `:authority` of the refresher's `GetTable` calls.
pub const EXT_PROC_AUTHORITY: &str = "mvp-ext-proc";

/// One VM id for the router and the refresher: proxy-wasm shared data is
/// scoped per VM id, and the table travels through it. At most one router
/// plugin per VM id: the filter keeps no per-request state, so every HTTP
/// context of a VM is served by that VM's router (a router configured later
/// replaces it; `wasm-filter/src/adapter/mod.rs`).
pub const VM_ID: &str = "mvp";

/// Root ids (and plugin names) of the two roles.
pub const ROUTER_ROOT_ID: &str = "mvp_router";
pub const REFRESHER_ROOT_ID: &str = "mvp_table_refresher";

/// Where the filter's metrics appear: Envoy prefixes a wasm filter's with
/// `wasmcustom.`, and the native build (a dynamic module) is given the same
/// `metrics_namespace`, so a stat has one name whichever build runs.
pub const FILTER_STATS_NAMESPACE: &str = "wasmcustom";

/// The native build's filter and bootstrap extension names (its
/// `filter_name` / `extension_name`).
pub const NATIVE_ROUTER_NAME: &str = "router";
pub const NATIVE_REFRESHER_NAME: &str = "refresher";

/// gRPC method the refresher calls (`mvp.routing.v1.RoutingTableService`).
pub const GET_TABLE_PATH: &str = "/mvp.routing.v1.RoutingTableService/GetTable";

/// The request property the filter sets on a request it pinned: what it was
/// routed by (`apps/v1/deployments`, see `RouteKey::label`).
pub const ROUTE_KEY_PROPERTY: &str = "mvp_route_key";

/// The same property as Envoy's access log reads it (`%FILTER_STATE(…)%`):
/// Envoy stores a wasm property under `wasm.` + its name.
pub const ROUTE_KEY_FILTER_STATE: &str = "wasm.mvp_route_key";

/// The native build's record of the apiservers a pinned request lists
/// (what the wasm build's route header carries, which the native build
/// does not write): for the access log's `route`. Only with the access log
/// on.
pub const LISTED_PROPERTY: &str = "mvp_listed";
pub const LISTED_FILTER_STATE: &str = "wasm.mvp_listed";

/// The record of a request for a skewed API — a resource only some
/// apiservers serve — set on such requests only: what mvp-ext-proc counts
/// per API and per client (`readiness`), from Envoy's gRPC access log
/// ([`SKEW_LOG_NAME`]), whose filter selects the requests carrying it. Its
/// value: the route key's label (`apps/v1/deployments`), a tab, and the
/// `sub` claim of the request's bearer token if it is a JWT (unverified:
/// mvp-ext-proc says so), else nothing. The native build writes it as
/// dynamic metadata ([`SKEW_METADATA_NAMESPACE`], [`SKEW_METADATA_KEY`]),
/// which the log's metadata filter matches; the wasm build (proxy-wasm sets
/// no dynamic metadata) as the property [`SKEW_PROPERTY`]
/// ([`SKEW_FILTER_STATE`]), its log selecting requests with a route header.
pub const SKEW_PROPERTY: &str = "mvp_skew";
pub const SKEW_FILTER_STATE: &str = "wasm.mvp_skew";
pub const SKEW_METADATA_NAMESPACE: &str = "mvp";
pub const SKEW_METADATA_KEY: &str = "skew";
/// The gRPC access log's `log_name`.
pub const SKEW_LOG_NAME: &str = "mvp-skew";

/// The `Warning` a response for a resource only apiservers older than the
/// newest release serve carries (`RouterConfig::warn_on_skew`), in kube's
/// format (`299 - "…"`, what kubectl prints and client-go's warning
/// handlers see). The wasm build leaves it as this property, which its
/// pinned routes add to the response (`%FILTER_STATE(…)%`); the native
/// build adds it itself in its response hook.
pub const WARNING_PROPERTY: &str = "mvp_warning";
pub const WARNING_FILTER_STATE: &str = "wasm.mvp_warning";

/// The native build's load balancer for the apiserver clusters (its
/// `lb_policy_name`), served over CDS to an Envoy whose node metadata names
/// the module ([`NODE_NATIVE_MODULE`]).
pub const NATIVE_LB_NAME: &str = "apiservers";

/// The node metadata key in which the native build's bootstrap tells
/// mvp-ext-proc the module's path: its clusters then get the module's load
/// balancer instead of the override-host policy the wasm build's route
/// header drives.
pub const NODE_NATIVE_MODULE: &str = "mvp_native_module";

/// The node metadata key in which every bootstrap `envoy-config` renders
/// says which routing filter build the Envoy runs (`native` or `wasm`): the
/// connected Envoys on mvp-ext-proc's `/table` say which build routed.
pub const NODE_FILTER_BUILD: &str = "mvp_filter";

/// The Envoy release the native module is built against (its ABI,
/// `native-filter/src/abi.rs`): Envoy promises a dynamic module built for
/// X.Y loads in X.Y and X.(Y+1), so `envoy-config` picks the native build
/// for those and the `.wasm` for any other.
pub const NATIVE_MODULE_ENVOY: (u32, u32) = (1, 40);

/// The request property the filter sets on a request it held (see
/// `RouterConfig::hold`): milliseconds held, then how it ended — `routed`
/// or `unavailable` (e.g. `312 routed`). Only with the access log on.
pub const HELD_PROPERTY: &str = "mvp_held";
pub const HELD_FILTER_STATE: &str = "wasm.mvp_held";
