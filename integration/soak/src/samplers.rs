//! Disruption seconds, the way OpenShift's upgrade tests count them: per
//! front door, four samplers ask once a second for something every
//! apiserver serves — over a new connection each time and over one reused
//! connection, each with HTTP/2 and HTTP/1.1 — and a second in which any
//! sample failed is a disruption second.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One sample: front door, new connection, second of the run, answered 200.
type Sample = (usize, bool, u64, bool);

#[derive(Default)]
pub struct Samples(Mutex<Vec<Sample>>);

/// A sampler's client: a new connection per sample or one reused.
pub struct Sampler {
    pub fresh: bool,
    pub client: reqwest::Client,
}

/// The four samplers' clients for a plain-HTTP front door.
pub fn plain_clients() -> Vec<Sampler> {
    let mut out = vec![];
    for http2 in [true, false] {
        for fresh in [true, false] {
            let mut b = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(10));
            if fresh {
                b = b.pool_max_idle_per_host(0);
            }
            b = if http2 { b.http2_prior_knowledge() } else { b.http1_only() };
            out.push(Sampler { fresh, client: b.build().unwrap_or_default() });
        }
    }
    out
}

impl Samples {
    /// Starts `samplers` for front door `door`, asking `url` (with `token`
    /// as bearer, if any) once a second from `t0` until `stop`.
    pub fn start(self: &Arc<Self>, door: usize, samplers: Vec<Sampler>, url: String, token: Option<&str>, t0: Instant, stop: Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<()>> {
        samplers
            .into_iter()
            .map(|s| {
                let (samples, url, token, stop) = (self.clone(), url.clone(), token.map(str::to_string), stop.clone());
                tokio::spawn(async move {
                    let mut tick = tokio::time::interval(Duration::from_secs(1));
                    while !stop.load(Ordering::Relaxed) {
                        tick.tick().await;
                        let mut req = s.client.get(&url);
                        if let Some(t) = &token {
                            req = req.bearer_auth(t);
                        }
                        let ok = req.send().await.is_ok_and(|r| r.status() == 200);
                        samples.0.lock().unwrap_or_else(|p| p.into_inner()).push((door, s.fresh, t0.elapsed().as_secs(), ok));
                    }
                })
            })
            .collect()
    }

    /// Disruption seconds of `door`: any sampler, new-connection samplers,
    /// reused-connection samplers.
    pub fn disruption(&self, door: usize) -> [usize; 3] {
        let samples = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let failed = |fresh: Option<bool>| {
            let seconds: BTreeSet<u64> = samples.iter().filter(|(d, f, _, ok)| *d == door && !ok && fresh.is_none_or(|x| x == *f)).map(|(_, _, s, _)| *s).collect();
            seconds.len()
        };
        [failed(None), failed(Some(true)), failed(Some(false))]
    }

    /// How many samples `door` took.
    pub fn taken(&self, door: usize) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|s| s.0 == door).count()
    }
}
