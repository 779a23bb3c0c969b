//! Property tests: parse() and get() never panic and stay coherent on arbitrary bytes, and
//! built packets read back what was put in.

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use weir_wire::build::{Builder, Tcp};
use weir_wire::{Field, LinkType, PacketMeta, L3};

fn check_coherent(f: &[u8], link: LinkType) {
    let m = PacketMeta::parse(f, link);
    assert_eq!(m.len as usize, f.len());
    for fl in Field::ALL {
        if let Some(v) = m.get(f, *fl) {
            assert!(fl.is_header(), "{}", fl.name());
            if fl.bits() < 128 {
                assert_eq!(v >> fl.bits(), 0, "{} too wide", fl.name());
            }
        }
    }
    if let Some(r) = m.malformed {
        if r.is_l3() {
            assert!(!m.has_l4 && !m.has_ports);
            assert_eq!(m.get(f, Field::IpSaddr), None);
            assert_eq!(m.get(f, Field::Ip6Saddr), None);
        } else {
            assert!(
                !m.has_l4,
                "transport problem with a transport header: {m:?}"
            );
        }
    }
    if m.has_ports {
        assert!(m.has_l4);
        assert_eq!(m.get(f, Field::ThSport), Some(m.sport as u128));
        assert_eq!(m.get(f, Field::ThDport), Some(m.dport as u128));
    }
    if m.l3_ok() {
        assert!(m.l3_end() <= f.len());
        assert!(m.l4_off as usize <= m.l3_end() || m.malformed.is_some());
        match m.l3 {
            L3::Ipv4 => assert_eq!(m.get(f, Field::IpSaddr), Some(m.saddr)),
            L3::Ipv6 => assert_eq!(m.get(f, Field::Ip6Saddr), Some(m.saddr)),
            L3::Other(_) => unreachable!(),
        }
    }
    if let Some((off, len)) = m.payload(f) {
        assert!(off + len <= f.len());
    }
    if let Some(q) = m.icmp_quoted(f) {
        for fl in Field::ALL {
            let _ = q.get(f, *fl);
        }
        let _ = q.payload(f);
    }
    let _ = m.ipv4_checksum_ok(f);
}

