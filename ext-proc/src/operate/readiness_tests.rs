//! Tests of `readiness.rs`.

use super::*;

fn caps(resources: &[(&str, &str, &str)]) -> Capabilities {
    let mut c = Capabilities::default();
    for (g, v, r) in resources {
        c.add_resource_name(g, v, r);
    }
    c
}

fn member<'a>(name: &'a str, release: &str, apis: Option<&'a Capabilities>) -> MemberApis<'a> {
    MemberApis { name, release: Release::parse(release), apis }
}

fn apis(r: &[Api]) -> Vec<&str> {
    r.iter().map(|a| a.api.as_str()).collect()
}

#[test]
fn releases_parse_as_kube_writes_them() {
    for (s, want) in [("1.37", Some((1, 37))), ("v1.37.2", Some((1, 37))), ("v1.30.0-fake+v130", Some((1, 30))), ("v1.37.0-rc.1+abc", Some((1, 37))), ("v1.37.2 (emulating 1.35)", Some((1, 35))), ("1", None), ("", None), ("x.y", None)] {
        assert_eq!(Release::parse(s).map(|r| (r.major, r.minor)), want, "{s}");
    }
}

/// v1.36 serves flowschemas v1beta3 and deployments; v1.37 serves
/// deployments (and its scale) and evictionrequests.
fn fleet() -> (Capabilities, Capabilities) {
    let old = caps(&[("apps", "v1", "deployments"), ("apps", "v1", "deployments/status"), ("flowcontrol.apiserver.k8s.io", "v1beta3", "flowschemas"), ("flowcontrol.apiserver.k8s.io", "v1beta3", "flowschemas/status"), ("", "v1", "pods")]);
    let new = caps(&[("apps", "v1", "deployments"), ("apps", "v1", "deployments/status"), ("apps", "v1", "deployments/scale"), ("lifecycle.k8s.io", "v1alpha1", "evictionrequests"), ("", "v1", "pods")]);
    (old, new)
}

