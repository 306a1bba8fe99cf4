//! CDS: the apiserver clusters Envoy gets over ADS, as typed `envoy-types`
//! messages. Their endpoints come from EDS ([`super::endpoints`]), so a
//! membership change never touches a cluster (a cluster change would start
//! new connection pools).
//!
//! What each cluster promises:
//! - override-host load balancing on the route header: only ever one of the
//!   cluster's own members (an address outside it falls back to round robin
//!   over members, never to an outside host); for an Envoy running the
//!   native build (its node metadata names the module), the module's own
//!   balancer instead ([`super::native_lb`]);
//! - upstream mTLS with the peer CA and the apiservers' DNS SAN;
//! - `/readyz` health checks (kube fails `/readyz` at SIGTERM and keeps
//!   serving for `--shutdown-delay-duration` so load balancers can stop
//!   sending first): 1 s interval, unhealthy after 2 failures, so a
//!   draining apiserver gets no new load-balanced request within ~2 s; no
//!   panic mode (an unhealthy member is never chosen because "too many" are
//!   unhealthy); no outlier ejection (a live apiserver's stream resets
//!   would eject it: see the cluster's comment);
//! - members removed from EDS leave at once, even while they pass health
//!   checks;
//! - no `x-envoy-` header of an apiserver's response reaches Envoy's router
//!   ([`super::upstream_filters`]).

use std::collections::HashMap;

use envoy_types::pb::envoy::config::cluster::v3 as cluster;
use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::extensions::load_balancing_policies::override_host::v3::{OverrideHost, override_host};
use envoy_types::pb::envoy::extensions::load_balancing_policies::round_robin::v3::RoundRobin;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3 as tls;
use envoy_types::pb::envoy::extensions::upstreams::http::v3 as http_options;
use envoy_types::pb::envoy::r#type::matcher::v3 as matcher;
use envoy_types::pb::envoy::r#type::v3::Percent;
use envoy_types::pb::google::protobuf::{Any, Duration, UInt32Value};
use envoy_types::util::pack_any;
use mvp_contract::envoy::{APISERVERS_CLUSTER, APISERVERS_REQUESTHEADER_CLUSTER, http1_twin};
use mvp_contract::headers::ROUTE;

use crate::envoy_config::edge::STREAM_WINDOW_BYTES;
use crate::tls::PeerTls;

/// What the clusters are made of: the same flags `mvp-ext-proc serve` uses
/// for its own discovery connections (Envoy must see the same file paths).
#[derive(Clone, Default)]
pub struct ClusterOptions {
    pub peer_tls: Option<PeerTls>,
    /// The requestheader user header: the cluster that presents the proxy
    /// client certificate health-checks as this user.
    pub username_header: String,
    /// A digest of the TLS files' contents, carried in cluster metadata so a
    /// rotated certificate changes the cluster and Envoy loads it again.
    pub tls_files_digest: String,
    /// Streams per HTTP/2 apiserver connection at most; `None`:
    /// [`APISERVER_HTTP2_MAX_STREAMS`].
    pub http2_max_streams: Option<u32>,
    /// Plaintext apiservers take HTTP/2 with prior knowledge
    /// (`serve --apiserver-h2c`); HTTP/1.1 otherwise.
    pub plaintext_h2c: bool,
    /// How long an HTTP/2 PING may go unanswered before the connection is
    /// closed ([`PING_INTERVAL`]); zero: no PINGs.
    pub ping_timeout: std::time::Duration,
}

/// How often Envoy PINGs each HTTP/2 apiserver connection. A hung apiserver
/// — a stopped process, a lost network — answers none, and after
/// `serve --apiserver-ping-timeout` its connection is closed: the reads in
/// flight on it that have no answer yet are retried on another apiserver
/// that serves them (`retry_on: reset`), its watches end and are made
/// again. A slow apiserver answers a PING at once (Go's HTTP/2 server does
/// it in its read loop, whatever its handlers do), so a slow LIST is never
/// moved — which is what the per-read idle timeout did (a LIST waiting on
/// a slow etcd re-sent to every apiserver, then a 504). 1 s: kube's
/// client-go PINGs after 30 s of silence and waits 15; the front door's
/// point is to move reads off a hung server in seconds, at one 17-byte
/// frame per second per connection.
pub const PING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Who the requestheader cluster's health checks authenticate as.
pub const HEALTH_CHECK_USER: &str = "system:mvp-envoy:health-check";

