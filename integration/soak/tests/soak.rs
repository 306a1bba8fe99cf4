//! The upgrade soak, bounded (see `mvp_soak`; `scripts/soak.sh`
//! runs it long): three apiservers upgraded v1.30 → v1.33 → v1.37 under
//! load, once by replacement at a new address and once with mvp-ext-proc
//! SIGKILLed. Through mvp-envoy no answer is a wrong 404 or anything but a
//! correct answer or an honest 503 Status — and none a 503 while a ready
//! server could have answered; the plain round-robin Envoy
//! beside it shows what the upgrade does without it.

use mvp_soak::workload::{OTHER, STATUS_503_CAPABLE_UP, WRONG_404};
use mvp_soak::{Settings, report, run};

#[tokio::test]
async fn a_whole_upgrade_under_load_gives_no_wrong_404_and_nothing_else() {
    let r = run(Settings::bounded()).await.unwrap();
    let table = report::render(&r);
    eprintln!("{table}");
    let (mvp, plain) = (r.total(0), r.total(1));
    assert_eq!(mvp.get(WRONG_404), 0, "{table}");
    assert_eq!(mvp.get(OTHER), 0, "{table}");
    // A request only a restarting server serves is held until that server
    // is read back (`filter-core/src/hold.rs`), not answered 503 meanwhile.
    assert_eq!(mvp.get(STATUS_503_CAPABLE_UP), 0, "{table}");
    assert!(r.sampled[0] > 20, "{table}");
    assert_eq!(r.disruption[0][0], 0, "mvp-envoy: disruption seconds\n{table}");
    assert!(plain.get(WRONG_404) > 0, "the plain front door should show the problem: {table}");
    // Memory flat after warm-up: the last phase within bounds of the second.
    let (warm, last) = (&r.phases[1].rss_kib, &r.phases[r.phases.len() - 1].rss_kib);
    assert!(last[0] < warm[0] + 32 * 1024, "Envoy grew: {warm:?} → {last:?}");
}
