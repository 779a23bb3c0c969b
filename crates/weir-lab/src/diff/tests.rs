//! Tests of the comparison: statuses, explanations by the known differences, local delivery,
//! NAT keys, the ruleset rewrites and the descriptions.

use super::observed::{frame_nat_key, nat_key, one_side_kept};
use super::*;
use crate::gen;
use crate::kernel::{Captured, Injection, LocalCopy, Observed};
use crate::model::{prepare, EngineMode, Fate, Model, Prepared, Variant};
use crate::topology::Router;
use std::net::Ipv4Addr;
use weir_lang::ir;
use weir_wire::build::{self, Builder};
use weir_wire::pcap::Packet;
use weir_wire::LinkType;

#[test]
fn every_known_difference_is_documented() {
    for k in KNOWN {
        assert!(
            KNOWN_DIFFERENCES_MD.contains(&format!("## {}", k.id)),
            "KNOWN_DIFFERENCES.md has no section '## {}'",
            k.id
        );
    }
}

fn setup(rules: &str) -> (ir::Ruleset, Router) {
    let w = gen::world();
    let (rs, _) = weir_lang::load_str("t.nft", rules).unwrap();
    (rs, w.router)
}

fn prep(router: &Router, frame: Vec<u8>, iif: usize) -> Prepared {
    let pk = Packet {
        ts_nanos: 0,
        orig_len: frame.len() as u32,
        data: frame,
        link: LinkType::Ethernet,
    };
    prepare(router, &[pk], &[iif]).remove(0)
}

/// What the kernel shows of a packet it forwards as `model` predicts weir forwards it.
fn kernel_forwards(p: &Prepared, model: &mut Model) -> Observed {
    match model.predict(p, Variant::WEIR, EngineMode::Compiled).fate {
        Fate::Forwarded { oif, frame } => Observed {
            frames: vec![Captured {
                iface: oif,
                ts_ns: 0,
                frame,
            }],
            barrier: true,
            ..Observed::default()
        },
        f => panic!("not forwarded: {f:?}"),
    }
}

const LAN: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 16);
const FAR: Ipv4Addr = Ipv4Addr::new(198, 19, 7, 7);

#[test]
fn same_different_and_explained() {
    let (rs, router) = setup(
        r#"table inet f {
             chain prerouting { type filter hook prerouting priority 0; policy accept;
               oifname != "weirlan0" udp dport 99 drop }
             chain postrouting { type filter hook postrouting priority 100; policy accept;
               udp dport 98 drop } }"#,
    );
    let mut model = Model::new(&rs, router.clone());
    let mk = |dport| prep(&router, build::udp4(LAN, FAR, 1000, dport, b"x"), 0);
    // weir's own forwarded frame, as the kernel would show it
    let fwd = kernel_forwards;
    let a = mk(97);
    let b = mk(98);
    let c = mk(99);
    let oa = fwd(&a, &mut model);
    // b (dropped by weir): the window holds a's frame, which is not a copy of b (a's
    // payload differs too: a frame differing from b in its ports only could be b after
    // NAT)
    let mut ob = oa.clone();
    if let Some(x) = ob.frames[0].frame.last_mut() {
        *x ^= 0xff;
    }
    // c: weir forwards, the kernel drops (iifname is "" there): explained
    let oc = Observed {
        barrier: true,
        ..Observed::default()
    };
    let mut changed = oa.clone();
    changed.frames[0].frame[14 + 8] = 12; // another TTL
    let inj = Injection {
        observed: vec![oa, ob, oc, changed],
        ..Injection::default()
    };
    let mut d = mk(97);
    d.index = 3;
    let mut b2 = b.clone();
    b2.index = 1;
    let mut c2 = c.clone();
    c2.index = 2;
    let rep = compare_all(&rs, None, &router, &[a, b2, c2, d], &inj);
    assert_eq!(
        rep.packets[0].status,
        Status::Same,
        "{}",
        rep.packets[0].text()
    );
    // b's kernel frame is a's: a different packet, so not a forwarded copy of b
    assert_eq!(
        rep.packets[1].status,
        Status::Same,
        "{}",
        rep.packets[1].text()
    );
    assert!(rep.packets[1].kernel.contains("answered"));
    // the kernel compares oifname at prerouting with the empty name; so does weir
    assert_eq!(
        rep.packets[2].status,
        Status::Same,
        "{}",
        rep.packets[2].text()
    );
    assert_eq!(rep.packets[3].status, Status::Different);
    assert!(
        rep.packets[3].details.iter().any(|d| d.contains("ttl")),
        "{:?}",
        rep.packets[3].details
    );
    assert_eq!((rep.differences(), rep.explained(), rep.same()), (1, 0, 3));
    let j = rep.packets[3].to_json();
    assert_eq!(j["status"], "different");
}

