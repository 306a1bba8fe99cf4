//! The control channel between Envoy and mvp-ext-proc (ADS, `GetTable`,
//! ext_proc) over TCP with mutual TLS (issue 47 item 2): before, it was
//! plaintext h2c, and anyone who reached the port read the apiservers'
//! addresses, held streams, or — on the path — served Envoy xDS of their
//! own. Now only a client with a certificate from the control channel's CA
//! (Envoy's) gets past the handshake, Envoy accepts only an mvp-ext-proc
//! certificate of that CA and name, and both sides take rotated files
//! without a restart. The set comes from `mvp-ext-proc certs`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use integration::harness::{FrontDoor, Options, ext_proc_bin, three_fakes, tls_client_config, wait_for};
use integration::pki::{Leaf, Pki};

/// Only v1.37 serves it: a request the table pins.
const NEW_ONLY: &str = "/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests";

fn certs(dir: &Path) {
    let out = std::process::Command::new(ext_proc_bin().unwrap()).args(["certs", "--out"]).arg(dir).args(["--server-ip", "127.0.0.1"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A front door whose mvp-ext-proc serves its gRPC port with the set in
/// `dir` and whose Envoy reaches it with Envoy's half of it.
async fn door(dir: &Path) -> FrontDoor {
    let f = |name: &str| dir.join(name).display().to_string();
    let options = Options {
        ext_proc_args: vec!["--tls-cert-file".into(), f("server.crt"), "--tls-private-key-file".into(), f("server.key"), "--client-ca-file".into(), f("ca.crt")],
        envoy_config_args: vec![
            "--ext-proc-ca-file".into(),
            f("ca.crt"),
            "--ext-proc-cert-file".into(),
            f("envoy.crt"),
            "--ext-proc-key-file".into(),
            f("envoy.key"),
            "--sds-dir".into(),
            f("sds"),
        ],
        ..Options::default()
    };
    FrontDoor::start(&three_fakes(), options).await.unwrap()
}

fn envoy_leaf(dir: &Path) -> Leaf {
    Leaf { cert_file: dir.join("envoy.crt"), key_file: dir.join("envoy.key") }
}

/// An HTTP/2-over-TLS client to mvp-ext-proc's gRPC port presenting
/// `identity`, trusting `ca`.
fn grpc_client(ca: &Path, identity: Option<&Leaf>) -> reqwest::Client {
    let config = tls_client_config(ca, identity, &[b"h2"]).unwrap();
    reqwest::Client::builder().use_preconfigured_tls(config).no_proxy().http2_prior_knowledge().timeout(Duration::from_secs(5)).build().unwrap()
}

/// The door routes (ADS gave Envoy the apiservers, `GetTable` the table,
/// ext_proc merged `/apis`), all over mutual TLS.
async fn routes(door: &FrontDoor) {
    assert_eq!(door.http.get(door.url(NEW_ONLY)).send().await.unwrap().status(), 200);
    let (status, apis) = door.get_json(&door.http, "/apis").await.unwrap();
    assert_eq!(status, 200);
    let groups: Vec<&str> = apis["groups"].as_array().expect("an APIGroupList").iter().filter_map(|g| g["name"].as_str()).collect();
    assert!(groups.contains(&"lifecycle.k8s.io"), "merged /apis lacks v1.37's group: {groups:?}");
}

#[tokio::test]
async fn only_envoys_certificate_gets_past_the_handshake() {
    let dir = tempfile::tempdir().unwrap();
    certs(dir.path());
    let door = door(dir.path()).await;
    routes(&door).await;
    let ca = dir.path().join("ca.crt");
    let https = format!("https://127.0.0.1:{}/grpc.health.v1.Health/Check", door.grpc_port);
    let http = format!("http://127.0.0.1:{}/grpc.health.v1.Health/Check", door.grpc_port);

    // Envoy's certificate: a gRPC answer (an empty POST is not a valid
    // call, but it is an HTTP/2 answer from the server).
    let envoy = grpc_client(&ca, Some(&envoy_leaf(dir.path())));
    let answered = envoy.post(&https).header("content-type", "application/grpc").send().await.unwrap();
    assert_eq!(answered.status(), 200);

    // Everyone else: no answer at all.
    let other_pki_dir = tempfile::tempdir().unwrap();
    let other = Pki::new(other_pki_dir.path()).unwrap();
    let stranger = other.clients.client(other_pki_dir.path(), "mallory", "system:mvp-envoy:envoy", &[]).unwrap();
    let attempts: [(&str, reqwest::Client, &str); 3] = [
        ("plaintext h2c", reqwest::Client::builder().no_proxy().http2_prior_knowledge().timeout(Duration::from_secs(5)).build().unwrap(), http.as_str()),
        ("TLS without a client certificate", grpc_client(&ca, None), https.as_str()),
        ("a client certificate of another CA, Envoy's name", grpc_client(&ca, Some(&stranger)), https.as_str()),
    ];
    for (what, client, url) in attempts {
        let got = client.post(url).header("content-type", "application/grpc").send().await;
        assert!(got.is_err(), "{what}: answered {:?}", got.map(|r| r.status()));
    }
    // ... and the door routes on.
    routes(&door).await;
}

/// A certificate's serial in lowercase hex without leading zeros.
fn serial(pem_file: &Path) -> String {
    let pem = std::fs::read(pem_file).unwrap();
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
    let cert = pem.parse_x509().unwrap();
    cert.raw_serial_as_string().replace(':', "").trim_start_matches('0').to_lowercase()
}

/// Every certificate serial in Envoy's `/certs`, as [`serial`] writes them:
/// Envoy prints whole bytes (`0a1b…`: BoringSSL's `BN_bn2hex`), so a serial
/// whose first byte is below 0x10 keeps a leading zero there — compared
/// as written, one rotation in 16 never matched (a CI flake).
fn envoy_serials(v: &serde_json::Value) -> Vec<String> {
    match v {
        serde_json::Value::Object(m) => m
            .iter()
            .flat_map(|(k, v)| match (k.as_str(), v.as_str()) {
                ("serial_number", Some(s)) => vec![s.trim_start_matches('0').to_lowercase()],
                _ => envoy_serials(v),
            })
            .collect(),
        serde_json::Value::Array(a) => a.iter().flat_map(envoy_serials).collect(),
        _ => vec![],
    }
}

/// The certificate mvp-ext-proc presents to a new connection.
async fn served_serial(port: u16, ca: &Path, identity: &Leaf) -> Option<String> {
    let config = tls_client_config(ca, Some(identity), &[b"h2"]).ok()?;
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").ok()?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.ok()?;
    let der = tls.get_ref().1.peer_certificates()?.first()?.clone();
    let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    Some(cert.raw_serial_as_string().replace(':', "").trim_start_matches('0').to_lowercase())
}

/// `mvp-ext-proc certs` again re-issues both leaves under the same CA, each
/// renamed into place: mvp-ext-proc serves the new certificate to new
/// connections and Envoy loads its new client certificate (its `/certs`),
/// neither restarted; an mvp-ext-proc restarted afterwards (every
/// connection new, both new certificates) is reached and routes as before.
#[tokio::test]
async fn rotated_certificates_are_taken_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    certs(dir.path());
    let mut door = door(dir.path()).await;
    routes(&door).await;
    let (ca, envoy) = (dir.path().join("ca.crt"), envoy_leaf(dir.path()));
    let envoy_certs = format!("http://127.0.0.1:{}/certs", door.admin_port);
    let old = (serial(&dir.path().join("server.crt")), serial(&envoy.cert_file));
    assert_eq!(served_serial(door.grpc_port, &ca, &envoy).await.as_ref(), Some(&old.0));

    certs(dir.path());
    let new = (serial(&dir.path().join("server.crt")), serial(&envoy.cert_file));
    assert!(new.0 != old.0 && new.1 != old.1);
    wait_for("mvp-ext-proc to serve its new certificate", Duration::from_secs(20), || async {
        served_serial(door.grpc_port, &ca, &envoy).await.filter(|s| *s == new.0)
    })
    .await
    .unwrap();
    wait_for("Envoy to load its new client certificate", Duration::from_secs(20), || async {
        let certs: serde_json::Value = door.http.get(&envoy_certs).send().await.ok()?.json().await.ok()?;
        envoy_serials(&certs).contains(&new.1).then_some(())
    })
    .await
    .unwrap();
    door.restart_ext_proc().await.unwrap();
    wait_for("the door to route through the restarted mvp-ext-proc", Duration::from_secs(20), || async {
        let ok = door.http.get(door.url(NEW_ONLY)).send().await.ok()?.status() == 200;
        ok.then_some(())
    })
    .await
    .unwrap();
    routes(&door).await;
}

/// A rogue control plane: someone on the path, or a pod that joined the
/// replicas' Service, answers at mvp-ext-proc's address — here another
/// mvp-ext-proc whose certificate is of a CA of its own (it even trusts
/// Envoy's certificate) and whose only apiserver is a trap. Over the
/// plaintext channel Envoy would have taken its clusters and sent every
/// request, bearer tokens and all, to the trap. Now Envoy's handshake fails
/// on the server's certificate (`ssl.fail_verify_error`), it keeps the
/// clusters and the table it has, and the trap gets nothing.
#[tokio::test]
async fn a_rogue_control_plane_is_not_believed() {
    use integration::harness::{FakeSpec, Proc, free_ports};
    let (dir, rogue_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    certs(dir.path());
    certs(rogue_dir.path());
    let mut door = door(dir.path()).await;
    routes(&door).await;
    let trap = door.add_fake(FakeSpec::new("trap", "v1.37")).await.unwrap().url();
    door.ext_proc.kill();
    let f = |d: &Path, name: &str| d.join(name).display().to_string();
    let args: Vec<String> = [
        "serve",
        "--apiserver",
        &format!("trap={trap}"),
        "--grpc-listen",
        &format!("127.0.0.1:{}", door.grpc_port),
        "--metrics-listen",
        &format!("127.0.0.1:{}", free_ports(1)[0]),
        "--tls-cert-file",
        &f(rogue_dir.path(), "server.crt"),
        "--tls-private-key-file",
        &f(rogue_dir.path(), "server.key"),
        "--client-ca-file",
        &f(dir.path(), "ca.crt"),
    ]
    .into_iter()
    .map(String::from)
    .collect();
    let _rogue = Proc::spawn("rogue-mvp-ext-proc", door.dir.path(), &ext_proc_bin().unwrap(), &args).unwrap();
    wait_for("Envoy to refuse the rogue's certificate", Duration::from_secs(20), || async {
        door.envoy_stat("cluster.mvp_ext_proc.ssl.fail_verify_error").await.filter(|n| *n >= 2)
    })
    .await
    .unwrap();
    for _ in 0..20 {
        assert_eq!(door.http.get(door.url(NEW_ONLY)).send().await.unwrap().status(), 200);
        assert_eq!(door.http.get(door.url("/api/v1/namespaces/default/pods")).send().await.unwrap().status(), 200);
    }
    let reached = door.fake("trap").stats(&door.http).await.and_then(|v| v["resourceRequests"].as_u64());
    assert_eq!(reached, Some(0), "the rogue control plane's apiserver was reached");
}
