//! Mutation test of the kernel campaign: each deliberate fault of the router's path
//! (`weir_router::mutants`: no TTL decrement, no reverse path filter, the wrong neighbour in
//! every adjacency, one gateway per port instead of each route's own) must make the campaign
//! find differences against the kernel. A campaign that still agrees with the kernel with a
//! fault in does not test that part of the path.
//!
//! Needs root and `nft` (as kernel_diff.rs); `WEIR_LAB_MUTANT_RULESETS` sets the rulesets per
//! fault (default 40). Its own process: the active fault is global.

use weir_lab::diff::{campaign, CampaignOptions};
use weir_lab::kernel;
use weir_router::mutants::{self, Mutant};

#[test]
fn every_fault_of_the_router_is_found() {
    if let Some(why) = kernel::unavailable() {
        println!("skipped: {why}");
        return;
    }
    let rulesets = std::env::var("WEIR_LAB_MUTANT_RULESETS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(40);
    let opts = CampaignOptions {
        rulesets,
        seed: 1,
        minimize: false,
        ..CampaignOptions::default()
    };
    let mut missed = Vec::new();
    for m in Mutant::ALL {
        mutants::set(Some(m));
        let r = campaign(&opts);
        mutants::set(None);
        let r = r.unwrap_or_else(|e| panic!("campaign with {m:?} failed: {e}"));
        println!(
            "{m:?}: {} packets, {} differences, {} explained",
            r.packets, r.differences, r.explained
        );
        if r.differences == 0 {
            missed.push(m);
        }
    }
    assert!(
        kernel::own_namespaces().is_empty(),
        "namespaces left behind: {:?}",
        kernel::own_namespaces()
    );
    assert!(
        missed.is_empty(),
        "the campaign agrees with the kernel with these faults in the router: {missed:?}"
    );
}
