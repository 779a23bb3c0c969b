//! Virtual reassembly: with connection tracking on, the first fragment of a datagram crosses
//! the chains and the later ones follow it (its connection, its NAT translation); a later
//! fragment without a first that passed is dropped and counted. Checked on the bytes: the
//! fragments put together again carry a transport checksum that verifies after NAT.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use weir_conntrack::Config;
use weir_engine::stateful::{PacketCt, Stateful};
use weir_engine::{Compiled, Decision, DropReason, Engine, Meta, Mode};
use weir_lang::ir::Hook;
use weir_wire::build::{tcp_flags as tf, tcp_segment, udp_datagram, Builder, Tcp};
use weir_wire::checksum as cs;
use weir_wire::{Frag, LinkType, PacketMeta, L3};

const H: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);
const S: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 20);
const GW: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 2);

const RULES: &str = "table inet f {
    chain fwd { type filter hook forward priority 0; policy drop;
        ct state invalid counter drop
        ct state established,related counter accept
        ct state new udp dport 53 counter accept
        ct state new tcp dport 80 counter accept
    }
}
table ip n {
    chain post { type nat hook postrouting priority srcnat; oifname \"wan0\" masquerade }
}";

fn stateful(mode: Mode) -> Stateful {
    let (rs, _) = weir_lang::load_str("t.nft", RULES).unwrap_or_else(|(sm, d)| {
        panic!("{}", weir_lang::diag::render_all(&d, &sm));
    });
    Stateful::new(Engine::new(Compiled::build(&rs, mode)), Config::default())
}

/// A frame through prerouting, forward and postrouting (out of wan0 when it comes from lan0,
/// and the other way), confirmed when it leaves.
fn fwd(sf: &mut Stateful, frame: &[u8], iif: &str, now: u64) -> (Decision, Vec<u8>) {
    let mut frame = frame.to_vec();
    let mut pm = PacketMeta::parse(&frame, LinkType::Ethernet);
    let oif = if iif == "lan0" { "wan0" } else { "lan0" };
    let mut pc = PacketCt {
        oif_addr: (oif == "wan0" && pm.l3 == L3::Ipv4).then_some(u32::from(GW) as u128),
        ..PacketCt::default()
    };
    for hook in [Hook::Prerouting, Hook::Forward, Hook::Postrouting] {
        let mut meta = Meta::with_ifnames(iif, if hook == Hook::Prerouting { "" } else { oif });
        let d = sf.hook_mut(hook, &mut frame, &mut pm, &mut meta, now, &mut pc);
        if !d.is_accept() {
            return (d, frame);
        }
    }
    (sf.finish(&mut pc, now), frame)
}

/// A transport payload cut in two IP fragments at `cut` (a multiple of 8).
fn fragments(
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    l4: &[u8],
    cut: usize,
    id: u32,
) -> (Vec<u8>, Vec<u8>) {
    let b = |off: usize, more| {
        Builder::new()
            .ip_id(id as u16)
            .frag_id(id)
            .fragment((off / 8) as u16, more)
    };
    (
        b(0, true).ip(src, dst, proto, &l4[..cut]),
        b(cut, false).ip(src, dst, proto, &l4[cut..]),
    )
}

/// The transport bytes of fragments put back together, with the first one's addresses: its
/// checksum must verify.
fn reassembled_checksum(first: &[u8], later: &[u8]) -> u16 {
    let p1 = PacketMeta::parse(first, LinkType::Ethernet);
    let p2 = PacketMeta::parse(later, LinkType::Ethernet);
    for (f, p) in [(first, &p1), (later, &p2)] {
        if p.l3 == L3::Ipv4 {
            let l3 = p.l3_off as usize;
            assert_eq!(cs::checksum(&f[l3..l3 + 20]), 0, "IPv4 header checksum");
        }
    }
    let mut l4 = first[p1.l4_off as usize..p1.l3_end()].to_vec();
    l4.extend_from_slice(&later[p2.l4_off as usize..p2.l3_end()]);
    let l3 = p1.l3_off as usize;
    let init = if p1.l3 == L3::Ipv6 {
        cs::pseudo_v6(
            first[l3 + 8..l3 + 24].try_into().unwrap(),
            first[l3 + 24..l3 + 40].try_into().unwrap(),
            p1.l4proto,
            l4.len() as u32,
        )
    } else {
        cs::pseudo_v4(
            first[l3 + 12..l3 + 16].try_into().unwrap(),
            first[l3 + 16..l3 + 20].try_into().unwrap(),
            p1.l4proto,
            l4.len() as u16,
        )
    };
    cs::checksum_with(init, &l4)
}

#[test]
fn later_fragments_follow_their_first_through_nat() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = stateful(mode);
        let payload: Vec<u8> = (0..200u8).collect();
        let l4 = udp_datagram(H.into(), S.into(), 5353, 53, &payload);
        let (first, later) = fragments(H.into(), S.into(), 17, &l4, 96, 0x1234);
        assert_eq!(
            PacketMeta::parse(&later, LinkType::Ethernet).frag_id,
            0x1234
        );
        let hits = |sf: &Stateful| sf.engine().st.rule_hits.iter().map(|h| h.0).sum::<u64>();
        let (d, f1) = fwd(&mut sf, &first, "lan0", 1);
        assert!(d.is_accept(), "{d:?}");
        let counted = hits(&sf);
        let (d, f2) = fwd(&mut sf, &later, "lan0", 2);
        assert!(d.is_accept(), "the later fragment follows: {d:?}");
        assert_eq!(hits(&sf), counted, "no chain ran for the later fragment");
        assert_eq!(sf.stats().fragments_followed, 1);
        for f in [&f1, &f2] {
            let pm = PacketMeta::parse(f, LinkType::Ethernet);
            assert_eq!(pm.saddr, u32::from(GW) as u128, "masqueraded");
        }
        assert_eq!(reassembled_checksum(&f1, &f2), 0, "UDP checksum after NAT");
        // the reply comes back whole and is translated back
        let back = Builder::new().udp(S, GW, 53, 5353, b"answer");
        let (d, r) = fwd(&mut sf, &back, "wan0", 3);
        assert!(d.is_accept());
        assert_eq!(
            PacketMeta::parse(&r, LinkType::Ethernet).daddr,
            u32::from(H) as u128
        );

        // a later fragment with no first (another identification): dropped, counted
        let (_, orphan) = fragments(H.into(), S.into(), 17, &l4, 96, 0x4321);
        let (d, _) = fwd(&mut sf, &orphan, "lan0", 4);
        assert_eq!(d, Decision::Drop(DropReason::Fragment));
        assert_eq!(sf.stats().fragments, 1);
        // a datagram the ruleset drops (port 54): its later fragment is dropped too
        let l4x = udp_datagram(H.into(), S.into(), 5353, 54, &payload);
        let (fx, lx) = fragments(H.into(), S.into(), 17, &l4x, 96, 0x5555);
        assert!(!fwd(&mut sf, &fx, "lan0", 5).0.is_accept());
        assert_eq!(
            fwd(&mut sf, &lx, "lan0", 6).0,
            Decision::Drop(DropReason::Fragment)
        );
        // the same key from another source is another datagram
        let (_, other) = fragments(
            Ipv4Addr::new(198, 18, 0, 11).into(),
            S.into(),
            17,
            &l4,
            96,
            0x1234,
        );
        assert!(!fwd(&mut sf, &other, "lan0", 7).0.is_accept());
        // a first fragment with 8 bytes of a TCP header (RFC 1858): dropped, counted
        let seg = tcp_segment(H.into(), S.into(), &Tcp::new(40005, 80, tf::SYN), &[]);
        let tiny = Builder::new()
            .ip_id(0x7777)
            .fragment(0, true)
            .ip(H, S, 6, &seg[..8]);
        assert_eq!(
            fwd(&mut sf, &tiny, "lan0", 7).0,
            Decision::Drop(DropReason::Fragment)
        );
        assert_eq!(
            sf.stats().fragments,
            4,
            "orphan, after a dropped first, other source, tiny"
        );
        // the datagram's entry expires with the reassembly timeout (30 s)
        assert!(fwd(&mut sf, &later, "lan0", 8).0.is_accept());
        assert!(!fwd(&mut sf, &later, "lan0", 31_000_000_000).0.is_accept());
    }
}

