//! IPv6 extension headers in rules (`exthdr hbh exists`, `frag more-fragments 1`, `rt type
//! 4`, ...): found as the kernel's ipv6_find_hdr finds them, the same in the compiled and the
//! linear evaluator.

use std::net::Ipv6Addr;
use weir_engine::Mode;

mod common;
use common::*;

/// An IPv6 packet with these extension headers (type, bytes after the next-header byte)
/// then a UDP header.
fn packet(exts: &[(u8, &[u8])]) -> Vec<u8> {
    let a: Ipv6Addr = "2001:db8::1".parse().unwrap();
    let b: Ipv6Addr = "2001:db8::2".parse().unwrap();
    let mut p = vec![0x60, 0, 0, 0, 0, 0, 0, 64];
    p.extend_from_slice(&a.octets());
    p.extend_from_slice(&b.octets());
    p[6] = exts.first().map_or(17, |e| e.0);
    for (i, (_, body)) in exts.iter().enumerate() {
        p.push(exts.get(i + 1).map_or(17, |e| e.0));
        p.extend_from_slice(body);
    }
    p.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0, 8, 0, 0]);
    let plen = (p.len() - 40) as u16;
    p[4..6].copy_from_slice(&plen.to_be_bytes());
    p
}

const RULES: &str = "table ip6 t {
  chain c {
    type filter hook input priority 0;
    exthdr hbh exists meta mark set meta mark | 0x1
    exthdr frag missing meta mark set meta mark | 0x2
    frag more-fragments 1 meta mark set meta mark | 0x4
    rt type 4 rt seg-left 1 meta mark set meta mark | 0x8
    srh tag 0x1234 meta mark set meta mark | 0x10
    dst nexthdr udp meta mark set meta mark | 0x20
    frag frag-off 0 meta mark set meta mark | 0x40
    rt hdrlength 1 meta mark set meta mark | 0x80
  }
}
";

#[test]
fn extension_headers_in_rules() {
    let hbh: &[u8] = &[0, 1, 4, 0, 0, 0, 0];
    let rt: &[u8] = &[0, 4, 1, 0, 0, 0x12, 0x34];
    let frag_first: &[u8] = &[0, 0x00, 0x01, 0, 0, 0, 7];
    let frag_later: &[u8] = &[0, 0x00, 0x09, 0, 0, 0, 7];
    let dst: &[u8] = &[0, 1, 4, 0, 0, 0, 0];
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = engine(RULES, mode);
        assert_eq!(mark(&mut sf, packet(&[])), 0x2);
        assert_eq!(mark(&mut sf, packet(&[(0, hbh)])), 0x1 | 0x2);
        assert_eq!(
            mark(
                &mut sf,
                packet(&[(0, hbh), (43, rt), (44, frag_first), (60, dst)])
            ),
            0x1 | 0x4 | 0x8 | 0x10 | 0x20 | 0x40
        );
        // a later fragment: the destination options behind it are not looked at
        assert_eq!(
            mark(&mut sf, packet(&[(43, rt), (44, frag_later), (60, dst)])),
            0x4 | 0x8 | 0x10
        );
        // a routing header the packet ends inside: ipv6_find_hdr reads its first 4 bytes
        // (`struct ipv6_rt_hdr`) before it looks further or says it found it
        let mut p = packet(&[]);
        p.truncate(40);
        p[6] = 43;
        p.extend_from_slice(&[17, 1]);
        p[4..6].copy_from_slice(&2u16.to_be_bytes());
        assert_eq!(mark(&mut sf, p.clone()), 0x2);
        p.extend_from_slice(&[0, 0]);
        p[4..6].copy_from_slice(&4u16.to_be_bytes());
        assert_eq!(mark(&mut sf, p), 0x2 | 0x80);
    }
}
