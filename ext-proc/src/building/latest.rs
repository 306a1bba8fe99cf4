//! Builds that must not hold up the sync loop: merging and encoding the
//! peer-aggregated `/apis` and the OpenAPI documents (hundreds of
//! milliseconds for a CRD-heavy cluster), writing the state file. The loop
//! hands the current inputs over (pointers) and goes on at once; a task of
//! its own builds from them on the blocking pool and publishes. Inputs
//! handed over while a build runs are taken by the next build — the latest
//! only, never a queue — so a slow merge delays neither routing-table
//! updates nor the next merge's inputs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

pub struct Latest<I> {
    tx: watch::Sender<Option<Arc<I>>>,
}

impl<I: Send + Sync + 'static> Latest<I> {
    /// Starts the task: `build` runs on the blocking pool, `publish` gets
    /// what it built and how long it took.
    pub fn spawn<O: Send + 'static>(
        what: &'static str,
        build: impl Fn(&I) -> O + Send + Sync + 'static,
        mut publish: impl FnMut(O, Duration) + Send + 'static,
    ) -> Latest<I> {
        let (tx, mut rx) = watch::channel::<Option<Arc<I>>>(None);
        let build = Arc::new(build);
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let Some(input) = rx.borrow_and_update().clone() else { continue };
                let build = build.clone();
                let started = Instant::now();
                match tokio::task::spawn_blocking(move || build(&input)).await {
                    Ok(out) => publish(out, started.elapsed()),
                    Err(e) => tracing::error!(what, error = %e, "build did not complete; keeping the last one"),
                }
                // The previous build is gone now (unless a request still
                // holds it): give its memory back.
                let _ = tokio::task::spawn_blocking(crate::building::memory::release_freed).await;
            }
        });
        Latest { tx }
    }

    /// The inputs to build from next (replacing any not yet taken).
    pub fn hand_over(&self, input: I) {
        self.tx.send_replace(Some(Arc::new(input)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn builds_the_latest_inputs_and_never_queues() {
        let (out_tx, mut out) = tokio::sync::mpsc::unbounded_channel();
        let (gate_tx, gate) = std::sync::mpsc::channel::<()>();
        let gate = std::sync::Mutex::new(gate);
        let latest = Latest::spawn(
            "test",
            move |n: &u32| {
                // The first build waits until the test lets it finish.
                if *n == 1 {
                    let _ = gate.lock().unwrap().recv();
                }
                *n
            },
            move |n, _| {
                let _ = out_tx.send(n);
            },
        );
        latest.hand_over(1);
        tokio::task::yield_now().await;
        for n in 2..=5 {
            latest.hand_over(n);
        }
        gate_tx.send(()).unwrap();
        assert_eq!(out.recv().await, Some(1));
        assert_eq!(out.recv().await, Some(5), "inputs 2-4 were superseded while 1 was built");
    }
}
