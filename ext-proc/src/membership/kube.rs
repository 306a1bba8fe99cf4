//! Membership read from the cluster itself, through the Kubernetes API
//! (kube-rs reflectors: a list, then a watch, relisted on expiry), with a
//! kubeconfig or in-cluster ServiceAccount credentials:
//!
//! - `endpoints`: `default/kubernetes` Endpoints. Every kube-apiserver with
//!   the default lease endpoint reconciler adds its advertise address there
//!   while it runs and removes it when it shuts down, on every release.
//! - `leases`: apiserver identity Leases in `kube-system` (label
//!   `apiserver.kubernetes.io/identity=kube-apiserver`, Kubernetes 1.26+),
//!   with the address from the `kubernetes.io/peer-advertise-address`
//!   annotation (set when the Mixed Version Proxy feature is on). Liveness
//!   is judged by renewals as this process sees them ([`super::liveness`];
//!   kube renews every 10 s): a lease not seen renewed for
//!   `--lease-stale-after` (30 s) is gone — not by `leaseDurationSeconds`
//!   (3600 s, kube's own garbage collection). A changed `holderIdentity`
//!   means the apiserver restarted.
//!
//! A source says nothing (`None`) until it has listed once, and nothing new
//! while its watch fails: a membership not listed yet, or a store frozen
//! while the Kubernetes API is unreachable, must not look like an empty
//! control plane.
//!
//! RBAC: get, list and watch on `endpoints` in `default` and on `leases` in
//! `kube-system` (shipped in `deploy/`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Endpoints;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};
use tokio::sync::watch;

use super::liveness::Liveness;

/// The label every apiserver identity lease carries.
pub const IDENTITY_LABEL: &str = "apiserver.kubernetes.io/identity=kube-apiserver";
/// The annotation with the apiserver's peer address (`IP:port`).
pub const PEER_ADDRESS_ANNOTATION: &str = "kubernetes.io/peer-advertise-address";

/// Which objects to follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Source {
    Endpoints,
    Leases,
}

#[derive(Debug, Clone)]
pub struct KubeOptions {
    pub sources: Vec<Source>,
    /// None: in-cluster ServiceAccount credentials.
    pub kubeconfig: Option<PathBuf>,
    pub lease_stale_after: Duration,
}

/// One apiserver a source names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub address: SocketAddr,
    /// The lease's name (endpoints carry none).
    pub name: Option<String>,
    /// The lease's holder identity.
    pub incarnation: Option<String>,
}

pub async fn client(o: &KubeOptions) -> anyhow::Result<Client> {
    client_from(o.kubeconfig.as_deref(), "--membership-kubeconfig").await
}

/// A client from the kubeconfig `flag` named, or in-cluster credentials.
pub async fn client_from(kubeconfig: Option<&std::path::Path>, flag: &str) -> anyhow::Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| anyhow::anyhow!("{flag} {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| anyhow::anyhow!("{flag} {}: {e}", path.display()))?
        }
        None => kube::Config::incluster().map_err(|e| anyhow::anyhow!("in-cluster credentials (or give {flag}): {e}"))?,
    };
    Client::try_from(config).map_err(|e| anyhow::anyhow!("Kubernetes client: {e}"))
}

/// Follows `default/kubernetes` Endpoints; every change is sent on `tx`
/// once the Endpoints have been listed.
pub async fn follow_endpoints(client: Client, tx: watch::Sender<Option<Vec<Found>>>) {
    let api: Api<Endpoints> = Api::namespaced(client, "default");
    let (reader, writer) = reflector::store();
    let config = watcher::Config::default().fields("metadata.name=kubernetes");
    let mut events = std::pin::pin!(reflector(writer, watcher(api, config)).default_backoff());
    let mut watch = WatchHealth::default();
    while let Some(event) = events.next().await {
        if !watch.after(&event, "default/kubernetes Endpoints") {
            continue;
        }
        let found: Vec<Found> = reader.state().iter().flat_map(|e| endpoints_members(e)).collect();
        tx.send_if_modified(|cur| replace_if_changed(cur, found));
    }
}

