//! Many watches held open at once, and the connections they cost a server:
//! what a kubelet's or a controller's multiplexed watches look like to the
//! apiservers behind a door (`upstream_http2.rs`, `real_apiservers.rs`).

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Watches held open until [`Held::end`].
pub struct Held {
    /// Each watch's status once it got its first bytes (0: none in 15 s).
    pub statuses: Vec<u16>,
    release: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Held {
    /// The statuses that are not 200.
    pub fn failed(&self) -> Vec<u16> {
        self.statuses.iter().copied().filter(|s| *s != 200).collect()
    }

    /// Closes every watch and waits until they are gone.
    pub async fn end(self) {
        let _ = self.release.send(true);
        futures::future::join_all(self.tasks).await;
    }
}

/// `n` watches of `url` through `client` (one HTTP/2 client multiplexes
/// them all on one connection), returned once every one got its first
/// bytes of body — an event — or failed.
pub async fn hold_watches(client: &reqwest::Client, url: &str, n: usize) -> Held {
    let (release, released) = watch::channel(false);
    let (tx, mut rx) = tokio::sync::mpsc::channel(n.max(1));
    let tasks = (0..n)
        .map(|_| {
            let (client, url, tx, mut released) = (client.clone(), url.to_string(), tx.clone(), released.clone());
            tokio::spawn(async move {
                let first = tokio::time::timeout(Duration::from_secs(15), async {
                    let mut resp = client.get(&url).send().await.ok()?;
                    let status = resp.status().as_u16();
                    resp.chunk().await.ok()??;
                    Some((status, resp))
                })
                .await
                .ok()
                .flatten();
                let (status, resp) = first.map_or((0, None), |(s, r)| (s, Some(r)));
                let _ = tx.send(status).await;
                let _ = released.wait_for(|r| *r).await;
                drop(resp);
            })
        })
        .collect();
    let mut statuses = Vec::with_capacity(n);
    for _ in 0..n {
        statuses.push(rx.recv().await.unwrap_or(0));
    }
    Held { statuses, release, tasks }
}

/// TCP connections established to local `port` (the server's side of
/// each), from /proc/net/tcp and tcp6: what `ss -tn state established
/// sport = :port` counts.
pub fn established_to(port: u16) -> usize {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .map(|table| {
            table
                .lines()
                .skip(1)
                .filter(|line| {
                    let f: Vec<&str> = line.split_whitespace().collect();
                    // local_address is ADDR:PORT in hex; st 01 is ESTABLISHED.
                    f.len() > 3 && f[3] == "01" && f[1].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok()) == Some(port)
                })
                .count()
        })
        .sum()
}
