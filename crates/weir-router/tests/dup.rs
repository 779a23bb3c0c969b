//! `dup` on the router's path, on frames built in memory: a copy of a client's packet sent
//! to a monitor's address at prerouting (its TTL decremented, don't-fragment set) and at
//! forward (the TTL as forwarded), framed for the monitor's port, untracked and not
//! duplicated again by the output hooks it crosses; the original forwarded unchanged. IPv6;
//! the netdev family's `dup to DEV`; the address from a map; the header writes made before
//! the statement and not those after; an unknown device, no route and an unknown neighbour
//! counted.

use std::net::{Ipv4Addr, Ipv6Addr};
use weir_engine::stateful::Stateful;
use weir_engine::{Compiled, Engine, Mode};
use weir_router::{DupStats, Fate, Port, PortAddr, Route, Router, Routes, Rx};
use weir_wire::build::Builder;
use weir_wire::{Addr, LinkType, Mac, PacketMeta, L3};

const LAN: Mac = Mac([2, 0, 0, 0, 0, 1]);
const WAN: Mac = Mac([2, 0, 0, 0, 1, 1]);
const TAP: Mac = Mac([2, 0, 0, 0, 2, 1]);
const CMAC: Mac = Mac([2, 0, 0, 0, 0, 2]);
const SMAC: Mac = Mac([2, 0, 0, 0, 1, 2]);
const TMAC: Mac = Mac([2, 0, 0, 0, 2, 2]);
const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 40, 2);
const SERVER: Ipv4Addr = Ipv4Addr::new(198, 18, 41, 2);
const MONITOR: Ipv4Addr = Ipv4Addr::new(198, 18, 42, 2);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x40, 0, 0, 0, 0, 2);
const SERVER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x41, 0, 0, 0, 0, 2);
const MONITOR6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x42, 0, 0, 0, 0, 2);
const NOW: u64 = 3_600_000_000_000;

const RULES: &str = r#"table ip d {
  chain pre {
    type filter hook prerouting priority 0; policy accept;
    iifname "lan0" udp dport 5000 dup to 198.18.42.2 device "tap0"
    iifname "lan0" udp dport 5001 dup to 198.18.42.2
    iifname "lan0" udp dport 5002 dup to ip saddr map { 198.18.40.2 : 198.18.42.2, 198.18.40.3 : 198.18.42.3 } device "tap0"
    iifname "lan0" udp dport 5003 dup to 198.18.42.2 device "nosuch0"
    iifname "lan0" udp dport 5004 dup to 198.18.99.9
    iifname "lan0" udp dport 5005 dup to 198.18.42.9 device "tap0"
    iifname "lan0" udp dport 5006 ip dscp set cs1 dup to 198.18.42.2 ip dscp set cs2
    iifname "lan0" udp dport 5007 dup to 198.18.42.2 dup to 198.18.42.2 device "tap0"
  }
  chain fwd {
    type filter hook forward priority 0; policy accept;
    iifname "lan0" udp dport 6000 dup to 198.18.42.2 device "tap0"
  }
  chain out {
    type filter hook output priority 0; policy accept;
    udp dport { 5000, 6000 } dup to 198.18.42.2 device "tap0"
  }
  chain post {
    type filter hook postrouting priority 0; policy accept;
    oifname "tap0" ct state != untracked drop
  }
}
table ip6 d6 {
  chain pre {
    type filter hook prerouting priority 0; policy accept;
    iifname "lan0" udp dport 5000 dup to 2001:db8:42::2 device "tap0"
  }
  chain fwd {
    type filter hook forward priority 0; policy accept;
    iifname "lan0" udp dport 6000 dup to 2001:db8:42::2
  }
}
table netdev nd {
  chain in {
    type filter hook ingress device "lan0" priority 0; policy accept;
    udp dport 7000 dup to "tap0"
    udp dport 7001 meta mark set 1
    udp dport 7001 dup to meta mark map { 1 : "tap0", 2 : "wan0" }
    udp dport 7002 dup to meta mark map { 1 : "tap0" }
    udp dport 7003 dup to "nosuch0"
  }
}
"#;

fn a(s: &str) -> Addr {
    s.parse().unwrap()
}

