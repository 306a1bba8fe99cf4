//! Two mvp-ext-proc replicas for every Envoy (issue 31): `envoy-config
//! --ext-proc` repeated, the first preferred, health-checked over
//! `grpc.health.v1`. Killing one under load changes nothing a client sees:
//! every answer correct (`/apis` merged), tables keep coming from the other.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use integration::harness::tally::{PATHS_AND_APIS, Tally, after_requests, load_paths};
use integration::harness::{FakeSpec, FrontDoor, Options, three_fakes as three, wait_for};
use serde_json::Value;

const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// The merged aggregated `/apis` through the front door: ETag and bytes.
async fn apis(door: &FrontDoor) -> (String, Vec<u8>) {
    let resp = door
        .http
        .get(door.url("/apis"))
        .header("accept", AGGREGATED)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // What mvp-ext-proc did, for the operator (and the fallback filter).
    assert!(resp.headers().contains_key(mvp_contract::headers::DISCOVERY_RESULT), "{:?}", resp.headers());
    let etag = resp
        .headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    (etag, resp.bytes().await.unwrap().to_vec())
}

/// What Envoy took over ADS, by the versions it accepted: the hash of the
/// clusters (CDS) and of the apiservers' endpoint set (EDS).
async fn xds_versions(door: &FrontDoor) -> (u64, u64) {
    let (cds, eds) = (door.envoy_stat("cluster_manager.cds.version").await, door.envoy_stat("cluster.apiservers.version").await);
    let versions = (cds.unwrap_or(0), eds.unwrap_or(0));
    assert!(versions.0 != 0 && versions.1 != 0, "Envoy shows no xDS versions: {versions:?}");
    versions
}

/// Envoy's ext_proc counts: how often the first filter fell open, and how
/// often the fallback filter ran, fell open, and timed out.
#[derive(Debug)]
struct Exchanges {
    first_failed: u64,
    second_ran: u64,
    second_failed: u64,
    second_timed_out: u64,
}

async fn exchanges(door: &FrontDoor) -> Exchanges {
    let stat = |name: &'static str| async move { door.envoy_stat(&format!("http.apiserver_front_door.ext_proc.{name}")).await.unwrap_or(0) };
    Exchanges {
        first_failed: stat("failure_mode_allowed").await,
        second_ran: stat("fallback.streams_started").await,
        second_failed: stat("fallback.failure_mode_allowed").await,
        second_timed_out: stat("fallback.message_timeouts").await,
    }
}

impl Exchanges {
    /// The fallback filter ran exactly for the exchanges the first one fell
    /// open on — never beside an answer: one exchange per `/apis`, not two —
    /// and itself fell open only past its message timeout (both replicas
    /// slower than 1 s: a machine too loaded, not a replica lost); only
    /// those can have reached a client as one apiserver's `/apis`.
    fn check(&self, own_apis: u64) {
        assert_eq!(self.second_ran, self.first_failed, "the fallback filter ran other than for the first's failures: {self:?}");
        assert_eq!(self.second_failed, self.second_timed_out, "the fallback filter failed other than by its timeout: {self:?}");
        assert!(own_apis <= self.second_failed, "{own_apis} of one server's /apis, more than both filters failed: {self:?}");
    }
}

fn version(t: &Value) -> &str {
    t["version"].as_str().unwrap_or("")
}

