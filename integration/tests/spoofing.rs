//! No request reaches a host outside the apiserver set, whatever a client
//! sends: a trap listener on another local port records every connection
//! while routing and identity headers, Host/authority, absolute-form and
//! CONNECT requests and path tricks name it, over HTTP/1.1 and h2.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use integration::harness::{FakeSpec, FrontDoor, Options};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn nothing_a_client_sends_reaches_a_host_outside_the_apiservers() {
    let door = FrontDoor::start(&[FakeSpec::new("v130", "v1.30"), FakeSpec::new("v137", "v1.37")], Options::default()).await.unwrap();
    let trap = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let trap_addr = trap.local_addr().unwrap().to_string();
    let caught = Arc::new(AtomicU64::new(0));
    let counter = caught.clone();
    let trap_task = tokio::spawn(async move {
        while let Ok((_s, _)) = trap.accept().await {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    });

    let t = trap_addr.as_str();
    let v137 = door.fake("v137").address();
    let headers: Vec<(&str, String)> = vec![
        ("x-mvp-route", t.into()),
        ("X-MVP-ROUTE", t.into()),
        ("x-Mvp-Route", format!("{t},{t}")),
        ("x-mvp-route", format!(" {t}")),
        ("x-mvp-route", format!("{v137},{t}")),
        ("x-mvp-route", format!("{t},{v137}")),
        ("x_mvp_route", t.into()),
        ("x-envoy-original-dst-host", t.into()),
        ("x-envoy-upstream-rq-timeout-ms", "1".into()),
        ("x-envoy-retry-on", "5xx".into()),
        ("x-envoy-internal", "true".into()),
        ("x-forwarded-host", t.into()),
        ("x-kubernetes-peer-proxied", "true".into()),
        ("host", t.into()),
    ];
    let paths = [
        "/apis/lifecycle.k8s.io/v1alpha1/evictionrequests",
        "/api/v1/namespaces/default/pods",
        "/apis/nope.example/v1/things",
        "//127.0.0.1/api",
        "/..%2F..%2Fapi",
        "/api/v1/namespaces/default/pods/%2e%2e",
        "/apis",
        "/openapi/v2",
        "/healthz",
    ];
    let mut attempts = 0;
    for client in [&door.http, &door.h2c] {
        for path in paths {
            for (name, value) in &headers {
                let req = client.get(door.url(path)).header(*name, value.as_str());
                // Only the status matters: whatever the answer, it came
                // from an apiserver or from Envoy, never from the trap.
                let _ = req.send().await;
                attempts += 1;
            }
            // Everything at once, duplicated.
            let mut req = client.get(door.url(path));
            for (name, value) in &headers {
                req = req.header(*name, value.as_str()).header(*name, value.as_str());
            }
            if std::ptr::eq(client, &door.h2c) {
                // h2 forbids duplicated Host/:authority: Envoy resets the
                // stream (and the client waits a second to reconnect).
                continue;
            }
            let resp = req.send().await.unwrap();
            assert!(resp.status().as_u16() < 500, "{path}: {}", resp.status());
            attempts += 1;
        }
    }
    // Raw HTTP/1.1 forms reqwest will not send: absolute-form targets,
    // CONNECT, Host naming the trap.
    let port = door.url("").rsplit(':').next().unwrap().trim_end_matches('/').to_string();
    for raw in [
        format!("GET http://{t}/api HTTP/1.1\r\nHost: {t}\r\nConnection: close\r\n\r\n"),
        format!("GET http://{t}/apis/lifecycle.k8s.io/v1alpha1/evictionrequests HTTP/1.1\r\nHost: 127.0.0.1\r\nx-mvp-route: {t}\r\nConnection: close\r\n\r\n"),
        format!("CONNECT {t} HTTP/1.1\r\nHost: {t}\r\n\r\n"),
        format!("GET /api HTTP/1.1\r\nHost: {t}\r\nX-MVP-Route: {t}\r\nx-mvp-route: {t}\r\nConnection: close\r\n\r\n"),
        format!("GET /api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1\r\nx-mvp-route:{t}\r\nConnection: close\r\n\r\n"),
    ] {
        let mut s = tokio::net::TcpStream::connect(format!("127.0.0.1:{port}")).await.unwrap();
        s.write_all(raw.as_bytes()).await.unwrap();
        // Until the answer's head has arrived (CONNECT keeps the
        // connection open).
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            let mut chunk = [0u8; 4096];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await;
        assert!(buf.starts_with(b"HTTP/1.1 "), "no answer to {raw:?}");
        attempts += 1;
    }
    // Anything Envoy might still be doing with a request has finished:
    // every answer above was read.
    trap_task.abort();
    eprintln!("{attempts} spoofing attempts, {} connections to the trap", caught.load(Ordering::Relaxed));
    assert!(attempts >= 250, "{attempts}");
    assert_eq!(caught.load(Ordering::Relaxed), 0, "a request reached a host outside the apiserver set");
}
