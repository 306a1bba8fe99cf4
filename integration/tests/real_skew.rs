//! The front door in front of REAL current kube-apiservers during skew:
//! v1.34 (a genuinely older binary), v1.37 running as v1.35
//! (`--emulated-version`) and v1.37, on one etcd, each with its own
//! `--runtime-config`, as during an upgrade. Built from Go modules by
//! `scripts/kube-release.sh` (cached outside the tree).
//!
//! What is asserted is what a user checks: every resource any server lists
//! in its own discovery (`profile=nopeer`) can be listed through the front
//! door, whoever asks and over whichever protocol; the same requests through
//! a plain round robin fail a measured share.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use integration::harness::real::{RealControlPlane, TOKENS, three_releases};
use integration::harness::secure::kubeconfig;
use integration::harness::tools::kubectl_137;
use integration::harness::plain_round_robin;
use serde_json::{Value, json};

/// Each server's listable resources, and the share no server lacks.
async fn skew(cp: &RealControlPlane) -> (BTreeMap<String, BTreeSet<String>>, BTreeSet<String>) {
    let mut by_server = BTreeMap::new();
    for (i, a) in cp.apiservers.iter().enumerate() {
        by_server.insert(a.name.clone(), cp.listable(i).await.unwrap());
    }
    let mut sets = by_server.values();
    let first = sets.next().cloned().unwrap_or_default();
    let shared = sets.fold(first, |acc, s| acc.intersection(s).cloned().collect());
    (by_server, shared)
}

/// Three real releases really differ: each serves resources another lacks.
#[tokio::test]
async fn emulated_and_older_releases_serve_different_apis() {
    let cp = RealControlPlane::start_specs(&three_releases()).await.unwrap();
    let (by_server, shared) = skew(&cp).await;
    for (name, own) in &by_server {
        let only: Vec<_> = own.difference(&shared).collect();
        eprintln!("{name}: {} listable, {} not on every server: {only:?}", own.len(), only.len());
        assert!(!only.is_empty(), "{name} serves nothing the others lack");
    }
    // Emulation changes the API surface and /version's emulationMinor, not
    // the binary's gitVersion: a client reading gitVersion sees 1.37.
    for (a, (git, emulation)) in cp.apiservers.iter().zip([("v1.34.4", "34"), ("v1.37.2", "35"), ("v1.37.2", "37")]) {
        let v: Value = cp.http.get(format!("{}/version", a.url())).send().await.unwrap().json().await.unwrap();
        assert_eq!((v["gitVersion"].as_str(), v["emulationMinor"].as_str()), (Some(git), Some(emulation)), "{}: {v}", a.name);
    }
}

