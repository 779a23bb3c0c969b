//! Every header field read back from built packets, and absent where it does not apply.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, Ipv6Addr};

use weir_wire::build::{self, tcp_flags as tf, Builder, Tcp};
use weir_wire::{Field, Frag, LinkType, PacketMeta, L3};

const A4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B4: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 254);

fn a6() -> Ipv6Addr {
    "2001:db8::1".parse().unwrap()
}
fn b6() -> Ipv6Addr {
    "2001:db8:ffff::fffe".parse().unwrap()
}

fn mac(m: [u8; 6]) -> u128 {
    m.iter().fold(0u128, |a, b| (a << 8) | *b as u128)
}

fn be16(f: &[u8], i: usize) -> u128 {
    u16::from_be_bytes([f[i], f[i + 1]]) as u128
}

/// Assert that `get` answers exactly `expected` for the listed fields and `None` for every other
/// field; record which fields were seen with a value.
fn check(
    seen: &mut BTreeSet<Field>,
    what: &str,
    frame: &[u8],
    link: LinkType,
    expected: &[(Field, u128)],
) -> PacketMeta {
    let m = PacketMeta::parse(frame, link);
    assert_eq!(m.malformed, None, "{what}: unexpected malformed");
    for f in Field::ALL {
        let want = expected.iter().find(|(g, _)| g == f).map(|(_, v)| *v);
        let got = m.get(frame, *f);
        assert_eq!(got, want, "{what}: field {}", f.name());
        if let Some(v) = got {
            assert!(
                f.is_header(),
                "{what}: non-header field {} answered",
                f.name()
            );
            if f.bits() < 128 {
                assert_eq!(v >> f.bits(), 0, "{what}: {} wider than its type", f.name());
            }
            seen.insert(*f);
        }
    }
    m
}

fn ether(tagged_type: u16) -> Vec<(Field, u128)> {
    vec![
        (Field::EtherDaddr, mac(build::DST_MAC)),
        (Field::EtherSaddr, mac(build::SRC_MAC)),
        (Field::EtherType, tagged_type as u128),
    ]
}

#[allow(clippy::too_many_arguments)]
fn ip4(
    f: &[u8],
    l3: usize,
    tos: (u8, u8),
    len: u16,
    id: u16,
    fo: u16,
    ttl: u8,
    p: u8,
) -> Vec<(Field, u128)> {
    vec![
        (Field::IpVersion, 4),
        (Field::IpHdrlength, ((f[l3] & 0xf) as u128)),
        (Field::IpDscp, tos.0 as u128),
        (Field::IpEcn, tos.1 as u128),
        (Field::IpLength, len as u128),
        (Field::IpId, id as u128),
        (Field::IpFragOff, fo as u128),
        (Field::IpTtl, ttl as u128),
        (Field::IpProtocol, p as u128),
        (Field::IpChecksum, be16(f, l3 + 10)),
        (Field::IpSaddr, u32::from(A4) as u128),
        (Field::IpDaddr, u32::from(B4) as u128),
    ]
}

fn ip6(tos: (u8, u8), flow: u32, plen: u16, nh: u8, hl: u8) -> Vec<(Field, u128)> {
    vec![
        (Field::Ip6Version, 6),
        (Field::Ip6Dscp, tos.0 as u128),
        (Field::Ip6Ecn, tos.1 as u128),
        (Field::Ip6Flowlabel, flow as u128),
        (Field::Ip6Length, plen as u128),
        (Field::Ip6Nexthdr, nh as u128),
        (Field::Ip6Hoplimit, hl as u128),
        (Field::Ip6Saddr, u128::from(a6())),
        (Field::Ip6Daddr, u128::from(b6())),
        // no extension header: each absent (the chain is walked for every IPv6 packet)
        (Field::ExthdrHbh, 0),
        (Field::ExthdrRt, 0),
        (Field::ExthdrFrag, 0),
        (Field::ExthdrDst, 0),
        (Field::ExthdrMh, 0),
    ]
}