fn secs(s: i64) -> Option<Duration> {
    Some(Duration { seconds: s, nanos: 0 })
}

fn duration(d: std::time::Duration) -> Duration {
    Duration { seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX), nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0) }
}

fn u32v(v: u32) -> Option<UInt32Value> {
    Some(UInt32Value { value: v })
}

fn file(p: &std::path::Path) -> Option<core::DataSource> {
    Some(core::DataSource { specifier: Some(core::data_source::Specifier::Filename(p.to_string_lossy().into_owned())), ..Default::default() })
}

/// Which HTTP a cluster speaks to the apiservers.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Http {
    /// HTTP/2: every request a worker sends one apiserver shares one
    /// connection (a watch is a stream, not a connection and a TLS session),
    /// as kube's own clients do; Envoy opens another when the server's
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` (`--http2-max-streams-per-connection`)
    /// is reached, and drains one the server sends `GOAWAY` on
    /// (`--goaway-chance`). Over TLS negotiated by ALPN: a server that does
    /// not offer h2 gets HTTP/1.1 on that connection. In plaintext there is
    /// nothing to negotiate with: HTTP/2 with prior knowledge only when the
    /// operator says the servers take it (`--apiserver-h2c`), HTTP/1.1
    /// otherwise — a plaintext kube-apiserver (the old insecure port),
    /// `kubectl proxy` or a plain proxy speaks HTTP/1.1 only, and answers
    /// the HTTP/2 preface with an error: every request a 502.
    Two,
    /// HTTP/1.1, for upgrade requests only (SPDY and WebSocket take over the
    /// connection; kube-apiserver has no extended CONNECT).
    OneForUpgrades,
}

/// Streams Envoy puts on one apiserver connection at most, by default:
/// kube-apiserver's own default (`--http2-max-streams-per-connection` unset:
/// 100 since its HTTP/2 rapid-reset fix, 1.29 on; 250 before — read off real
/// v1.37, v1.34 and v1.20 servers' SETTINGS). A server that allows fewer
/// says so in its SETTINGS and Envoy follows it on that connection — but
/// Envoy 1.40 fills each new connection by this bound before the SETTINGS
/// arrive, so a server flag below it needs this one lowered too (`serve
/// --apiserver-http2-max-streams-per-connection`). It was 1000 here, taken
/// for kube's default: 990 watches at once against a real v1.37 got 78
/// `REFUSED_STREAM`s, answered 503.
pub const APISERVER_HTTP2_MAX_STREAMS: u32 = 100;

/// The apiserver connection's flow-control windows. Per stream the client
/// side's (a bigger one would only hold more in Envoy for a client that
/// reads at that pace); per connection enough for every stream's window at
/// once, so streams whose clients stopped reading (they keep their window
/// unconsumed) never stall the other clients' streams sharing the
/// connection — what Envoy holds per connection stays bounded (64 MB at
/// 1000 streams).
const UPSTREAM_STREAM_WINDOW_BYTES: u32 = STREAM_WINDOW_BYTES;

/// The apiserver clusters: one without a client certificate, and, when a
/// proxy client certificate is configured, one that presents it (the
/// route table sends requests carrying a verified identity there); each
/// over HTTP/2, with an HTTP/1.1 twin for upgrades ([`http1_twin`]).
pub fn clusters(o: &ClusterOptions) -> Vec<cluster::Cluster> {
    let requestheader = o.peer_tls.as_ref().is_some_and(|p| p.client.is_some());
    [(APISERVERS_CLUSTER, false), (APISERVERS_REQUESTHEADER_CLUSTER, true)]
        .into_iter()
        .filter(|(_, proxy_certificate)| !proxy_certificate || requestheader)
        .flat_map(|(name, proxy_certificate)| {
            [apiserver_cluster(o, name, proxy_certificate, Http::Two), apiserver_cluster(o, http1_twin(name), proxy_certificate, Http::OneForUpgrades)]
        })
        .collect()
}

