//! The front door in front of REAL kube-apiservers: two v1.20.2 servers on
//! one etcd with a kubeadm-like PKI (client CA, separate front-proxy CA,
//! token file, RBAC), the second serving a different API set, as during an
//! upgrade. Built by `scripts/kube-apiserver.sh` (cached outside the tree).

use std::process::Command;

use integration::harness::real::{RealControlPlane, TOKENS};
use integration::harness::secure::kubeconfig;
use integration::harness::{FrontDoor, Options, kubectl_137, plain_round_robin};

/// kas-b serves three group-versions kas-a does not, and not apps/v1.
const SKEWED: &[&str] =
    &["--runtime-config=flowcontrol.apiserver.k8s.io/v1alpha1=true,storage.k8s.io/v1alpha1=true,batch/v2alpha1=true,apps/v1=false"];

async fn status(client: &reqwest::Client, door: &FrontDoor, path: &str) -> u16 {
    client.get(door.url(path)).send().await.map(|r| r.status().as_u16()).unwrap_or(0)
}

/// On v1.20 the last-started apiserver deletes the APIService objects of
/// group-versions it does not serve, so `/apis` lists lie in both start
/// orders; every request for an API only one server serves still reaches
/// that server (a plain load balancer: about half get 404).
#[tokio::test]
async fn skewed_apis_reach_their_server_in_both_start_orders() {
    for order in [[("kas-a", &[][..]), ("kas-b", SKEWED)], [("kas-b", SKEWED), ("kas-a", &[][..])]] {
        let cp = RealControlPlane::start(&order).await.unwrap();
        let door = FrontDoor::in_front_of(cp.members(), Options { tls: Some(cp.pki.clone()), ..Options::default() }).await.unwrap();
        let started = format!("{} then {}", order[0].0, order[1].0);
        for http2 in [true, false] {
            let admin = door.https(Some(&cp.admin), http2).unwrap();
            for _ in 0..10 {
                for path in [
                    "/apis/apps/v1/namespaces/default/deployments",
                    "/apis/batch/v2alpha1/namespaces/default/cronjobs",
                    "/apis/storage.k8s.io/v1alpha1/volumeattachments",
                    "/api/v1/namespaces/default/configmaps",
                ] {
                    assert_eq!(status(&admin, &door, path).await, 200, "{path}, started {started}, http2={http2}");
                }
            }
        }
        // kubectl discovers every group-version either server serves: the
        // old servers' APIGroupList answer to its aggregated request is
        // replaced by the merged document.
        let user = format!("    client-certificate: {}\n    client-key: {}", cp.admin.cert_file.display(), cp.admin.key_file.display());
        let kc = kubeconfig(cp.dir.path(), &door.url(""), &cp.pki.serving.cert_file, &user);
        let out = Command::new(kubectl_137().unwrap()).arg("--kubeconfig").arg(&kc).arg("api-versions").output().unwrap();
        let versions = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        for gv in ["apps/v1", "batch/v2alpha1", "storage.k8s.io/v1alpha1", "flowcontrol.apiserver.k8s.io/v1alpha1", "v1"] {
            assert!(versions.lines().any(|l| l == gv), "kubectl api-versions lacks {gv} (started {started}):\n{versions}");
        }
    }
}

/// Every definition and path either server has, as a set.
fn openapi_names(doc: &serde_json::Value) -> std::collections::BTreeSet<String> {
    ["paths", "definitions"]
        .iter()
        .flat_map(|m| doc[*m].as_object().into_iter().flat_map(move |o| o.keys().map(move |k| format!("{m}:{k}"))))
        .collect()
}

