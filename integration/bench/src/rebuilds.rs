//! The CRD-heavy case's rebuild rounds: mvp-ext-proc's merged `/apis` rebuilt
//! after three kinds of change, each timed inside mvp-ext-proc (wall and CPU,
//! from `/table`) and again alone in this process on the same documents.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use mvp_ext_proc::discover::aggregated::{Root, RootView, from_aggregated};
use mvp_ext_proc::merge::MergedDocument;

use super::Settings;
use super::backend::Backend;
use super::load::Spread;
use integration::harness::fixtures_dir;

#[derive(Debug, Default, Serialize)]
pub struct Rebuild {
    pub build_ms: Spread,
    /// The build thread's CPU time (`discovery.buildCpuSeconds`): wall
    /// minus this is time spent waiting for the core.
    pub build_cpu_ms: Spread,
    pub groups_encoded: Spread,
    /// The same change built in the benchmark's own process right after
    /// (`MergedDocument::build` on the same documents, nothing else
    /// running): the build's own cost, beside mvp-ext-proc's, which shares
    /// its core with Envoy and its sync loop.
    pub isolated_build_ms: Spread,
}

/// The merged document rebuilt after three kinds of change, in rounds:
/// every CRD group changed (a full merge), one CRD added, and the other
/// apiserver upgraded (v1.30 ↔ v1.33: the built-in groups only).
pub(super) async fn rebuilds(backend: &Backend, settings: &Settings) -> Result<BTreeMap<String, Rebuild>> {
    let groups = settings.crd_heavy_groups;
    let old = |release: &str| std::fs::read(fixtures_dir().join(release).join("apis.json"));
    let (v130, v133) = (old("v1.30")?, old("v1.33")?);
    /// Per kind of change: mvp-ext-proc's build ms, its CPU ms, groups encoded, build ms alone.
    #[derive(Default)]
    struct Samples(Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>);
    let mut samples: BTreeMap<&str, Samples> = BTreeMap::new();
    let mut current = backend.wait_table(|t| t["discovery"]["etag"].is_string()).await?["discovery"]["etag"].clone();
    let mut isolated = Isolated::new(&serde_json::to_vec(&integration::harness::crd_heavy::apis(groups))?, &v130)?;
    for round in 1..=settings.rounds {
        let changes: [(&str, &str, Vec<u8>); 3] = [
            ("every CRD group changed", "big", serde_json::to_vec(&integration::harness::crd_heavy::apis_revision(groups, round))?),
            ("one CRD added", "big", serde_json::to_vec(&integration::harness::crd_heavy::apis_revision(groups + 1, round))?),
            ("other apiserver upgraded", "old", if round % 2 == 1 { v133.clone() } else { v130.clone() }),
        ];
        for (what, server, body) in changes {
            let url = format!("http://{}/__bench/apis", backend.address(server));
            backend.http.post(url).body(body.clone()).send().await?.error_for_status()?;
            let table = backend.wait_table(|t| t["discovery"]["etag"] != current).await?;
            current = table["discovery"]["etag"].clone();
            let s = samples.entry(what).or_default();
            s.0.push(table["discovery"]["buildSeconds"].as_f64().unwrap_or(f64::NAN) * 1e3);
            s.1.push(table["discovery"]["buildCpuSeconds"].as_f64().unwrap_or(f64::NAN) * 1e3);
            s.2.push(table["discovery"]["groupsEncoded"].as_f64().unwrap_or(f64::NAN));
            s.3.push(isolated.change(server == "big", &body)?);
        }
    }
    Ok(samples
        .into_iter()
        .map(|(k, Samples(ms, cpu, n, alone))| {
            let r = Rebuild {
                build_ms: Spread::of(&ms),
                build_cpu_ms: Spread::of(&cpu),
                groups_encoded: Spread::of(&n),
                isolated_build_ms: Spread::of(&alone),
            };
            (k.to_string(), r)
        })
        .collect())
}

/// mvp-ext-proc's merge run here on the same documents: "big" and "old"
/// views as its discoverer keeps them, and the last document.
struct Isolated {
    big: RootView,
    old: RootView,
    doc: MergedDocument,
}

impl Isolated {
    fn new(big: &[u8], old: &[u8]) -> Result<Isolated> {
        let big = from_aggregated(Root::Groups, big, None)?;
        let old = from_aggregated(Root::Groups, old, None)?;
        let doc = Isolated::build(&big, &old, None);
        Ok(Isolated { big, old, doc })
    }

    fn build(big: &RootView, old: &RootView, previous: Option<&MergedDocument>) -> MergedDocument {
        let servers = [("big".to_string(), big.groups.as_slice()), ("old".to_string(), old.groups.as_slice())].into_iter().collect();
        MergedDocument::build(&servers, &Default::default(), previous)
    }

    /// Applies one server's new document; the build's time in ms.
    fn change(&mut self, big: bool, body: &[u8]) -> Result<f64> {
        let view = if big { &mut self.big } else { &mut self.old };
        *view = from_aggregated(Root::Groups, body, Some(view))?;
        let doc = Isolated::build(&self.big, &self.old, Some(&self.doc));
        let ms = doc.build_time.as_secs_f64() * 1e3;
        self.doc = doc;
        Ok(ms)
    }
}
