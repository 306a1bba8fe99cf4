//! The scale part's reconnect storms, door by door (issue 48, `bench
//! --only scale`, `--scale-parts storm`): nodes hold a kubelet's watches
//! through a door, each watch asked for again at once when its stream ends
//! (client-go's reflector without its backoff: the worst case,
//! `harness::watches::rewatch`), and then
//!
//! - **an apiserver stops** (SIGKILL: no GOAWAY) — the seconds until every
//!   watch it held is back through the door, what the clients were
//!   answered meanwhile by class, the connections the surviving apiservers
//!   accepted (over TLS each one a handshake);
//! - **the door's Envoy restarts** (SIGKILL, then the same bootstrap) —
//!   the seconds from the new Envoy's readiness until every watch is back,
//!   the answers once it was ready, the connections the apiservers
//!   accepted.
//!
//! Doors: the TCP proxy, the plain L7 Envoy, the front door's two builds
//! (the direct clients have no door to fail over: a client of one
//! apiserver waits for it). Each door's Envoy is started for its storms
//! and stopped after; the stopped apiserver is started again between
//! doors. The scale_watches tests assert the front door's storms; this
//! puts every door's side by side.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use integration::harness::watches::{broken, errors, h2c, live, nodes_rewatching};
use integration::harness::{FilterBuild, FrontDoor, wait_for};

use super::scale::ENVOY_DOORS as DOORS;

/// How big the storms are.
#[derive(Debug, Clone)]
pub struct Plan {
    pub nodes: usize,
    pub watches_per_node: usize,
    /// Only these doors (by name; empty: all four).
    pub doors: Vec<String>,
}

/// One storm at one door.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Storm {
    /// Watches whose stream the storm ended.
    pub broken: usize,
    /// Seconds until every watch was back (apiserver stop: from the kill;
    /// Envoy restart: from the new Envoy's readiness).
    pub back_s: f64,
    /// What the clients were answered other than a watch, by class
    /// (Envoy restart: once the new Envoy was ready).
    pub errors: BTreeMap<String, usize>,
    /// Connections the apiservers accepted meanwhile.
    pub apiserver_connections_accepted: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct DoorStorms {
    pub apiserver_stop: Storm,
    pub envoy_restart: Storm,
}

#[derive(Debug, Serialize, Default)]
pub struct ScaleStorms {
    pub nodes: usize,
    pub watches: usize,
    pub doors: BTreeMap<String, DoorStorms>,
}

/// The apiserver stopped in each door's first storm: it holds about a
/// third of the watches (three members, round robin).
const VICTIM: &str = "v133";

const BOUND: Duration = Duration::from_secs(60);

pub async fn run(door: &mut FrontDoor, plan: &Plan) -> Result<ScaleStorms> {
    let mut out = ScaleStorms { nodes: plan.nodes, watches: plan.nodes * plan.watches_per_node, ..ScaleStorms::default() };
    for (name, filter, edit) in DOORS.into_iter().filter(|(n, ..)| plan.doors.is_empty() || plan.doors.iter().any(|d| d == n)) {
        eprintln!("scale, storms: {name}");
        let storms = storms(door, plan, filter, edit).await.with_context(|| format!("the storms at {name}"))?;
        out.doors.insert(name.to_string(), storms);
    }
    Ok(out)
}

/// Connections the fake apiservers accepted so far, all together but
/// `except` (the stopped one: its count ends with it).
async fn accepted(door: &FrontDoor, except: &str) -> u64 {
    let mut n = 0;
    for f in door.fakes.iter().filter(|f| f.spec.name != except) {
        n += f.stats(&door.http).await.and_then(|v| v["connectionsAccepted"].as_u64()).unwrap_or(0);
    }
    n
}