/// Both replicas serve the same table and the same `/apis` from the same
/// apiservers. Under load from six clients (shared, pinned and v1.37-only
/// APIs, and `/apis`): the preferred replica is SIGKILLed — a discovery
/// change after that (v1.37 killed and restarted) reaches Envoy through the
/// standby — then restarted (Envoy fails back once its health check
/// passes), then the standby is stopped as the kubelet stops a pod
/// (SIGTERM). Every answer is correct; the only exceptions: the v1.37-only
/// API's 503 Status while v1.37 is down and requests in flight on v1.37's
/// connections at its kill. An `/apis` exchange in flight on the killed
/// replica's connections fails, and the fallback ext_proc filter asks the
/// other replica: no answer is one apiserver's document but where both
/// replicas missed the message timeout ([`Exchanges::check`]; 0 measured).
#[tokio::test]
async fn killing_or_stopping_either_replica_under_load_changes_nothing() {
    const CLIENTS: u64 = 6;
    let options = Options {
        replicas: 2,
        ..Options::default()
    };
    let mut door = FrontDoor::start(&three(), options).await.unwrap();
    let standby = door.standby_topology(0).unwrap();
    let first = door.table().await.unwrap();
    standby
        .wait_table(&door.http, |t| version(t) == version(&first))
        .await
        .expect("the replicas' tables differ");
    let before = apis(&door).await;

    let (stop, tally) = (Arc::new(AtomicBool::new(false)), Arc::new(Tally::default()));
    const V137_ONLY: &[&str] =
        &["/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests"];
    let tasks = load_paths(
        PATHS_AND_APIS,
        &door,
        CLIENTS as usize,
        stop.clone(),
        tally.clone(),
        V137_ONLY,
    );
    after_requests(&tally, 500).await;

    let eds = xds_versions(&door).await;
    both_replicas_healthy(&door).await;
    door.ext_proc.kill();
    after_requests(&tally, 1000).await;
    assert_eq!(apis(&door).await, before, "the standby's /apis is not the same bytes and ETag");
    // Envoy's ADS stream is on the standby now; what it holds has the
    // versions the preferred one sent.
    wait_for("Envoy's ADS stream on the standby", Duration::from_secs(30), || async {
        (door.envoy_stat("control_plane.connected_state").await? == 1).then_some(())
    })
    .await
    .unwrap();
    assert_eq!(xds_versions(&door).await, eds, "the standby's cluster or endpoint versions differ");
    eprintln!("CDS and EDS versions, the same from both: {eds:?}");
    let at_the_kill = tally.own_apis.load(Ordering::Relaxed);
    eprintln!("preferred replica killed: {}", tally.report());

    door.fake_mut("v137").proc.kill();
    standby
        .wait_table_published(&door.http, |t| t["apiservers"][2]["healthy"] == false)
        .await
        .unwrap();
    after_requests(&tally, 300).await;
    door.restart_fake("v137", FakeSpec::new("v137", "v1.37"))
        .await
        .unwrap();
    standby
        .wait_table_published(&door.http, |t| t["apiservers"][2]["healthy"] == true)
        .await
        .unwrap();
    after_requests(&tally, 500).await;
    eprintln!(
        "v1.37 killed and restarted, tables from the standby: {}",
        tally.report()
    );

    // A rolling restart: the next replica goes once Envoy's health check
    // passes for the restarted one.
    door.restart_ext_proc().await.unwrap();
    wait_for(
        "Envoy to see both replicas healthy",
        Duration::from_secs(30),
        || async {
            (door
                .envoy_stat("cluster.mvp_ext_proc.membership_healthy")
                .await?
                == 2)
                .then_some(())
        },
    )
    .await
    .unwrap();
    after_requests(&tally, 500).await;
    let before_the_stop = tally.own_apis.load(Ordering::Relaxed);
    door.standbys[0].signal("TERM");
    let stopping = &mut door.standbys[0];
    wait_for("the standby to stop", Duration::from_secs(30), || {
        let stopped = !stopping.is_running();
        async move { stopped.then_some(()) }
    })
    .await
    .unwrap();
    after_requests(&tally, 1000).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    eprintln!(
        "replicas killed and stopped in turn under load: {} requests: {}",
        tally.total(),
        tally.report()
    );
    assert!(tally.other.lock().unwrap().is_empty(), "{}", tally.report());
    assert!(
        tally.in_flight() <= CLIENTS,
        "more 503s for shared APIs than requests in flight at v1.37's kill: {}",
        tally.report()
    );
    let x = exchanges(&door).await;
    eprintln!("one server's /apis: {at_the_kill} at the kill, {before_the_stop} by the stop; {x:?}");
    x.check(tally.own_apis.load(Ordering::Relaxed));
}

