//! Which group-versions a server without aggregated discovery is asked
//! about. Its unaggregated `/apis` list is not the truth: it comes from the
//! cluster-wide APIService objects, and each kube-apiserver (checked on
//! v1.20) deletes at start the automanaged APIServices of group-versions it
//! does not serve — so the last-started server decides what every server
//! lists. Only a server's own `/apis/{g}/{v}` (200 or 404) tells what it
//! serves. So every such server is asked about every group-version some
//! server listed or served within the last hour, plus every built-in
//! group-version of Kubernetes.
//!
//! Why an hour and not forever: CRD groups come and go (an operator
//! installed, removed), and every old server asks about each known one on
//! every full probe — a set that only grew would make those probes grow
//! without bound. Why not at once: a group-version nobody lists may still be
//! served by an old server (the last-started one deleted its APIService);
//! each probe that finds it served records it again, so it stays.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a group-version nobody lists or serves is still asked about.
pub const FORGET_AFTER: Duration = Duration::from_secs(3600);

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

/// Every named group-version some apiserver listed or served within
/// [`FORGET_AFTER`], plus [`BUILT_IN`]; shared by all discoverers.
#[derive(Clone)]
pub struct KnownGroupVersions(Arc<Mutex<Known>>);

#[derive(Default)]
struct Known {
    /// When each was last listed or served (the built-in ones are never
    /// forgotten and not kept here).
    seen: BTreeMap<(String, String), Instant>,
    /// Changes when a group-version becomes known (not when one is
    /// forgotten: fewer to ask about needs no new probe).
    generation: u64,
}

fn built_in(g: &str, v: &str) -> bool {
    BUILT_IN.binary_search(&(g, v)).is_ok()
}

impl Default for KnownGroupVersions {
    fn default() -> Self {
        KnownGroupVersions(Arc::new(Mutex::new(Known::default())))
    }
}

impl KnownGroupVersions {
    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Group-versions a server listed or serves, now.
    pub fn record<'a>(&self, gvs: impl IntoIterator<Item = (&'a str, &'a str)>) {
        self.record_at(gvs, Instant::now());
    }

    fn record_at<'a>(&self, gvs: impl IntoIterator<Item = (&'a str, &'a str)>, now: Instant) {
        let mut known = self.known();
        for (g, v) in gvs {
            if g.is_empty() || built_in(g, v) {
                continue;
            }
            match known.seen.get_mut(&(g.to_string(), v.to_string())) {
                Some(at) => *at = now,
                None => {
                    known.seen.insert((g.to_string(), v.to_string()), now);
                    known.generation += 1;
                }
            }
        }
    }

    /// Changes whenever a group-version becomes known.
    pub fn generation(&self) -> u64 {
        self.known().generation
    }

    /// What to ask an old server about: the built-in ones and those seen
    /// within [`FORGET_AFTER`] (older ones are forgotten here).
    pub fn snapshot(&self) -> Vec<(String, String)> {
        self.snapshot_at(Instant::now())
    }

    fn snapshot_at(&self, now: Instant) -> Vec<(String, String)> {
        let mut known = self.known();
        known.seen.retain(|_, at| now.saturating_duration_since(*at) < FORGET_AFTER);
        let mut all: Vec<(String, String)> = BUILT_IN.iter().map(|(g, v)| (g.to_string(), v.to_string())).collect();
        all.extend(known.seen.keys().cloned());
        all.sort();
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_is_sorted_for_the_search() {
        assert!(BUILT_IN.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn listed_or_served_group_versions_are_asked_about_for_an_hour_after_the_last_sight() {
        let known = KnownGroupVersions::default();
        let t0 = Instant::now();
        let crd = ("stable.example.com".to_string(), "v1".to_string());
        let has = |at: Instant| known.snapshot_at(at).contains(&crd);
        assert!(!has(t0));
        let g0 = known.generation();
        known.record_at([("stable.example.com", "v1"), ("apps", "v1"), ("", "v1")], t0);
        assert_eq!(known.generation(), g0 + 1, "only the new one, not the built-in or the core group");
        known.record_at([("stable.example.com", "v1")], t0 + Duration::from_secs(60));
        assert_eq!(known.generation(), g0 + 1, "seen again is not new");
        assert!(has(t0 + FORGET_AFTER));
        assert!(!has(t0 + Duration::from_secs(60) + FORGET_AFTER), "forgotten an hour after it was last listed or served");
        assert!(known.snapshot_at(t0 + FORGET_AFTER * 10).contains(&("apps".to_string(), "v1".to_string())), "built-in ones stay");
        known.record_at([("stable.example.com", "v1")], t0 + FORGET_AFTER * 11);
        assert_eq!(known.generation(), g0 + 2, "known again: new");
    }
}
