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
//!   is judged by `renewTime` (kube renews every 10 s): a lease not renewed
//!   for `--lease-stale-after` (30 s) is gone — not by
//!   `leaseDurationSeconds` (3600 s, kube's own garbage collection). A
//!   changed `holderIdentity` means the apiserver restarted.
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
    let config = match &o.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| anyhow::anyhow!("--membership-kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| anyhow::anyhow!("--membership-kubeconfig {}: {e}", path.display()))?
        }
        None => kube::Config::incluster().map_err(|e| anyhow::anyhow!("in-cluster credentials (or give --membership-kubeconfig): {e}"))?,
    };
    Client::try_from(config).map_err(|e| anyhow::anyhow!("Kubernetes client: {e}"))
}

/// Follows `default/kubernetes` Endpoints; every change is sent on `tx`.
pub async fn follow_endpoints(client: Client, tx: watch::Sender<Vec<Found>>) {
    let api: Api<Endpoints> = Api::namespaced(client, "default");
    let (reader, writer) = reflector::store();
    let config = watcher::Config::default().fields("metadata.name=kubernetes");
    let mut events = std::pin::pin!(reflector(writer, watcher(api, config)).default_backoff());
    while let Some(event) = events.next().await {
        if let Err(e) = event {
            tracing::warn!(error = %e, "watching default/kubernetes Endpoints; retrying");
            continue;
        }
        let found: Vec<Found> = reader.state().iter().flat_map(|e| endpoints_members(e)).collect();
        tx.send_if_modified(|cur| replace_if_changed(cur, found));
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
/// renewals age, not only on events.
pub async fn follow_leases(client: Client, stale_after: Duration, tx: watch::Sender<Vec<Found>>) {
    let api: Api<Lease> = Api::namespaced(client, "kube-system");
    let (reader, writer) = reflector::store();
    let config = watcher::Config::default().labels(IDENTITY_LABEL);
    let mut events = std::pin::pin!(reflector(writer, watcher(api, config)).default_backoff());
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            event = events.next() => match event {
                None => return,
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "watching kube-system identity Leases; retrying");
                    continue;
                }
                Some(Ok(_)) => {}
            },
            _ = tick.tick() => {}
        }
        let now = k8s_openapi::jiff::Timestamp::now();
        let mut found: Vec<Found> = reader.state().iter().filter_map(|l| lease_member(l, now, stale_after)).collect();
        found.sort_by_key(|f| f.address);
        tx.send_if_modified(|cur| replace_if_changed(cur, found));
    }
}

/// A live lease's apiserver, or `None` (stale, or no peer address).
pub fn lease_member(l: &Lease, now: k8s_openapi::jiff::Timestamp, stale_after: Duration) -> Option<Found> {
    let address: SocketAddr = l.metadata.annotations.as_ref()?.get(PEER_ADDRESS_ANNOTATION)?.parse().ok()?;
    let spec = l.spec.as_ref()?;
    let renewed = spec.renew_time.as_ref()?.0;
    let age_ms = now.as_millisecond() - renewed.as_millisecond();
    if age_ms > i64::try_from(stale_after.as_millis()).unwrap_or(i64::MAX) {
        return None;
    }
    Some(Found { address, name: l.metadata.name.clone(), incarnation: spec.holder_identity.clone() })
}

fn replace_if_changed(cur: &mut Vec<Found>, next: Vec<Found>) -> bool {
    let changed = *cur != next;
    if changed {
        *cur = next;
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::api::core::v1::{EndpointAddress, EndpointPort, EndpointSubset};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    use k8s_openapi::jiff::{SignedDuration, Timestamp};

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
    fn leases_live_by_renew_time() {
        let now = Timestamp::now();
        let lease = |renewed_ago: i64, address: Option<&str>| Lease {
            metadata: ObjectMeta {
                name: Some("apiserver-abc".into()),
                annotations: address.map(|a| [(PEER_ADDRESS_ANNOTATION.to_string(), a.to_string())].into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some("apiserver-abc_1".into()),
                lease_duration_seconds: Some(3600),
                renew_time: Some(MicroTime(now - SignedDuration::from_secs(renewed_ago))),
                ..Default::default()
            }),
        };
        let stale = Duration::from_secs(30);
        let live = lease_member(&lease(10, Some("10.0.0.1:6443")), now, stale).unwrap();
        assert_eq!((live.address.to_string(), live.name.as_deref(), live.incarnation.as_deref()), ("10.0.0.1:6443".into(), Some("apiserver-abc"), Some("apiserver-abc_1")));
        assert_eq!(lease_member(&lease(31, Some("10.0.0.1:6443")), now, stale), None, "not renewed for 31 s: gone, though 3600 s long");
        assert_eq!(lease_member(&lease(1, None), now, stale), None, "no peer address: not usable");
    }
}