/// Found by the campaign (seed 20261201, ruleset 234): weir passes the first fragment of a
/// datagram that never completes, and its `add @dyn4` then drops a later packet of the
/// same source that the kernel (which held the fragments) forwards. Only a model that ran
/// the fragments with the kernel's reassembly explains it.
#[test]
fn a_fragment_the_kernel_held_changes_a_later_packet() {
    let text = r#"table inet f {
          set dyn4 { type ipv4_addr; flags dynamic, timeout; timeout 60s; }
          chain forward { type filter hook forward priority 10; policy accept;
            ct state established,related accept
            ip saddr @dyn4 counter drop
            meta l4proto udp add @dyn4 { ip saddr } } }"#;
    let (rs, router) = setup(text);
    const WAN: usize = 2;
    let b = Builder::new()
        .macs([2, 0, 0, 0, 2, 1], router.ifaces[WAN].mac)
        .ttl(63)
        .ip_id(12435);
    let first = b
        .clone()
        .fragment(0, true)
        .udp(FAR, LAN, 40107, 22, &[7; 64]);
    let later = b.fragment(9, true).ip(FAR, LAN, 17, &[8; 24]);
    let echo = build::icmp4_echo(FAR, LAN, 43246, 0, b"ping");
    let mut ps: Vec<Prepared> = [first, later, echo]
        .into_iter()
        .map(|f| prep(&router, f, WAN))
        .collect();
    for (i, p) in ps.iter_mut().enumerate() {
        p.index = i;
    }
    // the kernel's forwarded echo, as a model of the ruleset without the set would show it
    let (plain, _) = setup(
        "table inet f { chain forward { type filter hook forward priority 10; policy accept; } }",
    );
    let forwarded = kernel_forwards(&ps[2], &mut Model::new(&plain, router.clone()));
    let held = Observed {
        barrier: true,
        ..Observed::default()
    };
    let inj = Injection {
        observed: vec![held.clone(), held, forwarded],
        ..Injection::default()
    };
    let rep = compare_all(&rs, Some(text), &router, &ps, &inj);
    for p in &rep.packets {
        assert_eq!(
            p.status,
            Status::Explained("fragment-reassembly".into()),
            "{}",
            p.text()
        );
    }
    assert!(
        rep.packets[2].weir.contains("@dyn4"),
        "{}",
        rep.packets[2].text()
    );
}

#[test]
fn local_delivery_is_matched_on_raw_copies() {
    let (rs, router) =
        setup("table inet f { chain input { type filter hook input priority 0; policy accept; } }");
    let me = Ipv4Addr::new(198, 18, 0, 1);
    let f = build::udp4(LAN, me, 1000, 53, b"q");
    let p = prep(&router, f.clone(), 0);
    let ob = Observed {
        local: vec![LocalCopy {
            v6: false,
            proto: 17,
            src: None,
            data: f[14..].to_vec(),
            ts_ns: 0,
        }],
        ..Observed::default()
    };
    let kv = kernel_view(&p, &ob);
    assert!(kv.local);
    let inj = Injection {
        observed: vec![ob],
        ..Injection::default()
    };
    assert_eq!(
        compare_all(&rs, None, &router, std::slice::from_ref(&p), &inj).packets[0].status,
        Status::Same
    );
    let inj = Injection {
        observed: vec![Observed::default()],
        ..Injection::default()
    };
    let rep = compare_all(&rs, None, &router, &[p], &inj);
    assert_eq!(rep.packets[0].status, Status::Different);
    assert!(rep.packets[0].details[0].contains("locally"));
}

/// A short ICMP header whose checksum an address rewrite changed is still the packet,
/// translated (seed 8, ruleset 200: an ICMPv6 echo of 4 bytes, `ip6 saddr set`).
#[test]
fn a_short_icmp_header_translated_is_the_packet() {
    let key = |b: &[u8]| nat_key(true, 58, None, b);
    assert_eq!(key(&[0x80, 0, 0x12, 0x34]), key(&[0x80, 0, 0x12, 0x83]));
    assert_ne!(key(&[0x80, 0, 0x12, 0x34]), key(&[0x81, 0, 0x12, 0x34]));
    assert_ne!(key(&[0x80, 0, 0x12, 0x34]), key(&[0x80, 0, 0x12]));
}