#[test]
fn ipv6_fragments_follow_their_first() {
    let mut sf = stateful(Mode::Compiled);
    let (h, s): (Ipv6Addr, Ipv6Addr) = (
        "2001:db8::10".parse().unwrap(),
        "2001:db8:1::20".parse().unwrap(),
    );
    let payload = vec![7u8; 300];
    let l4 = udp_datagram(h.into(), s.into(), 5353, 53, &payload);
    let (first, later) = fragments(h.into(), s.into(), 17, &l4, 128, 0xdead_beef);
    let pm = PacketMeta::parse(&later, LinkType::Ethernet);
    assert_eq!((pm.frag, pm.frag_id), (Frag::Later, 0xdead_beef));
    assert_eq!(
        fwd(&mut sf, &later, "lan0", 1).0,
        Decision::Drop(DropReason::Fragment),
        "before its first"
    );
    let (d, f1) = fwd(&mut sf, &first, "lan0", 2);
    assert!(d.is_accept());
    let (d, f2) = fwd(&mut sf, &later, "lan0", 3);
    assert!(d.is_accept());
    assert_eq!(reassembled_checksum(&f1, &f2), 0);
    assert_eq!(
        (sf.stats().fragments, sf.stats().fragments_followed),
        (1, 1)
    );
    // port 54 is not accepted: the first is dropped, and the rest of its datagram
    let l4 = udp_datagram(h.into(), s.into(), 5353, 54, &payload);
    let (first, later) = fragments(h.into(), s.into(), 17, &l4, 128, 7);
    assert!(!fwd(&mut sf, &first, "lan0", 4).0.is_accept());
    assert!(!fwd(&mut sf, &later, "lan0", 5).0.is_accept());
}