/// The preferred replica partitioned (SIGSTOP: connections stay open,
/// nothing answers) under load: Envoy's health check fails it over; until
/// then each `/apis` exchange on it times out (the message timeout) and the
/// fallback ext_proc filter asks the other replica — late, not wrong
/// ([`Exchanges::check`]).
#[tokio::test]
async fn a_partitioned_replica_is_failed_over() {
    const CLIENTS: u64 = 6;
    let options = Options { replicas: 2, ..Options::default() };
    let door = FrontDoor::start(&three(), options).await.unwrap();
    let (stop, tally) = (Arc::new(AtomicBool::new(false)), Arc::new(Tally::default()));
    let tasks = load_paths(PATHS_AND_APIS, &door, CLIENTS as usize, stop.clone(), tally.clone(), &[]);
    after_requests(&tally, 500).await;
    // A 304 is an ext_proc local reply: it passes the fallback filter by.
    let (etag, _) = apis(&door).await;
    let revalidated = door.http.get(door.url("/apis")).header("accept", AGGREGATED).header("if-none-match", &etag).send().await.unwrap();
    assert_eq!(revalidated.status(), 304);
    door.ext_proc.signal("STOP");
    let stopped = std::time::Instant::now();
    wait_for("Envoy to fail the partitioned replica", Duration::from_secs(30), || async {
        (door.envoy_stat("cluster.mvp_ext_proc.membership_healthy").await? == 1).then_some(())
    })
    .await
    .unwrap();
    let failed_over = stopped.elapsed();
    let own_at_failover = tally.own_apis.load(Ordering::Relaxed);
    after_requests(&tally, 1000).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    door.ext_proc.signal("CONT");
    eprintln!("partitioned replica: failed over after {failed_over:?} ({own_at_failover} of one server's /apis by then); {} requests: {}", tally.total(), tally.report());
    assert!(tally.other.lock().unwrap().is_empty(), "{}", tally.report());
    assert!(failed_over < Duration::from_secs(5), "failed over after {failed_over:?}");
    let x = exchanges(&door).await;
    eprintln!("{x:?}");
    assert!(x.first_failed > 0, "the partition failed no exchange");
    x.check(tally.own_apis.load(Ordering::Relaxed));
}

/// Connected ADS streams of the replica whose metrics are on `port`.
async fn ads_streams(door: &FrontDoor, port: u16) -> Option<u64> {
    let text = door.http.get(format!("http://127.0.0.1:{port}/metrics")).send().await.ok()?.text().await.ok()?;
    text.lines().find_map(|l| l.strip_prefix("mvp_xds_streams ")?.trim().parse().ok())
}

/// Envoy's health checks pass for both replicas.
async fn both_replicas_healthy(door: &FrontDoor) {
    wait_for("Envoy to see both replicas healthy", Duration::from_secs(30), || async {
        (door.envoy_stat("cluster.mvp_ext_proc.membership_healthy").await? == 2).then_some(())
    })
    .await
    .unwrap();
}

async fn wait_for_stream(door: &FrontDoor, what: &str, port: u16) {
    wait_for(what, Duration::from_secs(30), || async { (ads_streams(door, port).await? == 1).then_some(()) }).await.unwrap();
}

/// After a failover and the preferred replica's return, Envoy's ADS stream
/// comes back to the preferred one (`--ads-max-stream-age`; Envoy itself
/// never gives up a working stream), and Envoy keeps routing meanwhile.
#[tokio::test]
async fn an_ads_stream_comes_back_to_the_preferred_replica() {
    const AGE: Duration = Duration::from_secs(2);
    let options = Options { replicas: 2, ext_proc_args: vec!["--ads-max-stream-age".into(), format!("{}s", AGE.as_secs())], ..Options::default() };
    let mut door = FrontDoor::start(&three(), options).await.unwrap();
    let (preferred, standby) = (door.metrics_port, door.standby_topology(0).unwrap().ports.metrics);
    wait_for_stream(&door, "Envoy's ADS stream on the preferred replica", preferred).await;

    // A failover needs a standby that passed Envoy's health checks (two,
    // 0.25 s apart, after its first table): killed before that, both
    // ext_proc filters found no healthy replica and fell open (8 `/apis` of
    // one server in one CI run), as they would in any cluster killed while
    // its only other replica starts.
    both_replicas_healthy(&door).await;
    let (stop, tally) = (Arc::new(AtomicBool::new(false)), Arc::new(Tally::default()));
    let tasks = load_paths(PATHS_AND_APIS, &door, 2, stop.clone(), tally.clone(), &[]);
    door.ext_proc.kill();
    wait_for_stream(&door, "Envoy's ADS stream on the standby", standby).await;
    door.restart_ext_proc().await.unwrap();
    let back = std::time::Instant::now();
    wait_for_stream(&door, "Envoy's ADS stream back on the preferred replica", preferred).await;
    let moved_back = back.elapsed();
    assert_eq!(ads_streams(&door, standby).await, Some(0), "the standby still holds a stream");
    after_requests(&tally, 200).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    eprintln!("ADS stream back on the preferred replica {moved_back:?} after its restart; {} requests: {}", tally.total(), tally.report());
    // A stream ends after AGE ± 10 % and Envoy reconnects within its backoff
    // (to the standby again if the restarted one is not yet healthy: one
    // more AGE).
    assert!(moved_back < AGE * 5, "moved back after {moved_back:?}");
    assert!(tally.other.lock().unwrap().is_empty(), "{}", tally.report());
    let x = exchanges(&door).await;
    eprintln!("{x:?}");
    x.check(tally.own_apis.load(Ordering::Relaxed));
}

