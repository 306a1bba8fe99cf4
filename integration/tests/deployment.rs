//! The shipped deployment files agree with each other and with the code —
//! what the real runs (`install_compose.rs`: docker compose on a real
//! engine; `install_kubeadm.rs` and `install_workload.rs`: the manifests
//! under a real kubelet) cannot show: docker-compose.yml is the one
//! description of the topology: envoy/envoy.yaml
//! must be exactly what `mvp-ext-proc envoy-config` renders for it (with
//! `MVP_UPDATE_GOLDEN=1` this test writes it: `scripts/render-envoy-config.sh`)
//! and must load in the real Envoy.

use std::collections::BTreeMap;
use std::process::Command;

use integration::harness::{envoy_bin, ext_proc_bin, fixtures_dir, native_module_file, wasm_file, workspace_root};
use serde_json::Value;

fn compose() -> Value {
    let text = std::fs::read_to_string(workspace_root().join("docker-compose.yml")).unwrap();
    serde_yaml_ng::from_str(&text).unwrap()
}

fn command(service: &Value) -> Vec<String> {
    service["command"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect()
}

fn flag_values(args: &[String], flag: &str) -> Vec<String> {
    args.windows(2).filter(|w| w[0] == flag).map(|w| w[1].clone()).collect()
}

fn flag(args: &[String], flag: &str) -> String {
    let v = flag_values(args, flag);
    assert_eq!(v.len(), 1, "{flag} in {args:?}");
    v[0].clone()
}

/// `--apiserver NAME=URL` flags as a map.
fn apiserver_flags(args: &[String]) -> BTreeMap<String, String> {
    flag_values(args, "--apiserver")
        .into_iter()
        .map(|a| {
            let (n, u) = a.split_once('=').unwrap();
            (n.to_string(), u.to_string())
        })
        .collect()
}

/// The envoy-config flags for the compose topology.
fn rendering_args(apiservers: &BTreeMap<String, String>, grpc_port: &str, front: &Value) -> Vec<String> {
    let mut args = vec![];
    for (name, url) in apiservers {
        args.extend(["--apiserver".into(), format!("{name}={url}")]);
    }
    for flag in ["listen", "admin", "wasm", "native-module", "envoy-version", "cgroup-memory-monitor"] {
        args.extend([format!("--{flag}"), front[flag].as_str().unwrap().to_string()]);
    }
    args.extend(["--ext-proc".into(), format!("ext-proc:{grpc_port}")]);
    args
}

fn port_of(addr: &str) -> String {
    addr.rsplit(':').next().unwrap().to_string()
}

#[test]
fn compose_topology_matches_the_rendered_envoy_config() {
    let c = compose();
    let services = c["services"].as_object().unwrap();
    for name in ["apiserver-v130", "apiserver-v133", "apiserver-v137", "ext-proc", "envoy"] {
        assert!(services.contains_key(name), "docker-compose.yml has no service {name}");
    }

    // Fake apiservers: one per release, each serving a release we ship.
    let mut apiservers = BTreeMap::new();
    for (name, svc) in services.iter().filter(|(n, _)| n.starts_with("apiserver-")) {
        let args = command(svc);
        assert_eq!(args[0], "fake-apiserver");
        let release = flag(&args, "--release");
        assert!(fixtures_dir().join(&release).join("apis.json").exists(), "{name}: no fixtures for {release}");
        assert_eq!(flag(&args, "--fixtures"), "/usr/share/mvp/fixtures/discovery");
        let port = port_of(&flag(&args, "--listen"));
        apiservers.insert(flag(&args, "--name"), format!("http://{name}:{port}"));
    }
    assert_eq!(apiservers.len(), 3);

    // ext-proc polls exactly those apiservers.
    let ext = command(&services["ext-proc"]);
    assert_eq!(&ext[..2], ["mvp-ext-proc", "serve"]);
    assert_eq!(apiserver_flags(&ext), apiservers);
    let grpc_port = port_of(&flag(&ext, "--grpc-listen"));

    // Envoy mounts the rendered config where its command reads it.
    let envoy = &services["envoy"];
    let env_cmd = command(envoy);
    let config_in_container = flag(&env_cmd, "-c");
    let mounts: Vec<&str> = envoy["volumes"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(mounts.contains(&format!("./envoy/envoy.yaml:{config_in_container}:ro").as_str()), "{mounts:?}");

    // The front door's flags: published ports, both filter builds where the
    // image has them, the image's Envoy release.
    let args = rendering_args(&apiservers, &grpc_port, &c["x-envoy-config"]);
    let published: Vec<String> =
        envoy["ports"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().rsplit(':').next().unwrap().to_string()).collect();
    assert!(published.contains(&port_of(&flag(&args, "--listen"))), "listener port not published: {published:?}");
    assert!(published.contains(&port_of(&flag(&args, "--admin"))), "admin port not published: {published:?}");
    let dockerfile = std::fs::read_to_string(workspace_root().join("Dockerfile")).unwrap();
    assert!(dockerfile.contains(&format!("mvp_wasm_filter.wasm {}", flag(&args, "--wasm"))), "Dockerfile does not install the wasm at --wasm");
    assert!(dockerfile.contains(&format!("libmvp_native_filter.so {}", flag(&args, "--native-module"))), "Dockerfile does not install the module at --native-module");
    assert_eq!(dockerfile_envoy_release(), flag(&args, "--envoy-version"), "x-envoy-config's envoy-version is not the image's Envoy");
    assert!(dockerfile.contains("/usr/share/mvp/fixtures/discovery"));

    // envoy/envoy.yaml is exactly what the current code renders for it.
    let rendered = mvp_ext_proc::cli::envoy_config_yaml(&args).unwrap();
    let path = workspace_root().join("envoy/envoy.yaml");
    if std::env::var_os("MVP_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &rendered).unwrap();
    }
    let yaml = std::fs::read_to_string(&path).unwrap();
    assert!(rendered == yaml, "envoy/envoy.yaml is stale: run scripts/render-envoy-config.sh");
    // The image's Envoy loads the native module: the default picks it.
    assert!(yaml.contains("DynamicModuleFilter") && !yaml.contains("filters.http.wasm.v3.Wasm"), "the compose front door does not run the native build");
}

/// The Envoy release the Dockerfile's envoy image runs by default (`ARG
/// ENVOY_IMAGE=envoyproxy/envoy:vX.Y.Z`, the base of its `envoy` target).
fn dockerfile_envoy_release() -> String {
    let dockerfile = std::fs::read_to_string(workspace_root().join("Dockerfile")).unwrap();
    let from = dockerfile.lines().find(|l| l.starts_with("ARG ENVOY_IMAGE=envoyproxy/envoy:v")).expect("the Dockerfile's envoy image");
    assert!(dockerfile.contains("FROM ${ENVOY_IMAGE} AS envoy"), "the envoy target is not built on ENVOY_IMAGE");
    from.trim_start_matches("ARG ENVOY_IMAGE=envoyproxy/envoy:v").split_whitespace().next().unwrap().to_string()
}

/// Both filter builds' paths in a bootstrap rendered for an image, moved
/// to the ones built here.
fn with_local_builds(yaml: &str) -> String {
    yaml.replace("/usr/local/lib/mvp/mvp_wasm_filter.wasm", wasm_file().unwrap().to_str().unwrap())
        .replace("/usr/local/lib/mvp/libmvp_native_filter.so", native_module_file().unwrap().to_str().unwrap())
}

#[test]
fn rendered_envoy_config_loads_in_real_envoy() {
    let yaml = std::fs::read_to_string(workspace_root().join("envoy/envoy.yaml")).unwrap();
    let local = with_local_builds(&yaml);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("envoy.yaml");
    std::fs::write(&path, local).unwrap();
    let out = Command::new(envoy_bin().unwrap())
        .args(["--mode", "validate", "--disable-hot-restart", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("OK"), "{text}");
}

#[test]
fn envoy_config_rejects_bad_flags_with_clear_errors() {
    for (args, expect) in [
        (vec!["--apiserver", "bad", "--listen", "127.0.0.1:1", "--wasm", "w", "--ext-proc", "127.0.0.1:2"], "expected NAME=URL"),
        (vec!["--apiserver", "a=ftp://x:1", "--listen", "127.0.0.1:1", "--wasm", "w", "--ext-proc", "127.0.0.1:2"], "scheme must be http or https"),
        (vec!["--apiserver", "a=http://127.0.0.1:1", "--apiserver", "a=http://127.0.0.1:2", "--listen", "127.0.0.1:1", "--wasm", "w", "--ext-proc", "127.0.0.1:2"], "given twice"),
        (vec!["--apiserver", "a=http://127.0.0.1:1", "--listen", "nope", "--wasm", "w", "--ext-proc", "127.0.0.1:2"], "--listen"),
        (vec!["--apiserver", "a=http://127.0.0.1:1", "--listen", "127.0.0.1:1", "--wasm", "w", "--ext-proc", "nope"], "--ext-proc"),
        (vec!["--apiserver", "a=http://127.0.0.1:1", "--listen", "127.0.0.1:1", "--wasm", "w", "--ext-proc", "unix:grpc.sock"], "unix:/ABSOLUTE/PATH"),
        (vec!["--listen", "127.0.0.1:1", "--wasm", "w", "--ext-proc", "127.0.0.1:2", "--envoy-version", "1.x"], "is not an Envoy release"),
        (
            vec!["--listen", "127.0.0.1:1", "--filter", "native", "--native-module", "n.so", "--ext-proc", "127.0.0.1:2", "--envoy-version", "1.42.0"],
            "Envoy 1.42.0 cannot load the native module (built for Envoy 1.40, it loads in 1.40 and 1.41); use --filter wasm",
        ),
        (vec!["--listen", "127.0.0.1:1", "--native-module", "n.so", "--ext-proc", "127.0.0.1:2", "--envoy-version", "1.39.1"], "no --wasm"),
    ] {
        let out = Command::new(ext_proc_bin().unwrap()).arg("envoy-config").args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(expect), "{args:?}: {err}");
    }
}

/// `envoy-config` picks the native build when the Envoy it renders for
/// loads it (the real Envoy here, asked its release; or --envoy-version),
/// the `.wasm` otherwise, and says which and why on stderr.
#[test]
fn envoy_config_picks_the_native_build_where_the_envoy_loads_it() {
    let (wasm, native, envoy) = (wasm_file().unwrap(), native_module_file().unwrap(), envoy_bin().unwrap());
    let render = |extra: &[&str]| {
        let out = Command::new(ext_proc_bin().unwrap())
            .args(["envoy-config", "--listen", "127.0.0.1:1", "--ext-proc", "127.0.0.1:2", "--wasm"])
            .arg(&wasm)
            .arg("--native-module")
            .arg(&native)
            .args(extra)
            .output()
            .unwrap();
        let yaml = String::from_utf8_lossy(&out.stdout).into_owned();
        let build = if yaml.contains("DynamicModuleFilter") { "native" } else if yaml.contains("filters.http.wasm.v3.Wasm") { "wasm" } else { "none" };
        (out.status.success(), build, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let envoy = envoy.to_str().unwrap();
    // (extra flags, build, what stderr says)
    for (extra, want, says) in [
        (vec!["--envoy-binary", envoy], "native", "routing filter: the native build (Envoy 1.40."),
        (vec!["--envoy-version", "1.41.0"], "native", "the native build (Envoy 1.41.0 loads it)"),
        (vec!["--envoy-version", "1.42.0"], "wasm", "the wasm build: Envoy 1.42.0 cannot load the native module"),
        (vec!["--envoy-binary", "/nonexistent/envoy"], "wasm", "the Envoy's release is not known (cannot run /nonexistent/envoy --version"),
        (vec!["--envoy-binary", envoy, "--filter", "wasm"], "wasm", "the wasm build (--filter wasm)"),
        (vec!["--envoy-binary", "/nonexistent/envoy", "--filter", "native"], "native", "--filter native; the Envoy's release is not known"),
    ] {
        let (ok, build, stderr) = render(&extra);
        assert!(ok && build == want && stderr.contains(says), "{extra:?}: {build} ({stderr})");
    }
}

/// The fixtures the fake apiservers serve are the shared, real documents.
#[test]
fn fixtures_are_the_shared_real_documents() {
    let shared = workspace_root().join("../shared/fixtures/discovery");
    if !shared.exists() {
        eprintln!("{} not present; nothing to compare", shared.display());
        return;
    }
    for release in ["v1.30", "v1.33", "v1.37"] {
        for file in ["api.json", "apis.json", "api__v1.json"] {
            let ours = std::fs::read(fixtures_dir().join(release).join(file)).unwrap();
            let theirs = std::fs::read(shared.join(release).join(file)).unwrap();
            assert!(ours == theirs, "{release}/{file} differs from ../shared");
        }
    }
}

/// The `mvp-ext-proc envoy-config` flags a manifest's init container runs:
/// every `--flag=value` of its script, the ConfigMap's apiservers where the
/// script reads them, and the kubeadm paths moved to `pki` and the filter
/// builds to the ones built here.
fn manifest_envoy_config_args(script: &str, apiservers: &[String], pki: &std::path::Path) -> Vec<String> {
    let mut args: Vec<String> = Vec::new();
    for token in script.split_whitespace() {
        if token.starts_with("$(sed") {
            args.extend(apiservers.iter().map(|a| format!("--apiserver={a}")));
        } else if token.starts_with("--") {
            let local = token
                .replace("/etc/mvp/pki/", &format!("{}/", pki.display()))
                .replace("/etc/mvp/control/", &format!("{}/control/", pki.display()))
                .replace("/etc/mvp/envoy/", &format!("{}/envoy/", pki.display()));
            args.push(with_local_builds(&local));
        }
    }
    args
}

/// The values of `--NAME=VALUE` in a container's args (a list, or one
/// script), in order.
fn container_flags(pod_spec: &Value, list: &str, container: &str, name: &str) -> Vec<String> {
    let c = pod_spec[list].as_array().unwrap().iter().find(|c| c["name"] == container).unwrap();
    let text: Vec<&str> = c["args"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let prefix = format!("--{name}=");
    let found: Vec<String> = text.iter().flat_map(|a| a.split_whitespace()).filter_map(|t| t.strip_prefix(prefix.as_str())).map(str::to_string).collect();
    assert!(!found.is_empty(), "{container}: no --{name} in {text:?}");
    found
}

/// The one value of `--NAME=VALUE` in a container's args.
fn container_flag(pod_spec: &Value, list: &str, container: &str, name: &str) -> String {
    let found = container_flags(pod_spec, list, container, name);
    assert_eq!(found.len(), 1, "{container}: --{name} more than once: {found:?}");
    found[0].clone()
}

/// Envoy reaches its own pod's mvp-ext-proc first, where it listens (a
/// wildcard address listens on loopback too); a Unix socket's directory is
/// one volume both containers mount.
fn check_grpc_channel(form: &str, pod_spec: &Value) {
    let listen = container_flag(pod_spec, "containers", "mvp-ext-proc", "grpc-listen");
    let ext_proc = container_flags(pod_spec, "initContainers", "envoy-config", "ext-proc");
    let reached = listen == ext_proc[0] || listen.strip_prefix("0.0.0.0:").is_some_and(|port| ext_proc[0] == format!("127.0.0.1:{port}"));
    assert!(reached, "{form}: Envoy's first --ext-proc {} is not mvp-ext-proc's --grpc-listen {listen}", ext_proc[0]);
    // Operator endpoints beyond loopback: delegated authorization
    // (`real_operator_endpoints.rs`).
    let metrics = container_flag(pod_spec, "containers", "mvp-ext-proc", "metrics-listen");
    if metrics.parse::<std::net::SocketAddr>().is_ok_and(|a| !a.ip().is_loopback()) {
        let c = pod_spec["containers"].as_array().unwrap().iter().find(|c| c["name"] == "mvp-ext-proc").unwrap();
        let text = c["args"].to_string();
        assert!(text.contains("--delegated-auth-in-cluster") || text.contains("--authentication-kubeconfig"), "{form}: operator endpoints on {metrics} open to anyone");
    }
    // Beyond loopback, mutual TLS both ways (`control_channel.rs`).
    if listen.parse::<std::net::SocketAddr>().is_ok_and(|a| !a.ip().is_loopback()) {
        for (list, container, flag) in [("containers", "mvp-ext-proc", "tls-cert-file"), ("containers", "mvp-ext-proc", "client-ca-file"), ("initContainers", "envoy-config", "ext-proc-cert-file")] {
            container_flag(pod_spec, list, container, flag);
        }
    }
    if let Some(sock) = listen.strip_prefix("unix:") {
        let dir = std::path::Path::new(sock).parent().unwrap().to_str().unwrap();
        let volume = |container: &str| {
            let c = pod_spec["containers"].as_array().unwrap().iter().find(|c| c["name"] == container).unwrap();
            c["volumeMounts"].as_array().unwrap().iter().find(|m| m["mountPath"] == dir).map(|m| m["name"].clone())
        };
        let v = volume("mvp-ext-proc");
        assert!(v.is_some() && v == volume("envoy"), "{form}: {dir} is not one volume mounted by both containers");
    }
}

/// The deployment forms in `deploy/` are accepted by a real kube-apiserver
/// (the kubeadm static pod by `kubectl apply --dry-run=server`, the workload
/// form created for real), and the Envoy bootstrap each renders with its own
/// flags passes `envoy --mode validate` with kubeadm-named certificates.
#[tokio::test]
async fn deploy_manifests_are_accepted_by_a_real_apiserver_and_envoy() {
    use integration::harness::real::RealControlPlane;
    let cp = RealControlPlane::start(&[("kas-a", &[][..])]).await.unwrap();
    let user = format!("    client-certificate: {}\n    client-key: {}", cp.admin.cert_file.display(), cp.admin.key_file.display());
    let kc = integration::harness::secure::kubeconfig(cp.dir.path(), &cp.apiservers[0].url(), &cp.pki.serving.cert_file, &user);
    let root = workspace_root();
    let kubectl = |args: &[&str]| {
        let out = Command::new("kubectl").arg("--kubeconfig").arg(&kc).args(args).output().unwrap();
        (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    };
    let static_pod = root.join("deploy/kubeadm/mvp-envoy.yaml");
    let workload = root.join("deploy/workload/mvp-envoy.yaml");
    // What kube-controller-manager creates in a real cluster (this tier runs
    // none); the kubelet's mirror pod of a static pod needs no account.
    let (ok, out) = kubectl(&["-n", "kube-system", "create", "serviceaccount", "default"]);
    assert!(ok, "{out}");
    let (ok, out) = kubectl(&["apply", "--dry-run=server", "-f", static_pod.to_str().unwrap()]);
    assert!(ok && out.contains("pod/mvp-envoy created (server dry run)"), "{out}");
    let (ok, out) = kubectl(&["apply", "-f", workload.to_str().unwrap()]);
    assert!(ok, "{out}");
    for made in ["namespace/mvp-envoy created", "deployment.apps/mvp-envoy created", "service/mvp-envoy created", "configmap/mvp-envoy created", "role.rbac.authorization.k8s.io/mvp-envoy created", "service/mvp-ext-proc created", "networkpolicy.networking.k8s.io/mvp-envoy created", "clusterrolebinding.rbac.authorization.k8s.io/mvp-envoy-auth-delegator created", "clusterrole.rbac.authorization.k8s.io/mvp-envoy-operator-endpoints-reader created"] {
        assert!(out.contains(made), "{made}: {out}");
    }
    // The membership RBAC: exactly get/list/watch on those objects.
    let rbac = root.join("deploy/rbac/membership.yaml");
    let (ok, out) = kubectl(&["apply", "-f", rbac.to_str().unwrap()]);
    assert!(ok, "{out}");
    for (verb, what, ns, allowed) in [
        ("watch", "endpoints/kubernetes", "default", "yes"),
        ("list", "leases.coordination.k8s.io", "kube-system", "yes"),
        ("get", "endpoints/other", "default", "no"),
        ("update", "leases.coordination.k8s.io", "kube-system", "no"),
        ("list", "secrets", "kube-system", "no"),
    ] {
        let (_, out) = kubectl(&["auth", "can-i", verb, what, "-n", ns, "--as", "mvp-envoy"]);
        assert_eq!(out.trim(), allowed, "mvp-envoy {verb} {what} in {ns}");
    }
    let (ok, out) = kubectl(&["-n", "mvp-envoy", "get", "deployment", "mvp-envoy", "-o", "jsonpath={.spec.template.spec.containers[*].name}"]);
    assert!(ok && out == "mvp-ext-proc envoy", "{out}");

    // kubeadm's file names, from the test PKI (one CA file for clients and
    // apiservers, as kubeadm's ca.crt).
    let pki = cp.dir.path().join("kubeadm-pki");
    std::fs::create_dir_all(&pki).unwrap();
    let copy = |from: &std::path::Path, to: &str| std::fs::copy(from, pki.join(to)).unwrap();
    copy(&cp.pki.front_door.cert_file, "apiserver.crt");
    copy(&cp.pki.front_door.key_file, "apiserver.key");
    copy(&cp.pki.proxy_client.cert_file, "front-proxy-client.crt");
    copy(&cp.pki.proxy_client.key_file, "front-proxy-client.key");
    let bundle = format!("{}{}", std::fs::read_to_string(&cp.pki.clients.cert_file).unwrap(), std::fs::read_to_string(&cp.pki.serving.cert_file).unwrap());
    std::fs::write(pki.join("ca.crt"), bundle).unwrap();
    // The control channel's set, as `mvp-ext-proc certs` writes it.
    let certs = Command::new(ext_proc_bin().unwrap()).args(["certs", "--out"]).arg(pki.join("control")).output().unwrap();
    assert!(certs.status.success(), "{}", String::from_utf8_lossy(&certs.stderr));

    let docs = |path: &std::path::Path| -> Vec<Value> {
        let text = std::fs::read_to_string(path).unwrap();
        serde_yaml_ng::Deserializer::from_str(&text).map(|d| serde::Deserialize::deserialize(d).unwrap()).collect()
    };
    let static_docs = docs(&static_pod);
    let workload_docs = docs(&workload);
    let config_map = workload_docs.iter().find(|d| d["kind"] == "ConfigMap").unwrap();
    let apiservers: Vec<String> = config_map["data"]["apiservers"].as_str().unwrap().lines().map(str::to_string).collect();
    let init_script = |pod_spec: &Value| pod_spec["initContainers"].as_array().unwrap().iter().find(|c| c["name"] == "envoy-config").unwrap()["args"][0].as_str().unwrap().to_string();
    let deployment = workload_docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    check_grpc_channel("kubeadm", &static_docs[0]["spec"]);
    check_grpc_channel("workload", &deployment["spec"]["template"]["spec"]);
    for (form, script) in [("kubeadm", init_script(&static_docs[0]["spec"])), ("workload", init_script(&deployment["spec"]["template"]["spec"]))] {
        let args = manifest_envoy_config_args(&script, &apiservers, &pki);
        assert!(args.iter().filter(|a| a.starts_with("--apiserver=")).count() == 3, "{form}: {args:?}");
        // Rendered for the envoy image's release: the native build.
        assert!(args.contains(&format!("--envoy-version={}", dockerfile_envoy_release())), "{form}: --envoy-version is not the image's Envoy: {args:?}");
        let yaml = mvp_ext_proc::cli::envoy_config_yaml(&args).unwrap_or_else(|e| panic!("{form}: {e:#}"));
        assert!(yaml.contains("DynamicModuleFilter"), "{form}: not the native build");
        // The workload's two replicas: each Envoy fails over to the other
        // pod's mvp-ext-proc, with the fallback ext_proc filter for `/apis`.
        assert_eq!(yaml.contains(mvp_contract::envoy::EXT_PROC_FALLBACK_CLUSTER), form == "workload", "{form}");
        let path = cp.dir.path().join(format!("envoy-{form}.yaml"));
        std::fs::write(&path, yaml).unwrap();
        let out = Command::new(envoy_bin().unwrap()).args(["--mode", "validate", "--disable-hot-restart", "-c"]).arg(&path).output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("OK"), "{form}: {text}");
    }
}
