use super::*;

fn v(s: &str) -> Result<EnvoyVersion, String> {
    s.parse()
}

#[test]
fn releases_are_read_as_envoy_prints_and_tags_them() {
    let cases = [
        ("1.40", Some((1, 40, None))),
        ("1.40.0", Some((1, 40, Some(0)))),
        ("v1.41.3", Some((1, 41, Some(3)))),
        ("1.42.0-dev", Some((1, 42, Some(0)))),
        ("1", None),
        ("one.40", None),
        ("1.x", None),
        ("", None),
    ];
    for (text, want) in cases {
        let got = v(text).ok().map(|v| (v.major, v.minor, v.patch));
        assert_eq!(got, want, "{text:?}");
    }
    let printed = "\nenvoy  version: 2c0a2d4e1f7a3b5c/1.40.0/Clean/RELEASE/BoringSSL\n";
    assert_eq!(EnvoyVersion::from_version_output(printed), Some(EnvoyVersion { major: 1, minor: 40, patch: Some(0) }));
    assert_eq!(EnvoyVersion::from_version_output("something else"), None);
}

#[test]
fn the_native_module_loads_in_its_release_and_the_next_only() {
    for (release, loads) in [("1.39.9", false), ("1.40.0", true), ("1.40", true), ("1.41.2", true), ("1.42.0", false), ("2.40.0", false)] {
        assert_eq!(v(release).unwrap().loads_native(), loads, "{release}");
    }
}

/// (choice, --wasm, --native-module, the Envoy's release, the build or the
/// error's words).
type Case = (FilterChoice, Option<String>, Option<String>, Result<EnvoyVersion, String>, Result<FilterBuild, &'static str>);

#[test]
fn the_build_is_native_where_the_envoy_loads_it_else_wasm() {
    use FilterChoice::*;
    let (w, n) = (Some("/w.wasm".to_string()), Some("/n.so".to_string()));
    let native = || FilterBuild::Native("/n.so".into());
    let wasm = || FilterBuild::Wasm("/w.wasm".into());
    let cases: Vec<Case> = vec![
        (Auto, w.clone(), n.clone(), v("1.40.0"), Ok(native())),
        (Auto, w.clone(), n.clone(), v("1.41.1"), Ok(native())),
        (Auto, None, n.clone(), v("1.40.0"), Ok(native())),
        (Auto, w.clone(), n.clone(), v("1.42.0"), Ok(wasm())),
        (Auto, w.clone(), n.clone(), v("1.39.0"), Ok(wasm())),
        (Auto, w.clone(), n.clone(), Err("cannot run envoy".into()), Ok(wasm())),
        (Auto, w.clone(), None, v("1.40.0"), Ok(wasm())),
        (Auto, None, n.clone(), v("1.42.0"), Err("Envoy 1.42.0 cannot load the native module")),
        (Auto, None, None, v("1.40.0"), Err("no --native-module, and no --wasm")),
        (Native, w.clone(), n.clone(), v("1.40.0"), Ok(native())),
        (Native, None, n.clone(), Err("cannot run envoy".into()), Ok(native())),
        (Native, w.clone(), n.clone(), v("1.42.0"), Err("use --filter wasm")),
        (Native, w.clone(), None, v("1.40.0"), Err("--filter native needs --native-module")),
        (Wasm, w.clone(), n.clone(), v("1.40.0"), Ok(wasm())),
        (Wasm, None, n.clone(), v("1.40.0"), Err("--filter wasm needs --wasm")),
    ];
    for (choice, wasm_path, native_path, envoy, want) in cases {
        let case = format!("{choice:?} wasm={wasm_path:?} native={native_path:?} envoy={envoy:?}");
        let got = choose(choice, wasm_path, native_path, || envoy);
        match (got, want) {
            (Ok(c), Ok(b)) => assert_eq!(c.build, b, "{case}: {}", c.why),
            (Err(e), Err(words)) => assert!(e.contains(words), "{case}: {e}"),
            (got, want) => panic!("{case}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn the_envoy_is_asked_only_when_the_choice_depends_on_it() {
    let asked = std::cell::Cell::new(false);
    let ask = || {
        asked.set(true);
        Err("not here".to_string())
    };
    choose(FilterChoice::Wasm, Some("/w".into()), Some("/n".into()), ask).unwrap();
    assert!(!asked.get());
    choose(FilterChoice::Auto, Some("/w".into()), None, || {
        asked.set(true);
        Err("not here".to_string())
    })
    .unwrap();
    assert!(!asked.get(), "no module given: nothing to ask");
}

#[test]
fn an_envoy_binary_that_cannot_run_is_a_reason_not_a_failure() {
    let e = EnvoyVersion::of_binary(Path::new("/nonexistent/envoy")).unwrap_err();
    assert!(e.contains("cannot run /nonexistent/envoy --version"), "{e}");
    let chosen = choose(FilterChoice::Auto, Some("/w".into()), Some("/n".into()), || Err(e)).unwrap();
    assert_eq!(chosen.build, FilterBuild::Wasm("/w".into()));
    assert!(chosen.why.contains("not known") && chosen.why.contains("--envoy-version"), "{}", chosen.why);
}
