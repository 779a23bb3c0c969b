//! Tests of the checker: a good ruleset, and the errors of bad ones.

use crate::ir::{Expr, MapValue, ObjKind, ObjRef, ObjTarget, SetRef};
use crate::load_str;

fn errors(s: &str) -> Vec<String> {
    match load_str("t.nft", s) {
        Ok(_) => vec![],
        Err((_, d)) => d.into_iter().map(|d| d.message).collect(),
    }
}

#[test]
fn good_ruleset_checks() {
    let r = load_str(
        "t.nft",
        "table inet f {\n set blk { type ipv4_addr; flags interval; elements = { 198.18.0.0/16, 198.19.1.1 } }\n map svc { type inet_service : verdict; elements = { 22 : jump ssh, 80 : accept } }\n counter hits { }\n flowtable ft { hook ingress priority 0; devices = { veth0, veth1 }; }\n chain fwd { type filter hook forward priority filter; policy drop;\n  ip saddr @blk counter name hits drop\n  ct state established,related flow add @ft accept\n  tcp dport vmap @svc\n  meta l4proto udp udp dport 53 limit rate 10/second accept\n }\n chain ssh { ip saddr 198.18.0.0/15 accept; return }\n chain pre { type nat hook prerouting priority dstnat; dnat ip to jhash ip saddr mod 2 map { 0 : 198.18.1.1, 1 : 198.18.1.2 } }\n chain post { type nat hook postrouting priority srcnat; oifname \"wan*\" masquerade }\n}\n",
    );
    let (rs, _) = r
        .map_err(|(sm, d)| crate::diag::render_all(&d, &sm))
        .unwrap();
    assert_eq!(rs.summary().rules, 8);
    assert!(rs.uses_state());
}

#[test]
fn family_and_hook_errors() {
    assert!(
        errors("table ip6 t { chain c { ip saddr 1.2.3.4 accept } }")[0]
            .contains("can never match")
    );
    assert!(
        errors("table ip t { chain c { type nat hook forward priority 0; } }")[0]
            .contains("nat chain cannot hook forward")
    );
    assert!(
        errors("table netdev t { chain c { type filter hook forward priority 0; } }")[0]
            .contains("does not exist")
    );
    assert!(
        errors("table netdev t { chain c { type filter hook ingress priority 0; } }")[0]
            .contains("needs a device")
    );
    assert!(errors(
        "table ip t { chain c { type filter hook forward priority 0; dnat to 1.2.3.4 } }"
    )[0]
    .contains("only allowed in nat chains"));
}

#[test]
fn type_errors() {
    assert!(errors("table ip t { chain c { tcp dport 70000 accept } }")[0].contains("too large"));
    assert!(
        errors("table ip t { set s { type ipv4_addr; elements = { 1.2.3.0/24 } } }")[0]
            .contains("range or prefix")
    );
    assert!(
        errors("table ip t { set s { type ipv4_addr; elements = { 22 } } }")[0]
            .contains("not an IPv4")
    );
    assert!(
        errors("table ip t { set s { type inet_service; } chain c { ip saddr @s accept } }")[0]
            .contains("holds inet_service")
    );
    assert!(errors("table ip t { chain c { ip saddr @nope accept } }")[0].contains("no set"));
    assert!(errors(
        "table ip t { map m { type ipv4_addr : verdict; elements = { 1.2.3.4 : 5.6.7.8 } } }"
    )[0]
    .contains("holds verdicts"));
    assert!(errors("table ip t { chain c { ip frob 1 } }")[0].contains("unknown selector"));
}

#[test]
fn jump_errors() {
    assert!(
        errors("table ip t { chain a { jump b } chain b { jump a } }")[0]
            .contains("jump loop: a -> b -> a")
    );
    assert!(errors("table ip t { chain a { jump nope } }")[0].contains("no chain"));
    assert!(errors(
        "table ip t { chain b { type filter hook input priority 0; } chain a { jump b } }"
    )[0]
    .contains("base chain"));
    assert!(errors("table ip t { chain a { accept counter } }")[0].contains("follow a verdict"));
    let mut deep =
        String::from("table ip t { chain base { type filter hook input priority 0; jump c0 }\n");
    for i in 0..20 {
        deep.push_str(&format!("chain c{i} {{ jump c{} }}\n", i + 1));
    }
    deep.push_str("chain c20 { accept } }\n");
    assert!(errors(&deep)[0].contains("deep"));
}

/// A netdev table with a filter chain at ingress on eth0 holding `rules`.
fn netdev(rules: &str) -> String {
    format!(
        "table netdev t {{\n chain in {{ type filter hook ingress device \"eth0\" priority 0;\n{rules}\n }}\n}}\n"
    )
}

fn rules_of(s: &str) -> Vec<crate::ir::Rule> {
    let (rs, _) = load_str("t.nft", s)
        .map_err(|(sm, d)| crate::diag::render_all(&d, &sm))
        .unwrap();
    rs.tables[0].chains[0].rules.clone()
}

#[test]
fn fwd_is_checked_and_lowered_in_netdev() {
    use crate::ir::{Expr, Fwd, ValueExpr};
    use weir_wire::field::ifname_value;
    let r = rules_of(&netdev(
        "fwd to \"eth0\"\n\
         fwd to eth1\n\
         ip saddr 198.18.0.1 fwd to \"wan0\"\n\
         fwd ip to 192.168.2.200 device \"eth0\"\n\
         fwd ip6 to 2001:db8::1 device eth0\n\
         fwd to meta mark map { 0x00000001 : \"eth0\", 0x00000002 : \"eth1\" }\n\
         counter fwd to meta iif\n\
         fwd ip to ip saddr map { 198.18.0.1 : 192.168.2.1 } device \"eth0\" comment \"out\"",
    ));
    assert_eq!(r.len(), 8);
    let dev = |n: &str| ValueExpr::Const(vec![ifname_value(n)]);
    assert_eq!(
        r[0].exprs,
        vec![Expr::Fwd(Fwd {
            dev: dev("eth0"),
            neigh: None
        })]
    );
    assert_eq!(
        r[1].exprs,
        vec![Expr::Fwd(Fwd {
            dev: dev("eth1"),
            neigh: None
        })]
    );
    assert!(matches!(r[2].exprs[..], [Expr::Match(_), Expr::Fwd(_)]));
    assert_eq!(
        r[3].exprs,
        vec![Expr::Fwd(Fwd {
            dev: dev("eth0"),
            neigh: Some((4, ValueExpr::Const(vec![0xc0a8_02c8])))
        })]
    );
    assert_eq!(
        r[4].exprs,
        vec![Expr::Fwd(Fwd {
            dev: dev("eth0"),
            neigh: Some((
                6,
                ValueExpr::Const(vec![u128::from(
                    "2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap()
                )])
            ))
        })]
    );
    let Expr::Fwd(Fwd {
        dev: ValueExpr::Map { .. },
        neigh: None,
    }) = &r[5].exprs[0]
    else {
        panic!("{:?}", r[5].exprs)
    };
    // the device of the input interface's index is the input interface
    let Expr::Fwd(Fwd {
        dev: ValueExpr::Key(k),
        ..
    }) = &r[6].exprs[1]
    else {
        panic!("{:?}", r[6].exprs)
    };
    assert_eq!(
        k[0].src,
        crate::ir::Source::Field(weir_wire::Field::MetaIifname)
    );
    assert_eq!(r[7].comment.as_deref(), Some("out"));
    // a regular chain of a netdev table may forward too (nft accepts it)
    assert!(errors("table netdev t { chain c { fwd to \"eth0\" } }").is_empty());
}

