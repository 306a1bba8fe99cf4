//! The Python `kubernetes` client (PyPI, in .tools/venv) through the front
//! door: its discovery sees groups and resources of both v1.30 and v1.37,
//! and lists through it reach the apiserver that serves them.

use std::process::Command;

use integration::harness::{FakeSpec, FrontDoor, Options, python};
use serde_json::Value;

#[tokio::test]
async fn python_client_discovers_old_only_and_new_only_apis() {
    let specs = [FakeSpec::new("v130", "v1.30"), FakeSpec::new("v137", "v1.37")];
    let door = FrontDoor::start(&specs, Options::default()).await.unwrap();
    door.wait_table_published(|t| t["discovery"]["sources"].as_array().is_some_and(|s| s.len() == 2)).await.unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/discovery.py");
    let url = door.url("");
    let out = tokio::task::spawn_blocking(move || Command::new(python().unwrap()).arg(script).arg(url).output().unwrap())
        .await
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let groups: Vec<&str> = report["groups"].as_array().unwrap().iter().map(|g| g.as_str().unwrap()).collect();
    assert!(groups.contains(&"lifecycle.k8s.io") && groups.contains(&"flowcontrol.apiserver.k8s.io"), "{groups:?}");
    let r = &report["resources"];
    assert_eq!(r["lifecycle.k8s.io/v1alpha1/EvictionRequest"]["name"], "evictionrequests");
    assert_eq!(r["lifecycle.k8s.io/v1alpha1/EvictionRequest"]["servedBy"], "v137");
    assert_eq!(r["resource.k8s.io/v1alpha2/ResourceClaimParameters"]["name"], "resourceclaimparameters");
    assert_eq!(r["resource.k8s.io/v1alpha2/ResourceClaimParameters"]["servedBy"], "v130");
    assert_eq!(r["flowcontrol.apiserver.k8s.io/v1beta3/FlowSchema"]["listKind"], "FlowSchemaList");
    assert_eq!(r["flowcontrol.apiserver.k8s.io/v1beta3/FlowSchema"]["servedBy"], "v130");
}
