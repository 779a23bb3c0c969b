//! The hostile corpus: truncations at every length, lying length fields, options, fragments,
//! extension chains, bad data offsets, ICMP errors quoting cut-short packets, VLAN stacks.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use weir_wire::build::{hostile, tcp_flags as tf, Builder, Tcp};
use weir_wire::checksum;
use weir_wire::meta::MAX_EXT_HEADERS;
use weir_wire::{Field, Frag, LinkType, Malformed as M, PacketMeta, L3};

const A4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const ETH: LinkType = LinkType::Ethernet;
const RAW: LinkType = LinkType::RawIp;

fn a6() -> Ipv6Addr {
    "2001:db8::1".parse().unwrap()
}
fn b6() -> Ipv6Addr {
    "2001:db8::2".parse().unwrap()
}

fn parse(f: &[u8], link: LinkType) -> PacketMeta {
    let m = PacketMeta::parse(f, link);
    // Whatever the packet, reading every field must not panic, and the meta must be coherent.
    for fl in Field::ALL {
        let _ = m.get(f, *fl);
    }
    let _ = m.icmp_quoted(f);
    if m.malformed.is_some_and(|r| r.is_l3()) {
        assert!(
            !m.has_l4 && !m.has_ports,
            "l3-malformed with transport facts: {m:?}"
        );
    }
    if m.has_ports {
        assert!(m.has_l4);
    }
    if m.l3_ok() {
        assert!(m.l3_end() <= f.len());
    }
    m
}

fn tcp_v4(b: Builder, payload: &[u8]) -> Vec<u8> {
    b.tcp(
        A4,
        B4,
        &Tcp::new(1000, 80, tf::SYN).options(&[2, 4, 5, 0xb4]),
        payload,
    )
}

/// What the IP layer should say about a frame cut to `n` bytes, the IP header starting at
/// `l3`, with header length `hlen` and total length `tot`. `None` when the IP layer is fine.
fn expect_ip_cut(v6: bool, n: usize, l3: usize, hlen: usize, tot: usize) -> Option<M> {
    let avail = n - l3;
    if v6 {
        if avail < 40 {
            Some(M::TruncatedIpv6)
        } else if avail < tot {
            Some(M::BadIpv6PayloadLength)
        } else {
            None
        }
    } else if avail < 20 || avail < hlen {
        Some(M::TruncatedIpv4)
    } else if avail < tot {
        Some(M::BadIpv4TotalLength)
    } else {
        None
    }
}

/// Truncate a frame at every length: the link and IP layers report exactly the expected
/// reason, and nothing claims a transport header.
fn cut_everywhere(name: &str, full: &[u8], link: LinkType, tags: usize) {
    let m0 = parse(full, link);
    assert_eq!(m0.malformed, None, "{name}: the full frame is fine");
    assert!(m0.has_l4, "{name}");
    let l3 = m0.l3_off as usize;
    let v6 = m0.l3 == L3::Ipv6;
    let hlen = if v6 {
        40
    } else {
        (full[l3] & 0xf) as usize * 4
    };
    let tot = m0.l3_len as usize;
    for n in 0..full.len() {
        let m = parse(&full[..n], link);
        let want = if link == ETH && n < 14 {
            Some(M::TruncatedEthernet)
        } else if link == ETH && n < 14 + 4 * tags {
            Some(M::TruncatedVlan)
        } else if link == RAW && n == 0 {
            Some(M::TruncatedIp)
        } else {
            expect_ip_cut(v6, n, l3, hlen, tot)
        };
        assert_eq!(m.malformed, want, "{name}: cut at {n}");
        assert!(!m.has_l4, "{name}: cut at {n} still has a transport header");
        if n >= 14 + 4 * tags || link == RAW && n > 0 {
            assert_eq!(m.l3, m0.l3, "{name}: cut at {n}");
        }
        if let Some(r) = want {
            assert!(r.is_l3());
        }
    }
}

#[test]
fn truncated_at_every_length() {
    let frames: Vec<(&str, Vec<u8>, LinkType, usize)> = vec![
        ("v4 tcp", tcp_v4(Builder::new(), b"payload"), ETH, 0),
        ("v4 tcp raw", tcp_v4(Builder::raw(), b"payload"), RAW, 0),
        (
            "v4 tcp options",
            tcp_v4(Builder::new().ipv4_options(&[1, 1, 1, 0]), b"p"),
            ETH,
            0,
        ),
        ("v4 tcp vlan", tcp_v4(Builder::new().vlan(5), b""), ETH, 1),
        (
            "v4 tcp qinq",
            tcp_v4(Builder::new().qinq(5, 6), b""),
            ETH,
            2,
        ),
        ("v4 udp", Builder::new().udp(A4, B4, 1, 2, b"xyz"), ETH, 0),
        (
            "v4 icmp echo",
            Builder::new().icmp_echo(A4, B4, true, 1, 2, b"abcd"),
            ETH,
            0,
        ),
        (
            "v6 tcp",
            Builder::new().tcp(a6(), b6(), &Tcp::new(1, 2, tf::ACK), b"p"),
            ETH,
            0,
        ),
        (
            "v6 udp ext",
            Builder::new()
                .hop_by_hop()
                .dest_opts()
                .udp(a6(), b6(), 1, 2, b"p"),
            ETH,
            0,
        ),
        (
            "v6 icmp raw",
            Builder::raw().icmp_echo(a6(), b6(), true, 1, 2, b""),
            RAW,
            0,
        ),
    ];
    for (name, f, link, tags) in &frames {
        cut_everywhere(name, f, *link, *tags);
    }
}

