//! Live membership behind the secure front door (real Envoy, loopback):
//! a member that joins gets the same upstream mTLS, SNI and SAN checks as
//! the seed, an exec stream is not interrupted by the push, and rotated
//! peer credentials reach Envoy over CDS — a broken rotation is rejected
//! (NACK, counted) and changes nothing.

use std::path::Path;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use integration::harness::secure::{connect, fake_tls, setup, user};
use integration::harness::{FakeSpec, FrontDoor, Options, served_by, wait_for};
use integration::pki::{Leaf, Pki};
use serde_json::Value;
use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest};

/// Served only by v1.37.
const NEW_ONLY: &str = "/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests";

type Exec = tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

/// A WebSocket exec into a pod every release serves, as `identity`: the
/// stream and the apiserver that answered.
async fn exec(door: &FrontDoor, identity: &Leaf) -> (Exec, String) {
    let url = format!("wss://127.0.0.1:{}/api/v1/namespaces/default/pods/p1/exec?command=sh&stdin=true&stdout=true", door.listen_port);
    let mut req = url.into_client_request().unwrap();
    req.headers_mut().insert("Sec-WebSocket-Protocol", "v5.channel.k8s.io".parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::client_async(req, connect(door, Some(identity)).await.unwrap()).await.unwrap();
    let hello: Value = match ws.next().await.unwrap().unwrap() {
        Message::Text(t) => serde_json::from_str(&t).unwrap(),
        other => panic!("{other:?}"),
    };
    let server = hello["server"].as_str().unwrap_or_default().to_string();
    (ws, server)
}

async fn echoes(ws: &mut Exec, round: u8) {
    let payload = vec![0, b'r', round];
    ws.send(Message::Binary(payload.clone().into())).await.unwrap();
    match ws.next().await.unwrap().unwrap() {
        Message::Binary(b) => assert_eq!(b.to_vec(), payload, "the exec stream answered something else"),
        other => panic!("the exec stream was interrupted: {other:?}"),
    }
}

async fn metrics(door: &FrontDoor) -> String {
    door.http.get(format!("http://127.0.0.1:{}/metrics", door.metrics_port)).send().await.unwrap().text().await.unwrap()
}

fn counter(metrics: &str, series: &str) -> u64 {
    metrics.lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok()).unwrap_or(0)
}

/// Replaces a file at once (rename), as a Secret volume or cert-manager does.
fn replace(path: &Path, contents: &[u8]) {
    let tmp = path.with_extension("rotating");
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A member that joins through the cluster's own objects is reached over the
/// same mTLS as the seed (its certificate checked against the peer CA for
/// the SNI name, the caller's identity carried by requestheader), within
/// the same bound as over plain HTTP; an exec stream open on another member
/// keeps working across the push.
#[tokio::test]
async fn a_member_joins_over_mtls_while_an_exec_stream_runs() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = std::sync::Arc::new(Pki::new(pki_dir.path()).unwrap());
    let specs: Vec<FakeSpec> =
        [("v130", "v1.30"), ("v133", "v1.33")].iter().map(|(n, r)| FakeSpec::new(n, r).with_tls(fake_tls(&pki, pki_dir.path(), n, None))).collect();
    let mut door = FrontDoor::start(&specs, Options { tls: Some(pki.clone()), membership: Some("endpoints,leases"), ..Options::default() }).await.unwrap();
    let alice = pki.clients.client(pki_dir.path(), "alice", "alice", &["dev"]).unwrap();
    let client = door.https(Some(&alice), true).unwrap();
    let (status, _) = door.get_json(&client, NEW_ONLY).await.unwrap();
    assert_eq!(status, 404, "nobody serves it yet");
    let (mut ws, exec_server) = exec(&door, &alice).await;
    echoes(&mut ws, 0).await;
    let uptime = door.envoy_stat("server.uptime").await.unwrap_or(0);

    let started = Instant::now();
    door.add_fake(FakeSpec::new("v137", "v1.37").with_tls(fake_tls(&pki, pki_dir.path(), "v137", None))).await.unwrap();
    let url = door.url(NEW_ONLY);
    let v = wait_for("the new member to be routed to over mTLS", Duration::from_secs(2), || async {
        let v: Value = client.get(&url).send().await.ok()?.json().await.ok()?;
        (served_by(&v) == "v137").then_some(v)
    })
    .await
    .unwrap();
    eprintln!("joined over mTLS → routed in {:?}; exec stream on {exec_server}", started.elapsed());
    let (name, groups, how) = user(&v);
    assert_eq!((name.as_str(), groups), ("alice", vec!["dev".to_string(), "system:authenticated".to_string()]));
    assert!(how.starts_with("requestheader"), "{how}");
    for round in 1..4 {
        echoes(&mut ws, round).await;
    }
    ws.close(None).await.unwrap();
    assert!(door.envoy_stat("server.uptime").await.unwrap_or(0) >= uptime, "Envoy was restarted");
    assert_eq!(door.envoy_stat("cluster_manager.cds.update_rejected").await, Some(0));
}

