//! The test harness: the real front door on loopback, from one description.
//!
//! - [`topology`]: the one description of a front door (apiservers, ports,
//!   flags) and the one readiness wait; tests, benchmark and demo use it.
//! - [`front_door`]: fake apiservers + mvp-ext-proc + Envoy for a test, set
//!   up by [`options`]; [`more_envoys`]: more Envoys on its mvp-ext-proc.
//! - [`fakes`]: what each fake apiserver serves and how it authenticates.
//! - [`process`]: child processes, free ports, bounded waits.
//! - [`tools`]: where the built binaries, Envoy, kubectl and Python are.
//! - [`real`]: real kube-apiservers on one etcd, with a kubeadm-like PKI.
//! - [`secure`]: the TLS topology (PKI, kube-authenticating fakes).
//! - [`served`]: what the fixtures' releases serve.
//! - [`tally`]: load under faults, every answer classified.
//! - [`container`]: a process with a container's memory limit.
//! - [`balancer`]: a TCP load balancer in front of the door (PROXY protocol or not).
//! - [`node`]: a real kubelet on containerd, registered to a real control plane.
//! - [`http1_apiservers`]: plaintext HTTP/1.1-only apiservers on Python's
//!   `http.server` (not the project's code).

pub mod balancer;
pub mod cluster_dns;
pub mod container;
pub mod crd_heavy;
pub mod fakes;
pub mod front_door;
pub mod http1_apiservers;
pub mod more_envoys;
pub mod node;
pub mod node_cleanup;
pub mod options;
pub mod process;
pub mod real;
pub mod real_workload;
pub mod real_spec;
pub mod release;
pub mod secure;
pub mod served;
pub mod tally;
pub mod test_net;
pub mod tools;
pub mod topology;
pub mod watches;

pub use fakes::{Fake, FakeSpec, FakeTls, THREE_RELEASES, served_by, start_fake, three_fakes};
pub use front_door::{FrontDoor, Options};
pub use secure::tls_client_config;
pub use process::{Proc, free_ports, wait_for};
pub use served::{ServedResource, served_resources};
pub use tools::{
    FilterBuild, decode_discovery_protobuf, envoy_bin, ext_proc_bin, fake_bin, fixtures_dir, kubectl_137, native_module_file, python, routing_floor_wasm, wasm_file,
    workspace_root,
};
pub use topology::{Ports, Topology, edit_http_filters, plain_round_robin, plain_round_robin_bypassing_kube_mvp, tcp_proxy};
