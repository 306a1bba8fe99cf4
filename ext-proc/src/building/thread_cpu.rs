//! CPU time of the calling thread, beside wall time for builds that run on
//! one thread: when mvp-ext-proc shares a core (with Envoy, or its own sync
//! loop building the routing table at the same moment), a build's wall
//! time includes its waits for the core; its CPU time is the build's own
//! cost. The two together tell an operator which of them to act on.

use std::time::Duration;

/// The calling thread's CPU time so far; zero where it cannot be read.
pub fn now() -> Duration {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime only writes the timespec it is given.
        if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0 {
            return Duration::new(u64::try_from(ts.tv_sec).unwrap_or(0), u32::try_from(ts.tv_nsec).unwrap_or(0));
        }
    }
    Duration::ZERO
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    #[test]
    fn counts_this_threads_work_not_its_sleep() {
        let start = super::now();
        std::thread::sleep(Duration::from_millis(30));
        let slept = super::now() - start;
        assert!(slept < Duration::from_millis(15), "sleeping counted {slept:?}");
        // Work advances it, however busy the machine (bounded wait).
        let (t0, deadline, mut x) = (super::now(), Instant::now() + Duration::from_secs(20), 0u64);
        while super::now() - t0 < Duration::from_millis(20) {
            assert!(Instant::now() < deadline, "20 ms of work never counted");
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }
}
