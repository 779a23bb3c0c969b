//! The compiled classifier against the linear reference: random rulesets (non-terminal rules,
//! marks set and re-checked, jumps, gotos, returns, named sets, intervals, concatenations,
//! verdict maps, negations, IPv4 and IPv6) and random packets must give the same decision, the
//! same final mark and the same per-rule counters.
//!
//! `WEIR_PROPTEST_CASES` sets the number of rulesets (default 96).

use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};
use weir_engine::{Compiled, Decision, Engine, Meta, Mode, Pkt};
use weir_lang::ir::Hook;
use weir_wire::{build, LinkType, PacketMeta};

fn v4(i: u8, j: u8) -> String {
    format!("198.18.{i}.{j}")
}

fn addr_expr() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u8..4, 0u8..8).prop_map(|(i, j)| v4(i, j)),
        (0u8..4).prop_map(|i| format!("198.18.{i}.0/24")),
        (0u8..4, 0u8..2).prop_map(|(i, j)| format!("198.18.{i}.{}/30", j * 4)),
        Just("198.18.0.0/16".to_string()),
        (0u8..4, 0u8..4, 4u8..8).prop_map(|(i, a, b)| format!("{}-{}", v4(i, a), v4(i, b))),
        proptest::collection::vec((0u8..4, 0u8..8), 1..4).prop_map(|v| format!(
            "{{ {} }}",
            v.iter()
                .map(|(i, j)| v4(*i, *j))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    ]
}

fn port_expr() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![22u16, 53, 80, 443, 1000, 1001]).prop_map(|p| p.to_string()),
        (1000u16..1003, 1u16..3).prop_map(|(a, n)| format!("{a}-{}", a + n)),
        proptest::collection::vec(prop::sample::select(vec![22u16, 53, 80, 443, 1000]), 1..4)
            .prop_map(|v| format!(
                "{{ {} }}",
                v.iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
    ]
}

fn neg() -> impl Strategy<Value = &'static str> {
    prop_oneof![4 => Just(""), 1 => Just("!= ")]
}

fn match_item() -> impl Strategy<Value = String> {
    prop_oneof![
        (neg(), addr_expr()).prop_map(|(n, a)| format!("ip saddr {n}{a}")),
        (neg(), addr_expr()).prop_map(|(n, a)| format!("ip daddr {n}{a}")),
        (
            prop::sample::select(vec!["tcp", "udp", "th"]),
            prop::sample::select(vec!["sport", "dport"]),
            neg(),
            port_expr()
        )
            .prop_map(|(p, f, n, v)| format!("{p} {f} {n}{v}")),
        prop::sample::select(vec!["tcp", "udp", "icmp", "{ tcp, udp }"])
            .prop_map(|p| format!("meta l4proto {p}")),
        (neg(), 0u32..3).prop_map(|(n, m)| format!("meta mark {n}{m}")),
        prop::sample::select(vec![
            "iifname \"lan0\"",
            "iifname \"wan*\"",
            "oifname != \"wan0\""
        ])
        .prop_map(|s| s.to_string()),
        prop::sample::select(vec![
            "tcp flags syn",
            "tcp flags & (syn|ack) == ack",
            "tcp flags != rst"
        ])
        .prop_map(|s| s.to_string()),
        Just("ip saddr @s4".to_string()),
        Just("ip saddr . tcp dport @c4".to_string()),
        Just("ip6 saddr @s6".to_string()),
        Just("ip6 daddr 2001:db8::/33".to_string()),
        Just("icmp type echo-request".to_string()),
        Just("meta nfproto ipv6".to_string()),
    ]
}

fn stmt_item() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("counter".to_string()),
        (0u32..3).prop_map(|m| format!("meta mark set {m}"))
    ]
}

fn verdict(chain: usize) -> BoxedStrategy<String> {
    let mut v: Vec<BoxedStrategy<String>> = vec![
        Just(String::new()).boxed(),
        Just("accept".to_string()).boxed(),
        Just("drop".to_string()).boxed(),
        Just("continue".to_string()).boxed(),
        Just("return".to_string()).boxed(),
        port_expr()
            .prop_filter("single", |p| !p.contains('{'))
            .prop_map(|p| format!("tcp dport vmap {{ {p} : accept, 9 : drop }}"))
            .boxed(),
    ];
    // no loops: chain k only jumps to chains after it
    for t in chain + 1..3 {
        v.push(Just(format!("jump u{t}")).boxed());
        v.push(Just(format!("goto u{t}")).boxed());
    }
    proptest::strategy::Union::new(v).boxed()
}

