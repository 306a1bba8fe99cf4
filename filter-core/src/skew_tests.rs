//! Tests of `skew.rs`.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
use super::*;
use base64::Engine;

fn jwt(payload: &str) -> Vec<u8> {
    let b = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    format!("Bearer {}.{}.c2ln", b(r#"{"alg":"RS256"}"#), b(payload)).into_bytes()
}

#[test]
fn a_service_account_token_names_its_subject() {
    let token = jwt(r#"{"aud":["https://kubernetes.default.svc"],"sub":"system:serviceaccount:team-a:builder","kubernetes.io":{"namespace":"team-a"}}"#);
    assert_eq!(bearer_subject(&token).as_deref(), Some(&b"system:serviceaccount:team-a:builder"[..]));
    assert_eq!(bearer_subject(&jwt(r#"{"sub" : "x"}"#)).as_deref(), Some(&b"x"[..]));
}

#[test]
fn anything_else_claims_nothing() {
    for auth in [
        &b"Basic YWxpY2U6c2VjcmV0"[..],
        b"Bearer opaque-static-token",
        b"Bearer a.b",
        b"Bearer !!.??.!!",
        &jwt(r#"{"iss":"x"}"#),
        &jwt(r#"{"sub":42}"#),
        &jwt("{\"sub\":\"tab\there\"}"),
        &jwt(r#"{"sub":"unterminated"#),
        &format!("Bearer e30.{}.c2ln", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b"{\"sub\":\"\xff\xfe\"}")).into_bytes(),
        &jwt(&format!(r#"{{"sub":"{}"}}"#, "a".repeat(MAX_SUBJECT + 1))),
    ] {
        assert_eq!(bearer_subject(auth), None, "{}", String::from_utf8_lossy(auth));
    }
}

#[test]
fn the_record_is_the_label_a_tab_and_the_subject() {
    let key = RouteKey::Resource { group: b"apps", version: b"v1", resource: b"deployments", subresource: b"scale" };
    let mut out = b"left over".to_vec();
    write_record(&key, Some(&jwt(r#"{"sub":"system:serviceaccount:a:b"}"#)), &mut out);
    assert_eq!(out, b"apps/v1/deployments/scale\tsystem:serviceaccount:a:b");
    write_record(&key, None, &mut out);
    assert_eq!(out, b"apps/v1/deployments/scale\t");
}

#[test]
fn the_warning_is_in_kubes_format() {
    let mut out = Vec::new();
    write_warning(&RouteKey::Resource { group: b"flowcontrol.apiserver.k8s.io", version: b"v1beta3", resource: b"flowschemas", subresource: b"" }, "1.37", &mut out);
    assert_eq!(String::from_utf8(out.clone()).unwrap(), r#"299 - "flowcontrol.apiserver.k8s.io/v1beta3 flowschemas is served only by kube-apiservers older than 1.37: unavailable once the upgrade to 1.37 finishes""#);
    write_warning(&RouteKey::Resource { group: b"", version: b"v1", resource: b"pods", subresource: b"eviction" }, "1.37", &mut out);
    assert!(out.starts_with(b"299 - \"v1 pods/eviction is served only"));
}
