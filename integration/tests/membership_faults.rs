//! Live membership when what it depends on misbehaves (real Envoy,
//! loopback, bounded): Envoys that freeze or never acknowledge, a
//! membership that cannot be listed, a lease watch that goes silent, clocks
//! that disagree (issue 31). The happy paths are in `membership.rs`.

use std::time::{Duration, Instant};

use integration::harness::{FakeSpec, FrontDoor, Options, free_ports, served_by, three_fakes};

const EVICTIONS: &str = "/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";
const FLOWSCHEMAS_V1BETA3: &str = "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas";

/// A second Envoy that freezes (SIGSTOP: its machine hangs, its TCP peer
/// still ACKs) keeps its ADS stream and the endpoint set it last
/// acknowledged: without HTTP/2 keepalive on the gRPC listener, a member
/// joining meanwhile stayed closed for every Envoy until TCP gave up
/// (~15 min; issue 31; measured: still closed after 30 s). With it, the
/// frozen stream is dropped after the keepalive interval and timeout
/// (10 + 5 s) and the member opens.
#[tokio::test]
async fn a_frozen_envoy_does_not_keep_a_joining_member_closed() {
    let mut door = FrontDoor::start(&[FakeSpec::new("v130", "v1.30"), FakeSpec::new("v133", "v1.33")], Options { membership: Some("leases"), ..Options::default() })
        .await
        .unwrap();
    let (frozen, _) = door.another_envoy().await.unwrap();
    frozen.signal("STOP");
    let started = Instant::now();
    door.add_fake(FakeSpec::new("v137", "v1.37")).await.unwrap();
    let open = |t: &serde_json::Value| t["apiservers"].as_array().is_some_and(|a| a.iter().any(|s| s["name"] == "apiserver-v137" && s["open"] == true));
    door.wait_table_published(open).await.unwrap();
    eprintln!("joined and opened in {:?} with a frozen Envoy connected", started.elapsed());
    for _ in 0..6 {
        let (status, v) = door.get_json(&door.http, EVICTIONS).await.unwrap();
        assert_eq!((status, served_by(&v)), (200, "v137"));
    }
    frozen.signal("CONT");
}

/// mvp-ext-proc restarted with `--membership` and no seeds while the
/// Kubernetes API it lists the membership through is unreachable (likely
/// mid-upgrade): the members in its state file stay members, read
/// directly, until the membership has been listed once — every API keeps
/// answering. Before (issue 31): every member started departed (the
/// reflectors had not listed), all closed, EDS draining, every request 503
/// for as long as the API stayed unreachable.
#[tokio::test]
async fn a_restart_before_the_membership_can_be_listed_keeps_every_member() {
    let mut door = FrontDoor::start(&three_fakes(), Options { membership: Some("endpoints,leases"), seeds: Some(0), ..Options::default() }).await.unwrap();
    let all_open = |t: &serde_json::Value| t["apiservers"].as_array().is_some_and(|a| a.len() == 3 && a.iter().all(|s| s["open"] == true));
    door.wait_table_published(all_open).await.unwrap();
    // The membership kubeconfig now names a port nobody listens on.
    let kubeconfig = door.dir.path().join("membership.kubeconfig");
    let dead = format!("server: http://127.0.0.1:{}", free_ports(1)[0]);
    let text: String = std::fs::read_to_string(&kubeconfig).unwrap().lines().map(|l| if l.trim_start().starts_with("server:") { format!("    {dead}\n") } else { format!("{l}\n") }).collect();
    std::fs::write(&kubeconfig, text).unwrap();

    door.restart_ext_proc().await.unwrap();
    door.wait_table_published(all_open).await.unwrap();
    let mut answers = std::collections::BTreeMap::new();
    for _ in 0..40 {
        for (path, by) in [(CONFIGMAPS, None), (EVICTIONS, Some("v137")), (FLOWSCHEMAS_V1BETA3, Some("v130"))] {
            let (status, v) = door.get_json(&door.http, path).await.unwrap();
            assert!(by.is_none_or(|by| served_by(&v) == by), "{path}: {v}");
            *answers.entry((path, status)).or_insert(0) += 1;
        }
    }
    eprintln!("restarted with the membership unlistable: {answers:?}");
    assert!(answers.keys().all(|(_, status)| *status == 200), "{answers:?}");
    let log = std::fs::read_to_string(&door.ext_proc.log).unwrap();
    assert!(!log.contains("apiserver departed"), "{log}");
    assert!(log.contains("followed as one until the membership is listed"), "{log}");
}

/// Evictions, GETs for a period (`for`), every one served by `by`.
async fn served_throughout(door: &FrontDoor, by: &str, period: Duration) -> usize {
    let started = Instant::now();
    let mut n = 0;
    while started.elapsed() < period {
        let (status, v) = door.get_json(&door.http, EVICTIONS).await.unwrap();
        assert_eq!((status, served_by(&v)), (200, by), "after {:?}: {v}", started.elapsed());
        n += 1;
    }
    n
}

