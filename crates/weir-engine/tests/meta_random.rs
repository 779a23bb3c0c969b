//! `meta random` (nft_meta's prandom_u32): a new number each time a rule reads it, from the
//! worker's generator; the numbers are not the kernel's, so the tests look at their spread,
//! in the compiled and the linear evaluator.

use weir_engine::Mode;

mod common;
use common::*;

const RULES: &str = "table ip t {
  chain c {
    type filter hook input priority 0;
    meta random < 2147483648 meta mark set meta mark | 0x1
    meta random { 0-1073741823 } meta mark set meta mark | 0x2
    meta random 1 meta mark set meta mark | 0x4
  }
}
";

#[test]
fn meta_random_spreads() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = engine(RULES, mode);
        let (mut half, mut quarter, mut one) = (0, 0, 0);
        for _ in 0..4000 {
            let m = mark(&mut sf, udp4());
            half += (m & 0x1 != 0) as u32;
            quarter += (m & 0x2 != 0) as u32;
            one += (m & 0x4 != 0) as u32;
        }
        // each rule reads its own number: about half, a quarter, (almost surely) none
        assert!((1700..2300).contains(&half), "{mode:?}: {half}");
        assert!((800..1200).contains(&quarter), "{mode:?}: {quarter}");
        assert!(one <= 1, "{mode:?}: {one}");
    }
}

#[test]
fn meta_random_as_a_value() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = engine(
            "table ip t {
  chain c {
    type filter hook input priority 0;
    meta mark set meta random
  }
}
",
            mode,
        );
        let marks: std::collections::HashSet<u32> =
            (0..100).map(|_| mark(&mut sf, udp4())).collect();
        assert!(marks.len() > 95, "{mode:?}: {}", marks.len());
    }
}