/// `kubectl explain` and `kubectl api-resources` see every server's types:
/// v1.20 has no `/openapi/v3` (kubectl falls back to `/openapi/v2`, in
/// protobuf), and the front door answers `/openapi/v2` with the union of
/// both servers' documents, JSON and protobuf.
#[tokio::test]
async fn kubectl_explain_and_api_resources_see_every_server() {
    let cp = RealControlPlane::start(&[("kas-a", &[][..]), ("kas-b", SKEWED)]).await.unwrap();
    let door = FrontDoor::in_front_of(cp.members(), Options { tls: Some(cp.pki.clone()), ..Options::default() }).await.unwrap();
    let user = format!("    client-certificate: {}\n    client-key: {}", cp.admin.cert_file.display(), cp.admin.key_file.display());
    let kc = kubeconfig(cp.dir.path(), &door.url(""), &cp.pki.serving.cert_file, &user);

    // The JSON form is the exact union of what the two servers serve.
    let admin = door.https(Some(&cp.admin), true).unwrap();
    let mut direct = std::collections::BTreeSet::new();
    for a in &cp.apiservers {
        let own: serde_json::Value = cp.http.get(format!("{}/openapi/v2", a.url())).send().await.unwrap().json().await.unwrap();
        direct.extend(openapi_names(&own));
    }
    let wait = integration::harness::wait_for("the merged /openapi/v2", std::time::Duration::from_secs(30), || async {
        let r = admin.get(door.url("/openapi/v2")).header("accept", "application/json").send().await.ok()?;
        let etag = r.headers().get("etag")?.to_str().ok()?.to_string();
        let doc: serde_json::Value = r.json().await.ok()?;
        (openapi_names(&doc) == direct).then_some(etag)
    })
    .await;
    let etag = wait.expect("the merged /openapi/v2 lists every path and definition of both servers");
    let revalidated = admin.get(door.url("/openapi/v2")).header("accept", "application/json").header("if-none-match", &etag).send().await.unwrap();
    assert_eq!(revalidated.status(), 304, "a client holding the merged document revalidates it");

    let explain = [
        (&["explain", "deployments.spec.strategy"][..], "apps/v1"),
        (&["explain", "cronjobs", "--api-version=batch/v2alpha1"], "batch/v2alpha1"),
        (&["explain", "volumeattachments", "--api-version=storage.k8s.io/v1alpha1"], "storage.k8s.io/v1alpha1"),
        (&["explain", "flowschemas", "--api-version=flowcontrol.apiserver.k8s.io/v1alpha1"], "flowcontrol.apiserver.k8s.io/v1alpha1"),
    ];
    for kubectl in [kubectl_137().unwrap(), "kubectl".into()] {
        for _ in 0..5 {
            for (args, version) in explain {
                let out = Command::new(&kubectl).arg("--kubeconfig").arg(&kc).args(args).output().unwrap();
                let text = String::from_utf8_lossy(&out.stdout);
                assert!(out.status.success() && text.contains(version), "{kubectl:?} {args:?}: {}{text}", String::from_utf8_lossy(&out.stderr));
            }
        }
        let out = Command::new(&kubectl).arg("--kubeconfig").arg(&kc).arg("api-resources").output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        for (resource, version) in [("deployments", "apps/v1"), ("volumeattachments", "storage.k8s.io/v1"), ("configmaps", "v1")] {
            assert!(
                text.lines().any(|l| l.split_whitespace().next() == Some(resource) && l.split_whitespace().any(|w| w == version)),
                "{kubectl:?} api-resources lacks {resource} {version}:\n{text}"
            );
        }
    }
}

/// Identities reach the real apiservers exactly as they would directly: a
/// certificate in system:masters may list everything, a token user with no
/// RBAC rights gets kube's own 403, an unknown token 401.
#[tokio::test]
async fn real_rbac_decides_on_the_forwarded_identity() {
    let cp = RealControlPlane::start(&[("kas-a", &[][..]), ("kas-b", SKEWED)]).await.unwrap();
    let door = FrontDoor::in_front_of(cp.members(), Options { tls: Some(cp.pki.clone()), ..Options::default() }).await.unwrap();
    let path = "/apis/batch/v2alpha1/namespaces/default/cronjobs";
    let admin = door.https(Some(&cp.admin), true).unwrap();
    assert_eq!(status(&admin, &door, path).await, 200);
    let anonymous = door.https(None, true).unwrap();
    let with_token = |t: &str| anonymous.get(door.url(path)).bearer_auth(t).send();
    let (admin_token, nobody_token) = (TOKENS[0].0, TOKENS[1].0);
    assert_eq!(with_token(admin_token).await.unwrap().status(), 200);
    assert_eq!(with_token(nobody_token).await.unwrap().status(), 403);
    assert_eq!(with_token("not-a-token").await.unwrap().status(), 401);
}

