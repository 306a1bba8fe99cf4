//! Tests of `config.rs`.

#![allow(clippy::unwrap_used)]
use super::*;

#[test]
fn parses_both_roles_and_rejects_bad_config() {
    assert_eq!(
        PluginConfig::parse(br#"{"role":"router","route_header":"x-mvp-route"}"#).unwrap(),
        PluginConfig::Router(RouterConfig { route_header: "x-mvp-route".into(), identity: None })
    );
    let r = PluginConfig::parse(br#"{"role":"refresher","cluster":"mvp_ext_proc"}"#).unwrap();
    assert_eq!(
        r,
        PluginConfig::Refresher(RefresherConfig {
            cluster: "mvp_ext_proc".into(),
            authority: "mvp-ext-proc".into(),
            poll_interval_ms: 200,
            timeout_ms: 2000
        })
    );
    for bad in [
        &b""[..],
        b"{}",
        b"not json",
        br#"{"role":"router"}"#,
        br#"{"role":"router","route_header":""}"#,
        br#"{"role":"router","route_header":"x","extra":1}"#,
        br#"{"role":"refresher","cluster":"c","poll_interval_ms":0}"#,
        br#"{"role":"other"}"#,
        br#"{"role":"noop","x":1}"#,
        br#"{"role":"router","route_header":"x","identity":{"username_header":"","group_header":"g"}}"#,
    ] {
        assert!(PluginConfig::parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
    }
}
