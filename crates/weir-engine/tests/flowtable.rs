//! The flowtable fast path and the route cache: offloaded connections skip the chains and
//! connection tracking, keep their NAT translation, and go back to the slow path on FIN/RST.
//! (The kernel here is built without flowtables, so weir's own slow path is the reference.)

use std::net::Ipv4Addr;
use weir_conntrack::Config;
use weir_engine::stateful::{PacketCt, Stateful};
use weir_engine::{Compiled, Engine, Meta, Mode};
use weir_lang::ir::Hook;
use weir_wire::build::{tcp_flags as tf, Builder, Tcp};
use weir_wire::{LinkType, PacketMeta};

const C: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);
const S: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 20);
const WAN: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 2);
const LAN0: u16 = 0;
const WAN0: u16 = 1;

const RULES: &str = "table ip f {
    flowtable ft { hook ingress priority 0; devices = { lan0, wan0 }; }
    chain fwd { type filter hook forward priority 0; policy drop;
        ct state established flow add @ft
        ct state established,related counter accept
        tcp dport 80 ct state new counter accept
        udp dport 53 counter accept
    }
    chain post { type nat hook postrouting priority srcnat; policy accept;
        oifname \"wan0\" masquerade
    }
}";

#[derive(Debug, PartialEq)]
enum Way {
    Fast,
    Slow,
    Dropped,
}

/// The fast path for a frame arriving on device `iif`.
fn fast(
    sf: &mut Stateful,
    f: &mut [u8],
    pm: &mut PacketMeta,
    iif: &str,
    now: u64,
) -> Option<weir_engine::stateful::FastPath> {
    let devs = sf.flowtable_devices(iif);
    sf.fast_path(f, pm, devs, 0, now, |_| true)
}

/// One packet through the router: the fast path, or prerouting, forward, postrouting.
fn send(sf: &mut Stateful, frame: &mut [u8], from_lan: bool, now: u64) -> Way {
    let mut pm = PacketMeta::parse(frame, LinkType::Ethernet);
    let (iif, oif, oif_i) = if from_lan {
        ("lan0", "wan0", WAN0)
    } else {
        ("wan0", "lan0", LAN0)
    };
    let devs = sf.flowtable_devices(iif);
    if let Some(fp) = sf.fast_path(frame, &mut pm, devs, 0, now, |_| true) {
        assert_eq!(fp.oif, oif_i, "the cached route");
        return Way::Fast;
    }
    let mut pc = PacketCt {
        oif_addr: Some(u32::from(WAN) as u128),
        ..PacketCt::default()
    };
    for hook in [Hook::Prerouting, Hook::Forward, Hook::Postrouting] {
        let mut meta = Meta::with_ifnames(iif, if hook == Hook::Prerouting { "" } else { oif });
        if !sf
            .hook_mut(hook, frame, &mut pm, &mut meta, now, &mut pc)
            .is_accept()
        {
            return Way::Dropped;
        }
    }
    if !sf.finish(&mut pc, now).is_accept() {
        return Way::Dropped;
    }
    sf.cache_route(&pc, oif_i);
    Way::Slow
}

fn seg(out: bool, flags: u8, seq: u32, ack: u32, data: &[u8]) -> Vec<u8> {
    if out {
        Builder::new().tcp(C, S, &Tcp::new(40000, 80, flags).seq(seq).ack(ack), data)
    } else {
        // answers come back to the masquerading address
        Builder::new().tcp(S, WAN, &Tcp::new(80, 40000, flags).seq(seq).ack(ack), data)
    }
}

/// The IPv4 transport checksum verifies (over the pseudo-header and the segment).
fn transport_ok(f: &[u8], pm: &PacketMeta) -> bool {
    use weir_wire::checksum::{checksum_with, pseudo_v4};
    let l3 = pm.l3_off as usize;
    let (l4, end) = (pm.l4_off as usize, pm.l3_end());
    let src: [u8; 4] = f[l3 + 12..l3 + 16].try_into().unwrap();
    let dst: [u8; 4] = f[l3 + 16..l3 + 20].try_into().unwrap();
    checksum_with(
        pseudo_v4(src, dst, pm.l4proto, (end - l4) as u16),
        &f[l4..end],
    ) == 0
}

fn stateful(mode: Mode) -> Stateful {
    let (rs, _) = weir_lang::load_str("t.nft", RULES).unwrap_or_else(|(sm, d)| {
        panic!("{}", weir_lang::diag::render_all(&d, &sm));
    });
    Stateful::new(Engine::new(Compiled::build(&rs, mode)), Config::default())
}