/// Rotated peer credentials reach Envoy without a restart (the clusters
/// carry the files' digest, so CDS pushes a new version and Envoy loads the
/// files again), and a watch through the rotation keeps streaming. A broken
/// rotation — garbage where the proxy client certificate was — is rejected
/// by Envoy (NACK, counted) and by mvp-ext-proc's own discovery, and
/// changes nothing: routing, identity and discovery go on with the last
/// good credentials until the file is fixed.
#[tokio::test]
async fn rotated_peer_credentials_reach_envoy_and_a_broken_rotation_changes_nothing() {
    let s = setup(Options::default()).await;
    let door = &s.door;
    let alice = s.pki.clients.client(s.pki_dir.path(), "alice", "alice", &[]).unwrap();
    let client = door.https(Some(&alice), true).unwrap();
    let routed = || async {
        let (status, v) = door.get_json(&client, NEW_ONLY).await.unwrap();
        assert_eq!((status, served_by(&v)), (200, "v137"), "{v}");
        assert_eq!(user(&v).0, "alice");
    };
    // A watch that would stream bookmarks for 30 s.
    let mut watch = client.get(door.url(&format!("{NEW_ONLY}?watch=1&bookmarks=300"))).send().await.unwrap();
    assert_eq!(watch.status(), 200);
    watch.chunk().await.unwrap().unwrap();
    let cds = |stat: &'static str| door.envoy_stat(stat);
    let accepted = cds("cluster_manager.cds.update_success").await.unwrap_or(0);

    // 1. The trust bundle grows by a second CA (the first step of a CA
    //    rotation).
    let ca_file = &s.pki.serving.cert_file;
    let original_ca = std::fs::read(ca_file).unwrap();
    let mut bundle = original_ca.clone();
    bundle.extend_from_slice(s.pki.evil.pem().as_bytes());
    replace(ca_file, &bundle);
    wait_for("Envoy to accept the rotated clusters", Duration::from_secs(10), || async {
        (cds("cluster_manager.cds.update_success").await? > accepted).then_some(())
    })
    .await
    .unwrap();
    let m = metrics(door).await;
    assert_eq!(counter(&m, "mvp_peer_tls_reloads_total{result=\"loaded\"}"), 1, "{m}");
    routed().await;

    // 2. Garbage where the proxy client certificate was.
    let cert_file = &s.pki.proxy_client.cert_file;
    let good_cert = std::fs::read(cert_file).unwrap();
    replace(cert_file, b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n");
    wait_for("Envoy to reject the broken rotation (NACK)", Duration::from_secs(10), || async {
        let m = metrics(door).await;
        (counter(&m, "mvp_xds_nacks_total{type=\"cluster\"}") >= 1).then_some(())
    })
    .await
    .unwrap();
    assert!(cds("cluster_manager.cds.update_rejected").await.unwrap_or(0) >= 1);
    let m = metrics(door).await;
    assert_eq!(counter(&m, "mvp_peer_tls_reloads_total{result=\"rejected\"}"), 1, "{m}");
    let errors_before: u64 = m.lines().filter(|l| l.starts_with("apiserver_peer_discovery_sync_errors_total{")).filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok()).sum();
    // Old configuration kept: routed, with the caller's identity, and
    // discovery still reads both members.
    for _ in 0..5 {
        routed().await;
    }
    door.wait_table_published(|t| t["apiservers"].as_array().is_some_and(|a| a.iter().all(|s| s["healthy"] == true))).await.unwrap();
    let m = metrics(door).await;
    let errors_after: u64 = m.lines().filter(|l| l.starts_with("apiserver_peer_discovery_sync_errors_total{")).filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok()).sum();
    assert_eq!(errors_before, errors_after, "discovery failed with the last good credentials: {m}");

    // 3. Fixed: accepted again, and the NACK stays a single event.
    let accepted = cds("cluster_manager.cds.update_success").await.unwrap_or(0);
    replace(cert_file, &good_cert);
    replace(ca_file, &original_ca);
    wait_for("Envoy to accept the fixed clusters", Duration::from_secs(10), || async {
        (cds("cluster_manager.cds.update_success").await? > accepted).then_some(())
    })
    .await
    .unwrap();
    routed().await;
    let m = metrics(door).await;
    assert_eq!(counter(&m, "mvp_xds_nacks_total{type=\"cluster\"}"), 1, "{m}");

    // The watch streamed through all of it.
    let mut lines = 0;
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        let chunk = tokio::time::timeout(Duration::from_secs(2), watch.chunk()).await.expect("the watch stalled").unwrap();
        lines += chunk.expect("the watch ended during the rotation").iter().filter(|b| **b == b'\n').count();
    }
    assert!(lines >= 3, "the watch stopped streaming ({lines} events in 1 s)");
}
