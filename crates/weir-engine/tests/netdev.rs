//! Statements of the netdev family: `fwd to DEV` / `fwd ip|ip6 to ADDR device DEV`
//! (nft_fwd_netdev, nft_fwd_neigh: the packet leaves by that device and nothing after runs)
//! and `ether saddr|daddr set` (link-layer header writes, as nftlb's DSR mode writes them).
//! Every ruleset here was checked with the real nft (`nft -c -f`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use weir_conntrack::Config;
use weir_engine::stateful::{PacketCt, Stateful};
use weir_engine::{Compiled, Decision, Engine, Fwd, FwdNeigh, Meta, Mode, Pkt};
use weir_lang::ir::Hook;
use weir_wire::build::Builder;
use weir_wire::field::ifname_value;
use weir_wire::{LinkType, PacketMeta};

const LAN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xaa];
const OUR_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xbb];

fn ruleset(rules: &str) -> weir_lang::ir::Ruleset {
    weir_lang::load_str("t.nft", rules)
        .unwrap_or_else(|(sm, d)| panic!("{}", weir_lang::diag::render_all(&d, &sm)))
        .0
}

fn engines(rules: &str) -> Vec<Engine> {
    let rs = ruleset(rules);
    vec![
        Engine::new(Compiled::build(&rs, Mode::Compiled)),
        Engine::new(Compiled::build(&rs, Mode::Linear)),
    ]
}

fn stateful(rules: &str, mode: Mode) -> Stateful {
    Stateful::new(
        Engine::new(Compiled::build(&ruleset(rules), mode)),
        Config::default(),
    )
}

/// The ingress hook of `lan0` for one frame: the decision and the packet's metadata after it.
fn ingress(e: &mut Engine, frame: &[u8], link: LinkType, mark: u32) -> (Decision, Meta) {
    let pm = PacketMeta::parse(frame, link);
    let mut meta = Meta::with_ifnames("lan0", "");
    meta.mark = mark;
    let mut p = Pkt {
        frame,
        pm: &pm,
        meta: &mut meta,
        now_ns: 1,
        conns: None,
    };
    let d = e.process(Hook::Ingress, &mut p);
    (d, meta)
}

fn hits(e: &Engine) -> Vec<u64> {
    e.st.rule_hits.iter().map(|h| h.0).collect()
}

fn udp(src: impl Into<IpAddr>, dst: impl Into<IpAddr>) -> Vec<u8> {
    Builder::new()
        .macs(LAN_MAC, OUR_MAC)
        .udp(src, dst, 5000, 53, b"q")
}

fn v4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

const FWD: &str = r#"table netdev t {
    chain in {
        type filter hook ingress device "lan0" priority 0;
        ip saddr 198.18.0.1 fwd to "wan0"
        counter
    }
    chain later {
        type filter hook ingress device "lan0" priority 10;
        meta mark set 0x1
    }
}"#;

/// `fwd to "wan0"` records the device in `Meta::fwd` and ends everything: the counter after
/// it in the chain does not count the packet, the later base chain does not see it.
#[test]
fn fwd_records_the_device_and_nothing_after_it_runs() {
    for mut e in engines(FWD) {
        let (d, m) = ingress(
            &mut e,
            &udp(v4("198.18.0.1"), v4("198.19.0.1")),
            LinkType::Ethernet,
            0,
        );
        assert_eq!(d, Decision::Accept);
        assert_eq!(
            m.fwd,
            Some(Fwd {
                dev: ifname_value("wan0"),
                neigh: None
            })
        );
        assert_eq!(hits(&e), vec![1, 0, 0], "{:?}", e.rs.mode);
        assert_eq!(m.mark, 0, "the later chain ran ({:?})", e.rs.mode);
        // another source goes on: the counter and the later chain see it
        let (d, m) = ingress(
            &mut e,
            &udp(v4("198.18.0.2"), v4("198.19.0.1")),
            LinkType::Ethernet,
            0,
        );
        assert_eq!(d, Decision::Accept);
        assert_eq!(m.fwd, None);
        assert_eq!(m.mark, 1);
        assert_eq!(hits(&e), vec![1, 1, 1]);
    }
}

