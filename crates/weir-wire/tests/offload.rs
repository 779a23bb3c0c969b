//! Software offloads: completing partial checksums and cutting TCP super-frames, checked
//! against etherparse (an independent parser and checksum) and a plain word-by-word
//! reference of the pseudo-header sum.

use std::net::{Ipv4Addr, Ipv6Addr};

use weir_wire::build::{self, tcp_flags as tf, Builder, Tcp};
use weir_wire::meta::proto;
use weir_wire::offload::{self, CsumState, OffloadError};
use weir_wire::{LinkType, PacketMeta};

const A4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B4: Ipv4Addr = Ipv4Addr::new(198, 19, 7, 200);

fn a6() -> Ipv6Addr {
    "2001:db8::1".parse().unwrap()
}
fn b6() -> Ipv6Addr {
    "2001:db8:ffff::2".parse().unwrap()
}

fn meta(f: &[u8]) -> PacketMeta {
    PacketMeta::parse(f, LinkType::Ethernet)
}

/// What etherparse makes of a frame: the IPv4 header checksum is right (true for IPv6), the
/// transport checksum it computes (over the pseudo-header with `dst6` as destination when
/// given), and the one stored.
struct Theirs {
    ip_ok: bool,
    computed: u16,
    stored: u16,
    payload: Vec<u8>,
}

fn theirs_with(f: &[u8], dst6: Option<[u8; 16]>) -> Theirs {
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};
    let s = SlicedPacket::from_ethernet(f).expect("etherparse parses it");
    let (ip_ok, src, dst) = match s.net.as_ref().expect("ip") {
        NetSlice::Ipv4(ip) => {
            let h = ip.header();
            let ok = h.to_header().calc_header_checksum() == h.header_checksum();
            let (s, d) = (h.source(), h.destination());
            let mut s16 = [0u8; 16];
            let mut d16 = [0u8; 16];
            s16[..4].copy_from_slice(&s);
            d16[..4].copy_from_slice(&d);
            (ok, (true, s16), d16)
        }
        NetSlice::Ipv6(ip) => {
            let h = ip.header();
            (true, (false, h.source()), dst6.unwrap_or(h.destination()))
        }
        NetSlice::Arp(_) => panic!("arp"),
    };
    let (v4, src) = src;
    let s4 = |a: [u8; 16]| -> [u8; 4] { a[..4].try_into().unwrap() };
    match s.transport.expect("transport") {
        TransportSlice::Tcp(t) => {
            let computed = if v4 {
                t.calc_checksum_ipv4(s4(src), s4(dst)).unwrap()
            } else {
                t.calc_checksum_ipv6(src, dst).unwrap()
            };
            Theirs {
                ip_ok,
                computed,
                stored: t.checksum(),
                payload: t.payload().to_vec(),
            }
        }
        TransportSlice::Udp(u) => {
            let h = u.to_header();
            let computed = if v4 {
                h.calc_checksum_ipv4_raw(s4(src), s4(dst), u.payload())
                    .unwrap()
            } else {
                h.calc_checksum_ipv6_raw(src, dst, u.payload()).unwrap()
            };
            Theirs {
                ip_ok,
                computed,
                stored: u.checksum(),
                payload: u.payload().to_vec(),
            }
        }
        _ => panic!("not tcp/udp"),
    }
}

fn theirs(f: &[u8]) -> Theirs {
    theirs_with(f, None)
}

/// The IPv4 header and transport checksums of `f` verify, by etherparse's reckoning.
fn verifies(f: &[u8]) -> bool {
    let t = theirs(f);
    t.ip_ok && t.computed == t.stored
}

/// Linux's partial value computed the plain way: the pseudo-header's 16-bit words added one
/// at a time with end-around carry, not complemented.
fn reference_partial(src: &[u8], dst: &[u8], proto: u8, len: u32) -> u16 {
    let mut acc: u32 = 0;
    let mut add = |w: u32| {
        acc += w;
        acc = (acc & 0xffff) + (acc >> 16);
    };
    for c in src.chunks(2).chain(dst.chunks(2)) {
        add(u16::from_be_bytes([c[0], c[1]]) as u32);
    }
    add(len >> 16);
    add(len & 0xffff);
    add(proto as u32);
    acc as u16
}

