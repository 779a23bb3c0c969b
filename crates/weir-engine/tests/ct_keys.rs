//! `ct` keys read from the connection entry through `Stateful`, as `nft_ct_get_eval` reads
//! them: the tuples of both directions, the counters (summed without a direction), the
//! average packet size, zones (0 without `ct zone set`), and no value at all without an entry.

use std::net::Ipv4Addr;
use weir_conntrack::Config;
use weir_engine::stateful::{PacketCt, Stateful};
use weir_engine::{Compiled, Decision, Engine, Meta, Mode, Pkt};
use weir_lang::ir::Hook;
use weir_wire::build::{tcp_flags as tf, Builder, Tcp};
use weir_wire::{LinkType, PacketMeta};

const C: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);
const S: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 20);

fn stateful(rules: &str, mode: Mode) -> Stateful {
    let (rs, _) = weir_lang::load_str("t.nft", rules).unwrap_or_else(|(sm, d)| {
        panic!("{}", weir_lang::diag::render_all(&d, &sm));
    });
    assert!(rs.refuse_unevaluated().is_ok(), "a construct not evaluated");
    Stateful::new(Engine::new(Compiled::build(&rs, mode)), Config::default())
}

/// A packet forwarded through prerouting, forward, postrouting, confirmed when it leaves; the
/// packet's mark when it leaves.
fn forward(sf: &mut Stateful, frame: &[u8], now_ns: u64) -> u32 {
    let pm = PacketMeta::parse(frame, LinkType::Ethernet);
    let mut pc = PacketCt::default();
    let mut mark = 0;
    for hook in [Hook::Prerouting, Hook::Forward, Hook::Postrouting] {
        let mut meta =
            Meta::with_ifnames("lan0", if hook == Hook::Prerouting { "" } else { "wan0" });
        meta.mark = mark;
        let mut p = Pkt {
            frame,
            pm: &pm,
            meta: &mut { meta },
            now_ns,
            conns: None,
        };
        let d = sf.hook(hook, &mut p, &mut pc);
        mark = p.meta.mark;
        assert_eq!(d, Decision::Accept);
    }
    assert_eq!(sf.finish(&mut pc, now_ns), Decision::Accept);
    mark
}

fn seg(from_client: bool, flags: u8, seq: u32, ack: u32, data: &[u8]) -> Vec<u8> {
    let (a, b, sp, dp) = if from_client {
        (C, S, 40000, 80)
    } else {
        (S, C, 80, 40000)
    };
    Builder::new().tcp(a, b, &Tcp::new(sp, dp, flags).seq(seq).ack(ack), data)
}

/// Each rule sets one bit of the mark when its `ct` keys match.
const RULES: &str = "table inet f {
    chain fwd { type filter hook forward priority 0; policy accept;
        ct original ip saddr 198.18.0.10 ct original ip daddr 198.19.0.20 ct reply ip saddr 198.19.0.20 ct reply ip daddr 198.18.0.10 meta mark set meta mark | 0x1
        ct original proto-src 40000 ct original proto-dst 80 ct reply proto-src 80 ct reply proto-dst 40000 ct original protocol tcp ct reply protocol tcp meta mark set meta mark | 0x2
        ct original ip6 saddr != ::1 meta mark set meta mark | 0x4
        ct zone 0 ct original zone 0 ct reply zone 0 meta mark set meta mark | 0x8
        ct zone != 0 meta mark set meta mark | 0x10
        ct bytes > 200 meta mark set meta mark | 0x20
        ct packets 3 ct original packets 2 ct reply packets 1 meta mark set meta mark | 0x40
        ct avgpkt 40 meta mark set meta mark | 0x80
        ct avgpkt 73 ct original avgpkt 90 ct reply avgpkt 40 meta mark set meta mark | 0x100
        ct original ip saddr 198.19.0.20 meta mark set meta mark | 0x200
        ct reply proto-dst 80 meta mark set meta mark | 0x400
    }
}";

#[test]
fn ct_keys_of_a_tcp_connection() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = stateful(RULES, mode);
        let t = 1_000_000_000;
        // the SYN: 40 bytes (IP length), one packet
        let m = forward(&mut sf, &seg(true, tf::SYN, 100, 0, &[]), t);
        assert_eq!(m, 0x1 | 0x2 | 0x8 | 0x80, "{mode:?} SYN: {m:#x}");
        // the SYN-ACK: 80 bytes in two packets; the tuples are the connection's, not the packet's
        let m = forward(
            &mut sf,
            &seg(false, tf::SYN | tf::ACK, 500, 101, &[]),
            t + 1,
        );
        assert_eq!(m, 0x1 | 0x2 | 0x8 | 0x80, "{mode:?} SYN-ACK: {m:#x}");
        // the ACK with 100 bytes of data: 220 bytes in 3 packets (original 180 in 2, reply 40)
        let m = forward(&mut sf, &seg(true, tf::ACK, 101, 501, &[0; 100]), t + 2);
        assert_eq!(
            m,
            0x1 | 0x2 | 0x8 | 0x20 | 0x40 | 0x100,
            "{mode:?} ACK: {m:#x}"
        );
    }
}

