//! Paired measurements, for the goals that compare two variants closely.
//!
//! The rounds measure each variant once per round for seconds at a time, so
//! two variants of one ratio are measured up to half a minute apart: a burst
//! from elsewhere on the shared host lands on one of them and not the other,
//! and with six rounds a ratio's median swung 0.85–1.06 between runs of the
//! same code. Here the two sides of a comparison alternate closely enough to
//! share the host's state:
//!
//! - throughput and CPU: the two variants alternate in short wrk slices, in
//!   ABBA order (pair `i` runs A first when `i` is even) so neither always
//!   runs first, many pairs, the comparisons interleaved with each other; a
//!   figure is the median of the per-pair ratios;
//! - `/apis` latency: one client, pinned to core 1 like the load generators,
//!   sends the doors one request each in turn, in a balanced order, one
//!   request per evenly spaced slot (nothing else of the benchmark in flight,
//!   and time after each request for Envoy to finish with it before the next
//!   door's), so every door's samples come from the same seconds; a figure is
//!   a percentile over those seconds.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::load::{self, Spread};
use super::{cpu_ticks, percentile, round_order};

/// One side of a throughput comparison: the URL wrk loads and the
/// processes whose CPU counts.
pub struct Side<'a> {
    pub url: &'a str,
    pub pids: &'a [u32],
}

/// One comparison: its name and its two sides, A over B.
pub struct Comparison<'a> {
    pub name: &'a str,
    pub a: Side<'a>,
    pub b: Side<'a>,
}

/// Per-pair ratios A/B of every comparison, `pairs` pairs of `slice`-long
/// wrk runs each: `throughput <name>` and `cpu per request <name>`.
pub fn slices(comparisons: &[Comparison], pairs: usize, slice: Duration) -> Result<BTreeMap<String, Spread>> {
    let mut rps: Vec<(Vec<f64>, Vec<f64>)> = comparisons.iter().map(|_| Default::default()).collect();
    for pair in 0..pairs {
        for (c, out) in comparisons.iter().zip(rps.iter_mut()) {
            let (first, second) = if pair % 2 == 0 { (&c.a, &c.b) } else { (&c.b, &c.a) };
            let one = run_slice(first, slice)?;
            let two = run_slice(second, slice)?;
            let ((ra, ca), (rb, cb)) = if pair % 2 == 0 { (one, two) } else { (two, one) };
            out.0.push(ra / rb.max(1e-9));
            out.1.push(ca / cb.max(1e-9));
        }
    }
    let mut out = BTreeMap::new();
    for (c, (throughput, cpu)) in comparisons.iter().zip(rps) {
        out.insert(format!("throughput {}", c.name), Spread::of(&throughput));
        out.insert(format!("cpu per request {}", c.name), Spread::of(&cpu));
    }
    Ok(out)
}

/// One wrk slice: requests per second and CPU µs per request.
fn run_slice(side: &Side, slice: Duration) -> Result<(f64, f64)> {
    let before: u64 = side.pids.iter().map(|p| cpu_ticks(*p)).sum();
    let (rps, requests) = load::wrk(side.url, slice)?;
    let ticks = side.pids.iter().map(|p| cpu_ticks(*p)).sum::<u64>() - before;
    Ok((rps, ticks as f64 * 1e6 / load::clock_ticks() / requests.max(1) as f64))
}

/// Latency samples (ms) of each of `urls`, taken together: `rate` requests
/// per second to each, for `windows` × `window`, one request per slot (slots
/// of 1/(`rate` × URLs)), the URLs in turn in the balanced order of
/// [`round_order`], one request at a time; per URL, one vector of samples per
/// window.
pub fn interleaved_latency(urls: &[String], headers: &[(&str, &str)], rate: u32, windows: usize, window: Duration) -> Result<Vec<Vec<Vec<f64>>>> {
    let (urls, headers): (Vec<String>, Vec<(String, String)>) = (urls.to_vec(), headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    // Its own thread and runtime, pinned to core 1: the benchmark's own
    // runtime is not pinned, and the client must not share core 0 with Envoy
    // and mvp-ext-proc.
    std::thread::spawn(move || {
        pin_to_core(1)?;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(client(&urls, &headers, rate, windows, window))
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the latency client's thread panicked"))?
}

async fn client(urls: &[String], headers: &[(String, String)], rate: u32, windows: usize, window: Duration) -> Result<Vec<Vec<Vec<f64>>>> {
    let http = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(10)).build()?;
    let get = |url: &str| {
        let mut req = http.get(url);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        req
    };
    // Warm every connection up first: connecting is not what is measured.
    for url in urls {
        get(url).send().await?.error_for_status()?.bytes().await?;
    }
    let slots_per_second = rate.max(1) * u32::try_from(urls.len().max(1)).unwrap_or(1);
    let mut slot = tokio::time::interval(Duration::from_secs(1) / slots_per_second);
    // A slot missed (the request before ran long) is not made up for with a
    // burst: the next request waits for the next slot.
    slot.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut samples = vec![vec![Vec::new(); windows]; urls.len()];
    let mut turn = 0usize;
    for w in 0..windows {
        let end = Instant::now() + window;
        while Instant::now() < end {
            for i in round_order(urls.len(), turn) {
                slot.tick().await;
                let url = urls.get(i).context("url index")?;
                let started = Instant::now();
                let resp = get(url).send().await?;
                if resp.status() != 200 {
                    bail!("{url} answered {}", resp.status());
                }
                resp.bytes().await?;
                let ms = started.elapsed().as_secs_f64() * 1e3;
                if let Some(s) = samples.get_mut(i).and_then(|s| s.get_mut(w)) {
                    s.push(ms);
                }
            }
            turn += 1;
        }
    }
    Ok(samples)
}

fn pin_to_core(core: usize) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside
    // it; sched_setaffinity(0, ..) affects the calling thread only.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        bail!("pinning the latency client to core {core}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// `a`'s percentile minus `b`'s: over all windows together, and per window.
pub fn added(a: &[Vec<f64>], b: &[Vec<f64>], p: f64) -> (f64, Spread) {
    let all = |s: &[Vec<f64>]| s.concat();
    let pooled = percentile(&all(a), p) - percentile(&all(b), p);
    let per_window: Vec<f64> = a.iter().zip(b).map(|(a, b)| percentile(a, p) - percentile(b, p)).collect();
    (pooled, Spread::of(&per_window))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_is_pooled_and_per_window() {
        let a = vec![vec![2.0, 4.0], vec![3.0, 9.0]];
        let b = vec![vec![1.0, 1.0], vec![1.0, 2.0]];
        let (pooled, w) = added(&a, &b, 50.0);
        // Pooled p50 of a is 3, of b 1; per window 2−1 and 3−1.
        assert_eq!(pooled, 2.0);
        assert_eq!(w.rounds, vec![1.0, 2.0]);
    }
}
