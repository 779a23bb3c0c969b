//! ipfrag (IPv4 and IPv6), wsize, udplen, and property tests: arbitrary packets and
//! arbitrary parsed actions never panic, and whatever is sent parses as IP.

mod desync_common;
use desync_common::*;
use proptest::prelude::*;
use weir_script::desync::{apply, Action, Blobs, Input, Verdict};
use weir_script::payload::{Markers, PayloadType};
use weir_wire::build::{tcp_flags, Builder};
use weir_wire::{Frag, LinkType, PacketMeta};

#[test]
fn ipfrag_v4() {
    let h = hello();
    let pkt = pkt4(&h);
    let out = run(
        &action("ipfrag", &[("ipfrag_pos_tcp", "64")]),
        &pkt,
        markers(&h),
    );
    assert_eq!(out.verdict, Verdict::Drop);
    assert_eq!(out.send.len(), 2);
    let (a, b) = (&out.send[0], &out.send[1]);
    let ma = PacketMeta::parse(a, LinkType::RawIp);
    let mb = PacketMeta::parse(b, LinkType::RawIp);
    assert_eq!(ma.frag, Frag::First);
    assert!(ma.ipv4_checksum_ok(a) && mb.ipv4_checksum_ok(b));
    assert_eq!(a.len(), 20 + 64);
    assert_eq!(u16::from_be_bytes([a[6], a[7]]), 0x2000);
    assert_eq!(u16::from_be_bytes([b[6], b[7]]), 64 / 8);
    assert_eq!(a[4..6], b[4..6]);
    // the transport bytes, put back together, are the original's (new ip id aside)
    let mut l4 = a[20..].to_vec();
    l4.extend_from_slice(&b[20..]);
    assert_eq!(l4, pkt[20..]);
    // disorder
    let out = run(
        &action("ipfrag", &[("ipfrag_disorder", "")]),
        &pkt,
        markers(&h),
    );
    assert_eq!(u16::from_be_bytes([out.send[0][6], out.send[0][7]]), 32 / 8);
}

#[test]
fn ipfrag_v6() {
    let h = hello();
    let pkt = pkt6(&h);
    let out = run(
        &action("ipfrag", &[("ipfrag_pos_tcp", "40")]),
        &pkt,
        markers(&h),
    );
    assert_eq!(out.verdict, Verdict::Drop);
    let (a, b) = (&out.send[0], &out.send[1]);
    assert_eq!((a[6], b[6]), (44, 44));
    assert_eq!((a[40], b[40]), (6, 6));
    assert_eq!(u16::from_be_bytes([a[42], a[43]]), 1); // offset 0, M
    assert_eq!(u16::from_be_bytes([b[42], b[43]]), 40); // offset 40 (5 units << 3)
    assert_eq!(a[44..48], b[44..48]);
    assert_eq!(u16::from_be_bytes([a[4], a[5]]) as usize, a.len() - 40);
    assert_eq!(u16::from_be_bytes([b[4], b[5]]) as usize, b.len() - 40);
    let mut l4 = a[48..].to_vec();
    l4.extend_from_slice(&b[48..]);
    assert_eq!(l4, pkt[40..]);
    assert_eq!(a.len(), 48 + 40);
    // too short to cut: pass
    let out = run(
        &action("ipfrag", &[("ipfrag_pos_tcp", "40")]),
        &pkt6(b"x"),
        Markers::default(),
    );
    assert_eq!((out.verdict, out.send.len()), (Verdict::Pass, 0));
}

#[test]
fn wsize_on_synack() {
    let opts = [2, 4, 5, 0xb4, 1, 3, 3, 7];
    let sa = Builder::raw().tcp(
        std::net::Ipv4Addr::new(10, 0, 0, 2),
        std::net::Ipv4Addr::new(10, 0, 0, 1),
        &tcp_hdr(tcp_flags::SYN | tcp_flags::ACK).options(&opts),
        &[],
    );
    let out = run(
        &action("wsize", &[("wsize", "1"), ("scale", "6")]),
        &sa,
        Markers::default(),
    );
    assert_eq!(out.verdict, Verdict::Modify);
    let m = out.modified.unwrap();
    let s = read(&m);
    assert!(s.l4_ok);
    assert_eq!(u16::from_be_bytes([m[34], m[35]]), 1);
    assert_eq!(s.tcp_options, [2, 4, 5, 0xb4, 1, 3, 3, 6]);
    // never raises the scale
    let out = run(&action("wsize", &[("scale", "9")]), &sa, Markers::default());
    assert_eq!(out.verdict, Verdict::Pass);
    // not a SYN,ACK
    let h = hello();
    let out = run(&action("wsize", &[("wsize", "1")]), &pkt4(&h), markers(&h));
    assert_eq!(out.verdict, Verdict::Pass);
}

