//! What the soak's clients ask for, and how each answer is judged.
//!
//! Requests spread over APIs every release serves, some serve, and exactly
//! one serves (taken from the real fixtures, so the truth is the releases'
//! own discovery documents): list, get, watch and write requests, plus the
//! aggregated `/apis` document.
//!
//! Classes, as a user would judge them:
//! - **correct**: a 2xx from an apiserver whose release serves the API (for a
//!   watch: every event it was to send), a 404 when no apiserver process
//!   whose release serves it was up at any moment of the request;
//! - **wrong 404**: a 404 although such a process was up at some moment of
//!   the request (client-go reads it as "deleted");
//! - **503 Status**: `metav1.Status` with code 503 (client-go retries it);
//!   counted apart when a capable process was up throughout (e.g. a newly
//!   started one not read yet);
//! - **watch ended by its server's shutdown**: a watch that ended early on an
//!   apiserver that was stopping (kube ends watches at shutdown; clients
//!   re-establish them);
//! - **other**: anything else (Envoy's plain-text errors, resets, a 5xx
//!   without a Status body, a watch cut on a server that was not stopping).

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use serde_json::Value;

use super::timeline::{State, capable, capable_and_ready};
use integration::harness::served_resources;

/// Events a watch asks for after its first: 100 ms apart.
pub const WATCH_BOOKMARKS: usize = 4;

pub const AGGREGATED_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    List,
    Get,
    Watch,
    Create,
    Discovery,
}

#[derive(Debug, Clone)]
pub struct Item {
    pub verb: Verb,
    pub path: String,
    /// The releases that serve it (empty for `/apis`).
    pub releases: Vec<String>,
}

impl Item {
    pub fn url_path(&self) -> String {
        match self.verb {
            Verb::Watch => format!("{}?watch=1&bookmarks={WATCH_BOOKMARKS}", self.path),
            _ => self.path.clone(),
        }
    }
}

/// The releases the soak moves through.
pub const RELEASES: [&str; 3] = ["v1.30", "v1.33", "v1.37"];

/// APIs by who serves them (the fixtures say exactly which releases).
const APIS: &[(&str, &str, &str)] = &[
    // Every release.
    ("", "v1", "configmaps"),
    // v1.33 and v1.37.
    ("resource.k8s.io", "v1beta1", "resourceclaims"),
    // v1.30 only (removed in 1.32).
    ("flowcontrol.apiserver.k8s.io", "v1beta3", "flowschemas"),
    // v1.37 only.
    ("lifecycle.k8s.io", "v1alpha1", "evictionrequests"),
];

pub fn workload() -> Result<Vec<Item>> {
    let served = served_resources(&RELEASES)?;
    let mut items = Vec::new();
    for (group, version, resource) in APIS {
        let r = served
            .iter()
            .find(|r| r.group == *group && r.version == *version && r.resource == *resource)
            .with_context(|| format!("{group}/{version} {resource} is in no fixture"))?;
        let releases: Vec<String> = r.by_release.keys().cloned().collect();
        let collection = format!("{}/{}{resource}", r.prefix(), if r.namespaced { "namespaces/soak/" } else { "" });
        for (verb, path) in [
            (Verb::List, collection.clone()),
            (Verb::Get, format!("{collection}/soak-object")),
            (Verb::Watch, collection.clone()),
            (Verb::Create, collection.clone()),
        ] {
            items.push(Item { verb, path, releases: releases.clone() });
        }
    }
    items.push(Item { verb: Verb::Discovery, path: "/apis".into(), releases: vec![] });
    Ok(items)
}

/// What came back.
#[derive(Debug)]
pub enum Outcome {
    Error(String),
    Answer {
        status: u16,
        /// The first JSON line of the body (the only one but for a watch).
        body: Value,
        /// Lines of a watch stream, and whether it ended with an error.
        watch: Option<(usize, bool)>,
    },
}

pub const OK: &str = "correct 2xx";
pub const CORRECT_404: &str = "correct 404";
pub const WRONG_404: &str = "wrong 404";
pub const STATUS_503: &str = "503 Status";
pub const STATUS_503_CAPABLE_UP: &str = "503 Status, capable server up";
pub const WATCH_SHUTDOWN: &str = "watch ended by its server's shutdown";
pub const OTHER: &str = "other";