/// Cut the IP packet and make its length field agree, so that the IP layer is sound and the
/// transport header is what is short.
fn cut_consistently(f: &[u8], link: LinkType, ip_len: usize) -> Vec<u8> {
    let m = PacketMeta::parse(f, link);
    let l3 = m.l3_off as usize;
    let mut g = f[..l3 + ip_len].to_vec();
    if m.l3 == L3::Ipv4 {
        g[l3 + 2..l3 + 4].copy_from_slice(&(ip_len as u16).to_be_bytes());
        hostile::fix_ipv4_checksum_at(&mut g, l3);
    } else {
        g[l3 + 4..l3 + 6].copy_from_slice(&((ip_len - 40) as u16).to_be_bytes());
    }
    g
}

#[test]
fn transport_truncated_at_every_length() {
    // (name, frame, link, transport kind)
    let tcp_opts = Tcp::new(1000, 80, tf::SYN).options(&[2, 4, 5, 0xb4, 1, 1, 1, 0]); // doff 7
    let frames: Vec<(&str, Vec<u8>, LinkType)> = vec![
        (
            "v4 tcp",
            Builder::new().tcp(A4, B4, &tcp_opts, b"data"),
            ETH,
        ),
        (
            "v6 tcp",
            Builder::raw().tcp(a6(), b6(), &tcp_opts, b"data"),
            RAW,
        ),
        ("v4 udp", Builder::new().udp(A4, B4, 1, 2, b"data"), ETH),
        ("v6 udp", Builder::new().udp(a6(), b6(), 1, 2, b"data"), ETH),
        (
            "v4 icmp echo",
            Builder::new().icmp_echo(A4, B4, true, 1, 2, b"data"),
            ETH,
        ),
        (
            "v4 icmp unreach",
            Builder::new().icmp(A4, B4, 3, 1, 0, b"data"),
            ETH,
        ),
        (
            "v6 icmp echo",
            Builder::new().icmp_echo(a6(), b6(), false, 1, 2, b"data"),
            ETH,
        ),
        (
            "v6 icmp unreach",
            Builder::new().icmp(a6(), b6(), 1, 0, 0, b"data"),
            ETH,
        ),
        (
            "v6 tcp ext",
            Builder::new()
                .hop_by_hop()
                .routing()
                .tcp(a6(), b6(), &tcp_opts, b"d"),
            ETH,
        ),
    ];
    for (name, f, link) in &frames {
        let m0 = parse(f, *link);
        assert_eq!(m0.malformed, None, "{name}");
        let l3 = m0.l3_off as usize;
        let l4 = m0.l4_off as usize;
        let hdr_ip = l4 - l3; // IP header + extension headers
        let full = m0.l3_len as usize;
        let v6 = m0.l3 == L3::Ipv6;
        let min_ip = if v6 { 40 } else { 20 };
        for ip_len in min_ip..=full {
            let g = cut_consistently(f, *link, ip_len);
            let m = parse(&g, *link);
            let have = ip_len as isize - hdr_ip as isize;
            let want: Option<M> = if have < 0 {
                Some(M::TruncatedExtHeader)
            } else {
                let have = have as usize;
                let typ = f[l4];
                match m0.l4proto {
                    6 if have < 20 => Some(M::TruncatedTcp),
                    6 if have < 28 => Some(M::BadTcpDoff),
                    17 if have < 8 => Some(M::TruncatedUdp),
                    17 if have < 12 => Some(M::BadUdpLength), // length field says 12
                    1 if have < 4 || (typ == 8 && have < 8) => Some(M::TruncatedIcmp),
                    58 if have < 4 || (typ == 129 && have < 8) => Some(M::TruncatedIcmpv6),
                    _ => None,
                }
            };
            assert_eq!(m.malformed, want, "{name}: ip length {ip_len}");
            assert_eq!(m.has_l4, want.is_none(), "{name}: ip length {ip_len}");
            assert_eq!(
                m.has_ports,
                want.is_none() && matches!(m0.l4proto, 6 | 17),
                "{name}: {ip_len}"
            );
            if let Some(r) = want {
                assert!(!r.is_l3(), "{name}: transport problems are not l3");
                // The network fields stay readable.
                let saddr = if v6 { Field::Ip6Saddr } else { Field::IpSaddr };
                assert_eq!(m.get(&g, saddr), Some(m0.saddr), "{name}: {ip_len}");
                assert_eq!(m.get(&g, Field::ThDport), None);
                assert_eq!(m.get(&g, Field::TcpFlags), None);
                if r == M::TruncatedExtHeader {
                    assert_eq!(m.l4proto, 0);
                } else {
                    assert_eq!(m.l4proto, m0.l4proto);
                }
            }
        }
    }
}