#[test]
fn fwd_is_refused_outside_netdev() {
    for fam in ["ip", "ip6", "inet"] {
        for stmt in ["fwd to \"eth0\"", "fwd ip to 192.168.2.200 device \"eth0\""] {
            let e = errors(&format!(
                "table {fam} t {{ chain c {{ type filter hook prerouting priority 0; {stmt} }} }}"
            ));
            assert_eq!(e.len(), 1, "{fam}: {e:?}");
            assert_eq!(
                e[0],
                format!(
                    "'fwd' is only allowed in the netdev family (ingress and egress chains), \
                     not in the {fam} family"
                )
            );
        }
    }
    // a regular chain of an inet table is refused as well
    assert!(errors("table inet t { chain c { fwd to \"eth0\" } }")[0].contains("'fwd'"));
}

#[test]
fn fwd_errors() {
    let e = |r: &str| errors(&netdev(r));
    // nft: "Statement after terminal statement has no effect"
    assert!(e("fwd to \"eth0\" counter")[0].contains("nothing can follow 'fwd'"));
    assert!(e("fwd to \"eth0\" accept")[0].contains("nothing can follow 'fwd'"));
    assert!(e("fwd to \"eth0\" ip saddr 1.2.3.4")[0].contains("nothing can follow 'fwd'"));
    assert!(e("fwd ip to 1.2.3.4 device \"eth0\" drop")[0].contains("nothing can follow 'fwd'"));
    assert!(e("fwd to \"eth*\"")[0].contains("one device"));
    assert!(e("fwd to { \"eth0\" }")[0].contains("one device"));
    assert!(e("fwd to meta iifname")[0].contains("does not give a device"));
    assert!(e("fwd ip to 2001:db8::1 device \"eth0\"")[0].contains("not an IPv4"));
    assert!(e("fwd ip6 to 1.2.3.4 device \"eth0\"")[0].contains("not an IPv6"));
    assert!(e("fwd ip to 192.168.2.0/24 device \"eth0\"")[0].contains("one next hop"));
    assert!(e("fwd ip to 1.2.3.4-1.2.3.5 device \"eth0\"")[0].contains("one next hop"));
    assert!(e("fwd to \"verylonginterfacename0\"")[0].contains("longer than 15"));
    // syntax: nft's own test (fwd.t) spells it `fwd to` or `fwd ip|ip6 to ... device ...`
    assert!(e("fwd \"eth0\"")[0].contains("expected 'to', 'ip' or 'ip6'"));
    assert!(e("fwd to")[0].contains("expected a device"));
    assert!(e("fwd ip to 1.2.3.4")[0].contains("expected 'device'"));
    let named = "table netdev t { map m { type mark : ifname; elements = { 1 : \"eth0\" } }\n\
                 chain in { type filter hook ingress device \"eth0\" priority 0; fwd to meta mark map @m } }";
    assert!(errors(named)[0].contains("inline map"));
}

#[test]
fn ether_addresses_can_be_set() {
    use crate::ir::{Expr, ValueExpr};
    use weir_wire::Field;
    let r = rules_of(&netdev(
        "ether saddr set 02:00:00:00:00:09\n\
         ether daddr set jhash ip saddr mod 3 map { 0 : 02:00:00:00:00:01, 1 : 02:00:00:00:00:02, 2 : 02:00:00:00:00:03 }\n\
         ether daddr set 02:00:00:00:00:02 ether daddr 02:00:00:00:00:02 counter\n\
         ether saddr set ether daddr\n\
         ip saddr 198.18.0.1 ether daddr set ip saddr map { 198.18.0.1 : 0:1:2:3:4:5 } fwd to \"wan0\"",
    ));
    assert_eq!(
        r[0].exprs,
        vec![Expr::Assign {
            field: Field::EtherSaddr,
            value: ValueExpr::Const(vec![0x0200_0000_0009])
        }]
    );
    assert!(matches!(
        &r[1].exprs[..],
        [Expr::Assign {
            field: Field::EtherDaddr,
            value: ValueExpr::Map { .. }
        }]
    ));
    assert_eq!(r.len(), 5);
    // the same in the other families (nft accepts it there too)
    for fam in ["ip", "ip6", "inet"] {
        let s = format!("table {fam} t {{ chain c {{ type filter hook prerouting priority 0; ether saddr set 02:00:00:00:00:09 }} }}");
        assert!(errors(&s).is_empty(), "{fam}");
    }
    let e = |r: &str| errors(&netdev(r));
    // refused by nft too: a set, a mark, a hash's 32 bits into 48, a range
    assert!(!e("ether daddr set { 01:00:5e:00:01:01, 01:00:5e:00:02:02 }").is_empty());
    assert!(e("ether saddr set meta mark")[0].contains("is needed"));
    assert!(e("ether saddr set jhash ip saddr mod 3")[0].contains("32-bit"));
    assert!(e("ether saddr set 02:00:00:00:00:09-02:00:00:00:00:0a")[0].contains("one value"));
    assert!(errors("table ip t { chain c { ip saddr set 1.2.3.0/24 } }")[0].contains("one value"));
    assert!(e("ether saddr set 0x020000000009")[0].contains("Ethernet address"));
    assert!(
        errors("table ip6 t { chain c { ip6 saddr set numgen inc mod 3 } }")[0].contains("32-bit")
    );
}

