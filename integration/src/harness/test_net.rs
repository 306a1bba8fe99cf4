//! A test host network for real apiservers that must not be on loopback:
//! kube rejects loopback addresses in the `default/kubernetes` Endpoints
//! (`may not be in the loopback range`), so apiservers that register there
//! run in a network namespace with their own addresses, reached from this
//! host over a veth pair:
//!
//! ```text
//!   host: mvpN-h 10.200.N.1/24  <── veth ──>  netns mvp-netN: mvpN-n 10.200.N.21, .22, …
//!         etcd, Envoy, mvp-ext-proc, the test          kube-apiservers (ip netns exec)
//! ```
//!
//! One test network at a time on a host (a lock file), so two test processes
//! never fight over the names or the subnet. Needs root (CAP_NET_ADMIN), as
//! the polyglot machines give.

use std::fs::File;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// The subnet's third octet.
const N: u8 = 77;

pub struct TestNet {
    pub netns: String,
    host_link: String,
    inner_link: String,
    _lock: File,
}

impl TestNet {
    /// Creates the namespace and the veth pair, with `addresses` host
    /// addresses inside; waits for the lock if another test holds one.
    pub fn create(addresses: usize) -> Result<TestNet> {
        let lock = super::process::machine_lock("test-net")?;
        let (netns, host_link, inner) = (format!("mvp-net{N}"), format!("mvp{N}-h"), format!("mvp{N}-n"));
        // Left over from a killed run.
        remove(&netns, &host_link);
        let net = TestNet { netns: netns.clone(), host_link: host_link.clone(), inner_link: inner.clone(), _lock: lock };
        let host = TestNet::host_address();
        let mut script = vec![
            format!("ip netns add {netns}"),
            format!("ip link add {host_link} type veth peer name {inner}"),
            format!("ip link set {inner} netns {netns}"),
            format!("ip addr add {host}/24 dev {host_link}"),
            format!("ip link set {host_link} up"),
            format!("ip -n {netns} link set lo up"),
            format!("ip -n {netns} link set {inner} up"),
        ];
        for i in 0..addresses {
            script.push(format!("ip -n {netns} addr add {}/24 dev {inner}", TestNet::address(i)));
        }
        for line in script {
            let args: Vec<&str> = line.split(' ').collect();
            let status = Command::new(args[0]).args(&args[1..]).status().with_context(|| line.clone())?;
            if !status.success() {
                bail!("{line}: {status}");
            }
        }
        Ok(net)
    }

    /// This host's address on the test network (etcd listens there).
    pub fn host_address() -> String {
        format!("10.200.{N}.1")
    }

    /// Blackholes the namespace: its end of the link goes down, so packets
    /// between it and the host are dropped silently — no reset, no ICMP —
    /// as when a machine loses power or a network partitions.
    pub fn cut(&self) -> Result<()> {
        self.set_inner_link("down")
    }

    /// Undoes [`TestNet::cut`].
    pub fn mend(&self) -> Result<()> {
        self.set_inner_link("up")
    }

    fn set_inner_link(&self, state: &str) -> Result<()> {
        let status = Command::new("ip").args(["-n", &self.netns, "link", "set", &self.inner_link, state]).status()?;
        if !status.success() {
            bail!("ip -n {} link set {} {state}: {status}", self.netns, self.inner_link);
        }
        Ok(())
    }

    /// The `i`-th apiserver's address.
    pub fn address(i: usize) -> String {
        format!("10.200.{N}.{}", 21 + i)
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        remove(&self.netns, &self.host_link);
    }
}

/// Deletes the namespace and the link, if they exist.
fn remove(netns: &str, host_link: &str) {
    for args in [["netns", "del", netns], ["link", "del", host_link]] {
        let _ = Command::new("ip").args(args).stdout(Stdio::null()).stderr(Stdio::null()).status();
    }
}