fn rule(chain: usize) -> impl Strategy<Value = String> {
    (
        proptest::collection::vec(match_item(), 0..4),
        proptest::option::of(stmt_item()),
        proptest::collection::vec(match_item(), 0..2),
        verdict(chain),
    )
        .prop_map(|(m1, s, m2, v)| {
            let mut parts = m1;
            if let Some(s) = s {
                parts.push(s);
                parts.extend(m2);
            }
            // nft refuses an IPv4 field after `meta nfproto ipv6` ("conflicting protocols
            // specified: ip6 vs. ip"), and so does weir
            if parts.iter().any(|p| p.starts_with("ip ")) {
                parts.retain(|p| p != "meta nfproto ipv6");
            }
            // nor a TCP or UDP header after a set of protocols ("conflicting protocols
            // specified: udp vs. tcp")
            let header = |p: &str| p.contains("tcp ") || p.contains("udp ");
            if parts.iter().any(|p| header(p)) || header(&v) {
                parts.retain(|p| p != "meta l4proto { tcp, udp }");
            }
            if !v.is_empty() {
                parts.push(v);
            }
            if parts.is_empty() {
                parts.push("counter".into());
            }
            parts.join(" ")
        })
}

fn ruleset() -> impl Strategy<Value = String> {
    (
        proptest::collection::vec(rule(0), 0..14),
        proptest::collection::vec(rule(1), 0..6),
        proptest::collection::vec(rule(2), 0..6),
        prop::sample::select(vec!["accept", "drop"]),
        proptest::collection::vec((0u8..4, 0u8..4), 1..5),
        proptest::collection::vec((0u8..4, 0u8..8, prop::sample::select(vec![22u16, 80, 443])), 1..5),
    )
        .prop_map(|(r0, r1, r2, pol, s4, c4)| {
            let s4: Vec<String> = s4.iter().map(|(i, j)| format!("198.18.{i}.{}/30", j * 4)).collect();
            let c4: Vec<String> = c4.iter().map(|(i, j, p)| format!("{} . {p}", v4(*i, *j))).collect();
            let body = |rs: &[String]| rs.iter().map(|r| format!("    {r}\n")).collect::<String>();
            format!(
                "table inet f {{\n\
                 set s4 {{ type ipv4_addr; flags interval; elements = {{ {} }} }}\n\
                 set c4 {{ type ipv4_addr . inet_service; elements = {{ {} }} }}\n\
                 set s6 {{ type ipv6_addr; flags interval; elements = {{ 2001:db8::/48, 2001:db8:1::1 }} }}\n\
                 chain fwd {{ type filter hook forward priority 0; policy {pol};\n{}  }}\n\
                 chain u1 {{\n{}  }}\n\
                 chain u2 {{\n{}  }}\n\
                 }}\n",
                s4.join(", "),
                c4.join(", "),
                body(&r0),
                body(&r1),
                body(&r2),
            )
        })
}

#[derive(Clone, Debug)]
struct P {
    v6: bool,
    src: (u8, u8),
    dst: (u8, u8),
    proto: u8,
    sport: u16,
    dport: u16,
    flags: u8,
    mark: u32,
    iif: &'static str,
}

fn packet() -> impl Strategy<Value = P> {
    (
        prop::bool::weighted(0.2),
        (0u8..4, 0u8..8),
        (0u8..4, 0u8..8),
        prop::sample::select(vec![6u8, 17, 1]),
        prop::sample::select(vec![22u16, 53, 80, 443, 1000, 1001, 1002, 1003, 9]),
        prop::sample::select(vec![22u16, 53, 80, 443, 1000, 1001, 1002, 1003, 9]),
        prop::sample::select(vec![0x02u8, 0x12, 0x10, 0x04, 0x11]),
        0u32..3,
        prop::sample::select(vec!["lan0", "wan0", "wan1"]),
    )
        .prop_map(|(v6, src, dst, proto, sport, dport, flags, mark, iif)| P {
            v6,
            src,
            dst,
            proto,
            sport,
            dport,
            flags,
            mark,
            iif,
        })
}

fn frame(p: &P) -> Vec<u8> {
    if p.v6 {
        let a = |x: (u8, u8)| Ipv6Addr::new(0x2001, 0xdb8, x.0 as u16, 0, 0, 0, 0, x.1 as u16);
        match p.proto {
            6 => build::tcp6(a(p.src), a(p.dst), p.sport, p.dport, p.flags, &[]),
            17 => build::udp6(a(p.src), a(p.dst), p.sport, p.dport, &[]),
            _ => build::icmp6_echo(a(p.src), a(p.dst), 1, 1, &[]),
        }
    } else {
        let a = |x: (u8, u8)| Ipv4Addr::new(198, 18, x.0, x.1);
        match p.proto {
            6 => build::tcp4(a(p.src), a(p.dst), p.sport, p.dport, p.flags, &[]),
            17 => build::udp4(a(p.src), a(p.dst), p.sport, p.dport, &[]),
            _ => build::icmp4_echo(a(p.src), a(p.dst), 1, 1, &[]),
        }
    }
}

/// A packet through both engines: (decision, final mark) of each.
fn both(c: &mut Engine, l: &mut Engine, p: &P) -> ((Decision, u32), (Decision, u32)) {
    let f = frame(p);
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    let mut meta = Meta::with_ifnames(p.iif, "wan0");
    meta.mark = p.mark;
    let run = |e: &mut Engine| {
        let mut k = Pkt {
            frame: &f,
            pm: &pm,
            meta: &mut { meta },
            now_ns: 0,
            conns: None,
        };
        let d = e.process(Hook::Forward, &mut k);
        (d, k.meta.mark)
    };
    (run(c), run(l))
}