/// The text weir keeps of each rule (what its listings print) parses again into the same rule.
#[test]
fn fwd_and_ether_set_rule_text_round_trips() {
    let body = "fwd to \"eth0\"\n\
         fwd to eth1\n\
         ip saddr 198.18.0.1 fwd to \"wan0\"\n\
         fwd ip to 192.168.2.200 device \"eth0\"\n\
         fwd ip6 to 2001:db8::1 device eth0\n\
         fwd to meta mark map { 0x00000001 : \"eth0\", 0x00000002 : \"eth1\" }\n\
         counter fwd to meta iif\n\
         ether saddr set 02:00:00:00:00:09\n\
         ether daddr set jhash ip saddr mod 3 map { 0 : 02:00:00:00:00:01, 1 : 02:00:00:00:00:02, 2 : 02:00:00:00:00:03 }\n\
         ether daddr set 02:00:00:00:00:02 ether daddr 02:00:00:00:00:02 counter\n\
         ether daddr set ip saddr map { 198.18.0.1 : 02:00:00:00:00:01 } fwd to \"wan0\" comment \"dsr\"";
    let first = rules_of(&netdev(body));
    assert_eq!(first[0].text, "fwd to \"eth0\"");
    assert_eq!(first[7].text, "ether saddr set 02:00:00:00:00:09");
    let again = rules_of(&netdev(
        &first
            .iter()
            .map(|r| r.text.clone())
            .collect::<Vec<_>>()
            .join("\n"),
    ));
    assert_eq!(first.len(), again.len());
    for (a, b) in first.iter().zip(&again) {
        assert_eq!(a.text, b.text);
        assert_eq!(a.exprs, b.exprs, "{}", a.text);
        assert_eq!(a.comment, b.comment);
    }
}

/// What `nft list ruleset` printed for these rules (nft 1.0.6, after `nft -f` of the same rules
/// as written in `fwd_and_ether_set_rule_text_round_trips`) loads into the same rules.
#[test]
fn nft_listing_of_fwd_and_ether_set_loads_the_same() {
    let written = rules_of(&netdev(
        "fwd to \"eth0\"\n\
         fwd to eth1\n\
         ip saddr 198.18.0.1 fwd to \"wan0\"\n\
         fwd ip to 192.168.2.200 device \"eth0\"\n\
         fwd ip6 to 2001:db8::1 device eth0\n\
         fwd to meta mark map { 0x00000001 : \"eth0\", 0x00000002 : \"eth1\" }\n\
         counter fwd to meta iif\n\
         ether saddr set 02:00:00:00:00:09\n\
         ip saddr 198.18.0.1 ether daddr set ip saddr map { 198.18.0.1 : 0:1:2:3:4:5 } fwd to \"wan0\"",
    ));
    let listed = rules_of(
        "table netdev t {\n\
         \tchain in {\n\
         \t\ttype filter hook ingress device \"eth0\" priority filter; policy accept;\n\
         \t\tfwd to \"eth0\"\n\
         \t\tfwd to \"eth1\"\n\
         \t\tip saddr 198.18.0.1 fwd to \"wan0\"\n\
         \t\tfwd ip to 192.168.2.200 device \"eth0\"\n\
         \t\tfwd ip6 to 2001:db8::1 device \"eth0\"\n\
         \t\tfwd to meta mark map { 0x00000001 : \"eth0\", 0x00000002 : \"eth1\" }\n\
         \t\tcounter packets 0 bytes 0 fwd to iif\n\
         \t\tether saddr set 02:00:00:00:00:09\n\
         \t\tip saddr 198.18.0.1 ether daddr set ip saddr map { 198.18.0.1 : 00:01:02:03:04:05 } fwd to \"wan0\"\n\
         \t}\n\
         }\n",
    );
    assert_eq!(written.len(), listed.len());
    for (a, b) in written.iter().zip(&listed) {
        assert_eq!(a.exprs, b.exprs, "{} / {}", a.text, b.text);
    }
}

/// The compiled expressions of the one rule of a `table ip t { chain c { ... } }`.
fn rule_exprs(rule: &str) -> Vec<crate::ir::Expr> {
    let text = format!("table ip t {{ chain c {{ type filter hook input priority 0; {rule} }} }}");
    let (rs, _) = load_str("t.nft", &text)
        .map_err(|(sm, d)| crate::diag::render_all(&d, &sm))
        .unwrap();
    rs.tables[0].chains[0].rules[0].exprs.clone()
}

/// nft's words for the bit operators (`and`, `or`, `xor`, `lshift`, `rshift`) are the
/// operators, and constants on either side of one are folded (nftables' tests any/meta.t,
/// any/ct.t).
#[test]
fn operator_words_and_constant_folding() {
    assert_eq!(
        rule_exprs("ct mark and 0x23 == 0x11"),
        rule_exprs("ct mark & 0x23 == 0x11")
    );
    assert_eq!(
        rule_exprs("ct mark xor 0x3 != 0x1"),
        rule_exprs("ct mark ^ 0x3 != 0x1")
    );
    assert_eq!(
        rule_exprs("meta mark set 0xffffffc8 xor 0x16"),
        rule_exprs("meta mark set 0xffffffde")
    );
    assert_eq!(
        rule_exprs("meta mark set 0x32 or 0xfffff"),
        rule_exprs("meta mark set 0xfffff")
    );
    assert_eq!(
        rule_exprs("ct mark set 0x00000001 or ct mark"),
        rule_exprs("ct mark set ct mark | 0x1")
    );
    assert_eq!(
        rule_exprs("meta mark set meta mark or 0x4000"),
        rule_exprs("meta mark set meta mark | 0x4000")
    );
    assert!(
        errors("table ip t { chain c { meta mark set 0x1 and foo } }")[0].contains("two integers")
    );
    assert!(
        errors("table ip t { chain c { meta mark set 0x1 lshift meta mark } }")[0]
            .contains("selector on its left")
    );
}

/// A named verdict map's jumps count from the chains that use it, not from the table's
/// first chain: `a` (first) is jumped to by `svc`, which the map reaches from `base`; no
/// loop, as nft agrees. A map used by a chain it leads back to is still a loop.
#[test]
fn named_verdict_map_jumps_count_from_their_users() {
    let ok = "table ip t {\n chain a { meta mark set 0x4000 }\n map svcs { type inet_service : verdict; elements = { 80 : jump svc } }\n chain svc { jump a }\n chain base { type filter hook input priority 0; tcp dport vmap @svcs }\n}\n";
    assert_eq!(errors(ok), Vec::<String>::new());
    let looped = "table ip t {\n chain a { tcp dport vmap @svcs }\n map svcs { type inet_service : verdict; elements = { 80 : jump svc } }\n chain svc { jump a }\n chain base { type filter hook input priority 0; jump a }\n}\n";
    let e = errors(looped);
    assert!(e.iter().any(|m| m.contains("jump loop")), "{e:?}");
}

