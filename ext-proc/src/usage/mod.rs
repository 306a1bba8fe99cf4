//! Who uses skewed APIs: every request the filter marked as asking for a
//! resource only some apiservers serve (`mvp_contract::envoy::SKEW_PROPERTY`)
//! reaches mvp-ext-proc through Envoy's gRPC access log ([`als`]) and is
//! counted here, per API and per client — the identity the front door
//! forwards (a verified client certificate's user and groups), the user the
//! cluster names for a bearer token (one TokenReview per distinct token,
//! cached: [`verify`]), or, where it could not be asked, the subject the
//! token claims (unverified, and said so) — with the user agent, the source
//! address, first and last seen, and the apiservers that answered.
//! `readiness` names them for the APIs members leaving would take away.
//!
//! Bounded whatever clients send: at most [`MAX_APIS`] APIs (only the
//! table's skewed resources can be marked, by the table's names; one idle
//! for [`IDLE_AFTER`] makes room for a new one, and what did not fit is
//! said in the readiness report), [`MAX_CLIENTS`] clients per API
//! (the most frequent kept: a newcomer takes the place of the least used,
//! whose count goes to `others`), strings cut to [`MAX_TEXT`] bytes,
//! [`MAX_GROUPS`] groups: an entry is at most ~3 KiB, and only resources the
//! table knows to be skewed can be marked (a client cannot make APIs up).

pub mod als;
pub mod persist;
pub mod replicas;
pub mod verify;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// APIs counted at most (more are dropped and counted).
pub const MAX_APIS: usize = 4096;
/// An API nobody asked for in this long makes room for a new one once the
/// counts are full (a week: its clients left every 24 h report long ago;
/// counts restored from a file age out the same way).
pub const IDLE_AFTER: Duration = Duration::from_secs(7 * 24 * 3600);
/// Clients kept per API.
pub const MAX_CLIENTS: usize = 32;
/// Longest identity, user agent or address kept.
pub const MAX_TEXT: usize = 256;
/// Groups kept of a certificate's identity.
pub const MAX_GROUPS: usize = 8;
/// Apiservers remembered per client and API.
const MAX_ANSWERED_BY: usize = 8;

/// Who sent a request, as far as the front door knows.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Who {
    /// A client certificate the front door verified: its user and groups,
    /// as forwarded to the apiservers.
    Certificate { user: String, groups: Vec<String> },
    /// A bearer token the cluster reviewed (TokenReview): the user and
    /// groups kube-apiserver derives from it.
    Token { user: String, groups: Vec<String> },
    /// A JWT bearer token's `sub` claim, as the token says: the cluster
    /// could not be asked (no `--authentication-kubeconfig`, too many
    /// reviews at once, a failed review).
    TokenClaim { subject: String },
    /// A bearer token the cluster rejected, by the subject it claims: its
    /// requests were refused (401) before and after, so a removal breaks
    /// nothing of it.
    RejectedToken { subject: String },
    /// Neither (an opaque token, no credentials): known by its user agent
    /// and address only.
    Unidentified,
}

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Who::Certificate { user, groups } if groups.is_empty() => write!(f, "{user}"),
            Who::Certificate { user, groups } => write!(f, "{user} (groups {})", groups.join(", ")),
            Who::Token { user, groups } if groups.is_empty() => write!(f, "{user} (token)"),
            Who::Token { user, groups } => write!(f, "{user} (token; groups {})", groups.join(", ")),
            Who::TokenClaim { subject } => write!(f, "{subject} (token claim, unverified)"),
            Who::RejectedToken { subject } if subject.is_empty() => write!(f, "(token rejected by the cluster)"),
            Who::RejectedToken { subject } => write!(f, "{subject} (token claim, rejected by the cluster)"),
            Who::Unidentified => write!(f, "unidentified"),
        }
    }
}

/// One marked request, as the access log tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Use {
    /// The route key's label (`apps/v1/deployments`).
    pub api: String,
    pub who: Who,
    pub user_agent: String,
    /// The client's IP address.
    pub source: String,
    /// The apiserver that answered (`IP:port`), if one did.
    pub answered_by: Option<String>,
    pub at: SystemTime,
    /// The bearer token it carried, to review ([`verify`]); never kept.
    pub token: Option<verify::Bearer>,
}

impl Who {
    /// Whether losing an API would break this client: not one whose token
    /// the cluster refuses anyway.
    pub fn can_break(&self) -> bool {
        !matches!(self, Who::RejectedToken { .. })
    }
}

