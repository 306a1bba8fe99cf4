//! Load under faults (bounded, loopback): client tasks request APIs of the
//! three-release topology and classify every answer as a user would —
//! correct (a server that serves the API answered; `/apis` merged from
//! every server), an honest 503 `metav1.Status`, or anything else (a
//! misroute: another server's 404; Envoy plain text; a reset; one server's
//! half of `/apis`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;

use super::{FrontDoor, served_by, wait_for};

/// A v1.37-only API, a v1.30-only one, one v1.33 and v1.37 share, one all
/// serve — and who may answer each.
pub const PATHS: &[(&str, &[&str])] = &[
    (
        "/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests",
        &["v137"],
    ),
    (
        "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas",
        &["v130"],
    ),
    (
        "/apis/resource.k8s.io/v1beta1/namespaces/ns/resourceclaims",
        &["v133", "v137"],
    ),
    (
        "/api/v1/namespaces/default/configmaps",
        &["v130", "v133", "v137"],
    ),
];

/// [`PATHS`] and `/apis`, which must be the merged document: every group
/// version some server serves (a group only v1.37 serves, a version only
/// v1.30 does), never one server's half (mvp-ext-proc unreachable: Envoy's
/// ext_proc fails open to the apiserver's own document).
pub const PATHS_AND_APIS: &[(&str, &[&str])] =
    &[PATHS[0], PATHS[1], PATHS[2], PATHS[3], (APIS, &[])];

const APIS: &str = "/apis";

/// A response whose body ended in a transport error (see [`load_paths`]).
const CUT_OFF: &str = "<the body was cut off>";

/// `/apis` (an `APIGroupList`) lists what only v1.37 and only v1.30 serve.
fn merged(groups: &Value) -> bool {
    let versions = |group: &str| -> Vec<String> {
        let Some(g) = groups["groups"]
            .as_array()
            .and_then(|gs| gs.iter().find(|g| g["name"] == group))
        else {
            return vec![];
        };
        g["versions"]
            .as_array()
            .map(|vs| {
                vs.iter()
                    .filter_map(|v| v["version"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    versions("lifecycle.k8s.io").contains(&"v1alpha1".to_string())
        && versions("flowcontrol.apiserver.k8s.io").contains(&"v1beta3".to_string())
}

#[derive(Default)]
pub struct Tally {
    pub ok: AtomicU64,
    pub status_503: AtomicU64,
    /// 503 Status for an API another running apiserver also serves: a
    /// request in flight on the connection of an apiserver that died
    /// (SIGKILL), by Envoy's reason. Not retried: it may have reached the
    /// apiserver, and only failures before the request left are safe to
    /// resend for every verb. Also an answer whose body the death cut off
    /// after its headers had gone on (by its status).
    pub in_flight_503: std::sync::Mutex<BTreeMap<String, u64>>,
    /// `/apis` answered with one apiserver's own document: Envoy's ext_proc
    /// failed open (its exchange with mvp-ext-proc broke off).
    pub own_apis: AtomicU64,
    /// Anything else, with a sample of each kind.
    pub other: std::sync::Mutex<BTreeMap<String, u64>>,
}

impl Tally {
    pub fn total(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
            + self.status_503.load(Ordering::Relaxed)
            + self.in_flight()
            + self.own_apis.load(Ordering::Relaxed)
            + self.other.lock().unwrap().values().sum::<u64>()
    }

    pub fn in_flight(&self) -> u64 {
        self.in_flight_503.lock().unwrap().values().sum()
    }

    pub fn report(&self) -> String {
        format!(
            "{} correct 200, {} 503 Status (API of a stopped server), in flight at a kill: {:?}, one server's /apis: {}, other: {:?}",
            self.ok.load(Ordering::Relaxed),
            self.status_503.load(Ordering::Relaxed),
            self.in_flight_503.lock().unwrap(),
            self.own_apis.load(Ordering::Relaxed),
            self.other.lock().unwrap()
        )
    }
}

/// `clients` tasks request `paths` round robin until `stop` (e.g.
/// [`PATHS`]); paths in `may_503` may answer the 503 Status (their only
/// server is down).
pub fn load_paths(
    paths: &'static [(&'static str, &'static [&'static str])],
    door: &FrontDoor,
    clients: usize,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    may_503: &'static [&'static str],
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..clients)
        .map(|c| {
            let (http, base, stop, tally) =
                (door.http.clone(), door.url(""), stop.clone(), tally.clone());
            tokio::spawn(async move {
                let mut i = c;
                while !stop.load(Ordering::Relaxed) {
                    let (path, servers) = paths[i % paths.len()];
                    i += 1;
                    let class = match http.get(format!("{base}{path}")).send().await {
                        Err(e) => format!("transport error: {e}"),
                        Ok(resp) => {
                            let status = resp.status().as_u16();
                            // A body cut off by a transport error: the
                            // apiserver died mid-answer, after its headers
                            // had gone to the client (over HTTP/2 its
                            // socket closes with a reset, dropping what it
                            // had not sent yet). The client sees the error,
                            // never a wrong answer; counted as in flight.
                            let body: Value = match resp.bytes().await {
                                Ok(b) => serde_json::from_slice(&b).unwrap_or(Value::Null),
                                Err(_) => Value::String(CUT_OFF.into()),
                            };
                            match status {
                                _ if body == CUT_OFF => format!("in flight: {status}, the body cut off"),
                                200 if path == APIS && merged(&body) => "ok".into(),
                                200 if path == APIS => "own /apis".into(),
                                200 if servers.contains(&served_by(&body)) => "ok".into(),
                                503 if body["kind"] == "Status"
                                    && body["code"] == 503
                                    && may_503.contains(&path) =>
                                {
                                    "503".into()
                                }
                                503 if body["kind"] == "Status" && body["code"] == 503 => {
                                    format!(
                                        "in flight: {}",
                                        body["details"]["causes"][0]["message"]
                                            .as_str()
                                            .or(body["message"].as_str())
                                            .unwrap_or("")
                                    )
                                }
                                s => format!(
                                    "{s} {path} from {}: {}",
                                    served_by(&body),
                                    body["message"]
                                ),
                            }
                        }
                    };
                    match class.as_str() {
                        "ok" => tally.ok.fetch_add(1, Ordering::Relaxed),
                        "503" => tally.status_503.fetch_add(1, Ordering::Relaxed),
                        "own /apis" => tally.own_apis.fetch_add(1, Ordering::Relaxed),
                        c if c.starts_with("in flight: ") => {
                            *tally
                                .in_flight_503
                                .lock()
                                .unwrap()
                                .entry(c.trim_start_matches("in flight: ").to_string())
                                .or_default() += 1;
                            0
                        }
                        _ => {
                            *tally.other.lock().unwrap().entry(class).or_default() += 1;
                            0
                        }
                    };
                }
            })
        })
        .collect()
}

/// Waits until `n` more requests completed (the load's own clock).
pub async fn after_requests(tally: &Tally, n: u64) {
    let target = tally.total() + n;
    wait_for(
        "the load to make progress",
        Duration::from_secs(60),
        || async { (tally.total() >= target).then_some(()) },
    )
    .await
    .unwrap();
}
