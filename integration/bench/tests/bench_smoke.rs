//! The benchmark cannot rot: a short run must produce numbers for every
//! variant and measurement (the numbers themselves are not asserted here;
//! BENCHMARKS.md holds a real run).

use std::process::Command;

use serde_json::Value;

#[test]
fn every_variant_produces_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results.json");
    let run = Command::new(env!("CARGO_BIN_EXE_bench")).arg("--smoke").arg("--out").arg(&out).output().unwrap();
    assert!(run.status.success(), "bench --smoke failed:\n{}\n{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    let r: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let variants = r["variants"].as_array().unwrap();
    let numbers: Vec<u64> = variants.iter().map(|v| v["number"].as_u64().unwrap()).collect();
    assert_eq!(numbers, [1, 2, 3, 4, 5, 6]);
    for v in variants {
        assert!(v["throughput"]["median_rps"].as_f64().unwrap() > 0.0, "{v}");
        assert!(v["throughput"]["total_requests"].as_u64().unwrap() > 0, "{v}");
        assert!(v["latency"]["p50_ms"].as_f64().unwrap() > 0.0, "{v}");
        assert!(v["latency"]["p99_ms"].as_f64().unwrap() > 0.0, "{v}");
        assert!(v["cpu_us_per_request"].as_f64().is_some(), "{v}");
        assert_eq!(v["throughput"]["runs"].as_array().unwrap().len(), 2, "one run per round: {v}");
    }
    // Ratios are per round: a median and its spread.
    let ratios = r["ratios"].as_object().unwrap();
    assert_eq!(ratios.len(), 7);
    for (k, v) in ratios {
        assert_eq!(v["rounds"].as_array().unwrap().len(), 2, "{k}");
        assert!(v["min"].as_f64().unwrap() <= v["median"].as_f64().unwrap(), "{k}");
    }
    assert!(r["load_average"]["start"].as_str().unwrap().split(' ').count() == 3);
    let crd = &r["crd_heavy"];
    assert_eq!(crd["requests"].as_u64().unwrap(), 32);
    assert!(crd["under_load"]["p99_ms"].as_f64().unwrap() > 0.0 && crd["ext_proc_rss_mib"].as_f64().unwrap() > 0.0, "{crd}");
    for k in ["apis_merged", "apis_merged_unix", "apis_passthrough", "apis_ext_proc_floor"] {
        assert!(r["discovery"][k]["p99_ms"].as_f64().unwrap() > 0.0, "{k}");
        assert!(crd[k.replace("apis_", "")]["p99_ms"].as_f64().unwrap() > 0.0, "{k}");
        // The paired client measured every door, the same number of times.
        for paired in [&r["discovery_paired"], &crd["paired"]] {
            assert!(paired[k]["p99_ms"].as_f64().unwrap() > 0.0, "{k}: {paired}");
            assert_eq!(paired[k]["requests"], paired["apis_passthrough"]["requests"], "{k}: {paired}");
        }
    }
    // Merging over TCP and over the Unix socket against the passthrough, the
    // ext_proc floor against the passthrough, merging against that floor, and
    // the socket against TCP: per round, and from the paired client per
    // window (two in smoke mode).
    let floor = ["ext_proc floor − passthrough p50", "ext_proc floor − passthrough p99", "merged − ext_proc floor p50", "merged − ext_proc floor p99"];
    let keys: Vec<&str> = ["p50", "p99", "unix p50", "unix p99", "unix − tcp p50", "unix − tcp p99"].into_iter().chain(floor).collect();
    for k in &keys {
        assert_eq!(r["discovery_added_ms"][k]["rounds"].as_array().map(Vec::len), Some(2), "{k}");
        for added in [&r["discovery_paired_added_ms"], &crd["paired_added_ms"]] {
            assert_eq!(added[k]["per_window_ms"]["rounds"].as_array().map(Vec::len), Some(2), "{k}: {added}");
            assert!(added[k]["pooled_ms"].as_f64().is_some(), "{k}: {added}");
        }
    }
    assert_eq!(r["discovery_added_ms"].as_object().map(|m| m.len()), Some(keys.len()));
    assert!(crd["unix_minus_tcp_p99_ms"]["rounds"].as_array().is_some_and(|a| a.len() == 2), "{crd}");
    assert!(crd["ext_proc_floor_added_p99_ms"]["rounds"].as_array().is_some_and(|a| a.len() == 2), "{crd}");
    // The close comparisons again in paired slices (one pair in smoke mode):
    // throughput and CPU per request for each.
    let paired = r["paired"].as_object().unwrap();
    assert_eq!(paired.len(), 8, "{paired:?}");
    for (k, v) in paired {
        assert_eq!(v["rounds"].as_array().map(Vec::len), Some(1), "{k}");
        assert!(v["median"].as_f64().unwrap() > 0.0, "{k}");
        assert!(ratios.contains_key(&k.replacen("cpu per request", "throughput", 1)), "{k} is one of the rounds' ratios");
    }
    assert!(r["propagation_ms"]["p99"].as_f64().unwrap() > 0.0);
    assert!(r["propagation_ms"]["p99, polling refresher"].as_f64().unwrap() > 0.0);
    assert!(r["memory"]["ext_proc_rss_mib_3_apiservers_v1_37"].as_f64().unwrap() > 0.0);
    assert!(r["memory"]["wasm_vm_mib_per_worker_5000_gvr"].as_f64().unwrap() > 0.0);
    // Rebuilds: each kind of change measured in mvp-ext-proc and alone; one
    // CRD added re-encodes that group only.
    let rebuilds = crd["rebuilds"].as_object().unwrap();
    assert_eq!(rebuilds.len(), 3, "{crd}");
    for (k, v) in rebuilds {
        let ms = |f: &str| v[f]["median"].as_f64().unwrap_or(f64::NAN);
        assert!(ms("build_ms") > 0.0 && ms("isolated_build_ms") > 0.0, "{k}: {v}");
        // CPU time is the build thread's own: never more than its wall time.
        assert!(ms("build_cpu_ms") > 0.0 && ms("build_cpu_ms") <= ms("build_ms") + 0.5, "{k}: {v}");
    }
    assert_eq!(rebuilds["one CRD added"]["groups_encoded"]["max"].as_f64(), Some(1.0), "{crd}");
    // Instructions per request under callgrind (smoke: the filter and its
    // routing floor), each phase counted, and (2) over its floor.
    let counted = r["instructions"].as_object().unwrap();
    assert_eq!(counted.keys().collect::<Vec<_>>(), ["(2) wasm 50", "(7) routing-floor 50"], "{counted:?}");
    for (k, c) in counted {
        assert_eq!(c["phases"].as_array().map(Vec::len), Some(2), "{k}: {c}");
        assert!(c["instructions_per_request"].as_f64().unwrap() > 1000.0, "{k}: {c}");
        assert!(c["d1_misses_per_request"].as_f64().is_some() && c["idle_per_second"].as_f64().unwrap() > 0.0, "{k}: {c}");
    }
    assert!(r["counted_ratios"]["(2)/(7) the filter over its routing floor"].as_f64().unwrap() > 0.0, "{}", r["counted_ratios"]);
    // Scale: every door held every watch and carried its events; the
    // direct clients and the TCP proxy one apiserver connection per node,
    // an L7 door one per apiserver (its one worker, under the stream bound).
    let scale = &r["scale"];
    let doors = scale["doors"].as_object().unwrap();
    assert_eq!(doors.keys().collect::<Vec<_>>(), ["direct", "native", "plain-l7", "tcp-proxy", "wasm"], "{scale}");
    let nodes = scale["nodes"].as_f64().unwrap();
    for (k, d) in doors {
        assert!(d["events_per_s"]["median"].as_f64().unwrap() > 0.0 && d["client_mib_per_s"]["median"].as_f64().unwrap() > 0.0, "{k}: {d}");
        // Leases, node status and controllers' lists went through it too
        // (every one answered 200, or the round fails).
        assert!(d["requests_per_s"]["median"].as_f64().unwrap() > 0.0, "{k}: {d}");
        let connections = d["apiserver_connections"]["median"].as_f64().unwrap();
        assert_eq!(connections, if ["direct", "tcp-proxy"].contains(&k.as_str()) { nodes } else { 3.0 }, "{k}: {d}");
        if k != "direct" {
            assert!(d["envoy_cpu_ms_per_1000_events"]["median"].as_f64().unwrap() > 0.0, "{k}: {d}");
        }
    }
    assert_eq!(scale["ratios"].as_object().map(|m| m.len()), Some(9), "{scale}");
    // The storms, door by door: every watch broken came back within
    // seconds; the L7 doors answered nothing but a watch or the 503 Status.
    let storms = scale["storms"]["doors"].as_object().unwrap();
    assert_eq!(storms.keys().collect::<Vec<_>>(), ["native", "plain-l7", "tcp-proxy", "wasm"], "{}", scale["storms"]);
    for (k, d) in storms {
        for storm in ["apiserver_stop", "envoy_restart"] {
            let s = &d[storm];
            assert!(s["broken"].as_u64().unwrap() > 0 && s["back_s"].as_f64().unwrap() <= 10.0, "{k} {storm}: {s}");
            if k != "tcp-proxy" {
                assert!(s["errors"].as_object().unwrap().keys().all(|c| c == "503 Status"), "{k} {storm}: {s}");
            }
        }
    }
    // Counted under callgrind (the native door in the smoke): every window
    // had events and instructions for them, opening a watch cost some.
    let counted = &scale["counted"]["doors"]["native"];
    assert!(counted["phases"].as_array().is_some_and(|p| p.len() == 2 && p.iter().all(|w| w.as_f64().unwrap_or(0.0) > 0.0)), "{counted}");
    assert!(counted["instructions_per_watch_opened"].as_f64().unwrap() > 0.0 && counted["events"].as_u64().unwrap() > 0, "{counted}");
    // The same against two real kube-apiservers: a connection per node
    // directly, one per apiserver through an L7 door.
    let real = &scale["real"];
    let doors = real["doors"].as_object().unwrap();
    assert_eq!(doors.keys().collect::<Vec<_>>(), ["direct", "native", "plain-l7"], "{real}");
    assert_eq!(doors["direct"]["apiserver_connections"].as_u64(), real["nodes"].as_u64(), "{real}");
    for k in ["native", "plain-l7"] {
        assert!(doors[k]["apiserver_connections"].as_u64().unwrap() <= 2, "{k}: {real}");
        assert!(doors[k]["envoy_heap_mib"].as_f64().unwrap() > 0.0, "{k}: {real}");
    }
    // Kube's MVP beside the front door: every door and path answered 200,
    // with latency and every process's CPU.
    let kube = &r["kube_mvp"];
    let cells = kube["doors"].as_object().unwrap();
    assert_eq!(cells.len(), 6, "{kube}");
    for (k, d) in cells {
        assert_eq!(d["statuses"].as_object().map(|s| s.keys().cloned().collect::<Vec<_>>()), Some(vec!["200".to_string()]), "{k}: {d}");
        assert!(d["latency"]["p50_ms"].as_f64().unwrap() > 0.0 && d["cpu_ms_per_request_total"]["median"].as_f64().unwrap() > 0.0, "{k}: {d}");
        assert!(d["cpu_ms_per_request"].as_object().unwrap().contains_key("kas-b"), "{k}: {d}");
    }
    assert_eq!(kube["ratios"].as_object().map(|m| m.len()), Some(3), "{kube}");
    // What the door adds over a real kube-apiserver: both doors and paths
    // answered 200, and the added figures per path.
    let added = &r["added_latency"];
    let cells = added["cells"].as_object().unwrap();
    assert_eq!(cells.len(), 4, "{added}");
    for (k, c) in cells {
        assert_eq!(c["statuses"].as_object().map(|s| s.keys().cloned().collect::<Vec<_>>()), Some(vec!["200".to_string()]), "{k}: {c}");
        assert!(c["latency"]["p50_ms"].as_f64().unwrap() > 0.0, "{k}: {c}");
    }
    assert_eq!(added["added_ms"].as_object().map(|m| m.len()), Some(6), "{added}");
    // Under a real cluster's load: every door measured in both modes, its
    // answers all 2xx (the plain door's wrong 404s for the skewed API
    // apart), the ratios against the plain door and the added latency.
    let cluster = &r["cluster"];
    for door in ["direct", "plain-l7", "native", "wasm"] {
        let s = &cluster["saturated"][door];
        assert!(s["requests_per_s"]["median"].as_f64().unwrap() > 0.0, "{door}: {s}");
        assert!(s["cpu_s_per_1000"]["median"].as_f64().unwrap() > 0.0, "{door}: {s}");
        for kind in ["get", "create/update/patch/delete"] {
            assert!(s["latency_by_kind"][kind]["p50_ms"].as_f64().unwrap() > 0.0, "{door} {kind}: {s}");
        }
        assert!(s["watch_events_per_s"]["median"].as_f64().unwrap() > 0.0, "{door}: {s}");
        // Read from the apiservers' own metrics: a door's re-made watches
        // are judged against them.
        assert!(s["watchers_terminated_by_apiservers"].as_u64().is_some(), "{door}: {s}");
        assert!(cluster["fixed_rate"][format!("50/s {door}")]["p99_ms"].as_f64().unwrap() > 0.0, "{door}: {cluster}");
    }
    for door in ["native", "wasm"] {
        assert_eq!(cluster["saturated"][door]["skewed_404"], 0, "{door}: {cluster}");
        assert!(cluster["ratios"][format!("{door}/plain-l7 requests/s")]["median"].as_f64().unwrap() > 0.0, "{cluster}");
        assert_eq!(cluster["paired"][format!("{door}/plain-l7 requests/s")]["rounds"].as_array().map(Vec::len), Some(1), "{cluster}");
    }
    assert_eq!(cluster["added_ms"].as_object().map(|m| m.len()), Some(9), "{cluster}");
    assert_eq!(cluster["problems"].as_array().map(Vec::len), Some(0), "{cluster}");
    assert_eq!(r["targets"].as_array().unwrap().len(), 13 + 7, "{}", r["targets"]);
    // The printed table names every variant.
    let table = String::from_utf8_lossy(&run.stdout);
    for n in ["(1)", "(2)", "(3)", "(4)", "(5)", "(6)"] {
        assert!(table.contains(n), "{table}");
    }
}
