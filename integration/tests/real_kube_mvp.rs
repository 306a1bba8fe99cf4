//! The front door beside kube's own Mixed Version Proxy: the three real
//! releases of `three_releases` with kube's peer-aggregated discovery on
//! (`--peer-ca-file`, the proxy client certificate, identity Leases with
//! `kubernetes.io/peer-advertise-address`). Our merged documents against
//! kube's own, byte for byte where kube merges, and the union where kube
//! shows one server's view (docs/deviations.md says why).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use integration::harness::real::{RealControlPlane, Spec, three_releases};
use integration::harness::FrontDoor;
use serde_json::Value;

const V2_JSON: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const V2_PROTOBUF: &str = "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const NOPEER: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer";

async fn control_plane_and_door() -> (RealControlPlane, FrontDoor) {
    let specs: Vec<Spec> = three_releases().into_iter().map(Spec::with_kube_mvp).collect();
    let cp = RealControlPlane::start_specs(&specs).await.unwrap();
    let door = cp.front_door().await.unwrap();
    (cp, door)
}

/// `(ETag, body)` of a GET.
async fn get(client: &reqwest::Client, url: String, accept: &str) -> (Option<String>, Bytes) {
    let r = client.get(url).header("accept", accept).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let etag = r.headers().get("etag").and_then(|v| v.to_str().ok()).map(str::to_string);
    (etag, r.bytes().await.unwrap())
}

/// `group/version` of every group-version an aggregated
/// (`APIGroupDiscoveryList`) or unaggregated (`APIGroupList`) list names.
fn group_versions(doc: &Value) -> BTreeSet<String> {
    let groups = doc["items"].as_array().or(doc["groups"].as_array()).into_iter().flatten();
    groups
        .flat_map(|g| {
            let name = g["metadata"]["name"].as_str().or(g["name"].as_str()).unwrap_or_default().to_string();
            g["versions"].as_array().into_iter().flatten().map(move |v| format!("{name}/{}", v["version"].as_str().unwrap_or_default()))
        })
        .collect()
}

/// The peer-aggregated `/apis` of every 1.35+ server is ours byte for byte —
/// JSON and protobuf, the same ETag: groups, versions, resources, order and
/// freshness. A 1.34 server has no peer-aggregated discovery: it shows its
/// own half, as every server did before 1.35.
#[tokio::test]
async fn our_merged_apis_is_kubes_peer_aggregated_document_byte_for_byte() {
    let (cp, door) = control_plane_and_door().await;
    let client = door.https(Some(&cp.admin), true).unwrap();
    for accept in [V2_JSON, V2_PROTOBUF] {
        let ours = get(&client, door.url("/apis"), accept).await;
        assert!(ours.0.is_some(), "our /apis carries an ETag");
        for a in cp.apiservers.iter().filter(|a| a.name != "kas-134") {
            // kube fills its peer cache from identity-lease events: bounded.
            let deadline = Instant::now() + Duration::from_secs(60);
            let theirs = loop {
                let theirs = get(&cp.http, format!("{}/apis", a.url()), accept).await;
                if theirs == ours || Instant::now() > deadline {
                    break theirs;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            };
            assert!(theirs.0 == ours.0, "{} ({accept}): ETag {:?}, ours {:?}", a.name, theirs.0, ours.0);
            assert!(theirs.1 == ours.1, "{} ({accept}): {} bytes, ours {}", a.name, theirs.1.len(), ours.1.len());
        }
    }
    let ours: Value = serde_json::from_slice(&get(&client, door.url("/apis"), V2_JSON).await.1).unwrap();
    let old: Value = serde_json::from_slice(&get(&cp.http, format!("{}/apis", cp.apiservers[0].url()), V2_JSON).await.1).unwrap();
    let own: Value = serde_json::from_slice(&get(&cp.http, format!("{}/apis", cp.apiservers[0].url()), NOPEER).await.1).unwrap();
    assert_eq!(old, own, "kube 1.34 does not aggregate its peers' discovery");
    let missing: Vec<_> = group_versions(&ours).difference(&group_versions(&old)).cloned().collect();
    assert!(missing.contains(&"storagemigration.k8s.io/v1".to_string()), "a 1.34 server's /apis lacks the 1.37 APIs: {missing:?}");
}

/// Where kube shows one server's view, ours is the union: the unaggregated
/// `/apis` (kube builds it from APIService objects, which each starting
/// server prunes to what it serves) and the `/openapi/v3` index (kube
/// serves it locally). Every URL of our index answers through the door.
#[tokio::test]
async fn unaggregated_list_and_openapi_index_are_the_union_where_kube_shows_one_servers() {
    let (cp, door) = control_plane_and_door().await;
    let client = door.https(Some(&cp.admin), true).unwrap();
    let mut served = BTreeSet::new();
    let mut indexes = vec![];
    for a in &cp.apiservers {
        let own: Value = serde_json::from_slice(&get(&cp.http, format!("{}/apis", a.url()), NOPEER).await.1).unwrap();
        served.extend(group_versions(&own));
        let index: Value = serde_json::from_slice(&get(&cp.http, format!("{}/openapi/v3", a.url()), "application/json").await.1).unwrap();
        indexes.push((a.name.clone(), index["paths"].as_object().unwrap().keys().cloned().collect::<BTreeSet<_>>()));
    }

    let ours: Value = serde_json::from_slice(&get(&client, door.url("/apis"), "application/json").await.1).unwrap();
    assert_eq!(group_versions(&ours), served, "our APIGroupList names exactly what some server serves");
    for a in &cp.apiservers {
        let theirs: Value = serde_json::from_slice(&get(&cp.http, format!("{}/apis", a.url()), "application/json").await.1).unwrap();
        let lacks: Vec<_> = served.difference(&group_versions(&theirs)).cloned().collect();
        assert!(!lacks.is_empty(), "{}'s APIGroupList is the whole truth?", a.name);
        eprintln!("{}'s APIGroupList lacks what a server serves: {lacks:?}", a.name);
    }

    let index: Value = serde_json::from_slice(&get(&client, door.url("/openapi/v3"), "application/json").await.1).unwrap();
    let paths = index["paths"].as_object().unwrap();
    let union: BTreeSet<String> = indexes.iter().flat_map(|(_, k)| k.iter().cloned()).collect();
    assert_eq!(paths.keys().cloned().collect::<BTreeSet<_>>(), union, "our /openapi/v3 index lists every server's documents");
    for (name, keys) in &indexes {
        assert!(keys.len() < union.len(), "{name}'s own index already lists everything?");
    }
    for (key, entry) in paths {
        for http2 in [true, false] {
            let c = door.https(Some(&cp.admin), http2).unwrap();
            let url = door.url(entry["serverRelativeURL"].as_str().unwrap());
            let r = c.get(url).send().await.unwrap();
            assert_eq!(r.status(), 200, "{key} (http2={http2})");
        }
    }
}
