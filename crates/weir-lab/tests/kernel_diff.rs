//! The differential campaign against the kernel: generated stateless rulesets and
//! conversations through nftables in network namespaces and through weir's router model must
//! agree on every packet, apart from the differences listed in KNOWN_DIFFERENCES.md.
//!
//! Needs root (network namespaces) and `nft`; otherwise it prints why and passes.
//! `WEIR_LAB_RULESETS` sets the number of rulesets (default 50), `WEIR_LAB_SEED` the seed
//! (default 1). Reproducers of differences go to `$CARGO_TARGET_TMPDIR/weir-lab-repro`.

use weir_lab::diff::{campaign, CampaignOptions};
use weir_lab::kernel;

fn env_num(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

#[test]
fn kernel_and_weir_agree() {
    if let Some(why) = kernel::unavailable() {
        println!("skipped: {why}");
        return;
    }
    let rulesets = env_num("WEIR_LAB_RULESETS", 50) as usize;
    let seed = env_num("WEIR_LAB_SEED", 1);
    let repro = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("weir-lab-repro");
    let opts = CampaignOptions {
        rulesets,
        seed,
        repro_dir: Some(repro),
        ..CampaignOptions::default()
    };
    let r = campaign(&opts).unwrap_or_else(|e| panic!("campaign failed: {e}"));
    println!("{}", r.to_json());
    assert!(
        kernel::own_namespaces().is_empty(),
        "namespaces left behind: {:?}",
        kernel::own_namespaces()
    );
    assert_eq!(r.rulesets, rulesets);
    assert!(
        r.packets >= rulesets * 20,
        "too few packets injected: {}",
        r.packets
    );
    assert_eq!(
        r.late_frames, 0,
        "frames arrived after their packet's window: the barrier failed"
    );
    assert!(
        r.differences == 0,
        "{} unexplained differences (reproducers: {:?}):\n{}",
        r.differences,
        r.reproducers,
        r.examples.join("\n")
    );
}

#[test]
fn lab_is_torn_down_after_an_error() {
    if let Some(why) = kernel::unavailable() {
        println!("skipped: {why}");
        return;
    }
    let w = weir_lab::gen::world();
    let lab = kernel::Lab::new(&w.router, kernel::LabOptions::default()).expect("lab");
    let names = lab.names.clone();
    assert!(names
        .iter()
        .all(|n| std::path::Path::new(&format!("/run/netns/{n}")).exists()));
    // nft's own message comes back for a ruleset it refuses
    let bad = lab.scratch().join("bad.nft");
    std::fs::write(&bad, "table inet t {\n chain c {\n  type filter hook forward priority 0;\n  tcp dport 22 udp dport 53 accept\n }\n}\n").unwrap();
    let e = lab.load(&bad).unwrap_err();
    assert!(e.contains("conflicting protocols"), "{e}");
    drop(lab);
    for n in &names {
        assert!(
            !std::path::Path::new(&format!("/run/netns/{n}")).exists(),
            "{n} left behind"
        );
    }
}
