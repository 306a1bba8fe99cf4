//! Who the apiservers are, from every source combined into the one set the
//! sync loop follows (`watch`): the static seed (`--apiserver NAME=URL`)
//! and, read from the cluster itself, the `default/kubernetes` endpoints
//! and the apiserver identity Leases ([`kube`]).
//!
//! Members are keyed by address: the same apiserver named by several
//! sources is one member, named by its seed if it has one, else by its
//! lease, else by its address.

pub mod combine;
pub mod kube;
pub mod liveness;

use std::sync::Arc;

use crate::apiservers::ApiserverSpec;

/// One apiserver the control plane has now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub spec: ApiserverSpec,
    /// What identifies this run of it (a lease's holder identity): a change
    /// means it restarted, and it is read again before it is sent requests.
    pub incarnation: Option<String>,
}

/// The whole membership, sorted by name.
pub type MemberSet = Arc<Vec<Desired>>;

/// The static seed alone, as every release before live membership had it.
pub fn from_seed(seed: &[ApiserverSpec]) -> MemberSet {
    let mut v: Vec<Desired> = seed.iter().map(|s| Desired { spec: s.clone(), incarnation: None }).collect();
    v.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
    Arc::new(v)
}
