//! The cluster's membership objects, as every kube-apiserver of a control
//! plane serves them from one etcd: the `default/kubernetes` Endpoints
//! (each running apiserver's address; removed at shutdown) and the
//! apiserver identity Leases in `kube-system` (renewed while it runs, left
//! behind when it stops). Fakes share them through a directory
//! (`--cluster-state`): one file per apiserver, written atomically, read by
//! every fake for each list and watch, so all fakes answer the same state.
//!
//! Lists carry a `resourceVersion` digest of their content; a watch from
//! that version streams ADDED/MODIFIED/DELETED as the files change, and a
//! watch from any other version gets kube's 410 Gone (the client relists).

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::responses::json_response;

/// How often a running fake renews its lease (kube: 10 s; faster here so
/// tests judge staleness in seconds).
pub const RENEW_EVERY: Duration = Duration::from_secs(1);

/// One apiserver's entry in the shared directory.
#[derive(Serialize, Deserialize, Clone)]
struct Entry {
    name: String,
    address: SocketAddr,
    holder: String,
    renew_time: String,
    /// Listed in the `kubernetes` Endpoints.
    endpoint: bool,
}

pub struct ClusterState {
    dir: PathBuf,
    /// Seconds this apiserver's clock is off.
    clock_skew: i64,
    me: std::sync::Mutex<Entry>,
    renewing: AtomicBool,
}

impl ClusterState {
    /// Registers this apiserver (endpoint and lease, a new holder identity:
    /// a new run) and keeps renewing its lease.
    pub fn join(dir: &Path, name: &str, address: SocketAddr, clock_skew: i64) -> std::io::Result<Arc<ClusterState>> {
        std::fs::create_dir_all(dir)?;
        let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let me = Entry {
            name: name.to_string(),
            address,
            holder: format!("apiserver-{name}_{}-{nanos}", std::process::id()),
            renew_time: now_micro(clock_skew),
            endpoint: true,
        };
        let s = Arc::new(ClusterState { dir: dir.to_path_buf(), clock_skew, me: std::sync::Mutex::new(me), renewing: AtomicBool::new(true) });
        s.write()?;
        let renew = s.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RENEW_EVERY);
            loop {
                tick.tick().await;
                if !renew.renewing.load(Ordering::Relaxed) {
                    return;
                }
                renew.update(|e| e.renew_time = now_micro(renew.clock_skew));
            }
        });
        Ok(s)
    }

    /// At shutdown: out of the Endpoints, and the lease is no longer renewed
    /// (it stays, as kube's does, until it is garbage collected).
    pub fn leave(&self) {
        self.renewing.store(false, Ordering::Relaxed);
        self.update(|e| e.endpoint = false);
    }

    fn update(&self, f: impl FnOnce(&mut Entry)) {
        if let Ok(mut me) = self.me.lock() {
            f(&mut me);
        }
        if let Err(e) = self.write() {
            tracing::warn!(error = %e, "writing the shared cluster state");
        }
    }

    fn write(&self) -> std::io::Result<()> {
        let me = self.me.lock().map(|m| m.clone()).map_err(|_| std::io::Error::other("poisoned"))?;
        let path = self.dir.join(format!("{}.json", me.name));
        let tmp = self.dir.join(format!(".{}.tmp", me.name));
        std::fs::write(&tmp, serde_json::to_vec(&me).unwrap_or_default())?;
        std::fs::rename(tmp, path)
    }

    fn entries(&self) -> Vec<Entry> {
        let mut out: Vec<Entry> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
            .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

/// Now by a clock `skew` seconds off.
fn now_micro(skew: i64) -> String {
    let off = Duration::from_secs(skew.unsigned_abs());
    let now = if skew < 0 { SystemTime::now() - off } else { SystemTime::now() + off };
    humantime::format_rfc3339_micros(now).to_string()
}

fn digest(v: &impl Hash) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.hash(&mut h);
    (h.finish() >> 1).to_string()
}

/// Which collection a request names.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Endpoints,
    Leases,
}

/// `path` as a membership collection (or one object of it), if it is one.
pub fn route(path: &str) -> Option<(Kind, Option<String>)> {
    let (kind, rest) = if let Some(r) = path.strip_prefix("/api/v1/namespaces/default/endpoints") {
        (Kind::Endpoints, r)
    } else if let Some(r) = path.strip_prefix("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases") {
        (Kind::Leases, r)
    } else {
        return None;
    };
    match rest.trim_end_matches('/') {
        "" => Some((kind, None)),
        name if name.starts_with('/') && !name[1..].contains('/') => Some((kind, Some(name[1..].to_string()))),
        _ => None,
    }
}