fn payload(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn samples() -> Vec<(&'static str, Vec<u8>)> {
    let p = payload(333, 5);
    let ts_opt = [1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2];
    vec![
        (
            "tcp4",
            Builder::new().tcp(A4, B4, &Tcp::new(40000, 80, tf::ACK | tf::PSH), &p),
        ),
        (
            "tcp4 options, vlan, ipv4 options",
            Builder::new().vlan(7).ipv4_options(&[1, 1, 1, 0]).tcp(
                A4,
                B4,
                &Tcp::new(1, 2, tf::ACK).options(&ts_opt),
                &p,
            ),
        ),
        ("udp4", Builder::new().udp(A4, B4, 5353, 53, &p)),
        ("udp4 empty", Builder::new().udp(A4, B4, 5353, 53, &[])),
        ("tcp6", build::tcp6(a6(), b6(), 1, 2, tf::ACK, &p)),
        ("udp6", build::udp6(a6(), b6(), 1, 2, &p)),
        (
            "tcp6 ext headers",
            Builder::new().hop_by_hop().dest_opts().routing().tcp(
                a6(),
                b6(),
                &Tcp::new(9, 10, tf::SYN),
                &p[..7],
            ),
        ),
        (
            "udp6 ext headers",
            Builder::new()
                .hop_by_hop()
                .dest_opts()
                .udp(a6(), b6(), 9, 10, &p[..1]),
        ),
        (
            "tcp4 padded",
            build::hostile::pad(&build::tcp4(A4, B4, 1, 2, tf::SYN, &[]), 80),
        ),
    ]
}

#[test]
fn complete_restores_what_the_builder_computed() {
    for (name, good) in samples() {
        assert!(verifies(&good), "{name}: built frame verifies");
        let m = meta(&good);
        assert_eq!(
            offload::classify_checksum(&good, &m),
            Ok(CsumState::Valid),
            "{name}"
        );
        assert!(!offload::looks_partial(&good, &m), "{name}");
        let want = theirs(&good).stored;
        assert_eq!(offload::transport_checksum(&good, &m), Ok(want), "{name}");
        // Damage the field in any way: completing gives the right value back.
        for junk in [0u16, 0xffff, 0x1234, want ^ 1] {
            let mut f = good.clone();
            let at = m.l4_off as usize + if m.l4proto == proto::TCP { 16 } else { 6 };
            f[at..at + 2].copy_from_slice(&junk.to_be_bytes());
            assert_eq!(offload::complete_checksum(&mut f, &m), Ok(want), "{name}");
            assert_eq!(f, good, "{name}: only the field changed");
        }
    }
}

#[test]
fn partial_value_is_linuxs_and_is_recognised() {
    for (name, good) in samples() {
        let m = meta(&good);
        let mut f = good.clone();
        let p = offload::set_partial_checksum(&mut f, &m).unwrap();
        // Independently: the folded pseudo-header sum with the transport length.
        let l3 = m.l3_off as usize;
        let l4 = m.l4_off as usize;
        let len = if m.l4proto == proto::UDP {
            u16::from_be_bytes([f[l4 + 4], f[l4 + 5]]) as u32
        } else {
            (m.l3_end() - l4) as u32
        };
        let want = if m.l3 == weir_wire::L3::Ipv4 {
            reference_partial(&f[l3 + 12..l3 + 16], &f[l3 + 16..l3 + 20], m.l4proto, len)
        } else {
            reference_partial(&f[l3 + 8..l3 + 24], &f[l3 + 24..l3 + 40], m.l4proto, len)
        };
        assert_eq!(p, want, "{name}");
        assert_eq!(offload::partial_checksum(&good, &m), Ok(want), "{name}");
        assert_ne!(p, 0, "{name}");
        assert!(!verifies(&f), "{name}: a partial checksum does not verify");
        assert!(offload::looks_partial(&f, &m), "{name}");
        assert_eq!(
            offload::classify_checksum(&f, &m),
            Ok(CsumState::Partial),
            "{name}"
        );
        // The device's way (csum_start / csum_offset) and from scratch agree.
        let mut g = f.clone();
        let off = if m.l4proto == proto::TCP { 16 } else { 6 };
        let end = if m.l4proto == proto::UDP {
            l4 + len as usize
        } else {
            m.l3_end()
        };
        offload::finish_partial(&mut g, end, l4, off).unwrap();
        offload::complete_checksum(&mut f, &m).unwrap();
        assert_eq!(f, good, "{name}: completed = the builder's");
        assert_eq!(g, good, "{name}: finished = the builder's");
        assert!(verifies(&f), "{name}");
    }
}

#[test]
fn damaged_frames_are_not_taken_for_partial() {
    for (name, good) in samples() {
        let m = meta(&good);
        let mut f = good.clone();
        let Some((start, n)) = m.payload(&f) else {
            continue;
        };
        if n == 0 {
            continue;
        }
        f[start] ^= 0x40;
        assert!(!verifies(&f), "{name}");
        assert_eq!(
            offload::classify_checksum(&f, &m),
            Ok(CsumState::Bad),
            "{name}"
        );
        assert!(!offload::looks_partial(&f, &m), "{name}");
        // A partial value with damaged data is partial (the device would sum what is there).
        offload::set_partial_checksum(&mut f, &m).unwrap();
        assert!(offload::looks_partial(&f, &m), "{name}");
    }
}

#[test]
fn udp_zero_rules() {
    // UDP over IPv4 with checksum 0: none.
    let mut f = build::udp4(A4, B4, 1, 2, b"abc");
    let m = meta(&f);
    let at = m.l4_off as usize + 6;
    f[at..at + 2].copy_from_slice(&[0, 0]);
    assert_eq!(offload::classify_checksum(&f, &m), Ok(CsumState::None));
    assert!(!offload::looks_partial(&f, &m));
    // Find a payload whose checksum computes to 0: it is stored as 0xffff, and verifies.
    let mut found = false;
    for w in 0..=u16::MAX {
        let f = build::udp4(A4, B4, 1, 2, &w.to_be_bytes());
        let m = meta(&f);
        let mut g = f.clone();
        g[at..at + 2].copy_from_slice(&[0x55, 0x55]);
        if offload::complete_checksum(&mut g, &m) == Ok(0xffff) {
            assert_eq!(&g[at..at + 2], &[0xff, 0xff]);
            assert_eq!(g, f, "the builder also sends 0xffff");
            assert_eq!(offload::classify_checksum(&g, &m), Ok(CsumState::Valid));
            found = true;
            break;
        }
    }
    assert!(found);
}

#[test]
fn ipv6_routing_header_uses_the_final_destination() {
    let fin: Ipv6Addr = "2001:db8:aaaa::99".parse().unwrap();
    // Segment routing header: segments left 1, last entry 0, one segment (the final one).
    let mut body = vec![4, 1, 0, 0, 0, 0];
    body.extend_from_slice(&fin.octets());
    for udp in [false, true] {
        let b = Builder::new().ext(proto::ROUTING, &body);
        let mut f = if udp {
            b.udp(a6(), b6(), 7, 8, b"hello")
        } else {
            b.tcp(a6(), b6(), &Tcp::new(7, 8, tf::ACK), b"hello")
        };
        let m = meta(&f);
        assert!(m.has_l4, "udp {udp}");
        offload::complete_checksum(&mut f, &m).unwrap();
        let t = theirs_with(&f, Some(fin.octets()));
        assert_eq!(t.computed, t.stored, "udp {udp}: final destination used");
        let t = theirs(&f);
        assert_ne!(
            t.computed, t.stored,
            "udp {udp}: not the header's destination"
        );
        // Type 2 (mobile IPv6, one address) the same way.
        let mut body2 = vec![2, 1, 0, 0, 0, 0];
        body2.extend_from_slice(&fin.octets());
        let b = Builder::new().ext(proto::ROUTING, &body2);
        let mut f = b.udp(a6(), b6(), 7, 8, b"x");
        let m = meta(&f);
        offload::complete_checksum(&mut f, &m).unwrap();
        let t = theirs_with(&f, Some(fin.octets()));
        assert_eq!(t.computed, t.stored);
    }
    // Segments left 0: the header's destination is the final one.
    let mut body0 = body.clone();
    body0[1] = 0;
    let mut f = Builder::new()
        .ext(proto::ROUTING, &body0)
        .udp(a6(), b6(), 7, 8, b"x");
    let m = meta(&f);
    offload::complete_checksum(&mut f, &m).unwrap();
    assert!(verifies(&f));
}

#[test]
fn not_for_other_frames() {
    let icmp = build::icmp4_echo(A4, B4, 1, 1, b"x");
    let m = meta(&icmp);
    assert_eq!(
        offload::partial_checksum(&icmp, &m),
        Err(OffloadError::NotTcpUdp)
    );
    assert!(!offload::looks_partial(&icmp, &m));
    let frag = Builder::new()
        .fragment(0, true)
        .udp(A4, B4, 1, 2, &[0u8; 64]);
    let m = meta(&frag);
    assert_eq!(
        offload::transport_checksum(&frag, &m),
        Err(OffloadError::Fragment)
    );
    let udp = build::udp4(A4, B4, 1, 2, &[0u8; 64]);
    let m = meta(&udp);
    assert_eq!(
        offload::segment_tcp(&udp, &m, 10),
        Err(OffloadError::NotTcp)
    );
    let tcp = build::tcp4(A4, B4, 1, 2, tf::ACK, &[0u8; 64]);
    let m = meta(&tcp);
    assert_eq!(offload::segment_tcp(&tcp, &m, 0), Err(OffloadError::BadMss));
}

/// A TCP super-frame as Linux hands it to a device: partial checksum, lengths of the whole.
fn super_frame(b: Builder, v6: bool, t: &Tcp, n: usize) -> Vec<u8> {
    let p = payload(n, 77);
    let mut f = if v6 {
        b.tcp(a6(), b6(), t, &p)
    } else {
        b.tcp(A4, B4, t, &p)
    };
    let m = meta(&f);
    offload::set_partial_checksum(&mut f, &m).unwrap();
    f
}

fn check_segments(name: &str, sup: &[u8], mss: u16, mtu: usize) -> Vec<Vec<u8>> {
    let m = meta(sup);
    let segs = offload::segment_tcp(sup, &m, mss).unwrap();
    let (l3, l4) = (m.l3_off as usize, m.l4_off as usize);
    let thl = (sup[l4 + 12] >> 4) as usize * 4;
    let total = m.l3_end() - l4 - thl;
    assert_eq!(
        segs.len(),
        total.div_ceil(mss as usize).max(1),
        "{name}: count"
    );
    let seq0 = u32::from_be_bytes(sup[l4 + 4..l4 + 8].try_into().unwrap());
    let flags0 = sup[l4 + 13];
    let v4 = m.l3 == weir_wire::L3::Ipv4;
    let id0 = u16::from_be_bytes([sup[l3 + 4], sup[l3 + 5]]);
    let mut all = Vec::new();
    for (i, s) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        let sm = meta(s);
        assert!(sm.malformed.is_none() && sm.has_l4, "{name} #{i}: parses");
        assert!(verifies(s), "{name} #{i}: checksums verify (etherparse)");
        assert_eq!(
            offload::classify_checksum(s, &sm),
            Ok(CsumState::Valid),
            "{name} #{i}"
        );
        assert!(sm.l3_end() - l3 <= mtu, "{name} #{i}: fits the MTU");
        assert_eq!(s[..l3], sup[..l3], "{name} #{i}: link header copied");
        let t = theirs(s);
        if !last {
            assert_eq!(t.payload.len(), mss as usize, "{name} #{i}");
        }
        all.extend_from_slice(&t.payload);
        let seq = u32::from_be_bytes(s[l4 + 4..l4 + 8].try_into().unwrap());
        assert_eq!(
            seq,
            seq0.wrapping_add((i * mss as usize) as u32),
            "{name} #{i}: seq"
        );
        let mut want = flags0;
        if !last {
            want &= !(tf::FIN | tf::PSH);
        }
        if i > 0 {
            want &= !tf::CWR;
        }
        assert_eq!(s[l4 + 13], want, "{name} #{i}: flags");
        // Everything else in the TCP header (ack, window, options) is the super-frame's.
        assert_eq!(s[l4 + 8..l4 + 13], sup[l4 + 8..l4 + 13], "{name} #{i}");
        assert_eq!(s[l4 + 14..l4 + 16], sup[l4 + 14..l4 + 16], "{name} #{i}");
        assert_eq!(s[l4 + 18..l4 + thl], sup[l4 + 18..l4 + thl], "{name} #{i}");
        if v4 {
            let id = u16::from_be_bytes([s[l3 + 4], s[l3 + 5]]);
            assert_eq!(id, id0.wrapping_add(i as u16), "{name} #{i}: ip id");
            assert_eq!(s[l3 + 6..l3 + 10], sup[l3 + 6..l3 + 10], "{name} #{i}");
        } else {
            // extension headers copied
            assert_eq!(s[l3 + 6..l4], sup[l3 + 6..l4], "{name} #{i}");
        }
    }
    let (ps, pn) = m.payload(sup).unwrap();
    assert_eq!(all, sup[ps..ps + pn], "{name}: payload in order");
    segs
}