#[test]
fn established_tcp_takes_the_fast_path_with_its_nat_until_fin() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = stateful(mode);
        let t = 1_000_000_000u64;
        let mut f = seg(true, tf::SYN, 100, 0, &[]);
        assert_eq!(send(&mut sf, &mut f, true, t), Way::Slow);
        let mut f = seg(false, tf::SYN | tf::ACK, 500, 101, &[]);
        assert_eq!(send(&mut sf, &mut f, false, t + 1), Way::Slow);
        // translated back to the client
        assert_eq!(&f[30..34], &C.octets());
        // the ACK completes the handshake: established, offloaded by this packet
        let mut f = seg(true, tf::ACK, 101, 501, &[]);
        assert_eq!(send(&mut sf, &mut f, true, t + 2), Way::Slow);
        assert_eq!(sf.stats().offloaded, 1);
        let hits_before: Vec<u64> = sf.engine().st.rule_hits.iter().map(|h| h.0).collect();
        // data both ways: fast path, masqueraded and translated back, checksums right
        for i in 0..5u32 {
            let mut f = seg(true, tf::PSH | tf::ACK, 101 + i * 10, 501, &[7; 10]);
            assert_eq!(send(&mut sf, &mut f, true, t + 3 + i as u64), Way::Fast);
            assert_eq!(&f[26..30], &WAN.octets(), "source masqueraded");
            let pm = PacketMeta::parse(&f, LinkType::Ethernet);
            assert!(pm.ipv4_checksum_ok(&f));
            assert!(transport_ok(&f, &pm));
            let mut f = seg(false, tf::ACK, 501, 111 + i * 10, &[]);
            assert_eq!(send(&mut sf, &mut f, false, t + 3 + i as u64), Way::Fast);
            assert_eq!(&f[30..34], &C.octets(), "destination translated back");
        }
        // the chains did not see those packets
        let hits_after: Vec<u64> = sf.engine().st.rule_hits.iter().map(|h| h.0).collect();
        assert_eq!(hits_before, hits_after);
        assert_eq!(sf.stats().fast_path, 10);
        // a FIN goes back to the slow path (and the connection out of the flowtable)
        let mut f = seg(true, tf::FIN | tf::ACK, 151, 501, &[]);
        assert_eq!(send(&mut sf, &mut f, true, t + 20), Way::Slow);
        assert_eq!(sf.stats().offload_teardowns, 1);
        // later packets: slow path, still established (the windows are relearnt)
        let mut f = seg(false, tf::FIN | tf::ACK, 501, 152, &[]);
        assert_eq!(send(&mut sf, &mut f, false, t + 21), Way::Slow);
        let mut f = seg(true, tf::ACK, 152, 502, &[]);
        assert_eq!(send(&mut sf, &mut f, true, t + 22), Way::Slow);
    }
}

#[test]
fn other_devices_ttl_one_and_new_connections_stay_on_the_slow_path() {
    let mut sf = stateful(Mode::Compiled);
    let t = 1_000_000_000u64;
    for (out, fl, s, a) in [
        (true, tf::SYN, 100, 0),
        (false, tf::SYN | tf::ACK, 500, 101),
        (true, tf::ACK, 101, 501),
    ] {
        let mut f = seg(out, fl, s, a, &[]);
        assert_eq!(send(&mut sf, &mut f, out, t), Way::Slow);
    }
    // TTL 1: the slow path (which forwards it here: the model does not decrement)
    let mut f =
        Builder::new()
            .ttl(1)
            .tcp(C, S, &Tcp::new(40000, 80, tf::ACK).seq(101).ack(501), &[]);
    let mut pm = PacketMeta::parse(&f, LinkType::Ethernet);
    assert!(fast(&mut sf, &mut f, &mut pm, "lan0", t).is_none());
    // a device the flowtable does not list
    let mut f = seg(true, tf::ACK, 101, 501, &[]);
    let mut pm = PacketMeta::parse(&f, LinkType::Ethernet);
    assert!(fast(&mut sf, &mut f, &mut pm, "dmz0", t).is_none());
    assert!(fast(&mut sf, &mut f, &mut pm, "lan0", t).is_some());
    // UDP: the query is new (not offloaded: `ct state established` does not match it, and it
    // is not confirmed yet), a second query is still new; the answer is established and
    // offloads the connection, so the next query takes the fast path
    let q = |sp: u16| Builder::new().udp(C, S, sp, 53, b"q");
    assert_eq!(send(&mut sf, &mut q(5353), true, t), Way::Slow);
    assert_eq!(send(&mut sf, &mut q(5353), true, t), Way::Slow);
    let offloaded = sf.stats().offloaded;
    let mut a = Builder::new().udp(S, WAN, 53, 5353, b"a");
    assert_eq!(send(&mut sf, &mut a, false, t), Way::Slow);
    assert_eq!(sf.stats().offloaded, offloaded + 1);
    assert_eq!(send(&mut sf, &mut q(5353), true, t), Way::Fast);
    // the route cache: the connection knows its way in both directions
    let mut pc = PacketCt::default();
    let f = q(5353);
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    let mut p = weir_engine::Pkt {
        frame: &f,
        pm: &pm,
        meta: &mut Meta::with_ifnames("lan0", ""),
        now_ns: t,
        conns: None,
    };
    sf.track_only(&mut p, &mut pc);
    assert_eq!(sf.cached_route(&pc), Some(WAN0));
}
