use super::*;
use crate::build::{tcp_segment, udp_datagram, Builder, Tcp};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

fn v4(a: [u8; 4]) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a))
}

/// An inner Ethernet frame carrying a TCP SYN 10.141.11.2:1234 -> 10.0.0.9:80.
fn inner_syn() -> Vec<u8> {
    let (s, d) = (v4([10, 141, 11, 2]), v4([10, 0, 0, 9]));
    let seg = tcp_segment(s, d, &Tcp::new(1234, 80, 0x02), &[]);
    Builder::new()
        .macs([0x62, 0x87, 0x4d, 0xd6, 0x19, 0x05], [2, 0, 0, 0, 0, 2])
        .ip(s, d, 6, &seg)
}

fn vxlan(vni: u32, inner: &[u8]) -> (Vec<u8>, PacketMeta) {
    let mut p = vec![0x08, 0, 0, 0];
    p.extend_from_slice(&(vni << 8).to_be_bytes());
    p.extend_from_slice(inner);
    let (s, d) = (v4([192, 0, 2, 1]), v4([192, 0, 2, 2]));
    let udp = udp_datagram(s, d, 40000, 4789, &p);
    let f = Builder::new().ip(s, d, 17, &udp);
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    (f, pm)
}

fn gre(flags: u16, ptype: u16, extra: &[u8], inner: &[u8]) -> (Vec<u8>, PacketMeta) {
    let mut p = flags.to_be_bytes().to_vec();
    p.extend_from_slice(&ptype.to_be_bytes());
    p.extend_from_slice(extra);
    p.extend_from_slice(inner);
    let f = Builder::new().ip(v4([192, 0, 2, 1]), v4([192, 0, 2, 2]), 47, &p);
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    (f, pm)
}

#[test]
fn vxlan_inner_tcp_syn() {
    let (f, pm) = vxlan(10, &inner_syn());
    let i = Inner::parse(&f, &pm, Tunnel::Vxlan).expect("parsed");
    // outer: 14 Ethernet + 20 IPv4 + 8 UDP; the VXLAN header, then 14 + 20 inside
    assert_eq!(i.tun_off, Some(42));
    assert_eq!(i.ll_off, Some(50));
    assert_eq!(i.nh_off, 64);
    assert_eq!(i.th_off, Some(84));
    assert_eq!((i.llproto, i.l4proto), (0x0800, 6));
    assert_eq!(i.get(&f, Field::VxlanVni), Some(10));
    assert_eq!(i.get(&f, Field::VxlanFlags), Some(0x08));
    assert_eq!(i.get(&f, Field::IpSaddr), Some(0x0a8d_0b02));
    assert_eq!(i.get(&f, Field::TcpDport), Some(80));
    assert_eq!(i.get(&f, Field::TcpFlags), Some(0x02));
    assert_eq!(i.get(&f, Field::ThDport), Some(80));
    assert_eq!(i.get(&f, Field::EtherSaddr), Some(0x6287_4dd6_1905));
    assert_eq!(i.get(&f, Field::MetaL4proto), Some(6));
    assert_eq!(i.get(&f, Field::MetaProtocol), Some(0x0800));
    assert_eq!(i.get(&f, Field::UdpDport), None);
    assert_eq!(i.get(&f, Field::Ip6Saddr), None);
    assert_eq!(i.get(&f, Field::VlanId), None);
    // the outer packet's own fields are not the inner ones
    assert_eq!(pm.get(&f, Field::IpSaddr), Some(0xc000_0201));
}

#[test]
fn vxlan_gives_up() {
    let syn = inner_syn();
    // cut inside the inner IPv4 header
    let (f, pm) = vxlan(10, &syn[..14 + 12]);
    assert_eq!(Inner::parse(&f, &pm, Tunnel::Vxlan), None);
    // an inner frame of another EtherType (ARP)
    let mut arp = syn.clone();
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    let (f, pm) = vxlan(10, &arp);
    assert_eq!(Inner::parse(&f, &pm, Tunnel::Vxlan), None);
    // IHL below 5
    let mut bad = syn.clone();
    bad[14] = 0x44;
    let (f, pm) = vxlan(10, &bad);
    assert_eq!(Inner::parse(&f, &pm, Tunnel::Vxlan), None);
    // after GRE, VXLAN's header is the GRE header (the kernel adds no hdrsize there)
    let (f, pm) = gre(0, 0x6558, &[], &syn);
    let i = Inner::parse(&f, &pm, Tunnel::Vxlan).expect("parsed");
    assert_eq!((i.tun_off, i.ll_off), (Some(34), Some(38)));
    // another transport protocol: nothing inner
    let s = v4([192, 0, 2, 1]);
    let f = Builder::new().ip(s, v4([192, 0, 2, 2]), 132, &[0; 64]);
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    assert_eq!(Inner::parse(&f, &pm, Tunnel::Vxlan), None);
    // a later fragment of the outer packet has no inner part
    let s = v4([192, 0, 2, 1]);
    let f = Builder::new()
        .fragment(8, false)
        .ip(s, v4([192, 0, 2, 2]), 17, &[0; 64]);
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    assert_eq!(Inner::parse(&f, &pm, Tunnel::Vxlan), None);
}

