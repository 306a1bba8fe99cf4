//! Tests of `shared_table.rs`.

#![allow(clippy::unwrap_used, clippy::panic)]
use super::*;
use crate::host::Gauge;
use crate::host_fake::FakeHost;
use mvp_routing::testing::sample;
use mvp_protos::routing::v1 as pb;
use prost::Message;

fn new_table(t: &pb::RoutingTable) -> NewTable {
    NewTable { version: t.version, encoded: t.encode_to_vec() }
}

/// The sample table under another version.
fn sample_version(version: u64) -> pb::RoutingTable {
    pb::RoutingTable { version, ..sample() }
}

/// Publishes the sample as `version`; the worker loads exactly that.
fn publish_and_load(refresher: &FakeHost, worker: &FakeHost, table: &WorkerTable, version: u64) {
    publish(refresher, &new_table(&sample_version(version))).unwrap();
    assert!(matches!(table.load_published(worker), Load::Loaded));
    assert_eq!(table.current().version(), version);
}

#[test]
fn a_worker_loads_what_the_refresher_published_once_per_version() {
    let refresher = FakeHost::default();
    let worker = refresher.sibling();
    let table = WorkerTable::default();
    assert!(matches!(table.load_published(&worker), Load::Unchanged));
    assert_eq!(table.current().version(), 0);

    publish(&refresher, &new_table(&sample())).unwrap();
    assert!(matches!(table.load_published(&worker), Load::Loaded));
    assert_eq!(table.current().version(), 7);
    assert!(matches!(table.load_published(&worker), Load::Unchanged));
}

#[test]
fn a_bad_table_keeps_the_last_good_one_and_is_read_once() {
    let refresher = FakeHost::default();
    let worker = refresher.sibling();
    let table = WorkerTable::default();
    publish(&refresher, &new_table(&sample())).unwrap();
    table.load_published(&worker);
    publish(&refresher, &NewTable { version: 8, encoded: b"\xff\xff".to_vec() }).unwrap();
    assert!(matches!(table.load_published(&worker), Load::Rejected(_)));
    assert_eq!(table.current().version(), 7);
    assert!(matches!(table.load_published(&worker), Load::Unchanged), "not decoded again on every request");
    publish_and_load(&refresher, &worker, &table, 9);
}

#[test]
fn only_the_announcement_makes_a_worker_read_the_table() {
    let refresher = FakeHost::default();
    let worker = refresher.sibling();
    let table = WorkerTable::default();
    // Written but not yet announced: the worker keeps what it has.
    refresher.set_shared_data(TABLE_KEY, &sample().encode_to_vec()).unwrap();
    assert!(matches!(table.load_published(&worker), Load::Unchanged));
    refresher.set_gauge(Gauge::TableVersion, 7).unwrap();
    assert!(matches!(table.load_published(&worker), Load::Loaded));
    assert_eq!(table.current().version(), 7);
}

#[test]
fn a_table_newer_than_the_announcement_read_is_loaded_once() {
    let refresher = FakeHost::default();
    let worker = refresher.sibling();
    let table = WorkerTable::default();
    publish(&refresher, &new_table(&sample())).unwrap();
    // The refresher writes version 9's table between this worker's gauge
    // read and its table read; the gauge still says 7.
    refresher.set_shared_data(TABLE_KEY, &sample_version(9).encode_to_vec()).unwrap();
    assert!(matches!(table.load_published(&worker), Load::Loaded));
    assert_eq!(table.current().version(), 9);
    refresher.set_gauge(Gauge::TableVersion, 9).unwrap();
    assert!(matches!(table.load_published(&worker), Load::Unchanged), "9 is already loaded");
}

#[test]
fn without_a_usable_gauge_the_shared_data_version_announces() {
    // A gauge the host cannot read, and one Envoy's stats configuration
    // rejected (writes ignored, reads 0).
    for (fail_gauge_reads, null_gauges) in [(true, false), (false, true)] {
        let refresher = FakeHost { null_gauges, ..FakeHost::default() };
        let worker = FakeHost { fail_gauge_reads, null_gauges, ..refresher.sibling() };
        let table = WorkerTable::default();
        assert!(matches!(table.load_published(&worker), Load::Unchanged));
        publish_and_load(&refresher, &worker, &table, 7);
        assert!(matches!(table.load_published(&worker), Load::Unchanged));
        publish_and_load(&refresher, &worker, &table, 9);
    }
}

#[test]
fn a_failed_publish_leaves_the_version_unannounced() {
    let refresher = FakeHost { fail_shared_writes: Some(2), ..FakeHost::default() };
    assert_eq!(publish(&refresher, &new_table(&sample())), Err(HostError(2)));
    assert!(refresher.shared.borrow().is_empty());
    assert_eq!(refresher.gauge_value(Gauge::TableVersion), 0, "nothing announced");
}

#[test]
fn a_table_the_host_decoded_for_the_process_is_used_as_it_is() {
    let refresher = FakeHost::default();
    // Bytes that do not decode: a worker that read them would reject them.
    publish(&refresher, &NewTable { version: 7, encoded: b"\xff\xff".to_vec() }).unwrap();
    let decoded = std::sync::Arc::new(crate::table::RouteTable::decode(&sample().encode_to_vec()).unwrap());
    let worker = FakeHost { decoded: Some(decoded.clone()), ..refresher.sibling() };
    let table = WorkerTable::default();
    assert!(matches!(table.load_published(&worker), Load::Loaded));
    assert!(std::sync::Arc::ptr_eq(&table.current(), &decoded), "the process's copy, not a worker's own");
    // Announced again while the host holds the same table: no news, and the
    // worker falls back to the bytes (here rejected) rather than looping.
    publish(&refresher, &NewTable { version: 8, encoded: b"\xff\xff".to_vec() }).unwrap();
    assert!(matches!(table.load_published(&worker), Load::Rejected(_)));
    assert!(matches!(table.load_published(&worker), Load::Unchanged));
}
