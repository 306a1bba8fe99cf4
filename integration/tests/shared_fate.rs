//! Shared fate on the apiserver connections (issue 55 item 7): one HTTP/2
//! connection from an Envoy worker to an apiserver carries many clients'
//! streams, and Go's HTTP/2 server ends a whole connection on abuse it
//! detects — more than 4 × `MaxConcurrentStreams` handlers queued behind
//! the running ones (`too_many_early_resets`, its rapid-reset defence):
//! GOAWAY ENHANCE_YOUR_CALM. Against a real kube-apiserver 1.37: 990
//! watches of a legitimate client through one Envoy worker, and a flood of
//! another client's streams reset at once or a few ms after their HEADERS
//! (so they reach the apiserver). No legitimate watch may end, and the
//! apiserver may close no connection.
//!
//! The issue took 1000 streams per connection for kube's bound, as the
//! door did: real kube-apiservers send 100 (250 before 1.29). Envoy filled
//! each new connection to 1000 before the server's SETTINGS arrived — 78 of
//! the 990 watches opened at once got `REFUSED_STREAM`, answered 503. With
//! the door's bound at kube's 100 (`xds::clusters`), every one is served.
//! A binary of its own: it floods.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use integration::harness::real::{RealControlPlane, Release, Spec};
use integration::harness::{FrontDoor, Options};

/// A TLS HTTP/2 connection to the door presenting `identity`.
async fn h2_connect(door: &FrontDoor, identity: &integration::pki::Leaf) -> Option<h2::client::SendRequest<bytes::Bytes>> {
    let pki = door.tls.as_ref()?;
    let config = integration::harness::tls_client_config(&pki.serving.cert_file, Some(identity), &[b"h2"]).ok()?;
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", door.listen_port)).await.ok()?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").ok()?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.ok()?;
    let (client, conn) = h2::client::handshake(tls).await.ok()?;
    tokio::spawn(conn);
    Some(client)
}

/// The flood: on one connection after another, streams for `path` reset
/// `after` their HEADERS (0: at once), `in_flight` at a time, until `until`;
/// the number opened.
async fn flood(door: &FrontDoor, identity: &integration::pki::Leaf, path: &str, after: Duration, in_flight: usize, until: Instant) -> u64 {
    let opened = Arc::new(AtomicU64::new(0));
    let url = door.url(path);
    while Instant::now() < until {
        let Some(mut client) = h2_connect(door, identity).await else { continue };
        let outstanding = Arc::new(tokio::sync::Semaphore::new(in_flight));
        while Instant::now() < until {
            let Ok(permit) = outstanding.clone().acquire_owned().await else { break };
            let Ok(ready) = client.clone().ready().await else { break };
            client = ready;
            let req = hyper::Request::builder().uri(&url).body(()).unwrap();
            let Ok((response, mut send)) = client.send_request(req, true) else { break };
            opened.fetch_add(1, Ordering::Relaxed);
            if after.is_zero() {
                send.send_reset(h2::Reason::CANCEL);
                drop((response, permit));
                tokio::task::yield_now().await;
            } else {
                tokio::spawn(async move {
                    tokio::time::sleep(after).await;
                    send.send_reset(h2::Reason::CANCEL);
                    drop((response, permit));
                });
            }
        }
    }
    opened.load(Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rapid_reset_flood_ends_no_legitimate_watch_on_a_shared_apiserver_connection() {
    let cp = RealControlPlane::start_specs(&[Spec::new("kas-a", Release::minor(37), &[])]).await.unwrap();
    // One worker: its apiserver connections carry the watches and the flood.
    let door = cp.front_door_with(Options { concurrency: 1, ..Options::default() }).await.unwrap();
    let alice = cp.pki.clients.client(cp.dir.path(), "alice", "alice", &["system:masters"]).unwrap();
    let watchers = door.https(Some(&cp.admin), true).unwrap();
    let first = watchers.get(door.url("/api/v1/namespaces?limit=1")).send().await.unwrap();
    assert_eq!(first.status(), 200);
    // Opened all at once, as informers start: the connections they need are
    // opened at once too, each filled before its SETTINGS arrive.
    let n = 990;
    let watches = integration::harness::watches::hold_watches(&watchers, &door.url("/api/v1/namespaces/default/configmaps?watch=1&allowWatchBookmarks=true&timeoutSeconds=600"), n).await;
    assert_eq!(watches.failed(), Vec::<u16>::new(), "watches opened at once: the apiserver takes 100 streams per connection");
    let stat = |name: &'static str| {
        let door = &door;
        async move { door.envoy_stat(name).await.unwrap_or(0) }
    };
    let cluster = "cluster.apiservers_requestheader";
    let connections = stat("cluster.apiservers_requestheader.upstream_cx_active").await;
    let before = (stat("cluster.apiservers_requestheader.upstream_cx_destroy_remote_with_active_rq").await, stat("cluster.apiservers_requestheader.upstream_cx_close_notify").await, stat("cluster.apiservers_requestheader.upstream_rq_tx_reset").await);
    let until = Instant::now() + Duration::from_secs(6);
    let mut floods = Vec::new();
    for (after, in_flight) in [(Duration::ZERO, 1), (Duration::from_millis(5), 200), (Duration::from_millis(50), 200), (Duration::from_millis(5), 200), (Duration::from_millis(1), 50), (Duration::from_millis(2), 50), (Duration::ZERO, 1), (Duration::from_millis(20), 100)] {
        let (door, alice) = (&door, alice.clone());
        floods.push(async move { flood(door, &alice, "/api/v1/namespaces/default/pods?watch=1", after, in_flight, until).await });
    }
    let opened: u64 = futures::future::join_all(floods).await.into_iter().sum();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = (stat("cluster.apiservers_requestheader.upstream_cx_destroy_remote_with_active_rq").await, stat("cluster.apiservers_requestheader.upstream_cx_close_notify").await, stat("cluster.apiservers_requestheader.upstream_rq_tx_reset").await);
    let closed = stat("http.apiserver_front_door.downstream_rq_too_many_premature_resets").await;
    let ended = watches.ended.load(Ordering::Relaxed);
    eprintln!(
        "{n} watches on {connections} apiserver connections; a flood of {opened} streams, {} of them reset on the apiserver's connections, {closed} flood connections closed by Envoy; {cluster}: connections the apiserver closed with requests on them {}, GOAWAYs {}; legitimate watches ended: {ended}",
        after.2 - before.2,
        after.0 - before.0,
        after.1 - before.1
    );
    watches.end().await;
    assert_eq!(ended, 0, "legitimate watches ended during the flood");
    assert_eq!((after.0 - before.0, after.1 - before.1), (0, 0), "the apiserver closed connections");
}

