//! multisplit, multidisorder, fakedsplit, fakeddisorder, hostfakesplit and tcpseg on a TLS
//! ClientHello for iana.org, over IPv4 and IPv6: sequence numbers, payloads, order,
//! checksums, lengths, IPv4 ids, verdicts.

mod desync_common;
use desync_common::*;
use weir_script::desync::Verdict;

fn both() -> Vec<(Vec<u8>, Vec<u8>)> {
    let h = hello();
    vec![(pkt4(&h), h.clone()), (pkt6(&h), h)]
}

#[test]
fn multisplit_1_midsld() {
    for (pkt, h) in both() {
        let m = markers(&h);
        let mid = m.host.unwrap().0 + 2; // "iana": 4 letters
        let out = run(&action("multisplit", &[("pos", "1,midsld")]), &pkt, m);
        assert_eq!(out.verdict, Verdict::Drop);
        assert!(out.modified.is_none());
        assert_eq!(out.send.len(), 3);
        let s: Vec<Sent> = out.send.iter().map(|p| read(p)).collect();
        let bounds = [(0usize, 1usize), (1, mid), (mid, h.len())];
        for (i, (a, b)) in bounds.iter().enumerate() {
            assert_eq!(s[i].seq, SEQ.wrapping_add(*a as u32), "part {i}");
            assert_eq!(s[i].ack, ACK);
            assert_eq!(s[i].payload, &h[*a..*b], "part {i}");
            assert!(s[i].l4_ok, "checksum of part {i}");
            assert_eq!(s[i].ttl, 64);
            assert_eq!(s[i].flags, 0x18);
            if !s[i].v6 {
                assert_eq!(s[i].ip_id, IP_ID + 1 + i as u16);
            }
        }
        let cat: Vec<u8> = s.iter().flat_map(|x| x.payload.clone()).collect();
        assert_eq!(cat, h);
    }
}

#[test]
fn multisplit_positions_sorted_deduplicated_out_of_range_dropped() {
    let (pkt, h) = both().remove(0);
    let m = markers(&h);
    let act = action("multisplit", &[("pos", "host,10,0,10,9999,method,-7,sld")]);
    let out = run(&act, &pkt, m);
    let seqs: Vec<u32> = out
        .send
        .iter()
        .map(|p| read(p).seq.wrapping_sub(SEQ))
        .collect();
    // 0 and 9999 dropped, method does not resolve, host == sld for iana.org
    assert_eq!(seqs, vec![0, 10, 153, h.len() as u32 - 7]);
}

#[test]
fn multisplit_seqovl() {
    for (pkt, h) in both() {
        let m = markers(&h);
        let out = run(
            &action("multisplit", &[("pos", "1,midsld"), ("seqovl", "5")]),
            &pkt,
            m,
        );
        assert_eq!(out.verdict, Verdict::Drop);
        let s: Vec<Sent> = out.send.iter().map(|p| read(p)).collect();
        assert_eq!(s[0].seq, SEQ.wrapping_sub(5));
        assert_eq!(s[0].payload, [&[0u8; 5][..], &h[..1]].concat());
        assert!(s[0].l4_ok);
        assert_eq!(s[1].seq, SEQ.wrapping_add(1));
        let out = run(
            &action(
                "multisplit",
                &[("pos", "1"), ("seqovl", "3"), ("seqovl_pattern", "0xabcd")],
            ),
            &pkt,
            m,
        );
        let s = read(&out.send[0]);
        assert_eq!(s.payload, [0xab, 0xcd, 0xab, h[0]]);
        assert_eq!(s.seq, SEQ.wrapping_sub(3));
    }
}

#[test]
fn multidisorder_reverse() {
    for (pkt, h) in both() {
        let m = markers(&h);
        let mid = m.host.unwrap().0 + 2;
        let out = run(&action("multidisorder", &[("pos", "1,midsld")]), &pkt, m);
        assert_eq!(out.verdict, Verdict::Drop);
        let s: Vec<Sent> = out.send.iter().map(|p| read(p)).collect();
        let off: Vec<u32> = s.iter().map(|x| x.seq.wrapping_sub(SEQ)).collect();
        assert_eq!(off, vec![mid as u32, 1, 0]);
        assert_eq!(s[0].payload, &h[mid..]);
        assert_eq!(s[1].payload, &h[1..mid]);
        assert_eq!(s[2].payload, &h[..1]);
        assert!(s.iter().all(|x| x.l4_ok));
        // seqovl (a marker) goes before the 2nd part in the original order
        let out = run(
            &action("multidisorder", &[("pos", "2,midsld"), ("seqovl", "1")]),
            &pkt,
            m,
        );
        let s: Vec<Sent> = out.send.iter().map(|p| read(p)).collect();
        assert_eq!(s[1].seq, SEQ.wrapping_add(1));
        assert_eq!(s[1].payload, [&[0u8][..], &h[2..mid]].concat());
        // seqovl not below the first split point: cancelled
        let out = run(
            &action("multidisorder", &[("pos", "2,midsld"), ("seqovl", "2")]),
            &pkt,
            m,
        );
        assert_eq!(read(&out.send[1]).seq, SEQ.wrapping_add(2));
    }
}