/// Requests without a verified client certificate authenticate exactly as
/// they would directly: anonymous `/version`, `/healthz`, `/readyz`, and
/// kubeadm's join discovery (`kube-public/cluster-info`, readable by
/// system:anonymous) answer 200 through the front door, because the proxy
/// client certificate is presented only for identities the front door
/// asserts.
#[tokio::test]
async fn anonymous_requests_authenticate_as_they_would_directly() {
    let cp = RealControlPlane::start(&[("kas-a", &[][..]), ("kas-b", SKEWED)]).await.unwrap();
    let direct = cp.apiservers[0].url();
    let cluster_info = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cluster-info", "namespace": "kube-public"}, "data": {"kubeconfig": "…"}});
    let role = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "kubeadm:bootstrap-signer-clusterinfo", "namespace": "kube-public"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cluster-info"], "verbs": ["get"]}]});
    let binding = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "kubeadm:bootstrap-signer-clusterinfo", "namespace": "kube-public"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kubeadm:bootstrap-signer-clusterinfo"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:anonymous"}]});
    for (path, body) in [
        ("/api/v1/namespaces/kube-public/configmaps", cluster_info),
        ("/apis/rbac.authorization.k8s.io/v1/namespaces/kube-public/roles", role),
        ("/apis/rbac.authorization.k8s.io/v1/namespaces/kube-public/rolebindings", binding),
    ] {
        let resp = cp.http.post(format!("{direct}{path}")).json(&body).send().await.unwrap();
        assert_eq!(resp.status(), 201, "{path}: {}", resp.text().await.unwrap_or_default());
    }
    let door = FrontDoor::in_front_of(cp.members(), Options { tls: Some(cp.pki.clone()), ..Options::default() }).await.unwrap();
    for http2 in [true, false] {
        let anonymous = door.https(None, http2).unwrap();
        for path in ["/version", "/healthz", "/readyz", "/api/v1/namespaces/kube-public/configmaps/cluster-info"] {
            for _ in 0..4 {
                assert_eq!(status(&anonymous, &door, path).await, 200, "{path} http2={http2}");
            }
        }
        // Anonymous is still nobody: RBAC denies everything else.
        assert_eq!(status(&anonymous, &door, "/api/v1/namespaces/default/configmaps").await, 403);
    }
}

/// A stopped real apiserver's exclusive APIs answer the 503 Status — also
/// after mvp-ext-proc restarts while it is down (its API set comes from the
/// state file) — never a 404 that client-go would read as "deleted"; once it
/// is back they answer 200 again, while shared APIs never stop.
#[tokio::test]
async fn a_stopped_apiserver_is_503_not_404_until_it_is_back() {
    let mut cp = RealControlPlane::start(&[("kas-a", &[][..]), ("kas-b", SKEWED)]).await.unwrap();
    let mut door = FrontDoor::in_front_of(cp.members(), Options { tls: Some(cp.pki.clone()), ..Options::default() }).await.unwrap();
    let only_b = "/apis/batch/v2alpha1/namespaces/default/cronjobs";
    let shared = "/api/v1/namespaces/default/configmaps";
    cp.stop_apiserver(1);
    door.wait_table_published(|t| t["apiservers"][1]["healthy"] == false).await.unwrap();
    door.restart_ext_proc().await.unwrap();
    let admin = door.https(Some(&cp.admin), true).unwrap();
    for _ in 0..6 {
        let resp = admin.get(door.url(only_b)).send().await.unwrap();
        assert_eq!(resp.status(), 503);
        let v: serde_json::Value = resp.json().await.unwrap();
        assert_eq!((v["kind"].as_str(), v["reason"].as_str()), (Some("Status"), Some("ServiceUnavailable")));
        assert_eq!(status(&admin, &door, shared).await, 200);
    }
    cp.start_apiserver(1).await.unwrap();
    door.wait_table_published(|t| t["apiservers"][1]["healthy"] == true).await.unwrap();
    for _ in 0..6 {
        assert_eq!(status(&admin, &door, only_b).await, 200);
    }
}