fn lab() -> (Stateful, Router) {
    let rs = weir_lang::load_str("t.nft", RULES)
        .map_err(|(sm, d)| weir_lang::diag::render_all(&d, &sm))
        .unwrap()
        .0;
    assert!(rs.unevaluated().is_empty(), "{:?}", rs.unevaluated());
    let sf = Stateful::new(
        Engine::new(Compiled::build(&rs, Mode::Compiled)),
        weir_conntrack::Config::default(),
    );
    let mut net = Router::new(
        vec![
            Port::new("lan0").with_mac(LAN).with_mtu(1500).with_addrs([
                PortAddr::host(a("198.18.40.1")),
                PortAddr::host(a("2001:db8:40::1")),
            ]),
            Port::new("wan0").with_mac(WAN).with_mtu(1500).with_addrs([
                PortAddr::host(a("198.18.41.1")),
                PortAddr::host(a("2001:db8:41::1")),
            ]),
            Port::new("tap0").with_mac(TAP).with_mtu(1500).with_addrs([
                PortAddr::host(a("198.18.42.1")),
                PortAddr::host(a("2001:db8:42::1")),
            ]),
        ],
        Routes::new(vec![
            Route::new(a("198.18.40.0"), 24, 0, None),
            Route::new(a("198.18.41.0"), 24, 1, None),
            Route::new(a("198.18.42.0"), 24, 2, None),
            Route::new(a("2001:db8:40::"), 64, 0, None),
            Route::new(a("2001:db8:41::"), 64, 1, None),
            Route::new(a("2001:db8:42::"), 64, 2, None),
        ])
        .unwrap(),
    );
    for (ip, mac) in [
        (Addr::from(std::net::IpAddr::from(CLIENT)), CMAC),
        (SERVER.into(), SMAC),
        (MONITOR.into(), TMAC),
        (CLIENT6.into(), CMAC),
        (SERVER6.into(), SMAC),
        (MONITOR6.into(), TMAC),
    ] {
        net.set_neighbour(ip, mac);
    }
    (sf, net)
}

/// What the router sent: frames with their ports.
type Sent = Vec<(usize, Vec<u8>)>;

/// A frame from the client through the router: its fate, the frame as it left, the copies
/// sent and their statistics.
fn go(sf: &mut Stateful, net: &mut Router, mut f: Vec<u8>) -> (Fate, Vec<u8>, Sent, DupStats) {
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    let fate = net.route_frame(sf, &mut f, pm, 0, Rx::default(), NOW);
    let mut st = DupStats::default();
    let sent = net.dup_out(sf, NOW, &mut st);
    // a copy crossing the output chain's `dup` is not duplicated again
    assert!(sf.take_dup_out().is_empty());
    (fate, f, sent, st)
}

fn udp4(dport: u16) -> Vec<u8> {
    Builder::new()
        .macs(CMAC.0, LAN.0)
        .ttl(64)
        .udp(CLIENT, SERVER, 1000, dport, b"dup me")
}

fn udp6(dport: u16) -> Vec<u8> {
    Builder::new()
        .macs(CMAC.0, LAN.0)
        .ttl(64)
        .udp(CLIENT6, SERVER6, 1000, dport, b"dup me")
}

/// The original went out of the WAN port to the server, forwarded as any other.
fn forwarded(fate: &Fate, f: &[u8]) {
    assert!(matches!(fate, Fate::Out { port: 1, .. }), "{fate:?}");
    assert_eq!(&f[..6], &SMAC.0);
    assert_eq!(&f[6..12], &WAN.0);
}

/// A copy: out of the tap port to the monitor's MAC, the client's packet (addresses, ports,
/// payload) with `ttl`; IPv4's header checksum good and don't-fragment set.
fn copy_of(sent: &(usize, Vec<u8>), ttl: u8, v6: bool) {
    let (port, f) = sent;
    assert_eq!(*port, 2);
    assert_eq!(&f[..6], &TMAC.0);
    assert_eq!(&f[6..12], &TAP.0);
    let pm = PacketMeta::parse(f, LinkType::Ethernet);
    assert!(pm.transport_checksum_ok(f));
    let (ps, pl) = pm.payload(f).unwrap();
    assert_eq!(&f[ps..ps + pl], b"dup me");
    let l3 = pm.l3_off as usize;
    if v6 {
        assert_eq!(pm.l3, L3::Ipv6);
        assert_eq!(f[l3 + 7], ttl);
        assert_eq!(&f[l3 + 8..l3 + 24], &CLIENT6.octets());
        assert_eq!(&f[l3 + 24..l3 + 40], &SERVER6.octets());
    } else {
        assert_eq!(pm.l3, L3::Ipv4);
        assert!(pm.ipv4_checksum_ok(f));
        assert_eq!(f[l3 + 8], ttl);
        assert_eq!(f[l3 + 6] & 0x40, 0x40, "don't fragment");
        assert_eq!(&f[l3 + 12..l3 + 16], &CLIENT.octets());
        assert_eq!(&f[l3 + 16..l3 + 20], &SERVER.octets());
    }
}

