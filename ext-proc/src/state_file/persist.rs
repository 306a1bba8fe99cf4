//! The state file (`--state-file`): every member's last known API set, so a
//! member that is down when mvp-ext-proc (re)starts keeps routing its
//! exclusive APIs to itself (a 503 Status) instead of losing them (another
//! server's 404). Written whenever a view changes, atomically and durably
//! (temporary file, fsync, rename, fsync of the directory), off the sync
//! loop (`outputs::StateWriter`); read once at start. An entry is used only
//! for the member of the same name and URL.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::discover::ServerView;
use crate::openapi::{Document, ServerOpenApi, v3_index};
use crate::sync::state::LastKnown;

/// The format this release writes and reads. Raised only for a change an
/// older release cannot read; added fields are ignored by older readers.
/// A file of a newer format (a rollback) is kept aside, never overwritten.
pub const FORMAT: u32 = 1;

#[derive(Deserialize)]
struct StateFile {
    /// Files written before the format was recorded are format 1.
    #[serde(default = "format_one")]
    format: u32,
    /// name → entry, each read on its own: one bad entry loses that one.
    apiservers: BTreeMap<String, serde_json::Value>,
}

fn format_one() -> u32 {
    1
}

#[derive(Deserialize)]
struct Entry {
    url: String,
    view: ServerView,
    /// Its `/openapi/v3` index as served: after a restart its keys still
    /// route to it (a 503 while it is closed, not another server's 404).
    #[serde(default)]
    openapi_v3_index: Option<String>,
}

/// The same file, written from borrowed views (no copy of megabytes of
/// discovery).
#[derive(Serialize)]
struct StateFileRef<'a> {
    format: u32,
    apiservers: BTreeMap<&'a str, EntryRef<'a>>,
}

#[derive(Serialize)]
struct EntryRef<'a> {
    url: &'a str,
    view: &'a ServerView,
    #[serde(skip_serializing_if = "Option::is_none")]
    openapi_v3_index: Option<&'a str>,
}

/// A member as it is written: name, URL, view, OpenAPI documents.
pub type Member<'a> = (&'a str, &'a str, &'a ServerView, Option<&'a ServerOpenApi>);

#[derive(Clone)]
pub struct Persisted {
    path: PathBuf,
}

impl Persisted {
    pub fn new(path: &Path) -> Persisted {
        Persisted { path: path.to_path_buf() }
    }

    /// The members stored, by `(name, url)`. A missing file is an empty
    /// state. A file that cannot be used whole (unreadable, not a state
    /// file, a newer format) is an error the caller logs; it is renamed to
    /// `<file>.unusable` first, so the next write does not destroy what a
    /// newer release (or a person) may still need. A bad entry is left
    /// out and named in the log.
    pub fn load(&self) -> Result<BTreeMap<(String, String), LastKnown>, String> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(e) => return Err(format!("--state-file {}: cannot read: {e}", self.path.display())),
        };
        let file = match serde_json::from_slice::<StateFile>(&bytes) {
            Ok(f) if f.format <= FORMAT => f,
            Ok(f) => return Err(self.set_aside(&format!("written by a newer mvp-ext-proc (format {}; this one reads up to {FORMAT})", f.format))),
            Err(e) => return Err(self.set_aside(&format!("not a state file: {e}"))),
        };
        let mut out = BTreeMap::new();
        for (name, value) in file.apiservers {
            match serde_json::from_value::<Entry>(value) {
                Ok(e) => {
                    let openapi = e.openapi_v3_index.and_then(|body| {
                        let index = v3_index::Index::parse(body.as_bytes()).ok()?;
                        let doc = Document { etag: None, body: bytes::Bytes::from(body) };
                        Some(Arc::new(ServerOpenApi { v3_index: Some((Arc::new(doc), Arc::new(index))), ..Default::default() }))
                    });
                    out.insert((name, e.url), LastKnown { view: e.view, openapi });
                }
                Err(e) => tracing::warn!(state_file = %self.path.display(), apiserver = %name, error = %e, "a state file entry does not parse; that member starts without its last known API set"),
            }
        }
        Ok(out)
    }

    /// Renames an unusable file out of the way; the error to report.
    fn set_aside(&self, why: &str) -> String {
        let mut name = self.path.file_name().unwrap_or_default().to_os_string();
        name.push(".unusable");
        let aside = self.path.with_file_name(name);
        match std::fs::rename(&self.path, &aside) {
            Ok(()) => format!("--state-file {}: {why}; kept as {}", self.path.display(), aside.display()),
            Err(e) => format!("--state-file {}: {why} (and cannot keep it aside: {e})", self.path.display()),
        }
    }

    pub fn save<'a>(&self, members: impl IntoIterator<Item = Member<'a>>) -> Result<(), String> {
        let index = |o: Option<&'a ServerOpenApi>| o?.v3_index.as_ref().and_then(|(d, _)| std::str::from_utf8(&d.body).ok());
        let apiservers = members.into_iter().map(|(n, u, v, o)| (n, EntryRef { url: u, view: v, openapi_v3_index: index(o) })).collect();
        let file = StateFileRef { format: FORMAT, apiservers };
        let bytes = serde_json::to_vec(&file).map_err(|e| e.to_string())?;
        write_whole(&self.path, &bytes).map_err(|e| format!("--state-file {}: cannot write: {e}", self.path.display()))
    }
}

