//! Propagation: a discovery change, timed until every Envoy worker routes by it.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::api_set;
use super::backend::{Backend, wait_routed};

/// Changes one apiserver's discovery (a new group only it serves) and times
/// until requests on fresh connections — spread over both workers — are
/// all routed by the new table, on each of `listens` (Envoys that differ in
/// how they get tables) for the same change: the samples are paired.
pub(super) async fn propagation(backend: &Backend, table: &api_set::ApiSet, listens: &[u16], changes: usize) -> Result<Vec<Vec<f64>>> {
    let fresh = reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0).timeout(Duration::from_secs(5)).build()?;
    let only = table.servers.last().cloned().unwrap_or_default();
    let addr = backend.address(&only);
    let mut samples = vec![Vec::new(); listens.len()];
    let interval = backend.refresh;
    for i in 0..changes {
        // Changes land at a random point of the refresh cycle, as real ones
        // do; without this every change would follow a detection by the same
        // delay and measure one phase only.
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        tokio::time::sleep(interval.mul_f64(f64::from(nanos % 1000) / 1000.0)).await;
        let group = format!("prop{i}.bench.example");
        let doc = table.apis_with_extra_group(&only, &group);
        let started = Instant::now();
        backend.http.post(format!("http://{addr}/__bench/apis")).body(serde_json::to_vec(&doc)?).send().await?;
        let routed = listens.iter().map(|listen| {
            let url = format!("http://127.0.0.1:{listen}/apis/{group}/v1/namespaces/default/things/x");
            let (fresh, addr) = (&fresh, &addr);
            async move {
                wait_routed(fresh, &url, addr).await?;
                anyhow::Ok(started.elapsed().as_secs_f64() * 1000.0)
            }
        });
        for (door, ms) in samples.iter_mut().zip(futures::future::try_join_all(routed).await?) {
            door.push(ms);
        }
    }
    Ok(samples)
}