/// `mvp-ext-proc readiness -o json --server` each of `ports`.
fn readiness_of(ports: &[u16]) -> Value {
    let mut cmd = std::process::Command::new(integration::harness::ext_proc_bin().unwrap());
    cmd.args(["readiness", "-o", "json"]);
    for p in ports {
        cmd.args(["--server", &format!("http://127.0.0.1:{p}")]);
    }
    serde_json::from_slice(&cmd.output().unwrap().stdout).unwrap_or_default()
}

/// Each replica counts the skew log of the Envoys that prefer it (its own
/// pod's, in the workload form). With `serve --replica` naming every
/// replica, either one's `readiness` counts every replica's clients — and
/// asking both counts each once.
#[tokio::test]
async fn readiness_counts_the_clients_every_replica_saw() {
    use envoy_types::pb::envoy::config::core::v3::Metadata;
    use envoy_types::pb::envoy::data::accesslog::v3::{AccessLogCommon, HttpAccessLogEntry, HttpRequestProperties};
    use envoy_types::pb::envoy::service::accesslog::v3::access_log_service_client::AccessLogServiceClient;
    use envoy_types::pb::envoy::service::accesslog::v3::stream_access_logs_message::{HttpAccessLogEntries, LogEntries};
    use envoy_types::pb::envoy::service::accesslog::v3::StreamAccessLogsMessage;
    use envoy_types::pb::google::protobuf::{Struct, Value as PbValue, value::Kind};
    use mvp_contract::envoy::{SKEW_METADATA_KEY, SKEW_METADATA_NAMESPACE};

    const API: &str = "flowcontrol.apiserver.k8s.io/v1beta3/flowschemas";
    let options = Options { replicas: 2, replica_peers: true, ..Options::default() };
    let door = FrontDoor::start(&[FakeSpec::new("v130", "v1.30"), FakeSpec::new("v137", "v1.37")], options).await.unwrap();
    let second = door.topology.standbys[0];

    // Through the front door, whose Envoy logs to the first replica.
    for _ in 0..3 {
        let r = door.http.get(door.url(&format!("/apis/{API}"))).header("user-agent", "curl/8.5").send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    // Another pod's Envoy, which prefers the second replica: its skew log's
    // entries, as Envoy sends them.
    let fields = [(SKEW_METADATA_KEY.to_string(), PbValue { kind: Some(Kind::StringValue(format!("{API}\t"))) })].into_iter().collect();
    let entry = HttpAccessLogEntry {
        common_properties: Some(AccessLogCommon {
            metadata: Some(Metadata { filter_metadata: [(SKEW_METADATA_NAMESPACE.to_string(), Struct { fields })].into_iter().collect(), ..Default::default() }),
            ..Default::default()
        }),
        request: Some(HttpRequestProperties { user_agent: "kubectl/v1.37.2".into(), ..Default::default() }),
        ..Default::default()
    };
    let message = StreamAccessLogsMessage { log_entries: Some(LogEntries::HttpLogs(HttpAccessLogEntries { log_entry: vec![entry.clone(), entry] })), ..Default::default() };
    let mut other_envoy = AccessLogServiceClient::connect(format!("http://127.0.0.1:{}", second.grpc)).await.unwrap();
    other_envoy.stream_access_logs(tokio_stream::iter([message])).await.unwrap();

    let counts = |report: &Value| -> Option<Vec<(String, u64)>> {
        let api = report["lost"].as_array()?.iter().find(|a| a["routedBy"] == API)?;
        let mut rows: Vec<(String, u64)> = api["usedBy"]["clients"].as_array()?.iter().map(|c| (c["userAgent"].as_str().unwrap_or_default().to_string(), c["count"].as_u64().unwrap_or(0))).collect();
        rows.sort();
        Some(rows)
    };
    let want = vec![("curl/8.5".to_string(), 3), ("kubectl/v1.37.2".to_string(), 2)];
    for port in [door.metrics_port, second.metrics] {
        let report = wait_for("both replicas' clients", Duration::from_secs(20), || async {
            let r = readiness_of(&[port]);
            (counts(&r).as_ref() == Some(&want)).then_some(r)
        })
        .await
        .unwrap_or_else(|e| panic!("replica on :{port}: {e}: {}", readiness_of(&[port])));
        assert_eq!(report["replicas"].as_array().map(Vec::len), Some(2), "{report}");
        assert!(report["replicasUnanswered"].is_null(), "{report}");
    }
    let both = readiness_of(&[door.metrics_port, second.metrics]);
    assert_eq!(counts(&both), Some(want), "asked both: {both}");
}
