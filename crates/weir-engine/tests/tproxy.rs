//! `tproxy` and `socket` against a fixed set of sockets (`SocketSet`), as Linux's
//! `nft_tproxy` / `nft_socket` find them: the packet's own connection first, then a socket
//! listening on the target; only a transparent one takes the packet (the rule goes on),
//! otherwise the rule stops. The connection keeps the target. Each ruleset was loaded by
//! the real nft 1.0.6 (`nft -c -f`) and the kernel's own behaviour is compared in the lab
//! (`tests/lab/tproxy.sh`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use weir_conntrack::Config;
use weir_engine::socket::{Sock, SocketSet};
use weir_engine::stateful::tproxy::Target;
use weir_engine::stateful::{PacketCt, Stateful};
use weir_engine::{Compiled, Engine, Meta, Mode};
use weir_lang::ir::Hook;
use weir_wire::build::{tcp4, tcp6, tcp_flags, Builder, Tcp};
use weir_wire::{LinkType, PacketMeta};

const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const FAR: Ipv4Addr = Ipv4Addr::new(198, 19, 9, 9);
const ME: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);

fn stateful(rules: &str, mode: Mode, socks: Vec<Sock>) -> Stateful {
    let rs = weir_lang::load_str("t.nft", rules)
        .unwrap_or_else(|(sm, d)| panic!("{}", weir_lang::diag::render_all(&d, &sm)))
        .0;
    assert!(rs.unevaluated().is_empty(), "{:?}", rs.unevaluated());
    let mut sf = Stateful::new(Engine::new(Compiled::build(&rs, mode)), Config::default());
    sf.set_sockets(Some(Arc::new(SocketSet(socks))));
    sf
}

fn listener(port: u16, transparent: bool) -> Sock {
    Sock {
        proto: 6,
        local: (IpAddr::V4(Ipv4Addr::UNSPECIFIED), port),
        remote: None,
        transparent,
        mark: 0,
        time_wait: false,
    }
}

/// A packet through prerouting: (mark, the tproxy target the router would deliver it to).
fn pre(sf: &mut Stateful, mut f: Vec<u8>, now: u64) -> (u32, Option<u8>) {
    let mut pm = PacketMeta::parse(&f, LinkType::Ethernet);
    let mut pc = PacketCt {
        iif_addr: Some(u32::from(ME) as u128),
        ..PacketCt::default()
    };
    let mut meta = Meta::with_ifnames("lan0", "");
    let d = sf.hook_mut(Hook::Prerouting, &mut f, &mut pm, &mut meta, now, &mut pc);
    assert!(d.is_accept(), "{d:?}");
    let t = sf.tproxy_of(&pc);
    let _ = sf.finish(&mut pc, now);
    (meta.mark, t)
}

/// The local socket's answer, as the host sends it (output, postrouting).
fn reply(sf: &mut Stateful, mut f: Vec<u8>, now: u64) {
    let mut pm = PacketMeta::parse(&f, LinkType::Ethernet);
    let mut pc = PacketCt::default();
    for h in [Hook::Output, Hook::Postrouting] {
        let mut meta = Meta::with_ifnames("", "lan0");
        let d = sf.hook_mut(h, &mut f, &mut pm, &mut meta, now, &mut pc);
        assert!(d.is_accept(), "{d:?}");
    }
    assert!(sf.finish(&mut pc, now).is_accept());
}

const RULES: &str = "table ip t {\n chain pre {\n  type filter hook prerouting priority mangle; policy accept;\n  tcp dport 80 tcp flags syn tproxy to :8080 meta mark set 1 accept\n  tcp dport 81 tproxy to 198.18.0.1:8081 meta mark set 2 accept\n  meta mark set 7\n }\n}\n";

