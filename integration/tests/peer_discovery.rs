//! Peer-aggregated `/apis` through real Envoy, mvp-ext-proc's ext_proc and
//! fake apiservers v1.30 + v1.37.

use std::collections::BTreeSet;
use std::io::Read;
use std::time::{Duration, Instant};

use integration::harness::{FakeSpec, FrontDoor, Options, decode_discovery_protobuf, workspace_root};
use serde_json::{Value, json};

use mvp_ext_proc::apidiscovery::{JSON_CONTENT_TYPE as V2_JSON, PROTOBUF_CONTENT_TYPE as V2_PROTOBUF};
const NOPEER: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer";

fn two() -> Vec<FakeSpec> {
    vec![FakeSpec::new("v130", "v1.30"), FakeSpec::new("v137", "v1.37")]
}

fn golden(name: &str) -> Vec<u8> {
    std::fs::read(workspace_root().join("ext-proc/testdata/merged").join(name)).unwrap()
}

fn groups(doc: &Value) -> BTreeSet<String> {
    doc["items"].as_array().unwrap().iter().map(|g| g["metadata"]["name"].as_str().unwrap_or("").to_string()).collect()
}

fn resources(doc: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for g in doc["items"].as_array().unwrap() {
        for v in g["versions"].as_array().into_iter().flatten() {
            for r in v["resources"].as_array().into_iter().flatten() {
                out.insert(format!("{}/{}/{}", g["metadata"]["name"].as_str().unwrap_or(""), v["version"].as_str().unwrap(), r["resource"].as_str().unwrap()));
            }
        }
    }
    out
}

async fn get(door: &FrontDoor, accept: &str, extra: &[(&str, &str)]) -> reqwest::Response {
    let mut req = door.http.get(door.url("/apis")).header("accept", accept);
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

async fn wait_merged(door: &FrontDoor, sources: usize) {
    door.wait_table_published(|t| t["discovery"]["sources"].as_array().is_some_and(|s| s.len() == sources)).await.unwrap();
}

/// JSON and protobuf both carry the merged document, byte-identical to the
/// golden merge of the same releases, from whichever apiserver answered;
/// ETag/Vary/Cache-Control as kube sends them; 304 on our ETag.
#[tokio::test]
async fn merged_document_in_json_and_protobuf_with_etag() {
    let door = FrontDoor::start(&two(), Options::default()).await.unwrap();
    wait_merged(&door, 2).await;
    let want = golden("v1.30+v1.37.json");
    let mut etags = BTreeSet::new();
    for _ in 0..4 {
        let resp = get(&door, V2_JSON, &[]).await;
        assert_eq!(resp.status(), 200);
        let h = resp.headers().clone();
        assert_eq!(h["content-type"], V2_JSON);
        assert_eq!(h["vary"], "Accept");
        assert_eq!(h["cache-control"], "public");
        let etag = h["etag"].to_str().unwrap().to_string();
        assert!(etag.len() == 130 && etag.starts_with('"') && etag[1..129].chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase()), "{etag}");
        etags.insert(etag);
        let body = resp.bytes().await.unwrap();
        // Envoy re-frames a replaced body (chunked on HTTP/1.1); a length,
        // when present, must be right.
        if let Some(len) = h.get("content-length") {
            assert_eq!(len.to_str().unwrap(), body.len().to_string());
        }
        assert!(body == want, "merged /apis differs from the golden merge of v1.30+v1.37");
    }
    assert_eq!(etags.len(), 1, "the ETag must not depend on which apiserver answered");
    let etag = etags.into_iter().next().unwrap();
    let doc: Value = serde_json::from_slice(&want).unwrap();
    assert!(groups(&doc).contains("lifecycle.k8s.io"));
    assert!(resources(&doc).contains("flowcontrol.apiserver.k8s.io/v1beta3/flowschemas"));

    let resp = get(&door, &format!("{V2_PROTOBUF},application/json"), &[]).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], V2_PROTOBUF);
    assert_eq!(resp.headers()["etag"].to_str().unwrap(), etag);
    let body = resp.bytes().await.unwrap();
    assert_eq!(&body[..4], b"k8s\0");
    let decoded = decode_discovery_protobuf(&body).unwrap();
    assert_eq!(decoded["items"], doc["items"]);
    assert_eq!(decoded["kind"], "APIGroupDiscoveryList");

    for accept in [V2_JSON, V2_PROTOBUF] {
        let resp = get(&door, accept, &[("if-none-match", &etag)]).await;
        assert_eq!(resp.status(), 304, "{accept}");
        assert_eq!(resp.headers()["etag"].to_str().unwrap(), etag);
        assert_eq!(resp.headers()["vary"], "Accept");
        assert_eq!(resp.headers()["cache-control"], "public");
        assert!(resp.bytes().await.unwrap().is_empty());
    }
    // Strict match, like kube: a weak or listed ETag is not a match.
    for inm in [format!("W/{etag}"), format!("{etag}, \"x\""), "*".into()] {
        assert_eq!(get(&door, V2_JSON, &[("if-none-match", &inm)]).await.status(), 200, "{inm}");
    }
}

