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

use weir_lab::oracle::compare::blocks_for;
use weir_lab::pylab::{PyLab, Report};

/// Rules compared, at least (a ratchet: raise it as weir and the lab grow).
const COMPARED_FLOOR: usize = 3_860;

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
    let show: usize = std::env::var("WEIR_PY_SHOW")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let exceptions =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py_kernel_exceptions.txt");
    if let Err(e) = r.finish(
        "nft's rule tests",
        started.elapsed().as_secs_f64(),
        &exceptions,
        show,
        only.is_empty(),
        COMPARED_FLOOR,
    ) {
        panic!("{e}");
    }
}
