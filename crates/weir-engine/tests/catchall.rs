//! Catch-all set and map elements (`*`): a map's `* : VALUE` answers a key no other element
//! has, a set with `*` holds every key (nft_set_catchall_lookup, after the set's own lookup
//! misses); the same in the compiled and the linear evaluator.

use std::net::Ipv4Addr;
use weir_engine::Mode;
use weir_wire::build::Builder;

mod common;
use common::*;

/// A UDP datagram from `src`.
fn from(src: Ipv4Addr) -> Vec<u8> {
    Builder::raw().ip(
        src,
        Ipv4Addr::new(198, 18, 0, 2),
        17,
        &[0, 1, 0, 2, 0, 8, 0, 0],
    )
}

const RULES: &str = "table ip t {
  set s6 {
    type ipv4_addr
    elements = { 192.168.3.5, * }
  }
  map m {
    type ipv4_addr : mark
    elements = { 1.1.1.1 : 0x10, 2.2.2.0/24 : 0x20, * : 0x40 }
    flags interval
  }
  chain c {
    type filter hook input priority 0;
    meta mark set ip saddr map @m
    ip saddr @s6 meta mark set meta mark | 0x1
    ip saddr vmap { 1.1.1.1 : continue, * : jump j }
    meta mark set meta mark | 0x4
  }
  chain j {
    meta mark set meta mark | 0x2
  }
}
";

#[test]
fn catchall_elements() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = engine(RULES, mode);
        // an element of its own: its data, not the catch-all's; the vmap continues
        assert_eq!(
            mark(&mut sf, from(Ipv4Addr::new(1, 1, 1, 1))),
            0x10 | 0x1 | 0x4
        );
        // an interval element
        assert_eq!(
            mark(&mut sf, from(Ipv4Addr::new(2, 2, 2, 9))),
            0x20 | 0x1 | 0x2 | 0x4
        );
        // no element: the catch-all answers (the map, the set, the vmap's jump)
        assert_eq!(
            mark(&mut sf, from(Ipv4Addr::new(10, 0, 0, 1))),
            0x40 | 0x1 | 0x2 | 0x4
        );
    }
}

/// An inline map with a catch-all, and a leading match the classifier indexes: the catch-all
/// keeps the rule's candidates whole (its element is not in the index).
#[test]
fn inline_catchall_with_the_classifier() {
    let rules = "table ip t {
  chain c {
    type filter hook input priority 0;
    ip saddr 10.0.0.0/8 meta mark set ip saddr map { 10.0.0.1 : 0x1, * : 0x2 }
    meta mark 0 ip saddr vmap { 10.0.0.1 : accept, * : continue }
    meta mark 0 meta mark set 0x8
  }
}
";
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = engine(rules, mode);
        assert_eq!(mark(&mut sf, from(Ipv4Addr::new(10, 0, 0, 1))), 0x1);
        assert_eq!(mark(&mut sf, from(Ipv4Addr::new(10, 9, 0, 1))), 0x2);
        assert_eq!(mark(&mut sf, from(Ipv4Addr::new(11, 0, 0, 1))), 0x8);
    }
}
