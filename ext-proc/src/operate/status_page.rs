//! `GET /` on the metrics listener: the front door at a glance for an
//! operator during an upgrade — members and their health, release and last
//! discovery; which APIs are skewed right now and who serves them; the
//! table and merged documents. Server-rendered HTML with inline CSS (no
//! scripts, no build step, no CDN), refreshing itself every 5 s, readable
//! on a phone.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::{Instant, SystemTime};

use mvp_protos::routing::v1 as pb;

use crate::merge::MergedDocument;
use crate::openapi::MergedOpenApi;
use crate::sync::state::ServerState;

/// What the page shows, as the sync loop published it.
pub struct Snapshot<'a> {
    pub table: &'a pb::RoutingTable,
    pub table_changed: SystemTime,
    pub states: &'a [ServerState],
    pub merged: Option<&'a MergedDocument>,
    pub openapi: &'a MergedOpenApi,
    /// The skew log's counts: who used what the upgrade takes away.
    pub usage: Option<&'a crate::usage::Usage>,
}

fn esc(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '<' => "&lt;".to_string(),
            '>' => "&gt;".to_string(),
            '&' => "&amp;".to_string(),
            '"' => "&quot;".to_string(),
            '\'' => "&#39;".to_string(),
            c => c.to_string(),
        })
        .collect()
}

fn ago(secs: u64) -> String {
    match secs {
        0..=119 => format!("{secs} s ago"),
        120..=7199 => format!("{} min ago", secs / 60),
        _ => format!("{} h ago", secs / 3600),
    }
}

/// Every group/version/resource some member serves but not all, with the
/// members that serve it (by each member's last known API set).
pub fn skew(states: &[ServerState]) -> BTreeMap<String, Vec<bool>> {
    let mut served: BTreeMap<String, Vec<bool>> = BTreeMap::new();
    for (i, s) in states.iter().enumerate() {
        let Some(view) = &s.view else { continue };
        for (g, versions) in &view.capabilities.groups {
            for (v, resources) in versions.iter() {
                for r in resources.keys() {
                    let gvr = if g.is_empty() { format!("{v}/{r}") } else { format!("{g}/{v}/{r}") };
                    if let Some(cell) = served.entry(gvr).or_insert_with(|| vec![false; states.len()]).get_mut(i) {
                        *cell = true;
                    }
                }
            }
        }
    }
    served.retain(|_, by| !by.iter().all(|b| *b));
    served
}