/// Whether a source's store may be read: listed once, and its watch not
/// failing since.
#[derive(Default)]
struct WatchHealth {
    listed: bool,
    failing: bool,
    last_event: Option<std::time::Instant>,
}

impl WatchHealth {
    /// Follows one event; true when the store is complete and current.
    fn after<K>(&mut self, event: &Result<watcher::Event<K>, watcher::Error>, what: &str) -> bool {
        if event.is_ok() {
            self.last_event = Some(std::time::Instant::now());
        }
        match event {
            Err(e) => {
                if !self.failing {
                    tracing::warn!(error = %e, "watching {what} failed; membership from it frozen until the watch resumes");
                }
                self.failing = true;
            }
            Ok(watcher::Event::InitDone) => {
                self.listed = true;
                self.failing = false;
            }
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => self.failing = false,
            // A relist in progress: the store still holds the last complete one.
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
        }
        self.listed && !self.failing
    }
}

/// Every address × port of every subset (kube-apiservers of one cluster
/// share a port; separate subsets when they do not).
pub fn endpoints_members(e: &Endpoints) -> Vec<Found> {
    let mut out = Vec::new();
    for subset in e.subsets.iter().flatten() {
        let ports: Vec<u16> = subset
            .ports
            .iter()
            .flatten()
            .filter(|p| p.name.as_deref().is_none_or(|n| n == "https" || n.is_empty()))
            .filter_map(|p| u16::try_from(p.port).ok())
            .collect();
        for a in subset.addresses.iter().flatten() {
            let Ok(ip) = a.ip.parse::<std::net::IpAddr>() else { continue };
            out.extend(ports.iter().map(|&p| Found { address: SocketAddr::new(ip, p), name: None, incarnation: None }));
        }
    }
    out.sort_by_key(|f| f.address);
    out.dedup();
    out
}

/// Follows the identity Leases; liveness is re-judged every second as
/// renewals age, not only on events, and not while the watch fails.
pub async fn follow_leases(client: Client, stale_after: Duration, tx: watch::Sender<Option<Vec<Found>>>) {
    let api: Api<Lease> = Api::namespaced(client, "kube-system");
    let (reader, writer) = reflector::store();
    let config = watcher::Config::default().labels(IDENTITY_LABEL);
    let mut events = std::pin::pin!(reflector(writer, watcher(api, config)).default_backoff());
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut watch = WatchHealth::default();
    let mut liveness = Liveness::new(stale_after);
    let mut current = false;
    let mut held = false;
    loop {
        tokio::select! {
            event = events.next() => {
                let Some(event) = event else { return };
                current = watch.after(&event, "kube-system identity Leases");
            }
            _ = tick.tick() => {}
        }
        if !current {
            continue;
        }
        let leases = reader.state();
        let candidates: Vec<(Found, i64)> = leases.iter().filter_map(|l| lease_member(l)).collect();
        let alive = liveness.judge(
            candidates.iter().filter_map(|(f, renew)| Some((f.name.as_deref()?, *renew))),
            k8s_openapi::jiff::Timestamp::now().as_millisecond(),
            std::time::Instant::now(),
            watch.last_event.unwrap_or_else(std::time::Instant::now),
        );
        if liveness.held != held {
            held = liveness.held;
            if held {
                tracing::warn!("the identity Lease watch has heard nothing since a lease's deadline (the apiserver it reads through may hang); membership from leases frozen until it speaks");
            } else {
                tracing::info!("the identity Lease watch speaks again; membership from leases judged again");
            }
        }
        let mut found: Vec<Found> = candidates.iter().filter(|(f, _)| f.name.as_deref().is_some_and(|n| alive.contains(&n))).map(|(f, _)| f.clone()).collect();
        found.sort_by_key(|f| f.address);
        tx.send_if_modified(|cur| replace_if_changed(cur, found));
    }
}