#[test]
fn segments_like_linux_gso() {
    let ts_opt = [1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2];
    let flags = tf::ACK | tf::PSH | tf::FIN | tf::CWR | tf::ECE;
    let t = Tcp::new(40000, 443, flags)
        .seq(0xffff_f000) // wraps inside the frame
        .options(&ts_opt);
    let sup = super_frame(
        Builder::new().ip_id(0xfffe).dont_fragment(),
        false,
        &t,
        10000,
    );
    let m = meta(&sup);
    assert_eq!(offload::tcp_mss_for_mtu(&sup, &m, 1500), Some(1448));
    assert_eq!(check_segments("v4", &sup, 1448, 1500).len(), 7);

    let sup = super_frame(Builder::new().vlan(12), false, &t, 64000);
    check_segments("v4 vlan 64k", &sup, 1448, 1500);

    let sup = super_frame(Builder::new(), true, &t, 20000);
    let m = meta(&sup);
    assert_eq!(offload::tcp_mss_for_mtu(&sup, &m, 1500), Some(1428));
    check_segments("v6", &sup, 1428, 1500);

    let sup = super_frame(Builder::new().hop_by_hop().dest_opts(), true, &t, 5000);
    let m = meta(&sup);
    let mss = offload::tcp_mss_for_mtu(&sup, &m, 1280).unwrap();
    assert_eq!(mss, 1280 - 40 - 16 - 32);
    check_segments("v6 ext", &sup, mss, 1280);

    // Exact multiple of the MSS, and a payload that already fits.
    let sup = super_frame(Builder::new(), false, &t, 1448 * 3);
    assert_eq!(check_segments("multiple", &sup, 1448, 1500).len(), 3);
    let sup = super_frame(Builder::new(), false, &t, 100);
    let one = check_segments("small", &sup, 1448, 1500);
    assert_eq!(one.len(), 1);
    // ... which is the frame with its checksum completed.
    let mut done = sup.clone();
    offload::complete_checksum(&mut done, &meta(&sup)).unwrap();
    assert_eq!(one[0], done);
    let sup = super_frame(Builder::new(), false, &Tcp::new(1, 2, tf::FIN | tf::ACK), 0);
    assert_eq!(check_segments("empty", &sup, 1448, 1500).len(), 1);

    // Link padding after the IP packet is not payload.
    let sup = super_frame(Builder::new(), false, &t, 3000);
    let padded = build::hostile::pad(&sup, sup.len() + 10);
    let a = offload::segment_tcp(&sup, &meta(&sup), 1000).unwrap();
    let b = offload::segment_tcp(&padded, &meta(&padded), 1000).unwrap();
    assert_eq!(a, b);

    // The buffer-reusing form gives the same frames.
    let mut buf = Vec::new();
    let mut each = Vec::new();
    let n = offload::segment_tcp_each(&sup, &meta(&sup), 1000, &mut buf, |s| each.push(s.to_vec()))
        .unwrap();
    assert_eq!(n, 3);
    assert_eq!(each, a);
}

