//! Which group-versions a server without aggregated discovery is asked
//! about. Its unaggregated `/apis` list is not the truth: it comes from the
//! cluster-wide APIService objects, and each kube-apiserver (checked on
//! v1.20) deletes at start the automanaged APIServices of group-versions it
//! does not serve — so the last-started server decides what every server
//! lists. Only a server's own `/apis/{g}/{v}` (200 or 404) tells what it
//! serves. So every such server is asked about every group-version any
//! server ever listed, plus every built-in group-version of Kubernetes.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// Built-in group-versions of Kubernetes 1.16 to 1.37 (named groups; the
/// core `v1` is always read).
pub const BUILT_IN: &[(&str, &str)] = &[
    ("admissionregistration.k8s.io", "v1"),
    ("admissionregistration.k8s.io", "v1alpha1"),
    ("admissionregistration.k8s.io", "v1beta1"),
    ("apiextensions.k8s.io", "v1"),
    ("apiextensions.k8s.io", "v1beta1"),
    ("apiregistration.k8s.io", "v1"),
    ("apiregistration.k8s.io", "v1beta1"),
    ("apps", "v1"),
    ("apps", "v1beta1"),
    ("apps", "v1beta2"),
    ("authentication.k8s.io", "v1"),
    ("authentication.k8s.io", "v1alpha1"),
    ("authentication.k8s.io", "v1beta1"),
    ("authorization.k8s.io", "v1"),
    ("authorization.k8s.io", "v1beta1"),
    ("autoscaling", "v1"),
    ("autoscaling", "v2"),
    ("autoscaling", "v2beta1"),
    ("autoscaling", "v2beta2"),
    ("batch", "v1"),
    ("batch", "v1beta1"),
    ("batch", "v2alpha1"),
    ("certificates.k8s.io", "v1"),
    ("certificates.k8s.io", "v1alpha1"),
    ("certificates.k8s.io", "v1beta1"),
    ("coordination.k8s.io", "v1"),
    ("coordination.k8s.io", "v1alpha2"),
    ("coordination.k8s.io", "v1beta1"),
    ("discovery.k8s.io", "v1"),
    ("discovery.k8s.io", "v1alpha1"),
    ("discovery.k8s.io", "v1beta1"),
    ("events.k8s.io", "v1"),
    ("events.k8s.io", "v1beta1"),
    ("extensions", "v1beta1"),
    ("flowcontrol.apiserver.k8s.io", "v1"),
    ("flowcontrol.apiserver.k8s.io", "v1alpha1"),
    ("flowcontrol.apiserver.k8s.io", "v1beta1"),
    ("flowcontrol.apiserver.k8s.io", "v1beta2"),
    ("flowcontrol.apiserver.k8s.io", "v1beta3"),
    ("internal.apiserver.k8s.io", "v1alpha1"),
    ("lifecycle.k8s.io", "v1alpha1"),
    ("networking.k8s.io", "v1"),
    ("networking.k8s.io", "v1alpha1"),
    ("networking.k8s.io", "v1beta1"),
    ("node.k8s.io", "v1"),
    ("node.k8s.io", "v1alpha1"),
    ("node.k8s.io", "v1beta1"),
    ("policy", "v1"),
    ("policy", "v1beta1"),
    ("rbac.authorization.k8s.io", "v1"),
    ("rbac.authorization.k8s.io", "v1alpha1"),
    ("rbac.authorization.k8s.io", "v1beta1"),
    ("resource.k8s.io", "v1"),
    ("resource.k8s.io", "v1alpha1"),
    ("resource.k8s.io", "v1alpha2"),
    ("resource.k8s.io", "v1alpha3"),
    ("resource.k8s.io", "v1beta1"),
    ("resource.k8s.io", "v1beta2"),
    ("scheduling.k8s.io", "v1"),
    ("scheduling.k8s.io", "v1alpha1"),
    ("scheduling.k8s.io", "v1alpha3"),
    ("scheduling.k8s.io", "v1beta1"),
    ("settings.k8s.io", "v1alpha1"),
    ("storage.k8s.io", "v1"),
    ("storage.k8s.io", "v1alpha1"),
    ("storage.k8s.io", "v1beta1"),
    ("storagemigration.k8s.io", "v1"),
    ("storagemigration.k8s.io", "v1alpha1"),
    ("storagemigration.k8s.io", "v1beta1"),
];

/// Every named group-version any apiserver ever listed, plus [`BUILT_IN`];
/// shared by all discoverers. Only grows: a group-version nobody lists any
/// more is still asked about (a 404 costs one small request).
#[derive(Clone)]
pub struct KnownGroupVersions(Arc<Mutex<BTreeSet<(String, String)>>>);

impl Default for KnownGroupVersions {
    fn default() -> Self {
        KnownGroupVersions(Arc::new(Mutex::new(BUILT_IN.iter().map(|(g, v)| (g.to_string(), v.to_string())).collect())))
    }
}

impl KnownGroupVersions {
    pub fn record<'a>(&self, gvs: impl IntoIterator<Item = (&'a str, &'a str)>) {
        let mut set = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for (g, v) in gvs {
            if !g.is_empty() && !set.contains(&(g.to_string(), v.to_string())) {
                set.insert((g.to_string(), v.to_string()));
            }
        }
    }

    /// How many there are: it only grows, so a changed count means new ones.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn snapshot(&self) -> Vec<(String, String)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }
}