/// Every resource any server lists answers 200 through the front door —
/// HTTP/2 and HTTP/1.1, a certificate user and a token user; through a
/// plain round-robin Envoy (the same bootstrap without the filter) a
/// measured share of the same requests fails.
#[tokio::test]
async fn every_resource_any_server_lists_answers_200_through_the_door() {
    let cp = RealControlPlane::start_specs(&three_releases()).await.unwrap();
    let (by_server, shared) = skew(&cp).await;
    let all: BTreeSet<String> = by_server.values().flatten().cloned().collect();
    let door = cp.front_door().await.unwrap();
    let token = TOKENS[0].0;
    let mut failures = vec![];
    for http2 in [true, false] {
        let cert = door.https(Some(&cp.admin), http2).unwrap();
        let plain = door.https(None, http2).unwrap();
        for collection in &all {
            let path = format!("{collection}?limit=1");
            for (who, req) in [("certificate", cert.get(door.url(&path))), ("token", plain.get(door.url(&path)).bearer_auth(token))] {
                let code = req.send().await.map(|r| r.status().as_u16()).unwrap_or(0);
                if code != 200 {
                    failures.push(format!("{path} ({who}, http2={http2}): {code}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} of {} requests failed:\n{}", failures.len(), all.len() * 4, failures.join("\n"));

    // Before the upgrade finishes (kas-134 and the emulated 1.35 leave):
    // `readiness` names every listable resource only they serve, and only
    // those among what kas-137 lists — by each server's own discovery.
    let out = Command::new(integration::harness::ext_proc_bin().unwrap())
        .args(["readiness", "-o", "json", "--server", &format!("http://127.0.0.1:{}", door.metrics_port)])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!((out.status.code(), report["scenario"].as_str()), (Some(1), Some("the upgrade to 1.37 finished")), "{report}");
    let leaving: Vec<&str> = report["leaving"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(leaving, ["kas-134", "kas-135"], "the emulated 1.35 leaves too: {report}");
    let newest = &by_server["kas-137"];
    let lost: BTreeSet<String> = report["lost"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["subresource"].is_null())
        .map(|a| match a["group"].as_str().unwrap() {
            "" => format!("/api/{}/{}", a["version"].as_str().unwrap(), a["resource"].as_str().unwrap()),
            g => format!("/apis/{g}/{}/{}", a["version"].as_str().unwrap(), a["resource"].as_str().unwrap()),
        })
        .collect();
    let only_leaving: BTreeSet<String> = all.difference(newest).cloned().collect();
    assert!(only_leaving.is_subset(&lost), "not reported: {:?}", only_leaving.difference(&lost).collect::<Vec<_>>());
    assert!(lost.is_disjoint(newest), "reported though kas-137 lists them: {:?}", lost.intersection(newest).collect::<Vec<_>>());
    eprintln!("readiness: {} resources served by no apiserver once 1.37 alone runs ({} of them listable), {} only 1.37 serves", report["lost"].as_array().unwrap().len(), only_leaving.len(), report["lostOnRollback"].as_array().unwrap().len());
    // And who used them: the certificate's user as the door forwarded it,
    // twice each (HTTP/2 and HTTP/1.1); the static token is no JWT, its
    // client unidentified.
    let readiness_json = || {
        let out = Command::new(integration::harness::ext_proc_bin().unwrap()).args(["readiness", "-o", "json", "--server", &format!("http://127.0.0.1:{}", door.metrics_port)]).output().unwrap();
        serde_json::from_slice::<Value>(&out.stdout).unwrap_or_default()
    };
    let admin = json!({"kind": "certificate", "user": "kubernetes-admin", "groups": ["system:masters"]});
    let used = integration::harness::wait_for("the skew log's counts", std::time::Duration::from_secs(20), || {
        let r = readiness_json();
        let lost: Vec<Value> = r["lost"].as_array().cloned().unwrap_or_default().into_iter().filter(|a| a["subresource"].is_null()).collect();
        // Both clients' entries in (each Envoy worker flushes its own log).
        let both = |c: &Vec<Value>| c.iter().any(|c| c["who"] == admin && c["count"] == 2) && c.iter().any(|c| c["who"]["kind"] == "unidentified" && c["count"] == 2);
        let all_counted = !lost.is_empty() && lost.iter().all(|a| a["usedBy"]["clients"].as_array().is_some_and(both));
        async move { all_counted.then_some(lost) }
    })
    .await
    .unwrap();
    for a in &used {
        assert_eq!(a["usedBy"]["clients"].as_array().map(Vec::len), Some(2), "no other client: {a}");
    }

    // The control: a plain round robin in front of the same servers.
    let (_envoy, plain) = door.another_envoy_with(plain_round_robin).await.unwrap();
    let client = door.https(None, false).unwrap();
    let (mut skewed, mut failed) = (0, 0);
    for collection in all.difference(&shared) {
        for _ in 0..3 {
            let url = format!("https://127.0.0.1:{}{collection}?limit=1", plain.ports.listen);
            let code = client.get(url).bearer_auth(token).send().await.map(|r| r.status().as_u16()).unwrap_or(0);
            skewed += 1;
            if code != 200 {
                failed += 1;
            }
        }
    }
    eprintln!("plain round robin: {failed} of {skewed} requests for resources not on every server failed");
    assert!(failed * 4 >= skewed, "round robin should fail about half: {failed} of {skewed}");
}

/// Objects of resources one server alone serves are written, read, watched
/// and deleted through the front door: each request lands on the server
/// that serves the resource, whichever server the connection met first.
#[tokio::test]
async fn objects_of_skewed_resources_are_written_read_watched_and_deleted_through_the_door() {
    let cp = RealControlPlane::start_specs(&three_releases()).await.unwrap();
    let door = cp.front_door().await.unwrap();
    let bundle = std::fs::read_to_string(&cp.pki.serving.cert_file).unwrap();
    // (collection, object): one per server, each served by that server only.
    let objects = [
        ("/apis/storage.k8s.io/v1alpha1/volumeattributesclasses", json!({"apiVersion": "storage.k8s.io/v1alpha1", "kind": "VolumeAttributesClass", "metadata": {"name": "gold"}, "driverName": "csi.example.com", "parameters": {"iops": "3000"}})),
        ("/apis/networking.k8s.io/v1beta1/servicecidrs", json!({"apiVersion": "networking.k8s.io/v1beta1", "kind": "ServiceCIDR", "metadata": {"name": "extra"}, "spec": {"cidrs": ["10.96.0.0/24"]}})),
        ("/apis/certificates.k8s.io/v1beta1/clustertrustbundles", json!({"apiVersion": "certificates.k8s.io/v1beta1", "kind": "ClusterTrustBundle", "metadata": {"name": "serving-ca"}, "spec": {"trustBundle": bundle}})),
    ];
    for http2 in [true, false] {
        let client = door.https(Some(&cp.admin), http2).unwrap();
        for (collection, object) in &objects {
            let name = object["metadata"]["name"].as_str().unwrap();
            let created = client.post(door.url(collection)).json(object).send().await.unwrap();
            assert_eq!(created.status(), 201, "create {collection} (http2={http2}): {}", created.text().await.unwrap_or_default());
            let rv = created.json::<Value>().await.unwrap()["metadata"]["resourceVersion"].as_str().unwrap().to_string();
            // Reads from new connections, so they meet every server first.
            for _ in 0..6 {
                let fresh = door.https(Some(&cp.admin), http2).unwrap();
                let got = fresh.get(door.url(&format!("{collection}/{name}"))).send().await.unwrap();
                assert_eq!(got.status(), 200, "get {collection}/{name} (http2={http2})");
            }
            // A watch from before the delete sees it.
            let mut watch = client
                .get(door.url(&format!("{collection}?watch=1&resourceVersion={rv}&timeoutSeconds=20")))
                .send()
                .await
                .unwrap();
            assert_eq!(watch.status(), 200, "watch {collection}");
            let deleted = client.delete(door.url(&format!("{collection}/{name}"))).send().await.unwrap();
            assert!(matches!(deleted.status().as_u16(), 200 | 202), "delete {collection}/{name}: {}", deleted.status());
            // A protection finalizer (vac-protection) holds it until its
            // controller — not running here — lets go: do it with a patch.
            let unfinalize = client
                .patch(door.url(&format!("{collection}/{name}")))
                .header("content-type", "application/merge-patch+json")
                .body(r#"{"metadata":{"finalizers":null}}"#)
                .send()
                .await
                .unwrap();
            assert!(matches!(unfinalize.status().as_u16(), 200 | 404), "patch {collection}/{name}: {}", unfinalize.status());
            let mut seen = String::new();
            while !seen.contains("\"DELETED\"") {
                match tokio::time::timeout(std::time::Duration::from_secs(20), watch.chunk()).await {
                    Ok(Ok(Some(c))) => seen.push_str(&String::from_utf8_lossy(&c)),
                    other => panic!("watch {collection} ended before DELETED ({other:?}): {seen}"),
                }
            }
            let gone = client.get(door.url(&format!("{collection}/{name}"))).send().await.unwrap();
            assert_eq!(gone.status(), 404, "{collection}/{name} after delete: the honest 404 of a served resource");
        }
    }
}

/// kubectl 1.37 through the door during the skew: `api-resources` lists
/// every server's resources, `explain` finds every server's types (the
/// merged `/openapi/v3` index routes each document to a server that has
/// it), `apply --server-side` and `get` work on a resource of each server.
/// Each run is a new kubectl with an empty discovery cache: a new
/// connection, landing on any server first.
#[tokio::test]
async fn kubectl_sees_and_changes_every_servers_resources() {
    let cp = RealControlPlane::start_specs(&three_releases()).await.unwrap();
    let door = cp.front_door().await.unwrap();
    let user = format!("    client-certificate: {}\n    client-key: {}", cp.admin.cert_file.display(), cp.admin.key_file.display());
    let kc = kubeconfig(cp.dir.path(), &door.url(""), &cp.pki.serving.cert_file, &user);
    let kubectl = |args: &[&str]| {
        let cache = tempfile::tempdir().unwrap();
        let out = Command::new(kubectl_137().unwrap()).arg("--kubeconfig").arg(&kc).arg("--cache-dir").arg(cache.path()).args(args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "kubectl {args:?}: {}{text}", String::from_utf8_lossy(&out.stderr));
        text
    };
    // (resource, group/version, server): one of each server's own.
    let own = [
        ("volumeattributesclasses", "storage.k8s.io/v1alpha1", "kas-134"),
        ("servicecidrs", "networking.k8s.io/v1beta1", "kas-135"),
        ("clustertrustbundles", "certificates.k8s.io/v1beta1", "kas-137"),
        ("leasecandidates", "coordination.k8s.io/v1beta1", "kas-137"),
    ];
    for _ in 0..3 {
        let resources = kubectl(&["api-resources", "-o", "wide"]);
        for (resource, gv, _) in own {
            let (g, _) = gv.split_once('/').unwrap();
            assert!(kubectl(&["api-resources", &format!("--api-group={g}")]).lines().any(|l| l.starts_with(resource)), "api-resources lacks {resource}:\n{resources}");
            let explained = kubectl(&["explain", resource, &format!("--api-version={gv}")]);
            assert!(explained.contains(&format!("VERSION:    {}", gv.split_once('/').unwrap().1)) || explained.contains(gv), "explain {resource} ({gv}):\n{explained}");
        }
    }
    let manifests = cp.dir.path().join("skewed.yaml");
    std::fs::write(
        &manifests,
        "apiVersion: storage.k8s.io/v1alpha1\nkind: VolumeAttributesClass\nmetadata: {name: silver}\ndriverName: csi.example.com\nparameters: {iops: \"1000\"}\n---\n\
         apiVersion: networking.k8s.io/v1beta1\nkind: ServiceCIDR\nmetadata: {name: more}\nspec: {cidrs: [10.97.0.0/24]}\n",
    )
    .unwrap();
    for _ in 0..2 {
        let applied = kubectl(&["apply", "--server-side", "-f", &manifests.to_string_lossy()]);
        assert_eq!(applied.lines().count(), 2, "{applied}");
    }
    for (what, name) in [("volumeattributesclasses.v1alpha1.storage.k8s.io", "silver"), ("servicecidrs.v1beta1.networking.k8s.io", "more")] {
        for _ in 0..3 {
            assert!(kubectl(&["get", what, name, "-o", "name"]).contains(name), "get {what}/{name}");
        }
    }
    exec_answers_as_directly(&cp, &kc, &user);
}

/// `kubectl exec` (an upgrade request: WebSocket, SPDY as fallback) through
/// the door gets the apiserver's own answer, the same as directly. There is
/// no kubelet here, so the real servers allow no stream: the pod is bound to
/// a node that does not exist, and every server answers the upgrade with
/// that error.
fn exec_answers_as_directly(cp: &RealControlPlane, door_kc: &std::path::Path, user: &str) {
    let run = |kc: &std::path::Path, args: &[&str]| {
        let cache = tempfile::tempdir().unwrap();
        Command::new(kubectl_137().unwrap()).arg("--kubeconfig").arg(kc).arg("--cache-dir").arg(cache.path()).args(args).output().unwrap()
    };
    let pod = cp.dir.path().join("pod.yaml");
    // No controller-manager creates the namespace's service account here.
    std::fs::write(&pod, "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: default, namespace: default}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: shell, namespace: default}\nspec: {nodeName: node-gone, containers: [{name: c, image: busybox}]}\n").unwrap();
    let created = run(door_kc, &["apply", "-f", &pod.to_string_lossy()]);
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let exec = ["exec", "-n", "default", "shell", "--", "true"];
    let through_door = run(door_kc, &exec);
    let dir = tempfile::tempdir().unwrap();
    for a in &cp.apiservers {
        let direct = run(&kubeconfig(dir.path(), &a.url(), &cp.pki.serving.cert_file, user), &exec);
        assert!(!direct.status.success() && !through_door.status.success());
        assert_eq!(String::from_utf8_lossy(&through_door.stderr), String::from_utf8_lossy(&direct.stderr), "kubectl exec through the door vs {}", a.name);
    }
    eprintln!("kubectl exec: {}", String::from_utf8_lossy(&through_door.stderr));
}

/// The Python `kubernetes` client through the door during the skew: its
/// unaggregated discovery lists every server's groups, and its dynamic
/// client finds and lists a resource of each server.
#[tokio::test]
async fn the_python_client_discovers_and_lists_every_servers_resources() {
    let cp = RealControlPlane::start_specs(&three_releases()).await.unwrap();
    let door = cp.front_door().await.unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/discovery.py");
    let kinds = ["storage.k8s.io/v1alpha1:VolumeAttributesClass", "networking.k8s.io/v1beta1:ServiceCIDR", "certificates.k8s.io/v1beta1:ClusterTrustBundle", "coordination.k8s.io/v1beta1:LeaseCandidate"];
    for _ in 0..3 {
        let mut cmd = Command::new(integration::harness::python().unwrap());
        cmd.arg(script).arg(door.url("")).arg("--ca").arg(&cp.pki.serving.cert_file).arg("--token").arg(TOKENS[0].0).args(kinds);
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        for group in ["storage.k8s.io", "networking.k8s.io", "certificates.k8s.io", "coordination.k8s.io"] {
            assert!(report["groups"].as_array().unwrap().iter().any(|g| g == group), "{group}: {report}");
        }
        for (kind, list_kind) in kinds.iter().map(|k| k.replace(':', "/")).zip(["VolumeAttributesClassList", "ServiceCIDRList", "ClusterTrustBundleList", "LeaseCandidateList"]) {
            assert_eq!(report["resources"][&kind]["listKind"], list_kind, "{kind}: {report}");
        }
    }
}
