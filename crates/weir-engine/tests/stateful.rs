//! The stateful layer: connection tracking between the chains of the hooks a forwarded packet
//! crosses (prerouting, forward, postrouting), as netfilter places it.

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
    Stateful::new(Engine::new(Compiled::build(&rs, mode)), Config::default())
}

/// A packet forwarded through prerouting, forward, postrouting; confirmed when it leaves.
fn forward(sf: &mut Stateful, frame: &[u8], now_ns: u64) -> (Decision, u32) {
    let pm = PacketMeta::parse(frame, LinkType::Ethernet);
    let mut pc = PacketCt::default();
    let mut last_state = 0;
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
        last_state = p.meta.ct_state;
        mark = p.meta.mark;
        if !d.is_accept() {
            return (d, last_state);
        }
    }
    (sf.finish(&mut pc, now_ns), last_state)
}

fn seg(from_client: bool, flags: u8, seq: u32, ack: u32, data: &[u8]) -> Vec<u8> {
    let (a, b, sp, dp) = if from_client {
        (C, S, 40000, 80)
    } else {
        (S, C, 80, 40000)
    };
    Builder::new().tcp(a, b, &Tcp::new(sp, dp, flags).seq(seq).ack(ack), data)
}

const FIREWALL: &str = "table inet f {
    chain fwd { type filter hook forward priority 0; policy drop;
        ct state invalid counter drop
        ct state established,related counter accept
        ct state new tcp dport 80 counter accept
        ct state new udp dport 53 counter accept
    }
}";

#[test]
fn stateful_firewall_lets_replies_in_and_nothing_else() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = stateful(FIREWALL, mode);
        let t = 1_000_000_000;
        // handshake: SYN new, SYN-ACK established (reply), ACK established
        let (d, st) = forward(&mut sf, &seg(true, tf::SYN, 100, 0, &[]), t);
        assert!(d.is_accept());
        assert_eq!(st, 8);
        let (d, st) = forward(
            &mut sf,
            &seg(false, tf::SYN | tf::ACK, 500, 101, &[]),
            t + 1,
        );
        assert!(d.is_accept(), "{mode:?} {d:?} {st}");
        assert_eq!(st, 2);
        let (d, st) = forward(&mut sf, &seg(true, tf::ACK, 101, 501, &[]), t + 2);
        assert!(d.is_accept());
        assert_eq!(st, 2);
        let (d, _) = forward(
            &mut sf,
            &seg(true, tf::PSH | tf::ACK, 101, 501, b"GET /"),
            t + 3,
        );
        assert!(d.is_accept());
        assert_eq!(sf.ct().len(), 1);
        // far outside the window: invalid, dropped by the first rule
        let (d, st) = forward(
            &mut sf,
            &seg(
                false,
                tf::ACK,
                500u32.wrapping_add(2_000_000_000),
                106,
                b"x",
            ),
            t + 4,
        );
        assert!(!d.is_accept());
        assert_eq!(st, 1);
        // a reply-direction SYN-ACK for a connection never opened: invalid (not new)
        let other = Builder::new().tcp(
            S,
            C,
            &Tcp::new(80, 40001, tf::SYN | tf::ACK).seq(1).ack(2),
            &[],
        );
        let (d, st) = forward(&mut sf, &other, t + 5);
        assert!(!d.is_accept());
        assert_eq!(st, 1);
        // a new connection the rules do not allow leaves no entry (not confirmed)
        let ssh = Builder::new().tcp(C, S, &Tcp::new(40002, 22, tf::SYN), &[]);
        let (d, st) = forward(&mut sf, &ssh, t + 6);
        assert!(!d.is_accept());
        assert_eq!(st, 8);
        assert_eq!(sf.ct().len(), 1);
        // UDP: the query is new, the answer established
        let q = Builder::new().udp(C, S, 5353, 53, b"q");
        let a = Builder::new().udp(S, C, 53, 5353, b"a");
        assert_eq!(forward(&mut sf, &q, t + 7).1, 8);
        let (d, st) = forward(&mut sf, &a, t + 8);
        assert!(d.is_accept());
        assert_eq!(st, 2);
        // an answer from a port never asked is new, and not allowed
        let stray = Builder::new().udp(S, C, 53, 5354, b"a");
        assert!(!forward(&mut sf, &stray, t + 9).0.is_accept());
        // an ICMP error about the UDP flow is related; about another flow, invalid
        let quoted = Builder::raw().udp(C, S, 5353, 53, b"q");
        let err = Builder::new().icmp_error(S, C, 3, 3, &quoted, quoted.len());
        let (d, st) = forward(&mut sf, &err, t + 10);
        assert!(d.is_accept());
        assert_eq!(st, 4);
        let quoted = Builder::raw().udp(C, S, 5999, 53, b"q");
        let err = Builder::new().icmp_error(S, C, 3, 3, &quoted, quoted.len());
        assert!(!forward(&mut sf, &err, t + 11).0.is_accept());
        assert_eq!(sf.stats().confirmed, 2);
        // counters: rule hits are those of the packets above
        let hits: Vec<u64> = sf.engine().st.rule_hits.iter().map(|h| h.0).collect();
        // invalid: out of window, stray SYN-ACK, unrelated ICMP error; established/related:
        // SYN-ACK, ACK, data, UDP answer, related ICMP error
        assert_eq!(hits, vec![3, 5, 1, 1], "{mode:?}");
    }
}

