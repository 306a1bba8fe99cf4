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

use serde::{Deserialize, Serialize};

use crate::discover::ServerView;

#[derive(Deserialize)]
struct StateFile {
    /// name → entry
    apiservers: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
struct Entry {
    url: String,
    view: ServerView,
}

/// The same file, written from borrowed views (no copy of megabytes of
/// discovery).
#[derive(Serialize)]
struct StateFileRef<'a> {
    apiservers: BTreeMap<&'a str, EntryRef<'a>>,
}

#[derive(Serialize)]
struct EntryRef<'a> {
    url: &'a str,
    view: &'a ServerView,
}

#[derive(Clone)]
pub struct Persisted {
    path: PathBuf,
}

impl Persisted {
    pub fn new(path: &Path) -> Persisted {
        Persisted { path: path.to_path_buf() }
    }

    /// The views stored for `(name, url)` pairs. A missing file is an empty
    /// state; an unreadable or broken one is an error the caller logs (and
    /// then starts without it: the next write replaces the file).
    pub fn load(&self) -> Result<BTreeMap<(String, String), ServerView>, String> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(e) => return Err(format!("--state-file {}: cannot read: {e}", self.path.display())),
        };
        let file: StateFile = serde_json::from_slice(&bytes)
            .map_err(|e| format!("--state-file {}: not a state file: {e}", self.path.display()))?;
        Ok(file.apiservers.into_iter().map(|(name, e)| ((name, e.url), e.view)).collect())
    }

    pub fn save<'a>(&self, members: impl IntoIterator<Item = (&'a str, &'a str, &'a ServerView)>) -> Result<(), String> {
        let file = StateFileRef { apiservers: members.into_iter().map(|(n, u, v)| (n, EntryRef { url: u, view: v })).collect() };
        let bytes = serde_json::to_vec(&file).map_err(|e| e.to_string())?;
        // A temporary name of this write's own: two processes (old and new
        // during a rollout) or two writes never share one, so neither can
        // truncate or rename the other's half-written file.
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut name = self.path.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".{}.{n}.tmp", std::process::id()));
        let tmp = self.path.with_file_name(name);
        // The data reaches the disk before the rename makes it the state
        // file: a crash or power loss leaves the old file or the new one,
        // never a torn one.
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("--state-file {}: cannot write: {e}", self.path.display())
        })?;
        // And the rename itself once the directory is synced. Best effort:
        // some filesystems refuse to sync a directory, and the file is whole
        // either way.
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
        Ok(())
    }
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
        p.save([("kas-b", "https://127.0.0.1:6443/", &view)]).unwrap();
        let loaded = p.load().unwrap();
        assert_eq!(loaded.get(&("kas-b".to_string(), "https://127.0.0.1:6443/".to_string())), Some(&view));
        std::fs::write(dir.path().join("state.json"), "{").unwrap();
        assert!(p.load().unwrap_err().contains("not a state file"));
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
                        p.save([(format!("kas-{w}").as_str(), "https://127.0.0.1:6443/", view)]).unwrap();
                    }
                });
            }
        });
        assert_eq!(Persisted::new(&path).load().unwrap().len(), 1);
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["state.json"]);
    }
}