/// How the cluster speaks HTTP: [`Http`].
fn protocol_options(http: Http, tls: bool, h2c: bool, max_streams: u32, ping_timeout: std::time::Duration) -> http_options::HttpProtocolOptions {
    use http_options::http_protocol_options::{AutoHttpConfig, ExplicitHttpConfig, UpstreamProtocolOptions, explicit_http_config::ProtocolConfig};
    let http2 = core::Http2ProtocolOptions {
        max_concurrent_streams: u32v(max_streams),
        initial_stream_window_size: u32v(UPSTREAM_STREAM_WINDOW_BYTES),
        // At most 2^31-1 (the flag's range keeps it there).
        initial_connection_window_size: u32v(max_streams.saturating_mul(UPSTREAM_STREAM_WINDOW_BYTES).min(i32::MAX as u32)),
        connection_keepalive: (!ping_timeout.is_zero()).then(|| core::KeepaliveSettings {
            interval: Some(duration(PING_INTERVAL)),
            timeout: Some(duration(ping_timeout)),
            ..Default::default()
        }),
        ..Default::default()
    };
    let http1 = || UpstreamProtocolOptions::ExplicitHttpConfig(ExplicitHttpConfig {
        protocol_config: Some(ProtocolConfig::HttpProtocolOptions(core::Http1ProtocolOptions::default())),
    });
    let options = match (http, tls) {
        (Http::OneForUpgrades, _) => http1(),
        (Http::Two, false) if h2c => UpstreamProtocolOptions::ExplicitHttpConfig(ExplicitHttpConfig { protocol_config: Some(ProtocolConfig::Http2ProtocolOptions(http2)) }),
        (Http::Two, false) => http1(),
        (Http::Two, true) => UpstreamProtocolOptions::AutoConfig(AutoHttpConfig {
            http_protocol_options: Some(core::Http1ProtocolOptions::default()),
            http2_protocol_options: Some(http2),
            ..Default::default()
        }),
    };
    http_options::HttpProtocolOptions {
        upstream_protocol_options: Some(options),
        http_filters: super::upstream_filters::apiserver_upstream_filters(),
        ..Default::default()
    }
}

fn apiserver_cluster(o: &ClusterOptions, name: &str, proxy_certificate: bool, http: Http) -> cluster::Cluster {
    let typed_extension_protocol_options = HashMap::from([(
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions".to_string(),
        pack_any(protocol_options(http, o.peer_tls.is_some(), o.plaintext_h2c, o.http2_max_streams.unwrap_or(APISERVER_HTTP2_MAX_STREAMS), o.ping_timeout)),
    )]);
    let metadata = (!o.tls_files_digest.is_empty()).then(|| core::Metadata {
        filter_metadata: HashMap::from([(
            "mvp-envoy".to_string(),
            envoy_types::pb::google::protobuf::Struct {
                fields: HashMap::from([(
                    "tls_files_sha256".to_string(),
                    envoy_types::pb::google::protobuf::Value {
                        kind: Some(envoy_types::pb::google::protobuf::value::Kind::StringValue(o.tls_files_digest.clone())),
                    },
                )]),
            },
        )]),
        ..Default::default()
    });
    cluster::Cluster {
        name: name.to_string(),
        cluster_discovery_type: Some(cluster::cluster::ClusterDiscoveryType::Type(cluster::cluster::DiscoveryType::Eds as i32)),
        eds_cluster_config: Some(cluster::cluster::EdsClusterConfig { eds_config: Some(super::ads_source()), service_name: String::new() }),
        connect_timeout: secs(2),
        // Envoy's defaults (1,024 requests, connections) would cap a
        // cluster's watchers.
        circuit_breakers: Some(cluster::CircuitBreakers {
            thresholds: vec![cluster::circuit_breakers::Thresholds {
                max_connections: u32v(1_000_000),
                max_pending_requests: u32v(1_000_000),
                max_requests: u32v(1_000_000),
                max_retries: u32v(10_000),
                ..Default::default()
            }],
            ..Default::default()
        }),
        transport_socket: o.peer_tls.as_ref().map(|p| upstream_tls(p, proxy_certificate, http)),
        load_balancing_policy: Some(override_host_policy()),
        typed_extension_protocol_options,
        health_checks: vec![readyz_check(proxy_certificate.then_some(o.username_header.as_str()))],
        // No outlier detection: Envoy's router feeds it every upstream
        // reset as a local connect failure, and a live apiserver resets
        // streams (kube's request timeout over HTTP/2; the streams in flight
        // when `--goaway-chance` closes a connection). Two in a row took a
        // healthy member out for seconds — every member, in a burst — and
        // requests got `no_healthy_upstream`. A member that is really gone
        // fails its health checks within ~2 s and its table entry closes;
        // until then a read it fails is retried on another.
        common_lb_config: Some(cluster::cluster::CommonLbConfig {
            healthy_panic_threshold: Some(Percent { value: 0.0 }),
            // Host changes apply at once: the routing table may name a new
            // member as soon as Envoy acknowledged its endpoint.
            update_merge_window: secs(0),
            ..Default::default()
        }),
        ignore_health_on_host_removal: true,
        metadata,
        ..Default::default()
    }
}