/// The objects of `kind` now, by name, each with its resourceVersion set.
fn objects(s: &ClusterState, kind: Kind) -> BTreeMap<String, Value> {
    let entries = s.entries();
    let mut out = BTreeMap::new();
    match kind {
        Kind::Endpoints => {
            let subsets: Vec<Value> = entries
                .iter()
                .filter(|e| e.endpoint)
                .map(|e| json!({"addresses": [{"ip": e.address.ip().to_string()}], "ports": [{"name": "https", "port": e.address.port(), "protocol": "TCP"}]}))
                .collect();
            let mut o = json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "kubernetes", "namespace": "default"}, "subsets": subsets});
            o["metadata"]["resourceVersion"] = json!(digest(&o.to_string()));
            out.insert("kubernetes".to_string(), o);
        }
        Kind::Leases => {
            for e in &entries {
                let name = format!("apiserver-{}", e.name);
                let mut o = json!({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {
                        "name": name, "namespace": "kube-system",
                        "labels": {"apiserver.kubernetes.io/identity": "kube-apiserver", "kubernetes.io/hostname": e.name},
                        "annotations": {"kubernetes.io/peer-advertise-address": e.address.to_string()},
                    },
                    "spec": {"holderIdentity": e.holder, "leaseDurationSeconds": 3600, "renewTime": e.renew_time},
                });
                o["metadata"]["resourceVersion"] = json!(digest(&o.to_string()));
                out.insert(name, o);
            }
        }
    }
    out
}

fn list_version(objects: &BTreeMap<String, Value>) -> String {
    digest(&objects.values().map(|o| o["metadata"]["resourceVersion"].to_string()).collect::<Vec<_>>())
}

fn query_value<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query.split('&').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// Keeps the objects a field or label selector asks for (the two the
/// front door sends).
fn selected(objects: BTreeMap<String, Value>, query: &str, name: Option<&str>) -> BTreeMap<String, Value> {
    let field_name = query_value(query, "fieldSelector").and_then(|f| f.strip_prefix("metadata.name%3D").or_else(|| f.strip_prefix("metadata.name=")));
    let want = name.or(field_name);
    objects.into_iter().filter(|(n, _)| want.is_none_or(|w| w == n)).collect()
}

pub async fn serve(s: Arc<ClusterState>, kind: Kind, name: Option<String>, query: &str) -> Response {
    let watch = query.split('&').any(|kv| kv == "watch=true" || kv == "watch=1");
    let all = selected(objects(&s, kind), query, name.as_deref());
    if !watch {
        if let Some(n) = &name {
            return match all.get(n) {
                Some(o) => json_response(StatusCode::OK, o),
                None => json_response(StatusCode::NOT_FOUND, &super::responses::status_json(404, "NotFound", &format!("\"{n}\" not found"))),
            };
        }
        let list_kind = if kind == Kind::Endpoints { "EndpointsList" } else { "LeaseList" };
        let api_version = if kind == Kind::Endpoints { "v1" } else { "coordination.k8s.io/v1" };
        let rv = list_version(&all);
        return json_response(StatusCode::OK, &json!({"apiVersion": api_version, "kind": list_kind, "metadata": {"resourceVersion": rv}, "items": all.values().collect::<Vec<_>>()}));
    }
    let from = query_value(query, "resourceVersion").unwrap_or("");
    let timeout = query_value(query, "timeoutSeconds").and_then(|t| t.parse().ok()).unwrap_or(290u64);
    let stream = watch_stream(s, kind, name, query.to_string(), from.to_string(), Duration::from_secs(timeout), all);
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn line(v: &Value) -> Result<Bytes, std::io::Error> {
    let mut b = serde_json::to_vec(v).unwrap_or_default();
    b.push(b'\n');
    Ok(Bytes::from(b))
}

fn watch_stream(
    s: Arc<ClusterState>,
    kind: Kind,
    name: Option<String>,
    query: String,
    from: String,
    timeout: Duration,
    start: BTreeMap<String, Value>,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let gone = from != list_version(&start) && from != "0" && !from.is_empty();
    futures::stream::unfold((start, gone, false), move |(last, gone, done)| {
        let (s, name, query) = (s.clone(), name.clone(), query.clone());
        async move {
            if done {
                return None;
            }
            if gone {
                let err = json!({"type": "ERROR", "object": super::responses::status_json(410, "Expired", "too old resource version")});
                return Some((line(&err), (last, false, true)));
            }
            loop {
                if tokio::time::Instant::now() >= deadline {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                let now = selected(objects(&s, kind), &query, name.as_deref());
                let mut events = Vec::new();
                for (n, o) in &now {
                    match last.get(n) {
                        None => events.push(json!({"type": "ADDED", "object": o})),
                        Some(old) if old["metadata"]["resourceVersion"] != o["metadata"]["resourceVersion"] => events.push(json!({"type": "MODIFIED", "object": o})),
                        _ => {}
                    }
                }
                for (n, o) in &last {
                    if !now.contains_key(n) {
                        events.push(json!({"type": "DELETED", "object": o}));
                    }
                }
                if !events.is_empty() {
                    let mut b = Vec::new();
                    for e in &events {
                        if let Ok(l) = line(e) {
                            b.extend_from_slice(&l);
                        }
                    }
                    return Some((Ok(Bytes::from(b)), (now, false, false)));
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_membership_paths_only() {
        assert!(matches!(route("/api/v1/namespaces/default/endpoints"), Some((Kind::Endpoints, None))));
        assert!(matches!(route("/api/v1/namespaces/default/endpoints/kubernetes"), Some((Kind::Endpoints, Some(n))) if n == "kubernetes"));
        assert!(matches!(route("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"), Some((Kind::Leases, None))));
        assert!(route("/api/v1/namespaces/default/pods").is_none());
        assert!(route("/api/v1/namespaces/default/endpoints/a/b").is_none());
    }
}