#[test]
fn ipv4_copies_at_prerouting_and_forward() {
    let (mut sf, mut net) = lab();
    // prerouting: the TTL decremented once (nf_dup_ipv4 at PRE_ROUTING), the original's
    // forwarded with its own decrement
    for dport in [5000, 5001, 5002] {
        let (fate, f, sent, st) = go(&mut sf, &mut net, udp4(dport));
        forwarded(&fate, &f);
        assert_eq!(f[14 + 8], 63);
        assert_eq!(f[14 + 6] & 0x40, 0, "the original is unchanged");
        assert_eq!(sent.len(), 1, "{dport}: {st:?}");
        assert_eq!(st.sent, 1);
        copy_of(&sent[0], 63, false);
    }
    // forward: the packet's TTL was decremented before the forward hook, the copy's is not
    // decremented again
    let (fate, f, sent, st) = go(&mut sf, &mut net, udp4(6000));
    forwarded(&fate, &f);
    assert_eq!((sent.len(), st.sent), (1, 1), "{st:?}");
    copy_of(&sent[0], 63, false);
    // two statements, two copies
    let (_, _, sent, _) = go(&mut sf, &mut net, udp4(5007));
    assert_eq!(sent.len(), 2);
    assert!(sf.stats().dup_copies >= 6);
}

#[test]
fn a_copy_has_the_writes_made_before_the_statement() {
    let (mut sf, mut net) = lab();
    let (fate, f, sent, _) = go(&mut sf, &mut net, udp4(5006));
    forwarded(&fate, &f);
    assert_eq!(f[14 + 1] >> 2, 16, "the original: cs2");
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].1[14 + 1] >> 2, 8, "the copy: cs1");
    copy_of(&sent[0], 63, false);
}

#[test]
fn what_cannot_leave_is_counted() {
    let (mut sf, mut net) = lab();
    let (fate, f, sent, st) = go(&mut sf, &mut net, udp4(5003));
    forwarded(&fate, &f);
    assert!(sent.is_empty());
    assert_eq!(st.no_device, 1);
    let (_, _, sent, st) = go(&mut sf, &mut net, udp4(5004));
    assert!(sent.is_empty());
    assert_eq!(st.no_route, 1);
    // an unknown neighbour: asked for, the copy lost
    let (fate, f, sent, st) = go(&mut sf, &mut net, udp4(5005));
    forwarded(&fate, &f);
    assert_eq!(st.no_neighbour, 1);
    assert_eq!(sent.len(), 1);
    let (port, arp) = &sent[0];
    assert_eq!(*port, 2);
    assert_eq!(u16::from_be_bytes([arp[12], arp[13]]), 0x0806);
    assert_eq!(&arp[38..42], &[198, 18, 42, 9]);
    assert_eq!(st.unsent(), 1);
}

#[test]
fn ipv6_copies() {
    let (mut sf, mut net) = lab();
    let (fate, f, sent, st) = go(&mut sf, &mut net, udp6(5000));
    forwarded(&fate, &f);
    assert_eq!(f[14 + 7], 63);
    assert_eq!(sent.len(), 1, "{st:?}");
    copy_of(&sent[0], 63, true);
    let (fate, f, sent, st) = go(&mut sf, &mut net, udp6(6000));
    forwarded(&fate, &f);
    assert_eq!(sent.len(), 1, "{st:?}");
    copy_of(&sent[0], 63, true);
}

#[test]
fn netdev_copies_leave_as_they_are() {
    let (mut sf, mut net) = lab();
    for dport in [7000, 7001] {
        let orig = udp4(dport);
        let (fate, f, sent, st) = go(&mut sf, &mut net, orig.clone());
        forwarded(&fate, &f);
        assert_eq!(sent.len(), 1, "{dport}: {st:?}");
        assert_eq!(sent[0].0, 2);
        assert_eq!(
            sent[0].1, orig,
            "the frame as it came, link header included"
        );
    }
    // a map without the packet's mark: the rule stops, no copy
    let (_, _, sent, st) = go(&mut sf, &mut net, udp4(7002));
    assert!(sent.is_empty(), "{st:?}");
    let (_, _, sent, st) = go(&mut sf, &mut net, udp4(7003));
    assert!(sent.is_empty());
    assert_eq!(st.no_device, 1);
}