#[test]
fn tproxy_takes_the_packet_only_for_a_transparent_socket() {
    for mode in [Mode::Compiled, Mode::Linear] {
        // a transparent listener on 8080: taken, the rule goes on; its connection's later
        // packets (no SYN: the rule's match fails) keep the target
        let mut sf = stateful(RULES, mode, vec![listener(8080, true)]);
        assert_eq!(
            sf.tproxy_targets(),
            &[
                Target {
                    family: 4,
                    addr: None,
                    port: Some(8080)
                },
                Target {
                    family: 4,
                    addr: Some(u32::from(ME) as u128),
                    port: Some(8081)
                }
            ]
        );
        let syn = tcp4(CLIENT, FAR, 40000, 80, tcp_flags::SYN, b"");
        assert_eq!(pre(&mut sf, syn, 1), (1, Some(0)), "{mode:?}");
        let t = |sp, dp, fl| Tcp::new(sp, dp, fl);
        let synack = t(80, 40000, tcp_flags::SYN | tcp_flags::ACK)
            .seq(5000)
            .ack(1001);
        reply(&mut sf, Builder::new().tcp(FAR, CLIENT, &synack, b""), 2);
        let ack = t(40000, 80, tcp_flags::ACK).seq(1001).ack(5001);
        let ack = Builder::new().tcp(CLIENT, FAR, &ack, b"x");
        assert_eq!(
            pre(&mut sf, ack, 3),
            (7, Some(0)),
            "the connection keeps it"
        );
        // port 81: no listener on 198.18.0.1:8081: the rule stops
        let other = tcp4(CLIENT, FAR, 40001, 81, tcp_flags::SYN, b"");
        assert_eq!(pre(&mut sf, other, 3), (7, None));
        // a listener that is not transparent: the rule stops
        let mut sf = stateful(RULES, mode, vec![listener(8080, false)]);
        let syn = tcp4(CLIENT, FAR, 40000, 80, tcp_flags::SYN, b"");
        assert_eq!(pre(&mut sf, syn, 1), (7, None));
        // a listener bound to the target's address
        let bound = Sock {
            local: (IpAddr::V4(ME), 8081),
            ..listener(8081, true)
        };
        let mut sf = stateful(RULES, mode, vec![bound]);
        let syn = tcp4(CLIENT, FAR, 40001, 81, tcp_flags::SYN, b"");
        assert_eq!(pre(&mut sf, syn, 1), (2, Some(1)));
        // ... and not one bound to another address
        let elsewhere = Sock {
            local: (IpAddr::V4(Ipv4Addr::new(198, 18, 0, 3)), 8081),
            ..listener(8081, true)
        };
        let mut sf = stateful(RULES, mode, vec![elsewhere]);
        let syn = tcp4(CLIENT, FAR, 40001, 81, tcp_flags::SYN, b"");
        assert_eq!(pre(&mut sf, syn, 1), (7, None));
        // the packet's own established transparent socket comes first (no listener)
        let conn = Sock {
            proto: 6,
            local: (IpAddr::V4(FAR), 80),
            remote: Some((IpAddr::V4(CLIENT), 40002)),
            transparent: true,
            mark: 0,
            time_wait: false,
        };
        let mut sf = stateful(
            &RULES.replace("tcp flags syn ", ""),
            mode,
            vec![conn, listener(8080, false)],
        );
        let ack = tcp4(CLIENT, FAR, 40002, 80, tcp_flags::ACK, b"");
        assert_eq!(pre(&mut sf, ack, 1), (1, Some(0)));
        // ... an established socket that is not transparent stops the rule
        let mut sf = stateful(
            &RULES.replace("tcp flags syn ", ""),
            mode,
            vec![
                Sock {
                    transparent: false,
                    ..conn
                },
                listener(8080, true),
            ],
        );
        let ack = tcp4(CLIENT, FAR, 40002, 80, tcp_flags::ACK, b"");
        assert_eq!(pre(&mut sf, ack, 1), (7, None));
    }
}

#[test]
fn tproxy_needs_tcp_or_udp_of_its_family() {
    let rules = "table inet t {\n chain pre {\n  type filter hook prerouting priority mangle; policy accept;\n  meta l4proto udp tproxy ip to :5353 meta mark set 1 accept\n  meta l4proto tcp tproxy ip6 to [2001:db8::1]:8080 meta mark set 2 accept\n  meta l4proto tcp tproxy to :8080 meta mark set 3 accept\n  meta mark set 7\n }\n}\n";
    let udp_sock = Sock {
        proto: 17,
        local: (IpAddr::V4(Ipv4Addr::UNSPECIFIED), 5353),
        ..listener(0, true)
    };
    let v6 = Sock {
        local: (IpAddr::V6(Ipv6Addr::UNSPECIFIED), 8080),
        ..listener(8080, true)
    };
    let mut sf = stateful(rules, Mode::Compiled, vec![udp_sock, v6]);
    let u = Builder::new().udp(CLIENT, FAR, 5000, 53, b"q");
    assert_eq!(pre(&mut sf, u, 1), (1, Some(0)));
    // IPv6 TCP: the ip6 statement's listener is on [2001:db8::1]:8080 (a wildcard one
    // serves it)
    let c6: Ipv6Addr = "2001:db8:1::2".parse().unwrap();
    let f6: Ipv6Addr = "2001:db8:9::9".parse().unwrap();
    let t6 = tcp6(c6, f6, 40000, 443, tcp_flags::SYN, b"");
    assert_eq!(pre(&mut sf, t6, 2), (2, Some(1)));
    // IPv4 TCP: no IPv4 listener on 8080 (the v6 wildcard one is IPv6's here), the last
    // statement stops too
    let t4 = tcp4(CLIENT, FAR, 40000, 443, tcp_flags::SYN, b"");
    assert_eq!(pre(&mut sf, t4, 3), (7, None));
    // ICMP: never
    let ping = Builder::new().icmp_echo(CLIENT, FAR, true, 1, 1, b"");
    assert_eq!(pre(&mut sf, ping, 4), (7, None));
}

