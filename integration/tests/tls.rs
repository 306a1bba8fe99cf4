//! The secure front door end to end: Envoy terminating TLS (HTTP/2 and
//! HTTP/1.1), client identity forwarded as requestheaders, mTLS to
//! apiservers that authenticate like kube-apiserver, upgrades and watches.
//! Certificates are generated per test (rcgen).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration::harness::{FakeSpec, FakeTls, FrontDoor, Options, ext_proc_bin, kubectl_137, served_by, tls_client_config};
use integration::pki::{Leaf, PROXY_CLIENT_CN, Pki};
use serde_json::Value;

const TOKEN: &str = "t0ken-of-tina";

fn fake_tls(pki: &Pki, dir: &Path, name: &str, serving: Option<Leaf>) -> FakeTls {
    FakeTls {
        serving: serving.unwrap_or_else(|| pki.apiserver(dir, name).unwrap()),
        client_ca: pki.clients.cert_file.clone(),
        requestheader_ca: pki.requestheader.cert_file.clone(),
        requestheader_allowed_names: vec![PROXY_CLIENT_CN.into()],
        tokens: vec![format!("{TOKEN}=tina:token-team")],
    }
}

struct Setup {
    pki_dir: tempfile::TempDir,
    pki: Arc<Pki>,
    door: FrontDoor,
}

async fn setup(options: Options) -> Setup {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Arc::new(Pki::new(pki_dir.path()).unwrap());
    let specs: Vec<FakeSpec> = [("v130", "v1.30"), ("v137", "v1.37")]
        .iter()
        .map(|(n, r)| FakeSpec::new(n, r).with_tls(fake_tls(&pki, pki_dir.path(), n, None)))
        .collect();
    let door = FrontDoor::start(&specs, Options { tls: Some(pki.clone()), ..options }).await.unwrap();
    Setup { pki_dir, pki, door }
}

