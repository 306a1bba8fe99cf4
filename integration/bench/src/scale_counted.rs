//! The scale part's Envoy cost per watch event and per watch opened,
//! counted rather than timed (issue 48's goal "within 2 % of the plain L7
//! door's CPU").
//!
//! Timed ([`super::scale`]), a door's CPU per event moves ±10 % from round
//! to round: the load generator, the fakes and Envoy share two cores. A
//! 2 % goal cannot show through that. Here each L7 door's Envoy (and the
//! TCP proxy, the floor) runs under callgrind, as in [`super::instructions`]:
//! the instructions it executes (every thread, V8's compiled code included)
//! for the same watches and events are the same whatever else the machine
//! does.
//!
//! Per door, one at a time, on the scale part's fakes and mvp-ext-proc:
//! Envoy starts with instrumentation off; an idle window (health checks,
//! timers, xDS) gives the rate subtracted from every window for its wall
//! time; the nodes open every watch at once (a window: instructions per
//! watch opened, the events that fell in it at the per-event figure taken
//! off); then `phases` windows of events (instructions per event the fakes
//! sent, each window on its own: the windows agreeing shows the count is
//! steady). The load is small (callgrind runs Envoy ~50× slower): the cost
//! of an event or of opening a watch does not depend on how many others are
//! held — the timed part shows that at 6,000 to 60,000.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use integration::harness::{FilterBuild, FrontDoor, wait_for};

use super::instructions::{callgrind, control, dump, event};
use super::load::{self, Spread};
use super::scale::{ENVOY_DOORS as DOORS, events_sent, open_nodes, received};

/// How much to count.
#[derive(Debug, Clone)]
pub struct Plan {
    pub nodes: usize,
    pub watches_per_node: usize,
    pub event_interval: Duration,
    /// Each window of events, and how many.
    pub window: Duration,
    pub phases: usize,
    pub idle: Duration,
    /// Only these doors (by name; empty: all four).
    pub doors: Vec<String>,
    /// Where each door's callgrind output is kept for `callgrind_annotate`
    /// (None: the run's temporary directory).
    pub keep: Option<std::path::PathBuf>,
}

/// One door's count.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counted {
    /// Instructions Envoy executed per event (every thread), idle rate
    /// subtracted: the median over the windows, and each window's.
    pub instructions_per_event: f64,
    pub phases: Vec<f64>,
    /// Simulated first-level data and last-level misses per event.
    pub d1_misses_per_event: f64,
    pub ll_misses_per_event: f64,
    /// Instructions per watch opened (its stream, its request through the
    /// filter, its first event; the node's connection shared by its 20).
    pub instructions_per_watch_opened: f64,
    /// Instructions per second with no watch held: before they opened and
    /// after they ended (their mean is what every window subtracts).
    pub idle_per_second: [f64; 2],
    /// Events counted in all windows, and the bytes the clients read per
    /// event (the same at every door: every event got through).
    pub events: u64,
    pub client_bytes_per_event: f64,
}

#[derive(Debug, Serialize, Default)]
pub struct ScaleCounted {
    pub nodes: usize,
    pub watches: usize,
    pub event_interval_ms: u64,
    pub doors: BTreeMap<String, Counted>,
    /// `<door>/plain-l7 <figure>`.
    pub ratios: BTreeMap<String, f64>,
}

/// Counts every door of [`DOORS`] the plan names, one after another, in
/// front of `door`'s fakes and served by its mvp-ext-proc.
pub async fn run(door: &FrontDoor, plan: &Plan, dir: &std::path::Path) -> Result<ScaleCounted> {
    load::require_tools(&["valgrind", "callgrind_control"], "Debian's valgrind")?;
    let mut out = ScaleCounted {
        nodes: plan.nodes,
        watches: plan.nodes * plan.watches_per_node,
        event_interval_ms: plan.event_interval.as_millis() as u64,
        ..ScaleCounted::default()
    };
    for (name, filter, edit) in DOORS.into_iter().filter(|(n, ..)| plan.doors.is_empty() || plan.doors.iter().any(|d| d == n)) {
        eprintln!("scale, counted: {name} under callgrind (load average {})", load::load_average());
        let kept = plan.keep.as_deref().unwrap_or(dir).join(format!("callgrind-scale-{name}"));
        let counted = count(door, plan, &kept, filter, edit).await.with_context(|| format!("counting {name}"))?;
        out.doors.insert(name.to_string(), counted);
    }
    if let Some(plain) = out.doors.get("plain-l7").cloned() {
        for (name, c) in out.doors.iter().filter(|(n, _)| n.as_str() != "plain-l7") {
            out.ratios.insert(format!("{name}/plain-l7 instructions per event"), c.instructions_per_event / plain.instructions_per_event);
            out.ratios.insert(format!("{name}/plain-l7 instructions per watch opened"), c.instructions_per_watch_opened / plain.instructions_per_watch_opened);
        }
    }
    Ok(out)
}