/// The identity the front door forwards for a client certificate is exactly
/// the one kube-apiserver derives from it (Go's `pkix.Name`: the last CN,
/// every O): RBAC that names only that user (or group) gives the same
/// answer through the front door as directly — for a certificate with two
/// CNs, and for names with RFC 2253 specials and UTF-8.
#[tokio::test]
async fn certificate_identities_are_what_kube_derives_itself() {
    let cp = RealControlPlane::start(&[("kas-a", &[][..]), ("kas-b", SKEWED)]).await.unwrap();
    let direct = cp.apiservers[0].url();
    let tricky_user = "jürgen, \"q\" + \\x=y; <z>";
    let tricky_group = "ops+dev, 東京";
    let rbac = |kind: &str, name: &str, i: usize| {
        let role = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": format!("read-{i}"), "namespace": "default"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]});
        let binding = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": format!("read-{i}"), "namespace": "default"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": format!("read-{i}")},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}]});
        [("/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", role), ("/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", binding)]
    };
    for (i, (kind, name)) in [("User", "admin"), ("User", tricky_user), ("Group", tricky_group)].into_iter().enumerate() {
        for (path, body) in rbac(kind, name, i) {
            let resp = cp.http.post(format!("{direct}{path}")).json(&body).send().await.unwrap();
            assert_eq!(resp.status(), 201, "{path}: {}", resp.text().await.unwrap_or_default());
        }
    }
    let door = FrontDoor::in_front_of(cp.members(), Options { tls: Some(cp.pki.clone()), ..Options::default() }).await.unwrap();
    let dir = cp.dir.path();
    let clients = &cp.pki.clients;
    let cases = [
        ("two CNs, the last bound", clients.client_with_names(dir, "two-cns", &["alice", "admin"], &[]).unwrap(), 200),
        ("two CNs, the first bound", clients.client_with_names(dir, "two-cns-rev", &["admin", "alice"], &[]).unwrap(), 403),
        ("specials and UTF-8 in the CN", clients.client(dir, "tricky-user", tricky_user, &[]).unwrap(), 200),
        ("specials and UTF-8 in an O", clients.client(dir, "tricky-group", "somebody", &["other", tricky_group]).unwrap(), 200),
        ("nobody bound", clients.client(dir, "plain", "alice", &["dev"]).unwrap(), 403),
    ];
    let path = "/api/v1/namespaces/default/configmaps";
    for (why, cert, want) in cases {
        let config = integration::harness::tls_client_config(&cp.pki.serving.cert_file, Some(&cert), &[b"http/1.1"]).unwrap();
        let straight = reqwest::Client::builder().use_preconfigured_tls(config).no_proxy().build().unwrap();
        let direct_status = straight.get(format!("{direct}{path}")).send().await.unwrap().status().as_u16();
        assert_eq!(direct_status, want, "{why}: directly");
        for http2 in [true, false] {
            let via = door.https(Some(&cert), http2).unwrap();
            assert_eq!(status(&via, &door, path).await, want, "{why}: through the front door (http2={http2})");
        }
    }
}

