//! Any text given as a ruleset must load or give diagnostics, never panic, hang or blow up;
//! the diagnostics must render against the sources they point into.
//!
//! Run: `cargo +nightly fuzz run parse_ruleset --fuzz-dir crates/weir-lang/fuzz` (or
//! `.ci/fuzz.sh`). The seeds are in `corpus/parse_ruleset/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // `include "file"` really reads the file: keep the fuzzer away from endless or blocking
    // ones (/dev/zero, /dev/stdin, /proc/self/fd/0, ...). Every other include path, existing
    // or not, is still exercised.
    if text.contains("include") && ["dev", "proc", "sys"].iter().any(|w| text.contains(w)) {
        return;
    }
    match weir_lang::load_str("fuzz.nft", &text) {
        Ok((ruleset, warnings)) => {
            let _ = weir_lang::diag::render_all(&warnings, &ruleset.sources);
            let _ = ruleset.summary();
        }
        Err((sources, diags)) => {
            assert!(!diags.is_empty(), "load_str failed without a diagnostic");
            let _ = weir_lang::diag::render_all(&diags, &sources);
        }
    }
});
