//! Before members leave: which APIs would then be served by no apiserver —
//! `GET /readiness` and `mvp-ext-proc readiness`, from each member's own
//! discovery (the API sets the table is built from).
//!
//! Three questions, one computation (the members that leave, the members
//! that stay, the APIs only leaving members serve):
//! - `remove=a,b`: members `a` and `b` are stopped (a node drained, a
//!   server replaced);
//! - `release=1.37`: every member runs 1.37 — those on 1.37 stay, the rest
//!   leave (what 1.37 serves is what the members already on it serve);
//! - neither: the upgrade the fleet is in finishes — the newest release
//!   stays, the older ones leave.
//!
//! For the last two, the reverse too: what only the staying release serves,
//! which a rollback would take away from whoever already uses it.
//!
//! A member whose API set is unknown (never read: restarting, not reachable
//! yet) makes the answer uncertain, and says so: `unknown`, never `ready`.
//! Departed members are gone already and are not counted.

use std::collections::BTreeMap;

use mvp_routing::requestinfo::RouteKey;
use serde::{Deserialize, Serialize};

use crate::discover::capabilities::Capabilities;
use crate::sync::MemberStates;
use crate::sync::state::ServerState;

pub use super::readiness_text::render;
pub use crate::discover::release::Release;

/// What is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scenario {
    /// These members leave.
    Remove(Vec<String>),
    /// Every member runs this release.
    Release(Release),
    /// The upgrade in progress finishes: only the newest release remains.
    FinishUpgrade,
}

/// One member as the report sees it.
#[derive(Debug, Clone)]
pub struct MemberApis<'a> {
    pub name: &'a str,
    pub release: Option<Release>,
    /// `None`: its API set was never read.
    pub apis: Option<&'a Capabilities>,
}