#[test]
fn raw_chains_run_before_conntrack_and_notrack_untracks() {
    let rules = "table ip f {
        chain raw { type filter hook prerouting priority raw; policy accept;
            ct state invalid meta mark set 1
            udp dport 9999 notrack
        }
        chain fwd { type filter hook forward priority 0; policy accept;
            meta mark 1 ct state untracked counter drop
            meta mark 1 ct state new counter accept
        }
    }";
    let mut sf = stateful(rules, Mode::Compiled);
    // every packet is `ct state invalid` before conntrack (priority -300)
    let (d, st) = forward(&mut sf, &Builder::new().udp(C, S, 1, 53, b""), 1);
    assert!(d.is_accept());
    assert_eq!(st, 8);
    let (d, st) = forward(&mut sf, &Builder::new().udp(C, S, 1, 9999, b""), 2);
    assert!(!d.is_accept());
    assert_eq!(st, 64);
    assert_eq!(sf.ct().len(), 1);
}

#[test]
fn ct_mark_is_kept_in_the_connection() {
    let rules = "table ip f {
        chain fwd { type filter hook forward priority 0; policy accept;
            ct state new ct mark set 42
            ct mark 42 ct direction reply counter
            ct original packets 3 counter drop
        }
    }";
    let mut sf = stateful(rules, Mode::Compiled);
    forward(&mut sf, &Builder::new().udp(C, S, 7, 53, b""), 1);
    forward(&mut sf, &Builder::new().udp(S, C, 53, 7, b""), 2);
    assert_eq!(
        sf.engine().st.rule_hits[1].0,
        1,
        "the reply carries the mark"
    );
    assert!(forward(&mut sf, &Builder::new().udp(C, S, 7, 53, b""), 3)
        .0
        .is_accept());
    assert!(!forward(&mut sf, &Builder::new().udp(C, S, 7, 53, b""), 4)
        .0
        .is_accept());
}

#[test]
fn nat_chains_see_first_packets_only_and_fragments_are_counted() {
    let rules = "table ip n {
        chain post { type nat hook postrouting priority srcnat; policy accept;
            counter
        }
        chain fwd { type filter hook forward priority 0; policy accept;
            ct state new counter
        }
    }";
    let mut sf = stateful(rules, Mode::Compiled);
    for i in 0..3 {
        forward(&mut sf, &Builder::new().udp(C, S, 7, 53, b""), i);
    }
    // the nat chain's counter saw the first packet only; the filter chain's `ct state new`
    // matched all three (no reply yet)
    assert_eq!(sf.engine().st.rule_hits[0].0, 1);
    assert_eq!(sf.engine().st.rule_hits[1].0, 3);
    // a later fragment whose first never passed: dropped and counted (virtual reassembly,
    // tests/fragments.rs)
    let frag = Builder::new()
        .ip_id(9)
        .fragment(9, true)
        .udp(C, S, 7, 53, &[0; 32]);
    let (d, _) = forward(&mut sf, &frag, 10);
    assert!(!d.is_accept());
    assert_eq!(sf.stats().fragments, 1);
    // a ruleset without ct does not track at all
    let mut sf = stateful(
        "table ip f { chain fwd { type filter hook forward priority 0; udp dport 53 accept } }",
        Mode::Compiled,
    );
    let (d, st) = forward(&mut sf, &frag, 11);
    assert!(d.is_accept());
    assert_eq!(st, 64);
    assert_eq!(sf.ct().len(), 0);
}