fn cases() -> u32 {
    std::env::var("WEIR_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(96)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn compiled_equals_linear(text in ruleset(), pkts in proptest::collection::vec(packet(), 1..60)) {
        let (rs, _) = match weir_lang::load_str("gen.nft", &text) {
            Ok(x) => x,
            Err((sm, d)) => panic!("generated ruleset does not check:\n{}\n{}", text, weir_lang::diag::render_all(&d, &sm)),
        };
        let mut c = Engine::new(Compiled::build(&rs, Mode::Compiled));
        let mut l = Engine::new(Compiled::build(&rs, Mode::Linear));
        for p in &pkts {
            let ((dc, mc), (dl, ml)) = both(&mut c, &mut l, p);
            prop_assert_eq!(dc, dl, "packet {:?}\nruleset:\n{}", p, text);
            prop_assert_eq!(mc, ml, "mark differs for {:?}\n{}", p, text);
        }
        prop_assert_eq!(&c.st.rule_hits, &l.st.rule_hits, "counters differ\n{}", text);
    }
}

/// One incremental change.
#[derive(Clone, Debug)]
enum Op {
    RemoveRule(usize),
    InsertRule(usize, String),
    AddElement(u8, u8),
    RemoveElement(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..20).prop_map(Op::RemoveRule),
        (0usize..20, rule(0)).prop_map(|(i, r)| Op::InsertRule(i, r)),
        (0u8..4, 0u8..2).prop_map(|(i, j)| Op::AddElement(i, j)),
        (0usize..6).prop_map(Op::RemoveElement),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases() / 2, ..ProptestConfig::default() })]

    /// Rules and set elements added and removed in place give the same decisions as a linear
    /// engine built from scratch from the edited ruleset.
    #[test]
    fn incremental_updates_equal_rebuild(text in ruleset(), ops in proptest::collection::vec(op(), 1..12), pkts in proptest::collection::vec(packet(), 1..40)) {
        let (mut rs, _) = weir_lang::load_str("gen.nft", &text).unwrap();
        let mut c = Engine::new(Compiled::build(&rs, Mode::Compiled));
        // the chain "fwd" is chain 0 of table 0; set "s4" is set 0
        for op in &ops {
            match op {
                Op::RemoveRule(i) => {
                    let rules = &mut rs.tables[0].chains[0].rules;
                    if rules.is_empty() { continue; }
                    let idx = i % rules.len();
                    rules.remove(idx);
                    // the compiled form knows it by the handle it has now
                    let h = c.rs.tables[0].chains[0].rules().nth(idx).unwrap().handle;
                    prop_assert!(c.rs.remove_rule(0, 0, h));
                }
                Op::InsertRule(i, r) => {
                    // the same declarations (sets and chains keep their indices), fwd holding only the new rule
                    let (a, b) = (text.find("chain fwd {").unwrap(), text.find("chain u1 {").unwrap());
                    let snippet = format!("{}chain fwd {{\n    {r}\n  }}\n{}", &text[..a], &text[b..]);
                    let (srs, _) = weir_lang::load_str("snippet.nft", &snippet).unwrap();
                    let new_rule = srs.tables[0].chains[0].rules[0].clone();
                    let rules = &mut rs.tables[0].chains[0].rules;
                    let pos = i % (rules.len() + 1);
                    let at = if pos == 0 {
                        weir_engine::compile::At::First
                    } else {
                        let prev = c.rs.tables[0].chains[0].rules().nth(pos - 1).unwrap().handle;
                        weir_engine::compile::At::After(prev)
                    };
                    c.rs.insert_rule(0, 0, at, &new_rule).unwrap();
                    rules.insert(pos, new_rule);
                }
                Op::AddElement(i, j) => {
                    let lo = (198u128 << 24) | (18 << 16) | ((*i as u128) << 8) | (*j as u128 * 8);
                    let e = weir_lang::ir::Element { key: vec![(lo, lo + 7)], data: None, timeout_ms: None };
                    let set = &mut rs.tables[0].sets[0];
                    if set.elements.iter().any(|x| x.key == e.key) { continue; }
                    c.rs.add_element(0, 0, e.clone());
                    set.elements.push(e);
                }
                Op::RemoveElement(i) => {
                    let set = &mut rs.tables[0].sets[0];
                    if set.elements.is_empty() { continue; }
                    let e = set.elements.remove(i % set.elements.len());
                    prop_assert!(c.rs.remove_element(0, 0, &e.key));
                }
            }
        }
        c.sync_state();
        let mut l = Engine::new(Compiled::build(&rs, Mode::Linear));
        for p in &pkts {
            let ((dc, mc), (dl, ml)) = both(&mut c, &mut l, p);
            prop_assert_eq!(dc.is_accept(), dl.is_accept(), "packet {:?}\nops {:?}\nruleset:\n{}", p, ops, text);
            prop_assert_eq!(mc, ml);
        }
    }
}