#[test]
fn udplen_grow_and_shrink() {
    let u = Builder::raw().udp(
        std::net::Ipv4Addr::new(10, 0, 0, 1),
        std::net::Ipv4Addr::new(10, 0, 0, 2),
        5000,
        443,
        &[9u8; 100],
    );
    let out = run(
        &action(
            "udplen",
            &[
                ("increment", "5"),
                ("pattern", "0x0102"),
                ("pattern_offset", "1"),
            ],
        ),
        &u,
        Markers::default(),
    );
    assert_eq!(out.verdict, Verdict::Modify);
    let m = out.modified.unwrap();
    let meta = PacketMeta::parse(&m, LinkType::RawIp);
    assert!(meta.transport_checksum_ok(&m));
    assert_eq!(m.len(), 20 + 8 + 105);
    assert_eq!(&m[128..], &[2, 1, 2, 1, 2]);
    assert_eq!(u16::from_be_bytes([m[24], m[25]]), 113);
    let out = run(
        &action("udplen", &[("increment", "-30")]),
        &u,
        Markers::default(),
    );
    assert_eq!(out.modified.unwrap().len(), 20 + 8 + 70);
    let out = run(&action("udplen", &[("max", "50")]), &u, Markers::default());
    assert_eq!(out.verdict, Verdict::Pass);
}

const NAMES: &[&str] = &[
    "fake",
    "rst",
    "multisplit",
    "multidisorder",
    "fakedsplit",
    "fakeddisorder",
    "hostfakesplit",
    "tcpseg",
    "syndata",
    "wsize",
    "udplen",
    "ipfrag",
    "send",
    "pktmod",
    "drop",
];

const ARGS: &[(&str, &[&str])] = &[
    (
        "pos",
        &[
            "1",
            "1,midsld",
            "-1",
            "host,endhost-1",
            "sniext+1,sld,endsld",
            "0,-1",
            "method+2,100",
        ],
    ),
    ("seqovl", &["1", "5", "midsld-1", "1000"]),
    ("seqovl_pattern", &["0xabcd", "nosuch"]),
    (
        "blob",
        &["fake_default_tls", "0x00", "fake_default_quic", "nosuch"],
    ),
    ("pattern", &["0x01", "fake_default_http"]),
    ("ip_ttl", &["1", "255"]),
    ("ip6_ttl", &["0"]),
    ("ip_autottl", &["-2,3-20", "+5,1-255"]),
    ("badsum", &[""]),
    ("tcp_seq", &["-1", "4294967295"]),
    ("tcp_ack", &["-66000"]),
    ("tcp_md5", &["", "0x00112233445566778899aabbccddeeff"]),
    ("tcp_ts", &["-100"]),
    ("tcp_ts_up", &[""]),
    ("tcp_nop_del", &[""]),
    ("tcp_flags_set", &["FIN,URG"]),
    ("ip6_hopbyhop", &["", "0x0102030405060708090a0b0c0d0e"]),
    ("ip6_ah", &[""]),
    ("ip_id", &["seq", "rnd", "zero", "none"]),
    ("repeats", &["2"]),
    ("ipfrag", &[""]),
    ("ipfrag_pos_tcp", &["8", "1024"]),
    ("ipfrag_disorder", &[""]),
    ("midhost", &["midsld", "host+100"]),
    ("disorder_after", &["", "-3"]),
    ("nodrop", &[""]),
    ("nofake2", &[""]),
    ("wsize", &["0"]),
    ("scale", &["0"]),
    ("increment", &["-1000", "7"]),
];