/// An apiserver whose clock runs 60 s behind (its lease's `renewTime`
/// looks a minute old by ours) joins, stays and departs by the renewals
/// mvp-ext-proc sees, not by comparing clocks. Before (issue 31): judged
/// stale on every tick, it never joined.
#[tokio::test]
async fn a_skewed_clock_neither_keeps_a_member_out_nor_flaps_it() {
    let mut door = FrontDoor::start(&[FakeSpec::new("v130", "v1.30"), FakeSpec::new("v133", "v1.33")], Options { membership: Some("leases"), ..Options::default() })
        .await
        .unwrap();
    door.add_fake(FakeSpec::new("v137", "v1.37").with_clock_skew(-60)).await.unwrap();
    let open = |t: &serde_json::Value| t["apiservers"].as_array().is_some_and(|a| a.iter().any(|s| s["name"] == "apiserver-v137" && s["open"] == true));
    door.wait_table_published(open).await.unwrap();
    // Longer than --lease-stale-after (3 s here): never judged gone.
    let n = served_throughout(&door, "v137", Duration::from_secs(5)).await;
    eprintln!("skewed member served {n} requests without a flap");
    let killed = Instant::now();
    door.fake_mut("v137").proc.kill();
    let departed = |t: &serde_json::Value| t["apiservers"].as_array().is_some_and(|a| a.iter().any(|s| s["name"] == "apiserver-v137" && s["departed"] == true));
    door.wait_table_published(departed).await.unwrap();
    assert!(killed.elapsed() < Duration::from_secs(8), "departed {:?} after its last renewal", killed.elapsed());
}

/// The identity Lease watch goes silent (the apiserver it reads through
/// hangs: no error, no event): the membership from leases freezes instead
/// of judging every lease stale. Before (issue 31): every lease looked
/// stale after `--lease-stale-after`, every member read only through its
/// lease departed — a full outage in lease-only mode.
#[tokio::test]
async fn a_silent_lease_watch_freezes_the_membership() {
    let door = FrontDoor::start(&three_fakes(), Options { membership: Some("leases"), seeds: Some(1), ..Options::default() }).await.unwrap();
    let all_open = |t: &serde_json::Value| t["apiservers"].as_array().is_some_and(|a| a.len() == 3 && a.iter().all(|s| s["open"] == true));
    door.wait_table_published(all_open).await.unwrap();
    // v130 is the seed the membership is read through.
    door.fake("v130").proc.signal("STOP");
    let n = served_throughout(&door, "v137", Duration::from_secs(8)).await;
    door.fake("v130").proc.signal("CONT");
    eprintln!("{n} requests for v137's API while the lease watch was silent");
    let log = std::fs::read_to_string(&door.ext_proc.log).unwrap();
    assert!(log.contains("membership from leases frozen"), "{log}");
    assert!(!log.contains("apiserver departed"), "{log}");
}

/// An ADS client subscribed to every endpoint, saying it has `version`,
/// that never acknowledges anything: its stream, open until dropped.
async fn subscribe_without_ack(door: &FrontDoor, node: &str, version: &str) -> tonic::Streaming<envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse> {
    use envoy_types::pb::envoy::config::core::v3::Node;
    use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
    use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
    use futures::StreamExt;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{}", door.grpc_port)).unwrap().connect().await.unwrap();
    let subscribe = DiscoveryRequest {
        node: Some(Node { id: node.into(), ..Default::default() }),
        type_url: "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment".into(),
        version_info: version.into(),
        ..Default::default()
    };
    let mut stream = AggregatedDiscoveryServiceClient::new(channel)
        .stream_aggregated_resources(futures::stream::iter([subscribe]).chain(futures::stream::pending()))
        .await
        .unwrap()
        .into_inner();
    assert!(stream.message().await.unwrap().is_some(), "no endpoints pushed");
    stream
}

/// The version of the first endpoints pushed on `stream` that name
/// `hosts` apiservers (bounded wait).
async fn endpoints_version_with(stream: &mut tonic::Streaming<envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse>, hosts: usize) -> String {
    use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
    use prost::Message;
    loop {
        let r = tokio::time::timeout(Duration::from_secs(10), stream.message()).await.expect("no push").unwrap().unwrap();
        let named = r.resources.iter().filter_map(|a| ClusterLoadAssignment::decode(a.value.as_slice()).ok()).map(|c| c.endpoints.iter().map(|e| e.lb_endpoints.len()).sum::<usize>()).max();
        if named == Some(hosts) {
            return r.version_info;
        }
    }
}

/// One broken Envoy does not hold the others. An ADS client that
/// subscribes to the endpoints and never acknowledges them (stuck, or
/// rejecting every push) no longer keeps a joining member closed for every
/// Envoy: it stops counting after the grace (3 s). A client that
/// reconnects saying it has the current endpoints (a restart of either
/// side: versions are content digests) closes nothing. Before (issue 31):
/// the member stayed closed for as long as the stuck client lived, and
/// every reconnect closed every joined member until the client ACKed.
#[tokio::test]
async fn an_envoy_that_never_acknowledges_does_not_hold_the_others() {
    let mut door = FrontDoor::start(&[FakeSpec::new("v130", "v1.30"), FakeSpec::new("v133", "v1.33")], Options { membership: Some("leases"), ..Options::default() })
        .await
        .unwrap();
    let mut stuck = subscribe_without_ack(&door, "stuck", "").await;
    let started = Instant::now();
    door.add_fake(FakeSpec::new("v137", "v1.37")).await.unwrap();
    let open = |t: &serde_json::Value| t["apiservers"].as_array().is_some_and(|a| a.iter().any(|s| s["name"] == "apiserver-v137" && s["open"] == true));
    door.wait_table_published(open).await.unwrap();
    let opened_in = started.elapsed();
    eprintln!("joined and opened in {opened_in:?} with an ADS client that never acknowledges");
    assert!(opened_in < Duration::from_secs(8), "{opened_in:?}");
    let metrics = door.http.get(format!("http://127.0.0.1:{}/metrics", door.metrics_port)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("mvp_xds_lagging_streams 1"), "{metrics}");

    let version = endpoints_version_with(&mut stuck, 3).await;
    let _reconnected = subscribe_without_ack(&door, "reconnected", &version).await;
    let n = served_throughout(&door, "v137", Duration::from_secs(2)).await;
    eprintln!("{n} requests for the joined member's API after a reconnect that has the current endpoints");
}
