//! The graceful stop: SIGTERM (how the kubelet stops a pod) or Ctrl-C, seen
//! once by every part that ends on it — the gRPC listeners, the admin
//! server and the ADS streams — and a bound on how long the stop may take.
//!
//! Why the ADS streams end themselves: a gRPC server's graceful stop waits
//! for every open stream, and Envoy's ADS stream is a subscription that never
//! ends on its own, so a stop that left it open waited on Envoy (once, in a
//! CI run, for longer than a test's 10 s). Ended with `UNAVAILABLE`, Envoy
//! reconnects — to the restarted process or another instance — and keeps
//! its last clusters meanwhile.

use std::time::Duration;

use tokio::sync::watch;

/// How long in-flight gRPC streams (ext_proc exchanges, `GetTable`) may run
/// on after the stop before the process exits anyway. An ext_proc exchange
/// finishes in milliseconds; well inside the kubelet's default 30 s grace.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// Sets the stop; [`Stopping`]s see it.
pub struct Stop(watch::Sender<bool>);

/// A part's view of the stop.
#[derive(Clone)]
pub struct Stopping(watch::Receiver<bool>);

impl Stop {
    pub fn new() -> (Stop, Stopping) {
        let (tx, rx) = watch::channel(false);
        (Stop(tx), Stopping(rx))
    }

    pub fn stop(&self) {
        self.0.send_replace(true);
    }

    /// Stops at SIGTERM or Ctrl-C (never, where the signal cannot be
    /// listened for).
    pub async fn on_signal(self) {
        let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        tracing::info!(drain_limit = ?DRAIN_LIMIT, "stopping: no new connections; open gRPC streams end");
        self.stop();
        // Held: a dropped sender would read as "never stopping" elsewhere.
        std::future::pending::<()>().await
    }
}

impl Stopping {
    /// A stop that never comes (parts run on their own, e.g. in tests).
    pub fn never() -> Stopping {
        Stop::new().1
    }

    /// Resolves once stopped (never, if the [`Stop`] is gone unset).
    pub async fn stopped(mut self) {
        if self.0.wait_for(|s| *s).await.is_err() {
            std::future::pending::<()>().await
        }
    }

    /// Resolves [`DRAIN_LIMIT`] after the stop.
    pub async fn drain_expired(self) {
        self.stopped().await;
        tokio::time::sleep(DRAIN_LIMIT).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn stopped_once_set_and_never_without_a_stop() {
        let (stop, stopping) = Stop::new();
        let waiting = tokio::spawn(stopping.clone().stopped());
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        stop.stop();
        tokio::time::timeout(Duration::from_secs(1), waiting).await.unwrap().unwrap();
        // Seen by a part that starts waiting after the stop, too.
        tokio::time::timeout(Duration::from_secs(1), stopping.stopped()).await.unwrap();
        assert!(tokio::time::timeout(Duration::from_secs(3600), Stopping::never().stopped()).await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn the_drain_limit_runs_from_the_stop() {
        let (stop, stopping) = Stop::new();
        let started = tokio::time::Instant::now();
        let expired = tokio::spawn(stopping.drain_expired());
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!expired.is_finished(), "no stop yet");
        stop.stop();
        expired.await.unwrap();
        let took = started.elapsed() - Duration::from_secs(60);
        assert!(took >= DRAIN_LIMIT && took < DRAIN_LIMIT + Duration::from_secs(1), "{took:?}");
    }
}
