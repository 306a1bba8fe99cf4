//! The secure front door with long-lived and upgraded streams and real
//! kubectl: exec over WebSocket and port-forward over SPDY carry the
//! caller's identity, watches stream as written, kubectl works with
//! certificate and token kubeconfigs.


use std::process::Command;
use std::time::{Duration, Instant};

use integration::harness::secure::{TOKEN, connect, kubeconfig, setup, strings, user};
use integration::harness::{Options, kubectl_137, served_by};
use serde_json::Value;

/// Served only by v1.37, and by everyone.
const NEW_ONLY: &str = "/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests";
const EVERYONE: &str = "/api/v1/namespaces/default/pods";

/// exec over WebSocket and port-forward over SPDY go through with the
/// caller's identity and stream both ways (kube's own peer proxy loses the
/// identity on upgrades).
#[tokio::test]
async fn exec_over_websocket_and_portforward_over_spdy_carry_the_identity() {
    use futures::{SinkExt, StreamExt};
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest};

    let s = setup(Options::default()).await;
    let alice = s.pki.clients.client(s.pki_dir.path(), "alice", "alice", &["dev"]).unwrap();
    let connect = || async { connect(&s.door, Some(&alice)).await.unwrap() };

    // WebSocket exec.
    let url = format!("wss://127.0.0.1:{}/api/v1/namespaces/default/pods/p1/exec?command=sh&stdin=true&stdout=true", s.door.listen_port);
    let mut req = url.into_client_request().unwrap();
    req.headers_mut().insert("Sec-WebSocket-Protocol", "v5.channel.k8s.io".parse().unwrap());
    let (mut ws, resp) = tokio_tungstenite::client_async(req, connect().await).await.unwrap();
    assert_eq!(resp.headers()["sec-websocket-protocol"], "v5.channel.k8s.io");
    let hello: Value = match ws.next().await.unwrap().unwrap() {
        Message::Text(t) => serde_json::from_str(&t).unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(hello["user"]["name"], "alice");
    assert_eq!(hello["user"]["groups"], serde_json::json!(["dev", "system:authenticated"]));
    for i in 0..3u8 {
        let payload = vec![0, b'h', b'i', i];
        ws.send(Message::Binary(payload.clone().into())).await.unwrap();
        match ws.next().await.unwrap().unwrap() {
            Message::Binary(b) => assert_eq!(b.to_vec(), payload),
            other => panic!("{other:?}"),
        }
    }
    ws.close(None).await.unwrap();

    // SPDY/3.1 port-forward: the upgrade tunnel, both directions.
    let mut tls = connect().await;
    let request = format!(
        "POST /api/v1/namespaces/default/pods/p1/portforward HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: portforward.k8s.io\r\nContent-Length: 0\r\n\r\n",
        s.door.listen_port
    );
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut reader = tokio::io::BufReader::new(tls);
    let mut status = String::new();
    reader.read_line(&mut status).await.unwrap();
    assert!(status.starts_with("HTTP/1.1 101"), "{status}");
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).await.unwrap();
        if line == "\r\n" {
            break;
        }
    }
    let mut hello = String::new();
    reader.read_line(&mut hello).await.unwrap();
    let hello: Value = serde_json::from_str(&hello).unwrap();
    assert_eq!(hello["user"]["name"], "alice");
    reader.get_mut().write_all(b"ping-pong").await.unwrap();
    let mut echo = [0u8; 9];
    reader.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"ping-pong");
}

/// Watch events arrive as the apiserver sends them, not when the stream ends.
#[tokio::test]
async fn watches_stream_without_buffering() {
    let s = setup(Options::default()).await;
    let alice = s.pki.clients.client(s.pki_dir.path(), "alice", "alice", &[]).unwrap();
    for http2 in [true, false] {
        let client = s.door.https(Some(&alice), http2).unwrap();
        let started = Instant::now();
        let mut resp = client.get(s.door.url(&format!("{NEW_ONLY}?watch=true&bookmarks=6"))).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let first = resp.chunk().await.unwrap().unwrap();
        let first_at = started.elapsed();
        let event: Value = serde_json::from_slice(first.split(|b| *b == b'\n').next().unwrap()).unwrap();
        assert_eq!(event["type"], "ADDED");
        let mut lines = first.iter().filter(|b| **b == b'\n').count();
        while let Some(c) = resp.chunk().await.unwrap() {
            lines += c.iter().filter(|b| **b == b'\n').count();
        }
        let end_at = started.elapsed();
        assert_eq!(lines, 7);
        // Six bookmarks 100 ms apart: the stream lasts ≥ 600 ms; the first
        // event must not wait for that.
        assert!(end_at >= Duration::from_millis(600), "{end_at:?}");
        assert!(first_at + Duration::from_millis(400) < end_at, "first event after {first_at:?}, stream ended after {end_at:?}");
    }
}

/// kubectl over TLS, with a client-certificate kubeconfig and with a
/// bearer-token kubeconfig: the apiserver sees the right user and groups,
/// also on a request routed to the only apiserver that serves it.
#[tokio::test]
async fn kubectl_over_tls_with_certificate_and_token_kubeconfigs() {
    let s = setup(Options::default()).await;
    let bob = s.pki.clients.client(s.pki_dir.path(), "bob", "bob", &["platform", "oncall"]).unwrap();
    let dir = s.pki_dir.path();
    let server = s.door.url("");
    let ca = &s.pki.serving.cert_file;
    let cert_user = format!("    client-certificate: {}\n    client-key: {}", bob.cert_file.display(), bob.key_file.display());
    let token_user = format!("    token: {TOKEN}");
    let configs = [
        (kubeconfig(dir, &server, ca, &cert_user), ("bob", vec!["platform", "oncall", "system:authenticated"])),
        (kubeconfig(dir, &server, ca, &token_user), ("tina", vec!["token-team", "system:authenticated"])),
    ];
    let preinstalled = {
        let out = Command::new("sh").args(["-c", "command -v kubectl"]).output().unwrap();
        std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    };
    for kubectl in [preinstalled, kubectl_137().unwrap()] {
        for (config, (name, groups)) in &configs {
            for (path, server_name) in [(NEW_ONLY, Some("v137")), ("/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas", Some("v130")), (EVERYONE, None)] {
                let out = Command::new(&kubectl)
                    .arg("--kubeconfig")
                    .arg(config)
                    .args(["get", "--raw", path])
                    .env("KUBECACHEDIR", dir.join("kube-cache"))
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{} {path}: {}", kubectl.display(), String::from_utf8_lossy(&out.stderr));
                let v: Value = serde_json::from_slice(&out.stdout).unwrap();
                let (u, g, _) = user(&v);
                assert_eq!((u.as_str(), g), (*name, strings(groups)), "{} {path}", kubectl.display());
                if let Some(sn) = server_name {
                    assert_eq!(served_by(&v), sn);
                }
            }
        }
    }
}
