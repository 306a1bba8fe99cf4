//! Why a request goes where: the filter's own decision (`mvp-routing`:
//! the same classification, table and lookup code, not a second
//! implementation) on the table the filter holds, with the apiservers'
//! names and health — for `mvp-ext-proc explain` and `GET /debug/route`.

use mvp_protos::routing::v1 as pb;
use mvp_routing::requestinfo::{Method, RequestInfo, RouteKey, classify};
use mvp_routing::route::{self, Decision};
use mvp_routing::table::{RouteTable, ServerSet};
use mvp_routing::urlpath::DecodedPath;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub method: String,
    pub path: String,
    /// kube-apiserver's RequestInfo for this request.
    pub request: Request,
    /// What the front door routes by, in the access log's words (its
    /// `routedBy`; `None`: it does not route this path).
    pub routed_by: Option<String>,
    pub table_version: String,
    pub apiservers: Vec<Member>,
    pub decision: Outcome,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// `resource`, `discovery`, `nonResource` or `invalid` (kube answers 500).
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verb: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subresource: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    pub name: String,
    pub address: String,
    pub healthy: bool,
    /// Not closed: the filter may route to it.
    pub open: bool,
    /// Whether the table says it serves this request (`None`: not routed).
    pub serves: Option<bool>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// `pinned` (only the listed apiservers get it), `lastResort` (pinned
    /// to a draining apiserver), `loadBalanced`, or `unavailable` (held for
    /// a newer table, then the 503 Status).
    pub action: String,
    /// The apiservers the filter lists, in order (the first rotation; later
    /// requests start at the next healthy member).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hosts: Option<String>,
    /// What the filter does, as one line.
    pub does: String,
    pub reason: String,
}

/// What the filter does with a request only closed apiservers serve: the
/// same words as its access log (`held`, `1000 unavailable`) and
/// `--hold-unavailable` (`envoy-config`), which this daemon does not see.
const HELD_THEN_503: &str = "held for a newer table, up to the front door's --hold-unavailable (5s unless set; 0s: not held): routed if an apiserver that serves it opens meanwhile, else the 503 Status (access log: held \"<ms> unavailable\")";

/// What the filter does with a request only closed apiservers serve when
/// none of them is coming back (each one's port refuses connections or
/// does not answer): a wait cannot help.
const NOW_503: &str = "the 503 Status at once, not held: no apiserver that serves it is coming back (each is down: it refuses connections or does not answer)";

/// What the filter does with a request `decision` routes, in one line.
fn does(decision: &Decision<'_>) -> String {
    match (decision, decision.hosts(0)) {
        (Decision::Unavailable { wait_helps: true, .. }, _) => HELD_THEN_503.to_string(),
        (Decision::Unavailable { .. }, _) => NOW_503.to_string(),
        (Decision::LastResort { .. }, Some(h)) => format!("pinned to {h}, draining: the last resort"),
        (_, Some(h)) => format!("pinned to {h}"),
        (_, None) => "load balanced over every apiserver".to_string(),
    }
}