#[test]
fn finishing_the_upgrade_loses_what_only_older_releases_serve() {
    let (old, new) = fleet();
    let members = [member("a", "v1.36.3", Some(&old)), member("b", "v1.36.3", Some(&old)), member("c", "v1.37.2", Some(&new))];
    let r = report(&members, &Scenario::FinishUpgrade).unwrap();
    assert_eq!(r.scenario, "the upgrade to 1.37 finished");
    assert_eq!(r.leaving.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    // The resource, not also its subresource.
    assert_eq!(apis(&r.lost), ["flowcontrol.apiserver.k8s.io/v1beta3 flowschemas"]);
    assert_eq!(r.lost[0].served_by, ["a", "b"]);
    assert_eq!(r.lost[0].routed_by, "flowcontrol.apiserver.k8s.io/v1beta3/flowschemas", "the access log's words");
    assert_eq!(apis(r.lost_on_rollback.as_deref().unwrap()), ["apps/v1 deployments/scale", "lifecycle.k8s.io/v1alpha1 evictionrequests"]);
    assert_eq!(r.verdict, Verdict::Breaks);
    assert_eq!(r.verdict.exit_code(), 1);
    let text = render(&r);
    assert!(text.contains("  flowcontrol.apiserver.k8s.io/v1beta3 flowschemas  served by a, b\n"), "{text}");
    assert!(text.contains("verdict: would break: 1 API(s) served by no apiserver"), "{text}");
}

#[test]
fn removing_one_of_two_old_members_loses_nothing() {
    let (old, new) = fleet();
    let members = [member("a", "v1.36.3", Some(&old)), member("b", "v1.36.3", Some(&old)), member("c", "v1.37.2", Some(&new))];
    let r = report(&members, &Scenario::Remove(vec!["a".into()])).unwrap();
    assert_eq!((r.lost.len(), r.lost_on_rollback.is_none(), r.verdict), (0, true, Verdict::Ready));
    let r = report(&members, &Scenario::Remove(vec!["a".into(), "b".into()])).unwrap();
    assert_eq!(apis(&r.lost), ["flowcontrol.apiserver.k8s.io/v1beta3 flowschemas"]);
    // Removing the only new member: its own APIs go.
    let r = report(&members, &Scenario::Remove(vec!["c".into()])).unwrap();
    assert_eq!(apis(&r.lost), ["apps/v1 deployments/scale", "lifecycle.k8s.io/v1alpha1 evictionrequests"]);
    assert_eq!(
        report(&members, &Scenario::Remove(vec!["z".into()])),
        Err(ReadinessError::NoSuchMember { name: "z".into(), members: "a, b, c".into() })
    );
}

/// Two replicas' reports: each API's clients summed, the worse verdict.
#[test]
fn replicas_reports_merge() {
    use crate::usage::{Usage, Use, Who};
    let (old, new) = fleet();
    let members = [member("a", "v1.36.3", Some(&old)), member("c", "v1.37.2", Some(&new))];
    let at = std::time::SystemTime::now();
    let seen = |n: usize, who: &str| {
        let u = Usage::default();
        for _ in 0..n {
            u.record(Use { api: "flowcontrol.apiserver.k8s.io/v1beta3/flowschemas".into(), who: Who::TokenClaim { subject: who.into() }, user_agent: "ua".into(), source: "10.0.0.1".into(), answered_by: None, at, token: None });
        }
        report(&members, &Scenario::FinishUpgrade).unwrap().with_usage(&u, at, std::time::Duration::from_secs(60))
    };
    let merged = seen(2, "x").merge(seen(3, "x")).merge(seen(1, "y"));
    assert_eq!(merged.usage_dropped, 0);
    assert!(!render(&merged).contains("not counted"));
    let clients = &merged.lost[0].used_by.as_ref().unwrap().clients;
    assert_eq!(clients.iter().map(|c| (c.who.to_string(), c.count)).collect::<Vec<_>>(), [("x (token claim, unverified)".to_string(), 5), ("y (token claim, unverified)".into(), 1)]);
    assert_eq!((merged.clients_losing, merged.verdict), (Some(2), Verdict::Breaks));

    // Replicas that add each other's counts (`serve --replica`): asking
    // both counts each client once.
    let with = |n: usize, replicas: &[&str]| {
        let mut r = seen(n, "x");
        r.replicas = replicas.iter().map(|s| s.to_string()).collect();
        r
    };
    let count = |r: &Report| r.lost[0].used_by.as_ref().unwrap().clients[0].count;
    assert_eq!(count(&with(5, &["p", "q"]).merge(with(5, &["q", "p"]))), 5);
    assert_eq!(count(&with(2, &["p"]).merge(with(5, &["q", "p"]))), 5, "the one that added the other's");
    let both = with(2, &["p"]).merge(with(3, &["q"]));
    assert_eq!((count(&both), both.replicas.clone()), (5, vec!["p".to_string(), "q".to_string()]));
}

/// Requests the counts' bound left out are said in the report itself:
/// the clients listed can then be missing some.
#[test]
fn the_report_says_what_the_counts_left_out() {
    use crate::usage::{MAX_APIS, Usage, Use, Who};
    let (old, new) = fleet();
    let members = [member("a", "v1.36.3", Some(&old)), member("c", "v1.37.2", Some(&new))];
    let at = std::time::SystemTime::now();
    let u = Usage::default();
    for i in 0..MAX_APIS + 3 {
        u.record(Use { api: format!("g{i}/v1/r"), who: Who::Unidentified, user_agent: "ua".into(), source: "10.0.0.1".into(), answered_by: None, at, token: None });
    }
    let r = report(&members, &Scenario::FinishUpgrade).unwrap().with_usage(&u, at, std::time::Duration::from_secs(60));
    assert_eq!(r.usage_dropped, 3);
    assert_eq!(serde_json::to_value(&r).unwrap()["usageDropped"], 3);
    assert!(render(&r).contains("not counted: 3 request(s) for APIs past the counts' bound of 4096 APIs"), "{}", render(&r));
    assert_eq!(r.clone().merge(r).usage_dropped, 6, "replicas' drops add up");
}

/// Another replica's counts added: clients both saw summed, the earliest
/// start kept, held to the bounds.
#[test]
fn replicas_counts_add_up() {
    use crate::usage::{Usage, Use, Who};
    let at = std::time::SystemTime::now();
    let counts = |who: &str, n: usize| {
        let u = Usage::default();
        for _ in 0..n {
            u.record(Use { api: "v1/pods/log".into(), who: Who::Unidentified, user_agent: who.into(), source: "10.0.0.1".into(), answered_by: None, at, token: None });
        }
        u.snapshot()
    };
    let mut mine = counts("kubectl", 2);
    let mut theirs = counts("kubectl", 3);
    theirs.since = mine.since - std::time::Duration::from_secs(60);
    theirs.apis.extend(counts("k9s", 1).apis.into_values().map(|v| ("batch/v1/jobs".to_string(), v)));
    mine.absorb(theirs.clone());
    let all = Usage::restored(mine);
    let of = |api: &str| all.of(api, at, std::time::Duration::from_secs(60)).unwrap().clients.iter().map(|c| (c.user_agent.clone(), c.count)).collect::<Vec<_>>();
    assert_eq!(of("v1/pods/log"), [("kubectl".to_string(), 5)]);
    assert_eq!(of("batch/v1/jobs"), [("k9s".to_string(), 1)]);
    assert_eq!(all.since, theirs.since);
}

#[test]
fn a_release_nobody_runs_cannot_be_answered() {
    let (old, new) = fleet();
    let members = [member("a", "v1.36.3", Some(&old)), member("c", "v1.37.2", Some(&new))];
    assert_eq!(report(&members, &Scenario::Release(Release { major: 1, minor: 38 })), Err(ReadinessError::NoMemberRuns(Release { major: 1, minor: 38 })));
    // Rolling back to 1.36 instead: 1.37's additions go.
    let r = report(&members, &Scenario::Release(Release { major: 1, minor: 36 })).unwrap();
    assert_eq!(apis(&r.lost), ["apps/v1 deployments/scale", "lifecycle.k8s.io/v1alpha1 evictionrequests"]);
    assert_eq!(apis(r.lost_on_rollback.as_deref().unwrap()), ["flowcontrol.apiserver.k8s.io/v1beta3 flowschemas"]);
}

#[test]
fn an_unknown_api_set_is_never_ready() {
    let (old, _) = fleet();
    let members = [member("a", "v1.36.3", Some(&old)), member("b", "v1.36.3", None)];
    let r = report(&members, &Scenario::Remove(vec!["b".into()])).unwrap();
    assert_eq!((r.verdict, r.unknown.clone()), (Verdict::Unknown, vec!["b".to_string()]));
    assert_eq!(r.verdict.exit_code(), 2);
    assert!(render(&r).contains("cannot tell: b not read yet"));
    // Not in an upgrade: nobody leaves, nothing lost.
    let members = [member("a", "v1.36.3", Some(&old)), member("b", "v1.36.3", Some(&old))];
    let r = report(&members, &Scenario::FinishUpgrade).unwrap();
    assert_eq!((r.leaving.len(), r.lost.len(), r.lost_on_rollback.as_deref().map(<[Api]>::len), r.verdict), (0, 0, Some(0), Verdict::Ready));
    let r = report(&[member("a", "", Some(&old))], &Scenario::FinishUpgrade).unwrap();
    assert_eq!((r.leaving.len(), r.unknown.clone(), r.verdict), (0, vec!["a".to_string()], Verdict::Unknown));
    // A release not read yet: counted as leaving, and not `ready`.
    let members = [member("a", "v1.36.3", Some(&old)), member("b", "", Some(&old))];
    let r = report(&members, &Scenario::FinishUpgrade).unwrap();
    assert_eq!((r.leaving[0].name.as_str(), r.unknown.clone(), r.verdict), ("b", vec!["b".to_string()], Verdict::Unknown));
}
