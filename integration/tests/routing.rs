//! End to end through real Envoy 1.40, mvp-ext-proc and fake apiservers of
//! Kubernetes v1.30, v1.33 and v1.37 on loopback.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use integration::harness::tools::FilterBuild;
use integration::harness::{FrontDoor, Options, edit_http_filters, served_by, served_resources, wait_for};
use serde_json::Value;

use integration::harness::{THREE_RELEASES as RELEASES, three_fakes as three};

fn release_to_name(release: &str) -> &'static str {
    RELEASES.iter().find(|(_, r)| *r == release).map(|(n, _)| *n).unwrap_or("?")
}

/// Every group/version/resource of the union of the three releases, in list,
/// namespaced get, both watch forms and every subresource form, over
/// HTTP/1.1 and HTTP/2: each lands on an apiserver that serves it. Plus the
/// unaggregated discovery documents of every group and group-version.
#[tokio::test]
async fn every_resource_of_three_releases_lands_on_a_server_that_serves_it() {
    let door = FrontDoor::start(&three(), Options::default()).await.unwrap();
    let resources = served_resources(&["v1.30", "v1.33", "v1.37"]).unwrap();
    assert!(resources.len() > 120, "only {} resources in the union", resources.len());
    let mut checked = 0;
    let mut failures = Vec::new();
    for (i, r) in resources.iter().enumerate() {
        let client = if i % 2 == 0 { &door.http } else { &door.h2c };
        let servers: BTreeSet<&str> = r.by_release.keys().map(|rel| release_to_name(rel)).collect();
        let prefix = r.prefix();
        let named = if r.namespaced {
            format!("{prefix}/namespaces/ns1/{}/obj1", r.resource)
        } else {
            format!("{prefix}/{}/obj1", r.resource)
        };
        let mut forms: Vec<(String, BTreeSet<&str>, &str)> = vec![
            (format!("{prefix}/{}", r.resource), servers.clone(), ""),
            (named.clone(), servers.clone(), ""),
            (format!("{prefix}/{}?watch=true&resourceVersion=0", r.resource), servers.clone(), ""),
            (format!("{prefix}/watch/{}", r.resource), servers.clone(), ""),
        ];
        if r.namespaced {
            forms.push((format!("{prefix}/namespaces/ns1/{}", r.resource), servers.clone(), ""));
        }
        for sub in r.all_subresources() {
            let capable: BTreeSet<&str> = r.releases_serving_subresource(&sub).iter().map(|rel| release_to_name(rel)).collect();
            let sub_static: &str = Box::leak(sub.clone().into_boxed_str());
            forms.push((format!("{named}/{sub}"), capable, sub_static));
        }
        for (path, capable, sub) in forms {
            checked += 1;
            let (status, body) = door.get_json(client, &path).await.unwrap();
            let server = served_by(&body);
            let ok = status == 200
                && capable.contains(server)
                && body["servedBy"]["resource"] == r.resource.as_str()
                && body["servedBy"]["group"] == r.group.as_str()
                && body["servedBy"]["subresource"] == sub;
            if !ok {
                failures.push(format!("{path}: {status} from {server}, capable {capable:?}"));
            }
        }
    }
    // Unaggregated per-group discovery, which kube-apiserver 404s for
    // group-versions only a peer serves.
    let mut gvs: BTreeSet<(String, String)> = BTreeSet::new();
    for r in resources.iter().filter(|r| !r.group.is_empty()) {
        gvs.insert((r.group.clone(), r.version.clone()));
    }
    for (g, v) in &gvs {
        for path in [format!("/apis/{g}"), format!("/apis/{g}/{v}")] {
            checked += 1;
            let resp = door.http.get(door.url(&path)).send().await.unwrap();
            if resp.status() != 200 {
                failures.push(format!("{path}: {}", resp.status()));
            }
        }
    }
    assert!(failures.is_empty(), "{} of {checked} requests misrouted:\n{}", failures.len(), failures.join("\n"));
    assert!(checked > 700, "only {checked} requests checked");
    // The filter did reroute (not just luck of round robin); workers flush
    // the counter once a second.
    wait_for("the rerouted-requests counter", Duration::from_secs(5), || async {
        (door.envoy_stat("wasmcustom.mvp.router.rerouted_requests").await? > 300).then_some(())
    })
    .await
    .unwrap();
}