/// One client's use of one API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientUse {
    pub who: Who,
    pub user_agent: String,
    /// The address it last came from.
    pub source: String,
    pub count: u64,
    #[serde(with = "rfc3339")]
    pub first_seen: SystemTime,
    #[serde(with = "rfc3339")]
    pub last_seen: SystemTime,
    /// The apiservers that answered it (`IP:port`).
    pub answered_by: Vec<String>,
}

/// One API's clients.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiUse {
    /// The most frequent, most used first.
    pub clients: Vec<ClientUse>,
    /// Requests of clients that did not fit (or were pushed out).
    pub others: u64,
}

impl ApiUse {
    /// Two replicas' counts of one API as one (`readiness` over replicas):
    /// a client both saw is counted by both, summed.
    pub fn merged(a: Option<ApiUse>, b: Option<ApiUse>) -> Option<ApiUse> {
        let (mut a, b) = match (a, b) {
            (Some(a), Some(b)) => (a, b),
            (a, b) => return a.or(b),
        };
        a.others += b.others;
        for c in b.clients {
            match a.clients.iter_mut().find(|m| m.who == c.who && m.user_agent == c.user_agent) {
                Some(m) => {
                    m.count += c.count;
                    m.first_seen = m.first_seen.min(c.first_seen);
                    if c.last_seen > m.last_seen {
                        m.last_seen = c.last_seen;
                        m.source = c.source;
                    }
                    for s in c.answered_by {
                        if !m.answered_by.contains(&s) {
                            m.answered_by.push(s);
                        }
                    }
                }
                None => a.clients.push(c),
            }
        }
        a.clients.sort_by(|x, y| y.count.cmp(&x.count).then(y.last_seen.cmp(&x.last_seen)));
        Some(a)
    }
}

#[derive(Debug, Default)]
struct Inner {
    apis: HashMap<String, ApiUse>,
    dropped: u64,
    /// Bumped by every count: whether there is anything new to save.
    generation: u64,
}

/// Every API's clients, shared by the access log service and the operator
/// endpoints.
#[derive(Debug)]
pub struct Usage {
    inner: Mutex<Inner>,
    /// When counting began (this process, or the counts it restored).
    pub since: SystemTime,
}

impl Default for Usage {
    fn default() -> Self {
        Usage { inner: Mutex::default(), since: SystemTime::now() }
    }
}

/// The counts as saved beside the state file ([`persist`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Saved {
    #[serde(with = "rfc3339")]
    pub since: SystemTime,
    pub apis: std::collections::BTreeMap<String, ApiUse>,
    #[serde(default)]
    pub dropped: u64,
}

impl Saved {
    /// Another replica's counts added to these (each client both counted
    /// summed; [`Usage::restored`] then holds the sum to the bounds).
    pub fn absorb(&mut self, other: Saved) {
        self.since = self.since.min(other.since);
        self.dropped += other.dropped;
        for (api, theirs) in other.apis {
            let mine = self.apis.remove(&api);
            if let Some(merged) = ApiUse::merged(mine, Some(theirs)) {
                self.apis.insert(api, merged);
            }
        }
    }
}

