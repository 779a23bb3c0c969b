//! nftables' own rule tests through a bytecode oracle (`weir_lab::oracle`): each `;ok` rule of
//! the `ip`, `ip6`, `inet` and `netdev` families whose compiled form (`.t.payload*`) the oracle
//! fully knows is evaluated by the oracle and by weir's engine on packets generated from the
//! bytecode (a fixed seed); every difference must be listed with its reason in
//! `tests/payload_oracle_exceptions.txt`, and the rules compared must not fall under the floor.
//!
//! `WEIR_ORACLE_SHOW=N` prints N differing rules (default 20), `WEIR_ORACLE_BYTECODE=1` their
//! expressions; `WEIR_ORACLE_ONLY=PREFIX` runs the files whose path (`ip/ip.t`) starts with
//! PREFIX; `WEIR_ORACLE_SEED=N` / `WEIR_ORACLE_ROUNDS=N` search further (the exceptions'
//! staleness and the floor are checked with the defaults only); `WEIR_ORACLE_NOBLOCK=1`,
//! `WEIR_ORACLE_NOHIT=1`, `WEIR_ORACLE_UNDELIVERABLE=1` list the rules without a block, without
//! a hit packet, with packets the hook would not see. docs/oracle.md says more.

#[path = "../../weir-lang/tests/common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use weir_lab::oracle::compare::{blocks_for, compare_case, Report};

/// Rules compared, at least (a ratchet: raise it as the oracle grows).
const COMPARED_FLOOR: usize = 4_100;

const SEED: u64 = 0x6f72_6163_6c65;
/// Hit packets generated a rule (each with its misses and variants).
const ROUNDS: usize = 4;

#[test]
fn payload_oracle() {
    let Some(py) = common::dir() else {
        println!(
            "skipped: nftables' tests not found (../shared/nftables-tests or $WEIR_NFT_TESTS)"
        );
        return;
    };
    let only = std::env::var("WEIR_ORACLE_ONLY").unwrap_or_default();
    // another seed or more hit packets a rule: a search beyond what CI runs (the exceptions
    // and the floor are checked only with the defaults)
    let seed: u64 = std::env::var("WEIR_ORACLE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SEED);
    let rounds: usize = std::env::var("WEIR_ORACLE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ROUNDS);
    let defaults = seed == SEED && rounds == ROUNDS;
    let mut r = Report::default();
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
        let mut blocks = blocks_for(&p);
        for c in common::cases(&name, &src) {
            if !c.ok {
                continue;
            }
            let at = format!("{}:{}", c.file, c.line);
            // the table's named objects, for the rule's `objref`s
            weir_lab::oracle::objects::fill_case(&mut blocks, &c.rule, &c.text);
            compare_case(&mut r, &at, &c.rule, &c.text, &blocks, seed, rounds);
        }
    }
    let skipped: usize = r.skipped.values().sum();
    println!(
        "payload oracle: {} rules compared ({} with a hit packet, {} with the bytecode of another family), {} packets ({} matching), {} differences; {} generated packets not deliverable; {skipped} rules not compared",
        r.rules_compared,
        r.rules_with_hit,
        r.borrowed,
        r.packets,
        r.packets_matching,
        r.differences.len(),
        r.packets_undeliverable
    );
    let mut top: Vec<_> = r.skipped.iter().collect();
    top.sort_by_key(|t| std::cmp::Reverse(*t.1));
    let (unevaluated, other): (Vec<_>, Vec<_>) = top
        .into_iter()
        .partition(|(why, _)| why.starts_with("weir does not evaluate"));
    println!("rules not compared, by reason:");
    for (why, n) in &other {
        println!("  {n:5}  {why}");
    }
    println!(
        "  {:5}  weir does not evaluate the construct yet (Expr::Unevaluated), the most common:",
        unevaluated.iter().map(|t| *t.1).sum::<usize>()
    );
    for (why, n) in unevaluated.iter().take(12) {
        println!(
            "         {n:5}  {}",
            why.trim_start_matches("weir does not evaluate ")
        );
    }
    let listed: BTreeSet<String> = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/payload_oracle_exceptions.txt"),
    )
    .unwrap_or_default()
    .lines()
    .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    .filter_map(|l| l.split_whitespace().next().map(str::to_string))
    .collect();
    let show: usize = std::env::var("WEIR_ORACLE_SHOW")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let differ_at: BTreeSet<String> = r.differences.iter().map(|d| d.at.clone()).collect();
    let unlisted: Vec<&String> = differ_at.difference(&listed).collect();
    println!(
        "differences ({} packets, {} rules; first {show} shown):",
        r.differences.len(),
        differ_at.len()
    );
    let mut shown = BTreeSet::new();
    for d in &r.differences {
        if shown.len() >= show {
            break;
        }
        if shown.insert(d.at.clone()) {
            println!("  {d}");
        }
    }
    if only.is_empty() && defaults {
        let stale: Vec<&String> = listed.difference(&differ_at).collect();
        assert!(
            stale.is_empty(),
            "listed in tests/payload_oracle_exceptions.txt but no longer different: {stale:?}"
        );
        assert!(
            r.rules_compared >= COMPARED_FLOOR,
            "{} rules compared, below the floor of {COMPARED_FLOOR}",
            r.rules_compared
        );
    }
    assert!(
        unlisted.is_empty(),
        "differences not in tests/payload_oracle_exceptions.txt: {unlisted:?}"
    );
}