/// Writes reach the server that serves the API (a Deployment only kas-a
/// serves, a v2alpha1 CronJob only kas-b serves), read back through the
/// front door; a watch streams the event of a write made after it started.
#[tokio::test]
async fn writes_and_watches_reach_the_server_that_serves_them() {
    let cp = RealControlPlane::start(&[("kas-a", &[][..]), ("kas-b", SKEWED)]).await.unwrap();
    let door = FrontDoor::in_front_of(cp.members(), Options { tls: Some(cp.pki.clone()), ..Options::default() }).await.unwrap();
    let admin = door.https(Some(&cp.admin), true).unwrap();
    let pod = serde_json::json!({"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}});
    let writes = [
        ("/apis/apps/v1/namespaces/default/deployments", serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d1"}, "spec": {"selector": {"matchLabels": {"app": "d1"}},
            "template": {"metadata": {"labels": {"app": "d1"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})),
        ("/apis/batch/v2alpha1/namespaces/default/cronjobs", serde_json::json!({"apiVersion": "batch/v2alpha1", "kind": "CronJob",
            "metadata": {"name": "c1"}, "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": pod}}}})),
    ];
    for (path, body) in writes {
        let name = body["metadata"]["name"].as_str().unwrap().to_string();
        let resp = admin.post(door.url(path)).json(&body).send().await.unwrap();
        assert_eq!(resp.status(), 201, "{path}: {}", resp.text().await.unwrap_or_default());
        for _ in 0..4 {
            assert_eq!(status(&admin, &door, &format!("{path}/{name}")).await, 200, "{path}/{name}");
        }
    }

    let mut watch = admin.get(door.url("/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=30")).send().await.unwrap();
    assert_eq!(watch.status(), 200);
    let created = admin
        .post(door.url("/api/v1/namespaces/default/configmaps"))
        .json(&serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "watched"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let mut seen = String::new();
    let found = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while let Ok(Some(chunk)) = watch.chunk().await {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("\"ADDED\"") && seen.contains("\"watched\"") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(found, Ok(true), "watch saw: {seen}");
}

/// The apiservers' side of 100 watches a client multiplexes on one HTTP/2
/// connection (issue 48): sent directly to one server they take 1
/// connection; through the front door, before, 100 (its apiserver clusters
/// spoke HTTP/1.1, one connection per in-flight request); now at most one
/// per Envoy worker and apiserver (2 × 2). Counted per client process (this
/// test's, then Envoy's): the servers' other connections — their own
/// loopback clients, mvp-ext-proc's discovery — open and close on their own
/// (a fresh-clone run saw the servers' total fall during the direct watches).
#[tokio::test]
async fn a_hundred_multiplexed_watches_cost_the_apiservers_a_connection_per_worker() {
    use integration::harness::watches::{established_from, hold_watches};
    let cp = RealControlPlane::start(&[("kas-a", &[][..]), ("kas-b", &[][..])]).await.unwrap();
    let door = FrontDoor::in_front_of(cp.members(), Options { tls: Some(cp.pki.clone()), ..Options::default() }).await.unwrap();
    let ports: Vec<u16> = cp.apiservers.iter().map(|a| a.port).collect();
    let connections = |pid: u32| ports.iter().map(|p| established_from(pid, *p)).sum::<usize>();
    // The namespaces kube-apiserver creates itself: each watch's first events.
    let path = "/api/v1/namespaces?watch=1&timeoutSeconds=60";

    let config = integration::harness::tls_client_config(&cp.pki.serving.cert_file, Some(&cp.admin), &[b"h2"]).unwrap();
    let direct = reqwest::Client::builder().use_preconfigured_tls(config).no_proxy().http2_prior_knowledge().build().unwrap();
    let me = std::process::id();
    let before = connections(me);
    // One request first, as a client's first request opens its connection
    // before its informers start: a hundred sent on a client that has none
    // yet can race to open two (hyper's pool; a fresh-clone run saw 2).
    let first = direct.get(format!("{}/api/v1/namespaces?limit=1", cp.apiservers[0].url())).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let watches = hold_watches(&direct, &format!("{}{path}", cp.apiservers[0].url()), 100).await;
    assert_eq!(watches.failed(), Vec::<u16>::new());
    let direct_cost = connections(me).saturating_sub(before);
    watches.end().await;

    let admin = door.https(Some(&cp.admin), true).unwrap();
    let envoy = door.envoy.pid();
    // Envoy's health-check connections and the pool its readiness probe
    // opened are there already and stay: counted before, not in the cost.
    let before = connections(envoy);
    let watches = hold_watches(&admin, &door.url(path), 100).await;
    assert_eq!(watches.failed(), Vec::<u16>::new());
    let door_cost = connections(envoy).saturating_sub(before);
    let door_total = connections(envoy);
    watches.end().await;
    eprintln!("100 watches on one client connection: {direct_cost} apiserver connection(s) directly, {door_cost} more through the front door ({door_total} of Envoy's in all, health checks included)");
    assert_eq!(direct_cost, 1);
    assert!(door_cost <= 4, "through the front door: {door_cost} apiserver connections");
}

/// kube-apiserver's `--goaway-chance` (after a random 2 % of its HTTP/2
/// requests it sends GOAWAY, so clients spread over servers; it never fires
/// on HTTP/1.1, which the front door spoke upstream before): Envoy drains
/// that connection and opens another, and none of 600 requests (10 at a
/// time, one client connection) is lost (issue 48 item 1).
#[tokio::test]
async fn goaway_chance_loses_no_request() {
    let goaway: &[&str] = &["--goaway-chance=0.02"];
    let cp = RealControlPlane::start(&[("kas-a", goaway), ("kas-b", goaway)]).await.unwrap();
    let door = FrontDoor::in_front_of(cp.members(), Options { tls: Some(cp.pki.clone()), ..Options::default() }).await.unwrap();
    let admin = door.https(Some(&cp.admin), true).unwrap();
    let paths = ["/api/v1/namespaces/default/configmaps", "/apis/apps/v1/namespaces/default/deployments", "/api/v1/namespaces"];
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for round in 0..60 {
        let batch = (0..10).map(|i| {
            let (admin, url) = (admin.clone(), door.url(paths[(round + i) % paths.len()]));
            async move { admin.get(url).send().await.map(|r| r.status().as_u16()).unwrap_or(0) }
        });
        for s in futures::future::join_all(batch).await {
            *statuses.entry(s).or_default() += 1;
        }
    }
    assert_eq!(statuses, [(200, 600)].into(), "600 requests under --goaway-chance");
    let goaways = door.envoy_stat("cluster.apiservers_requestheader.upstream_cx_close_notify").await.unwrap_or(0);
    eprintln!("600 requests under --goaway-chance=0.02: {goaways} GOAWAYs from the apiservers, all answered");
    assert!(goaways >= 1, "no GOAWAY seen: is the cluster HTTP/2?");
}

/// The control: the same skewed requests through a plain round-robin Envoy
/// (the same bootstrap without the filter) get 404s — the failure the front
/// door exists to prevent is really there in this topology.
#[tokio::test]
async fn a_plain_round_robin_envoy_gets_404s_for_the_same_requests() {
    let cp = RealControlPlane::start(&[("kas-a", &[][..]), ("kas-b", SKEWED)]).await.unwrap();
    let options = Options { tls: Some(cp.pki.clone()), edit_config: Some(plain_round_robin), ..Options::default() };
    let door = FrontDoor::in_front_of(cp.members(), options).await.unwrap();
    // A plain load balancer's client authenticates with a token (nothing
    // would forward a certificate identity).
    let client = door.https(None, false).unwrap();
    for path in ["/apis/apps/v1/namespaces/default/deployments", "/apis/batch/v2alpha1/namespaces/default/cronjobs"] {
        let mut codes = std::collections::BTreeMap::new();
        for _ in 0..20 {
            let code = client.get(door.url(path)).bearer_auth(TOKENS[0].0).send().await.map(|r| r.status().as_u16()).unwrap_or(0);
            *codes.entry(code).or_insert(0) += 1;
        }
        eprintln!("plain round robin, 20 × {path}: {codes:?}");
        assert!(codes.get(&404).copied().unwrap_or(0) >= 5, "{path}: {codes:?}");
    }
    // kubectl explain's schema source: one server's half.
    let mut lacking = 0;
    for _ in 0..20 {
        let doc: serde_json::Value = client.get(door.url("/openapi/v2")).bearer_auth(TOKENS[0].0).send().await.unwrap().json().await.unwrap();
        let names = openapi_names(&doc);
        if !names.contains("definitions:io.k8s.api.apps.v1.Deployment") || !names.contains("definitions:io.k8s.api.batch.v2alpha1.CronJob") {
            lacking += 1;
        }
    }
    eprintln!("plain round robin, 20 × /openapi/v2: {lacking} lack apps/v1 Deployment or batch/v2alpha1 CronJob");
    assert_eq!(lacking, 20, "each server has only its own half");
}

/// A multi-valued RDN (`CN=alice+CN=admin`, written by openssl): Envoy's
/// RFC 2253 form prints its attributes in reverse too, and the front door
/// forwards the CN kube-apiserver itself takes (Go: the last in the DER
/// order of the set, which sorts shorter encodings first, then bytes) —
/// RBAC naming one of the two decides the same way through the front door
/// as directly.
#[tokio::test]
async fn a_multi_valued_rdn_identity_is_what_kube_derives() {
    let cp = RealControlPlane::start(&[("kas-a", &[][..]), ("kas-b", SKEWED)]).await.unwrap();
    let direct = cp.apiservers[0].url();
    let role = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "read", "namespace": "default"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]});
    let binding = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "read", "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]});
    for (path, body) in [("/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", role), ("/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", binding)] {
        assert_eq!(cp.http.post(format!("{direct}{path}")).json(&body).send().await.unwrap().status(), 201);
    }
    let door = FrontDoor::in_front_of(cp.members(), Options { tls: Some(cp.pki.clone()), ..Options::default() }).await.unwrap();
    let path = "/api/v1/namespaces/default/configmaps";
    let mut directs = vec![];
    for (file, subject) in [("mv1", "/O=dev/CN=alice+CN=admin"), ("mv2", "/O=dev/CN=admin+CN=alice"), ("mv3", "/CN=carol+CN=alice")] {
        let cert = cp.pki.clients.client_from_openssl_subject(cp.dir.path(), file, subject).unwrap();
        let config = integration::harness::tls_client_config(&cp.pki.serving.cert_file, Some(&cert), &[b"http/1.1"]).unwrap();
        let straight = reqwest::Client::builder().use_preconfigured_tls(config).no_proxy().build().unwrap();
        let direct_status = straight.get(format!("{direct}{path}")).send().await.unwrap().status().as_u16();
        directs.push(direct_status);
        for http2 in [true, false] {
            let via = door.https(Some(&cert), http2).unwrap();
            assert_eq!(status(&via, &door, path).await, direct_status, "{subject} (http2={http2})");
        }
    }
    // Both outcomes occur, so the comparison decided something.
    assert!(directs.contains(&200) && directs.contains(&403), "direct answers: {directs:?}");
}