/// `jump { ... }` (an anonymous chain, as nftlb writes for tcp-strict) is a chain of the
/// table named `__chainN`, as nft names it: the same ruleset as with that chain written out.
/// Outside a table block (`add rule ... jump { ... }`) its chain is added to the rule's table.
#[test]
fn anonymous_chains() {
    let anon = "table ip t {\n chain c {\n  type filter hook input priority 0\n  ct state invalid jump {\n   limit rate 10/second log prefix \"strict \"\n   drop\n  }\n  tcp dport 22 goto { accept }\n }\n}\n";
    let named = "table ip t {\n chain c {\n  type filter hook input priority 0\n  ct state invalid jump __chain0\n  tcp dport 22 goto __chain1\n }\n chain __chain0 {\n  limit rate 10/second log prefix \"strict \"\n  drop\n }\n chain __chain1 { accept }\n}\n";
    let load = |s: &str| {
        load_str("t.nft", s)
            .map_err(|(sm, d)| crate::diag::render_all(&d, &sm))
            .unwrap()
            .0
    };
    let (a, n) = (load(anon), load(named));
    let shape = |rs: &crate::ir::Ruleset| -> Vec<(String, Vec<Vec<crate::ir::Expr>>)> {
        let mut v: Vec<_> = rs.tables[0]
            .chains
            .iter()
            .map(|c| {
                (
                    // (anonymous chains are numbered per process)
                    if c.name.starts_with("__chain") {
                        "__chain".to_string()
                    } else {
                        c.name.clone()
                    },
                    c.rules.iter().map(|r| r.exprs.clone()).collect(),
                )
            })
            .collect();
        v.sort_by(|x, y| format!("{x:?}").cmp(&format!("{y:?}")));
        v
    };
    assert_eq!(shape(&a), shape(&n));
    let lone = load("add table ip t\nadd chain ip t c\nadd rule ip t c jump { drop }\n");
    let chains = &lone.tables[0].chains;
    assert_eq!(chains.len(), 2, "{chains:?}");
    assert!(chains[1].name.starts_with("__chain") && chains[1].rules.len() == 1);
}

/// `dnat ip to KEY map { K : ADDR . PORT, ... }` with more than one element (nftlb's
/// dnat farms): each element's address and port; a wrong element still names itself.
#[test]
fn dnat_map_to_address_and_port() {
    let ok = "table ip t { chain c { type nat hook prerouting priority dstnat; ip protocol tcp dnat ip to ct mark map { 0x80000001 : 192.168.0.10 . 10, 0x80000002 : 192.168.0.11 . 20 } } }";
    assert_eq!(errors(ok), Vec::<String>::new());
    let bad = "table ip t { chain c { type nat hook prerouting priority dstnat; ip protocol tcp dnat ip to ct mark map { 0x80000001 : 192.168.0.10 . 10, 0x80000002 : 192.168.0.11 . http2x } } }";
    let e = errors(bad);
    assert_eq!(e.len(), 1, "{e:?}");
}

/// `ct helper` objects and `ct helper set` load (nftlb's ftp, sip and tftp farms): the
/// helpers weir runs (ftp over tcp, tftp over udp, sip) lower to `Expr::CtHelper`; others
/// (irc, h323...) are constructs not evaluated yet: listed, and refused by run and replay; a
/// helper the table does not declare, or one without its protocol, is an error.
#[test]
fn ct_helpers_load_as_not_evaluated() {
    let text = "table ip t {\n ct helper ftp-tcp {\n  type \"ftp\" protocol tcp\n  l3proto ip\n }\n chain c {\n  type filter hook prerouting priority 0\n  ip protocol tcp ct helper set \"ftp-tcp\"\n }\n}\n";
    let (rs, _) = load_str("t.nft", text)
        .map_err(|(sm, d)| crate::diag::render_all(&d, &sm))
        .unwrap();
    assert!(rs.unevaluated().is_empty(), "{:?}", rs.unevaluated());
    let helper = &rs.tables[0].chains[0].rules[0].exprs;
    assert!(
        helper.iter().any(
            |e| matches!(e, crate::ir::Expr::CtHelper { helper, l4proto: 6 } if helper == "ftp")
        ),
        "{helper:?}"
    );
    let irc = text.replace("\"ftp\"", "\"irc\"");
    let (rs, _) = load_str("t.nft", &irc).unwrap();
    let u = rs.unevaluated();
    assert_eq!(u.len(), 1, "{u:?}");
    assert!(
        u[0].starts_with("t.nft:8:") && u[0].contains("ct helper set"),
        "{u:?}"
    );
    assert!(rs.refuse_unevaluated().is_err());
    let e = errors(&text.replace("set \"ftp-tcp\"", "set \"sip-udp\""));
    assert!(
        e.iter().any(|m| m.contains("no ct helper 'sip-udp'")),
        "{e:?}"
    );
    let e = errors(&text.replace("type \"ftp\" protocol tcp", "type \"ftp\""));
    assert!(e.iter().any(|m| m.contains("needs type")), "{e:?}");
    // a ruleset without such constructs runs
    let (rs, _) = load_str("t.nft", "table ip t { chain c { accept } }").unwrap();
    assert!(rs.refuse_unevaluated().is_ok());
}

/// Headers and metadata keys the engine does not read yet (socket owner, a time of day across
/// midnight, a TCP option's write, tunnels) load with their types checked, and each rule
/// reading one is listed as not evaluated; bad values are refused as nft refuses them. TCP
/// options, SCTP chunks, IPv6 extension headers, the IPsec headers and the wall clock are
/// evaluated now.
#[test]
fn fields_not_evaluated_yet_load_typed_and_listed() {
    let evaluated = [
        "tcp option maxseg size 1360 tcp option sack-perm exists accept",
        "sctp chunk data tsn 5 sctp chunk init exists drop",
        "ip6 nexthdr tcp hbh nexthdr 6 exthdr frag missing accept",
        "ah spi 7 esp sequence 1 comp cpi 2 drop",
        "tcp option @2,16,16 1460 tcp option mptcp subtype 1 accept",
        "meta hour \"17:00\"-\"19:00\" meta day { Monday, \"Friday\" } drop",
        "meta time < \"2022-07-01 11:00:00\" meta priority 1:abcd drop",
        "meta skuid root meta skgid 0 meta cpu 1 meta iifgroup default accept",
        "udp dport 4789 vxlan ip saddr 198.18.0.1 vxlan vni 10 drop",
        "gre ip saddr . gre ip daddr { 1.2.3.4 . 4.3.2.1 } gre version 0 accept",
        "udp dport 6081 geneve vlan id 10 geneve meta l4proto udp accept",
        "tcp option maxseg size set 1400",
        "tcp flags syn tcp option maxseg size set rt mtu",
        "meta hour \"21:00\"-\"02:00\" drop",
        "meta cgroup 1048577 drop",
        "ct zone set meta mark map { 1 : 1, 2 : 2 } ct original zone set 3 ct reply zone set 4",
    ];
    let body: String = evaluated.iter().map(|r| format!("  {r}\n")).collect();
    let text = format!("table inet t {{\n chain c {{\n{body} }}\n}}\n");
    let (rs, _) = load_str("t.nft", &text)
        .map_err(|(sm, d)| crate::diag::render_all(&d, &sm))
        .unwrap();
    assert!(rs.unevaluated().is_empty(), "{:?}", rs.unevaluated());
    let rules = [
        "meta hour { \"21:00\"-\"02:00\", \"04:00\" } drop",
        "meta iifkind \"veth\" accept",
        "meta secmark set 1",
        "tcp option @2,3,5 1 accept",
    ];
    let body: String = rules.iter().map(|r| format!("  {r}\n")).collect();
    let text = format!("table inet t {{\n chain c {{\n{body} }}\n}}\n");
    let (rs, _) = load_str("t.nft", &text)
        .map_err(|(sm, d)| crate::diag::render_all(&d, &sm))
        .unwrap();
    let u = rs.unevaluated();
    for (i, what) in [
        "meta hour across midnight",
        "meta iifkind",
        "meta secmark",
        "tcp option",
    ]
    .iter()
    .enumerate()
    {
        let at = format!("t.nft:{}:", i + 3);
        assert!(
            u.iter()
                .any(|e| e.starts_with(&at) && e.contains(&format!("{what} is not evaluated"))),
            "{at} {what}: {u:?}"
        );
    }
    assert!(rs.refuse_unevaluated().is_err());
    // an interface index by name is resolved as nft resolves it (lo is 1 in every namespace)
    let (rs, _) = load_str("t.nft", "table ip t { chain c { iif \"lo\" accept } }").unwrap();
    assert!(rs.refuse_unevaluated().is_ok());
    for (rule, want) in [
        ("meta day 7", "not a day"),
        ("meta day \"Satturday\"", "not a day"),
        ("meta hour \"25:00\"", "not a time of day"),
        ("meta time \"meh\"", "not a date"),
        ("tcp option 256 exists", "out of range"),
        ("tcp option eol left 1", "no field 'left'"),
        ("sctp chunk data seqno 1", "no field 'seqno'"),
        ("vxlan vni 10", "udp dport 4789"),
        ("gre ether saddr 62:87:4d:d6:19:05", "carries IP"),
        ("udp dport 4789 vxlan ip saddr set 1.2.3.4", "cannot be set"),
        ("srh flags 256", "too large"),
        ("iif \"weirnosuch0\"", "does not exist"),
    ] {
        let e = errors(&format!("table inet t {{ chain c {{ {rule} }} }}"));
        assert!(e.iter().any(|m| m.contains(want)), "{rule}: {e:?}");
    }
}

