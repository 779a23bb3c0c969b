//! The workspace's structure, checked: the dependency rules of ARCHITECTURE.md (from `cargo
//! metadata`) and the size of source files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Each workspace crate's normal (not dev, not build) dependencies, by name.
fn dependencies() -> BTreeMap<String, Vec<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(&root)
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut deps = BTreeMap::new();
    for p in v["packages"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap().to_string();
        let d: Vec<String> = p["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["kind"].is_null())
            .map(|d| d["name"].as_str().unwrap().to_string())
            .collect();
        deps.insert(name, d);
    }
    deps
}

#[test]
fn dependency_rules() {
    let deps = dependencies();
    for c in [
        "weir-wire",
        "weir-lang",
        "weir-classify",
        "weir-conntrack",
        "weir-engine",
        "weir-router",
        "weir-io",
        "weir-dataplane",
        "weir-lab",
        "weir",
    ] {
        assert!(
            deps.contains_key(c),
            "no crate {c} in the workspace: {deps:?}"
        );
    }
    // the router depends only on the sans-IO core (and on no other crate at all)
    let allowed = [
        "weir-engine",
        "weir-conntrack",
        "weir-lang",
        "weir-classify",
        "weir-wire",
    ];
    for d in &deps["weir-router"] {
        assert!(allowed.contains(&d.as_str()), "weir-router depends on {d}");
    }
    // the engine and the router are sans-IO: no I/O crate, no daemon, no lab, no system
    // calls (weir-conntrack alone calls libc, for madvise: huge pages for its table)
    for c in [
        "weir-engine",
        "weir-router",
        "weir-conntrack",
        "weir-wire",
        "weir-lang",
    ] {
        for bad in ["weir-io", "weir-dataplane", "weir-lab", "libc"] {
            if c == "weir-conntrack" && bad == "libc" {
                continue;
            }
            assert!(
                !deps[c].iter().any(|d| d == bad),
                "{c} depends on {bad}: {:?}",
                deps[c]
            );
        }
    }
    // only the command line depends on the kernel lab
    for (c, d) in &deps {
        if c != "weir" {
            assert!(
                !d.iter().any(|x| x == "weir-lab"),
                "{c} depends on weir-lab (only the CLI may)"
            );
        }
    }
    // the daemon is the CLI's, not the other way round
    assert!(!deps["weir-dataplane"].iter().any(|d| d == "weir"));
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&p, out);
            }
        } else if name.ends_with(".rs") {
            out.push(p);
        }
    }
}

/// No source file in crates/ over 1,500 lines: long files are split into modules along
/// their own seams.
#[test]
fn no_source_file_over_1500_lines() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    rust_files(&crates, &mut files);
    assert!(files.len() > 50, "found only {} files", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).ok()?.lines().count();
            (n > 1500).then(|| format!("{} ({n} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "over 1,500 lines: {long:?}");
}
