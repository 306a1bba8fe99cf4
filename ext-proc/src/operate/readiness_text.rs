//! The readiness report as `mvp-ext-proc readiness` prints it.

use std::fmt::Write as _;

use super::readiness::{Api, Named, Report, Verdict};

fn member_list(members: &[Named]) -> String {
    if members.is_empty() {
        return "none".into();
    }
    let each: Vec<String> = members.iter().map(|m| format!("{} ({})", m.name, m.release.as_deref().unwrap_or("release unknown"))).collect();
    each.join(", ")
}

fn api_lines(out: &mut String, apis: &[Api]) {
    let width = apis.iter().map(|a| a.api.len()).max().unwrap_or(0);
    for a in apis {
        let _ = writeln!(out, "  {:width$}  served by {}", a.api, a.served_by.join(", "));
        let Some(used) = &a.used_by else { continue };
        for c in &used.clients {
            let agent = if c.user_agent.is_empty() { String::new() } else { format!(" ({})", c.user_agent) };
            let _ = writeln!(
                out,
                "      used by {}{agent} from {}: {} request(s), last {}",
                c.who,
                if c.source.is_empty() { "?" } else { &c.source },
                c.count,
                humantime::format_rfc3339_seconds(c.last_seen)
            );
        }
        if used.others > 0 {
            let _ = writeln!(out, "      and {} request(s) of clients not kept", used.others);
        }
    }
}

/// The report as `mvp-ext-proc readiness` prints it.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "if {}:", r.scenario);
    let _ = writeln!(out, "  leaving:  {}", member_list(&r.leaving));
    let _ = writeln!(out, "  staying:  {}", member_list(&r.staying));
    if !r.unknown.is_empty() {
        let _ = writeln!(out, "  unknown:  {} (API set or release never read: the answer may miss what it serves)", r.unknown.join(", "));
    }
    if r.lost.is_empty() {
        let _ = writeln!(out, "served by no apiserver then: nothing");
    } else {
        let _ = writeln!(out, "served by no apiserver then ({}):", r.lost.len());
        api_lines(&mut out, &r.lost);
    }
    if let Some(rollback) = &r.lost_on_rollback
        && !rollback.is_empty()
    {
        let _ = writeln!(out, "gone again on a rollback, only the staying release serves ({}):", rollback.len());
        api_lines(&mut out, rollback);
    }
    if let (Some(n), Some(window), Some(since)) = (r.clients_losing, &r.usage_window, &r.usage_since) {
        let _ = writeln!(out, "clients that used a lost API in the last {window} (counted since {since}): {n}");
    }
    if r.usage_dropped > 0 {
        let _ = writeln!(out, "not counted: {} request(s) for APIs past the counts' bound of {} APIs (their clients can be missing above)", r.usage_dropped, crate::usage::MAX_APIS);
    }
    if r.replicas.len() > 1 {
        let _ = writeln!(out, "counted by the replicas: {}", r.replicas.join(", "));
    }
    for why in &r.replicas_unanswered {
        let _ = writeln!(out, "not counted (a replica did not answer; its Envoys' clients are missing): {why}");
    }
    let verdict = match r.verdict {
        Verdict::Ready => "ready: every API served now stays served".to_string(),
        Verdict::Breaks => match r.clients_losing {
            Some(n) if n > 0 => format!("would break: {} API(s) served by no apiserver, used by {n} client(s)", r.lost.len()),
            _ => format!("would break: {} API(s) served by no apiserver (no client seen using them: check the window and that every Envoy logs skew)", r.lost.len()),
        },
        Verdict::Unknown => format!("cannot tell: {} not read yet", r.unknown.join(", ")),
    };
    let _ = writeln!(out, "verdict: {verdict}");
    out
}