/// Envoy beside mvp-ext-proc may reach it over a Unix socket
/// (`--grpc-listen unix:PATH`, `--ext-proc unix:PATH`): the apiserver
/// clusters (ADS), the routing table (GetTable) and the merged `/apis`
/// (ext_proc) all come over it: it is the mvp-ext-proc cluster's one
/// endpoint (mvp-ext-proc serves the TCP port too: `--grpc-listen` repeated).
#[tokio::test]
async fn envoy_reaches_mvp_ext_proc_over_a_unix_socket() {
    let mut door = FrontDoor::start(&two(), Options { grpc_over_unix: true, ..Options::default() }).await.unwrap();
    wait_merged(&door, 2).await;
    let config = std::fs::read_to_string(&door.config_path).unwrap();
    let config: Value = serde_yaml_ng::from_str(&config).unwrap();
    let endpoints = &config["static_resources"]["clusters"][0]["load_assignment"]["endpoints"];
    let sock = door.dir.path().join("mvp-ext-proc.sock");
    assert_eq!(endpoints, &json!([{"priority": 0, "lb_endpoints": [{"endpoint": {"address": {"pipe": {"path": sock.to_string_lossy()}}}}]}]));
    // Routed by the table and the clusters that came over the socket.
    for (path, want) in [("/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas", "v130"), ("/apis/lifecycle.k8s.io/v1alpha1/evictionrequests", "v137")] {
        let (status, v) = door.get_json(&door.http, path).await.unwrap();
        assert_eq!((status, integration::harness::served_by(&v)), (200, want), "{path}");
    }
    let resp = get(&door, V2_JSON, &[]).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.bytes().await.unwrap() == golden("v1.30+v1.37.json"), "merged /apis over the Unix socket differs from the golden merge");
    let served = door.envoy_stat("http.apiserver_front_door.ext_proc.streams_started").await.unwrap_or(0);
    assert!(served >= 1, "no ext_proc stream was started");

    // Killed (SIGKILL leaves the socket file behind) and started again: the
    // stale socket is replaced, and Envoy reconnects and merges again.
    door.restart_ext_proc().await.unwrap();
    let merged = integration::harness::wait_for("a merged /apis after the restart", Duration::from_secs(20), || async {
        let resp = get(&door, V2_JSON, &[]).await;
        let body = resp.bytes().await.ok()?;
        (body == golden("v1.30+v1.37.json")).then_some(())
    })
    .await;
    assert!(merged.is_ok(), "{merged:?}");

    // Stopped gracefully (SIGTERM, as the kubelet stops a pod), it removes
    // its socket.
    door.ext_proc.signal("TERM");
    let stopped = integration::harness::wait_for("mvp-ext-proc to stop on SIGTERM", Duration::from_secs(10), || {
        let stopped = !door.ext_proc.is_running();
        async move { stopped.then_some(()) }
    })
    .await;
    assert!(stopped.is_ok(), "{stopped:?}");
    assert!(!sock.exists(), "the socket file is left after a graceful stop");
}

/// `profile=nopeer` gets the answering apiserver's own document, untouched.
#[tokio::test]
async fn nopeer_gets_one_apiservers_own_document() {
    let door = FrontDoor::start(&two(), Options::default()).await.unwrap();
    wait_merged(&door, 2).await;
    let mut seen = BTreeSet::new();
    for _ in 0..6 {
        let resp = get(&door, NOPEER, &[]).await;
        assert_eq!(resp.status(), 200);
        let doc: Value = resp.json().await.unwrap();
        assert_own_view(&doc);
        seen.insert(if groups(&doc).contains("lifecycle.k8s.io") { "v137" } else { "v130" });
    }
    assert_eq!(seen.len(), 2, "both apiservers answered nopeer requests: {seen:?}");
    let metrics = door.http.get(format!("http://127.0.0.1:{}/metrics", door.metrics_port)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|l| l == "aggregator_discovery_nopeer_requests_total 6"), "{metrics}");
}