async fn count(door: &FrontDoor, plan: &Plan, out: &std::path::Path, filter: FilterBuild, edit: fn(String) -> String) -> Result<Counted> {
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out)?;
    let wrapper = callgrind(out);
    let (envoy, topology) = door.another_envoy_under(filter, edit, Some((&wrapper, Duration::from_secs(300)))).await?;
    let pid = envoy.pid();
    control(pid, "--instr=on")?;
    let mut seen = 0;
    // Its start, thrown away.
    dump(pid, out, &mut seen).await?;
    let idle_before = idle_window(pid, out, &mut seen, plan.idle).await?;

    let watches = plan.nodes * plan.watches_per_node;
    let query = format!("hold=3600&events_every_ms={}", plan.event_interval.as_millis());
    let base = vec![format!("http://127.0.0.1:{}", topology.ports.listen)];
    let (events_before, started) = (events_sent(door).await, Instant::now());
    let opened = open_nodes(&base, plan.nodes, plan.watches_per_node, &query).await?;
    let opening = dump(pid, out, &mut seen).await?;
    let (opening_wall, opening_events) = (started.elapsed().as_secs_f64(), events_sent(door).await - events_before);

    let mut windows = Vec::new();
    let (mut events, received_before) = (0, received(&opened));
    for _ in 0..plan.phases {
        let (before, started) = (events_sent(door).await, Instant::now());
        tokio::time::sleep(plan.window).await;
        let d = dump(pid, out, &mut seen).await?;
        let n = events_sent(door).await - before;
        if n == 0 {
            bail!("no event in a {:?} window", plan.window);
        }
        events += n;
        windows.push((d, started.elapsed().as_secs_f64(), n));
    }
    let bytes = received(&opened) - received_before;
    for (_, held, _) in opened {
        for h in held {
            h.end().await;
        }
    }
    // The watches ended and Envoy done with them (under callgrind their
    // teardown takes seconds): the same idle state as before they opened,
    // so the two windows agreeing shows the background did not drift.
    wait_for("Envoy to hold no connection or stream of the nodes", Duration::from_secs(300), || async {
        (in_flight(&door.http, topology.ports.admin).await? == 0).then_some(())
    })
    .await?;
    dump(pid, out, &mut seen).await?;
    let idle_after = idle_window(pid, out, &mut seen, plan.idle).await?;
    drop(envoy);
    let rate = |names: &[&str]| (idle_before.rate(names) + idle_after.rate(names)) / 2.0;
    let per_event = |names: &[&str]| -> Vec<f64> { windows.iter().map(|(d, wall, n)| (event(d, names) - rate(names) * wall) / *n as f64).collect() };
    let ir = per_event(&["Ir"]);
    let instructions_per_event = Spread::of(&ir).median;
    let opened_ir = event(&opening, &["Ir"]) - rate(&["Ir"]) * opening_wall - instructions_per_event * opening_events as f64;
    Ok(Counted {
        instructions_per_event,
        phases: ir,
        d1_misses_per_event: Spread::of(&per_event(&["D1mr", "D1mw"])).median,
        ll_misses_per_event: Spread::of(&per_event(&["ILmr", "DLmr", "DLmw"])).median,
        instructions_per_watch_opened: opened_ir / watches.max(1) as f64,
        idle_per_second: [idle_before.rate(&["Ir"]), idle_after.rate(&["Ir"])],
        events,
        client_bytes_per_event: bytes as f64 / events.max(1) as f64,
    })
}

/// Envoy's client connections (its listeners', the admin's aside) and
/// requests open to the apiservers (every cluster's).
async fn in_flight(http: &reqwest::Client, admin: u16) -> Option<u64> {
    let url = format!("http://127.0.0.1:{admin}/stats?filter=(downstream_cx_active|upstream_rq_active)$");
    let text = http.get(url).send().await.ok()?.text().await.ok()?;
    let counted = |l: &&str| (l.starts_with("listener.") && !l.starts_with("listener.admin")) || (l.starts_with("cluster.apiservers") && l.contains("upstream_rq_active"));
    Some(text.lines().filter(counted).filter_map(|l| l.rsplit(": ").next()?.trim().parse::<u64>().ok()).sum())
}

/// A measured window with nothing sent, not a wait for a condition.
struct Idle {
    dump: BTreeMap<String, u64>,
    secs: f64,
}

impl Idle {
    fn rate(&self, names: &[&str]) -> f64 {
        event(&self.dump, names) / self.secs
    }
}

async fn idle_window(pid: u32, out: &std::path::Path, seen: &mut usize, length: Duration) -> Result<Idle> {
    let started = Instant::now();
    tokio::time::sleep(length).await;
    let dump = dump(pid, out, seen).await?;
    Ok(Idle { dump, secs: started.elapsed().as_secs_f64() })
}

/// The counted table.
pub fn render(c: &ScaleCounted) -> String {
    let mut out = format!(
        "\nCounted under callgrind: {} watches of {} nodes, an event every {} ms per watch\n\n| door | instructions / event (windows) | D1 / LL misses / event | instructions / watch opened | client bytes / event | idle instructions / s before, after |\n|---|---|---|---|---|---|\n",
        c.watches, c.nodes, c.event_interval_ms
    );
    for (name, ..) in DOORS {
        let Some(d) = c.doors.get(name) else { continue };
        let windows: Vec<String> = d.phases.iter().map(|p| format!("{p:.0}")).collect();
        out.push_str(&format!(
            "| {name} | {:.0} ({}) | {:.1} / {:.2} | {:.0} | {:.0} | {:.0}, {:.0} |\n",
            d.instructions_per_event,
            windows.join(", "),
            d.d1_misses_per_event,
            d.ll_misses_per_event,
            d.instructions_per_watch_opened,
            d.client_bytes_per_event,
            d.idle_per_second[0],
            d.idle_per_second[1]
        ));
    }
    out.push_str("\n| counted ratio to the plain L7 door | |\n|---|---|\n");
    for (k, v) in &c.ratios {
        out.push_str(&format!("| {k} | {v:.3} |\n"));
    }
    out
}
