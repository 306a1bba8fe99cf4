//! `/openapi/v3` through real Envoy, the wasm filter and mvp-ext-proc's
//! ext_proc, in front of fake apiservers that serve kube-openapi's v3
//! index and documents (the `/openapi/v2` union is tested on real
//! kube-apiservers: `real_apiservers.rs`).

use std::collections::{BTreeMap, BTreeSet};

use integration::harness::{FakeSpec, FrontDoor, Options};
use serde_json::Value;

/// key → serverRelativeURL of an index.
fn entries(index: &Value) -> BTreeMap<String, String> {
    index["paths"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v["serverRelativeURL"].as_str().unwrap().to_string())).collect()
}

async fn own_index(door: &FrontDoor, name: &str) -> BTreeMap<String, String> {
    let url = format!("http://127.0.0.1:{}/openapi/v3", door.fake(name).port);
    entries(&door.http.get(url).send().await.unwrap().json().await.unwrap())
}

async fn wait_openapi(door: &FrontDoor, sources: usize) {
    door.wait_table_published(|t| t["openapi"]["sources"].as_array().is_some_and(|s| s.len() == sources) && t["openapi"]["v3Index"].is_object())
        .await
        .unwrap();
}

/// Every document any server lists is in the merged index, under a URL
/// that answers 200 from a server that has it — never a 404 and never a
/// redirect to another server's hash: a hash the servers agree on is kept
/// (immutable caching), a disputed one is dropped.
#[tokio::test]
async fn merged_v3_index_lists_every_document_and_each_url_routes() {
    let specs = [FakeSpec::new("v130", "v1.30"), FakeSpec::new("v137", "v1.37"), FakeSpec::new("v137b", "v1.37")];
    let door = FrontDoor::start(&specs, Options::default()).await.unwrap();
    wait_openapi(&door, 3).await;
    let own: BTreeMap<&str, BTreeMap<String, String>> =
        [("v130", own_index(&door, "v130").await), ("v137", own_index(&door, "v137").await), ("v137b", own_index(&door, "v137b").await)].into_iter().collect();
    let all_keys: BTreeSet<&String> = own.values().flat_map(|i| i.keys()).collect();
    let only_v137: Vec<&&String> = all_keys.iter().filter(|k| !own["v130"].contains_key(**k)).collect();
    assert!(!only_v137.is_empty() && own["v130"].keys().any(|k| !own["v137"].contains_key(k)), "the releases differ in their documents");

    let mut etags = BTreeSet::new();
    let mut merged = BTreeMap::new();
    for _ in 0..4 {
        let resp = door.http.get(door.url("/openapi/v3")).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        etags.insert(resp.headers()["etag"].to_str().unwrap().to_string());
        merged = entries(&resp.json().await.unwrap());
    }
    assert_eq!(etags.len(), 1, "one merged index, whichever server answered: {etags:?}");
    assert_eq!(merged.keys().collect::<BTreeSet<_>>(), all_keys);
    for (key, url) in &merged {
        let urls: BTreeSet<&String> = own.values().filter_map(|i| i.get(key)).collect();
        match urls.len() {
            1 => assert_eq!(url, *urls.first().unwrap(), "{key}: every server that lists it agrees, the hash stays"),
            _ => assert_eq!(url, &format!("/openapi/v3/{key}"), "{key}: servers disagree, no hash"),
        }
    }
    let etag = etags.first().unwrap();
    let revalidated = door.http.get(door.url("/openapi/v3")).header("if-none-match", etag).send().await.unwrap();
    assert_eq!(revalidated.status(), 304);

    let no_redirects = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).no_proxy().build().unwrap();
    for (key, url) in &merged {
        let listing: BTreeSet<&str> = own.iter().filter(|(_, i)| i.contains_key(key)).map(|(n, _)| *n).collect();
        for _ in 0..3 {
            let resp = no_redirects.get(door.url(url)).send().await.unwrap();
            assert_eq!(resp.status(), 200, "{url}");
            if let Some(by) = resp.headers().get("x-fake-apiserver") {
                assert!(listing.contains(by.to_str().unwrap()), "{url} answered by {by:?}, listed by {listing:?}");
            }
        }
    }
}

/// A server without OpenAPI v3 (before 1.27; here a fake without
/// aggregated discovery) never answers the index or a v3 document: both go
/// to the server that has them.
#[tokio::test]
async fn a_server_without_openapi_v3_is_never_asked_for_it() {
    let specs = [FakeSpec::new("old", "v1.30").old(), FakeSpec::new("v137", "v1.37")];
    let door = FrontDoor::start(&specs, Options::default()).await.unwrap();
    wait_openapi(&door, 2).await;
    let direct = format!("http://127.0.0.1:{}/openapi/v3", door.fake("old").port);
    assert_eq!(door.http.get(direct).send().await.unwrap().status(), 404, "the old server has no v3");
    for _ in 0..10 {
        let resp = door.http.get(door.url("/openapi/v3")).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let index = entries(&resp.json().await.unwrap());
        let url = &index["apis/apps/v1"];
        let resp = door.http.get(door.url(url)).send().await.unwrap();
        assert_eq!((resp.status().as_u16(), resp.headers()["x-fake-apiserver"].to_str().unwrap()), (200, "v137"));
    }
}
