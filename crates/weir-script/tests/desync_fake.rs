//! fake, rst, syndata, the fooling options (TTL, autottl, badsum, tcp_seq/ack, tcp_md5,
//! tcp_ts, ip6 extension headers), repeats and ip_id, and configuration errors.

mod desync_common;
use desync_common::*;
use weir_script::desync::{apply, Action, ActionError, Blobs, Input, Verdict};
use weir_script::payload::PayloadType;
use weir_wire::build::{tcp_flags, Builder};
use weir_wire::{LinkType, PacketMeta};

#[test]
fn fake_ttl_and_badsum_before_original() {
    let h = hello();
    let tls = Blobs::new().get("fake_default_tls").unwrap().to_vec();
    for pkt in [pkt4(&h), pkt6(&h)] {
        let act = action(
            "fake",
            &[
                ("blob", "fake_default_tls"),
                ("ip_ttl", "5"),
                ("ip6_ttl", "6"),
                ("badsum", ""),
                ("payload", "tls_client_hello"),
            ],
        );
        let out = run(&act, &pkt, markers(&h));
        assert_eq!(out.verdict, Verdict::Pass);
        assert!(out.modified.is_none());
        assert_eq!(out.send.len(), 1);
        let s = read(&out.send[0]);
        assert_eq!(s.ttl, if s.v6 { 6 } else { 5 });
        assert!(!s.l4_ok, "badsum must make the checksum invalid");
        assert_eq!(s.payload, tls);
        assert_eq!(s.seq, SEQ);
        if !s.v6 {
            assert_eq!(s.ip_id, IP_ID + 1);
        }
        // without badsum: valid
        let out = run(
            &action("fake", &[("blob", "0x0102030405")]),
            &pkt,
            markers(&h),
        );
        let s = read(&out.send[0]);
        assert!(s.l4_ok);
        assert_eq!(s.payload, [1, 2, 3, 4, 5]);
        assert_eq!(s.ttl, 64);
    }
}

#[test]
fn fake_repeats_and_missing_blob() {
    let h = hello();
    let out = run(
        &action("fake", &[("blob", "0xaa"), ("repeats", "3")]),
        &pkt4(&h),
        markers(&h),
    );
    assert_eq!(out.send.len(), 3);
    assert_eq!(out.send[0], out.send[2]);
    let out = run(
        &action("fake", &[("blob", "nosuch")]),
        &pkt4(&h),
        markers(&h),
    );
    assert_eq!((out.verdict, out.send.len()), (Verdict::Pass, 0));
}

#[test]
fn fake_big_blob_cut_by_mss() {
    let h = b"GET / HTTP/1.1\r\n\r\n";
    let big = format!("0x{}", "ab".repeat(3000));
    let out = run(
        &action("fake", &[("blob", &big)]),
        &pkt4(h),
        Default::default(),
    );
    let s: Vec<Sent> = out.send.iter().map(|p| read(p)).collect();
    // 1220 - 12 bytes of TCP options
    assert_eq!(
        s.iter().map(|x| x.payload.len()).collect::<Vec<_>>(),
        vec![1208, 1208, 584]
    );
    assert_eq!(s[1].seq, SEQ.wrapping_add(1208));
    assert!(s.iter().all(|x| x.l4_ok));
}

#[test]
fn fooling_seq_ack_ts_md5() {
    let h = hello();
    for pkt in [pkt4(&h), pkt6(&h)] {
        let act = action(
            "fake",
            &[
                ("blob", "0x00"),
                ("tcp_seq", "-10000"),
                ("tcp_ack", "+66000"),
                ("tcp_ts", "-1000"),
                ("tcp_md5", ""),
            ],
        );
        let out = run(&act, &pkt, markers(&h));
        let s = read(&out.send[0]);
        assert_eq!(s.seq, SEQ.wrapping_sub(10000));
        assert_eq!(s.ack, ACK.wrapping_add(66000));
        assert!(s.l4_ok);
        // NOP NOP TS(10) MD5(18) + 2 bytes of padding
        assert_eq!(s.tcp_options.len(), 32);
        assert_eq!(&s.tcp_options[..4], &[1, 1, 8, 10]);
        assert_eq!(
            u32::from_be_bytes(s.tcp_options[4..8].try_into().unwrap()),
            TSVAL - 1000
        );
        assert_eq!(&s.tcp_options[12..14], &[19, 18]);
        assert_eq!(&s.tcp_options[14..30], &[0; 16]);
        assert_eq!(&s.tcp_options[30..], &[0, 0]);
    }
}

#[test]
fn md5_dropped_when_no_room() {
    let h = hello();
    // 36 bytes of options already: MD5 does not fit
    let mut opts = vec![1u8; 24];
    opts.extend_from_slice(&[8, 10, 0, 0, 0, 1, 0, 0, 0, 2, 1, 1]);
    let pkt = Builder::raw().tcp(
        std::net::Ipv4Addr::new(10, 0, 0, 1),
        std::net::Ipv4Addr::new(10, 0, 0, 2),
        &tcp_hdr(0x18).options(&opts),
        &h,
    );
    let out = run(
        &action(
            "fake",
            &[("blob", "0x00"), ("tcp_md5", ""), ("tcp_ts", "5")],
        ),
        &pkt,
        markers(&h),
    );
    let s = read(&out.send[0]);
    assert_eq!(s.tcp_options.len(), 36);
    assert!(!s.tcp_options.contains(&19));
    assert_eq!(&s.tcp_options[24..30], &[8, 10, 0, 0, 0, 6]);
}

