//! Hostile and malformed packets through the engine, each with its defined outcome: a broken
//! network header is counted by reason and gets the chain's policy (the rules are not run); a
//! broken transport header runs the rules with what the kernel would read; tags, options,
//! fragments and extension headers are seen through. Compiled and linear must agree on all.

use std::net::{Ipv4Addr, Ipv6Addr};
use weir_engine::{Compiled, Decision, DropReason, Engine, Meta, Mode, Pkt};
use weir_lang::ir::Hook;
use weir_wire::build::{self, hostile, Builder, Tcp};
use weir_wire::{LinkType, PacketMeta};

const RULES: &str =
    "table inet f { chain fwd { type filter hook forward priority 0; policy drop;\n\
    tcp dport 80 accept\n\
    udp dport 53 accept\n\
    icmp type echo-request accept\n\
    icmpv6 type echo-request accept\n\
    meta l4proto tcp counter accept\n\
} }";

#[derive(Debug, PartialEq)]
enum Want {
    /// Dropped unparsed, counted under this reason.
    Malformed(&'static str),
    /// Accepted by the rule with this counter id (0-based rule position).
    Rule(usize),
    /// Dropped by the policy.
    Policy,
}

fn outcome(frame: &[u8], link: LinkType) -> (Want, Option<&'static str>) {
    let (rs, _) = weir_lang::load_str("h.nft", RULES).unwrap();
    let pm = PacketMeta::parse(frame, link);
    let mut got = Vec::new();
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut e = Engine::new(Compiled::build(&rs, mode));
        let mut p = Pkt {
            frame,
            pm: &pm,
            meta: &mut Meta::default(),
            now_ns: 0,
            conns: None,
        };
        let d = e.process(Hook::Forward, &mut p);
        let w = match d {
            Decision::Drop(DropReason::Malformed(m)) => Want::Malformed(m.reason()),
            Decision::Drop(DropReason::Policy(..)) => Want::Policy,
            Decision::Accept => {
                let hit =
                    e.st.rule_hits
                        .iter()
                        .position(|h| h.0 == 1)
                        .expect("an accepting rule counted it");
                Want::Rule(hit)
            }
            other => panic!("unexpected {other:?}"),
        };
        got.push(w);
    }
    assert_eq!(got[0], got[1], "compiled and linear disagree");
    (got.remove(0), pm.malformed.map(|m| m.reason()))
}

fn a4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}
fn a6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn tcp80() -> Vec<u8> {
    build::tcp4(
        a4("198.18.0.1"),
        a4("198.19.0.1"),
        40000,
        80,
        build::tcp_flags::SYN,
        b"",
    )
}

#[test]
fn network_header_problems_take_the_policy() {
    let mut f = tcp80();
    hostile::set_ipv4_ihl(&mut f, LinkType::Ethernet, 3);
    assert_eq!(
        outcome(&f, LinkType::Ethernet).0,
        Want::Malformed("bad-ihl")
    );

    let mut f = tcp80();
    hostile::set_ipv4_ihl(&mut f, LinkType::Ethernet, 15);
    assert!(matches!(
        outcome(&f, LinkType::Ethernet).0,
        Want::Malformed(_)
    ));

    let mut f = tcp80();
    hostile::set_ipv4_total_length(&mut f, LinkType::Ethernet, 400);
    assert_eq!(
        outcome(&f, LinkType::Ethernet).0,
        Want::Malformed("bad-ipv4-total-length")
    );

    let mut f = tcp80();
    hostile::set_ipv4_total_length(&mut f, LinkType::Ethernet, 12);
    assert_eq!(
        outcome(&f, LinkType::Ethernet).0,
        Want::Malformed("bad-ipv4-total-length")
    );

    let f = tcp80();
    assert_eq!(
        outcome(&f[..14 + 12], LinkType::Ethernet).0,
        Want::Malformed("truncated-ipv4")
    );
    assert_eq!(
        outcome(&f[..10], LinkType::Ethernet).0,
        Want::Malformed("truncated-ethernet")
    );

    let mut f = build::udp6(a6("2001:db8::1"), a6("2001:db8:1::1"), 1, 53, b"q");
    hostile::set_ipv6_payload_length(&mut f, LinkType::Ethernet, 500);
    assert_eq!(
        outcome(&f, LinkType::Ethernet).0,
        Want::Malformed("bad-ipv6-payload-length")
    );

    let raw = Builder::raw().tcp(a4("198.18.0.1"), a4("198.19.0.1"), &Tcp::new(1, 80, 2), b"");
    let mut bad = raw.clone();
    hostile::set_ip_version(&mut bad, LinkType::RawIp, 7);
    assert_eq!(
        outcome(&bad, LinkType::RawIp).0,
        Want::Malformed("bad-ip-version")
    );
    assert_eq!(outcome(&raw, LinkType::RawIp).0, Want::Rule(0));
}