/// The same through the stateful layer's hook (what the netdev chain runner calls): the chain
/// ends with Accept, `meta.fwd` is set, the frame is as it came.
#[test]
fn fwd_through_hook_mut() {
    let rules = r#"table netdev t {
    chain in {
        type filter hook ingress device "lan0" priority 0;
        ip saddr 198.18.0.1 fwd to "wan0"
        counter
    }
}"#;
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = stateful(rules, mode);
        let orig = udp(v4("198.18.0.1"), v4("198.19.0.1"));
        let mut f = orig.clone();
        let mut pm = PacketMeta::parse(&f, LinkType::Ethernet);
        let mut meta = Meta::with_ifnames("lan0", "");
        let mut pc = PacketCt::default();
        let d = sf.hook_mut(Hook::Ingress, &mut f, &mut pm, &mut meta, 1, &mut pc);
        assert_eq!(d, Decision::Accept);
        assert_eq!(meta.fwd.map(|x| x.dev), Some(ifname_value("wan0")));
        assert_eq!(
            sf.engine().st.rule_hits[1].0,
            0,
            "the counter after fwd ran"
        );
        assert_eq!(f, orig);
    }
}

/// `fwd ip to ADDR device DEV` takes packets of its family only (nft_fwd_neigh breaks the
/// rule for the other): an IPv6 packet goes on to the `fwd ip6` rule.
#[test]
fn fwd_to_a_neighbour_takes_its_family() {
    let rules = r#"table netdev t {
    chain in {
        type filter hook ingress device "lan0" priority 0;
        fwd ip to 192.168.2.200 device "wan0"
        fwd ip6 to 2001:db8::1 device wan0
        counter
    }
}"#;
    for mut e in engines(rules) {
        let (d, m) = ingress(
            &mut e,
            &udp(v4("198.18.0.1"), v4("198.19.0.1")),
            LinkType::Ethernet,
            0,
        );
        assert_eq!(d, Decision::Accept);
        assert_eq!(
            m.fwd,
            Some(Fwd {
                dev: ifname_value("wan0"),
                neigh: Some(FwdNeigh {
                    family: 4,
                    addr: 0xc0a8_02c8
                })
            })
        );
        let (_, m) = ingress(
            &mut e,
            &udp(v6("2001:db8:1::1"), v6("2001:db8:2::1")),
            LinkType::Ethernet,
            0,
        );
        assert_eq!(
            m.fwd,
            Some(Fwd {
                dev: ifname_value("wan0"),
                neigh: Some(FwdNeigh {
                    family: 6,
                    addr: u128::from(v6("2001:db8::1"))
                })
            })
        );
        assert_eq!(hits(&e), vec![1, 1, 0]);
    }
}

/// The device from a map (nft's own test `fwd to meta mark map { ... }`); a packet the map
/// has no element for is not forwarded and the chain goes on.
#[test]
fn fwd_to_a_device_from_a_map() {
    let rules = r#"table netdev t {
    chain in {
        type filter hook ingress device "lan0" priority 0;
        fwd to meta mark map { 0x00000001 : "wan0", 0x00000002 : "lan0" }
        counter
    }
}"#;
    for mut e in engines(rules) {
        let f = udp(v4("198.18.0.1"), v4("198.19.0.1"));
        let dev = |e: &mut Engine, mark| ingress(e, &f, LinkType::Ethernet, mark).1.fwd;
        assert_eq!(dev(&mut e, 1).map(|x| x.dev), Some(ifname_value("wan0")));
        assert_eq!(dev(&mut e, 2).map(|x| x.dev), Some(ifname_value("lan0")));
        assert_eq!(dev(&mut e, 3), None);
        assert_eq!(hits(&e), vec![2, 1]);
    }
}

