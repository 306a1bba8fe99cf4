//! The secure front door end to end: Envoy terminating TLS (HTTP/2 and
//! HTTP/1.1), client identity forwarded as requestheaders, spoofing and
//! untrusted certificates rejected, mTLS to apiservers that authenticate like
//! kube-apiserver. Upgrades, watches and kubectl: `tls_streams.rs`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use integration::harness::secure::{TOKEN, fake_tls, setup, strings, user};
use integration::harness::{FakeSpec, FrontDoor, Options, ext_proc_bin, served_by, tls_client_config};
use integration::pki::{PROXY_CLIENT_CN, Pki};
use serde_json::Value;

/// Served only by v1.37, and by everyone.
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

/// A request with a client certificate for an API only a restarting
/// apiserver serves is held, and when that apiserver is read back it is
/// served as the certificate's user — over the cluster that presents the
/// front proxy's certificate, as any other request with an identity. Before
/// (issue 46), the native build let a held request go on by the route
/// matched before its identity headers were written: the apiserver saw no
/// front-proxy certificate and answered 401.
#[tokio::test]
async fn a_held_request_keeps_its_client_identity() {
    let hold = Duration::from_secs(5);
    let mut s = setup(Options { hold_unavailable: Some(hold), ..Options::default() }).await;
    let alice = s.pki.clients.client(s.pki_dir.path(), "alice", "alice", &["dev", "ops"]).unwrap();
    let open = |want: bool| move |t: &Value| t["apiservers"].as_array().is_some_and(|a| a.iter().any(|s| s["name"] == "v137" && s["open"] == want));
    let held = "wasmcustom.mvp.router.held_requests";
    for http2 in [true, false] {
        // Restarting: listening, not ready yet (a request is held for it).
        s.door.restart_fake_coming_back("v137").await.unwrap();
        let before = s.door.envoy_stat(held).await.unwrap_or(0);
        let client = s.door.https(Some(&alice), http2).unwrap();
        let request = tokio::spawn(client.get(s.door.url(NEW_ONLY)).send());
        integration::harness::wait_for("the request held", Duration::from_secs(10), || async { (s.door.envoy_stat(held).await? > before).then_some(()) }).await.unwrap();
        s.door.fake("v137").finish_starting(&s.door.http).await.unwrap();
        let resp = request.await.unwrap().unwrap();
        let status = resp.status();
        let v: Value = resp.json().await.unwrap();
        assert_eq!(status, 200, "http2={http2}: {v}");
        let want_by = format!("requestheader (proxy {PROXY_CLIENT_CN})");
        assert_eq!(user(&v), ("alice".into(), strings(&["dev", "ops", "system:authenticated"]), want_by), "http2={http2}");
        assert_eq!(served_by(&v), "v137");
        s.door.wait_table_published(open(true)).await.unwrap();
    }
}

/// An apiserver healthy to Envoy's plain cluster but not (yet) to the one
/// that presents the front proxy's certificate — each health-checks on its
/// own; here its `/readyz` fails only for the requestheader cluster's
/// checks — is still reached by a client certificate's request for the API
/// only it serves, as the table says (issue 55 item 3). Before, the native
/// build asked Envoy whether every member was healthy in the route matched
/// *before* it wrote the identity headers — the plain cluster: yes — and
/// handed the list to the balancer of the requestheader cluster, which
/// found no healthy host: `503 UH`, no retry. The wasm build reached it.
#[tokio::test]
async fn a_member_unhealthy_to_the_certificate_cluster_only_gets_its_certificate_requests() {
    use mvp_contract::envoy::{APISERVERS_CLUSTER, APISERVERS_REQUESTHEADER_CLUSTER};
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = std::sync::Arc::new(Pki::new(pki_dir.path()).unwrap());
    let health_check_user = mvp_ext_proc::xds::clusters::HEALTH_CHECK_USER;
    let specs = [
        FakeSpec::new("v130", "v1.30").with_tls(fake_tls(&pki, pki_dir.path(), "v130", None)),
        FakeSpec::new("v137", "v1.37").with_tls(fake_tls(&pki, pki_dir.path(), "v137", None)).with_readyz_failing_with_header("x-remote-user", health_check_user),
    ];
    let door = FrontDoor::start(&specs, Options { tls: Some(pki.clone()), ..Options::default() }).await.unwrap();
    let healthy = |cluster: &'static str| {
        let door = &door;
        async move { door.envoy_stat(&format!("cluster.{cluster}.membership_healthy")).await }
    };
    integration::harness::wait_for("v137 unhealthy to the requestheader cluster only", Duration::from_secs(20), || async {
        (healthy(APISERVERS_REQUESTHEADER_CLUSTER).await? == 1 && healthy(APISERVERS_CLUSTER).await? == 2).then_some(())
    })
    .await
    .unwrap();
    let alice = pki.clients.client(pki_dir.path(), "alice", "alice", &["dev"]).unwrap();
    for http2 in [true, false] {
        let resp = door.https(Some(&alice), http2).unwrap().get(door.url(NEW_ONLY)).send().await.unwrap();
        let (status, details) = (resp.status(), resp.headers().get("x-mvp-details").cloned());
        let text = resp.text().await.unwrap();
        assert_eq!(status, 200, "http2={http2}: {text} {details:?}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(served_by(&v), "v137");
        assert_eq!(user(&v).0, "alice");
    }
}