/// Every prefix of every sample, lying length fields, random bytes and a meta of another
/// frame: nothing panics, and what cannot be done is an error.
#[test]
fn hostile_input_never_panics() {
    let mut s = 99u64;
    let mut rnd = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 33) as usize
    };
    let t = Tcp::new(1, 2, tf::ACK).options(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
    let mut frames: Vec<Vec<u8>> = samples().into_iter().map(|s| s.1).collect();
    frames.push(super_frame(Builder::new(), false, &t, 3000));
    frames.push(super_frame(Builder::new().hop_by_hop(), true, &t, 3000));
    let metas: Vec<PacketMeta> = frames.iter().map(|f| meta(f)).collect();
    let exercise = |f: &[u8], m: &PacketMeta| {
        // the quick test of field_is_partial gives what the full one gives (for the frame's
        // own meta: the quick test takes addresses and lengths from it)
        if *m == meta(f) {
            let at = m.l4_off as usize + if m.l4proto == proto::TCP { 16 } else { 6 };
            let field = f.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
            let full = offload::partial_checksum(f, m).is_ok_and(|p| field == Some(p));
            assert_eq!(offload::field_is_partial(f, m), full);
        }
        let mut g = f.to_vec();
        let _ = offload::transport_checksum(f, m);
        let _ = offload::partial_checksum(f, m);
        let _ = offload::classify_checksum(f, m);
        let _ = offload::looks_partial(f, m);
        let _ = offload::tcp_mss_for_mtu(f, m, 1500);
        let _ = offload::tcp_mss_for_mtu(f, m, 0);
        let _ = offload::complete_checksum(&mut g, m);
        let _ = offload::set_partial_checksum(&mut g, m);
        for mss in [1u16, 7, 1448, u16::MAX] {
            if let Ok(segs) = offload::segment_tcp(f, m, mss) {
                assert!(segs.len() <= f.len().max(1));
            }
        }
        let e = f.len();
        for (st, off) in [(0, 0), (e, 0), (e.saturating_sub(1), 0), (14, usize::MAX)] {
            let _ = offload::finish_partial(&mut g, e, st, off);
            let _ = offload::finish_partial(&mut g, e + 1, st, off);
        }
    };
    for f in &frames {
        for cut in 0..f.len() {
            let p = &f[..cut];
            exercise(p, &meta(p));
            // the meta of the whole frame on the cut one: lengths lie
            let m = meta(f);
            exercise(p, &m);
            assert!(
                offload::complete_checksum(&mut p.to_vec(), &m).is_err() || cut >= m.l3_end(),
                "a cut frame with the whole frame's meta"
            );
        }
    }
    for round in 0..3000 {
        let i = rnd() % frames.len();
        let mut f = frames[i].clone();
        if round % 2 == 0 {
            let m = meta(&f);
            let _ = offload::set_partial_checksum(&mut f, &m);
        }
        for _ in 0..1 + rnd() % 4 {
            let at = rnd() % f.len();
            f[at] = rnd() as u8;
        }
        exercise(&f, &meta(&f));
        // someone else's meta
        exercise(&f, &metas[rnd() % metas.len()]);
        if round % 10 == 0 {
            let junk: Vec<u8> = (0..rnd() % 200).map(|_| rnd() as u8).collect();
            exercise(&junk, &meta(&junk));
            exercise(&junk, &metas[rnd() % metas.len()]);
        }
    }
}

/// A UDP length shorter than the IP payload: the checksum covers the UDP length only (the
/// bytes after it are not the datagram's), as Linux trims to it.
#[test]
fn udp_checksum_covers_the_udp_length() {
    let good = build::udp4(A4, B4, 1, 2, b"0123456789");
    let mut long = good.clone();
    long.extend_from_slice(b"trailing!!");
    let tot = (long.len() - 14) as u16;
    build::hostile::set_ipv4_total_length(&mut long, LinkType::Ethernet, tot);
    let m = meta(&long);
    assert!(m.has_l4 && m.malformed.is_none(), "{:?}", m.malformed);
    let at = m.l4_off as usize + 6;
    long[at..at + 2].copy_from_slice(&[0x12, 0x34]);
    assert_eq!(
        offload::complete_checksum(&mut long, &m),
        Ok(theirs(&good).stored)
    );
    let l4 = m.l4_off as usize;
    assert_eq!(long[l4..good.len()], good[l4..]);
}