#[test]
fn inner_fragment_has_no_transport_header() {
    let mut syn = inner_syn();
    syn[14 + 6..14 + 8].copy_from_slice(&0x0001u16.to_be_bytes());
    let (f, pm) = vxlan(7, &syn);
    let i = Inner::parse(&f, &pm, Tunnel::Vxlan).expect("parsed");
    assert_eq!(i.th_off, None);
    assert_eq!(i.get(&f, Field::IpSaddr), Some(0x0a8d_0b02));
    assert_eq!(i.get(&f, Field::TcpDport), None);
    assert_eq!(i.get(&f, Field::MetaL4proto), None);
}

#[test]
fn vlan_tagged_inner_frame() {
    let syn = inner_syn();
    let mut tagged = syn[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x20, 0x0a]);
    tagged.extend_from_slice(&syn[12..]);
    let (f, pm) = vxlan(1, &tagged);
    let i = Inner::parse(&f, &pm, Tunnel::Vxlan).expect("parsed");
    assert_eq!(i.llproto, 0x8100);
    assert_eq!(i.get(&f, Field::VlanId), Some(10));
    assert_eq!(i.get(&f, Field::MetaProtocol), Some(0x8100));
    // nft reads ip fields behind `meta protocol ip`: a tagged frame has none
    assert_eq!(i.get(&f, Field::IpSaddr), None);
    // ... and transport fields behind `meta l4proto`, which it has
    assert_eq!(i.get(&f, Field::TcpDport), Some(80));
}

#[test]
fn geneve_options_are_skipped() {
    let mut p = vec![0x02, 0, 0x65, 0x58, 0, 0, 0x2a, 0];
    p.extend_from_slice(&[0xaa; 8]); // two words of options
    p.extend_from_slice(&inner_syn());
    let (s, d) = (v4([192, 0, 2, 1]), v4([192, 0, 2, 2]));
    let udp = udp_datagram(s, d, 40000, 6081, &p);
    let f = Builder::new().ip(s, d, 17, &udp);
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    let i = Inner::parse(&f, &pm, Tunnel::Geneve).expect("parsed");
    assert_eq!(i.ll_off, Some(42 + 16));
    assert_eq!(i.get(&f, Field::GeneveVni), Some(0x2a));
    assert_eq!(i.get(&f, Field::GeneveType), Some(0x6558));
    assert_eq!(i.get(&f, Field::IpSaddr), Some(0x0a8d_0b02));
}