fn user(v: &Value) -> (String, Vec<String>, String) {
    let u = &v["servedBy"]["user"];
    (
        u["name"].as_str().unwrap_or("").to_string(),
        u["groups"].as_array().map(|g| g.iter().map(|x| x.as_str().unwrap_or("").to_string()).collect()).unwrap_or_default(),
        u["authenticatedBy"].as_str().unwrap_or("").to_string(),
    )
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

const NEW_ONLY: &str = "/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests";
const EVERYONE: &str = "/api/v1/namespaces/default/pods";

/// A client certificate's CN and O reach the apiserver as the requestheader
/// user and groups, over HTTP/2 and HTTP/1.1, on routed and load-balanced
/// requests alike; a bearer token passes through untouched.
#[tokio::test]
async fn client_certificate_and_token_identities_reach_the_apiserver() {
    let s = setup(Options::default()).await;
    let alice = s.pki.clients.client(s.pki_dir.path(), "alice", "alice", &["dev", "ops"]).unwrap();
    for http2 in [true, false] {
        let client = s.door.https(Some(&alice), http2).unwrap();
        for path in [NEW_ONLY, EVERYONE] {
            let resp = client.get(s.door.url(path)).send().await.unwrap();
            assert_eq!(resp.version(), if http2 { reqwest::Version::HTTP_2 } else { reqwest::Version::HTTP_11 });
            assert_eq!(resp.status(), 200, "{path}");
            let v: Value = resp.json().await.unwrap();
            let want_by = format!("requestheader (proxy {PROXY_CLIENT_CN})");
            assert_eq!(user(&v), ("alice".into(), strings(&["dev", "ops", "system:authenticated"]), want_by), "{path}");
            if path == NEW_ONLY {
                assert_eq!(served_by(&v), "v137");
            }
        }
        let client = s.door.https(None, http2).unwrap();
        let resp = client.get(s.door.url(NEW_ONLY)).bearer_auth(TOKEN).send().await.unwrap();
        let v: Value = resp.json().await.unwrap();
        assert_eq!(user(&v), ("tina".into(), strings(&["token-team", "system:authenticated"]), "token".into()));
        assert_eq!(v["servedBy"]["headers"]["authorization"][0], format!("Bearer {TOKEN}"));
        // No credentials at all: the apiserver's 401.
        let resp = client.get(s.door.url(NEW_ONLY)).send().await.unwrap();
        assert_eq!(resp.status(), 401);
        // Peer-aggregated discovery over TLS, for an authenticated client.
        let resp = s
            .door
            .https(Some(&alice), http2)
            .unwrap()
            .get(s.door.url("/apis"))
            .header("accept", mvp_ext_proc::apidiscovery::JSON_CONTENT_TYPE)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let doc = resp.text().await.unwrap();
        assert!(doc.contains("lifecycle.k8s.io") && doc.contains("\"v1beta3\""), "not the merged document");
    }
}

/// Identity and routing headers a client sends never reach an apiserver,
/// and a certificate from an untrusted CA cannot even connect.
#[tokio::test]
async fn spoofed_identity_and_routing_headers_and_untrusted_certificates_are_rejected() {
    let s = setup(Options::default()).await;
    let alice = s.pki.clients.client(s.pki_dir.path(), "alice", "alice", &["dev"]).unwrap();
    let v130 = s.door.fake("v130").address();
    let spoof = |req: reqwest::RequestBuilder| {
        req.header("X-Remote-User", "system:admin")
            .header("X-Remote-Group", "system:masters")
            .header("X-Remote-Extra-Scopes", "everything")
            .header("x-mvp-route", v130.as_str())
            .header("x-kubernetes-peer-proxied", "true")
    };
    // With a certificate: its identity, and only its.
    let resp = spoof(s.door.https(Some(&alice), true).unwrap().get(s.door.url(NEW_ONLY))).send().await.unwrap();
    let v: Value = resp.json().await.unwrap();
    assert_eq!(served_by(&v), "v137");
    assert_eq!(user(&v).0, "alice");
    assert_eq!(v["servedBy"]["headers"]["x-remote-user"], serde_json::json!(["alice"]));
    assert_eq!(v["servedBy"]["headers"]["x-remote-group"], serde_json::json!(["dev"]));
    assert!(v["servedBy"]["headers"].get("x-remote-extra-scopes").is_none());
    // With a token: the token's identity, and no x-remote-* at all.
    let resp = spoof(s.door.https(None, false).unwrap().get(s.door.url(EVERYONE)).bearer_auth(TOKEN)).send().await.unwrap();
    let v: Value = resp.json().await.unwrap();
    assert_eq!(user(&v).0, "tina");
    let text = v["servedBy"]["headers"].to_string();
    assert!(!text.contains("system:admin") && !text.contains("system:masters") && !text.contains("x-remote-"), "{text}");
    // With nothing: 401, the spoofed headers did not authenticate anyone.
    let resp = spoof(s.door.https(None, true).unwrap().get(s.door.url(NEW_ONLY))).send().await.unwrap();
    assert_eq!(resp.status(), 401);

    // A certificate from an untrusted CA: the handshake fails; no apiserver
    // ever sees a request.
    let before: Vec<u64> = futures_stats(&s.door).await;
    let mallory = s.pki.evil.client(s.pki_dir.path(), "mallory", "system:admin", &["system:masters"]).unwrap();
    for http2 in [true, false] {
        let err = s.door.https(Some(&mallory), http2).unwrap().get(s.door.url(NEW_ONLY)).send().await;
        assert!(err.is_err(), "untrusted client certificate was accepted: {err:?}");
    }
    assert_eq!(futures_stats(&s.door).await, before);
}

/// Resource requests each fake apiserver received (read directly, trusting
/// the impostor's CA too).
async fn futures_stats(door: &FrontDoor) -> Vec<u64> {
    let pki = door.tls.as_ref().unwrap();
    let both = door.dir.path().join("serving-and-evil-ca.crt");
    std::fs::write(&both, format!("{}{}", pki.serving.pem(), pki.evil.pem())).unwrap();
    let mut out = Vec::new();
    for f in &door.fakes {
        let client = reqwest::Client::builder().use_preconfigured_tls(tls_client_config(&both, None, &[b"http/1.1"]).unwrap()).build().unwrap();
        let v: Value = client.get(format!("{}/__fake/stats", f.url())).bearer_auth(TOKEN).send().await.unwrap().json().await.unwrap();
        out.push(v["resourceRequests"].as_u64().unwrap());
    }
    out
}

/// An apiserver whose certificate is from another CA, or names another
/// host, never gets the request: the client gets a 503 Status for what only
/// it serves, and requests others can serve go to them.
#[tokio::test]
async fn wrong_apiserver_certificates_fail_closed() {
    // A long refresh keeps v137 in the table as it was discovered with its
    // good certificate, so Envoy itself must refuse the bad one.
    let mut s = setup(Options { refresh_interval: Duration::from_secs(3600), ..Options::default() }).await;
    let bad_certs = [
        ("other CA", s.pki.evil.server(s.pki_dir.path(), "evil-apiserver", &["kubernetes.default.svc"], &["127.0.0.1"]).unwrap()),
        ("wrong SAN", s.pki.serving.server(s.pki_dir.path(), "wrong-san", &["wrong.example"], &["127.0.0.1"]).unwrap()),
    ];
    let alice = s.pki.clients.client(s.pki_dir.path(), "alice", "alice", &[]).unwrap();
    for (why, cert) in bad_certs {
        let spec = FakeSpec::new("v137", "v1.37").with_tls(fake_tls(&s.pki, s.pki_dir.path(), "v137", Some(cert)));
        s.door.restart_fake("v137", spec).await.unwrap();
        let client = s.door.https(Some(&alice), true).unwrap();
        for _ in 0..3 {
            let resp = client.get(s.door.url(NEW_ONLY)).send().await.unwrap();
            assert_eq!(resp.status(), 503, "{why}");
            let v: Value = resp.json().await.unwrap();
            assert_eq!((v["kind"].as_str(), v["reason"].as_str(), v["code"].as_u64()), (Some("Status"), Some("ServiceUnavailable"), Some(503)), "{why}");
            let resp = client.get(s.door.url(EVERYONE)).send().await.unwrap();
            assert_eq!(resp.status(), 200, "{why}");
            assert_eq!(served_by(&resp.json().await.unwrap()), "v130", "{why}");
        }
        let envoy_stats = reqwest::get(format!("http://127.0.0.1:{}/stats?filter=cluster.apiservers.ssl", s.door.admin_port)).await.unwrap().text().await.unwrap();
        assert!(envoy_stats.contains("ssl.fail_verify"), "{envoy_stats}");
        // The impostor never saw a request.
        let stats = futures_stats(&s.door).await;
        assert_eq!(stats[1], 0, "{why}: the apiserver with the bad certificate received requests");
    }
}

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
    let config = Arc::new(tls_client_config(&s.pki.serving.cert_file, Some(&alice), &[b"http/1.1"]).unwrap());
    let connect = || {
        let config = config.clone();
        let port = s.door.listen_port;
        async move {
            let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            tokio_rustls::TlsConnector::from(config).connect(name, tcp).await.unwrap()
        }
    };

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

fn kubeconfig(dir: &Path, server: &str, ca: &Path, user: &str) -> std::path::PathBuf {
    let path = dir.join(format!("kubeconfig-{}", user.len()));
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: mvp\n  cluster:\n    server: {server}\n    certificate-authority: {}\ncontexts:\n- name: mvp\n  context:\n    cluster: mvp\n    user: u\nusers:\n- name: u\n  user:\n{user}\ncurrent-context: mvp\n",
        ca.display()
    );
    std::fs::write(&path, text).unwrap();
    path
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

/// Bad certificates, wrong keys and missing files are errors at start that
/// name the file.
#[test]
fn bad_certificate_files_are_clear_errors_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path()).unwrap();
    let other = pki.clients.client(dir.path(), "other", "x", &[]).unwrap();
    let missing = dir.path().join("missing.crt");
    let junk = dir.path().join("junk.crt");
    std::fs::write(&junk, "this is not a certificate").unwrap();
    let base = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = ["envoy-config", "--apiserver", "a=https://127.0.0.1:6443", "--listen", "127.0.0.1:1", "--wasm", "w.wasm", "--ext-proc", "127.0.0.1:2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let p = |p: &Path| p.to_string_lossy().into_owned();
    let ca = p(&pki.serving.cert_file);
    let cases: Vec<(Vec<String>, String)> = vec![
        (base(&[]), "need --peer-ca-file".into()),
        (base(&["--peer-ca-file", &p(&missing)]), format!("--peer-ca-file {}: cannot read", p(&missing))),
        (base(&["--peer-ca-file", &p(&junk)]), format!("--peer-ca-file {}: holds no PEM", p(&junk))),
        (
            base(&["--peer-ca-file", &ca, "--proxy-client-cert-file", &p(&pki.proxy_client.cert_file), "--proxy-client-key-file", &p(&other.key_file)]),
            format!("--proxy-client-key-file {}: does not belong", p(&other.key_file)),
        ),
        (
            base(&["--peer-ca-file", &ca, "--tls-cert-file", &p(&pki.front_door.cert_file), "--tls-private-key-file", &p(&missing)]),
            format!("--tls-private-key-file {}: cannot read", p(&missing)),
        ),
        (
            base(&["--peer-ca-file", &ca, "--tls-cert-file", &p(&pki.front_door.cert_file), "--tls-private-key-file", &p(&pki.front_door.key_file), "--client-ca-file", &ca]),
            "--client-ca-file forwards client identities".into(),
        ),
        (
            vec!["serve".into(), "--apiserver".into(), "a=https://127.0.0.1:6443".into(), "--grpc-listen".into(), "127.0.0.1:0".into(), "--peer-ca-file".into(), p(&junk)],
            format!("--peer-ca-file {}", p(&junk)),
        ),
    ];
    for (args, want) in cases {
        let out = Command::new(ext_proc_bin().unwrap()).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(&want), "{args:?}\nwant: {want}\ngot: {err}");
    }
}