/// A lease's apiserver and its `renewTime` (ms), or `None` (no peer
/// address, never renewed).
pub fn lease_member(l: &Lease) -> Option<(Found, i64)> {
    let address: SocketAddr = l.metadata.annotations.as_ref()?.get(PEER_ADDRESS_ANNOTATION)?.parse().ok()?;
    let spec = l.spec.as_ref()?;
    let renewed = spec.renew_time.as_ref()?.0;
    Some((Found { address, name: Some(l.metadata.name.clone()?), incarnation: spec.holder_identity.clone() }, renewed.as_millisecond()))
}

fn replace_if_changed(cur: &mut Option<Vec<Found>>, next: Vec<Found>) -> bool {
    let changed = cur.as_ref() != Some(&next);
    if changed {
        *cur = Some(next);
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::api::core::v1::{EndpointAddress, EndpointPort, EndpointSubset};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    use k8s_openapi::jiff::Timestamp;

    #[test]
    fn endpoints_give_every_address_and_port() {
        let subset = |ips: &[&str], port: i32| EndpointSubset {
            addresses: Some(ips.iter().map(|ip| EndpointAddress { ip: ip.to_string(), ..Default::default() }).collect()),
            ports: Some(vec![EndpointPort { name: Some("https".into()), port, ..Default::default() }]),
            ..Default::default()
        };
        let e = Endpoints { subsets: Some(vec![subset(&["10.0.0.2", "10.0.0.1"], 6443), subset(&["127.0.0.1", "bogus"], 7000)]), ..Default::default() };
        let got: Vec<String> = endpoints_members(&e).iter().map(|f| f.address.to_string()).collect();
        assert_eq!(got, ["10.0.0.1:6443", "10.0.0.2:6443", "127.0.0.1:7000"]);
    }

    #[test]
    fn a_lease_gives_its_peer_address_name_holder_and_renewal() {
        let renewed = Timestamp::now();
        let lease = |address: Option<&str>| Lease {
            metadata: ObjectMeta {
                name: Some("apiserver-abc".into()),
                annotations: address.map(|a| [(PEER_ADDRESS_ANNOTATION.to_string(), a.to_string())].into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some("apiserver-abc_1".into()),
                lease_duration_seconds: Some(3600),
                renew_time: Some(MicroTime(renewed)),
                ..Default::default()
            }),
        };
        let (live, at) = lease_member(&lease(Some("10.0.0.1:6443"))).unwrap();
        assert_eq!((live.address.to_string(), live.name.as_deref(), live.incarnation.as_deref()), ("10.0.0.1:6443".into(), Some("apiserver-abc"), Some("apiserver-abc_1")));
        assert_eq!(at, renewed.as_millisecond());
        assert_eq!(lease_member(&lease(None)), None, "no peer address: not usable");
    }

    #[test]
    fn a_source_is_read_only_once_listed_and_while_its_watch_works() {
        let mut w = WatchHealth::default();
        let ev = |e: watcher::Event<Lease>| Ok(e);
        assert!(!w.after(&ev(watcher::Event::Init), "x"));
        assert!(!w.after(&ev(watcher::Event::InitApply(Lease::default())), "x"), "listing: not complete yet");
        assert!(w.after(&ev(watcher::Event::InitDone), "x"));
        assert!(w.after(&ev(watcher::Event::Apply(Lease::default())), "x"));
        assert!(!w.after(&Err::<watcher::Event<Lease>, _>(watcher::Error::NoResourceVersion), "x"), "failing: frozen");
        assert!(!w.after(&ev(watcher::Event::Init), "x"), "relisting: still frozen");
        assert!(w.after(&ev(watcher::Event::InitDone), "x"));
    }
}