/// Writes (create, update, patch, delete) are routed like reads.
#[tokio::test]
async fn writes_to_a_new_api_reach_the_new_server() {
    let door = FrontDoor::start(&three(), Options::default()).await.unwrap();
    let path = "/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests";
    let body = r#"{"apiVersion":"lifecycle.k8s.io/v1alpha1","kind":"EvictionRequest","metadata":{"name":"e1"}}"#;
    for (method, p) in [
        (reqwest::Method::POST, path.to_string()),
        (reqwest::Method::PUT, format!("{path}/e1")),
        (reqwest::Method::PATCH, format!("{path}/e1")),
        (reqwest::Method::DELETE, format!("{path}/e1")),
        (reqwest::Method::DELETE, path.to_string()),
    ] {
        let resp = door.http.request(method.clone(), door.url(&p)).header("content-type", "application/json").body(body).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{method} {p}");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(served_by(&v), "v137", "{method} {p}");
        assert_eq!(v["servedBy"]["method"], method.as_str());
    }
}

#[tokio::test]
async fn unknown_api_gets_the_apiservers_own_404_status() {
    let door = FrontDoor::start(&three(), Options::default()).await.unwrap();
    for path in ["/apis/nope.example.com/v1/widgets", "/apis/apps/v9/deployments", "/api/v1/namespaces/ns/nothings/x"] {
        let (status, body) = door.get_json(&door.http, path).await.unwrap();
        assert_eq!(status, 404, "{path}");
        assert_eq!(body["kind"], "Status");
        assert_eq!(body["reason"], "NotFound");
        assert_eq!(body["message"], "the server could not find the requested resource");
    }
}

/// The only apiserver that serves an API is down: 503 with a Status body.
/// An API another running server also serves: failover, never an error.
#[tokio::test]
async fn stopped_apiserver_gives_503_status_or_fails_over() {
    // A long refresh interval keeps v137 "healthy" in the table, so every
    // request below really exercises Envoy's connect-failure failover.
    let options = Options { refresh_interval: Duration::from_secs(3600), ..Options::default() };
    let mut door = FrontDoor::start(&three(), options).await.unwrap();
    door.fake_mut("v137").proc.kill();

    for _ in 0..6 {
        let resp = door.http.get(door.url("/apis/lifecycle.k8s.io/v1alpha1/evictionrequests")).send().await.unwrap();
        assert_eq!(resp.status(), 503);
        assert_eq!(resp.headers()["content-type"], "application/json");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["kind"], "Status");
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["status"], "Failure");
        assert_eq!(v["reason"], "ServiceUnavailable");
        assert_eq!(v["code"], 503);
    }
    // resource.k8s.io/v1beta1: v1.33 and v1.37 serve it; v1.37 is down.
    // pods: everyone serves it; round robin hits the dead one a third of the time.
    for path in ["/apis/resource.k8s.io/v1beta1/namespaces/ns/resourceclaims/c", "/api/v1/namespaces/ns/pods/p"] {
        for i in 0..12 {
            let (status, v) = door.get_json(if i % 2 == 0 { &door.http } else { &door.h2c }, path).await.unwrap();
            assert_eq!(status, 200, "{path} #{i}: {v}");
            assert_ne!(served_by(&v), "v137");
        }
    }
}