#[test]
fn autottl() {
    let h = hello();
    let pkt = pkt4(&h);
    let act = action(
        "fake",
        &[("blob", "0x00"), ("ip_autottl", "-2,3-20"), ("ip_ttl", "9")],
    );
    let input = |t| Input {
        packet: &pkt,
        ptype: PayloadType::TlsClientHello,
        markers: markers(&h),
        incoming_ttl: t,
    };
    let b = Blobs::new();
    // 64 - 50 = 14 hops: 12
    assert_eq!(read(&apply(&act, &input(Some(50)), &b).send[0]).ttl, 12);
    // unknown: ip_ttl
    assert_eq!(read(&apply(&act, &input(None), &b).send[0]).ttl, 9);
}

#[test]
fn ip6_extension_headers() {
    let h = hello();
    let act = action(
        "fake",
        &[("blob", "0x00"), ("ip6_hopbyhop", ""), ("ip6_destopt", "")],
    );
    let out = run(&act, &pkt6(&h), markers(&h));
    let p = &out.send[0];
    assert_eq!(p[6], 0); // hop-by-hop first
    assert_eq!(p[40], 60); // then destination options
    assert_eq!(p[48], 6); // then TCP
    let m = PacketMeta::parse(p, LinkType::RawIp);
    assert_eq!(m.l4_off, 56);
    assert!(m.transport_checksum_ok(p));
}

#[test]
fn rst_and_syndata() {
    let h = hello();
    let out = run(&action("rst", &[("rstack", "")]), &pkt4(&h), markers(&h));
    assert_eq!(out.verdict, Verdict::Pass);
    let s = read(&out.send[0]);
    assert_eq!(s.flags, tcp_flags::RST | tcp_flags::ACK);
    assert!(s.payload.is_empty() && s.l4_ok);
    assert_eq!(s.ip_id, IP_ID); // rst: ip_id none by default

    let syn = Builder::raw().tcp(
        std::net::Ipv4Addr::new(10, 0, 0, 1),
        std::net::Ipv4Addr::new(10, 0, 0, 2),
        &tcp_hdr(tcp_flags::SYN),
        &[],
    );
    let out = run(&action("syndata", &[]), &syn, Default::default());
    assert_eq!(out.verdict, Verdict::Drop);
    let s = read(&out.send[0]);
    assert_eq!(s.payload, [0u8; 16]);
    assert_eq!(s.flags, tcp_flags::SYN);
    assert!(s.l4_ok);
    // not a SYN: pass
    let out = run(&action("syndata", &[]), &pkt4(&h), markers(&h));
    assert_eq!((out.verdict, out.send.len()), (Verdict::Pass, 0));
}

fn err(name: &str, args: &[(&str, &str)]) -> ActionError {
    let a: Vec<(String, String)> = args
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Action::parse(name, &a).unwrap_err()
}

#[test]
fn parse_errors_name_the_argument() {
    assert_eq!(
        err("multisplat", &[]),
        ActionError::UnknownFunction("multisplat".into())
    );
    let e = err("multisplit", &[("pos", "1,midsdl")]);
    assert!(
        matches!(&e, ActionError::BadArg { arg, .. } if arg == "pos"),
        "{e}"
    );
    assert!(e.to_string().contains("midsdl"));
    let e = err("fake", &[("blob", "0x00"), ("ip_ttl", "300")]);
    assert!(
        matches!(&e, ActionError::BadArg { arg, .. } if arg == "ip_ttl"),
        "{e}"
    );
    let e = err("fake", &[("blob", "0x00"), ("repeats", "x")]);
    assert!(
        matches!(&e, ActionError::BadArg { arg, .. } if arg == "repeats"),
        "{e}"
    );
    let e = err("fake", &[("blob", "0x00"), ("ip_autottl", "2-3")]);
    assert!(
        matches!(&e, ActionError::BadArg { arg, .. } if arg == "ip_autottl"),
        "{e}"
    );
    let e = err("fake", &[("blob", "0xabc")]);
    assert!(
        matches!(&e, ActionError::BadArg { arg, .. } if arg == "blob"),
        "{e}"
    );
    assert!(matches!(err("fake", &[]), ActionError::MissingArg { .. }));
    let e = err("multisplit", &[("poss", "1")]);
    assert_eq!(
        e,
        ActionError::UnknownArg {
            func: "multisplit".into(),
            arg: "poss".into()
        }
    );
    assert!(matches!(err("synack", &[]), ActionError::Unsupported { .. }));
    assert!(matches!(
        err("fakedsplit", &[("pos", "1,2")]),
        ActionError::BadArg { .. }
    ));
}
