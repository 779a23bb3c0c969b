//! Any text given as iptables-save output (and any `ipset save` text) must import or give
//! errors, never panic or hang; what imports must be nft text that weir loads (the importer
//! only writes what the checker accepts).
//!
//! Run: `cargo +nightly fuzz run import_iptables --fuzz-dir crates/weir-lang/fuzz` (or
//! `.ci/fuzz.sh`). The seeds are in `corpus/import_iptables/`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_lang::iptables::{import_iptables, IptOptions};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // the first line may be an ipset save file, split off by a line "--"
    let (ipsets, rules) = match text.split_once("\n--\n") {
        Some((a, b)) => (Some(a.to_string()), b),
        None => (None, &*text),
    };
    for (v6, skip) in [(false, false), (true, true)] {
        let opts = IptOptions {
            skip_unsupported: skip,
            family_v6: v6,
            ipsets: ipsets.clone(),
        };
        match import_iptables(rules, "fuzz.rules", &opts) {
            Ok(imp) => {
                if let Err((sources, diags)) = weir_lang::load_str("imported.nft", &imp.nft) {
                    panic!(
                        "the import does not load:\n{}\n{}",
                        imp.nft,
                        weir_lang::diag::render_all(&diags, &sources)
                    );
                }
            }
            Err(errors) => assert!(!errors.is_empty(), "import failed without an error"),
        }
    }
});