#[test]
fn full_table_refuses_new_connections_and_keeps_established_ones() {
    let (rs, _) = weir_lang::load_str(
        "t",
        "table ip f { chain fwd { type filter hook forward priority 0; ct state established accept; ct state new accept } }",
    )
    .unwrap();
    let cfg = Config {
        max_entries: 4,
        ..Config::default()
    };
    let mut sf = Stateful::new(Engine::new(Compiled::build(&rs, Mode::Compiled)), cfg);
    // two assured UDP flows (a reply seen, and traffic still flowing after 2 s, as Linux
    // assures a UDP stream)
    let s = 1_000_000_000u64;
    for p in [7u16, 8] {
        forward(&mut sf, &Builder::new().udp(C, S, p, 53, b""), s);
        forward(&mut sf, &Builder::new().udp(S, C, 53, p, b""), s + 1);
        forward(&mut sf, &Builder::new().udp(C, S, p, 53, b""), 4 * s);
    }
    // a flood of new flows: the oldest unassured ones are evicted
    for p in 100..200u16 {
        forward(&mut sf, &Builder::new().udp(C, S, p, 53, b""), 5 * s);
    }
    assert!(sf.ct().len() <= 4);
    assert!(sf.ct().stats().evicted >= 96);
    // the assured flows still work in both directions
    for p in [7u16, 8] {
        let (d, st) = forward(&mut sf, &Builder::new().udp(S, C, 53, p, b""), 6 * s);
        assert!(d.is_accept());
        assert_eq!(st, 2);
    }
}

#[test]
fn ipv6_connection_is_tracked_both_ways() {
    use std::net::Ipv6Addr;
    let c: Ipv6Addr = "2001:db8:100::5".parse().unwrap();
    let s: Ipv6Addr = "2001:db8:0:1::11".parse().unwrap();
    let mut sf = stateful(FIREWALL, Mode::Compiled);
    let seg6 = |fc: bool, fl: u8, seq: u32, ack: u32, d: &[u8]| {
        let (a, b, sp, dp) = if fc {
            (c, s, 5432, 80)
        } else {
            (s, c, 80, 5432)
        };
        Builder::new().tcp(a, b, &Tcp::new(sp, dp, fl).seq(seq).ack(ack), d)
    };
    let t = 1_000_000_000;
    let mut states = Vec::new();
    for (i, f) in [
        seg6(true, tf::SYN, 100, 0, &[]),
        seg6(false, tf::SYN | tf::ACK, 500, 101, &[]),
        seg6(true, tf::ACK, 101, 501, &[]),
        seg6(true, tf::PSH | tf::ACK, 101, 501, &[7; 100]),
        seg6(false, tf::PSH | tf::ACK, 501, 201, &[]),
    ]
    .iter()
    .enumerate()
    {
        let (d, st) = forward(&mut sf, f, t + i as u64 * 1_000_000);
        states.push((d.is_accept(), st));
    }
    assert_eq!(
        states,
        vec![(true, 8), (true, 2), (true, 2), (true, 2), (true, 2)]
    );
}

