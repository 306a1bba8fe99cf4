//! What operators use to see what the front door does: `mvp-ext-proc
//! explain` (and `GET /debug/route`) against the running daemon, in front
//! of fake apiservers v1.30 and v1.37.

use std::process::Command;

use integration::harness::{FakeSpec, FrontDoor, Options, ext_proc_bin, served_by};
use serde_json::Value;

fn explain(door: &FrontDoor, args: &[&str]) -> (bool, String) {
    let out = Command::new(ext_proc_bin().unwrap())
        .arg("explain")
        .arg("--server")
        .arg(format!("http://127.0.0.1:{}", door.metrics_port))
        .args(args)
        .output()
        .unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// A skewed, a shared and an unknown GVR: explain says what the filter
/// does, and the request really goes there.
#[tokio::test]
async fn explain_says_where_a_request_goes_and_why() {
    let door = FrontDoor::start(&[FakeSpec::new("v130", "v1.30"), FakeSpec::new("v137", "v1.37")], Options::default()).await.unwrap();
    let v137 = door.fake("v137").address();

    let skewed = "/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests/e1";
    let (ok, text) = explain(&door, &["-X", "DELETE", skewed]);
    assert!(ok, "{text}");
    eprintln!("{text}");
    assert!(text.contains("kind=resource verb=delete group=lifecycle.k8s.io version=v1alpha1 namespace=default resource=evictionrequests name=e1"), "{text}");
    assert!(text.contains(&format!("decision:   pinned to {v137}")), "{text}");
    assert!(text.contains("only v137 serves lifecycle.k8s.io/v1alpha1 evictionrequests"), "{text}");
    let (status, v) = door.get_json(&door.http, skewed).await.unwrap();
    assert_eq!((status, served_by(&v)), (200, "v137"), "the request goes where explain said");

    let (ok, text) = explain(&door, &["-o", "json", "/api/v1/namespaces/default/pods?watch=true"]);
    assert!(ok, "{text}");
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(e["request"]["verb"], "watch");
    assert_eq!(e["decision"]["action"], "loadBalanced");
    assert_eq!(e["decision"]["reason"], "every apiserver serves v1 pods");
    assert_eq!(e["apiservers"].as_array().unwrap().len(), 2);

    let (ok, text) = explain(&door, &["/apis/nope.example.com/v1/widgets"]);
    assert!(ok && text.contains("no apiserver serves nope.example.com/v1 widgets: whichever answers gives its own 404"), "{text}");

    let (ok, text) = explain(&door, &["/healthz"]);
    assert!(ok && text.contains("kind=nonResource") && text.contains("not a path the front door routes"), "{text}");

    // The daemon not there: a clear error.
    let out = Command::new(ext_proc_bin().unwrap()).args(["explain", "--server", "http://127.0.0.1:9", "/api"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("asking mvp-ext-proc at http://127.0.0.1:9"));
}