/// Why a request only closed members serve is held, or not: the members
/// coming back (`Apiserver.returning`), if any.
fn coming_back(returning: &[&str]) -> String {
    match returning {
        [] => "; none of them is coming back (down: refusing connections or not answering), so it is not held".to_string(),
        [one] => format!("; {one} is coming back (it answers, not read yet), so it is held for it"),
        many => format!("; {} are coming back (they answer, not read yet), so it is held for them", many.join(", ")),
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn some(b: &[u8]) -> Option<String> {
    (!b.is_empty()).then(|| text(b))
}

fn gv(group: &[u8], version: &[u8]) -> String {
    if group.is_empty() { text(version) } else { format!("{}/{}", text(group), text(version)) }
}

fn request(info: &RequestInfo<'_>) -> Request {
    match info {
        RequestInfo::Resource(r) => Request {
            kind: "resource".into(),
            verb: Some(format!("{:?}", r.verb).to_lowercase()),
            group: Some(text(r.group)),
            version: Some(text(r.version)),
            namespace: some(r.namespace),
            resource: Some(text(r.resource)),
            name: some(&r.name),
            subresource: some(r.subresource),
        },
        RequestInfo::Discovery { group, version } => Request {
            kind: "discovery".into(),
            group: Some(text(group)),
            version: version.map(text),
            ..Request::default()
        },
        RequestInfo::NonResource => Request { kind: "nonResource".into(), ..Request::default() },
        RequestInfo::Invalid => Request { kind: "invalid".into(), ..Request::default() },
    }
}

fn routed_by(key: &RouteKey<'_>) -> Option<String> {
    match *key {
        RouteKey::Resource { group, version, resource, subresource: b"" } => Some(format!("{} {}", gv(group, version), text(resource))),
        RouteKey::Resource { group, version, resource, subresource } => Some(format!("{} {}/{}", gv(group, version), text(resource), text(subresource))),
        RouteKey::Discovery { group, version: Some(v) } => Some(format!("discovery document of {}", gv(group, v))),
        RouteKey::Discovery { group, version: None } => Some(format!("discovery document of group {}", text(group))),
        RouteKey::OpenApiV3 { key: b"" } => Some("the /openapi/v3 index".into()),
        RouteKey::OpenApiV3 { key } => Some(format!("OpenAPI v3 document {}", text(key))),
        RouteKey::None => None,
    }
}

/// Explains `method raw_path` against the published `table`: the filter's
/// own [`route::route`] decision, in words.
pub fn explain(table: &pb::RoutingTable, method: &str, raw_path: &str) -> Result<Explanation, String> {
    let rt = RouteTable::from_proto(table).map_err(|e| e.to_string())?;
    let path = DecodedPath::parse(raw_path.as_bytes());
    let info = classify(Method::from_bytes(method.as_bytes()), &path);
    let (key, decision) = route::route(&rt, &path);
    let set = rt.servers(&key);
    let what = routed_by(&key);
    let label = (key != RouteKey::None).then(|| key.label());
    let apiservers = table
        .apiservers
        .iter()
        .enumerate()
        .map(|(i, a)| Member {
            name: a.name.clone(),
            address: a.address.clone(),
            healthy: a.healthy,
            open: !a.closed,
            serves: set.map(|s| s & (1u64 << i) != 0),
        })
        .collect::<Vec<_>>();
    let w = what.as_deref().unwrap_or("");
    let names = |pick: &dyn Fn(usize, &pb::Apiserver) -> bool| -> Vec<&str> {
        table.apiservers.iter().enumerate().filter(|(i, a)| pick(*i, a)).map(|(_, a)| a.name.as_str()).collect()
    };
    let in_set = |set: ServerSet| move |i: usize, _: &pb::Apiserver| set & (1u64 << i) != 0;
    let (action, reason) = match decision {
        Decision::NotRouted => ("loadBalanced", "not a path the front door routes: every apiserver answers it itself (kube serves it locally too)".to_string()),
        Decision::ServedByNone => ("loadBalanced", format!("no apiserver serves {w}: whichever answers gives its own 404")),
        Decision::ServedByAll => ("loadBalanced", format!("every apiserver serves {w}, and every one is open")),
        Decision::Unavailable { set: 0, .. } => {
            let pending = names(&|_, a| a.closed && a.pending);
            let mut reason = format!(
                "no apiserver is known to serve {w}, but what {} serve{} now is not known yet (restarting, draining or not read): the 503 Status until it is, never a 404",
                pending.join(", "),
                s_if_one(&pending)
            );
            reason.push_str(&coming_back(&names(&|_, a| a.closed && a.pending && a.returning)));
            ("unavailable", reason)
        }
        Decision::Unavailable { set, .. } => {
            let serving = names(&in_set(set));
            let mut reason = format!("only {} serve{} {w}, and {} closed (draining, restarting or not read): the 503 Status, never a 404", serving.join(", "), s_if_one(&serving), if serving.len() == 1 { "it is" } else { "all are" });
            reason.push_str(&coming_back(&names(&|i, a| in_set(set)(i, a) && a.closed && a.pending && a.returning)));
            ("unavailable", reason)
        }
        Decision::LastResort { set, .. } => {
            let serving = names(&in_set(set));
            let draining = names(&|i, a| in_set(set)(i, a) && a.closed && a.draining);
            let one = draining.len() == 1;
            (
                "lastResort",
                format!(
                    "only {} serve{} {w}, and {} closed; {} {} still serving while shutting down: sent there rather than answered 503 (the 503 Status once {} stop{})",
                    serving.join(", "),
                    s_if_one(&serving),
                    if serving.len() == 1 { "it is" } else { "all are" },
                    draining.join(", "),
                    if one { "is" } else { "are" },
                    if one { "it" } else { "they" },
                    if one { "s" } else { "" },
                ),
            )
        }
        Decision::Pinned { set, .. } => {
            let serving = names(&in_set(set));
            let closed = names(&|i, a| in_set(set)(i, a) && a.closed);
            let mut reason = if set == rt.all() {
                format!("every apiserver serves {w}, but {} {} closed (draining, restarting or not read): only the open ones get it", closed.join(", "), if closed.len() == 1 { "is" } else { "are" })
            } else {
                let mut r = format!("only {} serve{} {w}", serving.join(", "), s_if_one(&serving));
                if !closed.is_empty() {
                    r.push_str(&format!("; {} closed, not routed to", closed.join(", ")));
                }
                r
            };
            let open = names(&|i, a| in_set(set)(i, a) && !a.closed);
            let unhealthy = names(&|i, a| in_set(set)(i, a) && !a.closed && !a.healthy);
            if unhealthy.len() == open.len() {
                reason.push_str("; none of the open ones is healthy now: the client gets the 503 Status unless one answers");
            } else if !unhealthy.is_empty() {
                reason.push_str("; healthy ones first, the others only on failover");
            }
            ("pinned", reason)
        }
    };
    let hosts = match decision {
        Decision::Unavailable { .. } => None,
        _ => decision.hosts(0).map(str::to_string),
    };
    Ok(Explanation {
        method: method.to_string(),
        path: raw_path.to_string(),
        request: request(&info),
        routed_by: label,
        table_version: format!("{:016x}", table.version),
        apiservers,
        decision: Outcome { action: action.into(), does: does(&decision), hosts, reason },
    })
}

fn s_if_one(names: &[&str]) -> &'static str {
    if names.len() == 1 { "s" } else { "" }
}

/// The human form `mvp-ext-proc explain` prints.
pub fn render(e: &Explanation) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "{} {}", e.method, e.path);
    let r = &e.request;
    let mut fields = vec![format!("kind={}", r.kind)];
    for (k, v) in [("verb", &r.verb), ("group", &r.group), ("version", &r.version), ("namespace", &r.namespace), ("resource", &r.resource), ("name", &r.name), ("subresource", &r.subresource)] {
        if let Some(v) = v {
            fields.push(format!("{k}={}", if v.is_empty() { "\"\"" } else { v }));
        }
    }
    let _ = writeln!(out, "  request:    {}", fields.join(" "));
    let _ = writeln!(out, "  routed by:  {}", e.routed_by.as_deref().unwrap_or("(not routed)"));
    for m in &e.apiservers {
        let serves = match m.serves {
            Some(true) => "serves it",
            Some(false) => "does not serve it",
            None => "-",
        };
        let state = match (m.open, m.healthy) {
            (false, _) => "CLOSED",
            (true, true) => "healthy",
            (true, false) => "UNHEALTHY",
        };
        let _ = writeln!(out, "  apiserver:  {:<16} {:<22} {:<9} {serves}", m.name, m.address, state);
    }
    let _ = writeln!(out, "  decision:   {}", e.decision.does);
    let _ = writeln!(out, "  why:        {}", e.decision.reason);
    let _ = writeln!(out, "  table:      version {}", e.table_version);
    out
}

#[cfg(test)]
#[path = "explain_tests.rs"]
mod tests;