/// `/readyz` every second; 2 failures make a member unhealthy (~2 s after
/// kube starts failing it at SIGTERM), 1 success healthy again. The same
/// interval when the cluster is idle, so a drain is noticed before the next
/// request.
fn readyz_check(identity_header: Option<&str>) -> core::HealthCheck {
    let request_headers_to_add = identity_header
        .map(|h| {
            vec![core::HeaderValueOption {
                header: Some(core::HeaderValue { key: h.to_string(), value: HEALTH_CHECK_USER.to_string(), ..Default::default() }),
                append_action: core::header_value_option::HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
                ..Default::default()
            }]
        })
        .unwrap_or_default();
    core::HealthCheck {
        timeout: secs(1),
        interval: secs(1),
        no_traffic_interval: secs(1),
        unhealthy_threshold: u32v(2),
        healthy_threshold: u32v(1),
        always_log_health_check_failures: true,
        health_checker: Some(core::health_check::HealthChecker::HttpHealthCheck(core::health_check::HttpHealthCheck {
            host: "kubernetes.default.svc".to_string(),
            path: "/readyz".to_string(),
            request_headers_to_add,
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// Upstream mTLS: apiservers must present a certificate from
/// `--peer-ca-file` for the peer server name (kube: kubernetes.default.svc);
/// with `proxy_certificate`, the front door presents its proxy client
/// certificate.
fn upstream_tls(p: &PeerTls, proxy_certificate: bool, http: Http) -> core::TransportSocket {
    let tls_certificates = p
        .client
        .as_ref()
        .filter(|_| proxy_certificate)
        .map(|(cert, key, _)| vec![tls::TlsCertificate { certificate_chain: file(cert), private_key: file(key), ..Default::default() }])
        .unwrap_or_default();
    let common = tls::CommonTlsContext {
        tls_certificates,
        // HTTP/2: none here, Envoy's pool offers "h2,http/1.1" itself; a
        // health check connection offers none and gets HTTP/1.1, the
        // health checker's codec.
        alpn_protocols: match http {
            Http::Two => vec![],
            Http::OneForUpgrades => vec!["http/1.1".to_string()],
        },
        validation_context_type: Some(tls::common_tls_context::ValidationContextType::ValidationContext(
            tls::CertificateValidationContext {
                trusted_ca: file(&p.ca_file),
                match_typed_subject_alt_names: vec![tls::SubjectAltNameMatcher {
                    san_type: tls::subject_alt_name_matcher::SanType::Dns as i32,
                    matcher: Some(matcher::StringMatcher {
                        match_pattern: Some(matcher::string_matcher::MatchPattern::Exact(p.server_name.clone())),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            },
        )),
        ..Default::default()
    };
    core::TransportSocket {
        name: "envoy.transport_sockets.tls".to_string(),
        config_type: Some(core::transport_socket::ConfigType::TypedConfig(pack_any(tls::UpstreamTlsContext {
            common_tls_context: Some(common),
            sni: p.server_name.clone(),
            ..Default::default()
        }))),
    }
}

pub(super) fn extension(name: &str, typed_config: Any) -> cluster::load_balancing_policy::Policy {
    cluster::load_balancing_policy::Policy {
        typed_extension_config: Some(core::TypedExtensionConfig { name: name.to_string(), typed_config: Some(typed_config) }),
    }
}

/// The override-host policy only ever selects one of the cluster's own
/// members; an address outside the set falls back to round robin, so no
/// request can reach a host outside the membership.
fn override_host_policy() -> cluster::LoadBalancingPolicy {
    let round_robin = cluster::LoadBalancingPolicy {
        policies: vec![extension("envoy.load_balancing_policies.round_robin", pack_any(RoundRobin::default()))],
    };
    cluster::LoadBalancingPolicy {
        policies: vec![extension(
            "envoy.load_balancing_policies.override_host",
            pack_any(OverrideHost {
                override_host_sources: vec![override_host::OverrideHostSource { header: ROUTE.to_string(), ..Default::default() }],
                fallback_policy: Some(round_robin),
                ..Default::default()
            }),
        )],
    }
}

#[cfg(test)]
#[path = "clusters_tests.rs"]
mod tests;