/// The apiserver still authenticates `/apis`: without credentials the client
/// gets its 401 Status, not our document.
#[tokio::test]
async fn unauthenticated_clients_get_the_apiservers_401() {
    let token = "s3cret-token";
    let specs = vec![FakeSpec::new("v130", "v1.30").with_token(token), FakeSpec::new("v137", "v1.37").with_token(token)];
    let door = FrontDoor::start(&specs, Options { discovery_token: Some(token.into()), ..Options::default() }).await.unwrap();
    wait_merged(&door, 2).await;
    for accept in [V2_JSON, V2_PROTOBUF, "application/json"] {
        let resp = get(&door, accept, &[]).await;
        assert_eq!(resp.status(), 401, "{accept}");
        let v: Value = resp.json().await.unwrap();
        assert_eq!((v["kind"].as_str(), v["reason"].as_str()), (Some("Status"), Some("Unauthorized")));
        let resp = get(&door, accept, &[("authorization", "Bearer wrong")]).await;
        assert_eq!(resp.status(), 401, "{accept}");
    }
    let resp = get(&door, V2_JSON, &[("authorization", &format!("Bearer {token}"))]).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.bytes().await.unwrap() == golden("v1.30+v1.37.json"));
}

/// Unaggregated discovery (old clients, the Python client) gets an
/// `APIGroupList` of every group any apiserver serves, with kube's
/// `Cache-Control: no-cache, private` (no ETag, so not cacheable).
#[tokio::test]
async fn unaggregated_group_list_names_every_served_group() {
    let door = FrontDoor::start(&two(), Options::default()).await.unwrap();
    wait_merged(&door, 2).await;
    for accept in ["application/json", "application/json, */*", "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"] {
        let resp = get(&door, accept, &[]).await;
        assert_eq!(resp.status(), 200);
        assert!(resp.headers().get("etag").is_none());
        assert_eq!(resp.headers()["cache-control"], "no-cache, private", "{accept}");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["kind"], "APIGroupList");
        let g = v["groups"].as_array().unwrap();
        let names: BTreeSet<&str> = g.iter().map(|g| g["name"].as_str().unwrap()).collect();
        assert!(names.contains("lifecycle.k8s.io"), "{accept}");
        let fc = g.iter().find(|g| g["name"] == "flowcontrol.apiserver.k8s.io").unwrap();
        assert_eq!(fc["preferredVersion"], json!({"groupVersion": "flowcontrol.apiserver.k8s.io/v1", "version": "v1"}));
        assert!(fc["versions"].as_array().unwrap().iter().any(|v| v["version"] == "v1beta3"));
    }
}

fn assert_own_view(doc: &Value) {
    let v137 = groups(doc).contains("lifecycle.k8s.io");
    let v130 = resources(doc).contains("flowcontrol.apiserver.k8s.io/v1beta3/flowschemas");
    assert!(v137 ^ v130, "expected one apiserver's own view");
}

/// mvp-ext-proc hung (SIGSTOP: connections accepted, nothing answered): the
/// ext_proc exchange times out after --ext-proc-message-timeout (1 s) and
/// Envoy serves the apiserver's own document. A client waits about 1 s
/// longer than usual, never more than twice that.
#[tokio::test]
async fn ext_proc_hung_serves_the_unmerged_document_after_the_timeout() {
    let door = FrontDoor::start(&two(), Options::default()).await.unwrap();
    wait_merged(&door, 2).await;
    door.ext_proc.signal("STOP");
    for _ in 0..3 {
        let started = Instant::now();
        let resp = get(&door, V2_JSON, &[]).await;
        let took = started.elapsed();
        assert_eq!(resp.status(), 200);
        assert_own_view(&resp.json().await.unwrap());
        assert!(took < Duration::from_millis(2000), "took {took:?}");
        eprintln!("hung ext-proc: /apis answered in {took:?}");
    }
    door.ext_proc.signal("CONT");
}

/// mvp-ext-proc gone: Envoy serves the apiserver's own document with 200,
/// never an error.
#[tokio::test]
async fn ext_proc_down_serves_the_unmerged_document() {
    let mut door = FrontDoor::start(&two(), Options::default()).await.unwrap();
    wait_merged(&door, 2).await;
    door.ext_proc.kill();
    for _ in 0..4 {
        let started = Instant::now();
        let resp = get(&door, V2_JSON, &[]).await;
        let took = started.elapsed();
        assert_eq!(resp.status(), 200);
        assert_own_view(&resp.json().await.unwrap());
        assert!(took < Duration::from_millis(500), "took {took:?}");
    }
}