fn bases() -> Vec<(Vec<u8>, LinkType)> {
    let a4 = Ipv4Addr::new(198, 18, 0, 1);
    let b4 = Ipv4Addr::new(198, 18, 0, 2);
    let a6: Ipv6Addr = "2001:db8::1".parse().unwrap();
    let b6: Ipv6Addr = "2001:db8::2".parse().unwrap();
    let t = Tcp::new(1, 2, 0x12).options(&[2, 4, 5, 0xb4]);
    let inner = Builder::raw().tcp(b4, a4, &t, b"x");
    let inner6 = Builder::raw().udp(b6, a6, 3, 4, b"x");
    vec![
        (
            Builder::new().tcp(a4, b4, &t, b"payload"),
            LinkType::Ethernet,
        ),
        (
            Builder::new().qinq(1, 2).udp(a4, b4, 1, 2, b"p"),
            LinkType::Ethernet,
        ),
        (
            Builder::raw()
                .ipv4_options(&[1, 1, 1, 1])
                .icmp_echo(a4, b4, true, 1, 2, b"p"),
            LinkType::RawIp,
        ),
        (
            Builder::new().icmp_error(a4, b4, 3, 3, &inner, inner.len()),
            LinkType::Ethernet,
        ),
        (
            Builder::new().fragment(0, true).tcp(a4, b4, &t, b""),
            LinkType::Ethernet,
        ),
        (
            Builder::new()
                .hop_by_hop()
                .routing()
                .fragment(0, true)
                .dest_opts()
                .tcp(a6, b6, &t, b"p"),
            LinkType::Ethernet,
        ),
        (
            Builder::raw().ext(51, &[0; 10]).udp(a6, b6, 1, 2, b"p"),
            LinkType::RawIp,
        ),
        (
            Builder::new().icmp(a6, b6, 1, 4, 0, &inner6),
            LinkType::Ethernet,
        ),
        (Builder::new().ip(a4, b4, 132, &[0; 16]), LinkType::Ethernet),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        check_coherent(&bytes, LinkType::Ethernet);
        check_coherent(&bytes, LinkType::RawIp);
    }

    /// A frame that is the start of a longer packet (NFQUEUE header copies, snap lengths):
    /// never a panic, and every field read stays inside the bytes that are there.
    #[test]
    fn captured_prefix_never_panics(
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
        wire in 0usize..70000,
    ) {
        for link in [LinkType::Ethernet, LinkType::RawIp] {
            let m = PacketMeta::parse_captured(&bytes, link, wire);
            for f in weir_wire::Field::ALL {
                let _ = m.get(&bytes, *f);
            }
        }
    }

    /// Random bytes behind a plausible start, so the deeper layers get exercised.
    #[test]
    fn plausible_headers_never_panic(
        kind in 0u8..4,
        tail in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
        match kind {
            0 => { f.extend_from_slice(&[0x08, 0x00, 0x45]); }
            1 => { f.extend_from_slice(&[0x86, 0xdd, 0x60]); }
            2 => { f.extend_from_slice(&[0x81, 0x00, 0x00, 0x05, 0x08, 0x00, 0x46]); }
            _ => { f.extend_from_slice(&[0x88, 0xa8, 0x00, 0x05, 0x81, 0x00, 0, 6, 0x86, 0xdd, 0x60]); }
        }
        f.extend_from_slice(&tail);
        check_coherent(&f, LinkType::Ethernet);
        check_coherent(&f[12..], LinkType::RawIp);
    }

    #[test]
    fn mutated_packets_never_panic(
        which in 0usize..9,
        muts in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in any::<prop::sample::Index>(),
        do_cut in any::<bool>(),
    ) {
        let (mut f, link) = bases().swap_remove(which);
        for (i, b) in muts {
            let i = i.index(f.len());
            f[i] = b;
        }
        if do_cut {
            let n = cut.index(f.len() + 1);
            f.truncate(n);
        }
        check_coherent(&f, link);
    }

    #[test]
    fn built_packets_read_back(
        v6 in any::<bool>(),
        udp in any::<bool>(),
        raw in any::<bool>(),
        vlan in proptest::option::of(0u16..4096),
        a in any::<u128>(),
        b in any::<u128>(),
        sport in any::<u16>(),
        dport in any::<u16>(),
        ttl in any::<u8>(),
        dscp in 0u8..64,
        ecn in 0u8..4,
        flags in any::<u8>(),
        seq in any::<u32>(),
        payload in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut bld = if raw { Builder::raw() } else { Builder::new() };
        if let (Some(v), false) = (vlan, raw) {
            bld = bld.vlan(v);
        }
        bld = bld.ttl(ttl).tos(dscp, ecn);
        let (sa, da): (std::net::IpAddr, std::net::IpAddr) = if v6 {
            (Ipv6Addr::from(a).into(), Ipv6Addr::from(b).into())
        } else {
            (Ipv4Addr::from(a as u32).into(), Ipv4Addr::from(b as u32).into())
        };
        let f = if udp {
            bld.udp(sa, da, sport, dport, &payload)
        } else {
            bld.tcp(sa, da, &Tcp::new(sport, dport, flags).seq(seq), &payload)
        };
        let link = if raw { LinkType::RawIp } else { LinkType::Ethernet };
        let m = PacketMeta::parse(&f, link);
        prop_assert_eq!(m.malformed, None);
        prop_assert!(m.has_l4 && m.has_ports);
        prop_assert_eq!((m.sport, m.dport), (sport, dport));
        prop_assert_eq!(m.l4proto, if udp { 17 } else { 6 });
        prop_assert_eq!(m.vlan, if raw { None } else { vlan });
        prop_assert_eq!(m.payload(&f).map(|p| p.1), Some(payload.len()));
        if v6 {
            prop_assert_eq!((m.saddr, m.daddr), (a, b));
            prop_assert_eq!(m.get(&f, Field::Ip6Hoplimit), Some(ttl as u128));
            prop_assert_eq!(m.get(&f, Field::Ip6Dscp), Some(dscp as u128));
            prop_assert_eq!(m.get(&f, Field::Ip6Ecn), Some(ecn as u128));
        } else {
            prop_assert_eq!((m.saddr, m.daddr), (a as u32 as u128, b as u32 as u128));
            prop_assert_eq!(m.get(&f, Field::IpTtl), Some(ttl as u128));
            prop_assert_eq!(m.get(&f, Field::IpDscp), Some(dscp as u128));
            prop_assert_eq!(m.get(&f, Field::IpEcn), Some(ecn as u128));
            prop_assert!(m.ipv4_checksum_ok(&f));
        }
        if !udp {
            prop_assert_eq!(m.tcp_flags, flags);
            prop_assert_eq!(m.get(&f, Field::TcpFlags), Some(flags as u128));
            prop_assert_eq!(m.get(&f, Field::TcpSequence), Some(seq as u128));
        }
        check_coherent(&f, link);
    }
}
