//! Classifier vs. Linear on the ClassBench rule sets and traces, when they are present
//! (`$WEIR_CLASSBENCH`, default `../shared/classbench` relative to the project root).
//!
//! The default test checks every 1k set (a strided sample of each trace in debug builds, to keep
//! `cargo test` fast); the full sweep over every rules/trace pair is `#[ignore]`d:
//! `cargo test --release -p weir-classify --test classbench -- --ignored`.

use std::path::{Path, PathBuf};

use weir_classify::classbench::{parse_rules, parse_trace, to_entries, CB_WIDTHS};
use weir_classify::{Classifier, Linear};

fn dir() -> Option<PathBuf> {
    let d = match std::env::var_os("WEIR_CLASSBENCH") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/classbench"),
    };
    d.join("rules").is_dir().then_some(d)
}

fn sets(dir: &Path, filter: impl Fn(&str) -> bool) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir.join("rules"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| filter(n) && dir.join("traces").join(format!("{n}_trace")).exists())
        .collect();
    v.sort();
    v
}

/// Checks one set: returns (headers checked, mismatches).
fn check(dir: &Path, name: &str, stride: usize, updates: usize) -> (usize, usize) {
    let rules =
        parse_rules(&std::fs::read_to_string(dir.join("rules").join(name)).unwrap()).unwrap();
    let trace = parse_trace(
        &std::fs::read_to_string(dir.join("traces").join(format!("{name}_trace"))).unwrap(),
    )
    .unwrap();
    let entries = to_entries(&rules);
    let mut c = Classifier::build(CB_WIDTHS, entries.clone());
    let l = Linear::build(CB_WIDTHS, entries.clone());
    assert_eq!(c.len(), rules.len());
    let mut mismatches = 0;
    let mut checked = 0;
    let mut compare = |c: &Classifier<5>, offset: usize| {
        for h in trace.iter().skip(offset).step_by(stride) {
            let k = h.key();
            let want = l.first_match(&k, 0, |_| true);
            if c.first_match(&k, 0, |_| true) != want {
                mismatches += 1;
            }
            // Resuming after the first match must find the next one.
            if let Some((p, _)) = want {
                if c.first_match(&k, p + 1, |_| true) != l.first_match(&k, p + 1, |_| true) {
                    mismatches += 1;
                }
            }
            checked += 1;
        }
    };
    compare(&c, 0);
    // Delete and re-insert rules, then compare again.
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..updates {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let i = (rng % entries.len() as u64) as usize;
        assert_eq!(c.remove_rule(entries[i].rule), 1);
        c.insert(entries[i].clone());
    }
    compare(&c, stride / 2);
    (checked, mismatches)
}

#[test]
fn classbench_1k_sets_match_linear() {
    let Some(dir) = dir() else {
        eprintln!("ClassBench data not found; skipping");
        return;
    };
    let stride = if cfg!(debug_assertions) { 2 } else { 1 };
    let names = sets(&dir, |n| n.ends_with("_1k"));
    assert!(!names.is_empty());
    for name in names {
        let (checked, mismatches) = check(&dir, &name, stride, 100);
        eprintln!("{name}: {checked} headers, {mismatches} mismatches");
        assert_eq!(mismatches, 0, "{name}");
    }
}

#[test]
#[ignore = "slow: every ClassBench set, full traces (run with --release)"]
fn classbench_all_sets_match_linear() {
    let Some(dir) = dir() else {
        eprintln!("ClassBench data not found; skipping");
        return;
    };
    for name in sets(&dir, |_| true) {
        let (checked, mismatches) = check(&dir, &name, 1, 1000);
        eprintln!("{name}: {checked} headers, {mismatches} mismatches");
        assert_eq!(mismatches, 0, "{name}");
    }
}