pub fn render(s: &Snapshot<'_>) -> String {
    let now = Instant::now();
    let mut out = String::with_capacity(16 << 10);
    let table_age = SystemTime::now().duration_since(s.table_changed).map(|d| d.as_secs()).unwrap_or(0);
    let healthy = s.states.iter().filter(|m| m.healthy).count();
    let _ = write!(
        out,
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="5">
<title>mvp-envoy front door</title>
<style>
body{{font:15px/1.4 system-ui,sans-serif;margin:0;padding:12px;color:#1b1b1b;background:#fafafa}}
h1{{font-size:20px;margin:0 0 4px}} h2{{font-size:16px;margin:20px 0 6px}}
.sub{{color:#555;margin:0 0 8px}}
.wrap{{overflow-x:auto;-webkit-overflow-scrolling:touch}}
table{{border-collapse:collapse;background:#fff;font-size:14px}}
th,td{{border:1px solid #ddd;padding:4px 8px;text-align:left;white-space:nowrap}}
th{{background:#f0f0f0}} td.err{{white-space:normal;max-width:28em;color:#a00}}
.ok{{color:#fff;background:#1a7f37;border-radius:4px;padding:1px 6px}}
.bad{{color:#fff;background:#cf222e;border-radius:4px;padding:1px 6px}}
td.yes{{background:#dafbe1;text-align:center}} td.no{{color:#999;text-align:center}}
code{{font-size:13px}}
</style></head><body>
<h1>mvp-envoy front door</h1>
<p class="sub" id="summary">{healthy} of {members} apiservers healthy · routing table <code>{version:016x}</code>, changed {table_age} · {resources} resources</p>
"#,
        members = s.states.len(),
        version = s.table.version,
        table_age = ago(table_age),
        resources = crate::table::build::resource_count(s.table),
    );

    out.push_str("<h2>Apiservers</h2>\n<div class=\"wrap\"><table id=\"apiservers\"><tr><th>name</th><th>health</th><th>release</th><th>address</th><th>resources</th><th>last discovery</th><th>last error</th></tr>\n");
    for m in s.states {
        let health = if m.healthy { "<span class=\"ok\">healthy</span>" } else { "<span class=\"bad\">unhealthy</span>" };
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{health}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"err\">{}</td></tr>",
            esc(&m.spec.name),
            esc(m.version.as_deref().unwrap_or("?")),
            esc(&m.address.map(|a| a.to_string()).unwrap_or_else(|| "unresolved".into())),
            m.view.as_ref().map(|v| v.capabilities.resource_count().to_string()).unwrap_or_else(|| "unknown".into()),
            m.last_success.map(|t| ago(now.duration_since(t).as_secs())).unwrap_or_else(|| "never".into()),
            esc(m.last_error.as_deref().unwrap_or("")),
        );
    }
    out.push_str("</table></div>\n");

    let skewed = skew(s.states);
    let _ = writeln!(
        out,
        "<h2>Skew: {} resources not served by every apiserver</h2>\n<p class=\"sub\">Requests for these go only to the apiservers marked ✓ (by each one's last known API set).</p>",
        skewed.len()
    );
    out.push_str("<div class=\"wrap\"><table id=\"skew\"><tr><th>group/version/resource</th>");
    for m in s.states {
        let _ = write!(out, "<th>{}</th>", esc(&m.spec.name));
    }
    out.push_str("</tr>\n");
    for (gvr, by) in &skewed {
        let _ = write!(out, "<tr><td>{}</td>", esc(gvr));
        for b in by {
            out.push_str(if *b { "<td class=\"yes\">✓</td>" } else { "<td class=\"no\">·</td>" });
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table></div>\n");

    upgrade_section(&mut out, s.states, s.usage);

    out.push_str("<h2>Merged documents</h2>\n<div class=\"wrap\"><table id=\"documents\"><tr><th>document</th><th>ETag</th><th>size</th><th>from</th></tr>\n");
    let short = |e: &str| esc(e.trim_matches('"').get(..16).unwrap_or(""));
    if let Some(m) = s.merged {
        let _ = writeln!(out, "<tr><td>/apis</td><td><code>{}</code></td><td>{} groups, {} bytes</td><td>{}</td></tr>", short(&m.etag), m.groups, m.json.identity.len(), esc(&m.sources.join(", ")));
    }
    for (name, doc) in [("/openapi/v2", &s.openapi.v2_json), ("/openapi/v2 (protobuf)", &s.openapi.v2_protobuf), ("/openapi/v3", &s.openapi.v3_index)] {
        if let Some(d) = doc {
            let _ = writeln!(out, "<tr><td>{name}</td><td><code>{}</code></td><td>{} bytes</td><td>{}</td></tr>", short(&d.etag), d.body.identity.len(), esc(&s.openapi.sources.join(", ")));
        }
    }
    out.push_str("</table></div>\n<p class=\"sub\">Per request: <code>mvp-ext-proc explain PATH</code> · JSON: <a href=\"/table\">/table</a> · <a href=\"/metrics\">/metrics</a></p>\n</body></html>\n");
    out
}

/// What finishing the upgrade in progress would take away (and a rollback):
/// `mvp-ext-proc readiness` without flags, the same report.
fn upgrade_section(out: &mut String, states: &[ServerState], usage: Option<&crate::usage::Usage>) {
    use super::readiness::{MemberApis, Scenario, Verdict, report};
    let members: Vec<MemberApis<'_>> = states.iter().filter(|m| m.departed.is_none()).map(MemberApis::from_state).collect();
    let Ok(mut r) = report(&members, &Scenario::FinishUpgrade) else { return };
    if let Some(u) = usage {
        r = r.with_usage(u, std::time::SystemTime::now(), std::time::Duration::from_secs(24 * 3600));
    }
    if r.leaving.is_empty() {
        return;
    }
    let verdict = match r.verdict {
        Verdict::Ready => "<span class=\"ok\">nothing lost</span>".to_string(),
        Verdict::Breaks => format!("<span class=\"bad\">{} resources served by no apiserver</span>", r.lost.len()),
        Verdict::Unknown => format!("<span class=\"bad\">cannot tell: {} not read yet</span>", esc(&r.unknown.join(", "))),
    };
    let _ = writeln!(
        out,
        "<h2 id=\"upgrade\">If {}: {verdict}</h2>\n<p class=\"sub\">Leaving: {}. Before the last of them goes: <code>mvp-ext-proc readiness</code> (exit status 1 while something would be lost).</p>",
        esc(&r.scenario),
        esc(&r.leaving.iter().map(|m| m.name.as_str()).collect::<Vec<_>>().join(", ")),
    );
    let rollback = r.lost_on_rollback.as_deref().unwrap_or_default();
    if r.lost.is_empty() && rollback.is_empty() {
        return;
    }
    out.push_str("<div class=\"wrap\"><table id=\"readiness\"><tr><th>resource</th><th>served now by</th><th>after</th><th>used in 24 h by</th></tr>\n");
    for (apis, after) in [(&r.lost[..], "served by none"), (rollback, "gone on a rollback")] {
        for a in apis {
            // The most frequent client, and how many there were.
            let used = match &a.used_by {
                Some(u) => match u.clients.first() {
                    Some(c) if u.clients.len() > 1 => format!("{} ({} requests) and {} more", c.who, c.count, u.clients.len() - 1),
                    Some(c) => format!("{} ({} requests)", c.who, c.count),
                    None => format!("{} requests of clients not kept", u.others),
                },
                None => String::new(),
            };
            let _ = writeln!(out, "<tr><td>{}</td><td>{}</td><td>{after}</td><td>{}</td></tr>", esc(&a.api), esc(&a.served_by.join(", ")), esc(&used));
        }
    }
    out.push_str("</table></div>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::{Capabilities, ServerView};
    use std::sync::Arc;

    fn member(name: &str, resources: &[&str], healthy: bool) -> ServerState {
        let mut s = ServerState::new(format!("{name}=http://127.0.0.1:1").parse().unwrap());
        let mut caps = Capabilities::default();
        for r in resources {
            let (g, rest) = r.split_once(':').unwrap();
            let (v, res) = rest.split_once('/').unwrap();
            caps.add_version(g, v).entry(res);
        }
        s.view = Some(Arc::new(ServerView { capabilities: caps, groups: Default::default() }));
        s.healthy = healthy;
        s.last_error = (!healthy).then(|| "connection refused <oops>".into());
        s
    }

    #[test]
    fn shows_members_skew_and_escapes() {
        let states = [member("a", &[":v1/pods", "apps:v1/deployments"], true), member("b", &[":v1/pods", "batch:v2alpha1/cronjobs"], false)];
        let skewed = skew(&states);
        assert_eq!(skewed.into_iter().collect::<Vec<_>>(), [("apps/v1/deployments".to_string(), vec![true, false]), ("batch/v2alpha1/cronjobs".to_string(), vec![false, true])]);
        let table = pb::RoutingTable { version: 0xabc, ..Default::default() };
        let html = render(&Snapshot { table: &table, table_changed: SystemTime::now(), states: &states, merged: None, openapi: &MergedOpenApi::default(), usage: None });
        assert!(html.contains("1 of 2 apiservers healthy"));
        assert!(html.contains("Skew: 2 resources"));
        assert!(html.contains("connection refused &lt;oops&gt;"), "errors are escaped");
        assert!(html.contains("<span class=\"bad\">unhealthy</span>"));
        assert!(!html.contains("id=\"upgrade\""), "no release known: no upgrade section");
    }

    /// In an upgrade: what finishing it takes away, as `readiness` says.
    #[test]
    fn shows_what_finishing_the_upgrade_takes_away() {
        let (mut a, mut b) = (member("a", &[":v1/pods", "batch:v2alpha1/cronjobs"], true), member("b", &[":v1/pods", "apps:v1/deployments"], true));
        a.version = Some("v1.36.3".into());
        b.version = Some("v1.37.2".into());
        let table = pb::RoutingTable::default();
        let usage = crate::usage::Usage::default();
        usage.record(crate::usage::Use {
            api: "batch/v2alpha1/cronjobs".into(),
            who: crate::usage::Who::Certificate { user: "<alice>".into(), groups: vec![] },
            user_agent: "kubectl".into(),
            source: "10.0.0.9".into(),
            answered_by: None,
            at: SystemTime::now(),
            token: None,
        });
        let html = render(&Snapshot { table: &table, table_changed: SystemTime::now(), states: &[a, b], merged: None, openapi: &MergedOpenApi::default(), usage: Some(&usage) });
        assert!(html.contains("If the upgrade to 1.37 finished: <span class=\"bad\">1 resources served by no apiserver</span>"), "{html}");
        assert!(html.contains("<tr><td>batch/v2alpha1 cronjobs</td><td>a</td><td>served by none</td><td>&lt;alice&gt; (1 requests)</td></tr>"), "{html}");
        assert!(html.contains("<tr><td>apps/v1 deployments</td><td>b</td><td>gone on a rollback</td><td></td></tr>"), "{html}");
    }
}