#[test]
fn gre_carries_ip_by_its_version() {
    let syn = inner_syn();
    let ip = &syn[14..];
    let (f, pm) = gre(0, 0x0800, &[], ip);
    assert_eq!(pm.get(&f, Field::GreVersion), Some(0));
    assert_eq!(pm.get(&f, Field::GreProtocol), Some(0x0800));
    let i = Inner::parse(&f, &pm, Tunnel::Gre).expect("parsed");
    assert_eq!((i.tun_off, i.ll_off, i.nh_off), (None, None, 38));
    assert_eq!(i.get(&f, Field::IpSaddr), Some(0x0a8d_0b02));
    assert_eq!(i.get(&f, Field::TcpSport), Some(1234));
    assert_eq!(i.get(&f, Field::EtherSaddr), None);
    // checksum and key: 8 more bytes
    let (f, pm) = gre(0xa000, 0x0800, &[0; 8], ip);
    let i = Inner::parse(&f, &pm, Tunnel::Gre).expect("parsed");
    assert_eq!(i.nh_off, 46);
    assert_eq!(i.get(&f, Field::IpDaddr), Some(0x0a00_0009));
    // version 1 (PPTP): not parsed
    let (f, pm) = gre(0x0001, 0x880b, &[0; 4], ip);
    assert_eq!(Inner::parse(&f, &pm, Tunnel::Gre), None);
    // the version nibble decides, not the protocol type
    let (f, pm) = gre(0, 0x86dd, &[], ip);
    assert_eq!(
        Inner::parse(&f, &pm, Tunnel::Gre).map(|i| i.llproto),
        Some(0x0800)
    );
    // an inner IPv6 packet
    let (s6, d6) = (
        IpAddr::V6(Ipv6Addr::LOCALHOST),
        IpAddr::V6("2001:db8::1".parse().unwrap()),
    );
    let u = udp_datagram(s6, d6, 8888, 53, &[1, 2, 3]);
    let inner6 = Builder::new().ip(s6, d6, 17, &u);
    let (f, pm) = gre(0, 0x86dd, &[], &inner6[14..]);
    let i = Inner::parse(&f, &pm, Tunnel::Gre).expect("parsed");
    assert_eq!(i.get(&f, Field::UdpSport), Some(8888));
    assert_eq!(i.get(&f, Field::Ip6Saddr), Some(1));
    assert_eq!(i.get(&f, Field::IpSaddr), None);
}

#[test]
fn gretap_carries_ethernet() {
    let (f, pm) = gre(0x2000, 0x6558, &[0, 0, 0, 5], &inner_syn());
    let i = Inner::parse(&f, &pm, Tunnel::Gretap).expect("parsed");
    assert_eq!(i.ll_off, Some(42));
    assert_eq!(i.get(&f, Field::EtherSaddr), Some(0x6287_4dd6_1905));
    assert_eq!(i.get(&f, Field::IpProtocol), Some(6));
    // read as plain GRE, the Ethernet header's first byte is no IP version
    assert_eq!(Inner::parse(&f, &pm, Tunnel::Gre), None);
}

#[test]
fn inner_ipv6_transport_header_is_after_the_fixed_header() {
    // GRE carrying IPv6 with a hop-by-hop header before UDP: `meta l4proto` is UDP (found
    // past the extension header), the transport header is read right after the 40-byte
    // header, as nft_inner_parse_l2l3 takes it
    let mut ip6 = vec![0x60, 0, 0, 0, 0, 16, 0, 64];
    ip6.extend([0xfd; 16]);
    ip6.extend([0xfe; 16]);
    ip6.extend([17, 0, 1, 4, 0, 0, 0, 0]);
    ip6.extend([0x22, 0xb8, 0, 53, 0, 8, 0, 0]);
    let (f, pm) = gre(0, 0x86dd, &[], &ip6);
    let i = Inner::parse(&f, &pm, Tunnel::Gre).expect("parsed");
    assert_eq!((i.llproto, i.l4proto), (0x86dd, 17));
    assert_eq!(i.th_off, Some(i.nh_off + 40));
    assert_eq!(i.get(&f, Field::MetaL4proto), Some(17));
    assert_eq!(i.get(&f, Field::UdpSport), Some(0x1100));
    // a later fragment inside: no transport header
    let mut frag = ip6.clone();
    frag[6] = 44;
    frag[40..48].copy_from_slice(&[17, 0, 0, 0x10, 0, 0, 0, 1]);
    let (f, pm) = gre(0, 0x86dd, &[], &frag);
    let i = Inner::parse(&f, &pm, Tunnel::Gre).expect("parsed");
    assert_eq!(i.th_off, None);
    assert_eq!(
        i.get(&f, Field::Ip6Saddr),
        Some(u128::from_be_bytes([0xfd; 16]))
    );
    assert_eq!(i.get(&f, Field::UdpSport), None);
}

#[test]
fn raw_inner_header_after_gre() {
    // `@ih` starts where the kernel's inner offset says: after the GRE header and its key
    let (f, pm) = gre(0x2000, 0x0800, &[0, 0, 0, 9], &inner_syn()[14..]);
    assert_eq!(pm.raw(&f, 3, 0, 8), Some(0x45));
    assert_eq!(pm.raw(&f, 3, 96, 32), Some(0x0a8d_0b02));
    // version 1: none
    let (f, pm) = gre(0x0001, 0x880b, &[0; 4], &inner_syn()[14..]);
    assert_eq!(pm.raw(&f, 3, 0, 8), None);
}
