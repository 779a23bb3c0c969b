//! Verdict equivalence for iptables (issue 3): generated stateless iptables-save and
//! ip6tables-save rulesets, loaded in the kernel with `iptables-restore` / `ip6tables-restore`
//! in network namespaces and in weir with its importer, must give every generated packet the
//! same fate (and weir's compiled classifier the same as its linear reference), apart from the
//! differences listed in KNOWN_DIFFERENCES.md.
//!
//! Needs root (network namespaces), `nft` and `iptables` (`apt-get install -y iptables`);
//! otherwise it prints why and passes. `WEIR_LAB_IPT_RULESETS` sets the number of rulesets
//! (default 50), `WEIR_LAB_SEED` the seed (default 1), `WEIR_LAB_IPT_BACKEND` the backend
//! (`system`, `nft` or `legacy`; default: whatever `iptables-restore` is). Reproducers of
//! differences go to `$CARGO_TARGET_TMPDIR/weir-lab-repro`.

use weir_lab::diff::CampaignOptions;
use weir_lab::ipt::{campaign, IptCampaignOptions};
use weir_lab::kernel::{self, IptBackend};

fn env_num(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

fn backend() -> IptBackend {
    let v = std::env::var("WEIR_LAB_IPT_BACKEND").unwrap_or_default();
    IptBackend::parse(&v)
        .unwrap_or_else(|| panic!("WEIR_LAB_IPT_BACKEND={v:?}: system, nft or legacy"))
}

#[test]
fn kernel_iptables_and_weir_agree() {
    let backend = backend();
    if let Some(why) = kernel::unavailable_iptables(backend) {
        println!("skipped: {why}");
        return;
    }
    let rulesets = env_num("WEIR_LAB_IPT_RULESETS", 50) as usize;
    let seed = env_num("WEIR_LAB_SEED", 1);
    let repro = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("weir-lab-repro");
    let opts = IptCampaignOptions {
        campaign: CampaignOptions {
            rulesets,
            seed,
            repro_dir: Some(repro),
            ..CampaignOptions::default()
        },
        backend,
    };
    let r = campaign(&opts).unwrap_or_else(|e| panic!("campaign failed: {e}"));
    println!("{}", r.to_json());
    assert!(
        kernel::own_namespaces().is_empty(),
        "namespaces left behind: {:?}",
        kernel::own_namespaces()
    );
    assert_eq!(r.rulesets, rulesets);
    assert_eq!(
        r.refused_both,
        0,
        "generated rulesets both sides refuse:\n{}",
        r.examples.join("\n")
    );
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
        "{} unexplained differences with {} (reproducers: {:?}):\n{}",
        r.differences,
        r.iptables.as_deref().unwrap_or("iptables"),
        r.reproducers,
        r.examples.join("\n")
    );
}

#[test]
fn iptables_restore_errors_come_back_and_the_lab_is_torn_down() {
    let backend = backend();
    if let Some(why) = kernel::unavailable_iptables(backend) {
        println!("skipped: {why}");
        return;
    }
    let w = weir_lab::gen::world();
    let lab = kernel::Lab::new(&w.router, kernel::LabOptions::default()).expect("lab");
    let names = lab.names.clone();
    // iptables refuses `!` with a list of addresses (one rule per address would not mean it)
    let bad =
        "*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD ! -s 198.18.0.1,198.18.0.2 -j DROP\nCOMMIT\n";
    let e = lab.load_iptables(backend, Some(bad), None).unwrap_err();
    assert!(e.contains("not allowed with multiple"), "{e}");
    // and weir's importer refuses it too
    let i = weir_lab::gen_ipt::import(Some(bad), None);
    assert!(i.is_err(), "{i:?}");
    let good = "*filter\n:FORWARD DROP [0:0]\n-A FORWARD -p tcp --dport 22 -j ACCEPT\nCOMMIT\n";
    lab.load_iptables(
        backend,
        Some(good),
        Some(good.replace("DROP", "ACCEPT").as_str()),
    )
    .expect("loads");
    lab.flush_iptables(backend).expect("flush");
    drop(lab);
    for n in &names {
        assert!(
            !std::path::Path::new(&format!("/run/netns/{n}")).exists(),
            "{n} left behind"
        );
    }
}
