//! `bench/results.json`: a full run writes it whole; a run of one part
//! (`--only`) replaces only the sections that part measures and keeps every
//! other figure the file holds — a partial run used to write zeros over all
//! the rest, and whoever committed after one lost the committed figures.
//! Where a partial run came from (machine, settings, load) is kept under
//! `partial_runs`, by part, beside the full run's own.

use serde_json::Value;

/// The sections of the results each `--only` part measures.
pub fn sections(part: &str) -> &'static [&'static str] {
    match part {
        "front-door" => &["variants", "ratios", "paired", "propagation_ms", "memory"],
        "propagation" => &["propagation_ms"],
        "discovery" => &["discovery", "discovery_added_ms", "discovery_paired", "discovery_paired_added_ms", "crd_heavy"],
        "instructions" => &["instructions", "counted_ratios"],
        "scale" => &["scale"],
        "kube-mvp" => &["kube_mvp"],
        "latency" => &["added_latency"],
        "cluster" => &["cluster"],
        _ => &[],
    }
}

/// The sections keyed by door or by ratio: a run of some doors
/// (`--doors`) measures only their entries, so its entries replace those
/// and every other entry stays. (Replacing the section whole once left
/// `counted_ratios` empty and `instructions` with only the doors of the
/// last `--doors 12,14,16,17` run: none of its ratios had both doors.)
const BY_ENTRY: &[&str] = &["instructions", "counted_ratios"];

/// What to write: `new` whole for a full run (`only` = `None`) or when there
/// is no readable earlier file; else `old` with `only`'s sections from `new`
/// — entry by entry for the sections in [`BY_ENTRY`].
pub fn merge(old: Option<Value>, new: Value, only: Option<&str>) -> Value {
    let (Some(part), Some(Value::Object(mut kept))) = (only, old) else { return new };
    for key in sections(part) {
        let Some(v) = new.get(*key) else { continue };
        match (kept.get_mut(*key), v) {
            (Some(Value::Object(entries)), Value::Object(measured)) if BY_ENTRY.contains(key) => {
                for (entry, figure) in measured {
                    entries.insert(entry.clone(), figure.clone());
                }
            }
            _ => {
                kept.insert((*key).to_string(), v.clone());
            }
        }
    }
    let from: serde_json::Map<String, Value> = ["machine", "settings", "load_average"].iter().filter_map(|k| Some(((*k).to_string(), new.get(*k)?.clone()))).collect();
    let runs = kept.entry("partial_runs").or_insert_with(|| Value::Object(Default::default()));
    if let Value::Object(runs) = runs {
        runs.insert(part.to_string(), Value::Object(from));
    }
    Value::Object(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn full() -> Value {
        json!({
            "machine": {"cpus": "2"}, "settings": {"rounds": "5"}, "load_average": {"start": "0.5"},
            "variants": [{"name": "(1) no-filter", "throughput": {"median": 31000.0}}],
            "discovery": {"merged": {"p99": 1.2}}, "crd_heavy": {"unmerged": 0},
            "instructions": {"(1) no-filter 50": {"per_request": 178231}},
            "counted_ratios": {"(2)/(1)": 0.82},
        })
    }

    /// An `--only instructions` run: its counts replace the old ones, every
    /// other figure stays as the full run measured it.
    #[test]
    fn a_partial_run_keeps_every_figure_it_did_not_measure() {
        let partial = json!({
            "machine": {"cpus": "2"}, "settings": {"rounds": "1"}, "load_average": {"start": "1.9"},
            "variants": [], "discovery": {}, "crd_heavy": {"unmerged": 0, "requests": 0},
            "instructions": {"(1) no-filter 50": {"per_request": 178000}, "(9) native 50": {"per_request": 184000}},
            "counted_ratios": {"(9)/(1)": 0.967},
        });
        let merged = merge(Some(full()), partial, Some("instructions"));
        assert_eq!(merged["variants"], full()["variants"], "throughput kept");
        assert_eq!(merged["discovery"], full()["discovery"]);
        assert_eq!(merged["crd_heavy"], full()["crd_heavy"]);
        assert_eq!(merged["settings"], full()["settings"], "the full run's settings stay the file's");
        assert_eq!(merged["instructions"]["(9) native 50"]["per_request"], 184000);
        assert_eq!(merged["instructions"]["(1) no-filter 50"]["per_request"], 178000);
        assert_eq!(merged["counted_ratios"], json!({"(2)/(1)": 0.82, "(9)/(1)": 0.967}), "the ratio it did not measure is kept");
        assert_eq!(merged["partial_runs"]["instructions"]["settings"]["rounds"], "1");
    }

    /// A `--doors` subset (issue 63 item 5): the doors it counted and the
    /// ratios it could form replace theirs; every other door's count and
    /// every other ratio stays — even when it formed no ratio at all.
    #[test]
    fn a_doors_subset_keeps_the_other_doors_counts_and_ratios() {
        let old = json!({
            "instructions": {"(1) no-filter 50": {"per_request": 178231}, "(9) native 50": {"per_request": 184000}, "(12) native-unpinned 50": {"per_request": 190000}},
            "counted_ratios": {"(9)/(1) native": 0.969, "(12)/(11) native unpinned over no filter with its routes": 0.95},
        });
        let subset = json!({"instructions": {"(12) native-unpinned 50": {"per_request": 189000}, "(14) native-unpinned-quiet 50": {"per_request": 186000}}, "counted_ratios": {}});
        let merged = merge(Some(old.clone()), subset, Some("instructions"));
        assert_eq!(merged["instructions"]["(1) no-filter 50"], old["instructions"]["(1) no-filter 50"]);
        assert_eq!(merged["instructions"]["(9) native 50"], old["instructions"]["(9) native 50"]);
        assert_eq!(merged["instructions"]["(12) native-unpinned 50"]["per_request"], 189000, "measured again: replaced");
        assert_eq!(merged["instructions"]["(14) native-unpinned-quiet 50"]["per_request"], 186000, "new door: added");
        assert_eq!(merged["counted_ratios"], old["counted_ratios"], "no ratio measured: every one kept");
    }

    #[test]
    fn a_full_run_or_no_earlier_file_writes_the_new_results_whole() {
        let new = json!({"variants": [], "instructions": {}});
        assert_eq!(merge(Some(full()), new.clone(), None), new);
        assert_eq!(merge(None, new.clone(), Some("instructions")), new);
        assert_eq!(merge(Some(json!("not an object")), new.clone(), Some("discovery")), new);
    }

    #[test]
    fn every_part_names_sections_the_results_have() {
        let keys = ["variants", "ratios", "paired", "discovery", "discovery_added_ms", "discovery_paired", "discovery_paired_added_ms", "crd_heavy", "propagation_ms", "memory", "instructions", "counted_ratios", "targets"];
        for part in ["front-door", "propagation", "discovery", "instructions"] {
            assert!(!sections(part).is_empty(), "{part}");
            assert!(sections(part).iter().all(|s| keys.contains(s)), "{part}");
        }
    }
}