#[test]
fn ipv4_ihl() {
    let f = tcp_v4(Builder::new(), b"0123456789012345678901234567890123456789");
    for ihl in 0..5 {
        let mut g = f.clone();
        hostile::set_ipv4_ihl(&mut g, ETH, ihl);
        let m = parse(&g, ETH);
        assert_eq!(m.malformed, Some(M::BadIhl), "ihl {ihl}");
        assert!(m.malformed.unwrap().is_l3());
        assert_eq!(m.l3, L3::Ipv4);
        assert_eq!(m.get(&g, Field::IpSaddr), None);
    }
    // IHL 15 = 60 bytes: longer than a 44-byte packet.
    let short = tcp_v4(Builder::new(), b"");
    let mut g = short.clone();
    hostile::set_ipv4_ihl(&mut g, ETH, 15);
    assert_eq!(parse(&g, ETH).malformed, Some(M::TruncatedIpv4));
    // ... and longer than the total length but within a padded frame.
    let mut g = hostile::pad(&short, 14 + 80);
    hostile::set_ipv4_ihl(&mut g, ETH, 15);
    assert_eq!(parse(&g, ETH).malformed, Some(M::BadIpv4TotalLength));
    // IHL 6 on a packet with a 20-byte header: the "options" eat the TCP header's start.
    let mut g = f.clone();
    hostile::set_ipv4_ihl(&mut g, ETH, 6);
    let m = parse(&g, ETH);
    assert_eq!(
        m.malformed, None,
        "a 4-byte shift still leaves a plausible header here"
    );
    assert_eq!(m.l4_off, 14 + 24);
    // IHL 13 over a 20 + 24 + 0 packet of 44 bytes: header fits (52 > 44? no) -> truncated.
    let mut g = short.clone();
    hostile::set_ipv4_ihl(&mut g, ETH, 13);
    assert_eq!(parse(&g, ETH).malformed, Some(M::TruncatedIpv4));
    // IHL 11 (44 bytes) on a 44-byte packet: the transport header is empty.
    let mut g = short;
    hostile::set_ipv4_ihl(&mut g, ETH, 11);
    let m = parse(&g, ETH);
    assert_eq!(m.malformed, Some(M::TruncatedTcp));
    assert!(!m.has_l4);
}

#[test]
fn ipv4_total_length() {
    let f = tcp_v4(Builder::new(), b"hello");
    let ip_len = f.len() - 14;
    // Larger than the frame.
    for tl in [ip_len + 1, ip_len + 100, 65535] {
        let mut g = f.clone();
        hostile::set_ipv4_total_length(&mut g, ETH, tl as u16);
        let m = parse(&g, ETH);
        assert_eq!(m.malformed, Some(M::BadIpv4TotalLength), "tl {tl}");
        assert!(!m.has_l4);
    }
    // Smaller than the header.
    for tl in [0, 1, 19] {
        let mut g = f.clone();
        hostile::set_ipv4_total_length(&mut g, ETH, tl);
        assert_eq!(
            parse(&g, ETH).malformed,
            Some(M::BadIpv4TotalLength),
            "tl {tl}"
        );
    }
    // Exactly the header: an empty TCP segment.
    let mut g = f.clone();
    hostile::set_ipv4_total_length(&mut g, ETH, 20);
    let m = parse(&g, ETH);
    assert_eq!(m.malformed, Some(M::TruncatedTcp));
    assert_eq!(m.l3_len, 20);
    // Smaller than the frame: the rest is padding and the payload shrinks.
    let mut g = f.clone();
    hostile::set_ipv4_total_length(&mut g, ETH, (ip_len - 2) as u16);
    let m = parse(&g, ETH);
    assert_eq!(m.malformed, None);
    assert_eq!(m.payload(&g), Some((g.len() - 5, 3)));
    // Ethernet minimum frame padding after a short packet.
    let tiny = Builder::new().udp(A4, B4, 1, 2, b"");
    let padded = hostile::pad(&tiny, 60);
    let m = parse(&padded, ETH);
    assert_eq!(m.malformed, None);
    assert_eq!((m.l3_len, m.len), (28, 60));
    assert_eq!(m.get(&padded, Field::IpLength), Some(28));
    assert_eq!(m.payload(&padded), Some((42, 0)));
}