fn check_faked(out: &[Vec<u8>], h: &[u8], p: usize, order: &[(bool, usize)]) {
    assert_eq!(out.len(), order.len());
    for (i, (fake, off)) in order.iter().enumerate() {
        let s = read(&out[i]);
        assert_eq!(s.seq, SEQ.wrapping_add(*off as u32), "packet {i}");
        let real = if *off == 0 { &h[..p] } else { &h[p..] };
        if *fake {
            assert_eq!(s.ttl, 3, "fake {i} ttl");
            assert_eq!(s.payload.len(), real.len());
            assert!(s.payload.iter().all(|&b| b == 0));
        } else {
            assert_eq!(s.ttl, 64, "real {i} ttl");
            assert_eq!(s.payload, real);
        }
        assert!(s.l4_ok);
    }
}

#[test]
fn fakedsplit_order() {
    for (pkt, h) in both() {
        let m = markers(&h);
        let p = m.host.unwrap().0 + 2;
        let out = run(
            &action(
                "fakedsplit",
                &[("pos", "midsld"), ("ip_ttl", "3"), ("ip6_ttl", "3")],
            ),
            &pkt,
            m,
        );
        assert_eq!(out.verdict, Verdict::Drop);
        let order = [
            (true, 0),
            (false, 0),
            (true, 0),
            (true, p),
            (false, p),
            (true, p),
        ];
        check_faked(&out.send, &h, p, &order);
        let out = run(
            &action(
                "fakedsplit",
                &[
                    ("pos", "midsld"),
                    ("ip_ttl", "3"),
                    ("ip6_ttl", "3"),
                    ("nofake1", ""),
                    ("nofake4", ""),
                ],
            ),
            &pkt,
            m,
        );
        check_faked(&out.send, &h, p, &order[1..5]);
    }
}

#[test]
fn fakeddisorder_order() {
    for (pkt, h) in both() {
        let m = markers(&h);
        let p = m.host.unwrap().0 + 2;
        let out = run(
            &action(
                "fakeddisorder",
                &[("pos", "midsld"), ("ip_ttl", "3"), ("ip6_ttl", "3")],
            ),
            &pkt,
            m,
        );
        assert_eq!(out.verdict, Verdict::Drop);
        let order = [
            (true, p),
            (false, p),
            (true, p),
            (true, 0),
            (false, 0),
            (true, 0),
        ];
        check_faked(&out.send, &h, p, &order);
    }
}

#[test]
fn hostfakesplit_order() {
    for (pkt, h) in both() {
        let m = markers(&h);
        let (hs, he) = m.host.unwrap();
        let out = run(
            &action(
                "hostfakesplit",
                &[
                    ("ip_ttl", "3"),
                    ("ip6_ttl", "3"),
                    ("host", "example.com"),
                    ("nodrop", ""),
                ],
            ),
            &pkt,
            m,
        );
        assert_eq!(out.verdict, Verdict::Pass);
        let s: Vec<Sent> = out.send.iter().map(|p| read(p)).collect();
        assert_eq!(s.len(), 5);
        let off: Vec<u32> = s.iter().map(|x| x.seq.wrapping_sub(SEQ)).collect();
        assert_eq!(off, vec![0, hs as u32, hs as u32, hs as u32, he as u32]);
        assert_eq!(s[0].payload, &h[..hs]);
        assert_eq!(s[1].payload, b"ample.com"[1..].to_vec()); // 8 bytes: the template's end
        assert_eq!(s[1].ttl, 3);
        assert_eq!(s[2].payload, b"iana.org");
        assert_eq!(s[3].payload, s[1].payload);
        assert_eq!(s[4].payload, &h[he..]);
    }
}

#[test]
fn tcpseg_range_with_seqovl() {
    for (pkt, h) in both() {
        let m = markers(&h);
        let out = run(
            &action("tcpseg", &[("pos", "0,-1"), ("seqovl", "3")]),
            &pkt,
            m,
        );
        assert_eq!(out.verdict, Verdict::Pass);
        assert_eq!(out.send.len(), 1);
        let s = read(&out.send[0]);
        assert_eq!(s.seq, SEQ.wrapping_sub(3));
        assert_eq!(s.payload, [&[0u8; 3][..], &h[..]].concat());
        let out = run(&action("tcpseg", &[("pos", "host,endhost-1")]), &pkt, m);
        assert_eq!(read(&out.send[0]).payload, b"iana.org");
    }
}

#[test]
fn cannot_act_passes_unchanged() {
    let h = hello();
    let m = markers(&h);
    let act = action("multisplit", &[("pos", "midsld")]);
    // no payload
    let out = run(&act, &pkt4(&[]), m);
    assert_eq!((out.verdict, out.send.len()), (Verdict::Pass, 0));
    // marker not resolvable
    let out = run(&act, &pkt4(&h), Default::default());
    assert_eq!((out.verdict, out.send.len()), (Verdict::Pass, 0));
    // UDP
    let udp = weir_wire::build::Builder::raw().udp(
        std::net::Ipv4Addr::new(1, 2, 3, 4),
        std::net::Ipv4Addr::new(5, 6, 7, 8),
        1,
        443,
        &h,
    );
    let out = run(&act, &udp, m);
    assert_eq!((out.verdict, out.send.len()), (Verdict::Pass, 0));
    // garbage
    let out = run(&act, &[0x45, 0, 1], m);
    assert_eq!((out.verdict, out.send.len()), (Verdict::Pass, 0));
}
