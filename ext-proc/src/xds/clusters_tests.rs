use super::*;
use prost::Message;

fn protocol(c: &cluster::Cluster) -> http_options::http_protocol_options::UpstreamProtocolOptions {
    let any = &c.typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
    http_options::HttpProtocolOptions::decode(any.value.as_slice()).unwrap().upstream_protocol_options.unwrap()
}

fn alpn(c: &cluster::Cluster) -> Vec<String> {
    let Some(core::transport_socket::ConfigType::TypedConfig(any)) = &c.transport_socket.as_ref().unwrap().config_type else { panic!() };
    tls::UpstreamTlsContext::decode(any.value.as_slice()).unwrap().common_tls_context.unwrap().alpn_protocols
}

/// Every request shares HTTP/2 connections (prior knowledge in
/// plaintext when the servers take it, ALPN over TLS with HTTP/1.1 for
/// a server without h2), with kube's stream bound and windows no
/// stalled stream can exhaust; each cluster's HTTP/1.1 twin carries
/// upgrades. Plaintext servers not known to take h2c get HTTP/1.1.
#[test]
fn http2_to_the_apiservers_and_http1_twins_for_upgrades() {
    use http_options::http_protocol_options::{UpstreamProtocolOptions as U, explicit_http_config::ProtocolConfig as P};
    use mvp_contract::envoy::{APISERVERS_HTTP1_CLUSTER, APISERVERS_REQUESTHEADER_HTTP1_CLUSTER};
    let h1 = clusters(&ClusterOptions::default());
    let U::ExplicitHttpConfig(e) = protocol(&h1[0]) else { panic!("plaintext, no h2c: HTTP/1.1") };
    assert!(matches!(e.protocol_config, Some(P::HttpProtocolOptions(_))));
    let plain = clusters(&ClusterOptions { plaintext_h2c: true, ..Default::default() });
    assert_eq!(plain.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), [APISERVERS_CLUSTER, APISERVERS_HTTP1_CLUSTER]);
    let U::ExplicitHttpConfig(e) = protocol(&plain[0]) else { panic!("plaintext: prior knowledge") };
    let Some(P::Http2ProtocolOptions(h2)) = e.protocol_config else { panic!("HTTP/2") };
    assert_eq!(h2.max_concurrent_streams, u32v(100));
    assert_eq!(h2.initial_stream_window_size, u32v(64 << 10));
    assert_eq!(h2.initial_connection_window_size.unwrap().value, 100 * (64 << 10), "every stream's window at once");
    let lowered = clusters(&ClusterOptions { http2_max_streams: Some(10), plaintext_h2c: true, ..Default::default() });
    let U::ExplicitHttpConfig(e) = protocol(&lowered[0]) else { panic!() };
    let Some(P::Http2ProtocolOptions(low)) = e.protocol_config else { panic!() };
    assert_eq!((low.max_concurrent_streams, low.initial_connection_window_size), (u32v(10), u32v(10 * (64 << 10))));
    let U::ExplicitHttpConfig(e) = protocol(&plain[1]) else { panic!() };
    assert!(matches!(e.protocol_config, Some(P::HttpProtocolOptions(_))));

    let dir = std::env::temp_dir();
    let p = PeerTls { ca_file: dir.join("ca"), ca: vec![], client: None, server_name: "kubernetes.default.svc".into() };
    let mut with_tls = ClusterOptions { peer_tls: Some(p), ..Default::default() };
    let tls = clusters(&with_tls);
    let U::AutoConfig(auto) = protocol(&tls[0]) else { panic!("TLS: ALPN") };
    assert_eq!(auto.http2_protocol_options, Some(h2));
    assert!(auto.http_protocol_options.is_some());
    assert!(alpn(&tls[0]).is_empty(), "Envoy's pool offers h2,http/1.1; a health check none");
    assert_eq!(alpn(&tls[1]), ["http/1.1"]);

    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(rustls::pki_types::PrivatePkcs8KeyDer::from(vec![]));
    let identity = crate::tls::Identity { certs: vec![], key };
    with_tls.peer_tls.as_mut().unwrap().client = Some((dir.join("c"), dir.join("k"), identity));
    let names: Vec<String> = clusters(&with_tls).into_iter().map(|c| c.name).collect();
    assert_eq!(names, [APISERVERS_CLUSTER, APISERVERS_HTTP1_CLUSTER, APISERVERS_REQUESTHEADER_CLUSTER, APISERVERS_REQUESTHEADER_HTTP1_CLUSTER]);
}

/// Each HTTP/2 apiserver connection is PINGed every second and closed
/// when one goes unanswered for the timeout (a hung apiserver); none
/// with a zero timeout, none on the HTTP/1.1 twins.
#[test]
fn http2_connections_are_pinged() {
    use http_options::http_protocol_options::{UpstreamProtocolOptions as U, explicit_http_config::ProtocolConfig as P};
    let c = clusters(&ClusterOptions { plaintext_h2c: true, ping_timeout: std::time::Duration::from_secs(5), ..Default::default() });
    let U::ExplicitHttpConfig(e) = protocol(&c[0]) else { panic!() };
    let Some(P::Http2ProtocolOptions(h2)) = e.protocol_config else { panic!() };
    let k = h2.connection_keepalive.unwrap();
    assert_eq!((k.interval, k.timeout), (secs(1), secs(5)));
    let off = clusters(&ClusterOptions { plaintext_h2c: true, ..Default::default() });
    let U::ExplicitHttpConfig(e) = protocol(&off[0]) else { panic!() };
    let Some(P::Http2ProtocolOptions(h2)) = e.protocol_config else { panic!() };
    assert!(h2.connection_keepalive.is_none());
}

#[test]
fn plain_and_requestheader_clusters() {
    let plain = clusters(&ClusterOptions::default());
    let c = &plain[0];
    assert_eq!(c.name, APISERVERS_CLUSTER);
    assert!(c.transport_socket.is_none());
    let hc = &c.health_checks[0];
    let Some(core::health_check::HealthChecker::HttpHealthCheck(h)) = &hc.health_checker else { panic!() };
    assert_eq!(h.path, "/readyz");
    assert!(h.request_headers_to_add.is_empty());
    assert_eq!(c.common_lb_config.as_ref().unwrap().healthy_panic_threshold.as_ref().unwrap().value, 0.0);
    assert!(c.ignore_health_on_host_removal);
    assert!(c.outlier_detection.is_none(), "a live apiserver's stream resets must not eject it");
}