#[test]
fn ipv4_options() {
    let opts: [&[u8]; 4] = [
        &[1, 1, 1, 0],                          // NOPs, EOL
        &[7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0], // record route
        &[0x94, 4, 0, 0],                       // router alert
        &[1; 40],                               // the maximum: IHL 15
    ];
    for o in opts {
        let f = tcp_v4(Builder::new().ipv4_options(o), b"x");
        let m = parse(&f, ETH);
        let hlen = 20 + o.len().div_ceil(4) * 4;
        assert_eq!(m.malformed, None);
        assert_eq!(m.l4_off as usize, 14 + hlen);
        assert_eq!(m.get(&f, Field::IpHdrlength), Some(hlen as u128 / 4));
        assert_eq!(m.get(&f, Field::TcpDport), Some(80));
        assert!(m.ipv4_checksum_ok(&f));
    }
    // A corrupted header checksum is noticed (but not malformed: Linux drops it in ip_rcv,
    // which the engine may or may not model).
    let mut f = tcp_v4(Builder::new(), b"");
    f[14 + 10] ^= 0xff;
    let m = parse(&f, ETH);
    assert_eq!(m.malformed, None);
    assert!(!m.ipv4_checksum_ok(&f));
}

#[test]
fn ipv4_fragments() {
    let seg =
        weir_wire::build::tcp_segment(A4.into(), B4.into(), &Tcp::new(1, 22, tf::SYN), &[7; 64]);
    let udp = weir_wire::build::udp_datagram(A4.into(), B4.into(), 53, 53, &[7; 64]);
    // First fragment with the whole TCP header.
    let f = Builder::new()
        .ip_id(9)
        .fragment(0, true)
        .ip(A4, B4, 6, &seg[..40]);
    let m = parse(&f, ETH);
    assert_eq!(
        (m.frag, m.malformed, m.has_l4, m.has_ports),
        (Frag::First, None, true, true)
    );
    assert_eq!(m.get(&f, Field::TcpDport), Some(22));
    assert_eq!(m.get(&f, Field::IpFragOff), Some(0x2000));
    // Middle and last fragments: no transport header, not malformed.
    for (off, more) in [(5u16, true), (8, false), (0x1000, true), (0x1fff, false)] {
        let f = Builder::new()
            .ip_id(9)
            .fragment(off, more)
            .ip(A4, B4, 6, &seg[40..]);
        let m = parse(&f, ETH);
        assert_eq!(
            (m.frag, m.malformed, m.has_l4, m.has_ports),
            (Frag::Later, None, false, false)
        );
        assert_eq!(m.l4proto, 6);
        assert_eq!(m.l4_off, 34);
        assert_eq!(m.get(&f, Field::TcpDport), None);
        assert_eq!(m.get(&f, Field::ThDport), None);
        assert_eq!(m.get(&f, Field::IpSaddr), Some(u32::from(A4) as u128));
        assert_eq!(
            m.get(&f, Field::IpFragOff),
            Some(off as u128 | if more { 0x2000 } else { 0 })
        );
    }
    // Tiny first fragments: 0, 8 and 16 bytes of TCP, and a header cut inside its options.
    for n in [0usize, 8, 16] {
        let f = Builder::new().fragment(0, true).ip(A4, B4, 6, &seg[..n]);
        let m = parse(&f, ETH);
        assert_eq!(m.malformed, Some(M::TinyFragment), "{n}");
        assert!(!M::TinyFragment.is_l3());
        assert!(!m.has_l4 && !m.has_ports);
        assert_eq!(m.get(&f, Field::IpDaddr), Some(u32::from(B4) as u128));
    }
    let opt = weir_wire::build::tcp_segment(
        A4.into(),
        B4.into(),
        &Tcp::new(1, 22, tf::SYN).options(&[1; 12]),
        b"",
    );
    let f = Builder::new().fragment(0, true).ip(A4, B4, 6, &opt[..24]);
    assert_eq!(parse(&f, ETH).malformed, Some(M::TinyFragment));
    // Tiny UDP / ICMP first fragments.
    let f = Builder::new().fragment(0, true).ip(A4, B4, 17, &udp[..4]);
    assert_eq!(parse(&f, ETH).malformed, Some(M::TinyFragment));
    // A first UDP fragment's length field covers the whole datagram: that is fine.
    let f = Builder::new().fragment(0, true).ip(A4, B4, 17, &udp[..16]);
    let m = parse(&f, ETH);
    assert_eq!((m.malformed, m.has_ports, m.dport), (None, true, 53));
    // DF alone is not a fragment.
    let f = tcp_v4(Builder::new().dont_fragment(), b"");
    assert_eq!(parse(&f, ETH).frag, Frag::None);
    // Nor the reserved ("evil") bit.
    let mut f = tcp_v4(Builder::new(), b"");
    f[14 + 6] |= 0x80;
    hostile::fix_ipv4_checksum_at(&mut f, 14);
    let m = parse(&f, ETH);
    assert_eq!((m.frag, m.has_l4), (Frag::None, true));
}

