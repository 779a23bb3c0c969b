//! `meta time`, `meta day` and `meta hour` read the engine's wall clock (UTC, as the
//! kernel's nft_meta with its timezone 0): `now_ns` plus the offset the daemon sets
//! ([`Stateful::set_wall_offset`]), so tests set it.

use weir_engine::stateful::Stateful;
use weir_engine::{Meta, Mode};
use weir_lang::ir::Hook;

mod common;
use common::*;

const RULES: &str = "table ip t {
  chain c {
    type filter hook input priority 0;
    meta hour \"17:00\"-\"19:00\" meta mark set meta mark | 0x1
    meta day { Saturday, Sunday } meta mark set meta mark | 0x2
    meta time >= \"2026-12-05 00:00:00\" meta mark set meta mark | 0x4
    meta day Friday meta hour < \"12:00\" meta mark set meta mark | 0x8
  }
}
";

fn mark_at(sf: &mut Stateful, wall_s: i64) -> u32 {
    // the hooks' clock is monotonic (since boot); the offset makes it the wall clock
    let now_ns = 5_000_000_000u64;
    sf.set_wall_offset(wall_s * 1_000_000_000 - now_ns as i64);
    mark_with(
        sf,
        Hook::Input,
        udp4(),
        Meta::with_ifnames("lan0", ""),
        now_ns,
    )
}

#[test]
fn time_day_and_hour_read_the_engines_wall_clock() {
    // 2026-12-05 is a Saturday: 1_796_428_800 is its midnight (UTC)
    let sat = 1_796_428_800;
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = engine(RULES, mode);
        assert_eq!(mark_at(&mut sf, sat + 18 * 3600), 0x1 | 0x2 | 0x4);
        assert_eq!(mark_at(&mut sf, sat + 20 * 3600), 0x2 | 0x4);
        // the Friday before, 09:30, and a year earlier
        assert_eq!(mark_at(&mut sf, sat - 86_400 + 9 * 3600 + 1800), 0x8);
        assert_eq!(mark_at(&mut sf, sat - 365 * 86_400 + 17 * 3600), 0x1);
        // 364 days earlier (52 weeks): a Saturday again, 2025-12-06
        assert_eq!(mark_at(&mut sf, sat - 364 * 86_400 + 3600), 0x2);
    }
}

/// A time of day across midnight matches outside the range between its ends, the ends
/// themselves excluded, as nft compiles it (`range neq 02:00 21:00`).
#[test]
fn an_hour_range_across_midnight() {
    let rules = "table ip t {
  chain c {
    type filter hook input priority 0;
    meta hour \"21:00\"-\"02:00\" meta mark set 0x1
    meta hour != \"21:00\"-\"02:00\" meta mark set meta mark | 0x2
  }
}
";
    let sat = 1_796_428_800;
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = engine(rules, mode);
        for (h, m) in [
            (22, 0x1),
            (0, 0x1),
            (1, 0x1),
            (12, 0x2),
            (3, 0x2),
            (20, 0x2),
        ] {
            assert_eq!(mark_at(&mut sf, sat + h * 3600 + 60), m, "{h}:01");
        }
        // the ends: outside (nft's boundary)
        assert_eq!(mark_at(&mut sf, sat + 21 * 3600), 0x2);
        assert_eq!(mark_at(&mut sf, sat + 2 * 3600), 0x2);
    }
}