/// A later fragment whose address a rule rewrote is still the packet (seed 11, ruleset
/// 309: `ip saddr set` in postrouting, no connection tracking).
#[test]
fn a_later_fragment_translated_is_the_packet() {
    use std::net::Ipv4Addr;
    let frag = |src: Ipv4Addr, fill: u8| {
        weir_wire::build::Builder::new()
            .ip_id(7)
            .fragment(9, true)
            .ip(src, Ipv4Addr::new(198, 19, 66, 5), 17, &[fill; 24])
    };
    let (a, b) = (Ipv4Addr::new(198, 18, 0, 32), Ipv4Addr::new(198, 19, 0, 2));
    let key = |f: &[u8]| frame_nat_key(f, LinkType::Ethernet);
    assert!(key(&frag(a, 1)).is_some());
    assert_eq!(key(&frag(a, 1)), key(&frag(b, 1)));
    assert_ne!(key(&frag(a, 1)), key(&frag(b, 2)));
    assert!(one_side_kept(&frag(a, 1), &frag(b, 1)));
}

#[test]
fn merged_flags_rewrite() {
    let r = rewrite_merged_flags("\t\ttcp window 64240 tcp flags ack accept\n\t\ttcp flags syn tcp window 5 drop\n\t\ttcp flags ack meta mark 1 tcp window 5").unwrap();
    assert_eq!(r, "\t\ttcp window 64240 tcp flags == ack accept\n\t\ttcp flags == syn tcp window 5 drop\n\t\ttcp flags ack meta mark 1 tcp window 5");
    assert_eq!(rewrite_merged_flags("tcp flags ack accept"), None);
    assert!(weir_lang::load_str(
        "r",
        &format!("table inet t {{ chain c {{ type filter hook forward priority 0;\n{r}\n}} }}")
    )
    .is_ok());
}

#[test]
fn xt_hotdrop_rewrite() {
    let text = "table ip filter {\n\tchain FORWARD {\n\t\ttype filter hook forward priority filter; policy accept;\n\t\tip saddr 198.18.0.0/24 meta l4proto icmp icmp type != 8 counter accept comment \"iptables line 5\"\n\t\ticmp type 3 counter comment \"x\"\n\t}\n}\n";
    let r = rewrite_xt_hotdrop(text).unwrap();
    assert!(r.contains("\t\tip saddr 198.18.0.0/24 meta l4proto icmp ip hdrlength 5 ip length < 28 drop\n\t\tip saddr 198.18.0.0/24 meta l4proto icmp icmp type != 8"), "{r}");
    assert!(!r.contains("\t\tip hdrlength"), "only imported rules: {r}");
    assert!(weir_lang::load_str("r", &r).is_ok(), "{r}");
    let six =
        "\t\tmeta l4proto ipv6-icmp icmpv6 type 128 counter accept comment \"iptables line 3\"";
    assert_eq!(
        rewrite_xt_hotdrop(six).unwrap(),
        format!("\t\tmeta l4proto ipv6-icmp ip6 nexthdr ipv6-icmp ip6 length < 8 drop\n{six}")
    );
    assert_eq!(rewrite_xt_hotdrop("tcp dport 22 accept"), None);
    // `--icmp-type any`: no type match in the import; the drop follows the protocol
    let any = "\t\tip daddr != 198.19.7.7 meta l4proto icmp ip daddr 198.18.0.80-198.18.0.93 counter accept comment \"iptables line 6\"";
    assert_eq!(
        rewrite_xt_hotdrop(any).unwrap(),
        format!("\t\tip daddr != 198.19.7.7 meta l4proto icmp ip hdrlength 5 ip length < 28 drop\n{any}")
    );
    // `reject with icmp type` is a statement, not a match
    let rej = "\t\tmeta l4proto tcp counter reject with icmp type host-prohibited comment \"iptables line 8\"";
    assert_eq!(rewrite_xt_hotdrop(rej), None);
}

#[test]
fn descriptions() {
    let f = build::tcp4(LAN, FAR, 40000, 80, 0x12, b"");
    assert_eq!(
        describe_frame(&f),
        "IPv4 tcp 198.18.0.16:40000 > 198.19.7.7:80 [SA] ttl 64 len 40"
    );
    let mut g = f.clone();
    g[0] = 9;
    assert!(field_diffs(&f, &g)[0].starts_with("ether daddr"));
    assert!(field_diffs(&f, &f).is_empty());
}