#[test]
fn ipv6_fragments() {
    let seg = weir_wire::build::tcp_segment(
        a6().into(),
        b6().into(),
        &Tcp::new(1, 22, tf::SYN),
        &[7; 64],
    );
    let f = Builder::new()
        .fragment(0, true)
        .ip(a6(), b6(), 6, &seg[..48]);
    let m = parse(&f, ETH);
    assert_eq!(
        (m.frag, m.malformed, m.has_l4, m.l4proto),
        (Frag::First, None, true, 6)
    );
    assert_eq!(m.l4_off, 14 + 48);
    assert_eq!(m.get(&f, Field::Ip6Nexthdr), Some(44));
    assert_eq!(m.get(&f, Field::TcpDport), Some(22));
    let f = Builder::new()
        .fragment(6, false)
        .ip(a6(), b6(), 6, &seg[48..]);
    let m = parse(&f, ETH);
    assert_eq!(
        (m.frag, m.malformed, m.has_l4, m.l4proto),
        (Frag::Later, None, false, 6)
    );
    assert_eq!(m.get(&f, Field::TcpDport), None);
    assert_eq!(m.get(&f, Field::Ip6Saddr), Some(u128::from(a6())));
    let f = Builder::new()
        .hop_by_hop()
        .fragment(0, true)
        .ip(a6(), b6(), 6, &seg[..10]);
    let m = parse(&f, ETH);
    assert_eq!((m.frag, m.malformed), (Frag::First, Some(M::TinyFragment)));
    // Atomic fragment (offset 0, no more fragments): a whole packet.
    let f = Builder::new().fragment(0, false).ip(a6(), b6(), 6, &seg);
    let m = parse(&f, ETH);
    assert_eq!((m.frag, m.malformed, m.has_l4), (Frag::None, None, true));
    // A fragment header cut short.
    let f = Builder::new().fragment(0, true).ip(a6(), b6(), 6, &[]);
    let g = cut_consistently(&f, ETH, 44);
    let m = parse(&g, ETH);
    assert_eq!((m.malformed, m.l4proto), (Some(M::TruncatedExtHeader), 0));
}

#[test]
fn ipv6_extension_chains() {
    let t = Tcp::new(1, 443, tf::SYN);
    let cases: Vec<(&str, Builder, usize)> = vec![
        ("hbh", Builder::new().hop_by_hop(), 8),
        (
            "hbh routing dst",
            Builder::new().hop_by_hop().routing().dest_opts(),
            24,
        ),
        ("ah", Builder::new().ext(51, &[0; 10]), 12 + 4),
        ("big dstopts", Builder::new().ext(60, &[0; 2046]), 2048),
        ("mobility", Builder::new().ext(135, &[0; 6]), 8),
    ];
    for (name, b, ext_len) in cases {
        let f = b.tcp(a6(), b6(), &t, b"x");
        let m = parse(&f, ETH);
        assert_eq!(m.malformed, None, "{name}");
        assert_eq!(
            (m.l4proto, m.l4_off as usize),
            (6, 14 + 40 + ext_len),
            "{name}"
        );
        assert_eq!(m.get(&f, Field::TcpDport), Some(443), "{name}");
        assert_eq!(
            m.get(&f, Field::Ip6Nexthdr),
            Some(f[14 + 6] as u128),
            "{name}"
        );
    }
    // The longest chain accepted, and one more.
    let mut b = Builder::new();
    for _ in 0..MAX_EXT_HEADERS {
        b = b.dest_opts();
    }
    let f = b.clone().udp(a6(), b6(), 1, 53, b"");
    let m = parse(&f, ETH);
    assert_eq!((m.malformed, m.l4proto, m.dport), (None, 17, 53));
    let f = b.dest_opts().udp(a6(), b6(), 1, 53, b"");
    let m = parse(&f, ETH);
    assert_eq!(m.malformed, Some(M::ExtHeaderChainTooLong));
    assert!(!M::ExtHeaderChainTooLong.is_l3());
    assert_eq!((m.l4proto, m.has_l4, m.has_ports), (0, false, false));
    assert_eq!(
        m.get(&f, Field::Ip6Saddr),
        Some(u128::from(a6())),
        "addresses stay readable"
    );
    assert_eq!(m.get(&f, Field::UdpDport), None);
    // An extension header whose length runs past the packet.
    let mut f = Builder::new().hop_by_hop().udp(a6(), b6(), 1, 53, b"");
    f[14 + 40 + 1] = 200;
    let m = parse(&f, ETH);
    assert_eq!((m.malformed, m.l4proto), (Some(M::TruncatedExtHeader), 0));
    // No next header.
    let f = Builder::new().dest_opts().ip(a6(), b6(), 59, b"ignored");
    let m = parse(&f, ETH);
    assert_eq!((m.malformed, m.l4proto, m.has_l4), (None, 59, false));
    // ESP is a final header whose payload is opaque.
    let f = Builder::new().ip(a6(), b6(), 50, &[0; 16]);
    let m = parse(&f, ETH);
    assert_eq!(
        (m.malformed, m.l4proto, m.has_l4, m.has_ports),
        (None, 50, true, false)
    );
}

