//! Many watches held open at once, and the connections they cost a server:
//! what a kubelet's or a controller's multiplexed watches look like to the
//! apiservers behind a door (`upstream_http2.rs`, `real_apiservers.rs`).

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

/// [`Held::statuses`]' status of a watch answered 200 whose first event
/// was an ERROR (kube's way to refuse a watch after its headers).
pub const WATCH_ERROR: u16 = 599;

/// Watches held open until [`Held::end`], reading what their streams carry
/// after the first event, as a client does.
pub struct Held {
    /// Each watch's status once it got its first bytes (0: none in 15 s).
    pub statuses: Vec<u16>,
    /// Bytes read after each watch's first event, all watches together.
    pub received: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Watches whose stream ended (or broke) while held.
    pub ended: std::sync::Arc<std::sync::atomic::AtomicU64>,
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

/// The watch paths of a kubelet on node `n` (its first `k`): its pods and
/// its node by field selector, services, endpointslices, then the
/// configmaps and secrets its pods mount; each with `query` added (the
/// fake's `hold=S`, `events_every_ms=N`).
pub fn kubelet_watches(n: usize, k: usize, query: &str) -> Vec<String> {
    let q = format!("watch=1&{query}");
    let fixed = [
        format!("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-{n}&{q}"),
        format!("/api/v1/nodes?fieldSelector=metadata.name%3Dnode-{n}&{q}"),
        format!("/api/v1/services?{q}"),
        format!("/apis/discovery.k8s.io/v1/endpointslices?{q}"),
    ];
    let mounts = (0..).map(|i| {
        if i % 2 == 0 {
            format!("/api/v1/namespaces/ns-{}/configmaps?fieldSelector=metadata.name%3Dcm-{i}&{q}", n % 10)
        } else {
            format!("/api/v1/namespaces/ns-{}/secrets?fieldSelector=metadata.name%3Ds-{i}&{q}", n % 10)
        }
    });
    fixed.into_iter().chain(mounts).take(k).collect()
}

/// `n` watches of `url` through `client` (one HTTP/2 client multiplexes
/// them all on one connection), returned once every one got its first
/// bytes of body — an event — or failed.
pub async fn hold_watches(client: &reqwest::Client, url: &str, n: usize) -> Held {
    let (release, released) = watch::channel(false);
    let (tx, mut rx) = tokio::sync::mpsc::channel(n.max(1));
    let received = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let ended = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let tasks = (0..n)
        .map(|_| {
            let (client, url, tx, mut released) = (client.clone(), url.to_string(), tx.clone(), released.clone());
            let (received, ended) = (received.clone(), ended.clone());
            tokio::spawn(async move {
                let first = tokio::time::timeout(Duration::from_secs(15), async {
                    let mut resp = client.get(&url).send().await.ok()?;
                    let status = resp.status().as_u16();
                    let first = resp.chunk().await.ok()??;
                    // kube answers a watch it cannot serve with 200 and an
                    // ERROR event, then ends it: not a watch held.
                    let status = if status == 200 && first.starts_with(br#"{"type":"ERROR""#) { WATCH_ERROR } else { status };
                    Some((status, resp))
                })
                .await
                .ok()
                .flatten();
                let (status, resp) = first.map_or((0, None), |(s, r)| (s, Some(r)));
                let _ = tx.send(status).await;
                let read = async {
                    if let Some(mut resp) = resp {
                        while let Ok(Some(bytes)) = resp.chunk().await {
                            received.fetch_add(bytes.len() as u64, std::sync::atomic::Ordering::Relaxed);
                        }
                        ended.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    std::future::pending::<()>().await;
                };
                tokio::select! {
                    _ = released.wait_for(|r| *r) => {}
                    () = read => {}
                }
            })
        })
        .collect();
    let mut statuses = Vec::with_capacity(n);
    for _ in 0..n {
        statuses.push(rx.recv().await.unwrap_or(0));
    }
    Held { statuses, received, ended, release, tasks }
}

/// The ESTABLISHED rows of /proc/net/tcp and tcp6, split into fields
/// (`local_address` and `rem_address` are ADDR:PORT in hex, `st` 01 is
/// ESTABLISHED, field 9 the socket's inode).
fn established_rows() -> Vec<Vec<String>> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|table| table.lines().skip(1).map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>()).collect::<Vec<_>>())
        .filter(|f| f.len() > 9 && f[3] == "01")
        .collect()
}

fn port_of(address: &str) -> Option<u16> {
    u16::from_str_radix(address.rsplit(':').next()?, 16).ok()
}

/// TCP connections established to local `port` (the server's side of
/// each): what `ss -tn state established sport = :port` counts.
pub fn established_to(port: u16) -> usize {
    established_rows().iter().filter(|f| port_of(&f[1]) == Some(port)).count()
}