/// Writes fail over too: Envoy keeps enough of a body to resend anything
/// kube would accept (3 MiB) to the next capable apiserver; a larger body
/// that cannot be resent gets the 503 Status, never Envoy's plain-text 507.
#[tokio::test]
async fn large_writes_fail_over_or_get_the_503_status() {
    let options = Options { refresh_interval: Duration::from_secs(3600), ..Options::default() };
    let mut door = FrontDoor::start(&three(), options).await.unwrap();
    door.fake_mut("v137").proc.kill();
    // resource.k8s.io/v1beta1: v1.33 and v1.37 serve it; v1.37 is down but
    // still listed first for every other request.
    let path = "/apis/resource.k8s.io/v1beta1/namespaces/ns/resourceclaims";
    for i in 0..8 {
        let resp = door.http.post(door.url(path)).header("content-type", "application/json").body(vec![b' '; 3 << 20]).send().await.unwrap();
        let status = resp.status();
        let v: Value = resp.json().await.unwrap();
        assert!(status.is_success() && served_by(&v) == "v133", "3 MiB write #{i}: {status} {v}");
    }
    let mut status_503 = 0;
    for i in 0..8 {
        let resp = door.http.post(door.url(path)).header("content-type", "application/json").body(vec![b' '; 6 << 20]).send().await.unwrap();
        let status = resp.status();
        let v: Value = resp.json().await.unwrap_or_default();
        if status.is_success() {
            assert_eq!(served_by(&v), "v133");
        } else {
            assert_eq!((status.as_u16(), v["kind"].as_str(), v["code"].as_u64(), v["reason"].as_str()), (503, Some("Status"), Some(503), Some("ServiceUnavailable")), "6 MiB write #{i}: {v}");
            status_503 += 1;
        }
    }
    assert!(status_503 > 0, "the dead apiserver was listed first for some 6 MiB writes");
}

/// When discovery sees the server go away, its last good view keeps routing
/// (503 for what only it served) while healthy peers take everything shared.
#[tokio::test]
async fn unhealthy_server_is_marked_and_its_peers_take_shared_apis() {
    let mut door = FrontDoor::start(&three(), Options::default()).await.unwrap();
    door.fake_mut("v137").proc.kill();
    door.wait_table_published(|t| t["apiservers"][2]["healthy"] == false && t["apiservers"][2]["resources"].as_u64().is_some())
        .await
        .unwrap();
    let resp = door.http.get(door.url("/apis/lifecycle.k8s.io/v1alpha1/evictionrequests")).send().await.unwrap();
    assert_eq!(resp.status(), 503);
    for _ in 0..6 {
        let (status, v) = door.get_json(&door.http, "/apis/resource.k8s.io/v1beta1/resourceclaims").await.unwrap();
        assert_eq!((status, served_by(&v)), (200, "v133"));
    }
}

/// A member that is down keeps its last known API set for as long as it is
/// a member, across mvp-ext-proc restarts too (the state file): requests for
/// what only it served get the 503 Status, never another server's 404.
#[tokio::test]
async fn a_down_members_apis_stay_503_across_ext_proc_restarts() {
    let mut door = FrontDoor::start(&three(), Options::default()).await.unwrap();
    door.fake_mut("v137").proc.kill();
    door.wait_table_published(|t| t["apiservers"][2]["healthy"] == false).await.unwrap();
    door.restart_ext_proc().await.unwrap();
    door.wait_table_published(|t| t["apiservers"][2]["healthy"] == false && t["apiservers"][2]["resources"].as_u64().is_some_and(|n| n > 0))
        .await
        .unwrap();
    for i in 0..6 {
        let (status, v) = door.get_json(if i % 2 == 0 { &door.http } else { &door.h2c }, "/apis/lifecycle.k8s.io/v1alpha1/evictionrequests").await.unwrap();
        assert_eq!((status, v["kind"].as_str(), v["code"].as_u64()), (503, Some("Status"), Some(503)), "{v}");
    }
}

