//! What a real apiserver of the real tier runs ([`Spec`]: name, build,
//! flags, kube's own Mixed Version Proxy) and the skew most real tests
//! start from ([`three_releases`]). The processes are `super::real`'s.

use super::release::Release;

/// What one real apiserver runs: its name, build and extra flags.
#[derive(Clone, Debug)]
pub struct Spec {
    pub name: String,
    pub release: Release,
    pub args: Vec<String>,
    pub kube_mvp: KubeMvp,
}

/// kube's own Mixed Version Proxy and peer-aggregated discovery on a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeMvp {
    /// No peer flags: no MVP filter, `/apis` is the server's own.
    Off,
    /// As each release has it by default: off before 1.36 (alpha — and
    /// 1.35 refuses the peer flags while its gate is off), from 1.36 (beta,
    /// on by default) the peer flags (`--peer-ca-file`, the proxy client
    /// certificate, the peer address). What a cluster gets by upgrading
    /// alone.
    AsReleased,
    /// The peer flags and the gate asked for, whatever the release.
    On,
}

impl KubeMvp {
    /// Whether a server of `release` gets the peer flags.
    pub fn peer_flags(self, release: Release) -> bool {
        match (self, release) {
            (KubeMvp::Off, _) | (KubeMvp::AsReleased, Release::V1_20) => false,
            (KubeMvp::AsReleased, Release::Modules(minor, _)) => minor >= 36,
            (KubeMvp::On, _) => true,
        }
    }
}

impl Spec {
    pub fn new(name: &str, release: Release, args: &[&str]) -> Spec {
        Spec { name: name.into(), release, args: args.iter().map(|s| s.to_string()).collect(), kube_mvp: KubeMvp::Off }
    }

    /// The same server with kube's own Mixed Version Proxy on.
    pub fn with_kube_mvp(self) -> Spec {
        self.with(KubeMvp::On)
    }

    pub fn with(mut self, kube_mvp: KubeMvp) -> Spec {
        self.kube_mvp = kube_mvp;
        self
    }
}

/// Two servers of the newest release, kas-b alone serving
/// `coordination.k8s.io/v1beta1` (LeaseCandidates): the install tests' skew.
pub fn newest_pair() -> Vec<Spec> {
    let newest = Release::minor(37);
    vec![Spec::new("kas-a", newest, &[]), Spec::new("kas-b", newest, &["--runtime-config=coordination.k8s.io/v1beta1=true"])]
}

/// The skew: three releases, each serving resources the others lack — by
/// release (1.36+ serves `mutatingadmissionpolicies` in
/// `admissionregistration.k8s.io/v1`, a group-version every server serves)
/// and by `--runtime-config` (beta and alpha versions one server enables;
/// `coordination.k8s.io/v1beta1` gives kas-137 alone a namespaced resource,
/// LeaseCandidate).
pub fn three_releases() -> Vec<Spec> {
    vec![
        Spec::new("kas-134", Release::minor(34), &["--runtime-config=storage.k8s.io/v1alpha1=true"]),
        Spec::new("kas-135", Release::minor(37), &["--emulated-version=1.35", "--runtime-config=networking.k8s.io/v1beta1=true"]),
        Spec::new("kas-137", Release::minor(37), &["--runtime-config=certificates.k8s.io/v1beta1=true,storagemigration.k8s.io/v1beta1=true,coordination.k8s.io/v1beta1=true"]),
    ]
}
