//! Seeds + what the cluster says → one membership, keyed by address.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use super::kube::Found;
use super::{Desired, MemberSet};
use crate::apiservers::{ApiserverSpec, MAX_APISERVERS};

/// Every seed, and every apiserver any source names. Seeds keep their
/// names; others are named by their lease, else by their address
/// (`10.0.0.1-6443`). `scheme` is how discovered apiservers are spoken to
/// (`https` with `--peer-ca-file`). A lease's holder identity is the
/// member's incarnation.
pub fn combine(seeds: &[ApiserverSpec], sources: &[&[Found]], scheme: &str) -> MemberSet {
    let mut by_address: BTreeMap<String, Desired> = BTreeMap::new();
    let key = |host: &str, port: u16| format!("{}:{port}", host.trim_start_matches('[').trim_end_matches(']'));
    for s in seeds {
        by_address.insert(key(s.host(), s.port()), Desired { spec: s.clone(), incarnation: None });
    }
    for found in sources.iter().flat_map(|s| s.iter()) {
        let k = key(&found.address.ip().to_string(), found.address.port());
        match by_address.get_mut(&k) {
            Some(d) => {
                if found.incarnation.is_some() {
                    d.incarnation = found.incarnation.clone();
                }
            }
            None => {
                let Some(spec) = spec_for(found, scheme) else { continue };
                // A lease name another member already uses: named by address.
                let spec = if by_address.values().any(|d| d.spec.name == spec.name) {
                    match spec_for(&Found { name: None, ..found.clone() }, scheme) {
                        Some(s) => s,
                        None => continue,
                    }
                } else {
                    spec
                };
                by_address.insert(k, Desired { spec, incarnation: found.incarnation.clone() });
            }
        }
    }
    // At most `MAX_APISERVERS` (a set is a `u64`): the seeds are never the
    // ones left out (the flags name at most that many), then by name, so
    // the same objects always give the same members.
    let (mut v, mut found): (Vec<Desired>, Vec<Desired>) = by_address.into_values().partition(|d| seeds.contains(&d.spec));
    found.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
    let room = MAX_APISERVERS.saturating_sub(v.len());
    if found.len() > room {
        let left_out: Vec<&str> = found[room..].iter().map(|d| d.spec.name.as_str()).collect();
        tracing::error!(members = v.len() + found.len(), limit = MAX_APISERVERS, ?left_out, "more apiservers than mvp-envoy supports; these are not members");
        found.truncate(room);
    }
    v.extend(found);
    v.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
    Arc::new(v)
}

fn spec_for(f: &Found, scheme: &str) -> Option<ApiserverSpec> {
    let url = match f.address {
        SocketAddr::V4(a) => format!("{scheme}://{a}"),
        SocketAddr::V6(a) => format!("{scheme}://[{}]:{}", a.ip(), a.port()),
    };
    let by_address = || f.address.ip().to_string().replace(':', "-") + "-" + &f.address.port().to_string();
    let name = f.name.clone().unwrap_or_else(by_address);
    format!("{name}={url}").parse().ok().or_else(|| format!("{}={url}", by_address()).parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(a: &str, name: Option<&str>, inc: Option<&str>) -> Found {
        Found { address: a.parse().unwrap(), name: name.map(str::to_string), incarnation: inc.map(str::to_string) }
    }

    #[test]
    fn one_member_per_address_named_by_seed_then_lease_then_address() {
        let seeds = ["kas-a=http://10.0.0.1:6443".parse().unwrap()];
        let endpoints = [found("10.0.0.1:6443", None, None), found("10.0.0.2:6443", None, None), found("10.0.0.3:6443", None, None)];
        let leases = [found("10.0.0.1:6443", Some("apiserver-x"), Some("h1")), found("10.0.0.2:6443", Some("apiserver-y"), Some("h2")), found("[fd00::1]:6443", Some("Bad_Name"), None)];
        let m = combine(&seeds, &[&leases, &endpoints], "http");
        let got: Vec<(String, String, Option<String>)> = m.iter().map(|d| (d.spec.name.clone(), d.spec.url.to_string(), d.incarnation.clone())).collect();
        assert_eq!(
            got,
            [
                ("10.0.0.3-6443".into(), "http://10.0.0.3:6443/".into(), None),
                ("apiserver-y".into(), "http://10.0.0.2:6443/".into(), Some("h2".into())),
                ("fd00--1-6443".into(), "http://[fd00::1]:6443/".into(), None),
                ("kas-a".into(), "http://10.0.0.1:6443/".into(), Some("h1".into())),
            ]
        );
    }

    #[test]
    fn seeds_are_never_the_members_left_out() {
        // The seed sorts last by name and by address; 70 others are found.
        let seeds = ["zz-seed=http://10.9.9.9:6443".parse().unwrap()];
        let others: Vec<Found> = (0..70).map(|i| found(&format!("10.0.1.{i}:6443"), Some(&format!("apiserver-{i:02}")), None)).collect();
        let m = combine(&seeds, &[&others], "http");
        assert_eq!(m.len(), MAX_APISERVERS);
        assert!(m.iter().any(|d| d.spec.name == "zz-seed"), "the seed was dropped");
        let names: Vec<&str> = m.iter().map(|d| d.spec.name.as_str()).collect();
        assert!(names.is_sorted(), "sorted by name: {names:?}");
        assert_eq!(names[MAX_APISERVERS - 2], "apiserver-62", "the first by name are kept: {names:?}");
    }
}