/// TCP connections to `port` in state ESTABLISHED whose client end belongs
/// to process `pid` — one client's cost on a server, untouched by the
/// server's other clients (kube-apiserver's own loopback client,
/// mvp-ext-proc's discovery), which come and go on their own.
pub fn established_from(pid: u32, port: u16) -> usize {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
                .filter_map(|target| target.to_str()?.strip_prefix("socket:[")?.strip_suffix(']').map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    established_rows().iter().filter(|f| port_of(&f[2]) == Some(port) && inodes.contains(&f[9])).count()
}

/// Watches that, like a client-go reflector, watch again whenever their
/// stream ends (without its backoff: the worst case for a door), until
/// [`Rewatching::end`]; what the door answered meanwhile, by class.
pub struct Rewatching {
    /// Watches whose current stream got its first event.
    pub live: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Streams that ended while the watch was wanted.
    pub broken: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Answers that were not a watch: "503 Status", "503 other", "404", "no answer" …
    pub errors: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, usize>>>,
    release: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Rewatching {
    pub fn live(&self) -> usize {
        self.live.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn broken(&self) -> usize {
        self.broken.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn errors(&self) -> std::collections::BTreeMap<String, usize> {
        self.errors.lock().map(|e| e.clone()).unwrap_or_default()
    }

    pub async fn end(self) {
        let _ = self.release.send(true);
        futures::future::join_all(self.tasks).await;
    }
}

/// `n` watches of `url` through `client`, each watching again at once when
/// its stream ends or its request fails (after 100 ms for a failure).
pub fn rewatch(client: &reqwest::Client, url: &str, n: usize) -> Rewatching {
    use std::sync::atomic::Ordering::SeqCst;
    let (release, released) = watch::channel(false);
    let live = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let broken = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let errors = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
    let record = |errors: &std::sync::Mutex<std::collections::BTreeMap<String, usize>>, class: String| {
        if let Ok(mut e) = errors.lock() {
            *e.entry(class).or_default() += 1;
        }
    };
    let tasks = (0..n)
        .map(|_| {
            let (client, url, mut released) = (client.clone(), url.to_string(), released.clone());
            let (live, broken, errors) = (live.clone(), broken.clone(), errors.clone());
            tokio::spawn(async move {
                while !*released.borrow() {
                    let attempt = async {
                        let mut resp = client.get(&url).send().await.map_err(|_| "no answer".to_string())?;
                        let status = resp.status().as_u16();
                        if status != 200 {
                            let body: serde_json::Value = resp.json().await.unwrap_or_default();
                            return Err(format!("{status} {}", if body["kind"] == "Status" { "Status" } else { "other" }));
                        }
                        resp.chunk().await.ok().flatten().ok_or_else(|| "200 without an event".to_string())?;
                        Ok(resp)
                    };
                    let mut resp = match tokio::time::timeout(Duration::from_secs(15), attempt).await {
                        Ok(Ok(resp)) => resp,
                        Ok(Err(class)) => {
                            record(&errors, class);
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                        Err(_) => {
                            record(&errors, "no event in 15 s".into());
                            continue;
                        }
                    };
                    live.fetch_add(1, SeqCst);
                    // Held until released or the stream ends.
                    let ended = tokio::select! {
                        _ = released.wait_for(|r| *r) => false,
                        _ = async { while let Ok(Some(_)) = resp.chunk().await {} } => true,
                    };
                    live.fetch_sub(1, SeqCst);
                    if ended && !*released.borrow() {
                        broken.fetch_add(1, SeqCst);
                    }
                }
            })
        })
        .collect();
    Rewatching { live, broken, errors, release, tasks }
}

/// A client of its own, HTTP/2 with prior knowledge: one node's connection.
pub fn h2c() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().http2_prior_knowledge().build().unwrap_or_default()
}

/// Every node's kubelet watches (`hold=600` on the fakes) through `base`,
/// each node on a client of its own (one connection), each watch asked for
/// again when its stream ends ([`rewatch`]): the storms' load
/// (`scale_watches.rs`, the bench's scale part).
pub fn nodes_rewatching(nodes: usize, per_node: usize, base: &str, client: impl Fn() -> reqwest::Client) -> Vec<Rewatching> {
    let mut watching = Vec::new();
    for n in 0..nodes {
        let node = client();
        for path in kubelet_watches(n, per_node, "hold=600") {
            watching.push(rewatch(&node, &format!("{base}{path}"), 1));
        }
    }
    watching
}

/// Watches whose current stream got its first event.
pub fn live(w: &[Rewatching]) -> usize {
    w.iter().map(Rewatching::live).sum()
}

/// Streams that ended while their watch was wanted.
pub fn broken(w: &[Rewatching]) -> usize {
    w.iter().map(Rewatching::broken).sum()
}

/// What the watches were answered other than a watch, by class, all
/// together.
pub fn errors(w: &[Rewatching]) -> std::collections::BTreeMap<String, usize> {
    let mut all = std::collections::BTreeMap::new();
    for (class, n) in w.iter().flat_map(Rewatching::errors) {
        *all.entry(class).or_default() += n;
    }
    all
}
