//! Tunnel headers and the packets inside them in rules (`udp dport 4789 vxlan vni 10`,
//! `vxlan ip saddr`, `gre ip saddr`, `gretap ether saddr`), read as the kernel's nft_inner
//! reads them, the same in the compiled and the linear evaluator.

use std::net::{IpAddr, Ipv4Addr};
use weir_engine::Mode;
use weir_wire::build::{tcp_segment, udp_datagram, Builder, Tcp};

mod common;
use common::*;

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

fn ip4(a: [u8; 4]) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a))
}

/// An Ethernet frame with a TCP SYN from `src`:1234 to 10.0.0.9:`dport`.
fn inner_syn(src: [u8; 4], dport: u16) -> Vec<u8> {
    let (s, d) = (ip4(src), ip4([10, 0, 0, 9]));
    let seg = tcp_segment(s, d, &Tcp::new(1234, dport, 0x02), &[]);
    Builder::new()
        .macs([0x62, 0x87, 0x4d, 0xd6, 0x19, 0x05], [2, 0, 0, 0, 0, 2])
        .ip(s, d, 6, &seg)
}

/// A raw IPv4 packet: UDP to `port` carrying a VXLAN header (VNI `vni`) and `inner`.
fn vxlan(port: u16, vni: u32, inner: &[u8]) -> Vec<u8> {
    let mut p = vec![0x08, 0, 0, 0];
    p.extend_from_slice(&(vni << 8).to_be_bytes());
    p.extend_from_slice(inner);
    let udp = udp_datagram(A.into(), B.into(), 40000, port, &p);
    Builder::raw().ip(A, B, 17, &udp)
}

/// A raw IPv4 packet: GRE (version 0, no options) of protocol type `ptype` carrying `inner`.
fn gre(ptype: u16, inner: &[u8]) -> Vec<u8> {
    let mut p = vec![0, 0];
    p.extend_from_slice(&ptype.to_be_bytes());
    p.extend_from_slice(inner);
    Builder::raw().ip(A, B, 47, &p)
}

const RULES: &str = "table inet t {
  chain c {
    type filter hook input priority 0;
    udp dport 4789 vxlan vni 10 meta mark set meta mark | 0x1
    udp dport 4789 vxlan ip saddr 10.141.11.2 meta mark set meta mark | 0x2
    udp dport 4789 vxlan tcp dport 80 vxlan tcp flags syn meta mark set meta mark | 0x4
    udp dport 4789 vxlan ether saddr 62:87:4d:d6:19:05 meta mark set meta mark | 0x8
    udp dport 4789 vxlan ip saddr . vxlan ip daddr { 10.141.11.2 . 10.0.0.9 } meta mark set meta mark | 0x10
    udp dport 4789 vxlan meta l4proto tcp meta mark set meta mark | 0x20
    gre ip saddr 10.141.11.0/24 meta mark set meta mark | 0x100
    gre version 0 meta mark set meta mark | 0x200
    gre tcp dport 80 meta mark set meta mark | 0x400
    gretap ether saddr 62:87:4d:d6:19:05 meta mark set meta mark | 0x800
    gretap ip saddr 10.141.11.2 meta mark set meta mark | 0x1000
  }
}
";

#[test]
fn vxlan_and_gre_inner_packets_in_rules() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = engine(RULES, mode);
        let syn = inner_syn([10, 141, 11, 2], 80);
        // a VXLAN packet with an inner TCP SYN: every VXLAN rule
        assert_eq!(
            mark(&mut sf, vxlan(4789, 10, &syn)),
            0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x20
        );
        // another VNI, another inner source, another inner port
        let other = inner_syn([10, 141, 12, 2], 81);
        assert_eq!(mark(&mut sf, vxlan(4789, 11, &other)), 0x8 | 0x20);
        // not to the VXLAN port: none (the outer packet is not matched as the inner one)
        assert_eq!(mark(&mut sf, vxlan(4790, 10, &syn)), 0);
        // an inner frame that is not IP: the inner expression gives up, even for `vni`
        let mut arp = syn.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(mark(&mut sf, vxlan(4789, 10, &arp)), 0);
        // cut short inside the inner IPv4 header
        assert_eq!(mark(&mut sf, vxlan(4789, 10, &syn[..30])), 0);

        // GRE with an inner IPv4 packet (no link layer)
        let ip = &syn[14..];
        assert_eq!(mark(&mut sf, gre(0x0800, ip)), 0x100 | 0x200 | 0x400);
        let ip2 = &other[14..];
        assert_eq!(mark(&mut sf, gre(0x0800, ip2)), 0x200);
        // GRETAP: an Ethernet frame inside
        assert_eq!(mark(&mut sf, gre(0x6558, &syn)), 0x200 | 0x800 | 0x1000);
        // GRE version 1: no inner packet, and `gre version 0` no longer holds
        let mut v1 = gre(0x0800, ip);
        v1[21] = 1;
        assert_eq!(mark(&mut sf, v1), 0);
        // the plain outer SYN is no tunnel
        let plain = Builder::raw().ip(A, B, 6, &syn[34..]);
        assert_eq!(mark(&mut sf, plain), 0);
    }
}

#[test]
fn inner_packets_cannot_be_written() {
    let r = weir_lang::load_str(
        "t.nft",
        "table ip t { chain c { udp dport 4789 vxlan ip saddr set 1.2.3.4; } }",
    );
    assert!(r.is_err());
    // vxlan is found by its UDP port
    let r = weir_lang::load_str("t.nft", "table ip t { chain c { vxlan vni 10; } }");
    assert!(r.is_err());
}
