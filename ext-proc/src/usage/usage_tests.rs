use super::*;

fn use_of(api: &str, who: Who, ua: &str, at: u64) -> Use {
    Use { api: api.into(), who, user_agent: ua.into(), source: "10.0.0.9".into(), answered_by: Some("10.0.0.1:6443".into()), at: SystemTime::UNIX_EPOCH + Duration::from_secs(at), token: None }
}

#[test]
fn counts_per_api_and_client() {
    let u = Usage::default();
    let alice = Who::Certificate { user: "alice".into(), groups: vec!["dev".into()] };
    let sa = Who::TokenClaim { subject: "system:serviceaccount:ns:sa".into() };
    for t in 0..3 {
        u.record(use_of("apps/v1/deployments", alice.clone(), "kubectl/v1.37", 100 + t));
    }
    u.record(use_of("apps/v1/deployments", sa.clone(), "controller/v1", 150));
    u.record(use_of("apps/v1/deployments", alice.clone(), "k9s", 160));
    let got = u.of("apps/v1/deployments", SystemTime::UNIX_EPOCH + Duration::from_secs(200), Duration::from_secs(3600)).unwrap();
    let rows: Vec<(String, &str, u64)> = got.clients.iter().map(|c| (c.who.to_string(), c.user_agent.as_str(), c.count)).collect();
    assert_eq!(rows, [("alice (groups dev)".to_string(), "kubectl/v1.37", 3), ("alice (groups dev)".into(), "k9s", 1), ("system:serviceaccount:ns:sa (token claim, unverified)".into(), "controller/v1", 1)]);
    assert_eq!(got.clients[0].first_seen, SystemTime::UNIX_EPOCH + Duration::from_secs(100));
    assert_eq!(got.clients[0].answered_by, ["10.0.0.1:6443"]);
    // Outside the window: not shown.
    let later = u.of("apps/v1/deployments", SystemTime::UNIX_EPOCH + Duration::from_secs(10_000), Duration::from_secs(60));
    assert_eq!(later, None);
    assert_eq!(u.of("batch/v1/jobs", SystemTime::now(), Duration::from_secs(60)), None);
}

/// A flood of distinct clients and APIs holds at most the bound.
#[test]
fn a_flood_of_distinct_clients_stays_bounded() {
    let u = Usage::default();
    let regular = Who::Certificate { user: "kubelet".into(), groups: vec![] };
    for i in 0..100 {
        u.record(use_of("apps/v1/deployments", regular.clone(), "kubelet", i));
    }
    for i in 0..10_000u64 {
        u.record(use_of("apps/v1/deployments", Who::TokenClaim { subject: format!("flood-{i}") }, &"x".repeat(10_000), 1_000 + i));
        u.record(use_of(&format!("g{i}/v1/r"), Who::Unidentified, "", 1_000 + i));
    }
    let got = u.of("apps/v1/deployments", SystemTime::UNIX_EPOCH + Duration::from_secs(20_000), Duration::from_secs(1 << 30)).unwrap();
    assert_eq!(got.clients.len(), MAX_CLIENTS);
    assert_eq!((got.clients[0].who.to_string(), got.clients[0].count), ("kubelet".to_string(), 100), "the heavy user stays");
    assert_eq!(got.others + got.clients.iter().map(|c| c.count).sum::<u64>(), 10_100, "every request counted somewhere");
    assert!(got.clients.iter().all(|c| c.user_agent.len() <= MAX_TEXT));
    assert!(u.entries() <= MAX_APIS * MAX_CLIENTS);
    assert_eq!(u.dropped(), 10_000 - (MAX_APIS as u64 - 1));
}

/// Full counts make room for a new API only by one idle for a week: a
/// burst cannot push out what is in use, and what nobody asks for ages out
/// (restored counts too).
#[test]
fn an_idle_api_makes_room_a_used_one_does_not() {
    let u = Usage::default();
    for i in 0..MAX_APIS {
        u.record(use_of(&format!("g{i}/v1/r"), Who::Unidentified, "ua", 1_000));
    }
    u.record(use_of("g0/v1/r", Who::Unidentified, "ua", 1_000 + IDLE_AFTER.as_secs()));
    assert!(u.record(use_of("late/v1/r", Who::Unidentified, "ua", 1_000 + IDLE_AFTER.as_secs() - 1)).is_none(), "nothing idle long enough yet");
    assert_eq!(u.dropped(), 1);
    assert_eq!(u.record(use_of("new/v1/r", Who::Unidentified, "ua", 1_000 + IDLE_AFTER.as_secs())).as_deref(), Some("new/v1/r"));
    assert_eq!(u.apis(), MAX_APIS);
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 + IDLE_AFTER.as_secs());
    assert!(u.of("g0/v1/r", at, IDLE_AFTER).is_some(), "the one in use stays");
    assert_eq!(u.dropped(), 1);
}