/// A server whose discovery changes (an in-place upgrade from v1.30 to
/// v1.37) is routed by the new table within one refresh interval + 1 s.
#[tokio::test]
async fn discovery_change_is_routed_within_one_refresh_interval() {
    let refresh = Duration::from_secs(2);
    let door = FrontDoor::start(&three(), Options { refresh_interval: refresh, ..Options::default() }).await.unwrap();
    let flowschemas = "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas";
    let (status, v) = door.get_json(&door.http, flowschemas).await.unwrap();
    assert_eq!((status, served_by(&v)), (200, "v130"));

    let changed = Instant::now();
    let resp = door.http.post(format!("{}/__fake/release?name=v1.37", door.fake("v130").url())).send().await.unwrap();
    assert_eq!(resp.status(), 200);

    // lifecycle.k8s.io is now served by v130 too: requests spread over both.
    let evictions = "/apis/lifecycle.k8s.io/v1alpha1/evictionrequests";
    wait_for("v130 to serve lifecycle.k8s.io through the front door", refresh + Duration::from_secs(1), || async {
        let (_, v) = door.get_json(&door.http, evictions).await.ok()?;
        (served_by(&v) == "v130").then_some(())
    })
    .await
    .unwrap();
    let elapsed = changed.elapsed();
    // And flowcontrol v1beta3, served by nobody now, is the apiserver's 404.
    let (status, _) = door.get_json(&door.http, flowschemas).await.unwrap();
    assert_eq!(status, 404);
    eprintln!("discovery change routed after {elapsed:?} (refresh interval {refresh:?})");
}

/// The refresher long-polls: a new table reaches Envoy when mvp-ext-proc
/// publishes it, not at the refresher's next poll. With polls 10 minutes
/// apart, a discovery change is routed within seconds (before the long
/// poll: at the next poll, minutes later).
#[tokio::test]
async fn a_published_table_reaches_envoy_without_waiting_for_a_poll() {
    fn poll_every_ten_minutes(yaml: String) -> String {
        let key = r#""poll_interval_ms":"#;
        let at = yaml.find(key).expect("the rendered refresher configuration has a poll interval") + key.len();
        let end = at + yaml[at..].find(',').expect("more fields follow it");
        format!("{}600000{}", &yaml[..at], &yaml[end..])
    }
    let refresh = Duration::from_millis(500);
    let options = Options { refresh_interval: refresh, edit_config: Some(poll_every_ten_minutes), ..Options::default() };
    let door = FrontDoor::start(&three(), options).await.unwrap();
    let evictions = "/apis/lifecycle.k8s.io/v1alpha1/evictionrequests";
    for _ in 0..3 {
        let (status, v) = door.get_json(&door.http, evictions).await.unwrap();
        assert_eq!((status, served_by(&v)), (200, "v137"));
    }
    let resp = door.http.post(format!("{}/__fake/release?name=v1.37", door.fake("v130").url())).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let changed = Instant::now();
    wait_for("v130 to serve lifecycle.k8s.io through the front door", Duration::from_secs(10), || async {
        let (_, v) = door.get_json(&door.http, evictions).await.ok()?;
        (served_by(&v) == "v130").then_some(())
    })
    .await
    .unwrap();
    eprintln!("discovery change routed after {:?} (refresh interval {refresh:?}, table polls 10 min apart)", changed.elapsed());
}

/// Routing and identity headers from clients never reach an apiserver, and
/// a client cannot pick the upstream.
#[tokio::test]
async fn client_routing_and_identity_headers_never_survive() {
    let door = FrontDoor::start(&three(), Options::default()).await.unwrap();
    let v130 = door.fake("v130").address();
    let v137 = door.fake("v137").address();
    let outside = format!("127.0.0.1:{}", door.metrics_port);
    for (path, want_server, rerouted) in [
        ("/apis/lifecycle.k8s.io/v1alpha1/evictionrequests", Some("v137"), true),
        ("/api/v1/namespaces/default/pods", None, false),
    ] {
        for pick in [v130.as_str(), outside.as_str(), "10.9.9.9:80"] {
            for client in [&door.http, &door.h2c] {
                let resp = client
                    .get(door.url(path))
                    .header("x-mvp-route", pick)
                    .header("X-MVP-Route", format!("{pick},{pick}"))
                    .header("x-kubernetes-peer-proxied", "true")
                    .header("X-Remote-User", "system:admin")
                    .header("X-Remote-Group", "system:masters")
                    .header("x-remote-uid", "0")
                    .header("X-Remote-Extra-Scopes", "all")
                    .header("x_remote_user", "system:admin")
                    .header("X_Remote_Group", "system:masters")
                    .header("x_mvp_route", pick)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status(), 200, "{path} with x-mvp-route {pick}");
                let v: Value = resp.json().await.unwrap();
                if let Some(s) = want_server {
                    assert_eq!(served_by(&v), s, "{path}: client picked {pick}");
                }
                let headers = v["servedBy"]["headers"].as_object().unwrap();
                for (name, values) in headers {
                    assert!(!name.starts_with("x-remote-") && !name.contains('_'), "{name} reached the apiserver: {values}");
                }
                // The client's copy never reaches an apiserver, and the door
                // adds none (mvp_contract::headers::PEER_PROXIED).
                assert!(!headers.contains_key("x-kubernetes-peer-proxied"), "{headers:?}");
                if rerouted {
                    // The native build pins without the route header
                    // (native-filter/src/lb.rs): none reaches the apiserver.
                    match FilterBuild::from_env() {
                        FilterBuild::Native => assert!(!headers.contains_key("x-mvp-route"), "{headers:?}"),
                        _ => assert_eq!(headers["x-mvp-route"], serde_json::json!([v137.clone()])),
                    }
                } else {
                    assert!(!headers.contains_key("x-mvp-route"), "{headers:?}");
                }
            }
        }
    }
}