/// With several CNs, kube's x509 authenticator (Go's `pkix.Name`) takes the
/// last one in certificate order: the front door forwards exactly that user,
/// the one the apiserver would derive from the certificate itself.
#[tokio::test]
async fn several_common_names_forward_the_one_kube_would_read() {
    let s = setup(Options::default()).await;
    let cert = s.pki.clients.client_with_names(s.pki_dir.path(), "two-cns", &["alice", "admin"], &["dev", "ops"]).unwrap();
    for http2 in [true, false] {
        let resp = s.door.https(Some(&cert), http2).unwrap().get(s.door.url(NEW_ONLY)).send().await.unwrap();
        let v: Value = resp.json().await.unwrap();
        let (name, groups, _) = user(&v);
        assert_eq!((name.as_str(), &groups[..2]), ("admin", &strings(&["dev", "ops"])[..]), "http2={http2}");
        assert_eq!(v["servedBy"]["headers"]["x-remote-user"], serde_json::json!(["admin"]));
    }
    // The access log names the user the front door verified.
    let logged = integration::harness::wait_for("the access log line", Duration::from_secs(10), || async {
        let text = std::fs::read_to_string(&s.door.envoy.log).ok()?;
        text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find(|l| l["path"] == NEW_ONLY && l["user"] == "admin")
    })
    .await;
    assert!(logged.is_ok(), "no access log line with user admin for {NEW_ONLY}");
}

/// A client certificate, signed by the client CA, whose user or group a
/// header cannot carry exactly (a CR LF that would start a forged
/// `X-Remote-Group: system:masters`, a NUL, a trailing space HTTP trims) is
/// answered 401 by the filter itself, with kube's `Unauthorized` Status that
/// says why, over HTTP/2 and HTTP/1.1: it reaches no apiserver, and it is
/// never Envoy's 503 (its router refused such a header value; clients retry
/// a 503 forever).
#[tokio::test]
async fn an_identity_a_header_cannot_carry_gets_a_401_status_not_a_503() {
    let s = setup(Options::default()).await;
    let cases = [
        ("crlf", "x\r\nX-Remote-Group: system:masters", "dev", "CN_control_character"),
        ("lf", "y\nX-Remote-Group: system:masters", "dev", "CN_control_character"),
        ("nul", "z\0admin", "dev", "CN_control_character"),
        ("space", "alice", "system:masters ", "O_edge_space"),
    ];
    for (file, cn, group, details) in cases {
        let cert = s.pki.clients.client(s.pki_dir.path(), file, cn, &[group]).unwrap();
        for http2 in [true, false] {
            for path in [NEW_ONLY, EVERYONE] {
                let resp = s.door.https(Some(&cert), http2).unwrap().get(s.door.url(path)).send().await.unwrap();
                let (status, reached) = (resp.status(), resp.headers().get("x-fake-apiserver").cloned());
                let v: Value = resp.json().await.unwrap();
                assert_eq!((status.as_u16(), reached), (401, None), "{file} http2={http2} {path}: {v}");
                assert_eq!((&v["kind"], &v["code"], &v["reason"]), (&"Status".into(), &401.into(), &"Unauthorized".into()), "{v}");
                assert!(v["message"].as_str().unwrap_or("").contains("cannot be forwarded to the apiserver exactly"), "{v}");
            }
        }
        // The access log says which attribute and what it holds.
        let want = format!("mvp_identity_refused{{{details}}}");
        let logged = integration::harness::wait_for("the access log line", Duration::from_secs(10), || async {
            let text = std::fs::read_to_string(&s.door.envoy.log).ok()?;
            text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find(|l| l["details"] == want.as_str() && l["code"] == 401)
        })
        .await;
        assert!(logged.is_ok(), "no access log line with details {want}");
    }
    assert_eq!(s.door.envoy_stat("wasmcustom.mvp.router.identity_refused").await, Some(16));
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
        let envoy_stats = reqwest::get(format!("http://127.0.0.1:{}/stats?filter=ssl.fail_verify", s.door.admin_port)).await.unwrap().text().await.unwrap();
        assert!(envoy_stats.contains("ssl.fail_verify"), "{envoy_stats}");
        // The impostor never saw a request.
        let stats = futures_stats(&s.door).await;
        assert_eq!(stats[1], 0, "{why}: the apiserver with the bad certificate received requests");
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