/// `synproxy`: its settings, or its object's, evaluated; only at the input and forward hooks
/// of filter chains; a name that is no synproxy object refused; a map picking one per packet
/// lowered to the statements it chooses among.
#[test]
fn synproxy_statements_and_objects() {
    use crate::ir::{Expr, Synproxy as S};
    let text = "table inet t {\n synproxy o { mss 1400\n  wscale 5\n  sack-perm\n }\n chain c {\n  type filter hook forward priority 0\n  synproxy\n  synproxy mss 1460 wscale 7 timestamp sack-perm\n  synproxy name \"o\"\n  synproxy name tcp dport map { 80 : \"o\" }\n }\n}\n";
    let (rs, _) = load_str("t.nft", text)
        .map_err(|(sm, d)| crate::diag::render_all(&d, &sm))
        .unwrap();
    let got: Vec<Option<S>> = rs.tables[0].chains[0]
        .rules
        .iter()
        .map(|r| {
            r.exprs.iter().find_map(|e| match e {
                Expr::Synproxy(s) => Some(*s),
                _ => None,
            })
        })
        .collect();
    let all = S::MSS | S::WSCALE | S::TIMESTAMP | S::SACK_PERM;
    assert_eq!(
        got,
        [
            Some(S::default()),
            Some(S {
                mss: 1460,
                wscale: 7,
                flags: all
            }),
            Some(S {
                mss: 1400,
                wscale: 5,
                flags: S::MSS | S::WSCALE | S::SACK_PERM
            }),
            None
        ]
    );
    // the map picks the object per packet: its statement among the table's synproxies
    assert!(rs.unevaluated().is_empty(), "{:?}", rs.unevaluated());
    let chosen = rs.tables[0].chains[0].rules[3]
        .exprs
        .iter()
        .find_map(|e| match e {
            Expr::ObjStmt { stmts, .. } => Some(stmts.clone()),
            _ => None,
        });
    assert_eq!(
        chosen,
        Some(vec![Expr::Synproxy(S {
            mss: 1400,
            wscale: 5,
            flags: S::MSS | S::WSCALE | S::SACK_PERM
        })])
    );
    for (chain, want) in [
        (
            "type filter hook prerouting priority 0; synproxy",
            "input and forward",
        ),
        ("type nat hook input priority 0; synproxy", "filter chains"),
        (
            "type filter hook input priority 0; synproxy name \"nope\"",
            "no synproxy 'nope'",
        ),
        (
            "type filter hook input priority 0; synproxy name tcp dport map { 80 : \"nope\" }",
            "no synproxy 'nope'",
        ),
    ] {
        let e = errors(&format!("table ip t {{ chain c {{ {chain}; }} }}"));
        assert!(e.iter().any(|m| m.contains(want)), "{chain}: {e:?}");
    }
    let e = errors(
        "table netdev t { chain c { type filter hook ingress device lo priority 0; synproxy; } }",
    );
    assert!(!e.is_empty());
}