#[test]
fn ipv6_lengths_and_versions() {
    let f = Builder::new().udp(a6(), b6(), 1, 2, b"abc");
    let mut g = f.clone();
    hostile::set_ipv6_payload_length(&mut g, ETH, 12);
    assert_eq!(parse(&g, ETH).malformed, Some(M::BadIpv6PayloadLength));
    assert!(M::BadIpv6PayloadLength.is_l3());
    // Shorter than the UDP datagram: the UDP length now exceeds the payload.
    let mut g = f.clone();
    hostile::set_ipv6_payload_length(&mut g, ETH, 10);
    assert_eq!(parse(&g, ETH).malformed, Some(M::BadUdpLength));
    // Payload length 0 without hop-by-hop: an empty packet, UDP truncated.
    let mut g = f.clone();
    hostile::set_ipv6_payload_length(&mut g, ETH, 0);
    assert_eq!(parse(&g, ETH).malformed, Some(M::TruncatedUdp));
    // Jumbogram form (payload length 0, hop-by-hop first): the frame gives the length.
    let mut g = Builder::new().hop_by_hop().udp(a6(), b6(), 1, 2, b"abc");
    hostile::set_ipv6_payload_length(&mut g, ETH, 0);
    let m = parse(&g, ETH);
    assert_eq!((m.malformed, m.dport), (None, 2));
    // Version mismatch with the EtherType, either way.
    let mut g = f.clone();
    hostile::set_ip_version(&mut g, ETH, 4);
    let m = parse(&g, ETH);
    assert_eq!((m.l3, m.malformed), (L3::Ipv6, Some(M::BadIpVersion)));
    let mut g = tcp_v4(Builder::new(), b"");
    hostile::set_ip_version(&mut g, ETH, 6);
    assert_eq!(parse(&g, ETH).malformed, Some(M::BadIpVersion));
    // Raw IP: version picks the family; anything else is bad.
    for v in [0u8, 1, 5, 7, 15] {
        let mut g = tcp_v4(Builder::raw(), b"");
        g[0] = (v << 4) | 5;
        let m = parse(&g, RAW);
        assert_eq!(
            (m.l3, m.malformed),
            (L3::Other(0), Some(M::BadIpVersion)),
            "v {v}"
        );
        assert!(M::BadIpVersion.is_l3());
    }
    assert_eq!(parse(&[], RAW).malformed, Some(M::TruncatedIp));
}

#[test]
fn tcp_data_offset() {
    let f = tcp_v4(Builder::new(), &[0u8; 20]); // doff 6, 20 bytes of payload
    for doff in 0..5 {
        let mut g = f.clone();
        hostile::set_tcp_doff(&mut g, ETH, doff);
        let m = parse(&g, ETH);
        assert_eq!(m.malformed, Some(M::BadTcpDoff), "doff {doff}");
        assert!(!m.has_l4 && !m.has_ports);
        assert_eq!(m.get(&g, Field::TcpSport), None);
        assert_eq!(m.get(&g, Field::IpSaddr), Some(u32::from(A4) as u128));
    }
    // 24 + 20 = 44 bytes present: doff up to 11 fits, 12.. runs past the packet.
    for doff in 5..=15u8 {
        let mut g = f.clone();
        hostile::set_tcp_doff(&mut g, ETH, doff);
        let m = parse(&g, ETH);
        let want = if doff <= 11 {
            None
        } else {
            Some(M::BadTcpDoff)
        };
        assert_eq!(m.malformed, want, "doff {doff}");
        assert_eq!(m.has_l4, want.is_none());
        if want.is_none() {
            assert_eq!(m.get(&g, Field::TcpDoff), Some(doff as u128));
            assert_eq!(m.payload(&g).unwrap().1, 44 - doff as usize * 4);
        }
    }
}

#[test]
fn udp_lengths() {
    // Zero-length payload is fine.
    let f = Builder::new().udp(A4, B4, 1, 53, b"");
    let m = parse(&f, ETH);
    assert_eq!((m.malformed, m.has_l4, m.has_ports), (None, true, true));
    assert_eq!(m.get(&f, Field::UdpLength), Some(8));
    assert_eq!(m.payload(&f), Some((f.len(), 0)));
    let f = Builder::new().udp(A4, B4, 1, 53, b"abcdef");
    for (ul, want) in [
        (0u16, Some(M::BadUdpLength)),
        (7, Some(M::BadUdpLength)),
        (8, None),  // shorter than the IP payload: trailing bytes, fine
        (14, None), // exact
        (15, Some(M::BadUdpLength)),
        (65535, Some(M::BadUdpLength)),
    ] {
        let mut g = f.clone();
        hostile::set_udp_length(&mut g, ETH, ul);
        let m = parse(&g, ETH);
        assert_eq!(m.malformed, want, "udp length {ul}");
        assert_eq!(m.has_ports, want.is_none());
    }
    // UDP-Lite's length field is a checksum coverage: 0 is fine.
    let f = Builder::new().ip(A4, B4, 136, &[0, 1, 0, 2, 0, 0, 0, 0]);
    let m = parse(&f, ETH);
    assert_eq!((m.malformed, m.has_ports, m.dport), (None, true, 2));
}

