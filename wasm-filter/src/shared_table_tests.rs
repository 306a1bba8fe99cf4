//! Tests of `shared_table.rs`.

#![allow(clippy::unwrap_used, clippy::panic)]
use super::*;
use crate::host_fake::FakeHost;
use mvp_routing::testing::sample;
use mvp_protos::routing::v1 as pb;
use prost::Message;

fn new_table(t: &pb::RoutingTable) -> NewTable {
    NewTable { version: t.version, encoded: t.encode_to_vec() }
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
fn a_bad_table_keeps_the_last_good_one() {
    let refresher = FakeHost::default();
    let worker = refresher.sibling();
    let table = WorkerTable::default();
    publish(&refresher, &new_table(&sample())).unwrap();
    table.load_published(&worker);
    publish(&refresher, &NewTable { version: 8, encoded: b"\xff\xff".to_vec() }).unwrap();
    assert!(matches!(table.load_published(&worker), Load::Rejected(_)));
    assert_eq!(table.current().version(), 7);
}

#[test]
fn a_failed_publish_leaves_the_version_unannounced() {
    let refresher = FakeHost { fail_shared_writes: Some(2), ..FakeHost::default() };
    assert_eq!(publish(&refresher, &new_table(&sample())), Err(HostError(2)));
    assert!(refresher.shared.borrow().is_empty());
}