fn arb_action() -> impl Strategy<Value = Option<Action>> {
    (
        0..NAMES.len(),
        proptest::collection::vec((0..ARGS.len(), 0usize..8), 0..6),
    )
        .prop_map(|(n, picks)| {
            let args: Vec<(String, String)> = picks
                .into_iter()
                .map(|(a, v)| {
                    let (k, vals) = ARGS[a];
                    (k.to_string(), vals[v % vals.len()].to_string())
                })
                .collect();
            Action::parse(NAMES[n], &args).ok()
        })
}

fn arb_packet() -> impl Strategy<Value = Vec<u8>> {
    let h = hello();
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        (
            0usize..520,
            proptest::collection::vec((0usize..600, any::<u8>()), 0..4),
            any::<bool>()
        )
            .prop_map(move |(cut, flips, v6)| {
                let mut p = if v6 {
                    pkt6(&h[..cut.min(h.len())])
                } else {
                    pkt4(&h[..cut.min(h.len())])
                };
                for (i, b) in flips {
                    if let Some(x) = p.get_mut(i) {
                        *x = b;
                    }
                }
                p
            }),
    ]
}

fn arb_markers() -> impl Strategy<Value = Markers> {
    (
        proptest::option::of(0usize..700),
        proptest::option::of((0usize..700, 0usize..700)),
        proptest::option::of(0usize..700),
    )
        .prop_map(|(method, host, sniext)| Markers {
            method,
            host,
            sniext,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn never_panics(act in arb_action(), packet in arb_packet(), markers in arb_markers(), ttl in proptest::option::of(any::<u8>())) {
        if let Some(act) = act {
            let input = Input { packet: &packet, ptype: PayloadType::TlsClientHello, markers, incoming_ttl: ttl };
            let out = apply(&act, &input, &Blobs::new());
            for p in out.send.iter().chain(out.modified.iter()) {
                let m = PacketMeta::parse(p, LinkType::RawIp);
                prop_assert!(m.l3_ok(), "{:?}", m);
            }
            if out.verdict == Verdict::Modify {
                prop_assert!(out.modified.is_some());
            }
        }
    }

    #[test]
    fn parse_never_panics(name in "[a-z_]{0,14}", args in proptest::collection::vec(("[a-z0-9_]{0,12}", "[-+,0-9a-zx]{0,12}"), 0..5)) {
        let _ = Action::parse(&name, &args);
        for n in NAMES {
            let _ = Action::parse(n, &args);
        }
    }
}

/// Every function with every single argument value, on the hello over IPv4 and IPv6 and on
/// a SYN, a SYN,ACK and a UDP datagram: no panic, everything sent parses, TCP/UDP checksums
/// valid unless `badsum`, and most combinations parse.
#[test]
fn sweep_single_args() {
    let h = hello();
    let syn = Builder::raw().tcp(
        std::net::Ipv4Addr::new(10, 0, 0, 1),
        std::net::Ipv4Addr::new(10, 0, 0, 2),
        &tcp_hdr(tcp_flags::SYN),
        &[],
    );
    let synack = pkt6(&[]);
    let udp = Builder::raw().udp(
        std::net::Ipv4Addr::new(10, 0, 0, 1),
        std::net::Ipv4Addr::new(10, 0, 0, 2),
        1,
        2,
        &h[..100],
    );
    let packets = [pkt4(&h), pkt6(&h), syn, synack, udp];
    let mut parsed = 0;
    let mut acted = 0;
    for n in NAMES {
        for (k, vals) in ARGS {
            for v in vals.iter() {
                let args = vec![(k.to_string(), v.to_string())];
                let Ok(act) = Action::parse(n, &args) else {
                    continue;
                };
                parsed += 1;
                for p in &packets {
                    let out = run(&act, p, markers(&h));
                    if !out.send.is_empty() || out.verdict != Verdict::Pass {
                        acted += 1;
                    }
                    for s in out.send.iter().chain(out.modified.iter()) {
                        let m = PacketMeta::parse(s, LinkType::RawIp);
                        assert!(m.l3_ok(), "{n} {k}={v}: {m:?}");
                        if m.frag == Frag::None && *k != "badsum" {
                            assert!(m.transport_checksum_ok(s), "{n} {k}={v}");
                        }
                    }
                }
            }
        }
    }
    assert!(parsed > 300, "{parsed}");
    assert!(acted > 300, "{acted}");
}
