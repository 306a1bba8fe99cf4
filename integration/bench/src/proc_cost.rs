//! What a process of a door costs, read from outside it: CPU time
//! (`/proc`), resident memory, Envoy's heap (its admin).

/// A process's CPU time so far in clock ticks (`/proc/PID/stat` utime +
/// stime).
pub(crate) fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command: utime is the 12th, stime the 13th.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    n(11) + n(12)
}

/// A process's CPU time so far, ms, summed over its threads' scheduler
/// counters (nanoseconds; `/proc/PID/stat` counts 10 ms ticks, too coarse
/// for a door's CPU in a few seconds).
pub(crate) fn cpu_ms(pid: u32) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0.0 };
    let ns: u64 = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    ns as f64 / 1e6
}

/// The heap an Envoy's allocator has in use now, MiB, from its admin's
/// `/memory` (the `server.memory_allocated` gauge moves only at a stats
/// flush); 0 without an Envoy or an answer.
pub(crate) async fn envoy_heap_mib(http: &reqwest::Client, admin: Option<u16>) -> f64 {
    let Some(admin) = admin else { return 0.0 };
    let v: serde_json::Value = match http.get(format!("http://127.0.0.1:{admin}/memory")).send().await {
        Ok(r) => r.json().await.unwrap_or_default(),
        Err(_) => serde_json::Value::Null,
    };
    v["allocated"].as_str().and_then(|a| a.parse::<f64>().ok()).unwrap_or(0.0) / (1024.0 * 1024.0)
}

/// A process's resident memory, MiB.
pub(crate) fn rss_mib(pid: u32) -> f64 {
    integration::harness::process::rss_kib(pid) as f64 / 1024.0
}