#[test]
fn icmp_errors_quoting_truncated_headers() {
    let orig = tcp_v4(Builder::raw(), b"some payload");
    let full_ip = orig.len();
    // (bytes of the original quoted, quoted meta expectations)
    for keep in 0..=full_ip {
        let f = Builder::new().icmp_error(B4, A4, 3, 3, &orig, keep);
        let m = parse(&f, ETH);
        assert_eq!(m.malformed, None, "keep {keep}: the error itself is fine");
        assert!(m.has_l4 && m.is_icmp_error(&f));
        assert_eq!(m.get(&f, Field::IcmpType), Some(3));
        assert_eq!(m.get(&f, Field::IcmpId), None);
        let q = m.icmp_quoted(&f).expect("quoted packet");
        assert_eq!(q.l3, L3::Ipv4);
        assert_eq!(q.l3_off as usize, 14 + 20 + 8);
        if keep < 20 {
            assert_eq!(q.malformed, Some(M::TruncatedIpv4), "keep {keep}");
            assert!(!q.has_ports);
            continue;
        }
        assert_eq!(
            (q.saddr, q.daddr),
            (u32::from(A4) as u128, u32::from(B4) as u128)
        );
        let have = keep - 20;
        assert_eq!(q.has_ports, have >= 4, "keep {keep}");
        if have >= 4 {
            assert_eq!((q.sport, q.dport), (1000, 80));
        }
        assert_eq!(q.has_l4, have >= 24, "keep {keep}");
        assert_eq!(q.malformed, None, "keep {keep}: a cut quote is expected");
        assert_eq!(q.get(&f, Field::IpSaddr), Some(u32::from(A4) as u128));
        assert_eq!(q.get(&f, Field::IpLength), Some(full_ip as u128));
    }
    // ICMPv6 packet too big quoting a UDP header.
    let orig = Builder::raw().udp(a6(), b6(), 4000, 443, &[0; 100]);
    let f = Builder::new().icmp(b6(), a6(), 2, 0, 1280, &orig[..48]);
    let m = parse(&f, ETH);
    assert!(m.is_icmp_error(&f));
    let q = m.icmp_quoted(&f).unwrap();
    assert_eq!(
        (q.l3, q.l4proto, q.has_l4, q.sport, q.dport),
        (L3::Ipv6, 17, true, 4000, 443)
    );
    assert_eq!(q.get(&f, Field::UdpDport), Some(443));
    // An error truncated to type and code: fine, with nothing quoted.
    let f = Builder::new().icmp(B4, A4, 11, 0, 0, b"");
    let g = cut_consistently(&f, ETH, 24);
    let m = parse(&g, ETH);
    assert_eq!((m.malformed, m.has_l4), (None, true));
    assert_eq!(m.get(&g, Field::IcmpCode), Some(0));
    assert_eq!(m.icmp_quoted(&g).unwrap().malformed, Some(M::TruncatedIpv4));
    // Echo is not an error; neither is a fragment.
    let f = Builder::new().icmp_echo(A4, B4, true, 1, 1, b"");
    assert_eq!(parse(&f, ETH).icmp_quoted(&f), None);
}

#[test]
fn vlan_and_qinq() {
    let t = Tcp::new(1, 2, tf::SYN);
    // 802.1Q with priority bits: the id is the low 12 bits.
    let f = Builder::new().vlan_tag(0x8100, 0xe064).tcp(A4, B4, &t, b"");
    let m = parse(&f, ETH);
    assert_eq!(
        (m.vlan, m.l3_off, m.l3, m.malformed),
        (Some(100), 18, L3::Ipv4, None)
    );
    assert_eq!(m.get(&f, Field::VlanId), Some(100));
    assert_eq!(m.get(&f, Field::EtherType), Some(0x8100));
    // 802.1ad alone, QinQ 88a8/8100, old QinQ 9100/8100: the outermost id.
    for b in [
        Builder::new().vlan_tag(0x88a8, 300),
        Builder::new().qinq(300, 400),
        Builder::new().vlan_tag(0x9100, 300).vlan(400),
    ] {
        let f = b.tcp(a6(), b6(), &t, b"");
        let m = parse(&f, ETH);
        assert_eq!(
            (m.vlan, m.l3, m.malformed, m.dport),
            (Some(300), L3::Ipv6, None, 2)
        );
    }
    // A third tag is not followed: the frame is not IP as far as the parser goes.
    let f = Builder::new().vlan(1).vlan(2).vlan(3).tcp(A4, B4, &t, b"");
    let m = parse(&f, ETH);
    assert_eq!(
        (m.l3, m.malformed, m.vlan),
        (L3::Other(0x8100), None, Some(1))
    );
    assert_eq!(m.get(&f, Field::IpSaddr), None);
    // Tagged ARP; untagged unknown EtherType.
    let f = Builder::new()
        .vlan(9)
        .ethertype(0x0806)
        .ip(A4, B4, 0, &[0; 28]);
    let m = parse(&f, ETH);
    assert_eq!(
        (m.l3, m.malformed, m.vlan, m.l4proto),
        (L3::Other(0x0806), None, Some(9), 0)
    );
    assert_eq!(m.get(&f, Field::EtherSaddr), Some(0x0200_0000_0001));
    let f = Builder::new().ethertype(0x88cc).ip(A4, B4, 0, &[]);
    let m = parse(&f, ETH);
    assert_eq!((m.l3, m.malformed), (L3::Other(0x88cc), None));
    assert_eq!(m.l3.ethertype(), 0x88cc);
    // Exactly 14 bytes with a non-IP type: fine; with IP: truncated IPv4.
    assert_eq!(parse(&f[..14], ETH).malformed, None);
    let f = tcp_v4(Builder::new(), b"");
    assert_eq!(parse(&f[..14], ETH).malformed, Some(M::TruncatedIpv4));
}

