//! Whole rulesets against the kernel, rule by rule in context (`weir_lab::pylab::dumps`): every
//! `nft list ruleset` dump of nftables' shell tests (`../shared/nftables-tests/shell/*/dumps`)
//! and every ruleset nftlb's tests expect it to emit (`../shared/nftlb-tests/config_exec/*/
//! output.nft`),
//! each rule alone in its table (the table's sets, maps, objects and chains kept), loaded by
//! Debian's nft into the lab's router namespace and tried on packets generated from the
//! rule's own bytecode (`nft --debug=netlink`); the kernel's traces and weir's engine must
//! agree, or the difference is listed with its reason in `tests/dump_kernel_exceptions.txt`.
//! Needs root, `ip` and `nft`; says why and passes when they are missing.
//!
//! `WEIR_PY_ONLY=PREFIX` runs the dumps whose path (`sets/dumps/0001...`,
//! `nftlb-tests/config_exec/...`) starts with PREFIX;
//! `WEIR_PY_SHOW=N` prints N differing rules (default 20).

use std::path::PathBuf;
use weir_lab::pylab::{dumps, PyLab, Report};

/// Rules compared, at least (a ratchet).
const COMPARED_FLOOR: usize = 1_450;

const SEED: u64 = 0x6475_6d70;
const ROUNDS: usize = 2;

fn shell_dir() -> Option<PathBuf> {
    let d = match std::env::var_os("WEIR_NFT_TESTS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/nftables-tests"),
    };
    d.join("shell").is_dir().then(|| d.join("shell"))
}

/// nftlb's test suite: the ruleset nftlb emits for each farm (`config_exec/*/output.nft`).
fn nftlb_files() -> Vec<PathBuf> {
    let d =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/nftlb-tests/config_exec");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&d)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path().join("output.nft"))
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn dump_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(cats) = std::fs::read_dir(dir) else {
        return out;
    };
    for c in cats.flatten() {
        if let Ok(rd) = std::fs::read_dir(c.path().join("dumps")) {
            for f in rd.flatten() {
                if f.path().extension().is_some_and(|e| e == "nft") {
                    out.push(f.path());
                }
            }
        }
    }
    out.sort();
    out
}

#[test]
fn shell_dumps_against_the_kernel() {
    let Some(shell) = shell_dir() else {
        println!(
            "skipped: nftables' tests not found (../shared/nftables-tests or $WEIR_NFT_TESTS)"
        );
        return;
    };
    if let Some(why) = weir_lab::kernel::unavailable() {
        println!("skipped: the kernel lab cannot run here: {why}");
        return;
    }
    let mut lab = PyLab::new().unwrap_or_else(|e| panic!("the kernel lab: {e}"));
    // whole rulesets: every chain sees tracked packets (ct state new, each the first of its
    // connection), as their `ct state` rules expect
    lab.tracked = true;
    weir_lab::sys::pin_to_current_cpu();
    let only = std::env::var("WEIR_PY_ONLY").unwrap_or_default();
    let mut r = Report::default();
    let started = std::time::Instant::now();
    let (mut files, mut rules) = (0, 0);
    let shared = shell
        .parent()
        .and_then(|p| p.parent())
        .map(PathBuf::from)
        .unwrap_or_default();
    let all: Vec<(String, PathBuf)> = dump_files(&shell)
        .into_iter()
        .map(|p| {
            (
                p.strip_prefix(&shell)
                    .unwrap_or(&p)
                    .to_string_lossy()
                    .into_owned(),
                p,
            )
        })
        .chain(nftlb_files().into_iter().map(|p| {
            let name = p
                .strip_prefix(&shared)
                .unwrap_or(&p)
                .to_string_lossy()
                .into_owned();
            (name, p)
        }))
        .collect();
    for (name, p) in all {
        if !name.starts_with(&only) {
            continue;
        }
        let src = std::fs::read_to_string(&p).unwrap();
        files += 1;
        for d in dumps::rules(&name, &src) {
            rules += 1;
            if let Err(e) = lab.compare_dump_rule(&mut r, &d, SEED, ROUNDS) {
                panic!("{}: the lab failed: {e}", d.at);
            }
        }
    }
    let show: usize = std::env::var("WEIR_PY_SHOW")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let exceptions =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/dump_kernel_exceptions.txt");
    if let Err(e) = r.finish(
        &format!("{files} rulesets, {rules} rules"),
        started.elapsed().as_secs_f64(),
        &exceptions,
        show,
        only.is_empty(),
        COMPARED_FLOOR,
    ) {
        panic!("{e}");
    }
}