#[test]
fn every_header_field_read_back() {
    let mut seen = BTreeSet::new();

    // IPv4 TCP over 802.1Q with options and a payload.
    let t = Tcp::new(40000, 443, tf::SYN | tf::ACK | tf::ECE)
        .seq(0x1122_3344)
        .ack(0x5566_7788)
        .window(1000)
        .urgptr(7)
        .options(&[2, 4, 5, 0xb4]);
    let f = Builder::new()
        .vlan(100)
        .ttl(33)
        .tos(46, 2)
        .ip_id(0x4242)
        .dont_fragment()
        .tcp(A4, B4, &t, b"abc");
    let l3 = 18;
    let l4 = l3 + 20;
    let mut e = ether(0x8100);
    e.push((Field::VlanId, 100));
    e.extend(ip4(&f, l3, (46, 2), 20 + 24 + 3, 0x4242, 0x4000, 33, 6));
    e.extend([
        (Field::TcpSport, 40000),
        (Field::TcpDport, 443),
        (Field::TcpSequence, 0x1122_3344),
        (Field::TcpAckseq, 0x5566_7788),
        (Field::TcpDoff, 6),
        (Field::TcpFlags, (tf::SYN | tf::ACK | tf::ECE) as u128),
        (Field::TcpWindow, 1000),
        (Field::TcpChecksum, be16(&f, l4 + 16)),
        (Field::TcpUrgptr, 7),
        (Field::ThSport, 40000),
        (Field::ThDport, 443),
    ]);
    let m = check(&mut seen, "v4 tcp vlan", &f, LinkType::Ethernet, &e);
    assert_eq!(
        (m.l3, m.vlan, m.l3_off, m.l4_off, m.l4proto),
        (L3::Ipv4, Some(100), 18, 38, 6)
    );
    assert!(m.has_l4 && m.has_ports);
    assert_eq!(
        (m.sport, m.dport, m.tcp_flags),
        (40000, 443, tf::SYN | tf::ACK | tf::ECE)
    );
    assert_eq!(m.saddr, u32::from(A4) as u128);
    assert_eq!(m.daddr, u32::from(B4) as u128);
    assert_eq!(m.len as usize, f.len());
    assert_eq!(m.l3_len as usize, f.len() - 18);
    assert_eq!(m.frag, Frag::None);
    assert_eq!(m.payload(&f), Some((f.len() - 3, 3)));
    assert!(m.ipv4_checksum_ok(&f));

    // IPv4 UDP, raw link: no link fields.
    let f = Builder::raw().ttl(1).udp(A4, B4, 53, 5353, b"hello");
    let mut e = ip4(&f, 0, (0, 0), 20 + 8 + 5, 1, 0, 1, 17);
    e.extend([
        (Field::UdpSport, 53),
        (Field::UdpDport, 5353),
        (Field::UdpLength, 13),
        (Field::UdpChecksum, be16(&f, 26)),
        (Field::ThSport, 53),
        (Field::ThDport, 5353),
    ]);
    let m = check(&mut seen, "v4 udp raw", &f, LinkType::RawIp, &e);
    assert_eq!((m.l3_off, m.l4_off, m.vlan), (0, 20, None));

    // ICMP echo request.
    let f = build::icmp4_echo(A4, B4, 0xabcd, 9, b"ping");
    let mut e = ether(0x0800);
    e.extend(ip4(&f, 14, (0, 0), 20 + 8 + 4, 1, 0, 64, 1));
    e.extend([
        (Field::IcmpType, 8),
        (Field::IcmpCode, 0),
        (Field::IcmpId, 0xabcd),
        (Field::IcmpChecksum, be16(&f, 36)),
        (Field::IcmpSequence, 9),
    ]);
    let m = check(&mut seen, "icmp echo", &f, LinkType::Ethernet, &e);
    assert!(m.has_l4 && !m.has_ports);

    // ICMP port unreachable: no id / sequence.
    let inner = Builder::raw().udp(B4, A4, 5353, 53, b"q");
    let f = Builder::new().icmp_error(A4, B4, 3, 3, &inner, inner.len());
    let mut e = ether(0x0800);
    e.extend(ip4(
        &f,
        14,
        (0, 0),
        (20 + 8 + inner.len()) as u16,
        1,
        0,
        64,
        1,
    ));
    // a destination unreachable's MTU (bytes 6-7; 0 here): read behind its type
    e.extend([
        (Field::IcmpType, 3),
        (Field::IcmpCode, 3),
        (Field::IcmpMtu, 0),
        (Field::IcmpChecksum, be16(&f, 36)),
    ]);
    check(&mut seen, "icmp unreachable", &f, LinkType::Ethernet, &e);
    // fragmentation needed, MTU 1400; a redirect's gateway (bytes 4-7)
    let f = Builder::new().icmp(A4, B4, 3, 4, 1400, &inner);
    let mut e = ether(0x0800);
    e.extend(ip4(
        &f,
        14,
        (0, 0),
        (20 + 8 + inner.len()) as u16,
        1,
        0,
        64,
        1,
    ));
    e.extend([
        (Field::IcmpType, 3),
        (Field::IcmpCode, 4),
        (Field::IcmpMtu, 1400),
        (Field::IcmpChecksum, be16(&f, 36)),
    ]);
    check(&mut seen, "icmp frag needed", &f, LinkType::Ethernet, &e);
    let f = Builder::new().icmp(A4, B4, 5, 1, 0xc612_0701, &inner);
    let mut e = ether(0x0800);
    e.extend(ip4(
        &f,
        14,
        (0, 0),
        (20 + 8 + inner.len()) as u16,
        1,
        0,
        64,
        1,
    ));
    e.extend([
        (Field::IcmpType, 5),
        (Field::IcmpCode, 1),
        (Field::IcmpGateway, 0xc612_0701),
        (Field::IcmpChecksum, be16(&f, 36)),
    ]);
    check(&mut seen, "icmp redirect", &f, LinkType::Ethernet, &e);

    // SCTP: sctp and th ports.
    let sctp = [0x0b, 0xb8, 0x0b, 0xb9, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 4];
    let f = Builder::new().ip(A4, B4, 132, &sctp);
    let mut e = ether(0x0800);
    e.extend(ip4(&f, 14, (0, 0), 36, 1, 0, 64, 132));
    e.extend([
        (Field::SctpSport, 3000),
        (Field::SctpDport, 3001),
        (Field::SctpVtag, 1),
        (Field::SctpChecksum, 0),
        (Field::ThSport, 3000),
        (Field::ThDport, 3001),
    ]);
    check(&mut seen, "sctp", &f, LinkType::Ethernet, &e);

    // DCCP and UDP-Lite: th ports and their own fields (DCCP's type: bits 1-4 of byte 8).
    let hdr = [0x1f, 0x90, 0x00, 0x50, 2, 0, 0xab, 0xcd, 0x0a, 0, 0, 0];
    for (p, own) in [
        (
            33u8,
            vec![
                (Field::DccpSport, 8080),
                (Field::DccpDport, 80),
                (Field::DccpType, 5),
            ],
        ),
        (
            136,
            vec![
                (Field::UdpliteSport, 8080),
                (Field::UdpliteDport, 80),
                (Field::UdpliteCsumcov, 0x0200),
                (Field::UdpliteChecksum, 0xabcd),
            ],
        ),
    ] {
        let f = Builder::new().ip(A4, B4, p, &hdr);
        let mut e = ether(0x0800);
        e.extend(ip4(&f, 14, (0, 0), 32, 1, 0, 64, p));
        e.extend([(Field::ThSport, 8080), (Field::ThDport, 80)]);
        e.extend(own);
        check(&mut seen, "dccp/udplite", &f, LinkType::Ethernet, &e);
    }

    // AH, ESP, IPComp, IGMP: their fields at fixed offsets of the transport header.
    let bytes: Vec<u8> = (1..=16).collect();
    for (p, own) in [
        (
            51u8,
            vec![
                (Field::AhNexthdr, 1),
                (Field::AhHdrlength, 2),
                (Field::AhReserved, 0x0304),
                (Field::AhSpi, 0x0506_0708),
                (Field::AhSequence, 0x090a_0b0c),
            ],
        ),
        (
            50,
            vec![
                (Field::EspSpi, 0x0102_0304),
                (Field::EspSequence, 0x0506_0708),
            ],
        ),
        (
            108,
            vec![
                (Field::CompNexthdr, 1),
                (Field::CompFlags, 2),
                (Field::CompCpi, 0x0304),
            ],
        ),
        (
            2,
            vec![
                (Field::IgmpType, 1),
                (Field::IgmpMrt, 2),
                (Field::IgmpChecksum, 0x0304),
                (Field::IgmpGroup, 0x0506_0708),
            ],
        ),
    ] {
        let f = Builder::new().ip(A4, B4, p, &bytes);
        let mut e = ether(0x0800);
        e.extend(ip4(&f, 14, (0, 0), 36, 1, 0, 64, p));
        e.extend(own);
        check(&mut seen, "ah/esp/comp/igmp", &f, LinkType::Ethernet, &e);
    }

    // IPv6 TCP behind a hop-by-hop header, QinQ: ip6 nexthdr is the header's own byte.
    let t = Tcp::new(1, 65535, tf::FIN | tf::PSH | tf::URG | tf::CWR | tf::RST)
        .seq(u32::MAX)
        .ack(1)
        .window(0)
        .urgptr(0xffff);
    let f = Builder::new()
        .qinq(7, 8)
        .tos(10, 1)
        .flow_label(0xabcde)
        .ttl(255)
        .hop_by_hop()
        .tcp(a6(), b6(), &t, b"");
    let l3 = 22;
    let l4 = l3 + 40 + 8;
    let mut e = ether(0x88a8);
    e.push((Field::VlanId, 7));
    e.extend(ip6((10, 1), 0xabcde, 28, 0, 255));
    e.retain(|(f, _)| *f != Field::ExthdrHbh);
    e.extend([
        (Field::ExthdrHbh, 1),
        (Field::HbhNexthdr, 6),
        (Field::HbhHdrlength, 0),
    ]);
    e.extend([
        (Field::TcpSport, 1),
        (Field::TcpDport, 65535),
        (Field::TcpSequence, u32::MAX as u128),
        (Field::TcpAckseq, 1),
        (Field::TcpDoff, 5),
        (
            Field::TcpFlags,
            (tf::FIN | tf::PSH | tf::URG | tf::CWR | tf::RST) as u128,
        ),
        (Field::TcpWindow, 0),
        (Field::TcpChecksum, be16(&f, l4 + 16)),
        (Field::TcpUrgptr, 0xffff),
        (Field::ThSport, 1),
        (Field::ThDport, 65535),
    ]);
    let m = check(&mut seen, "v6 tcp qinq hbh", &f, LinkType::Ethernet, &e);
    assert_eq!(
        (m.l3, m.l4proto, m.l4_off as usize, m.vlan),
        (L3::Ipv6, 6, l4, Some(7))
    );
    assert_eq!((m.saddr, m.daddr), (u128::from(a6()), u128::from(b6())));

    // IPv6 UDP, raw link.
    let f = Builder::raw().ttl(2).udp(a6(), b6(), 546, 547, &[0; 10]);
    let mut e = ip6((0, 0), 0, 18, 17, 2);
    e.extend([
        (Field::UdpSport, 546),
        (Field::UdpDport, 547),
        (Field::UdpLength, 18),
        (Field::UdpChecksum, be16(&f, 46)),
        (Field::ThSport, 546),
        (Field::ThDport, 547),
    ]);
    check(&mut seen, "v6 udp raw", &f, LinkType::RawIp, &e);

    // ICMPv6 echo reply and a non-echo message.
    let f = Builder::new().icmp_echo(a6(), b6(), false, 77, 78, b"x");
    let mut e = ether(0x86dd);
    e.extend(ip6((0, 0), 0, 9, 58, 64));
    e.extend([
        (Field::Icmp6Type, 129),
        (Field::Icmp6Code, 0),
        (Field::Icmp6Id, 77),
        (Field::Icmp6Checksum, be16(&f, 56)),
        (Field::Icmp6Sequence, 78),
    ]);
    check(&mut seen, "icmpv6 echo reply", &f, LinkType::Ethernet, &e);
    let f = Builder::new().icmp(a6(), b6(), 135, 0, 0, &[0; 16]);
    let mut e = ether(0x86dd);
    e.extend(ip6((0, 0), 0, 24, 58, 64));
    // a neighbour solicitation's target address (bytes 8-23): read behind its type
    e.extend([
        (Field::Icmp6Type, 135),
        (Field::Icmp6Code, 0),
        (Field::Icmp6Checksum, be16(&f, 56)),
        (Field::Icmp6Taddr, 0),
    ]);
    check(&mut seen, "icmpv6 ns", &f, LinkType::Ethernet, &e);
    let f = Builder::new().icmp(a6(), b6(), 2, 0, 1280, &[0; 16]);
    let mut e = ether(0x86dd);
    e.extend(ip6((0, 0), 0, 24, 58, 64));
    e.extend([
        (Field::Icmp6Type, 2),
        (Field::Icmp6Code, 0),
        (Field::Icmp6Mtu, 1280),
        (Field::Icmp6PacketTooBig, 1280),
        (Field::Icmp6Checksum, be16(&f, 56)),
    ]);
    check(
        &mut seen,
        "icmpv6 packet too big",
        &f,
        LinkType::Ethernet,
        &e,
    );

    // an MLD query's maximum delay (bytes 4-5) and address; a parameter problem's pointer; a
    // redirect's target and destination
    let group = [0xffu8, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x16];
    let f = Builder::new().icmp(a6(), b6(), 130, 0, 1000 << 16, &group);
    let mut e = ether(0x86dd);
    e.extend(ip6((0, 0), 0, 24, 58, 64));
    e.extend([
        (Field::Icmp6Type, 130),
        (Field::Icmp6Code, 0),
        (Field::Icmp6Checksum, be16(&f, 56)),
        (Field::Icmp6MaxDelay, 1000),
        (Field::Icmp6Taddr, u128::from_be_bytes(group)),
    ]);
    check(&mut seen, "mld query", &f, LinkType::Ethernet, &e);
    let f = Builder::new().icmp(a6(), b6(), 4, 0, 40, &[0; 8]);
    let mut e = ether(0x86dd);
    e.extend(ip6((0, 0), 0, 16, 58, 64));
    e.extend([
        (Field::Icmp6Type, 4),
        (Field::Icmp6Code, 0),
        (Field::Icmp6Checksum, be16(&f, 56)),
        (Field::Icmp6ParameterProblem, 40),
    ]);
    check(&mut seen, "parameter problem", &f, LinkType::Ethernet, &e);
    let mut body = a6().octets().to_vec();
    body.extend_from_slice(&b6().octets());
    let f = Builder::new().icmp(a6(), b6(), 137, 0, 0, &body);
    let mut e = ether(0x86dd);
    e.extend(ip6((0, 0), 0, 40, 58, 64));
    e.extend([
        (Field::Icmp6Type, 137),
        (Field::Icmp6Code, 0),
        (Field::Icmp6Checksum, be16(&f, 56)),
        (Field::Icmp6Taddr, u128::from(a6())),
        (Field::Icmp6Daddr, u128::from(b6())),
    ]);
    check(&mut seen, "redirect", &f, LinkType::Ethernet, &e);

    // IPv6 through hop-by-hop, routing (a segment routing header), fragment (the first),
    // destination options, then a mobility header: each found as the kernel finds it.
    let mut p = vec![0x60, 0, 0, 0, 0, 0, 0, 64];
    p.extend_from_slice(&a6().octets());
    p.extend_from_slice(&b6().octets());
    p[6] = 0; // hop-by-hop
    p.extend_from_slice(&[43, 0, 1, 4, 0, 0, 0, 0]); // hbh -> routing
    let mut rt = vec![44, 2, 4, 1, 9, 0x80, 0x12, 0x34]; // routing -> fragment, 24 bytes
    rt.extend_from_slice(&b6().octets());
    p.extend_from_slice(&rt);
    p.extend_from_slice(&[60, 0x55, 0x00, 0x05, 0xde, 0xad, 0xbe, 0xef]); // frag: off 0, res2 2, M
    p.extend_from_slice(&[135, 0, 1, 4, 0, 0, 0, 0]); // destination options -> mobility
    p.extend_from_slice(&[59, 1, 5, 0, 0xab, 0xcd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // MH
    let plen = (p.len() - 40) as u16;
    p[4..6].copy_from_slice(&plen.to_be_bytes());
    let mut e = ip6((0, 0), 0, plen, 0, 64);
    e.retain(|(f, _)| !f.name().starts_with("exthdr"));
    e.extend([
        (Field::HbhNexthdr, 43),
        (Field::HbhHdrlength, 0),
        (Field::RtNexthdr, 44),
        (Field::RtHdrlength, 2),
        (Field::RtType, 4),
        (Field::RtSegLeft, 1),
        (Field::Rt0Reserved, 0x0980_1234),
        (Field::Rt2Reserved, 0x0980_1234),
        (Field::Rt2Addr, u128::from(b6())),
        (Field::SrhLastEntry, 9),
        (Field::SrhFlags, 0x80),
        (Field::SrhTag, 0x1234),
        (Field::FragNexthdr, 60),
        (Field::FragReserved, 0x55),
        (Field::FragFragOff, 0),
        (Field::FragReserved2, 2),
        (Field::FragMoreFragments, 1),
        (Field::FragId, 0xdead_beef),
        (Field::DstNexthdr, 135),
        (Field::DstHdrlength, 0),
        (Field::MhNexthdr, 59),
        (Field::MhHdrlength, 1),
        (Field::MhType, 5),
        (Field::MhReserved, 0),
        (Field::MhChecksum, 0xabcd),
        (Field::ExthdrHbh, 1),
        (Field::ExthdrRt, 1),
        (Field::ExthdrFrag, 1),
        (Field::ExthdrDst, 1),
        (Field::ExthdrMh, 1),
    ]);
    let m = PacketMeta::parse(&p, LinkType::RawIp);
    // (weir's own walk takes the mobility header as an extension header: no transport)
    for (f, want) in &e {
        assert_eq!(m.get(&p, *f), Some(*want), "{}", f.name());
        seen.insert(*f);
    }
    // a later fragment: nothing found past its fragment header
    let mut later = p.clone();
    later[40 + 8 + 24 + 3] = 0x08 | 1; // offset 1
    let m = PacketMeta::parse(&later, LinkType::RawIp);
    assert_eq!(m.get(&later, Field::ExthdrDst), Some(0));
    assert_eq!(m.get(&later, Field::DstNexthdr), None);
    assert_eq!(m.get(&later, Field::FragFragOff), Some(1));
    assert_eq!(m.get(&later, Field::ExthdrRt), Some(1));
    // none at all: absent, and their fields not there
    let f = Builder::raw().udp(a6(), b6(), 1, 2, b"x");
    let m = PacketMeta::parse(&f, LinkType::RawIp);
    assert_eq!(m.get(&f, Field::ExthdrHbh), Some(0));
    assert_eq!(m.get(&f, Field::HbhNexthdr), None);
    // IPv4: not read at all
    let f = build::tcp4(A4, B4, 1, 2, tf::SYN, b"x");
    let m = PacketMeta::parse(&f, LinkType::Ethernet);
    assert_eq!(m.get(&f, Field::ExthdrHbh), None);

    let missing: Vec<&str> = Field::ALL
        .iter()
        .filter(|f| f.is_header() && f.evaluated() && !seen.contains(f))
        .map(|f| f.name())
        .collect();
    assert!(
        missing.is_empty(),
        "header fields never read back: {missing:?}"
    );
}

#[test]
fn meta_and_ct_fields_are_never_read_from_packets() {
    let f = build::tcp4(A4, B4, 1, 2, tf::SYN, b"");
    let m = PacketMeta::parse(&f, LinkType::Ethernet);
    for fl in Field::ALL.iter().filter(|f| !f.is_header()) {
        assert_eq!(m.get(&f, *fl), None, "{}", fl.name());
    }
}

#[test]
fn one_liners_match_their_description() {
    for (f, p) in [
        (build::tcp4(A4, B4, 1, 2, tf::SYN, b"x"), 6u8),
        (build::udp4(A4, B4, 1, 2, b"x"), 17),
        (build::icmp4_echo(A4, B4, 1, 2, b"x"), 1),
        (build::tcp6(a6(), b6(), 1, 2, tf::SYN, b"x"), 6),
        (build::udp6(a6(), b6(), 1, 2, b"x"), 17),
        (build::icmp6_echo(a6(), b6(), 1, 2, b"x"), 58),
    ] {
        let m = PacketMeta::parse(&f, LinkType::Ethernet);
        assert_eq!(m.malformed, None);
        assert_eq!(m.l4proto, p);
        assert!(m.has_l4);
        assert_eq!(m.has_ports, p == 6 || p == 17);
        assert_eq!(m.payload(&f).map(|(_, n)| n), Some(1));
    }
}

/// Our builder's bytes equal etherparse's for the same packet (an independent check of the
/// header layout and the checksums).
#[test]
fn builder_agrees_with_etherparse() {
    use etherparse::PacketBuilder;
    let payload = b"GET / HTTP/1.1\r\n\r\n";

    let mut theirs = Vec::new();
    PacketBuilder::ethernet2(build::SRC_MAC, build::DST_MAC)
        .ipv4(A4.octets(), B4.octets(), 64)
        .tcp(1234, 80, 1000, 64240)
        .syn()
        .ack(2000)
        .write(&mut theirs, payload)
        .unwrap();
    let ours = Builder::new().ip_id(0).dont_fragment().tcp(
        A4,
        B4,
        &Tcp::new(1234, 80, tf::SYN | tf::ACK),
        payload,
    );
    assert_eq!(ours, theirs, "v4 tcp");

    let mut theirs = Vec::new();
    PacketBuilder::ethernet2(build::SRC_MAC, build::DST_MAC)
        .ipv4(A4.octets(), B4.octets(), 64)
        .udp(53, 4000)
        .write(&mut theirs, payload)
        .unwrap();
    let ours = Builder::new()
        .ip_id(0)
        .dont_fragment()
        .udp(A4, B4, 53, 4000, payload);
    assert_eq!(ours, theirs, "v4 udp");

    let mut theirs = Vec::new();
    PacketBuilder::ethernet2(build::SRC_MAC, build::DST_MAC)
        .ipv6(a6().octets(), b6().octets(), 64)
        .udp(53, 4000)
        .write(&mut theirs, payload)
        .unwrap();
    assert_eq!(build::udp6(a6(), b6(), 53, 4000, payload), theirs, "v6 udp");

    let mut theirs = Vec::new();
    PacketBuilder::ethernet2(build::SRC_MAC, build::DST_MAC)
        .ipv6(a6().octets(), b6().octets(), 64)
        .tcp(1234, 80, 1000, 64240)
        .syn()
        .write(&mut theirs, payload)
        .unwrap();
    assert_eq!(
        build::tcp6(a6(), b6(), 1234, 80, tf::SYN, payload),
        theirs,
        "v6 tcp"
    );

    let mut theirs = Vec::new();
    PacketBuilder::ethernet2(build::SRC_MAC, build::DST_MAC)
        .ipv4(A4.octets(), B4.octets(), 64)
        .icmpv4_echo_request(7, 8)
        .write(&mut theirs, payload)
        .unwrap();
    let ours = Builder::new()
        .ip_id(0)
        .dont_fragment()
        .icmp_echo(A4, B4, true, 7, 8, payload);
    assert_eq!(ours, theirs, "icmp echo");

    let mut theirs = Vec::new();
    PacketBuilder::ethernet2(build::SRC_MAC, build::DST_MAC)
        .ipv6(a6().octets(), b6().octets(), 64)
        .icmpv6_echo_request(7, 8)
        .write(&mut theirs, payload)
        .unwrap();
    assert_eq!(
        build::icmp6_echo(a6(), b6(), 7, 8, payload),
        theirs,
        "icmpv6 echo"
    );

    // And etherparse reads our fields the same way.
    let ours = Builder::new().vlan(42).ttl(9).tcp(
        A4,
        B4,
        &Tcp::new(5, 6, tf::PSH | tf::ACK).seq(77),
        b"zz",
    );
    let s = etherparse::SlicedPacket::from_ethernet(&ours).unwrap();
    let m = PacketMeta::parse(&ours, LinkType::Ethernet);
    match (s.net, s.transport) {
        (Some(etherparse::NetSlice::Ipv4(ip)), Some(etherparse::TransportSlice::Tcp(t))) => {
            assert_eq!(m.get(&ours, Field::IpTtl), Some(ip.header().ttl() as u128));
            assert_eq!(
                m.get(&ours, Field::TcpSequence),
                Some(t.sequence_number() as u128)
            );
            assert_eq!(
                m.get(&ours, Field::TcpAckseq),
                Some(t.acknowledgment_number() as u128)
            );
            assert_eq!(
                m.get(&ours, Field::TcpWindow),
                Some(t.window_size() as u128)
            );
        }
        other => panic!("etherparse saw {other:?}"),
    }
}

/// The headers of a long packet parse as the whole packet does: lengths from the IP header,
/// the same addresses, ports and flags, nothing malformed; cut inside the transport header,
/// the transport is malformed (as a truncated packet) but the IP layer stands.
#[test]
fn captured_headers_parse_like_the_whole_packet() {
    let payload = vec![0x5a; 1400];
    for v6 in [false, true] {
        let b = Builder::new();
        let tcp = Tcp::new(40000, 443, tf::ACK | tf::PSH).seq(7).ack(9);
        let whole = if v6 {
            b.tcp(a6(), b6(), &tcp, &payload)
        } else {
            b.tcp(
                Ipv4Addr::new(198, 18, 0, 1),
                Ipv4Addr::new(198, 19, 0, 1),
                &tcp,
                &payload,
            )
        };
        let full = PacketMeta::parse(&whole, LinkType::Ethernet);
        assert!(full.malformed.is_none());
        let cut = PacketMeta::parse_captured(&whole[..128], LinkType::Ethernet, whole.len());
        assert_eq!(cut, full, "v6 {v6}");
        // a plain parse of the cut frame is malformed (total length past the end)
        assert!(PacketMeta::parse(&whole[..128], LinkType::Ethernet)
            .malformed
            .is_some());
        // cut inside the TCP header
        let l4 = full.l4_off as usize;
        let short = PacketMeta::parse_captured(&whole[..l4 + 10], LinkType::Ethernet, whole.len());
        assert_eq!(
            (short.saddr, short.daddr, short.l3_len),
            (full.saddr, full.daddr, full.l3_len)
        );
        assert!(
            short.malformed.is_some_and(|m| !m.is_l3()),
            "{:?}",
            short.malformed
        );
        // every cut, and wire lengths shorter than the frame, never panic
        for n in 0..whole.len().min(200) {
            let _ = PacketMeta::parse_captured(&whole[..n], LinkType::Ethernet, whole.len());
            let _ = PacketMeta::parse_captured(&whole[..n], LinkType::Ethernet, n / 2);
        }
    }
}

#[test]
fn fields_not_evaluated_yet_are_never_read_from_packets() {
    // (the checker marks rules reading them, and `weir run` refuses those: a field the
    // engine read by accident would be evaluated without anyone having checked it)
    for f in [
        build::tcp4(A4, B4, 1, 2, tf::SYN, b"x"),
        build::udp6(a6(), b6(), 1, 2, b"x"),
    ] {
        let m = PacketMeta::parse(&f, LinkType::Ethernet);
        for fl in Field::ALL.iter().filter(|f| !f.evaluated()) {
            assert_eq!(m.get(&f, *fl), None, "{}", fl.name());
        }
    }
    assert!(Field::IpSaddr.evaluated() && !Field::MetaSecmark.evaluated());
}