#[test]
fn get_on_another_frame_never_panics() {
    let big =
        Builder::new()
            .qinq(1, 2)
            .hop_by_hop()
            .tcp(a6(), b6(), &Tcp::new(1, 2, tf::SYN), &[0; 100]);
    let m = PacketMeta::parse(&big, ETH);
    for n in 0..big.len() {
        for f in Field::ALL {
            let _ = m.get(&big[..n], *f);
        }
        let _ = m.payload(&big[..n]);
        let _ = m.icmp_quoted(&big[..n]);
        let _ = m.ipv4_checksum_ok(&big[..n]);
    }
}

#[test]
fn l3_classification_of_reasons() {
    let l3 = [
        "truncated-ethernet",
        "truncated-vlan",
        "truncated-ip",
        "bad-ip-version",
        "truncated-ipv4",
        "bad-ihl",
        "bad-ipv4-total-length",
        "truncated-ipv6",
        "bad-ipv6-payload-length",
    ];
    for r in M::ALL {
        assert_eq!(r.is_l3(), l3.contains(&r.reason()), "{}", r.reason());
    }
    for name in [
        "truncated-ext-header",
        "ext-header-chain-too-long",
        "truncated-tcp",
        "bad-tcp-doff",
        "truncated-udp",
        "bad-udp-length",
        "truncated-icmp",
        "tiny-fragment",
    ] {
        assert!(M::from_reason(name).is_some_and(|r| !r.is_l3()), "{name}");
    }
}

/// NAT-style rewrite with incremental checksum updates gives the same bytes as building the
/// rewritten packet from scratch.
#[test]
fn incremental_nat_rewrite_matches_rebuild() {
    let n = Ipv4Addr::new(203, 0, 113, 7);
    let t = Tcp::new(40000, 80, tf::SYN);
    let mut f = Builder::new().tcp(A4, B4, &t, b"data");
    let rebuilt = Builder::new().tcp(n, B4, &Tcp::new(61000, 80, tf::SYN), b"data");
    let m = PacketMeta::parse(&f, ETH);
    let (l3, l4) = (m.l3_off as usize, m.l4_off as usize);
    let old = u32::from(A4);
    let new = u32::from(n);
    let ipc = u16::from_be_bytes([f[l3 + 10], f[l3 + 11]]);
    let tc = u16::from_be_bytes([f[l4 + 16], f[l4 + 17]]);
    f[l3 + 12..l3 + 16].copy_from_slice(&n.octets());
    f[l3 + 10..l3 + 12].copy_from_slice(&checksum::update32(ipc, old, new).to_be_bytes());
    let tc = checksum::update32(tc, old, new);
    let tc = checksum::update16(tc, 40000, 61000);
    f[l4..l4 + 2].copy_from_slice(&61000u16.to_be_bytes());
    f[l4 + 16..l4 + 18].copy_from_slice(&tc.to_be_bytes());
    assert_eq!(f, rebuilt);

    // IPv6 address rewrite of a UDP datagram.
    let n6: Ipv6Addr = "2001:db8:1::99".parse().unwrap();
    let mut f = Builder::new().udp(a6(), b6(), 5, 6, b"x");
    let rebuilt = Builder::new().udp(n6, b6(), 5, 6, b"x");
    let uc = u16::from_be_bytes([f[14 + 46], f[14 + 47]]);
    let uc = checksum::udp_update(uc, |c| {
        checksum::update128(c, u128::from(a6()), u128::from(n6))
    });
    f[14 + 8..14 + 24].copy_from_slice(&n6.octets());
    f[14 + 46..14 + 48].copy_from_slice(&uc.to_be_bytes());
    assert_eq!(f, rebuilt);
    let _ = IpAddr::from(n6);
}