impl<'a> MemberApis<'a> {
    /// Every member that has not departed.
    pub fn of(states: &'a MemberStates) -> Vec<MemberApis<'a>> {
        states.members.iter().filter(|m| m.departed.is_none()).map(MemberApis::from_state).collect()
    }

    pub fn from_state(m: &'a ServerState) -> MemberApis<'a> {
        MemberApis { name: &m.spec.name, release: m.version.as_deref().and_then(Release::parse), apis: m.view.as_deref().map(|v| &v.capabilities) }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The question, in words.
    pub scenario: String,
    pub leaving: Vec<Named>,
    pub staying: Vec<Named>,
    /// Members whose API set is unknown (never read), or whose release is
    /// when releases decide who leaves.
    pub unknown: Vec<String>,
    /// Served by a leaving member and by no staying one.
    pub lost: Vec<Api>,
    /// For a release or a finished upgrade: served only by the staying
    /// release — gone again if the upgrade is rolled back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost_on_rollback: Option<Vec<Api>>,
    pub verdict: Verdict,
    /// Clients that used a lost API within the window (see
    /// [`Report::with_usage`]); `None` before usage is added.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub clients_losing: Option<usize>,
    /// The window usage is counted in, and since when it is counted.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub usage_window: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub usage_since: Option<String>,
    /// Requests for APIs past the counts' bound (`usage::MAX_APIS`), not
    /// counted: their clients can be missing above.
    #[serde(skip_serializing_if = "is_zero", default)]
    pub usage_dropped: u64,
    /// The mvp-ext-proc replicas whose counts these are (`usage::replicas`).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub replicas: Vec<String>,
    /// Replicas asked that did not answer, with why: the clients of the
    /// Envoys that log to them are missing.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub replicas_unanswered: Vec<String>,
}

impl Report {
    /// Adds who used each lost API (and each a rollback takes away) within
    /// `window` of `now`.
    pub fn with_usage(mut self, usage: &crate::usage::Usage, now: std::time::SystemTime, window: std::time::Duration) -> Report {
        let mut losing = std::collections::BTreeSet::new();
        for a in &mut self.lost {
            a.used_by = usage.of(&a.routed_by, now, window);
            for c in a.used_by.iter().flat_map(|u| &u.clients).filter(|c| c.who.can_break()) {
                losing.insert((c.who.clone(), c.user_agent.clone()));
            }
        }
        for a in self.lost_on_rollback.iter_mut().flatten() {
            a.used_by = usage.of(&a.routed_by, now, window);
        }
        self.clients_losing = Some(losing.len());
        self.usage_window = Some(humantime::format_duration(window).to_string());
        self.usage_since = Some(humantime::format_rfc3339_seconds(usage.since).to_string());
        self.usage_dropped = usage.dropped();
        self
    }
}

impl Report {
    /// Two replicas' reports of one question as one: the APIs of either
    /// (their views of the members can differ for a moment), each API's
    /// clients counted by both summed, the worse verdict.
    pub fn merge(mut self, other: Report) -> Report {
        // A replica that already added the other's counts (`serve
        // --replica`): counting them again would count each client twice.
        let covers = |a: &Report, b: &Report| !b.replicas.is_empty() && b.replicas.iter().all(|r| a.replicas.contains(r));
        if covers(&self, &other) {
            return self;
        }
        if covers(&other, &self) {
            return other;
        }
        for r in &other.replicas {
            if !self.replicas.contains(r) {
                self.replicas.push(r.clone());
            }
        }
        self.replicas_unanswered.extend(other.replicas_unanswered.iter().cloned());
        fn merge_apis(mine: &mut Vec<Api>, theirs: Vec<Api>) {
            for a in theirs {
                match mine.iter_mut().find(|m| m.routed_by == a.routed_by) {
                    Some(m) => m.used_by = crate::usage::ApiUse::merged(m.used_by.take(), a.used_by),
                    None => mine.push(a),
                }
            }
            mine.sort_by(|a, b| a.routed_by.cmp(&b.routed_by));
        }
        merge_apis(&mut self.lost, other.lost);
        match (&mut self.lost_on_rollback, other.lost_on_rollback) {
            (Some(mine), Some(theirs)) => merge_apis(mine, theirs),
            (mine @ None, theirs) => *mine = theirs,
            (Some(_), None) => {}
        }
        for u in other.unknown {
            if !self.unknown.contains(&u) {
                self.unknown.push(u);
            }
        }
        let rank = |v: Verdict| match v {
            Verdict::Ready => 0,
            Verdict::Unknown => 1,
            Verdict::Breaks => 2,
        };
        if rank(other.verdict) > rank(self.verdict) {
            self.verdict = other.verdict;
        }
        if self.clients_losing.is_some() || other.clients_losing.is_some() {
            let clients: std::collections::BTreeSet<_> =
                self.lost.iter().flat_map(|a| a.used_by.iter().flat_map(|u| &u.clients)).filter(|c| c.who.can_break()).map(|c| (c.who.clone(), c.user_agent.clone())).collect();
            self.clients_losing = Some(clients.len());
        }
        self.usage_dropped += other.usage_dropped;
        self.usage_since = match (self.usage_since.take(), other.usage_since) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Named {
    pub name: String,
    pub release: Option<String>,
}

/// A resource (or one of its subresources, when the resource itself stays).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Api {
    /// `apps/v1 deployments`, `v1 pods/ephemeralcontainers`: the access
    /// log's `routedBy` and `explain`'s words.
    pub api: String,
    /// The access log's `routedBy` for its requests (the filter's own label).
    pub routed_by: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty", default)]
    pub subresource: String,
    /// The members that serve it now.
    pub served_by: Vec<String>,
    /// Who used it within the report's window (the skew log), most first;
    /// absent when nobody did (or the skew log is off).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub used_by: Option<crate::usage::ApiUse>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    /// Nothing any member serves now would be served by none.
    Ready,
    /// Some API would be served by no apiserver.
    Breaks,
    /// Nothing provably lost, but a member's API set is unknown.
    Unknown,
}

impl Verdict {
    /// `mvp-ext-proc readiness`'s exit status: what an upgrade script gates on.
    pub fn exit_code(self) -> i32 {
        match self {
            Verdict::Ready => 0,
            Verdict::Breaks => 1,
            Verdict::Unknown => 2,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReadinessError {
    #[error("no member named {name:?} (members: {members})")]
    NoSuchMember { name: String, members: String },
    #[error("no member runs {0}: what it serves is not known here (upgrade one member first)")]
    NoMemberRuns(Release),
}

/// (group, version, resource, subresource): `""` for the core group and for
/// the resource itself.
type Key<'a> = (&'a str, &'a str, &'a str, &'a str);

fn keys(apis: &Capabilities) -> impl Iterator<Item = Key<'_>> {
    apis.groups.iter().flat_map(|(g, versions)| {
        versions.iter().flat_map(move |(v, resources)| {
            resources.iter().flat_map(move |(r, subs)| std::iter::once((g.as_str(), &**v, &**r, "")).chain(subs.iter().map(move |s| (g.as_str(), &**v, &**r, &**s))))
        })
    })
}

/// Who serves what: key → indices of the members that serve it.
fn served<'a>(members: &[MemberApis<'a>]) -> BTreeMap<Key<'a>, Vec<usize>> {
    let mut by: BTreeMap<Key<'a>, Vec<usize>> = BTreeMap::new();
    for (i, m) in members.iter().enumerate() {
        if let Some(apis) = m.apis {
            for k in keys(apis) {
                by.entry(k).or_default().push(i);
            }
        }
    }
    by
}

/// The keys served by some member in `from` and by none outside it; a
/// subresource only when its resource is not itself listed.
fn only_by<'a>(members: &[MemberApis<'a>], by: &BTreeMap<Key<'a>, Vec<usize>>, from: &[bool]) -> Vec<Api> {
    let only = |servers: &Vec<usize>| servers.iter().any(|&i| from.get(i) == Some(&true)) && servers.iter().all(|&i| from.get(i) == Some(&true));
    let mut out: Vec<Api> = Vec::new();
    for (&(g, v, r, s), servers) in by {
        if !only(servers) {
            continue;
        }
        if !s.is_empty() && by.get(&(g, v, r, "")).is_some_and(only) {
            continue;
        }
        let gv = if g.is_empty() { v.to_string() } else { format!("{g}/{v}") };
        let api = if s.is_empty() { format!("{gv} {r}") } else { format!("{gv} {r}/{s}") };
        let mut label = Vec::new();
        RouteKey::Resource { group: g.as_bytes(), version: v.as_bytes(), resource: r.as_bytes(), subresource: s.as_bytes() }.write_label(&mut label);
        out.push(Api {
            api,
            routed_by: String::from_utf8_lossy(&label).into_owned(),
            group: g.to_string(),
            version: v.to_string(),
            resource: r.to_string(),
            subresource: s.to_string(),
            served_by: servers.iter().filter_map(|&i| members.get(i)).map(|m| m.name.to_string()).collect(),
            used_by: None,
        });
    }
    out
}

fn names(members: &[MemberApis<'_>], pick: &[bool], want: bool) -> Vec<Named> {
    members
        .iter()
        .zip(pick)
        .filter(|(_, p)| **p == want)
        .map(|(m, _)| Named { name: m.name.to_string(), release: m.release.map(|r| r.to_string()) })
        .collect()
}

/// The answer to `scenario` for these members.
pub fn report(members: &[MemberApis<'_>], scenario: &Scenario) -> Result<Report, ReadinessError> {
    let (leaving, words, staying_release): (Vec<bool>, String, Option<Release>) = match scenario {
        Scenario::Remove(remove) => {
            for name in remove {
                if !members.iter().any(|m| m.name == name) {
                    let all: Vec<&str> = members.iter().map(|m| m.name).collect();
                    return Err(ReadinessError::NoSuchMember { name: name.clone(), members: all.join(", ") });
                }
            }
            let leaving = members.iter().map(|m| remove.iter().any(|r| r == m.name)).collect();
            (leaving, format!("{} removed", remove.join(", ")), None)
        }
        Scenario::Release(r) => {
            if !members.iter().any(|m| m.release == Some(*r)) {
                return Err(ReadinessError::NoMemberRuns(*r));
            }
            (members.iter().map(|m| m.release != Some(*r)).collect(), format!("every member on {r}"), Some(*r))
        }
        Scenario::FinishUpgrade => match members.iter().filter_map(|m| m.release).max() {
            Some(newest) => (members.iter().map(|m| m.release != Some(newest)).collect(), format!("the upgrade to {newest} finished"), Some(newest)),
            // Nobody's release read yet: nobody known to leave, and `unknown`.
            None => (vec![false; members.len()], "the upgrade finished".to_string(), None),
        },
    };
    let by_release = !matches!(scenario, Scenario::Remove(_));
    let staying: Vec<bool> = leaving.iter().map(|l| !l).collect();
    let by = served(members);
    let lost = only_by(members, &by, &leaving);
    let lost_on_rollback = match staying_release {
        Some(_) if leaving.iter().any(|l| *l) => Some(only_by(members, &by, &staying)),
        Some(_) => Some(Vec::new()),
        None => None,
    };
    // A member whose release is unknown counts as leaving (pessimistic)
    // when releases decide, and keeps the answer from `ready`.
    let unknown: Vec<String> = members.iter().filter(|m| m.apis.is_none() || (by_release && m.release.is_none())).map(|m| m.name.to_string()).collect();
    let verdict = match (lost.is_empty(), unknown.is_empty()) {
        (false, _) => Verdict::Breaks,
        (true, true) => Verdict::Ready,
        (true, false) => Verdict::Unknown,
    };
    Ok(Report {
        scenario: words,
        leaving: names(members, &leaving, true),
        staying: names(members, &leaving, false),
        unknown,
        lost,
        lost_on_rollback,
        verdict,
        clients_losing: None,
        replicas: vec![],
        replicas_unanswered: vec![],
        usage_window: None,
        usage_since: None,
        usage_dropped: 0,
    })
}

#[cfg(test)]
#[path = "readiness_tests.rs"]
mod tests;