#[test]
fn syn_flood_is_bounded_and_established_connections_survive() {
    let (rs, _) = weir_lang::load_str(
        "t",
        "table ip f { chain fwd { type filter hook forward priority 0; policy drop;
            ct state established,related accept
            ct state new tcp flags syn tcp dport 80 accept } }",
    )
    .unwrap();
    let cfg = Config {
        max_entries: 1000,
        ..Config::default()
    };
    let mut sf = Stateful::new(Engine::new(Compiled::build(&rs, Mode::Compiled)), cfg);
    let t = 1_000_000_000u64;
    // 50 established connections (handshake done: assured)
    for p in 0..50u16 {
        let c = Ipv4Addr::new(198, 18, 1, p as u8);
        let syn = Builder::new().tcp(c, S, &Tcp::new(1000 + p, 80, tf::SYN).seq(1), &[]);
        let sa = Builder::new().tcp(
            S,
            c,
            &Tcp::new(80, 1000 + p, tf::SYN | tf::ACK).seq(9).ack(2),
            &[],
        );
        let ack = Builder::new().tcp(c, S, &Tcp::new(1000 + p, 80, tf::ACK).seq(2).ack(10), &[]);
        for f in [syn, sa, ack] {
            assert!(forward(&mut sf, &f, t).0.is_accept());
        }
    }
    // 20,000 SYNs of distinct connections
    for k in 0..20_000u32 {
        let src = Ipv4Addr::from(u32::from_be_bytes([198, 18, 100, 0]) + k / 1000);
        let f = Builder::new().tcp(
            src,
            S,
            &Tcp::new(2000 + (k % 1000) as u16, 80, tf::SYN),
            &[],
        );
        assert!(
            forward(&mut sf, &f, t + 1 + k as u64).0.is_accept(),
            "SYN {k}"
        );
        assert!(sf.ct().len() <= 1000);
    }
    assert!(sf.ct().stats().evicted >= 19_000, "{:?}", sf.ct().stats());
    // every established connection still passes, as established, both ways
    for p in 0..50u16 {
        let c = Ipv4Addr::new(198, 18, 1, p as u8);
        let f = Builder::new().tcp(c, S, &Tcp::new(1000 + p, 80, tf::ACK).seq(2).ack(10), &[]);
        let (d, st) = forward(&mut sf, &f, t + 100_000);
        assert!(d.is_accept());
        assert_eq!(st, 2);
        let f = Builder::new().tcp(S, c, &Tcp::new(80, 1000 + p, tf::ACK).seq(10).ack(2), &[]);
        assert_eq!(forward(&mut sf, &f, t + 100_001).1, 2);
    }
}

#[test]
fn stateless_nat_writes_headers_and_later_rules_see_them() {
    let rules = "table ip raw {
        chain pre { type filter hook prerouting priority raw; policy accept;
            ip daddr 198.19.0.2 tcp dport 8080 ip daddr set 198.18.1.16 tcp dport set 80 notrack
            ip daddr 198.18.1.16 tcp dport 80 meta mark set 7
        }
        chain fwd { type filter hook forward priority 0; policy drop;
            ip daddr 198.18.1.16 tcp dport 80 meta mark 7 ct state untracked counter accept
        }
    }";
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = stateful(rules, mode);
        let mut f = Builder::new().tcp(
            C,
            Ipv4Addr::new(198, 19, 0, 2),
            &Tcp::new(40000, 8080, tf::SYN).seq(5),
            &[],
        );
        let mut pm = PacketMeta::parse(&f, LinkType::Ethernet);
        let mut pc = PacketCt::default();
        let mut mark = 0;
        for hook in [Hook::Prerouting, Hook::Forward] {
            let mut meta = Meta::with_ifnames("wan0", "");
            meta.mark = mark;
            let d = sf.hook_mut(hook, &mut f, &mut pm, &mut meta, 1, &mut pc);
            assert!(d.is_accept(), "{mode:?} {hook:?}");
            mark = meta.mark;
        }
        assert_eq!(mark, 7, "the rule after the write saw the new header");
        assert_eq!(&f[30..34], &[198, 18, 1, 16]);
        assert_eq!(u16::from_be_bytes([f[36], f[37]]), 80);
        assert!(pm.ipv4_checksum_ok(&f));
        // the TCP checksum still verifies over the new pseudo-header and port
        let l4 = pm.l4_off as usize;
        let end = pm.l3_end();
        let sum = weir_wire::checksum::checksum_with(
            weir_wire::checksum::pseudo_v4(
                f[26..30].try_into().unwrap(),
                f[30..34].try_into().unwrap(),
                6,
                (end - l4) as u16,
            ),
            &f[l4..end],
        );
        assert_eq!(sum, 0);
        assert_eq!(sf.stats().header_writes, 2);
        assert_eq!(sf.ct().len(), 0, "notrack");
    }
}

