//! `demo [--smoke]`: the README's demo, started by `scripts/demo.sh`. Fake
//! kube-apiservers of Kubernetes v1.30, v1.33 and v1.37, mvp-ext-proc, and
//! Envoy with the mvp routing filter in front of them: the test harness's
//! front door on fixed loopback ports. The filter build is the one
//! `envoy-config` picks by default (native where the Envoy loads it;
//! `MVP_FILTER=wasm|native` forces one). Prints what to try, then runs until
//! Ctrl-C; `--smoke` checks that skewed APIs reach their server, and that
//! the default picked the native build for the Envoy that loads it, and exits.
//!
//! Ports move with `MVP_DEMO_PORT_BASE` (default 8400): front door BASE+43,
//! Envoy admin BASE+1, mvp-ext-proc gRPC BASE+10 and metrics BASE+90,
//! apiservers BASE+30, BASE+33, BASE+37.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Parser;
use integration::harness::{FilterBuild, FrontDoor, Options, Ports, workspace_root};

#[derive(Parser)]
struct Args {
    /// Start, check the front door routes, stop.
    #[arg(long)]
    smoke: bool,
}

/// A v1.37-only and a v1.30-only API, and who must answer them.
const SKEWED: [(&str, &str); 2] =
    [("/apis/lifecycle.k8s.io/v1alpha1/evictionrequests", "v137"), ("/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas", "v130")];

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let base: u16 = std::env::var("MVP_DEMO_PORT_BASE").ok().map(|b| b.parse()).transpose().context("MVP_DEMO_PORT_BASE")?.unwrap_or(8400);
    let ports = Ports { listen: base + 43, admin: base + 1, grpc: base + 10, metrics: base + 90 };
    let dir = workspace_root().join(".tools/demo");
    let specs = integration::harness::three_fakes();
    let options = Options {
        refresh_interval: Duration::from_millis(500),
        fixed_ports: Some((ports, vec![base + 30, base + 33, base + 37])),
        dir: Some(dir.clone()),
        filter: Some(if std::env::var_os("MVP_FILTER").is_some() { FilterBuild::from_env() } else { FilterBuild::Auto }),
        ..Options::default()
    };
    let door = FrontDoor::start(&specs, options.clone()).await.context("starting the demo")?;
    // Which build routes, as mvp-ext-proc's /table lists the connected Envoy.
    door.wait_table_published(|t| t["envoys"][0]["filter"].is_string()).await.context("the Envoy's filter build on /table")?;
    let build = door.table().await.and_then(|t| t["envoys"][0]["filter"].as_str().map(str::to_string)).unwrap_or_default();
    let front = format!("http://127.0.0.1:{}", ports.listen);
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: mvp-demo, cluster: {{server: \"{front}\"}}}}]\ncontexts: [{{name: mvp-demo, context: {{cluster: mvp-demo, user: demo}}}}]\nusers: [{{name: demo, user: {{}}}}]\ncurrent-context: mvp-demo\n"
        ),
    )?;

    if args.smoke {
        if options.filter == Some(FilterBuild::Auto) && build != "native" {
            bail!("smoke: envoy-config's default picked the {build:?} build for an Envoy 1.40, which loads the native one");
        }
        for _ in 0..3 {
            for (path, want) in SKEWED {
                let resp = door.http.get(door.url(path)).send().await?;
                let got = resp.headers().get("x-fake-apiserver").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
                if got != want {
                    bail!("smoke: {path} served by '{got}', want {want}");
                }
            }
        }
        println!("demo smoke: ok (the {build} build routes; v1.37-only and v1.30-only APIs each reached their server)");
        return Ok(());
    }

    let (admin, metrics, kc) = (ports.admin, ports.metrics, kubeconfig.display());
    let v137_pid = door.fake("v137").proc.pid();
    println!(
        r#"
mvp-envoy demo is up. Front door: {front}  (apiservers v1.30, v1.33, v1.37 behind it)
Envoy routes with the {build} filter build (envoy-config's pick for this Envoy; MVP_FILTER=wasm|native forces one)

  # a v1.37-only API: always answered by v137
  curl -s {front}/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests -D - -o /dev/null | grep x-fake-apiserver
  # a v1.30-only API: always answered by v130
  curl -s {front}/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas -D - -o /dev/null | grep x-fake-apiserver
  # an API nobody serves: the apiserver's own 404 Status
  curl -s {front}/apis/example.com/v1/widgets
  # the same through kubectl (pre-installed, and 1.37)
  kubectl --kubeconfig {kc} get --raw /apis/lifecycle.k8s.io/v1alpha1/evictionrequests
  .tools/venv/bin/kubectl --kubeconfig {kc} get --raw /apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas
  # why a request goes where (the filter's own decision, on its current table)
  target/debug/mvp-ext-proc explain --server http://127.0.0.1:{metrics} /apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests
  # what finishing the upgrade (only v1.37 left) or removing v130 would take away; exit status 1 while anything
  target/debug/mvp-ext-proc readiness --server http://127.0.0.1:{metrics}
  target/debug/mvp-ext-proc readiness --server http://127.0.0.1:{metrics} --remove v130
  # routing table and apiserver health, metrics, Envoy's view
  curl -s http://127.0.0.1:{metrics}/table
  curl -s http://127.0.0.1:{metrics}/metrics
  curl -s "http://127.0.0.1:{admin}/stats?filter=wasmcustom"
  # stop one apiserver and watch its APIs turn into 503 Status while shared ones fail over
  kill {v137_pid}

Logs: {}/*.log   Ctrl-C stops everything."#,
        dir.display()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    drop(door);
    Ok(())
}