/// A TCP segment sent in two fragments: the peer's ACK of the whole segment is in window
/// (the later fragment's payload counts as sent), so `ct state invalid drop` keeps it.
#[test]
fn tcp_segment_in_fragments_is_acknowledged_in_window() {
    let mut sf = stateful(Mode::Compiled);
    let seg = |from_h: bool, flags, seq, ack, data: &[u8]| {
        let (a, b, sp, dp) = if from_h {
            (H, S, 40000, 80)
        } else {
            (S, GW, 80, 40000)
        };
        tcp_segment(
            a.into(),
            b.into(),
            &Tcp::new(sp, dp, flags).seq(seq).ack(ack).window(65535),
            data,
        )
    };
    let frame = |from_h: bool, l4: &[u8]| {
        let (a, b) = if from_h { (H, S) } else { (S, GW) };
        Builder::new().ip(a, b, 6, l4)
    };
    let t = 1_000_000_000;
    assert!(fwd(
        &mut sf,
        &frame(true, &seg(true, tf::SYN, 100, 0, &[])),
        "lan0",
        t
    )
    .0
    .is_accept());
    assert!(fwd(
        &mut sf,
        &frame(false, &seg(false, tf::SYN | tf::ACK, 500, 101, &[])),
        "wan0",
        t
    )
    .0
    .is_accept());
    assert!(fwd(
        &mut sf,
        &frame(true, &seg(true, tf::ACK, 101, 501, &[])),
        "lan0",
        t
    )
    .0
    .is_accept());
    // 3000 bytes in one segment, fragmented after 1480 bytes of it
    let data = vec![0x5a; 3000];
    let l4 = seg(true, tf::ACK | tf::PSH, 101, 501, &data);
    let (first, later) = fragments(H.into(), S.into(), 6, &l4, 1480, 99);
    let (d, f1) = fwd(&mut sf, &first, "lan0", t + 1);
    assert!(d.is_accept());
    let (d, f2) = fwd(&mut sf, &later, "lan0", t + 2);
    assert!(d.is_accept());
    assert_eq!(reassembled_checksum(&f1, &f2), 0, "TCP checksum after NAT");
    // the ACK of all 3000 bytes
    let (d, _) = fwd(
        &mut sf,
        &frame(false, &seg(false, tf::ACK, 501, 3101, &[])),
        "wan0",
        t + 3,
    );
    assert!(d.is_accept(), "the ACK of the whole segment: {d:?}");
}
