//! The ground truth a soak judges answers by: which apiserver processes were
//! up, as which release, at every moment. The soak driver records each
//! change as it makes it (a process listening, SIGTERM sent, the process
//! gone), so a response can be judged against every state that overlapped
//! its request.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub release: String,
    /// Its `/readyz` answered 200 (seen by the driver): from then on a load
    /// balancer would send it requests, so a 503 for its APIs is one a
    /// capable server could have answered.
    pub ready: bool,
    /// SIGTERM sent: `/readyz` fails, in-flight requests still finish.
    pub stopping: bool,
    /// When a stopping process stops taking new requests (kube-apiserver:
    /// its `--shutdown-delay-duration` after SIGTERM, when its listener
    /// closes; its exit comes after its requests in flight end). `None`:
    /// until it is gone.
    pub accepts_until: Option<Instant>,
}

impl Process {
    /// Whether it took new requests at `at` (up, not past its shutdown
    /// delay).
    pub fn accepting_at(&self, at: Instant) -> bool {
        self.accepts_until.is_none_or(|until| at <= until)
    }
}

/// name → the process listening under that name now.
pub type State = BTreeMap<String, Process>;

#[derive(Default)]
pub struct Timeline {
    states: Mutex<Vec<(Instant, State)>>,
}

impl Timeline {
    /// Records a change, effective now.
    pub fn change(&self, f: impl FnOnce(&mut State)) {
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = states.last().map(|(_, s)| s.clone()).unwrap_or_default();
        f(&mut next);
        states.push((Instant::now(), next));
    }

    /// Started (or about to be): a 404 for its APIs is wrong from now on.
    pub fn up(&self, name: &str, release: &str) {
        self.change(|s| {
            s.insert(name.to_string(), Process { release: release.to_string(), ready: false, stopping: false, accepts_until: None });
        });
    }

    /// Its `/readyz` answered 200.
    pub fn ready(&self, name: &str) {
        self.change(|s| {
            if let Some(p) = s.get_mut(name) {
                p.ready = true;
            }
        });
    }

    pub fn stopping(&self, name: &str) {
        self.change(|s| {
            if let Some(p) = s.get_mut(name) {
                p.stopping = true;
            }
        });
    }

    /// [`Timeline::stopping`], taking new requests for `delay` more.
    pub fn stopping_after(&self, name: &str, delay: std::time::Duration) {
        let until = Instant::now() + delay;
        self.change(|s| {
            if let Some(p) = s.get_mut(name) {
                p.stopping = true;
                p.accepts_until = Some(until);
            }
        });
    }

    pub fn gone(&self, name: &str) {
        self.change(|s| {
            s.remove(name);
        });
    }

    /// Every state that held at some moment of `[from, to]`.
    pub fn during(&self, from: Instant, to: Instant) -> Vec<State> {
        let states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        let first = states.partition_point(|(at, _)| *at <= from).saturating_sub(1);
        states.iter().skip(first).take_while(|(at, _)| *at <= to).map(|(_, s)| s.clone()).collect()
    }
}

/// Whether some process in `state` that is up (stopping or not) is of a
/// release in `releases`: it could answer the request with the object —
/// the bar for a wrong 404, from the moment it starts.
pub fn capable(state: &State, releases: &[String]) -> bool {
    state.values().any(|p| releases.contains(&p.release))
}

/// [`capable`], and it was ready (`/readyz` 200 seen; a stopping one was):
/// the bar for a 503 a capable server could have answered — a load
/// balancer's own, which routes by `/readyz`.
pub fn capable_and_ready(state: &State, releases: &[String]) -> bool {
    state.values().any(|p| p.ready && releases.contains(&p.release))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn during_includes_the_state_at_the_start_and_every_later_one() {
        let t = Timeline::default();
        t.up("a", "v1.30");
        let start = Instant::now();
        t.stopping("a");
        t.gone("a");
        let end = Instant::now();
        t.up("a", "v1.33");
        let seen = t.during(start, end);
        assert_eq!(seen.len(), 3);
        assert!(!seen[0]["a"].stopping);
        assert!(seen[1]["a"].stopping);
        assert!(seen[2].is_empty());
        let releases = vec!["v1.30".to_string()];
        assert!(capable(&seen[1], &releases), "a stopping apiserver still answers");
        assert!(!capable(&seen[2], &releases));
    }

    #[test]
    fn a_starting_process_can_make_a_404_wrong_but_not_a_503() {
        let t = Timeline::default();
        t.up("a", "v1.33");
        let releases = ["v1.33".to_string()];
        let starting = t.during(Instant::now(), Instant::now()).pop().unwrap();
        assert!(capable(&starting, &releases) && !capable_and_ready(&starting, &releases));
        t.ready("a");
        let ready = t.during(Instant::now(), Instant::now()).pop().unwrap();
        assert!(capable_and_ready(&ready, &releases));
    }
}