#[test]
fn tproxy_targets_from_a_map_and_where_it_may_run() {
    let rules = "table ip t {\n chain pre {\n  type filter hook prerouting priority mangle;\n  meta l4proto 6 tproxy to 127.0.0.1:symhash mod 2 map { 0 : 23, 1 : 42 }\n }\n}\n";
    let rs = weir_lang::load_str("t.nft", rules).unwrap().0;
    let ts = weir_engine::stateful::tproxy::targets(&rs).unwrap();
    assert_eq!(ts.len(), 2);
    assert_eq!(ts[0].nft(), "tproxy ip to 127.0.0.1:23");
    assert_eq!(ts[1].nft(), "tproxy ip to 127.0.0.1:42");
    // nft: tproxy only at prerouting
    let bad = "table ip t {\n chain c {\n  type filter hook input priority 0;\n  meta l4proto 6 tproxy to :80\n }\n}\n";
    let Err(e) = weir_lang::load_str("t.nft", bad) else {
        panic!("refused")
    };
    let text = weir_lang::diag::render_all(&e.1, &e.0);
    assert!(text.contains("prerouting hook only"), "{text}");
}

#[test]
fn socket_keys_read_the_packets_socket() {
    let rules = "table inet t {\n chain pre {\n  type filter hook prerouting priority mangle; policy accept;\n  socket transparent 1 socket wildcard 0 meta mark set 1 accept\n  socket transparent 1 meta mark set 2 accept\n  socket mark 0x5 meta mark set 3 accept\n  socket transparent 0 meta mark set 4 accept\n  meta mark set 7\n }\n}\n";
    let conn = |port: u16, transparent: bool, mark: u32, time_wait: bool| Sock {
        proto: 6,
        local: (IpAddr::V4(FAR), 80),
        remote: Some((IpAddr::V4(CLIENT), port)),
        transparent,
        mark,
        time_wait,
    };
    let bound = Sock {
        local: (IpAddr::V4(FAR), 22),
        ..listener(22, true)
    };
    for mode in [Mode::Compiled, Mode::Linear] {
        let socks = vec![
            conn(1, true, 0, false),
            conn(2, false, 5, false),
            conn(3, false, 0, false),
            listener(8080, true),
            bound,
            conn(4, false, 5, true),
        ];
        let mut sf = stateful(rules, mode, socks);
        let mut go = |sport: u16, dport: u16| {
            let f = tcp4(CLIENT, FAR, sport, dport, tcp_flags::ACK, b"");
            pre(&mut sf, f, 1).0
        };
        // an established transparent socket: bound to an address (not wildcard)
        assert_eq!(go(1, 80), 1, "{mode:?}");
        assert_eq!(go(2, 80), 3);
        assert_eq!(go(3, 80), 4);
        // the listener on the wildcard address
        assert_eq!(go(9, 8080), 2);
        // the listener bound to an address
        assert_eq!(go(9, 22), 1);
        // no socket: every socket key stops the rule
        assert_eq!(go(9, 9999), 7);
        // TIME_WAIT: transparent is read, mark and wildcard stop the rule
        assert_eq!(go(4, 80), 4);
    }
}

/// `meta cgroup` reads the net_cls class id of the socket the packet carries (0: the host has
/// no net_cls hierarchy): at input the one early demux attaches (an established connection,
/// not a listener), at output the sender's; a forwarded packet, or one at prerouting (before
/// early demux), has none and the rule stops.
#[test]
fn meta_cgroup_reads_the_packets_socket() {
    let rules = "table inet t {\n chain pre {\n  type filter hook prerouting priority mangle; policy accept;\n  meta cgroup 0 meta mark set 9\n }\n chain in {\n  type filter hook input priority 0; policy accept;\n  meta cgroup 0 meta mark set mark | 1\n  meta cgroup != 0 meta mark set mark | 2\n }\n chain out {\n  type filter hook output priority 0; policy accept;\n  meta cgroup 0 meta mark set mark | 4\n }\n}\n";
    let conn = Sock {
        proto: 6,
        local: (IpAddr::V4(ME), 80),
        remote: Some((IpAddr::V4(CLIENT), 1000)),
        transparent: false,
        mark: 0,
        time_wait: false,
    };
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = stateful(rules, mode, vec![conn, listener(22, false)]);
        let mut at = |h: Hook, f: Vec<u8>| {
            let mut f = f;
            let mut pm = PacketMeta::parse(&f, LinkType::Ethernet);
            let mut pc = PacketCt::default();
            let mut meta = Meta::with_ifnames("lan0", "");
            let d = sf.hook_mut(h, &mut f, &mut pm, &mut meta, 1, &mut pc);
            assert!(d.is_accept());
            let _ = sf.finish(&mut pc, 1);
            meta.mark
        };
        let to_me = |sport, dport| tcp4(CLIENT, ME, sport, dport, tcp_flags::ACK, b"");
        assert_eq!(at(Hook::Input, to_me(1000, 80)), 1, "{mode:?}: established");
        assert_eq!(
            at(Hook::Input, to_me(1001, 22)),
            0,
            "a listener: none attached"
        );
        assert_eq!(
            at(Hook::Prerouting, to_me(1000, 80)),
            0,
            "before early demux"
        );
        let from_me = tcp4(ME, CLIENT, 80, 1000, tcp_flags::ACK, b"");
        assert_eq!(at(Hook::Output, from_me), 4, "the sender's socket");
        let stray = tcp4(ME, CLIENT, 81, 1000, tcp_flags::ACK, b"");
        assert_eq!(at(Hook::Output, stray), 0, "no socket sends it");
    }
}