/// Replaces `path` with `bytes` so that a crash or power loss leaves the
/// old file or the new one, never a torn one. Readable by its owner only
/// (0600, whatever the umask): the skew log's counts name every client
/// identity and user agent of the cluster.
pub fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    // A temporary name of this write's own: two processes (old and new
    // during a rollout) or two writes never share one, so neither can
    // truncate or rename the other's half-written file.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.{n}.tmp", std::process::id()));
    let tmp = path.with_file_name(name);
    // The data reaches the disk before the rename makes it the file.
    let write = || -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    // And the rename itself once the directory is synced. Best effort:
    // some filesystems refuse to sync a directory, and the file is whole
    // either way.
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::Capabilities;

    #[test]
    fn round_trip_and_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = Persisted::new(&dir.path().join("state.json"));
        assert!(p.load().unwrap().is_empty(), "a missing file is an empty state");
        let mut caps = Capabilities::default();
        caps.add_resource_name("batch", "v2alpha1", "cronjobs");
        let view = ServerView { capabilities: caps, groups: Default::default() };
        p.save([("kas-b", "https://127.0.0.1:6443/", &view, None)]).unwrap();
        let loaded = p.load().unwrap();
        assert_eq!(loaded.get(&("kas-b".to_string(), "https://127.0.0.1:6443/".to_string())).map(|s| &s.view), Some(&view));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("state.json")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the owner's alone: {mode:o}");
        std::fs::write(dir.path().join("state.json"), "{").unwrap();
        assert!(p.load().unwrap_err().contains("not a state file"));
        assert_eq!(std::fs::read(dir.path().join("state.json.unusable")).unwrap(), b"{", "kept aside, not left to be overwritten");
    }

    #[test]
    fn a_newer_format_is_kept_aside_and_a_bad_entry_loses_only_itself() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let p = Persisted::new(&path);
        let newer = r#"{"format": 2, "apiservers": {}}"#;
        std::fs::write(&path, newer).unwrap();
        let e = p.load().unwrap_err();
        assert!(e.contains("newer mvp-ext-proc (format 2"), "{e}");
        assert_eq!(std::fs::read_to_string(dir.path().join("state.json.unusable")).unwrap(), newer);

        // Written before the format was recorded; one entry broken.
        let good = serde_json::json!({"url": "https://10.0.0.1:6443/", "view": ServerView::default()});
        std::fs::write(&path, serde_json::json!({"apiservers": {"kas-a": good, "kas-b": {"url": 7}}}).to_string()).unwrap();
        let loaded = p.load().unwrap();
        assert_eq!(loaded.keys().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["kas-a"]);
    }

    #[test]
    fn the_openapi_v3_index_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let p = Persisted::new(&dir.path().join("state.json"));
        let body = r#"{"paths":{"apis/lifecycle.k8s.io/v1alpha1":{"serverRelativeURL":"/openapi/v3/apis/lifecycle.k8s.io/v1alpha1?hash=AB"}}}"#;
        let doc = Document { etag: Some("\"x\"".into()), body: bytes::Bytes::from_static(body.as_bytes()) };
        let openapi = ServerOpenApi { v3_index: Some((Arc::new(doc), Arc::new(v3_index::Index::parse(body.as_bytes()).unwrap()))), ..Default::default() };
        p.save([("kas-a", "https://10.0.0.1:6443/", &ServerView::default(), Some(&openapi))]).unwrap();
        let loaded = p.load().unwrap();
        let restored = loaded.values().next().unwrap().openapi.clone().unwrap();
        assert_eq!(restored.v3_keys().collect::<Vec<_>>(), ["apis/lifecycle.k8s.io/v1alpha1"]);
    }

    /// Writers at once (two processes during a rollout write the same file):
    /// every write succeeds, the file is always whole, no temporary is left.
    #[test]
    fn concurrent_writers_never_tear_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let mut caps = Capabilities::default();
        for i in 0..200 {
            caps.add_resource_name("batch", "v1", &format!("things{i}"));
        }
        let view = ServerView { capabilities: caps, groups: Default::default() };
        std::thread::scope(|s| {
            for w in 0..4 {
                let (p, view) = (Persisted::new(&path), &view);
                s.spawn(move || {
                    for _ in 0..50 {
                        p.save([(format!("kas-{w}").as_str(), "https://127.0.0.1:6443/", view, None)]).unwrap();
                    }
                });
            }
        });
        assert_eq!(Persisted::new(&path).load().unwrap().len(), 1);
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["state.json"]);
    }
}