async fn storms(door: &mut FrontDoor, plan: &Plan, filter: FilterBuild, edit: fn(String) -> String) -> Result<DoorStorms> {
    let (mut envoy, topology) = door.another_envoy_of(filter, edit).await?;
    let total = plan.nodes * plan.watches_per_node;
    let base = format!("http://127.0.0.1:{}", topology.ports.listen);
    let watching = nodes_rewatching(plan.nodes, plan.watches_per_node, &base, h2c);
    wait_for("every watch held", BOUND, || async { (live(&watching) == total).then_some(()) }).await?;

    // An apiserver stops.
    let (broken_before, errors_before, accepted_before) = (broken(&watching), errors(&watching), accepted(door, VICTIM).await);
    let spec = door.fake(VICTIM).spec.clone();
    door.fake_mut(VICTIM).proc.kill();
    let stopped = Instant::now();
    // Every stream it held ends: those are the ones that must come back.
    wait_for("the stopped apiserver's watches to break and come back", BOUND, || async {
        (broken(&watching) > broken_before && live(&watching) == total).then_some(())
    })
    .await?;
    let apiserver_stop = Storm {
        broken: broken(&watching) - broken_before,
        back_s: stopped.elapsed().as_secs_f64(),
        errors: since(errors(&watching), &errors_before),
        apiserver_connections_accepted: accepted(door, VICTIM).await.saturating_sub(accepted_before),
    };
    if apiserver_stop.broken == 0 {
        bail!("{VICTIM} held none of the {total} watches");
    }
    door.restart_fake(VICTIM, spec).await?;
    let healthy = |t: &serde_json::Value| t["apiservers"].as_array().is_some_and(|a| a.iter().all(|s| s["open"] == true));
    door.wait_table_published(healthy).await?;

    // The door's Envoy restarts: every node's connection ends.
    let broken_before = broken(&watching);
    envoy.kill();
    wait_for("every watch's stream to end", BOUND, || async { (broken(&watching) >= broken_before + total).then_some(()) }).await?;
    let accepted_before = accepted(door, "").await;
    let _restarted = door.restart_another_envoy(&topology).await?;
    let (ready, errors_at_ready) = (Instant::now(), errors(&watching));
    wait_for("every watch back after the restart", BOUND, || async { (live(&watching) == total).then_some(()) }).await?;
    let envoy_restart = Storm {
        broken: total,
        back_s: ready.elapsed().as_secs_f64(),
        errors: since(errors(&watching), &errors_at_ready),
        apiserver_connections_accepted: accepted(door, "").await.saturating_sub(accepted_before),
    };
    for w in watching {
        w.end().await;
    }
    Ok(DoorStorms { apiserver_stop, envoy_restart })
}

/// The classes counted since `before`.
fn since(mut now: BTreeMap<String, usize>, before: &BTreeMap<String, usize>) -> BTreeMap<String, usize> {
    for (class, n) in before {
        if let Some(m) = now.get_mut(class) {
            *m -= (*n).min(*m);
        }
    }
    now.retain(|_, n| *n > 0);
    now
}

/// The storms' table.
pub fn render(s: &ScaleStorms) -> String {
    let mut out = format!(
        "\nReconnect storms: {} watches of {} nodes re-watching at once (no backoff); an apiserver of three stops, then the door's Envoy restarts\n\n| door | apiserver stop: watches broken | back, s | answers other than a watch | connections the apiservers accepted | Envoy restart: back after ready, s | answers once ready | connections the apiservers accepted |\n|---|---|---|---|---|---|---|---|\n",
        s.watches, s.nodes
    );
    let classes = |e: &BTreeMap<String, usize>| if e.is_empty() { "none".to_string() } else { e.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join(", ") };
    for (name, ..) in DOORS {
        let Some(d) = s.doors.get(name) else { continue };
        let (a, e) = (&d.apiserver_stop, &d.envoy_restart);
        out.push_str(&format!(
            "| {name} | {} | {:.2} | {} | {} | {:.2} | {} | {} |\n",
            a.broken,
            a.back_s,
            classes(&a.errors),
            a.apiserver_connections_accepted,
            e.back_s,
            classes(&e.errors),
            e.apiserver_connections_accepted
        ));
    }
    out
}