/// Statements and expressions weir does not evaluate yet load with their operands checked
/// and are listed: `meta secmark set`; `ct id`, `ct zone set`, a map updated with a value (nftlb's
/// persistence), `tproxy`, `fib` are evaluated and `ct event set` is nothing to do (no event
/// stream); what nft refuses is refused.
#[test]
fn statements_not_evaluated_yet_load_checked_and_listed() {
    let text = "table ip t {\n map persist { type ipv4_addr : mark; flags dynamic; }\n chain c {\n  type filter hook prerouting priority 0\n  ct event set new\n  meta l4proto tcp tproxy to 198.18.0.1:3128\n  ct id 5\n  meta secmark set 1\n  fib daddr type local drop\n  @th,16,16 22 drop\n  update @persist { ip saddr : ct mark }\n }\n}\n";
    let (rs, _) = load_str("t.nft", text)
        .map_err(|(sm, d)| crate::diag::render_all(&d, &sm))
        .unwrap();
    let u = rs.unevaluated();
    assert!(
        u.iter()
            .any(|e| e.starts_with("t.nft:8:") && e.contains("meta secmark is not evaluated")),
        "{u:?}"
    );
    // `update @persist { ip saddr : ct mark }` (line 11) is evaluated
    assert!(!u.iter().any(|e| e.starts_with("t.nft:11:")), "{u:?}");
    assert!(!u.iter().any(|e| e.starts_with("t.nft:6:")), "{u:?}");
    assert!(!u.iter().any(|e| e.starts_with("t.nft:5:")), "{u:?}");
    // `ct id 5` (line 7) is evaluated
    assert!(!u.iter().any(|e| e.starts_with("t.nft:7:")), "{u:?}");
    assert_eq!(u.len(), 1, "{u:?}");
    // raw payload and fib are evaluated
    assert!(!u.iter().any(|e| e.contains("t.nft:10:")), "{u:?}");
    assert!(!u.iter().any(|e| e.contains("t.nft:9:")), "{u:?}");
    for (rule, want) in [
        ("queue num 65536", "too large"),
        ("queue to symhash mod 2 offset 65536", "0-65535"),
        ("queue flags fanout to symhash mod 65536", "fanout"),
        ("tproxy to 198.18.0.1", "transport protocol first"),
        ("meta l4proto tcp tproxy ip6 to :80", "ip6 in an ip table"),
        ("fib saddr . daddr oif 1", "one address"),
        ("fib daddr . oif type local", "nft_fib_validate"),
        (
            "fib saddr . oif oifname \"eth0\"",
            "gives the output device",
        ),
        ("@th,16,129 1", "1 to 128 bits"),
        ("update @persist { ip saddr }", "give the value"),
        ("update @persist { ip saddr : ip daddr }", "mark"),
        (
            "meta nfproto ipv6 ct original ip saddr 1.2.3.4",
            "nfproto ipv6",
        ),
        ("icmp type 2 icmp mtu 5", "icmp type 3"),
    ] {
        let e = errors(&text.replace("  ct event set new\n", &format!("  {rule}\n")));
        assert!(e.iter().any(|m| m.contains(want)), "{rule}: {e:?}");
    }
    // the hooks nft_fib_validate allows
    for (hook, rule, ok) in [
        ("prerouting", "fib daddr oif 2", true),
        ("input", "fib daddr oif 2", true),
        ("forward", "fib daddr oif missing", true),
        ("output", "fib daddr oif missing", false),
        ("input", "fib saddr . iif oif 2", true),
        ("output", "fib saddr . iif oif 2", false),
        ("output", "fib daddr type local", true),
        ("output", "fib daddr . oif type local", true),
        ("input", "fib daddr . oif type local", false),
        ("postrouting", "fib daddr . iif type local", false),
        ("ingress", "fib saddr . iif oif missing", true),
        ("ingress", "fib daddr . oif type local", false),
    ] {
        // netdev's ingress is hook 0, prerouting's number
        let t = if hook == "ingress" {
            format!(
                "table netdev t {{ chain c {{ type filter hook ingress device \"lo\" priority 0; {rule} }} }}"
            )
        } else {
            format!("table ip t {{ chain c {{ type filter hook {hook} priority 0; {rule} }} }}")
        };
        let e = errors(&t);
        assert_eq!(e.is_empty(), ok, "{hook}: {rule}: {e:?}");
        if !ok {
            assert!(e.iter().any(|m| m.contains("nft_fib_validate")), "{e:?}");
        }
    }
}