#[test]
fn transport_problems_run_the_rules() {
    // TCP data offset 3: the ports are still read (the kernel reads them byte by byte)
    let mut f = tcp80();
    hostile::set_tcp_doff(&mut f, LinkType::Ethernet, 3);
    assert_eq!(
        outcome(&f, LinkType::Ethernet),
        (Want::Rule(0), Some("bad-tcp-doff"))
    );
    // data offset beyond the packet
    let mut f = tcp80();
    hostile::set_tcp_doff(&mut f, LinkType::Ethernet, 15);
    assert_eq!(
        outcome(&f, LinkType::Ethernet),
        (Want::Rule(0), Some("bad-tcp-doff"))
    );
    // UDP length below 8: the ports are there
    let mut f = build::udp4(a4("198.18.0.1"), a4("198.19.0.1"), 5353, 53, b"q");
    hostile::set_udp_length(&mut f, LinkType::Ethernet, 4);
    assert_eq!(
        outcome(&f, LinkType::Ethernet),
        (Want::Rule(1), Some("bad-udp-length"))
    );
    // zero-length UDP payload is fine
    let f = build::udp4(a4("198.18.0.1"), a4("198.19.0.1"), 5353, 53, b"");
    assert_eq!(outcome(&f, LinkType::Ethernet), (Want::Rule(1), None));
    // ICMP with 2 bytes of header: no type to match, the policy drops it
    let f = Builder::new().ip(a4("198.18.0.1"), a4("198.19.0.1"), 1, &[8, 0]);
    assert_eq!(
        outcome(&f, LinkType::Ethernet),
        (Want::Policy, Some("truncated-icmp"))
    );
}

#[test]
fn tags_options_fragments_and_extension_headers() {
    let b = || Builder::new();
    let t = Tcp::new(40000, 80, 2);
    let (s4, d4) = (a4("198.18.0.1"), a4("198.19.0.1"));
    let (s6, d6) = (a6("2001:db8::1"), a6("2001:db8:1::1"));
    // VLAN and QinQ tags are seen through
    assert_eq!(
        outcome(&b().vlan(10).tcp(s4, d4, &t, b""), LinkType::Ethernet),
        (Want::Rule(0), None)
    );
    assert_eq!(
        outcome(&b().qinq(10, 20).tcp(s4, d4, &t, b""), LinkType::Ethernet),
        (Want::Rule(0), None)
    );
    // IPv4 options are skipped
    let opts = [1u8, 1, 1, 0];
    assert_eq!(
        outcome(
            &b().ipv4_options(&opts).tcp(s4, d4, &t, b""),
            LinkType::Ethernet
        ),
        (Want::Rule(0), None)
    );
    // a first fragment carries the ports; a later one has no transport header: only
    // `meta l4proto tcp` can match it
    assert_eq!(
        outcome(
            &b().fragment(0, true).tcp(s4, d4, &t, b"0123456789abcdef"),
            LinkType::Ethernet
        )
        .0,
        Want::Rule(0)
    );
    assert_eq!(
        outcome(
            &b().fragment(4, false).tcp(s4, d4, &t, b"0123456789abcdef"),
            LinkType::Ethernet
        )
        .0,
        Want::Rule(4)
    );
    // IPv6 extension chains: hop-by-hop, routing, destination options, fragment
    let f = b().hop_by_hop().routing().dest_opts().tcp(s6, d6, &t, b"");
    assert_eq!(outcome(&f, LinkType::Ethernet), (Want::Rule(0), None));
    let f = b()
        .hop_by_hop()
        .fragment(0, true)
        .tcp(s6, d6, &t, b"0123456789abcdef");
    assert_eq!(outcome(&f, LinkType::Ethernet).0, Want::Rule(0));
    // a chain longer than the parser follows: counted, the transport fields are absent
    let mut long = b();
    for _ in 0..20 {
        long = long.dest_opts();
    }
    let (w, why) = outcome(&long.tcp(s6, d6, &t, b""), LinkType::Ethernet);
    assert_eq!((w, why), (Want::Policy, Some("ext-header-chain-too-long")));
    // an ICMP error quoting a truncated header is an ICMP packet like any other
    let quoted = build::tcp4(d4, s4, 80, 40000, 0x12, b"");
    let f = b().icmp_error(s4, d4, 3, 3, &quoted[14..], 24);
    assert_eq!(outcome(&f, LinkType::Ethernet).0, Want::Policy);
}
