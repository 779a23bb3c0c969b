//! Maps filled from the packet path with a value (`update @m { ip saddr : meta mark }`, as
//! nftlb's persistence writes): a new element takes the value (nft_dynset's sreg_data), an
//! existing one keeps it (`update` refreshes its timeout only); lookups see it before the
//! catch-all. The same in the compiled and the linear evaluator.

use std::net::Ipv4Addr;
use weir_engine::{Meta, Mode};
use weir_lang::ir::Hook;
use weir_wire::build::Builder;

mod common;
use common::*;

fn from(src: Ipv4Addr) -> Vec<u8> {
    Builder::raw().ip(
        src,
        Ipv4Addr::new(198, 18, 0, 2),
        17,
        &[0, 1, 0, 2, 0, 8, 0, 0],
    )
}

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const SEC: u64 = 1_000_000_000;

const RULES: &str = "table ip t {
  map m {
    type ipv4_addr : mark
    flags dynamic,timeout
    timeout 10s
  }
  map c {
    type ipv4_addr : mark
    flags dynamic
    elements = { * : 0x40 }
  }
  chain in {
    type filter hook input priority 0;
    meta mark 0 meta mark set ip saddr map @m accept
    update @m { ip saddr : meta mark }
    meta mark 0x5 add @c { ip saddr : 0x50 }
    meta mark 0x6 meta mark set ip saddr map @c
  }
}
";

/// The mark a datagram from `src`, arriving with `mark` at `now`, leaves input with.
fn run(sf: &mut weir_engine::stateful::Stateful, src: Ipv4Addr, mark: u32, now: u64) -> u32 {
    let mut m = Meta::with_ifnames("lan0", "");
    m.mark = mark;
    mark_with(sf, Hook::Input, from(src), m, now)
}

#[test]
fn map_updated_with_a_value() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = engine(RULES, mode);
        // A's first packet (mark 7): no element, stored with 7
        assert_eq!(run(&mut sf, A, 7, SEC), 7, "{mode:?}");
        // a packet without a mark gets it from the map
        assert_eq!(run(&mut sf, A, 0, 2 * SEC), 7, "{mode:?}");
        // an update of an existing element keeps its value (and refreshes its timeout)
        assert_eq!(run(&mut sf, A, 9, 8 * SEC), 9, "{mode:?}");
        assert_eq!(run(&mut sf, A, 0, 17 * SEC), 7, "{mode:?}");
        // B has none: the lookup breaks, B is stored with 0
        assert_eq!(run(&mut sf, B, 0, 17 * SEC), 0, "{mode:?}");
        // expired (10 s after its last update): A is found no more
        assert_eq!(run(&mut sf, A, 0, 29 * SEC), 0, "{mode:?}");
    }
}

#[test]
fn added_elements_come_before_the_catchall() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = engine(RULES, mode);
        // the catch-all answers B and A alike
        assert_eq!(run(&mut sf, B, 6, SEC), 0x40, "{mode:?}");
        assert_eq!(run(&mut sf, A, 6, SEC), 0x40, "{mode:?}");
        // A added with 0x50 (the catch-all is no element of the map: the add is not a no-op)
        assert_eq!(run(&mut sf, A, 5, SEC), 5, "{mode:?}");
        assert_eq!(run(&mut sf, A, 6, SEC), 0x50, "{mode:?}");
        assert_eq!(run(&mut sf, B, 6, SEC), 0x40, "{mode:?}");
    }
}