/// `queue` with a number or a range is evaluated (weir's per-flow processing takes the
/// packet): its queues and flags, in both syntaxes; one computed by an expression is not yet.
#[test]
fn queue_numbers_and_flags_lower() {
    for (stmt, want) in [
        ("queue", (0, 0, false, false)),
        ("queue num 7", (7, 7, false, false)),
        ("queue num 2-3 bypass fanout", (2, 3, true, true)),
        ("queue flags bypass to 65535", (65535, 65535, true, false)),
        ("queue flags bypass,fanout to 4 - 9", (4, 9, true, true)),
    ] {
        let text =
            format!("table ip t {{ chain c {{ type filter hook forward priority 0; {stmt} }} }}");
        let (rs, _) = load_str("t.nft", &text)
            .map_err(|(sm, d)| crate::diag::render_all(&d, &sm))
            .unwrap();
        let q = rs.tables[0].chains[0].rules[0]
            .exprs
            .iter()
            .find_map(|e| match e {
                crate::ir::Expr::Queue(q) => Some(*q),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{stmt}: not a queue"));
        assert_eq!((q.first, q.last, q.bypass, q.fanout), want, "{stmt}");
        assert!(rs.unevaluated().is_empty(), "{stmt}");
    }
}

/// Header writes of fields in place (`ip ecn set 1`, `ip id set 0`, `tcp flags set syn`) are
/// evaluated (weir_engine::nat's writer); one weir does not make yet (`sctp vtag set`) loads
/// as not evaluated, its value typed.
#[test]
fn header_writes_not_made_yet_are_listed() {
    let (rs, _) = load_str(
        "t.nft",
        "table inet t { chain c { ip ecn set 1 ip id set 0 tcp flags set syn ip6 flowlabel set 7 ip checksum set 1 ip length set 0 } }",
    )
    .unwrap();
    assert!(rs.unevaluated().is_empty(), "{:?}", rs.unevaluated());
    let (rs, _) = load_str("t.nft", "table ip t { chain c { sctp vtag set 1 } }").unwrap();
    let u = rs.unevaluated();
    assert!(
        u.iter().any(|e| e.contains("sctp vtag is not evaluated")),
        "{u:?}"
    );
    assert!(errors("table ip t { chain c { ip id set 65536 } }")[0].contains("too large"));
}

/// Named limits as OpenWrt's fw4 writes them, and references to objects through maps, are
/// evaluated (lowered to [`Expr::ObjRef`]); a missing object, one of another kind or a bad
/// rate is refused.
#[test]
fn named_objects_lower_to_objrefs() {
    let text = "table inet fw4 {\n limit lim_icmp { rate 10/second burst 5 packets }\n chain c {\n  limit name \"lim_icmp\" accept\n  quota name tcp dport map { 443 : \"q1\", 80 : \"q0\" }\n  counter name ip saddr map @cm\n }\n quota q0 { over 1 kbytes }\n quota q1 { 100 mbytes }\n counter c1 { }\n map cm { type ipv4_addr : counter; elements = { 10.0.0.1 : \"c1\" } }\n}\n";
    let (rs, _) = load_str("t.nft", text)
        .map_err(|(sm, d)| crate::diag::render_all(&d, &sm))
        .unwrap();
    assert!(rs.unevaluated().is_empty(), "{:?}", rs.unevaluated());
    let t = &rs.tables[0];
    assert_eq!(t.limits.len(), 1);
    assert_eq!(t.limits[0].0, "lim_icmp");
    assert_eq!((t.limits[0].1.rate, t.limits[0].1.burst), (10, 5));
    let r = &t.chains[0].rules;
    assert!(matches!(
        &r[0].exprs[0],
        Expr::ObjRef(ObjRef {
            kind: ObjKind::Limit,
            target: ObjTarget::Name(0)
        })
    ));
    let Expr::ObjRef(ObjRef {
        kind: ObjKind::Quota,
        target: ObjTarget::Map {
            map: SetRef::Anon(m),
            ..
        },
    }) = &r[1].exprs[0]
    else {
        panic!("{:?}", r[1].exprs);
    };
    // (q1 is the table's second quota)
    let by_key: Vec<(u128, Option<MapValue>)> = m
        .elements
        .iter()
        .map(|e| (e.key[0].0, e.data.clone()))
        .collect();
    assert!(
        by_key.contains(&(443, Some(MapValue::Value(vec![1])))),
        "{by_key:?}"
    );
    assert!(
        by_key.contains(&(80, Some(MapValue::Value(vec![0])))),
        "{by_key:?}"
    );
    assert!(matches!(
        &r[2].exprs[0],
        Expr::ObjRef(ObjRef {
            kind: ObjKind::Counter,
            target: ObjTarget::Map {
                map: SetRef::Named(0),
                ..
            }
        })
    ));
    let e = errors(&text.replace("limit name \"lim_icmp\"", "limit name \"nosuch\""));
    assert!(e.iter().any(|m| m.contains("no limit 'nosuch'")), "{e:?}");
    let e = errors(&text.replace("limit name \"lim_icmp\"", "limit name \"q1\""));
    assert!(e.iter().any(|m| m.contains("no limit 'q1'")), "{e:?}");
    let e = errors(&text.replace("80 : \"q0\"", "80 : \"q9\""));
    assert!(e.iter().any(|m| m.contains("no quota 'q9'")), "{e:?}");
    let e = errors(&text.replace("10.0.0.1 : \"c1\"", "10.0.0.1 : \"q1\""));
    assert!(e.iter().any(|m| m.contains("no counter 'q1'")), "{e:?}");
    let e = errors(&text.replace(
        "counter name ip saddr map @cm",
        "quota name ip saddr map @cm",
    ));
    assert!(
        e.iter().any(|m| m.contains("gives counter objects")),
        "{e:?}"
    );
    let e = errors(&text.replace("rate 10/second", "rate 10/fortnight"));
    assert!(e.iter().any(|m| m.contains("not a rate")), "{e:?}");
}

/// `log` and `limit` options nft refuses together are refused; log flags as nft writes them
/// load.
#[test]
fn log_and_limit_options_as_nft() {
    for ok in [
        "log flags ip options flags ether flags skuid flags tcp sequence,options",
        "log level debug flags ip options flags skuid",
        "log group 2 snaplen 33",
        "limit rate 1025 bytes/second burst 512 bytes",
        "limit rate 10/second burst 5 packets",
    ] {
        let t = format!("table ip t {{ chain c {{ {ok} }} }}");
        assert!(load_str("t.nft", &t).is_ok(), "{ok}");
    }
    for (bad, want) in [
        ("log level emerg group 2", "no level"),
        ("log flags all group 2", "no level and no flags"),
        ("log level audit prefix \"foo\"", "audit"),
        ("log flags tcp window", "unknown log flags"),
        ("limit rate 1023/second burst 10 bytes", "burst in packets"),
        (
            "limit rate 512 kbytes/second burst 5 packets",
            "burst in bytes",
        ),
        ("limit rate 1 gbytes / second", "not a rate"),
    ] {
        let e = errors(&format!("table ip t {{ chain c {{ {bad} }} }}"));
        assert!(e.iter().any(|m| m.contains(want)), "{bad}: {e:?}");
    }
}

/// OS fingerprint keys, `socket`, `ipsec`, `reset tcp option` and `last` are evaluated; bad
/// ones are refused as nft refuses them (osf only at the hooks nft_osf_validate allows).
#[test]
fn osf_socket_ipsec_and_last_are_evaluated() {
    let text = "table inet t {\n chain c {\n  osf ttl loose name \"Linux\" drop\n  osf version { \"Windows:XP\", \"MacOs:Sierra\" } drop\n  socket transparent 1 socket mark 0x5 accept\n  ipsec in spnum 2 ip saddr 198.18.0.1 accept\n  meta ipsec exists rt ipsec missing\n }\n}\n";
    let (rs, _) = load_str("t.nft", text)
        .map_err(|(sm, d)| crate::diag::render_all(&d, &sm))
        .unwrap();
    let u = rs.unevaluated();
    assert!(u.is_empty(), "{u:?}");
    let osf = rs.tables[0].chains[0].rules[1].exprs.iter().any(|e| {
        matches!(e, crate::ir::Expr::Match(m)
            if matches!(m.key[0].src, crate::ir::Source::Osf { ttl: 0, version: true }))
    });
    assert!(osf, "{:?}", rs.tables[0].chains[0].rules[1].exprs);
    let (rs, _) = load_str(
        "t.nft",
        "table inet t { chain c { reset tcp option mptcp; reset tcp option 2; last used never; last used 300s } }",
    )
    .unwrap();
    assert!(rs.unevaluated().is_empty(), "{:?}", rs.unevaluated());
    for (bad, want) in [
        ("ipsec i reqid 1", "in or out"),
        ("ipsec in spnum 256 reqid 1", "0-255"),
        ("osf ttl fast name \"Linux\"", "loose or skip"),
        (
            "type filter hook output priority 0; osf name \"Linux\"",
            "nft_osf_validate",
        ),
        ("reset tcp option meh", "unknown TCP option"),
        ("reset tcp option 256", "unknown TCP option"),
        ("last used 1fortnight", "time"),
        (
            "type filter hook forward priority 0; socket transparent 1",
            "prerouting, input and output hooks",
        ),
        (
            "type filter hook output priority 0; ipsec in reqid 1",
            "ipsec in is not read at the output hook",
        ),
    ] {
        let e = errors(&format!("table inet t {{ chain c {{ {bad} }} }}"));
        assert!(e.iter().any(|m| m.contains(want)), "{bad}: {e:?}");
    }
}

/// What kube-proxy and fw4 write: names with '/', `@"quoted"` set names, `typeof numgen
/// random mod 2` map keys, quoted protocol names, `mark set mark or 0x4000`, `fib daddr
/// type local` (evaluated: all of it runs).
#[test]
fn kube_proxy_and_fw4_shapes_load() {
    let text = "table ip kube-proxy {\n  map service-ips { type ipv4_addr . inet_proto . inet_service : verdict; elements = { 198.18.0.10 . tcp . 80 : goto \"service-ULMVA6XW-ns1/svc1/tcp/p80\" } }\n  map \"endpoint-map/x\" { typeof numgen random mod 2 : verdict; elements = { 0 : goto \"endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80\", 1 : drop } }\n  chain \"service-ULMVA6XW-ns1/svc1/tcp/p80\" {\n    ip daddr 198.18.0.10 tcp dport 80 ip saddr != 10.0.0.0/8 jump mark-for-masquerade\n    numgen random mod 2 vmap @\"endpoint-map/x\"\n  }\n  chain \"endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80\" {\n    ip saddr 10.180.0.1 jump mark-for-masquerade\n    meta l4proto tcp dnat to 10.180.0.1:80\n  }\n  chain mark-for-masquerade { mark set mark or 0x4000 }\n  chain nat-prerouting { type nat hook prerouting priority -100; ip daddr . meta l4proto . th dport vmap @service-ips }\n  chain filter-input { type filter hook input priority -110; ct state new fib daddr type local ip protocol \"tcp\" accept; meta l4proto \"udp\" accept }\n}\n";
    let (rs, _) = load_str("kp.nft", text)
        .map_err(|(sm, d)| crate::diag::render_all(&d, &sm))
        .unwrap();
    let u = rs.unevaluated();
    assert!(u.is_empty(), "{u:?}");
    assert_eq!(rs.tables[0].chains.len(), 5);
    // a quoted name must end
    assert!(
        !errors("table ip t { set s { type ipv4_addr; } chain c { ip saddr @\"s } }").is_empty()
    );
}

/// NAT and reject that contradict the rule are refused as nft refuses them; NAT ends a rule.
#[test]
fn nat_and_reject_checked_against_the_rule() {
    for (fam, rule, want) in [
        (
            "ip",
            "tcp dport 22 dnat to 198.19.0.1 accept",
            "nothing can follow",
        ),
        ("ip", "redirect to :1234", "transport protocol"),
        ("inet", "dnat to 198.18.0.1", "needs its family"),
        (
            "inet",
            "ip6 daddr 2001:db8::1 dnat to 198.18.0.1",
            "needs its family",
        ),
        ("ip6", "reject with icmp host-unreachable", "IPv6"),
        ("ip", "reject with icmpv6 no-route", "IPv4"),
        (
            "inet",
            "meta nfproto ipv6 reject with icmp host-unreachable",
            "IPv6",
        ),
        ("inet", "meta l4proto udp reject with tcp reset", "TCP"),
        ("ip", "meta iifname \"\"", "empty interface name"),
    ] {
        let hook = if rule.contains("reject") || rule.contains("iifname") {
            "type filter hook input priority 0"
        } else {
            "type nat hook prerouting priority 0"
        };
        let e = errors(&format!("table {fam} t {{ chain c {{ {hook}; {rule} }} }}"));
        assert!(e.iter().any(|m| m.contains(want)), "{fam} {rule}: {e:?}");
    }
    for (fam, rule) in [
        ("inet", "ip saddr 198.18.0.1 snat to 198.19.0.1"),
        ("inet", "tcp dport 80 dnat ip to 198.19.0.1:8080"),
        ("ip", "meta l4proto tcp redirect to :8080"),
    ] {
        let hook = if rule.contains("snat") {
            "postrouting"
        } else {
            "prerouting"
        };
        let t =
            format!("table {fam} t {{ chain c {{ type nat hook {hook} priority 0; {rule} }} }}");
        assert!(load_str("t.nft", &t).is_ok(), "{fam} {rule}");
    }
}

/// inet NAT to an address takes its family from any IPv4 / IPv6 match, as nft does
/// (checked against Debian's nft in a namespace).
#[test]
fn inet_nat_family_from_any_ip_match() {
    for rule in [
        "meta nfproto ipv4 dnat to 198.18.0.1",
        "ip protocol tcp dnat to 198.18.0.1:80",
        "ip version 4 dnat to 198.18.0.1",
    ] {
        let t =
            format!("table inet t {{ chain c {{ type nat hook prerouting priority 0; {rule} }} }}");
        assert!(load_str("t.nft", &t).is_ok(), "{rule}");
    }
}

/// A masked value compared with a parenthesized list of flags loads (the kernel campaign's
/// generator writes it); `!` on a masked value is refused.
#[test]
fn masked_flags_compare_with_lists() {
    let t = "table ip t { chain c { tcp flags & (syn | ack) == (syn | ack) drop } }";
    assert!(load_str("t.nft", t).is_ok());
    assert!(!errors("table ip t { chain c { tcp flags & (fin | syn) ! syn } }").is_empty());
}

/// Values at the edges are refused, never overflow: far dates, shifts past 127 bits.
#[test]
fn edge_values_are_refused() {
    for (rule, want) in [
        ("meta time \"99999999999999-01-01\" drop", "not a date"),
        ("meta mark set meta mark << 200", "at most 127"),
        ("meta mark set meta mark >> 128", "at most 127"),
    ] {
        let e = errors(&format!("table ip t {{ chain c {{ {rule} }} }}"));
        assert!(e.iter().any(|m| m.contains(want)), "{rule}: {e:?}");
    }
}

#[test]
fn dup_lowered_and_refused_as_nft_refuses() {
    use crate::ir::{Dup, ValueExpr};
    use weir_wire::field::ifname_value;
    let rule = |fam: &str, chain: &str, r: &str| {
        format!("table {fam} t {{\n chain c {{\n  type filter hook {chain} priority 0\n  {r}\n }}\n}}\n")
    };
    let first = |text: String| {
        let (rs, _) = load_str("t.nft", &text)
            .map_err(|(sm, d)| crate::diag::render_all(&d, &sm))
            .unwrap();
        assert!(rs.unevaluated().is_empty(), "{:?}", rs.unevaluated());
        rs.tables[0].chains[0].rules[0].exprs.clone()
    };
    let e = first(rule("ip", "input", "dup to 198.18.0.9"));
    assert_eq!(
        e,
        vec![Expr::Dup(Dup {
            addr: Some((4, ValueExpr::Const(vec![0xc612_0009]))),
            dev: None
        })]
    );
    let e = first(rule("ip6", "forward", "dup to 2001:db8::9 device \"eth1\""));
    assert_eq!(
        e,
        vec![Expr::Dup(Dup {
            addr: Some((
                6,
                ValueExpr::Const(vec![0x2001_0db8_0000_0000_0000_0000_0000_0009])
            )),
            dev: Some(ValueExpr::Const(vec![ifname_value("eth1")])),
        })]
    );
    let e = first(rule(
        "ip",
        "prerouting",
        "dup to ip saddr map { 198.18.0.1 : 198.18.0.9 } device \"eth1\"",
    ));
    assert!(
        matches!(
            &e[..],
            [Expr::Dup(Dup {
                addr: Some((4, ValueExpr::Map { .. })),
                dev: Some(_)
            })]
        ),
        "{e:?}"
    );
    let e = first(
        "table netdev t {\n chain c {\n  type filter hook ingress device \"eth0\" priority 0\n  dup to \"eth1\"\n }\n}\n"
            .to_string(),
    );
    assert_eq!(
        e,
        vec![Expr::Dup(Dup {
            addr: None,
            dev: Some(ValueExpr::Const(vec![ifname_value("eth1")])),
        })]
    );
    // nft's refusals: "unsupported family", "cannot specify device", no address
    for (text, want) in [
        (rule("inet", "input", "dup to 198.18.0.9"), "unsupported family"),
        (rule("ip", "input", "dup to \"eth1\""), ""),
        (rule("ip", "input", "dup to 198.18.0.0/24"), "range or prefix"),
        (
            "table netdev t {\n chain c {\n  type filter hook ingress device \"eth0\" priority 0\n  dup to 198.18.0.9 device \"eth1\"\n }\n}\n".to_string(),
            "cannot specify device",
        ),
    ] {
        let e = errors(&text);
        assert!(!e.is_empty() && e.iter().any(|m| m.contains(want)), "{text}: {e:?}");
    }
}