/// A kubelet's informers on a current release ask for a watch-list —
/// `sendInitialEvents=true&resourceVersionMatch=NotOlderThan` with
/// bookmarks, by field selector (its pods by `spec.nodeName`, a mounted
/// ConfigMap by name) — which kube serves from its watch cache once etcd
/// confirms it is current (progress notify; Debian's etcd 3.4.23 lacked
/// it and 1.37 answered these with an ERROR event; the tier now runs etcd
/// 3.6, `scripts/etcd.sh`). Through the front door, over HTTP/2, each
/// streams its initial objects, then the bookmark that ends them, then the
/// events that follow.
#[tokio::test]
async fn a_kubelets_watch_lists_stream_initial_events_a_bookmark_and_then_changes() {
    use integration::harness::real::{Release, Spec};
    let release = Release::minor(37);
    let cp = RealControlPlane::start_specs(&[Spec::new("kas-a", release, &[]), Spec::new("kas-b", release, &[])]).await.unwrap();
    let door = cp.front_door_with(Options::default()).await.unwrap();
    let admin = door.https(Some(&cp.admin), true).unwrap();
    let configmap = |name: &str| serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    let created = admin.post(door.url("/api/v1/namespaces/default/configmaps")).json(&configmap("cm-0")).send().await.unwrap();
    assert_eq!(created.status(), 201);
    const WATCH_LIST: &str = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=60";
    let watch = |path: String| {
        let (admin, url) = (admin.clone(), door.url(&path));
        async move {
            let resp = admin.get(url).send().await.unwrap();
            assert_eq!(resp.status(), 200, "{path}");
            resp
        }
    };
    let mut mounted = watch(format!("/api/v1/namespaces/default/configmaps?fieldSelector=metadata.name%3Dcm-0&{WATCH_LIST}")).await;
    let mut pods = watch(format!("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-0&{WATCH_LIST}")).await;
    // Events until `done` holds of what arrived, each a JSON line.
    async fn read_until(resp: &mut reqwest::Response, done: impl Fn(&[serde_json::Value]) -> bool) -> Vec<serde_json::Value> {
        let (mut buf, mut events) = (Vec::new(), Vec::new());
        let _ = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            while let Ok(Some(chunk)) = resp.chunk().await {
                buf.extend_from_slice(&chunk);
                while let Some(end) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=end).collect();
                    events.push(serde_json::from_slice(&line).unwrap_or(serde_json::Value::Null));
                }
                if done(&events) {
                    return;
                }
            }
        })
        .await;
        events
    }
    let ended = |e: &serde_json::Value| e["type"] == "BOOKMARK" && e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true";
    let initial = read_until(&mut mounted, |events| events.iter().any(ended)).await;
    let kinds: Vec<String> = initial.iter().map(|e| format!("{} {}", e["type"].as_str().unwrap_or("?"), e["object"]["metadata"]["name"].as_str().unwrap_or(""))).collect();
    assert_eq!(kinds.first().map(String::as_str), Some("ADDED cm-0"), "{kinds:?}");
    assert!(initial.last().is_some_and(ended), "the initial events' end: {kinds:?}");
    let none = read_until(&mut pods, |events| events.iter().any(ended)).await;
    assert!(none.len() == 1 && ended(&none[0]), "a node without pods: only the bookmark, got {none:?}");
    // Then the changes: the mounted ConfigMap's update.
    let patched = admin
        .patch(door.url("/api/v1/namespaces/default/configmaps/cm-0"))
        .header("content-type", "application/merge-patch+json")
        .body(r#"{"data":{"k":"v"}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(patched.status(), 200);
    let changed = read_until(&mut mounted, |events| events.iter().any(|e| e["type"] == "MODIFIED")).await;
    assert!(changed.iter().any(|e| e["type"] == "MODIFIED" && e["object"]["data"]["k"] == "v"), "{changed:?}");
}
