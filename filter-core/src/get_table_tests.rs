//! Tests of `get_table.rs`.

#![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing, clippy::type_complexity)]
use super::*;
use mvp_routing::testing::sample;

fn frame(msg: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(msg);
    out
}

#[test]
fn request_is_a_grpc_frame() {
    let b = request_body(42, 20_000);
    assert_eq!(b[0], 0);
    let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
    assert_eq!(pb::GetTableRequest::decode(&b[5..5 + len]).unwrap(), pb::GetTableRequest { known_version: 42, wait_ms: 20_000 });
}

#[test]
fn responses() {
    let full = frame(&pb::GetTableResponse { table: Some(sample()), waited: false }.encode_to_vec());
    let Answer::New(t) = parse_response(Some(b"200"), Some(b"0"), None, &full).unwrap() else { panic!("a table") };
    assert_eq!(t.version, 7);
    assert_eq!(pb::RoutingTable::decode(&t.encoded[..]).unwrap(), sample());

    for waited in [false, true] {
        let current = frame(&pb::GetTableResponse { table: None, waited }.encode_to_vec());
        let answer = parse_response(Some(b"200"), Some(b"0"), None, &current).unwrap();
        assert!(matches!(answer, Answer::Current { waited: w } if w == waited), "{answer:?}");
    }

    let cases: Vec<(Option<&[u8]>, Option<&[u8]>, Vec<u8>)> = vec![
        (Some(b"503"), Some(b"0"), full.clone()),
        (None, None, full.clone()),
        (Some(b"200"), Some(b"14"), vec![]),
        (Some(b"200"), None, full.clone()),
        (Some(b"200"), Some(b"0"), vec![]),
        (Some(b"200"), Some(b"0"), vec![1, 0, 0, 0, 0]),
        (Some(b"200"), Some(b"0"), vec![0, 0, 0]),
        (Some(b"200"), Some(b"0"), vec![0, 0, 0, 0, 9, 1]),
        (Some(b"200"), Some(b"0"), frame(b"\xff\xff\xff")),
    ];
    for (h, g, body) in cases {
        assert!(parse_response(h, g, None, &body).is_err(), "{h:?} {g:?} {body:?}");
    }
    let mut bad = sample();
    bad.apiservers[0].address = "not-an-address".into();
    let body = frame(&pb::GetTableResponse { table: Some(bad), waited: false }.encode_to_vec());
    assert!(matches!(
        parse_response(Some(b"200"), Some(b"0"), None, &body),
        Err(GetTableError::Table(_))
    ));
}