/// Without an entry (untracked), every key but `ct state` breaks the rule, negated or not.
#[test]
fn ct_keys_without_an_entry_break_the_rule() {
    let rules = "table inet f {
        chain raw { type filter hook prerouting priority -300; notrack }
        chain fwd { type filter hook forward priority 0; policy accept;
            ct state untracked meta mark set meta mark | 0x1
            ct zone 0 meta mark set meta mark | 0x2
            ct zone != 1 meta mark set meta mark | 0x4
            ct bytes >= 0 meta mark set meta mark | 0x8
            ct avgpkt 0 meta mark set meta mark | 0x10
            ct original ip saddr != 1.2.3.4 meta mark set meta mark | 0x20
            ct reply proto-dst != 1 meta mark set meta mark | 0x40
        }
    }";
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = stateful(rules, mode);
        let m = forward(&mut sf, &seg(true, tf::SYN, 100, 0, &[]), 1_000_000_000);
        assert_eq!(m, 0x1, "{mode:?}: {m:#x}");
    }
}

/// `ct label N` on a connection without labels: bit N is not
/// set, `ct label != N` holds for every tracked connection, and neither without an entry.
#[test]
fn ct_label_reads_no_bit_set() {
    let rules = "table inet f {
        chain fwd { type filter hook forward priority 0; policy accept;
            ct label 127 meta mark set meta mark | 0x1
            ct label 0 meta mark set meta mark | 0x2
            ct label != 5 meta mark set meta mark | 0x4
        }
    }";
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = stateful(rules, mode);
        let m = forward(&mut sf, &seg(true, tf::SYN, 100, 0, &[]), 1_000_000_000);
        assert_eq!(m, 0x4, "{mode:?}: {m:#x}");
    }
    let untracked = "table inet f {
        chain raw { type filter hook prerouting priority -300; notrack }
        chain fwd { type filter hook forward priority 0; policy accept;
            ct label != 5 meta mark set meta mark | 0x4
        }
    }";
    let mut sf = stateful(untracked, Mode::Linear);
    assert_eq!(forward(&mut sf, &seg(true, tf::SYN, 100, 0, &[]), 1), 0);
    // `ct label set N` is evaluated (tests/ct_objects.rs); a label compared otherwise than
    // with one number is not
    let text = "table ip f { chain c { type filter hook prerouting priority 0; ct label set 127; ct label { 1, 2 } } }";
    let (rs, _) = weir_lang::load_str("t.nft", text).unwrap_or_else(|(sm, d)| {
        panic!("{}", weir_lang::diag::render_all(&d, &sm));
    });
    let u = rs.unevaluated();
    assert_eq!(u.len(), 1, "{u:?}");
    assert!(u[0].contains("ct label"), "{u:?}");
}

/// An IPv6 connection: the `ip6` address keys read its tuples, the `ip` ones break the rule
/// (negated too), `ct l3proto` is ipv6.
#[test]
fn ct_keys_of_an_ipv6_connection() {
    let rules = "table inet f {
        chain fwd { type filter hook forward priority 0; policy accept;
            ct original ip6 saddr 2001:db8::10 ct original ip6 daddr 2001:db8:1::20 ct reply ip6 saddr 2001:db8:1::20 ct reply ip6 daddr 2001:db8::10 meta mark set meta mark | 0x1
            ct original ip saddr != 1.2.3.4 meta mark set meta mark | 0x2
            ct reply ip daddr != 1.2.3.4 meta mark set meta mark | 0x4
            ct l3proto ipv6 ct reply proto-src 443 ct original proto-dst 443 meta mark set meta mark | 0x8
            ct original ip6 saddr 2001:db8:1::20 meta mark set meta mark | 0x10
        }
    }";
    let c: std::net::Ipv6Addr = "2001:db8::10".parse().unwrap();
    let s: std::net::Ipv6Addr = "2001:db8:1::20".parse().unwrap();
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = stateful(rules, mode);
        let syn = Builder::new().tcp(c, s, &Tcp::new(50000, 443, tf::SYN).seq(1), &[]);
        let m = forward(&mut sf, &syn, 1_000_000_000);
        assert_eq!(m, 0x1 | 0x8, "{mode:?} SYN: {m:#x}");
        let syn_ack = Builder::new().tcp(
            s,
            c,
            &Tcp::new(443, 50000, tf::SYN | tf::ACK).seq(9).ack(2),
            &[],
        );
        let m = forward(&mut sf, &syn_ack, 1_000_000_001);
        assert_eq!(m, 0x1 | 0x8, "{mode:?} SYN-ACK: {m:#x}");
    }
}
