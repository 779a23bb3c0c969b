//! nftables' own rule tests against the kernel, packet by packet (`weir_lab::pylab`): every
//! `;ok` rule of `../shared/nftables-tests/py` (families ip, ip6, inet, netdev) that Debian's
//! nft loads here, alone in its table in a router namespace, gets the packets the bytecode
//! oracle generates for it (hits, misses, variants); the kernel's traces say whether the rule
//! ran to its end, weir's engine answers for the same table and packet, and every difference
//! must be listed with its reason in `tests/py_kernel_exceptions.txt`. Needs root, `ip` and
//! `nft`; says why and passes when they are missing.
//!
//! `WEIR_PY_ONLY=PREFIX` runs the files whose path (`ip/ip.t`) starts with PREFIX;
//! `WEIR_PY_SHOW=N` prints N differing rules (default 20).

#[path = "../../weir-lang/tests/common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use weir_lab::oracle::compare::blocks_for;
use weir_lab::pylab::{PyLab, Report};

/// Rules compared, at least (a ratchet: raise it as weir and the lab grow).
const COMPARED_FLOOR: usize = 3_540;

const SEED: u64 = 0x6b65_726e_656c;
/// Hit packets generated a rule (each with its misses and variants).
const ROUNDS: usize = 2;

#[test]
fn py_rules_against_the_kernel() {
    let Some(py) = common::dir() else {
        println!(
            "skipped: nftables' tests not found (../shared/nftables-tests or $WEIR_NFT_TESTS)"
        );
        return;
    };
    if let Some(why) = weir_lab::kernel::unavailable() {
        println!("skipped: the kernel lab cannot run here: {why}");
        return;
    }
    // where it can run, it must
    let mut lab = PyLab::new().unwrap_or_else(|e| panic!("the kernel lab: {e}"));
    weir_lab::sys::pin_to_current_cpu();
    let only = std::env::var("WEIR_PY_ONLY").unwrap_or_default();
    let mut r = Report::default();
    let started = std::time::Instant::now();
    for p in common::t_files(&py) {
        let name = p
            .strip_prefix(&py)
            .unwrap_or(&p)
            .to_string_lossy()
            .into_owned();
        if !name.starts_with(&only) {
            continue;
        }
        let src = std::fs::read_to_string(&p).unwrap();
        let blocks = blocks_for(&p);
        for c in common::cases(&name, &src) {
            if !c.ok {
                continue;
            }
            let at = format!("{}:{}", c.file, c.line);
            if let Err(e) = lab.compare_case(&mut r, &at, &c.rule, &c.text, &blocks, SEED, ROUNDS) {
                panic!("{at}: the lab failed: {e}");
            }
        }
    }
    let skipped: usize = r.skipped.values().sum();
    println!(
        "kernel lab (py): {} rules compared ({} matched by the kernel at least once), {} packets ({} matching), {} not reaching the rule's chain, {} later fragments matched by the kernel's fast payload path only, {} IPv4 fragments reassembled before the input hook, {} differences; {skipped} rules not compared; {:.1} s",
        r.rules_compared,
        r.rules_hit,
        r.packets,
        r.packets_matching,
        r.packets_not_reached,
        r.fast_path_fragments,
        r.packets_reassembled,
        r.differences.len(),
        started.elapsed().as_secs_f64()
    );
    let mut top: Vec<_> = r.skipped.iter().collect();
    top.sort_by_key(|t| std::cmp::Reverse(*t.1));
    println!("rules not compared, by reason:");
    for (why, n) in top.iter().take(30) {
        println!("  {n:5}  {why}");
    }
    let listed: BTreeSet<String> = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py_kernel_exceptions.txt"),
    )
    .unwrap_or_default()
    .lines()
    .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    .filter_map(|l| l.split_whitespace().next().map(str::to_string))
    .collect();
    let show: usize = std::env::var("WEIR_PY_SHOW")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let differ_at: BTreeSet<String> = r.differences.iter().map(|d| d.at.clone()).collect();
    let unlisted: Vec<&String> = differ_at.difference(&listed).collect();
    println!(
        "differences ({} packets, {} rules; first {show} rules shown):",
        r.differences.len(),
        differ_at.len()
    );
    let mut shown = BTreeSet::new();
    for d in &r.differences {
        if shown.len() >= show && !shown.contains(&d.at) {
            continue;
        }
        if shown.insert(d.at.clone()) {
            println!("  {d}");
        }
    }
    if only.is_empty() {
        let stale: Vec<&String> = listed.difference(&differ_at).collect();
        assert!(
            stale.is_empty(),
            "listed in tests/py_kernel_exceptions.txt but no longer different: {stale:?}"
        );
        assert!(
            r.rules_compared >= COMPARED_FLOOR,
            "{} rules compared, below the floor of {COMPARED_FLOOR}",
            r.rules_compared
        );
    }
    assert!(
        unlisted.is_empty(),
        "differences not in tests/py_kernel_exceptions.txt: {unlisted:?}"
    );
}