/// `ether daddr set` writes the frame's bytes 0..6 (`ether saddr set` 6..12) when the base
/// chain ends, and a later match in the same chain reads the written value.
#[test]
fn ether_addresses_are_written_and_later_matches_see_them() {
    let rules = r#"table netdev t {
    chain in {
        type filter hook ingress device "lan0" priority 0;
        ether daddr 02:00:00:00:00:02 meta mark set 0x1
        ether daddr set 02:00:00:00:00:02
        ether daddr 02:00:00:00:00:02 meta mark set 0x7
        ether saddr set 02:00:00:00:00:09
    }
}"#;
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = stateful(rules, mode);
        let orig = udp(v4("198.18.0.1"), v4("198.19.0.1"));
        assert_eq!(&orig[..6], &OUR_MAC);
        let mut f = orig.clone();
        let mut pm = PacketMeta::parse(&f, LinkType::Ethernet);
        let mut meta = Meta::with_ifnames("lan0", "");
        let mut pc = PacketCt::default();
        let d = sf.hook_mut(Hook::Ingress, &mut f, &mut pm, &mut meta, 1, &mut pc);
        assert_eq!(d, Decision::Accept);
        assert_eq!(meta.mark, 7, "the match after the write saw it ({mode:?})");
        assert_eq!(&f[..6], &[0x02, 0, 0, 0, 0, 0x02]);
        assert_eq!(&f[6..12], &[0x02, 0, 0, 0, 0, 0x09]);
        assert_eq!(&f[12..], &orig[12..], "nothing else changed");
        assert!(pm.ipv4_checksum_ok(&f));
        assert_eq!(sf.stats().header_writes, 2);
        assert_eq!(meta.nwrites, 0, "the writes were applied");
    }
}

/// nftlb's DSR mode: the backend's MAC from a hash of the source, our MAC as the source, out
/// of the device; the frame leaves rewritten.
#[test]
fn dsr_rewrites_macs_by_hash_then_forwards() {
    let rules = r#"table netdev t {
    chain in {
        type filter hook ingress device "lan0" priority 0;
        ether daddr set jhash ip saddr mod 3 map { 0 : 02:00:00:00:00:01, 1 : 02:00:00:00:00:02, 2 : 02:00:00:00:00:03 } ether saddr set 02:00:00:00:00:09 fwd to "wan0"
    }
}"#;
    let mut sf = stateful(rules, Mode::Compiled);
    let mut seen = [0u32; 3];
    for i in 1..=60u8 {
        let src = Ipv4Addr::new(198, 18, 1, i);
        let mut chosen = None;
        for _ in 0..2 {
            let orig = udp(src, v4("198.19.0.1"));
            let mut f = orig.clone();
            let mut pm = PacketMeta::parse(&f, LinkType::Ethernet);
            let mut meta = Meta::with_ifnames("lan0", "");
            let mut pc = PacketCt::default();
            let d = sf.hook_mut(Hook::Ingress, &mut f, &mut pm, &mut meta, 1, &mut pc);
            assert_eq!(d, Decision::Accept);
            assert_eq!(meta.fwd.map(|x| x.dev), Some(ifname_value("wan0")));
            assert_eq!(&f[..5], &[0x02, 0, 0, 0, 0]);
            let b = f[5];
            assert!((1..=3).contains(&b), "{b}");
            assert_eq!(&f[6..12], &[0x02, 0, 0, 0, 0, 0x09]);
            assert_eq!(&f[12..], &orig[12..]);
            // the same source always goes to the same backend
            assert!(chosen.is_none_or(|c| c == b));
            chosen = Some(b);
        }
        seen[chosen.unwrap() as usize - 1] += 1;
    }
    assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
}

/// A raw-IP frame has no Ethernet header: nft puts `meta iiftype ether` before `ether saddr
/// set`, so the rule stops there; the frame is not touched and the next rule runs.
#[test]
fn ether_set_on_a_raw_ip_frame_stops_the_rule() {
    let rules = r#"table netdev t {
    chain in {
        type filter hook ingress device "lan0" priority 0;
        ether saddr set 02:00:00:00:00:09 meta mark set 0x1
        counter
    }
}"#;
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = stateful(rules, mode);
        let orig = Builder::raw().udp(v4("198.18.0.1"), v4("198.19.0.1"), 5000, 53, b"q");
        let mut f = orig.clone();
        let mut pm = PacketMeta::parse(&f, LinkType::RawIp);
        let mut meta = Meta::with_ifnames("lan0", "");
        let mut pc = PacketCt::default();
        let d = sf.hook_mut(Hook::Ingress, &mut f, &mut pm, &mut meta, 1, &mut pc);
        assert_eq!(d, Decision::Accept);
        assert_eq!(meta.mark, 0);
        assert_eq!(f, orig);
        assert_eq!(sf.stats().header_writes, 0);
        let hits: Vec<u64> = sf.engine().st.rule_hits.iter().map(|h| h.0).collect();
        assert_eq!(hits, vec![0, 1], "{mode:?}");
    }
}
