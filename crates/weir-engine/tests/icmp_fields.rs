//! The fixed ICMP header fields of one message type each (`icmp gateway`, `icmp mtu`,
//! `icmpv6 mtu`), read as nft reads them: behind the `icmp type` dependency nft adds
//! (redirect, destination unreachable, packet too big), the same in the compiled and the
//! linear evaluator.

use std::net::{Ipv4Addr, Ipv6Addr};
use weir_engine::Mode;
use weir_wire::build::Builder;

mod common;
use common::*;

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const A6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const B6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);

/// An ICMP header of this type and code with these 4 bytes of "rest of header", and 8 bytes
/// of quoted data.
fn icmp(t: u8, code: u8, rest: [u8; 4]) -> Vec<u8> {
    let mut h = vec![t, code, 0, 0];
    h.extend(rest);
    h.extend([0x45, 0, 0, 28, 0, 0, 0, 0]);
    h
}

#[test]
fn icmp_gateway_and_mtu() {
    let rules = "table ip t {
  chain c {
    type filter hook input priority 0;
    icmp gateway 3323070209 meta mark set meta mark | 0x1
    icmp gateway != 33-45 meta mark set meta mark | 0x2
    icmp mtu 1400 meta mark set meta mark | 0x4
    icmp mtu { 33, 55, 1280 } meta mark set meta mark | 0x8
    icmp mtu != 1400 meta mark set meta mark | 0x10
  }
}
";
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = engine(rules, mode);
        // a redirect to 198.18.7.1 (the field is an integer: 0xc6120701)
        let p = Builder::raw().ip(A, B, 1, &icmp(5, 1, [198, 18, 7, 1]));
        assert_eq!(mark(&mut sf, p), 0x1 | 0x2, "{mode:?}");
        // a gateway in the range: only `!= 33-45` fails
        let p = Builder::raw().ip(A, B, 1, &icmp(5, 1, [0, 0, 0, 40]));
        assert_eq!(mark(&mut sf, p), 0, "{mode:?}");
        // fragmentation needed, MTU 1400 (bytes 6-7); the gateway rules do not match
        let p = Builder::raw().ip(A, B, 1, &icmp(3, 4, [0, 0, 0x05, 0x78]));
        assert_eq!(mark(&mut sf, p), 0x4, "{mode:?}");
        let p = Builder::raw().ip(A, B, 1, &icmp(3, 4, [0, 0, 0x05, 0x00]));
        assert_eq!(mark(&mut sf, p), 0x8 | 0x10, "{mode:?}");
        // the same bytes in a message of another type (time exceeded, an echo request) match
        // neither, `!=` included: the type dependency fails first
        let p = Builder::raw().ip(A, B, 1, &icmp(11, 0, [198, 18, 0x05, 0x78]));
        assert_eq!(mark(&mut sf, p), 0, "{mode:?}");
        let p = Builder::raw().ip(A, B, 1, &icmp(8, 0, [198, 18, 7, 1]));
        assert_eq!(mark(&mut sf, p), 0, "{mode:?}");
        // a header cut short: no field read
        let p = Builder::raw().ip(A, B, 1, &[3, 4, 0, 0, 0, 0, 0x05]);
        assert_eq!(mark(&mut sf, p), 0, "{mode:?}");
    }
}

#[test]
fn icmpv6_mtu() {
    let rules = "table ip6 t {
  chain c {
    type filter hook input priority 0;
    icmpv6 mtu 1280 meta mark set meta mark | 0x1
    icmpv6 mtu != 33-45 meta mark set meta mark | 0x2
    icmpv6 type packet-too-big icmpv6 mtu 1500 meta mark set meta mark | 0x4
  }
}
";
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = engine(rules, mode);
        // packet too big: the MTU is bytes 4-7
        let p = Builder::raw().ip(A6, B6, 58, &icmp(2, 0, [0, 0, 0x05, 0x00]));
        assert_eq!(mark(&mut sf, p), 0x1 | 0x2, "{mode:?}");
        let p = Builder::raw().ip(A6, B6, 58, &icmp(2, 0, [0, 0, 0x05, 0xdc]));
        assert_eq!(mark(&mut sf, p), 0x2 | 0x4, "{mode:?}");
        let p = Builder::raw().ip(A6, B6, 58, &icmp(2, 0, [0, 0, 0, 40]));
        assert_eq!(mark(&mut sf, p), 0, "{mode:?}");
        // an echo request with the same bytes: no MTU
        let p = Builder::raw().ip(A6, B6, 58, &icmp(128, 0, [0, 0, 0x05, 0x00]));
        assert_eq!(mark(&mut sf, p), 0, "{mode:?}");
    }
}
