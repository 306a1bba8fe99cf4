//! The apiservers' side of the front door (issue 48): how many connections
//! its clients cost them. Measured before: 100 watches multiplexed on one
//! client HTTP/2 connection became 100 apiserver connections through the
//! front door (its apiserver clusters spoke HTTP/1.1: one connection per
//! in-flight request), 1 when sent directly. Now the clusters speak HTTP/2,
//! each Envoy worker keeps one connection per apiserver (more only when the
//! server's `SETTINGS_MAX_CONCURRENT_STREAMS` says so), and upgrades —
//! exec, attach, port-forward — take their HTTP/1.1 twin (`tls_streams.rs`
//! drives them over it, with identities).

use std::time::Duration;

use integration::harness::secure::{TOKEN, setup, user};
use integration::harness::watches::hold_watches;
use integration::harness::{FakeSpec, FrontDoor, Options};

/// Open connections on every fake apiserver, as each counts them itself.
async fn apiserver_connections(door: &FrontDoor) -> u64 {
    // The fakes' own certificates are not what this counts.
    let client = reqwest::Client::builder().no_proxy().danger_accept_invalid_certs(true).timeout(Duration::from_secs(5)).build().unwrap();
    let mut n = 0;
    for fake in &door.fakes {
        n += fake.stats(&client).await.and_then(|v| v["connectionsOpen"].as_u64()).expect("a fake's connection count");
    }
    n
}

/// A watch that lasts 30 s unless its client leaves first.
const LONG_WATCH: &str = "/api/v1/namespaces/default/pods?watch=1&bookmarks=300";

/// 100 watches on one client HTTP/2 connection, and 20 more on HTTP/1.1
/// client connections of their own: the apiserver gets one connection per
/// Envoy worker (2 here) and one more per 100 streams (kube-apiserver's
/// bound per connection) — at most 3 for all of them, where it got one per
/// watch before (120).
#[tokio::test]
async fn a_hundred_multiplexed_watches_cost_the_apiserver_one_connection_per_worker() {
    let door = FrontDoor::start(&[FakeSpec::new("v137", "v1.37")], Options::default()).await.unwrap();
    let before = apiserver_connections(&door).await;
    let h2 = reqwest::Client::builder().no_proxy().http2_prior_knowledge().build().unwrap();
    let watches = hold_watches(&h2, &door.url(LONG_WATCH), 100).await;
    assert_eq!(watches.failed(), Vec::<u16>::new());
    let h1 = reqwest::Client::builder().no_proxy().http1_only().build().unwrap();
    let h1_watches = hold_watches(&h1, &door.url(LONG_WATCH), 20).await;
    assert_eq!(h1_watches.failed(), Vec::<u16>::new());
    let during = apiserver_connections(&door).await;
    assert!(during <= before + 3, "120 watches took {} apiserver connections (before: {before}, workers: 2, 100 streams each)", during - before);
    assert!(door.envoy_stat("cluster.apiservers.upstream_cx_http2_total").await.unwrap_or(0) >= 1);
    watches.end().await;
    h1_watches.end().await;
}

/// Apiservers that allow 10 streams per connection
/// (`--http2-max-streams-per-connection=10`), and the front door told so
/// (`serve --apiserver-http2-max-streams-per-connection=10`): 100 watches
/// take 10 to 12 connections, and every one is served. (Envoy follows a
/// server's SETTINGS on a connection, but fills a new one by its own bound
/// before they arrive: untold, it had 80 of the 100 refused.)
#[tokio::test]
async fn a_lowered_stream_bound_is_followed() {
    let options = Options { ext_proc_args: vec!["--apiserver-http2-max-streams-per-connection=10".into()], ..Options::default() };
    let door = FrontDoor::start(&[FakeSpec::new("v137", "v1.37").with_http2_max_streams(10)], options).await.unwrap();
    let before = apiserver_connections(&door).await;
    let h2 = reqwest::Client::builder().no_proxy().http2_prior_knowledge().build().unwrap();
    let watches = hold_watches(&h2, &door.url(LONG_WATCH), 100).await;
    assert_eq!(watches.failed(), Vec::<u16>::new());
    let opened = apiserver_connections(&door).await - before;
    // The workers share the 100 streams: ceil(a/10) + ceil(b/10) of them.
    assert!((10..=12).contains(&opened), "100 watches on {opened} connections of at most 10 streams");
    watches.end().await;
}

/// Over TLS (ALPN h2) with identities: 100 watches of a certificate user
/// (the requestheader cluster) and 100 of a token user (the plain one) on
/// one client connection each reach the two apiservers on at most one
/// connection per worker and cluster each; on those shared connections
/// each request is still its own caller's.
#[tokio::test]
async fn over_tls_every_identity_shares_the_connections() {
    let s = setup(Options::default()).await;
    let door = &s.door;
    let before = apiserver_connections(door).await;
    let alice = s.pki.clients.client(s.pki_dir.path(), "alice", "alice", &["dev"]).unwrap();
    let as_alice = door.https(Some(&alice), true).unwrap();
    let alice_url = door.url(LONG_WATCH).replacen("http://", "https://", 1);
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(integration::harness::secure::tls_client_config(&door.tls.as_ref().unwrap().serving.cert_file, None, &[b"h2"]).unwrap())
        .no_proxy()
        .http2_prior_knowledge()
        .default_headers([(reqwest::header::AUTHORIZATION, format!("Bearer {}", TOKEN).parse().unwrap())].into_iter().collect())
        .build()
        .unwrap();
    let (a, t) = (hold_watches(&as_alice, &alice_url, 100).await, hold_watches(&client, &alice_url, 100).await);
    assert_eq!((a.failed(), t.failed()), (Vec::<u16>::new(), Vec::<u16>::new()));
    let opened = apiserver_connections(door).await - before;
    // 2 workers × 2 clusters × 2 apiservers at most.
    assert!(opened <= 8, "200 watches over TLS took {opened} apiserver connections");
    for cluster in ["apiservers", "apiservers_requestheader"] {
        let h2 = door.envoy_stat(&format!("cluster.{cluster}.upstream_cx_http2_total")).await.unwrap_or(0);
        assert!(h2 >= 1, "{cluster}: no HTTP/2 connection (ALPN)");
    }
    let pods = door.url("/api/v1/namespaces/default/pods").replacen("http://", "https://", 1);
    for (client, who) in [(&as_alice, "alice"), (&client, "tina")] {
        let v: serde_json::Value = client.get(&pods).send().await.unwrap().json().await.unwrap();
        assert_eq!(user(&v).0, who, "{v}");
    }
    a.end().await;
    t.end().await;
}