/// The class and, for "other", what it was.
pub fn classify(item: &Item, states: &[State], outcome: &Outcome) -> (&'static str, Option<String>) {
    let (status, body, watch) = match outcome {
        Outcome::Error(e) => return (OTHER, Some(format!("transport error: {e}"))),
        Outcome::Answer { status, body, watch } => (*status, body, watch),
    };
    let capable_at_some_moment = states.iter().any(|s| capable(s, &item.releases));
    let capable_throughout = !states.is_empty() && states.iter().all(|s| capable_and_ready(s, &item.releases));
    let other = |what: String| (OTHER, Some(format!("{status} {}: {what}", item.path)));
    match status {
        200..=299 if item.verb == Verb::Discovery => match body["kind"].as_str() {
            Some("APIGroupDiscoveryList") => (OK, None),
            k => other(format!("kind {k:?}")),
        },
        200..=299 => {
            // A watch's first event carries it too.
            let release = body["servedBy"]["release"].as_str().unwrap_or("");
            if !item.releases.iter().any(|r| r == release) {
                return other(format!("answered by release {release:?}, which does not serve it"));
            }
            match watch {
                Some((lines, _)) if *lines > WATCH_BOOKMARKS => (OK, None),
                Some((lines, error)) => {
                    let server = body["servedBy"]["server"].as_str().unwrap_or("");
                    if states.iter().any(|s| s.get(server).is_none_or(|p| p.stopping)) {
                        (WATCH_SHUTDOWN, None)
                    } else {
                        other(format!("watch on {server} cut after {lines} events (error: {error}) while it was not stopping"))
                    }
                }
                None => (OK, None),
            }
        }
        404 if capable_at_some_moment => (WRONG_404, Some(format!("{} while a {:?} process was up", item.path, item.releases))),
        404 => (CORRECT_404, None),
        503 if body["kind"] == "Status" && body["code"] == 503 => {
            // Envoy's local reply says why: an upstream failure in its
            // cause (response flags and details), the filter's answer for
            // closed servers in its message.
            let why = body["details"]["causes"][0]["message"].as_str().or(body["message"].as_str()).unwrap_or("");
            let what = format!("503 for {:?} {} while a {:?} process was ready ({why})", item.verb, item.path, item.releases);
            if capable_throughout { (STATUS_503_CAPABLE_UP, Some(what)) } else { (STATUS_503, None) }
        }
        _ => other(body.to_string().chars().take(160).collect::<String>()),
    }
}

/// Counts per class, and a count per distinct "other" and wrong 404.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub classes: BTreeMap<&'static str, u64>,
    pub samples: BTreeMap<String, u64>,
}

impl Tally {
    pub fn add(&mut self, class: &'static str, sample: Option<String>) {
        *self.classes.entry(class).or_default() += 1;
        if let Some(s) = sample {
            *self.samples.entry(s).or_default() += 1;
        }
    }

    pub fn total(&self) -> u64 {
        self.classes.values().sum()
    }

    pub fn get(&self, class: &str) -> u64 {
        self.classes.get(class).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::timeline::Process;
    use super::*;

    fn state(procs: &[(&str, &str, bool)]) -> State {
        procs.iter().map(|(n, r, stopping)| (n.to_string(), Process { release: r.to_string(), ready: true, stopping: *stopping, accepts_until: None })).collect()
    }

    fn answer(status: u16, body: Value, watch: Option<(usize, bool)>) -> Outcome {
        Outcome::Answer { status, body, watch }
    }

    #[test]
    fn judged_against_every_state_the_request_overlapped() {
        let only_137 = Item { verb: Verb::Get, path: "/x".into(), releases: vec!["v1.37".into()] };
        let before = state(&[("a", "v1.30", false)]);
        let after = state(&[("a", "v1.30", false), ("b", "v1.37", false)]);
        let not_found = answer(404, serde_json::json!({"kind": "Status", "code": 404}), None);
        assert_eq!(classify(&only_137, std::slice::from_ref(&before), &not_found).0, CORRECT_404);
        assert_eq!(classify(&only_137, &[before.clone(), after.clone()], &not_found).0, WRONG_404);
        let unavailable = answer(503, serde_json::json!({"kind": "Status", "code": 503}), None);
        assert_eq!(classify(&only_137, &[before.clone(), after.clone()], &unavailable).0, STATUS_503);
        assert_eq!(classify(&only_137, std::slice::from_ref(&after), &unavailable).0, STATUS_503_CAPABLE_UP);
        let plain = answer(503, Value::Null, None);
        assert_eq!(classify(&only_137, std::slice::from_ref(&after), &plain).0, OTHER);
        let ok = answer(200, serde_json::json!({"servedBy": {"server": "b", "release": "v1.37"}}), None);
        assert_eq!(classify(&only_137, std::slice::from_ref(&after), &ok).0, OK);
        let misrouted = answer(200, serde_json::json!({"servedBy": {"server": "a", "release": "v1.30"}}), None);
        assert_eq!(classify(&only_137, std::slice::from_ref(&after), &misrouted).0, OTHER);
    }

    #[test]
    fn a_watch_cut_short_is_fine_only_on_a_stopping_server() {
        let watch = Item { verb: Verb::Watch, path: "/w".into(), releases: vec!["v1.30".into()] };
        let body = serde_json::json!({"servedBy": {"server": "a", "release": "v1.30"}});
        let cut = answer(200, body.clone(), Some((2, true)));
        assert_eq!(classify(&watch, &[state(&[("a", "v1.30", false)]), state(&[("a", "v1.30", true)])], &cut).0, WATCH_SHUTDOWN);
        assert_eq!(classify(&watch, &[state(&[("a", "v1.30", false)])], &cut).0, OTHER);
        let whole = answer(200, body, Some((WATCH_BOOKMARKS + 1, false)));
        assert_eq!(classify(&watch, &[state(&[("a", "v1.30", false)])], &whole).0, OK);
    }
}
