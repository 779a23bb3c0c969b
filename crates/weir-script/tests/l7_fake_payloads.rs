//! nfqws2's fake payloads (zapret2 `files/fake/*.bin`) through weir-script's L7 detection:
//! every file detected as its name says, with the exact host and markers where it has one;
//! the big (post-quantum) ClientHellos through TCP and QUIC reassembly.

use std::path::PathBuf;

use weir_script::l7::quic::QuicReasm;
use weir_script::l7::{
    detect, Detection, QuicReasmStatus, Reasm, ReasmBudget, ReasmRefusal, ReasmStatus, L4,
};
use weir_script::payload::PayloadType::{self, *};

fn fake_dir() -> PathBuf {
    let base = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for up in [
        "../../../shared/zapret2/files/fake",
        "../../shared/zapret2/files/fake",
    ] {
        let p = base.join(up);
        if p.is_dir() {
            return p;
        }
    }
    panic!(
        "zapret2's fake payloads: no ../shared/zapret2/files/fake above {}",
        base.display()
    )
}

fn load(name: &str) -> Vec<u8> {
    let p = fake_dir().join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every file, its L4, type and host (the SNI as it is in the file: the names of the
/// gosuslugi, sberbank and QUIC vk files shorten it).
const EXPECTED: &[(&str, L4, PayloadType, Option<&str>)] = &[
    ("bgp_open.bin", L4::Tcp, Unknown, None),
    ("bitcoin.bin", L4::Tcp, Unknown, None),
    ("dht_find_node.bin", L4::Udp, Dht, None),
    ("dht_get_peers.bin", L4::Udp, Dht, None),
    (
        "discord-ip-discovery-with-port.bin",
        L4::Udp,
        DiscordIpDiscovery,
        None,
    ),
    (
        "discord-ip-discovery-without-port.bin",
        L4::Udp,
        DiscordIpDiscovery,
        None,
    ),
    ("dns.bin", L4::Udp, DnsQuery, None),
    (
        "dtls_clienthello_w3_org.bin",
        L4::Udp,
        DtlsClientHello,
        Some("w3.org"),
    ),
    ("dtls_serverhello.bin", L4::Udp, DtlsServerHello, None),
    ("http_iana_org.bin", L4::Tcp, HttpReq, Some("www.iana.org")),
    ("isakmp_initiator_request.bin", L4::Udp, Unknown, None),
    ("ntp4.bin", L4::Udp, Unknown, None),
    (
        "quic2_example_com.bin",
        L4::Udp,
        QuicInitial,
        Some("example.com"),
    ),
    (
        "quic_initial_facebook_com.bin",
        L4::Udp,
        QuicInitial,
        Some("facebook.com"),
    ),
    (
        "quic_initial_facebook_com_quiche.bin",
        L4::Udp,
        QuicInitial,
        Some("facebook.com"),
    ),
    (
        "quic_initial_rr2---sn-gvnuxaxjvh-o8ge_googlevideo_com.bin",
        L4::Udp,
        QuicInitial,
        Some("rr2---sn-gvnuxaxjvh-o8ge.googlevideo.com"),
    ),
    (
        "quic_initial_rutracker_org.bin",
        L4::Udp,
        QuicInitial,
        Some("rutracker.org"),
    ),
    (
        "quic_initial_vk_com.bin",
        L4::Udp,
        QuicInitial,
        Some("st.vk.com"),
    ),
    (
        "quic_initial_www_google_com.bin",
        L4::Udp,
        QuicInitial,
        Some("www.google.com"),
    ),
    ("quic_short_header.bin", L4::Udp, Unknown, None),
    ("rdp.bin", L4::Tcp, Unknown, None),
    ("rtsp_options.bin", L4::Tcp, Unknown, None),
    ("sip_register.bin", L4::Udp, Unknown, None),
    ("smtp_ehlo.bin", L4::Tcp, Unknown, None),
    ("snmp_get_next_request.bin", L4::Udp, Unknown, None),
    ("stun.bin", L4::Udp, Stun, None),
    ("tls_alert.bin", L4::Tcp, Unknown, None),
    (
        "tls_clienthello_google_com_tlsrec.bin",
        L4::Tcp,
        TlsClientHello,
        Some("google.com"),
    ),
    (
        "tls_clienthello_gosuslugi_ru.bin",
        L4::Tcp,
        TlsClientHello,
        Some("bot.gosuslugi.ru"),
    ),
    (
        "tls_clienthello_iana_org.bin",
        L4::Tcp,
        TlsClientHello,
        Some("iana.org"),
    ),
    (
        "tls_clienthello_iana_org_bigsize.bin",
        L4::Tcp,
        TlsClientHello,
        Some("iana.org"),
    ),
    (
        "tls_clienthello_rutracker_org_kyber.bin",
        L4::Tcp,
        TlsClientHello,
        Some("rutracker.org"),
    ),
    (
        "tls_clienthello_sberbank_ru.bin",
        L4::Tcp,
        TlsClientHello,
        Some("online.sberbank.ru"),
    ),
    (
        "tls_clienthello_vk_com.bin",
        L4::Tcp,
        TlsClientHello,
        Some("vk.com"),
    ),
    (
        "tls_clienthello_vk_com_kyber.bin",
        L4::Tcp,
        TlsClientHello,
        Some("vk.com"),
    ),
    (
        "tls_clienthello_www_google_com.bin",
        L4::Tcp,
        TlsClientHello,
        Some("www.google.com"),
    ),
    (
        "tls_serverhello_google_com_tls13.bin",
        L4::Tcp,
        TlsServerHello,
        None,
    ),
    (
        "wireguard_initiation.bin",
        L4::Udp,
        WireguardInitiation,
        None,
    ),
    ("wireguard_response.bin", L4::Udp, WireguardResponse, None),
    ("zero_1024.bin", L4::Udp, Unknown, None),
    ("zero_256.bin", L4::Tcp, Unknown, None),
    ("zero_512.bin", L4::Udp, Unknown, None),
];

/// The files reassembly tests use (the split QUIC kyber ClientHellos).
const REASM_ONLY: &[&str] = &[
    "quic_initial_rr1---sn-xguxaxjvh-n8me_googlevideo_com_kyber_1.bin",
    "quic_initial_rr1---sn-xguxaxjvh-n8me_googlevideo_com_kyber_2.bin",
    "quic_initial_rutracker_org_kyber_1.bin",
    "quic_initial_rutracker_org_kyber_2.bin",
];

#[test]
fn fake_dir_is_zapret2s() {
    let dir = fake_dir().canonicalize().unwrap();
    assert!(
        dir.ends_with("shared/zapret2/files/fake"),
        "{}",
        dir.display()
    );
    assert!(dir.join("tls_clienthello_iana_org.bin").is_file());
}

#[test]
fn every_file_is_listed() {
    let mut names: Vec<String> = std::fs::read_dir(fake_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".bin"))
        .collect();
    names.sort();
    let mut listed: Vec<String> = EXPECTED
        .iter()
        .map(|e| e.0.to_string())
        .chain(REASM_ONLY.iter().map(|s| s.to_string()))
        .collect();
    listed.sort();
    assert_eq!(names, listed);
}

#[test]
fn every_file_detected_as_named() {
    let mut wrong = Vec::new();
    for &(name, l4, ptype, host) in EXPECTED {
        let d = detect(l4, &load(name));
        if d.ptype != ptype || d.host.as_deref() != host {
            wrong.push(format!("{name}: {:?} {:?}", d.ptype, d.host));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn unknown_files_are_unknown_over_both_l4() {
    for &(name, _, ptype, _) in EXPECTED {
        if ptype == Unknown {
            for l4 in [L4::Tcp, L4::Udp] {
                assert_eq!(detect(l4, &load(name)).ptype, Unknown, "{name} {l4:?}");
            }
        }
    }
}

#[test]
fn empty_is_empty() {
    assert_eq!(detect(L4::Tcp, &[]), Detection::plain(Empty));
    assert_eq!(detect(L4::Udp, &[]).ptype, Empty);
}

/// A TLS ClientHello's markers: the host bytes where markers.host says, the server_name
/// extension's data (list length = name length + 3, type 0, name length) at sniext.
fn check_tls_markers(p: &[u8], d: &Detection) {
    let host = d.host.as_deref().unwrap();
    let (s, e) = d.markers.host.unwrap();
    assert_eq!(p[s..e].to_ascii_lowercase(), host.as_bytes());
    let x = d.markers.sniext.unwrap();
    let name_len = host.len();
    assert_eq!(
        p[x..x + 5],
        [
            0,
            (name_len + 3) as u8,
            0,
            (name_len >> 8) as u8,
            name_len as u8
        ]
    );
    assert_eq!(x + 5, s);
    // the extension header (type 0, length) just before it
    assert_eq!(p[x - 4..x - 2], [0, 0]);
    assert_eq!(
        u16::from_be_bytes([p[x - 2], p[x - 1]]) as usize,
        name_len + 5
    );
    assert_eq!(d.markers.method, None);
}

#[test]
fn tls_markers_exact() {
    let d = detect(L4::Tcp, &load("tls_clienthello_iana_org.bin"));
    assert_eq!(d.host.as_deref(), Some("iana.org"));
    assert_eq!(d.incomplete, None);
    check_tls_markers(&load("tls_clienthello_iana_org.bin"), &d);
    for &(name, l4, ptype, _) in EXPECTED {
        if ptype == TlsClientHello {
            let p = load(name);
            check_tls_markers(&p, &detect(l4, &p));
        }
    }
}

#[test]
fn tls_iana_org_positions() {
    // the SNI of this file, checked by hand: extension at 0x7e..
    let p = load("tls_clienthello_iana_org.bin");
    let d = detect(L4::Tcp, &p);
    let (s, e) = d.markers.host.unwrap();
    assert_eq!(e - s, 8);
    assert_eq!(&p[s..e], b"iana.org");
    assert_eq!(d.markers.sniext, Some(s - 5));
}

#[test]
fn tls_across_records() {
    // the hello's first record is 95 bytes; the SNI is in the second one
    let p = load("tls_clienthello_google_com_tlsrec.bin");
    let d = detect(L4::Tcp, &p);
    assert_eq!(d.markers.host, Some((161, 171)));
    assert_eq!(d.markers.sniext, Some(156));
    assert_eq!(d.incomplete, None);
}

#[test]
fn tls_incomplete() {
    // a record of 0xffff bytes in a 517-byte payload: it needs the whole record and, as the
    // handshake claims 0xffffff bytes, more records after
    let p = load("tls_clienthello_iana_org_bigsize.bin");
    let d = detect(L4::Tcp, &p);
    assert_eq!(
        d.incomplete,
        Some(5 + 0xffff + 5 + (0xff_ffff + 4 - 0xffff))
    );
    // a cut normal hello needs its record
    let p = load("tls_clienthello_vk_com_kyber.bin");
    assert_eq!(p.len(), 1812);
    let d = detect(L4::Tcp, &p[..1400]);
    assert_eq!(d.ptype, TlsClientHello);
    assert_eq!(d.incomplete, Some(1812));
    assert_eq!(detect(L4::Tcp, &p).incomplete, None);
    // cut before the SNI: no host yet
    let d = detect(L4::Tcp, &p[..100]);
    assert_eq!(
        (d.ptype, d.host, d.incomplete),
        (TlsClientHello, None, Some(1812))
    );
}

#[test]
fn http_markers_exact() {
    let p = load("http_iana_org.bin");
    let d = detect(L4::Tcp, &p);
    assert_eq!(d.markers.method, Some(0));
    assert_eq!(d.markers.host, Some((22, 34)));
    assert_eq!(&p[22..34], b"www.iana.org");
    assert_eq!(d.markers.sniext, None);
    // case, blanks and port as nfqws2 has them
    let d = detect(
        L4::Tcp,
        b"POST /x HTTP/1.0\r\nhOsT:\t Example.COM:8080 \r\n\r\n",
    );
    assert_eq!(d.ptype, HttpReq);
    assert_eq!(d.host.as_deref(), Some("example.com:8080"));
    assert_eq!(d.markers.host, Some((25, 41)));
    let d = detect(L4::Tcp, b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n");
    assert_eq!((d.ptype, d.host, d.markers.host), (HttpReq, None, None));
    assert_eq!(detect(L4::Tcp, b"HTTP/1.1 200 OK\r\n\r\n").ptype, HttpReply);
    assert_eq!(detect(L4::Tcp, b"GET / RTSP/1.0\r\n\r\n").ptype, Unknown);
}

#[test]
fn wireguard_cookie_and_keepalive() {
    let mut p = vec![0u8; 64];
    p[0] = 3;
    assert_eq!(detect(L4::Udp, &p).ptype, WireguardCookie);
    let mut p = vec![0u8; 32];
    p[0] = 4;
    assert_eq!(detect(L4::Udp, &p).ptype, WireguardKeepalive);
    let mut p = load("wireguard_initiation.bin");
    p.push(0);
    assert_eq!(detect(L4::Udp, &p).ptype, Unknown);
}

#[test]
fn small_protocols() {
    let mut bt = b"\x13BitTorrent protocol".to_vec();
    bt.resize(68, 7);
    assert_eq!(detect(L4::Tcp, &bt).ptype, BtHandshake);
    let mut utp = vec![0x01u8; 20];
    utp.extend_from_slice(&bt);
    assert_eq!(detect(L4::Udp, &utp).ptype, UtpBtHandshake);
    assert_eq!(
        detect(L4::Tcp, b"<stream:stream to='x' xmlns='jabber:client'>").ptype,
        XmppStream
    );
    assert_eq!(
        detect(
            L4::Tcp,
            b"<starttls xmlns='urn:ietf:params:xml:ns:xmpp-tls'/>"
        )
        .ptype,
        XmppStarttls
    );
    assert_eq!(detect(L4::Tcp, b"<proceed xmlns='x'/>").ptype, XmppProceed);
    assert_eq!(
        detect(L4::Tcp, b"<stream:features></x>").ptype,
        XmppFeatures
    );
    let mut resp = load("dns.bin");
    resp[2] |= 0x80;
    resp[7] = 1;
    assert_eq!(detect(L4::Udp, &resp).ptype, DnsResponse);
}

#[test]
fn quic_initial_that_does_not_decrypt_has_no_host() {
    let mut p = load("quic_initial_www_google_com.bin");
    let last = p.len() - 300;
    p[last] ^= 1;
    let d = detect(L4::Udp, &p);
    assert_eq!((d.ptype, d.host), (QuicInitial, None));
}

fn tcp_segments(p: &[u8], size: usize) -> Vec<(u32, &[u8])> {
    p.chunks(size)
        .enumerate()
        .map(|(i, c)| ((i * size) as u32, c))
        .collect()
}

#[test]
fn tls_kyber_through_reasm() {
    for (name, host) in [
        ("tls_clienthello_vk_com_kyber.bin", "vk.com"),
        ("tls_clienthello_rutracker_org_kyber.bin", "rutracker.org"),
    ] {
        let p = load(name);
        for reverse in [false, true] {
            let mut budget = ReasmBudget::new(64 * 1024);
            let mut r = Reasm::new(16 * 1024);
            let mut segs = tcp_segments(&p, 1400);
            if reverse {
                segs.reverse();
            }
            let n = segs.len();
            for (i, (seq, s)) in segs.into_iter().enumerate() {
                let st = r.feed(&mut budget, seq, s);
                let want = if i + 1 == n {
                    ReasmStatus::Complete
                } else {
                    ReasmStatus::NeedMore
                };
                assert_eq!(st, want, "{name} segment {i}");
            }
            assert_eq!(budget.used(), p.len());
            let whole = r.data().unwrap();
            assert_eq!(whole, &p[..]);
            let d = detect(L4::Tcp, whole);
            assert_eq!(d.host.as_deref(), Some(host));
            check_tls_markers(whole, &d);
            assert_eq!(r.finish(&mut budget), Some(p.clone()));
            assert_eq!(budget.used(), 0);
        }
    }
}

#[test]
fn tls_reasm_across_records_and_small_segments() {
    let p = load("tls_clienthello_google_com_tlsrec.bin");
    let mut budget = ReasmBudget::new(4096);
    let mut r = Reasm::new(4096);
    let segs = tcp_segments(&p, 50);
    let n = segs.len();
    for (i, (seq, s)) in segs.into_iter().enumerate() {
        let st = r.feed(&mut budget, seq, s);
        assert_eq!(
            st == ReasmStatus::Complete,
            i + 1 == n,
            "segment {i}: {st:?}"
        );
    }
    assert_eq!(r.data(), Some(&p[..]));
}

#[test]
fn tls_reasm_overlap_and_retransmission() {
    let p = load("tls_clienthello_vk_com_kyber.bin");
    let mut budget = ReasmBudget::new(1 << 20);
    let mut r = Reasm::new(16 * 1024);
    assert_eq!(r.feed(&mut budget, 0, &p[..1000]), ReasmStatus::NeedMore);
    // overlapping retransmission, agreeing
    assert_eq!(
        r.feed(&mut budget, 500, &p[500..1500]),
        ReasmStatus::NeedMore
    );
    // an old segment before the hello, partly overlapping it
    let mut before = vec![0xaa; 10];
    before.extend_from_slice(&p[..20]);
    assert_eq!(
        r.feed(&mut budget, (-10i32) as u32, &before),
        ReasmStatus::NeedMore
    );
    // the tail, with bytes of the next message after it: not kept
    let mut tail = p[1500..].to_vec();
    tail.extend_from_slice(b"more data");
    assert_eq!(r.feed(&mut budget, 1500, &tail), ReasmStatus::Complete);
    assert_eq!(r.data(), Some(&p[..]));
    assert_eq!(budget.used(), p.len());

    // disagreeing overlap is refused and counted
    let mut r = Reasm::new(16 * 1024);
    assert_eq!(r.feed(&mut budget, 0, &p[..1000]), ReasmStatus::NeedMore);
    let mut bad = p[900..1400].to_vec();
    bad[0] ^= 0xff;
    assert_eq!(
        r.feed(&mut budget, 900, &bad),
        ReasmStatus::Refused(ReasmRefusal::Conflict)
    );
    assert_eq!(budget.refused_other(), 1);
    assert_eq!(budget.used(), p.len());
    assert_eq!(r.held(), 0);
    // sticky
    assert_eq!(
        r.feed(&mut budget, 1000, &p[1000..]),
        ReasmStatus::Refused(ReasmRefusal::Conflict)
    );
}

#[test]
fn reasm_flow_limit_refuses_and_counts() {
    let mut budget = ReasmBudget::new(1 << 20);
    let p = load("tls_clienthello_vk_com_kyber.bin");
    // the hello (1812 bytes) is longer than the flow's limit: refused at the first segment
    let mut r = Reasm::new(1500);
    assert_eq!(
        r.feed(&mut budget, 0, &p[..1400]),
        ReasmStatus::Refused(ReasmRefusal::FlowLimit)
    );
    assert_eq!(budget.refused_flow_limit(), 1);
    assert_eq!(budget.used(), 0);
    // a segment far past the limit before the start is known
    let mut r = Reasm::new(1500);
    assert_eq!(
        r.feed(&mut budget, 1400, &p[1400..]),
        ReasmStatus::Refused(ReasmRefusal::FlowLimit)
    );
    assert_eq!(budget.refused_flow_limit(), 2);
    // the 64 KiB "bigsize" hello
    let mut r = Reasm::new(16 * 1024);
    let big = load("tls_clienthello_iana_org_bigsize.bin");
    assert_eq!(
        r.feed(&mut budget, 0, &big),
        ReasmStatus::Refused(ReasmRefusal::FlowLimit)
    );
    assert_eq!(budget.refused_flow_limit(), 3);
    assert_eq!(budget.used(), 0);
    // not a hello
    let mut r = Reasm::new(16 * 1024);
    assert_eq!(
        r.feed(&mut budget, 0, &load("http_iana_org.bin")),
        ReasmStatus::Refused(ReasmRefusal::NotClientHello)
    );
    assert_eq!(budget.refused_other(), 1);
}

#[test]
fn reasm_shared_budget_refuses_and_counts() {
    let p = load("tls_clienthello_vk_com_kyber.bin");
    // room for one and a half hellos
    let mut budget = ReasmBudget::new(2800);
    let mut a = Reasm::new(16 * 1024);
    let mut b = Reasm::new(16 * 1024);
    assert_eq!(a.feed(&mut budget, 0, &p[..1400]), ReasmStatus::NeedMore);
    assert_eq!(b.feed(&mut budget, 0, &p[..1400]), ReasmStatus::NeedMore);
    assert_eq!(budget.used(), 2800);
    assert_eq!(budget.available(), 0);
    assert_eq!(
        a.feed(&mut budget, 1400, &p[1400..]),
        ReasmStatus::Refused(ReasmRefusal::Budget)
    );
    assert_eq!(budget.refused_budget(), 1);
    // a's bytes went back: b completes
    assert_eq!(budget.used(), 1400);
    assert_eq!(b.feed(&mut budget, 1400, &p[1400..]), ReasmStatus::Complete);
    assert_eq!(budget.used(), 1812);
    assert_eq!(b.finish(&mut budget).map(|v| v.len()), Some(1812));
    assert_eq!(budget.used(), 0);
    assert_eq!(budget.refused_flow_limit(), 0);
}

fn quic_reasm(first: &str, second: &str, host: &str, swap: bool) {
    let (mut p1, mut p2) = (load(first), load(second));
    if swap {
        std::mem::swap(&mut p1, &mut p2);
    }
    let mut r = QuicReasm::new(QuicReasm::DEFAULT_LIMIT);
    assert_eq!(r.feed(&p1), QuicReasmStatus::NeedMore);
    assert_eq!(r.host(), None);
    assert_eq!(r.hello(), None);
    // a datagram of another connection is left out
    assert_eq!(
        r.feed(&load("quic_initial_www_google_com.bin")),
        QuicReasmStatus::Ignored
    );
    assert_eq!(r.feed(&load("dns.bin")), QuicReasmStatus::Ignored);
    assert_eq!(r.feed(&p2), QuicReasmStatus::Complete);
    assert_eq!(r.host(), Some(host));
    let hello = r.hello().unwrap();
    assert_eq!(hello[0], 1);
    assert_eq!(
        hello.len(),
        ((hello[1] as usize) << 16 | (hello[2] as usize) << 8 | hello[3] as usize) + 4
    );
    assert!(hello.len() > 1200);
}

#[test]
fn quic_kyber_through_quic_reasm() {
    for swap in [false, true] {
        quic_reasm(
            "quic_initial_rutracker_org_kyber_1.bin",
            "quic_initial_rutracker_org_kyber_2.bin",
            "rutracker.org",
            swap,
        );
        quic_reasm(
            "quic_initial_rr1---sn-xguxaxjvh-n8me_googlevideo_com_kyber_1.bin",
            "quic_initial_rr1---sn-xguxaxjvh-n8me_googlevideo_com_kyber_2.bin",
            "rr1---sn-xguxaxjvh-n8me.googlevideo.com",
            swap,
        );
    }
}

#[test]
fn quic_kyber_parts_alone_are_initials() {
    for name in REASM_ONLY {
        assert_eq!(detect(L4::Udp, &load(name)).ptype, QuicInitial, "{name}");
    }
}

#[test]
fn quic_reasm_limit_refuses() {
    let mut r = QuicReasm::new(1000);
    assert_eq!(
        r.feed(&load("quic_initial_rutracker_org_kyber_1.bin")),
        QuicReasmStatus::Refused
    );
    assert_eq!(
        r.feed(&load("quic_initial_rutracker_org_kyber_2.bin")),
        QuicReasmStatus::Refused
    );
    assert_eq!(r.held(), 0);
    // a whole hello in one datagram completes at once
    let mut r = QuicReasm::new(QuicReasm::DEFAULT_LIMIT);
    assert_eq!(
        r.feed(&load("quic2_example_com.bin")),
        QuicReasmStatus::Complete
    );
    assert_eq!(r.host(), Some("example.com"));
}

#[test]
fn mtproto_initial() {
    use aes::cipher::generic_array::GenericArray;
    use aes::cipher::{BlockEncrypt, KeyInit};
    // an obfuscated initial packet: random key and IV; bytes 56..60 encrypt to 0xefefefef
    let mut p: Vec<u8> = (0..64u32).map(|i| (i * 97 + 13) as u8).collect();
    p[0] = 0x77;
    let ctr = u128::from_be_bytes(p[40..56].try_into().unwrap()).wrapping_add(3);
    let mut block = GenericArray::from(ctr.to_be_bytes());
    aes::Aes256::new(GenericArray::from_slice(&p[8..40])).encrypt_block(&mut block);
    for i in 0..4 {
        p[56 + i] = block[8 + i] ^ 0xef;
    }
    assert_eq!(detect(L4::Tcp, &p).ptype, MtprotoInitial);
    assert_eq!(detect(L4::Udp, &p).ptype, Unknown);
    p[57] ^= 1;
    assert_eq!(detect(L4::Tcp, &p).ptype, Unknown);
    assert_eq!(detect(L4::Tcp, &p[..63]).ptype, Unknown);
}

#[test]
fn quic_kyber_parts_alone_hosts() {
    let got: Vec<Option<String>> = REASM_ONLY
        .iter()
        .map(|n| detect(L4::Udp, &load(n)).host)
        .collect();
    assert_eq!(got, vec![None, None, None, None]);
}