/// A CRD-heavy cluster: several MiB of discovery, gzipped for clients that
/// ask (kube gzips above 128 KiB), correct either way.
#[tokio::test]
async fn large_crd_heavy_documents_are_merged_and_gzipped() {
    let door = FrontDoor::start(&two(), Options::default()).await.unwrap();
    // 3,000 CRD groups on v137 (e.g. one not yet seen by v130).
    let body = serde_json::to_vec(&integration::harness::crd_heavy::fake_documents(3000)).unwrap();
    let input_size = serde_json::to_vec(&integration::harness::crd_heavy::apis(3000)).unwrap().len();
    assert!(input_size > 4 << 20, "only {input_size} bytes");
    let resp = door.http.post(format!("{}/__fake/documents", door.fake("v137").url())).body(body).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    door.wait_table_published(|t| t["discovery"]["groups"].as_u64().is_some_and(|n| n > 3000)).await.unwrap();

    let plain = get(&door, V2_JSON, &[]).await;
    assert_eq!(plain.status(), 200);
    assert!(plain.headers().get("content-encoding").is_none());
    let plain_body = plain.bytes().await.unwrap();
    let doc: Value = serde_json::from_slice(&plain_body).unwrap();
    assert_eq!(doc["items"].as_array().unwrap().len(), groups(&doc).len());
    assert!(groups(&doc).contains("crd2999.example.com") && groups(&doc).contains("lifecycle.k8s.io"));
    assert!(resources(&doc).contains("flowcontrol.apiserver.k8s.io/v1beta3/flowschemas"));

    let gz = get(&door, V2_JSON, &[("accept-encoding", "gzip")]).await;
    assert_eq!(gz.status(), 200);
    assert_eq!(gz.headers()["content-encoding"], "gzip");
    assert_eq!(gz.headers()["vary"], "Accept, Accept-Encoding");
    let compressed = gz.bytes().await.unwrap();
    assert!(compressed.len() < plain_body.len() / 4);
    let mut unzipped = Vec::new();
    flate2::read::GzDecoder::new(&compressed[..]).read_to_end(&mut unzipped).unwrap();
    assert!(unzipped == plain_body, "gzip body differs from the plain one");
    eprintln!("large merged /apis: {} bytes, {} gzipped; input from v137 {} bytes", plain_body.len(), compressed.len(), input_size);

    let pb = get(&door, V2_PROTOBUF, &[]).await;
    assert_eq!(pb.status(), 200);
    let decoded = decode_discovery_protobuf(&pb.bytes().await.unwrap()).unwrap();
    assert_eq!(decoded["items"], doc["items"]);

    // Sixteen clients at once, ten requests each, with gzip (as client-go
    // and kubectl ask) and without: every one gets the merged document, none
    // falls back to an apiserver's own half (its own ETag).
    let merged = door.table().await.unwrap()["discovery"]["etag"].as_str().unwrap().to_string();
    for encoding in ["gzip", "identity"] {
        let clients: Vec<_> = (0..16)
            .map(|_| {
                let (http, url, merged) = (door.http.clone(), door.url("/apis"), merged.clone());
                tokio::spawn(async move {
                    let mut unmerged = 0;
                    for _ in 0..10 {
                        let r = http.get(&url).header("accept", V2_JSON).header("accept-encoding", encoding).send().await.unwrap();
                        unmerged += usize::from(r.headers().get("etag").and_then(|e| e.to_str().ok()) != Some(merged.as_str()));
                        let _ = r.bytes().await.unwrap();
                    }
                    unmerged
                })
            })
            .collect();
        let mut unmerged = 0;
        for c in clients {
            unmerged += c.await.unwrap();
        }
        let timeouts = door.envoy_stat("http.apiserver_front_door.ext_proc.message_timeouts").await;
        let extended = door.envoy_stat("http.apiserver_front_door.ext_proc.override_message_timeout_received").await;
        let rss = |pid| integration::harness::process::rss_kib(pid) / 1024;
        eprintln!(
            "16 clients x 10 {encoding}: {unmerged} unmerged; Envoy message_timeouts {timeouts:?}, timeout extensions {extended:?}; RSS MiB mvp-ext-proc {}, Envoy {}",
            rss(door.ext_proc.pid()),
            rss(door.envoy.pid())
        );
        assert_eq!((unmerged, timeouts), (0, Some(0)), "{encoding}");
    }
}
