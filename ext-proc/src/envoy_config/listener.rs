//! The client-facing listener: plain HTTP, or TLS (h2 and HTTP/1.1) with
//! optional client certificates that must chain to `--client-ca-file`.

use serde_json::{Value, json};

use super::{EnvoyConfigOptions, hcm, path, socket_address};

pub fn listener(o: &EnvoyConfigOptions, forwards_identity: bool) -> Value {
    let mut filter_chain = json!({"filters": [{
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": hcm::http_connection_manager(o, forwards_identity),
    }]});
    if let Some(t) = &o.front_tls {
        let mut common = json!({
            "tls_certificates": [{"certificate_chain": {"filename": path(&t.cert_file)}, "private_key": {"filename": path(&t.key_file)}}],
            "alpn_protocols": ["h2", "http/1.1"],
        });
        if let Some(ca) = &t.client_ca_file {
            // Client certificates are optional (bearer tokens work too), but
            // one that is presented must chain to --client-ca-file or the
            // handshake fails.
            common["validation_context"] = json!({"trusted_ca": {"filename": path(ca)}});
        }
        filter_chain["transport_socket"] = json!({
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
                "common_tls_context": common,
                "require_client_certificate": false,
            },
        });
    }
    let mut listener = json!({
        "name": "apiserver_front_door",
        "address": socket_address(&o.listen.ip().to_string(), o.listen.port()),
        "filter_chains": [filter_chain],
        // A slow reader or fast writer is pushed back, not buffered (edge.rs).
        "per_connection_buffer_limit_bytes": super::edge::CONNECTION_BUFFER_BYTES,
    });
    if !o.proxy_protocol_from.is_empty() {
        // The client's address from the load balancer in front (first,
        // before TLS): what the access log shows and what the hold bounds
        // per client. Required on every connection — one that could leave
        // it out could also send one naming any address it likes — and
        // taken only from the balancers: the one filter chain matches their
        // addresses (the direct peer's, not the header's), so a connection
        // from anyone else finds no chain and is closed.
        listener["filter_chains"][0]["filter_chain_match"] = json!({
            "direct_source_prefix_ranges": o.proxy_protocol_from.iter().map(|n| json!({"address_prefix": n.network().to_string(), "prefix_len": n.prefix_len()})).collect::<Vec<_>>(),
        });
        listener["listener_filters"] = json!([{
            "name": "envoy.filters.listener.proxy_protocol",
            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.listener.proxy_protocol.v3.ProxyProtocol"},
        }]);
    }
    listener
}
