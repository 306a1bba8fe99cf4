//! The counts across restarts: a file beside the state file
//! (`--state-file FILE` → `FILE.usage`), rewritten whole
//! (`state_file::persist::write_whole`) every [`SAVE_EVERY`] while counts
//! change and at the stop, read back at start. A crash loses at most that
//! long of counts;
//! a file that cannot be used is set aside (`.unusable`) and counting
//! starts afresh.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{Saved, Usage};
use crate::stopping::Stopping;

/// How often changed counts are written.
pub const SAVE_EVERY: Duration = Duration::from_secs(30);

/// The counts' file for a state file.
pub fn path_for(state_file: &Path) -> PathBuf {
    let mut name = state_file.file_name().unwrap_or_default().to_os_string();
    name.push(".usage");
    state_file.with_file_name(name)
}

/// The counts saved at `path`, or fresh ones (a missing file; an unusable
/// one, set aside and logged).
pub fn load(path: &Path) -> Usage {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Usage::default(),
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "cannot read the skew log's saved counts; counting afresh");
            return Usage::default();
        }
    };
    match serde_json::from_slice::<Saved>(&bytes) {
        Ok(saved) => Usage::restored(saved),
        Err(e) => {
            let mut aside = path.as_os_str().to_os_string();
            aside.push(".unusable");
            let kept = std::fs::rename(path, &aside).is_ok();
            tracing::warn!(file = %path.display(), error = %e, kept_aside = kept, "the skew log's saved counts do not parse; counting afresh");
            Usage::default()
        }
    }
}

/// Writes the counts whenever they changed, every [`SAVE_EVERY`], and once
/// more at the stop (what the last interval counted is not lost to a
/// rollout); then returns.
pub async fn save_loop(usage: Arc<Usage>, path: PathBuf, stopping: Stopping) {
    let mut saved = 0;
    let mut tick = tokio::time::interval(SAVE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stopped = stopping.stopped();
    tokio::pin!(stopped);
    loop {
        let last = tokio::select! {
            _ = tick.tick() => false,
            () = &mut stopped => true,
        };
        if let Some((generation, counts)) = usage.to_save(saved) {
            let path = path.clone();
            let written = tokio::task::spawn_blocking(move || {
                let bytes = serde_json::to_vec(&counts).map_err(std::io::Error::other)?;
                crate::state_file::persist::write_whole(&path, &bytes)
            })
            .await;
            match written {
                Ok(Ok(())) => saved = generation,
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot save the skew log's counts; trying again"),
                Err(e) => tracing::warn!(error = %e, "saving the skew log's counts failed"),
            }
        }
        if last {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::{Use, Who};
    use std::time::SystemTime;

    #[test]
    fn counts_survive_a_restart_and_a_bad_file_is_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_for(&dir.path().join("state.json"));
        assert_eq!(path, dir.path().join("state.json.usage"));
        let usage = Usage::default();
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        for _ in 0..2 {
            usage.record(Use { api: "apps/v1/deployments".into(), who: Who::TokenClaim { subject: "system:serviceaccount:a:b".into() }, user_agent: "ua".into(), source: "10.0.0.1".into(), answered_by: None, at, token: None });
        }
        let (generation, saved) = usage.to_save(0).unwrap();
        assert_eq!(usage.to_save(generation), None, "unchanged: nothing to write");
        std::fs::write(&path, serde_json::to_vec(&saved).unwrap()).unwrap();
        let back = load(&path);
        let got = back.of("apps/v1/deployments", at, Duration::from_secs(60)).unwrap();
        assert_eq!((got.clients.len(), got.clients[0].count, got.clients[0].first_seen), (1, 2, at));
        assert_eq!(humantime::format_rfc3339_seconds(back.since).to_string(), humantime::format_rfc3339_seconds(usage.since).to_string(), "to the second");
        // Saved at the stop, whatever the interval: the loop's first save
        // is at its start, the next one 30 s on.
        let (stop, stopping) = crate::stopping::Stop::new();
        let usage = Arc::new(usage);
        let other = dir.path().join("other.usage");
        let saving = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        saving.block_on(async {
            let task = tokio::spawn(save_loop(usage.clone(), other.clone(), stopping));
            let first = tokio::time::timeout(Duration::from_secs(10), async {
                while !other.exists() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            });
            first.await.unwrap();
            usage.record(Use { api: "batch/v1/jobs".into(), who: Who::Unidentified, user_agent: "ua".into(), source: "10.0.0.1".into(), answered_by: None, at, token: None });
            stop.stop();
            tokio::time::timeout(Duration::from_secs(10), task).await.unwrap().unwrap();
        });
        assert!(load(&other).of("batch/v1/jobs", at, Duration::from_secs(60)).is_some(), "the last counts saved at the stop");
        std::fs::write(&path, b"{nope").unwrap();
        assert_eq!(load(&path).apis(), 0);
        assert!(dir.path().join("state.json.usage.unusable").exists());
    }
}
