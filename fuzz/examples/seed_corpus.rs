//! Writes the committed seed corpus (`fuzz/corpus/<target>/`) from the real
//! fixtures: `cargo run --example seed_corpus` in `fuzz/`. Each seed is a
//! valid input, so fuzzing starts from what real apiservers and Envoy send.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
use envoy_types::pb::envoy::service::ext_proc::v3::{HttpHeaders, ProcessingRequest, processing_request};
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use mvp_ext_proc::discover::aggregated::{Root, from_aggregated};
use mvp_fuzz::fixture;
use prost::Message;

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}


fn main() {
    let releases = ["v1.30", "v1.33", "v1.37"];
    // discovery_merge: the real documents.
    for r in releases {
        write("discovery_merge", &format!("{r}-apis.json"), &fixture(r, "apis.json"));
    }
    // classify: one path per verb form for every resource a release serves.
    let mut paths = std::collections::BTreeSet::new();
    for r in releases {
        let view = from_aggregated(Root::Groups, &fixture(r, "apis.json"), None).unwrap();
        for g in view.groups.iter() {
            for v in &g.versions {
                for res in &v.resources {
                    let name = g.metadata.name.as_str();
                    let base = format!("/apis/{name}/{}", v.version);
                    paths.insert(format!("{base}/{}", res.resource));
                    paths.insert(format!("{base}/namespaces/ns/{}/x/status?watch=1", res.resource));
                    paths.insert(format!("{base}/watch/{}", res.resource));
                }
            }
        }
    }
    for extra in ["/api/v1/namespaces/default/pods/p/exec", "/apis", "/api", "/openapi/v3/apis/apps/v1?hash=X", "/apis/apps%2Fv1/deployments", "//apis/./apps/../apps/v1/deployments", "/healthz"] {
        paths.insert(extra.to_string());
    }
    for (i, p) in paths.iter().enumerate() {
        write("classify", &format!("{i:04}"), p.as_bytes());
    }
    // table_decode: tables the sync loop builds from the real documents.
    let mut members = Vec::new();
    for (i, r) in releases.iter().enumerate() {
        let view = from_aggregated(Root::Groups, &fixture(r, "apis.json"), None).unwrap();
        members.push((format!("m{i}"), view));
    }
    let states: Vec<_> = members
        .iter()
        .enumerate()
        .map(|(i, (name, view))| mvp_ext_proc::table::build::Member {
            name,
            address: Some(format!("127.0.0.1:{}", 6443 + i).parse().unwrap()),
            healthy: i != 1,
            open: i != 2,
            pending: i == 2,
            draining: false,
            capabilities: Some(&view.capabilities),
            openapi: None,
        })
        .collect();
    let mut table = mvp_ext_proc::table::build::build(states);
    table.version = 42;
    write("table_decode", "three-releases", &table.encode_to_vec());
    write("table_decode", "sample", &mvp_routing::testing::sample().encode_to_vec());
    // subject: what Envoy's RFC 2253 rendering gives for kube client certs.
    for (i, s) in ["CN=alice,O=dev,O=system:masters", "CN=bob+CN=robert,O=a\\,b", "O=x,CN=\\E2\\98\\83", "CN=front-proxy-client", "serialNumber=1,CN=\\#x\\ "].iter().enumerate() {
        write("subject", &format!("{i}"), s.as_bytes());
    }
    // ext_proc_message: the response-headers message Envoy sends for /apis.
    let attrs = |accept: &str, path: &str| {
        let s = |v: &str| Value { kind: Some(Kind::StringValue(v.into())) };
        let mut fields = BTreeMap::new();
        fields.insert("request.headers['accept']".to_string(), s(accept));
        fields.insert("request.headers['accept-encoding']".to_string(), s("gzip"));
        fields.insert("request.url_path".to_string(), s(path));
        let mut m = HashMap::new();
        m.insert("envoy.filters.http.ext_proc".to_string(), Struct { fields: fields.into_iter().collect() });
        m
    };
    let headers = |status: &str, ct: &str| HttpHeaders {
        headers: Some(HeaderMap {
            headers: vec![
                HeaderValue { key: ":status".into(), raw_value: status.as_bytes().to_vec(), ..Default::default() },
                HeaderValue { key: "content-type".into(), raw_value: ct.as_bytes().to_vec(), ..Default::default() },
            ],
        }),
        ..Default::default()
    };
    let aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    for (i, (accept, path, status, ct)) in [
        (aggregated, "/apis", "200", aggregated),
        ("application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", "/apis", "200", aggregated),
        ("application/json", "/apis", "200", "application/json"),
        (aggregated, "/apis", "401", "application/json"),
        ("application/json", "/openapi/v2", "200", "application/json"),
    ]
    .iter()
    .enumerate()
    {
        let req = ProcessingRequest {
            attributes: attrs(accept, path),
            request: Some(processing_request::Request::ResponseHeaders(headers(status, ct))),
            ..Default::default()
        };
        write("ext_proc_message", &format!("{i}"), &req.encode_to_vec());
    }
    eprintln!("seed corpus written under fuzz/corpus/");
}