fn cut(mut s: String) -> String {
    if s.len() > MAX_TEXT {
        let mut end = MAX_TEXT;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

fn cut_who(who: Who) -> Who {
    match who {
        Who::Certificate { user, groups } => Who::Certificate { user: cut(user), groups: groups.into_iter().take(MAX_GROUPS).map(cut).collect() },
        Who::Token { user, groups } => Who::Token { user: cut(user), groups: groups.into_iter().take(MAX_GROUPS).map(cut).collect() },
        Who::TokenClaim { subject } => Who::TokenClaim { subject: cut(subject) },
        Who::RejectedToken { subject } => Who::RejectedToken { subject: cut(subject) },
        Who::Unidentified => Who::Unidentified,
    }
}

impl Usage {
    /// Counts one request: the API's name as counted (cut to its bound:
    /// what `mvp_skewed_api_requests` is labelled with, so its series are
    /// bounded as these counts are), `None` when the API did not fit.
    pub fn record(&self, u: Use) -> Option<String> {
        let mut inner = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let name = cut(u.api);
        if !inner.apis.contains_key(&name) && inner.apis.len() >= MAX_APIS {
            let last_use = |a: &ApiUse| a.clients.iter().map(|c| c.last_seen).max().unwrap_or(SystemTime::UNIX_EPOCH);
            let idle = inner
                .apis
                .iter()
                .map(|(k, a)| (k, last_use(a)))
                .min_by_key(|(_, last)| *last)
                .filter(|(_, last)| u.at.duration_since(*last).is_ok_and(|d| d >= IDLE_AFTER))
                .map(|(k, _)| k.clone());
            match idle {
                Some(k) => {
                    inner.apis.remove(&k);
                }
                None => {
                    inner.dropped += 1;
                    return None;
                }
            }
        }
        let counted = name.clone();
        inner.generation += 1;
        let who = cut_who(u.who);
        let user_agent = cut(u.user_agent);
        let api = inner.apis.entry(name).or_default();
        let i = match api.clients.iter().position(|c| c.who == who && c.user_agent == user_agent) {
            Some(i) => i,
            None => {
                if api.clients.len() >= MAX_CLIENTS {
                    // The least used (the oldest of those) makes room.
                    if let Some((i, _)) = api.clients.iter().enumerate().min_by_key(|(_, c)| (c.count, c.last_seen)) {
                        let gone = api.clients.swap_remove(i);
                        api.others += gone.count;
                    }
                }
                api.clients.push(ClientUse { who, user_agent, source: String::new(), count: 0, first_seen: u.at, last_seen: u.at, answered_by: Vec::new() });
                api.clients.len() - 1
            }
        };
        if let Some(c) = api.clients.get_mut(i) {
            c.count += 1;
            c.last_seen = c.last_seen.max(u.at);
            c.first_seen = c.first_seen.min(u.at);
            c.source = cut(u.source);
            if let Some(a) = u.answered_by
                && !c.answered_by.contains(&a)
                && c.answered_by.len() < MAX_ANSWERED_BY
            {
                c.answered_by.push(cut(a));
            }
        }
        Some(counted)
    }

    /// Counts restored from `saved`, held to this build's bounds.
    pub fn restored(saved: Saved) -> Usage {
        let mut apis = HashMap::new();
        for (api, mut u) in saved.apis.into_iter().take(MAX_APIS) {
            u.clients.sort_by_key(|c| std::cmp::Reverse(c.count));
            let gone: u64 = u.clients.iter().skip(MAX_CLIENTS).map(|c| c.count).sum();
            u.clients.truncate(MAX_CLIENTS);
            for c in &mut u.clients {
                c.who = cut_who(c.who.clone());
                c.user_agent = cut(std::mem::take(&mut c.user_agent));
                c.source = cut(std::mem::take(&mut c.source));
                c.answered_by.truncate(MAX_ANSWERED_BY);
            }
            u.others += gone;
            apis.insert(cut(api), u);
        }
        Usage { inner: Mutex::new(Inner { apis, dropped: saved.dropped, generation: 0 }), since: saved.since }
    }

    /// The counts to save, and their generation; `None` if nothing changed
    /// since `after`.
    pub fn to_save(&self, after: u64) -> Option<(u64, Saved)> {
        let inner = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (inner.generation != after).then(|| (inner.generation, self.saved(&inner)))
    }

    fn saved(&self, inner: &Inner) -> Saved {
        Saved { since: self.since, apis: inner.apis.iter().map(|(k, v)| (k.clone(), v.clone())).collect(), dropped: inner.dropped }
    }

    /// Every count as it stands (`/usage`, for the other replicas).
    pub fn snapshot(&self) -> Saved {
        self.saved(&self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// An API's clients seen within `window` of `now`, most used first.
    pub fn of(&self, api: &str, now: SystemTime, window: Duration) -> Option<ApiUse> {
        let inner = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let u = inner.apis.get(api)?;
        let from = now.checked_sub(window).unwrap_or(SystemTime::UNIX_EPOCH);
        let mut clients: Vec<ClientUse> = u.clients.iter().filter(|c| c.last_seen >= from).cloned().collect();
        if clients.is_empty() && u.others == 0 {
            return None;
        }
        clients.sort_by(|a, b| b.count.cmp(&a.count).then(b.last_seen.cmp(&a.last_seen)));
        Some(ApiUse { clients, others: u.others })
    }

    /// Requests of APIs past [`MAX_APIS`], not counted.
    pub fn dropped(&self) -> u64 {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner).dropped
    }

    /// How many APIs have counts.
    pub fn apis(&self) -> usize {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner).apis.len()
    }

    /// How many client entries are held in all (for the bound's test and
    /// `/table`).
    pub fn entries(&self) -> usize {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner).apis.values().map(|a| a.clients.len()).sum()
    }
}

/// Times as RFC 3339, seconds (what kube writes).
mod rfc3339 {
    use std::time::SystemTime;

    pub fn serialize<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_rfc3339_seconds(*t))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let text: String = serde::Deserialize::deserialize(d)?;
        humantime::parse_rfc3339_weak(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
#[path = "usage_tests.rs"]
mod tests;