/// The stripping does not depend on the wasm filter: with the filter gone
/// (as when a failed VM is bypassed under FAIL_OPEN) a client header still
/// cannot pick an apiserver, nor leave the configured set.
#[tokio::test]
async fn headers_are_stripped_even_without_the_filter() {
    fn drop_filter(yaml: String) -> String {
        edit_http_filters(&yaml, |filters| filters.retain(|f| f["name"] != "mvp.route"))
    }
    let door = FrontDoor::start(&three(), Options { edit_config: Some(drop_filter), ..Options::default() }).await.unwrap();
    let v130 = door.fake("v130").address();
    let mut seen = BTreeSet::new();
    for _ in 0..9 {
        let resp = door
            .http
            .get(door.url("/api/v1/pods"))
            .header("x-mvp-route", &v130)
            .header("X-Remote-User", "system:admin")
            .send()
            .await
            .unwrap();
        let v: Value = resp.json().await.unwrap();
        seen.insert(served_by(&v).to_string());
        let headers = v["servedBy"]["headers"].as_object().unwrap();
        assert!(!headers.contains_key("x-mvp-route") && !headers.contains_key("x-remote-user"), "{headers:?}");
    }
    assert_eq!(seen.len(), 3, "round robin ignored the client's pick: {seen:?}");
}

/// A configuration mistake in the filter (the refresher's role given to the
/// HTTP filter) must not break requests. The wasm build cannot refuse a
/// plugin configuration Envoy accepted: its requests pass with plain load
/// balancing instead of a panicked VM answering 503 to everything. The
/// native build refuses the configuration in Envoy itself, with the reason:
/// at startup Envoy does not start, and a reconfiguration keeps the last good one.
#[tokio::test]
async fn misconfigured_filter_role_passes_requests_through() {
    fn refresher_as_filter(yaml: String) -> String {
        edit_http_filters(&yaml, |filters| {
            let wrong = serde_json::json!(r#"{"role":"refresher","cluster":"mvp_ext_proc"}"#);
            if let Some(f) = filters.iter_mut().find(|f| f["name"] == "mvp.route") {
                match f["typed_config"].get_mut("filter_config") {
                    Some(native) => native["value"] = wrong,
                    None => f["typed_config"]["config"]["configuration"]["value"] = wrong,
                }
            }
        })
    }
    let started = FrontDoor::start(&three(), Options { edit_config: Some(refresher_as_filter), ..Options::default() }).await;
    if FilterBuild::from_env() == FilterBuild::Native {
        let e = format!("{:#}", started.err().expect("Envoy must refuse the native filter's wrong role"));
        assert!(e.contains("mvp router: configuration rejected: the refresher is the bootstrap extension"), "{e}");
        return;
    }
    let door = started.unwrap();
    for _ in 0..6 {
        let (status, _) = door.get_json(&door.http, "/api/v1/namespaces/default/pods").await.unwrap();
        assert_eq!(status, 200);
    }
    assert_eq!(door.envoy_stat("wasm.mvp_router.vm_reload").await.unwrap_or(0), 0);
}
