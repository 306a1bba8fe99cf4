//! Tests of `refresher.rs`.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
use super::*;
use crate::host::Gauge;
use crate::host_fake::FakeHost;
use crate::shared_table::{Load, WorkerTable};
use mvp_routing::testing::sample;
use mvp_protos::routing::v1 as pb;
use prost::Message;

fn answer(table: Option<pb::RoutingTable>) -> FakeHost {
    reply(pb::GetTableResponse { table, waited: false })
}

fn reply(msg: pb::GetTableResponse) -> FakeHost {
    let msg = msg.encode_to_vec();
    let mut body = vec![0];
    body.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    body.extend_from_slice(&msg);
    FakeHost {
        call_headers: vec![(":status".into(), b"200".to_vec())],
        call_trailers: vec![("grpc-status".into(), b"0".to_vec())],
        call_body: body,
        ..FakeHost::default()
    }
}

#[test]
fn publishes_a_new_table_and_asks_with_its_version() {
    let mut r = Refresher::new(RefresherConfig::default());
    let host = answer(Some(sample()));
    let call = r.next_call().unwrap();
    assert_eq!(call.cluster, "mvp_ext_proc");
    r.dispatched(&host, Ok(()));
    assert!(r.next_call().is_none(), "one call in flight at a time");
    assert_eq!(r.on_response(&host), Next::Now, "a long poll asks again at once");
    assert_eq!(host.gauge_value(Gauge::TableVersion), 7);

    let worker = host.sibling();
    let table = WorkerTable::default();
    assert!(matches!(table.load_published(&worker), Load::Loaded));

    let next = r.next_call().unwrap();
    let len = u32::from_be_bytes(next.body[1..5].try_into().unwrap()) as usize;
    let request = pb::GetTableRequest::decode(&next.body[5..5 + len]).unwrap();
    assert_eq!(request, pb::GetTableRequest { known_version: 7, wait_ms: 20_000 });
    assert_eq!(next.timeout, Duration::from_millis(22_000), "the held wait and the answer's own time");
}

/// The long poll's next call: at once only when that cannot spin — after a
/// published table, or after the server held the call for the whole wait.
#[test]
fn asks_again_at_once_only_when_that_cannot_spin() {
    let waited = reply(pb::GetTableResponse { table: None, waited: true });
    let at_once = answer(None);
    let failed = FakeHost::default();
    let mut r = Refresher::new(RefresherConfig::default());
    assert_eq!(r.on_response(&waited), Next::Now);
    assert_eq!(r.on_response(&at_once), Next::Tick, "a server that predates the long poll answers at once");
    assert_eq!(r.on_response(&failed), Next::Tick);
    let mut unwritable = answer(Some(sample()));
    unwritable.fail_shared_writes = Some(2);
    assert_eq!(r.on_response(&unwritable), Next::Tick, "not published: the same table would come back at once");

    let mut polling = Refresher::new(RefresherConfig { wait_ms: 0, ..RefresherConfig::default() });
    assert_eq!(polling.on_response(&answer(Some(sample()))), Next::Tick);
    assert_eq!(polling.on_response(&waited), Next::Tick);
    let call = polling.next_call().unwrap();
    assert_eq!(call.timeout, Duration::from_millis(2_000));
}

#[test]
fn failures_are_counted_and_change_nothing() {
    let mut r = Refresher::new(RefresherConfig::default());
    let host = FakeHost::default();
    r.dispatched(&host, Err("BadArgument".into()));
    assert!(r.next_call().is_some(), "retried on the next tick");
    r.dispatched(&host, Ok(()));
    r.on_response(&host);
    assert_eq!(host.counter(Counter::RefresherErrors), 2);
    assert!(host.shared.borrow().is_empty());

    let mut current = answer(None);
    r.on_response(&current);
    assert_eq!(current.counter(Counter::RefresherErrors), 0, "no newer table is not an error");

    current = answer(Some(sample()));
    current.fail_shared_writes = Some(2);
    r.on_response(&current);
    assert_eq!(current.counter(Counter::RefresherErrors), 1);
    assert_eq!(current.gauge_value(Gauge::TableVersion), 0);
}