/// Hot reload: connections tracked before the reload stay established (a ruleset that only
/// lets established traffic through keeps them working), named counters and packet-path set
/// elements carry over by name, rule counters start again.
#[test]
fn reload_keeps_connections_counters_and_set_elements() {
    const BEFORE: &str = "table inet f {
        counter seen { }
        set talkers { type ipv4_addr; flags dynamic; }
        chain fwd { type filter hook forward priority 0; policy drop;
            counter name seen
            add @talkers { ip saddr }
            ct state established,related accept
            ct state new tcp dport 80 accept
        }
    }";
    const AFTER: &str = "table inet f {
        counter seen { }
        set talkers { type ipv4_addr; flags dynamic; }
        chain fwd { type filter hook forward priority 0; policy drop;
            counter name seen
            ct state established,related accept
        }
    }";
    let mut sf = stateful(BEFORE, Mode::Compiled);
    let t = 1_000_000_000;
    assert!(forward(&mut sf, &seg(true, tf::SYN, 100, 0, &[]), t)
        .0
        .is_accept());
    assert!(forward(
        &mut sf,
        &seg(false, tf::SYN | tf::ACK, 500, 101, &[]),
        t + 1
    )
    .0
    .is_accept());
    let (rs, _) = weir_lang::load_str("after.nft", AFTER).unwrap();
    sf.reload(Engine::new(Compiled::build(&rs, Mode::Compiled)));
    assert_eq!(sf.ct().len(), 1, "the connection is still tracked");
    // the handshake's last ACK and data: established, accepted by the new ruleset
    let (d, st) = forward(&mut sf, &seg(true, tf::ACK, 101, 501, &[]), t + 2);
    assert!(d.is_accept() && st == 2, "{d:?} {st}");
    let (d, _) = forward(
        &mut sf,
        &seg(true, tf::ACK | tf::PSH, 101, 501, b"GET /"),
        t + 3,
    );
    assert!(d.is_accept());
    // a new connection is not accepted any more
    let other = Builder::new().tcp(C, S, &Tcp::new(40001, 80, tf::SYN).seq(7), &[]);
    assert!(!forward(&mut sf, &other, t + 4).0.is_accept());
    // the named counter kept its two packets and counted three more; the set kept C and S
    // (both handshake packets added their source)
    assert_eq!(sf.engine().st.named_counters[0][0].0, 5);
    let elems = sf
        .engine()
        .st
        .dynset(0, 0)
        .expect("set elements carried over");
    assert_eq!(elems.len_at(t + 5), 2);
}

/// A port written by a statement shows through the selectors the packet carries only: after
/// `udp dport set 53`, a UDP datagram still has no `tcp dport`, so `tcp dport != { 25, 80 }`
/// does not match it (kernel campaign seed 23, ruleset 477: weir set the mark, the kernel
/// did not).
#[test]
fn a_written_udp_port_is_not_a_tcp_port() {
    let rules =
        "table inet f { chain pre { type filter hook prerouting priority -150; policy accept;
  udp dport 1000-1010 udp dport set 53
  tcp dport != { 25, 80 } meta mark set 0x3
  th dport 53 ct mark set 0x7 } }";
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = stateful(rules, mode);
        let mut f = Builder::new().udp(C, S, 5000, 1009, b"q");
        let mut pm = PacketMeta::parse(&f, LinkType::Ethernet);
        let mut meta = Meta::with_ifnames("lan0", "");
        let mut pc = PacketCt::default();
        let d = sf.hook_mut(Hook::Prerouting, &mut f, &mut pm, &mut meta, 1, &mut pc);
        assert!(d.is_accept());
        assert_eq!(meta.mark, 0, "tcp dport matched a UDP datagram ({mode:?})");
        assert_eq!(pm.dport, 53, "the write was made");
        assert_eq!(
            sf.engine().st.rule_hits.iter().filter(|h| h.0 > 0).count(),
            2,
            "{mode:?}"
        );
    }
}
