//! The SYN proxy on the router's path, on frames built in memory: a client's SYN (not
//! tracked) answered by the router with a cookie; its ACK proved and the connection opened to
//! the server as the client's; the server's SYN-ACK acknowledged both ways; then data both
//! ways with the server's sequence numbers and timestamps shifted to the cookie's, the
//! client's acknowledgements shifted back; an ACK with a forged cookie dropped.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use weir_engine::stateful::Stateful;
use weir_engine::synproxy::{parse_options, Opts};
use weir_engine::{Compiled, Engine, Mode};
use weir_lang::ir::Synproxy as Info;
use weir_router::{Fate, Port, PortAddr, Reason, Route, Router, Routes, Rx, SentStats};
use weir_wire::build::{Builder, Tcp};
use weir_wire::{Addr, LinkType, Mac, PacketMeta};

const LAN: Mac = Mac([2, 0, 0, 0, 0, 1]);
const WAN: Mac = Mac([2, 0, 0, 0, 1, 1]);
const CMAC: Mac = Mac([2, 0, 0, 0, 0, 2]);
const SMAC: Mac = Mac([2, 0, 0, 0, 1, 2]);
const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 30, 2);
const SERVER: Ipv4Addr = Ipv4Addr::new(198, 18, 31, 2);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x30, 0, 0, 0, 0, 2);
const SERVER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x31, 0, 0, 0, 0, 2);

/// The client's and the server's addresses.
fn ends(v6: bool) -> (IpAddr, IpAddr) {
    if v6 {
        (CLIENT6.into(), SERVER6.into())
    } else {
        (CLIENT.into(), SERVER.into())
    }
}
const NOW: u64 = 3_600_000_000_000;

const RULES: &str = r#"table inet sp {
  synproxy web { mss 1460
    wscale 7
    timestamp sack-perm
  }
  chain pre {
    type filter hook prerouting priority raw; policy accept;
    iifname "lan0" tcp dport { 80, 81 } tcp flags syn notrack
  }
  chain fwd {
    type filter hook forward priority filter; policy accept;
    iifname "lan0" tcp dport 80 ct state invalid,untracked synproxy mss 1460 wscale 7 timestamp sack-perm counter
    iifname "lan0" tcp dport 81 ct state invalid,untracked synproxy name "web" counter
    ct state invalid counter drop
  }
}
"#;

fn a(s: &str) -> Addr {
    s.parse().unwrap()
}

fn lab() -> (Stateful, Router) {
    let rs = weir_lang::load_str("t.nft", RULES).unwrap().0;
    assert!(rs.unevaluated().is_empty(), "{:?}", rs.unevaluated());
    let sf = Stateful::new(
        Engine::new(Compiled::build(&rs, Mode::Compiled)),
        weir_conntrack::Config {
            tcp_loose: false,
            ..weir_conntrack::Config::default()
        },
    );
    let mut net = Router::new(
        vec![
            Port::new("lan0").with_mac(LAN).with_mtu(1500).with_addrs([
                PortAddr::host(a("198.18.30.1")),
                PortAddr::host(a("2001:db8:30::1")),
            ]),
            Port::new("wan0").with_mac(WAN).with_mtu(1500).with_addrs([
                PortAddr::host(a("198.18.31.1")),
                PortAddr::host(a("2001:db8:31::1")),
            ]),
        ],
        Routes::new(vec![
            Route::new(a("198.18.30.0"), 24, 0, None),
            Route::new(a("198.18.31.0"), 24, 1, None),
            Route::new(a("2001:db8:30::"), 64, 0, None),
            Route::new(a("2001:db8:31::"), 64, 1, None),
        ])
        .unwrap(),
    );
    net.set_neighbour(CLIENT.into(), CMAC);
    net.set_neighbour(SERVER.into(), SMAC);
    net.set_neighbour(CLIENT6.into(), CMAC);
    net.set_neighbour(SERVER6.into(), SMAC);
    (sf, net)
}

/// What the router sent: frames with their ports.
type Sent = Vec<(usize, Vec<u8>)>;

/// A frame through the router: its fate, the frame as it left, and what the router sent.
fn go(
    sf: &mut Stateful,
    net: &mut Router,
    mut f: Vec<u8>,
    pi: usize,
    at: u64,
) -> (Fate, Vec<u8>, Sent) {
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    let fate = net.route_frame(sf, &mut f, pm, pi, Rx::default(), at);
    let mut st = SentStats::default();
    let sent = net.stack_out(sf, at, &mut st);
    assert_eq!((st.no_route, st.no_neighbour, st.dropped), (0, 0, 0));
    (fate, f, sent)
}

struct T {
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    opts: Opts,
    payload: Vec<u8>,
    pm: PacketMeta,
}

fn tcp(f: &[u8]) -> T {
    let pm = PacketMeta::parse(f, LinkType::Ethernet);
    assert!(pm.transport_checksum_ok(f), "TCP checksum");
    assert!(
        pm.l3 != weir_wire::L3::Ipv4 || pm.ipv4_checksum_ok(f),
        "IP checksum"
    );
    let l4 = pm.l4_off as usize;
    let be = |i: usize| u32::from_be_bytes(f[l4 + i..l4 + i + 4].try_into().unwrap());
    let (ps, pl) = pm.payload(f).unwrap();
    T {
        seq: be(4),
        ack: be(8),
        flags: f[l4 + 13],
        window: u16::from_be_bytes([f[l4 + 14], f[l4 + 15]]),
        opts: parse_options(f, &pm).unwrap(),
        payload: f[ps..ps + pl].to_vec(),
        pm,
    }
}

fn ts(val: u32, ecr: u32) -> Vec<u8> {
    let mut o = vec![1, 1, 8, 10];
    o.extend_from_slice(&val.to_be_bytes());
    o.extend_from_slice(&ecr.to_be_bytes());
    o
}

/// A segment of the connection (client port `sport` to server port `dport`): the client's
/// (window 502, from the LAN) or the server's (window 509, from the WAN).
#[allow(clippy::too_many_arguments)]
fn segment(
    from_client: bool,
    v6: bool,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    o: &[u8],
    data: &[u8],
) -> Vec<u8> {
    let (c, s) = ends(v6);
    let (from, to, win, macs) = if from_client {
        (c, s, 502, (CMAC, LAN))
    } else {
        (s, c, 509, (SMAC, WAN))
    };
    let (p, q) = if from_client {
        (sport, dport)
    } else {
        (dport, sport)
    };
    let t = Tcp::new(p, q, flags)
        .seq(seq)
        .ack(ack)
        .window(win)
        .options(o);
    Builder::new()
        .macs(macs.0 .0, macs.1 .0)
        .tcp(from, to, &t, data)
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const PSH: u8 = 0x08;

fn handshake_and_data(dport: u16, v6: bool) {
    let (mut sf, mut net) = lab();
    let sport = 40000;
    // the client's SYN: MSS 1460, SACK permitted, timestamps, window scale 9
    let mut o = vec![2, 4, 0x05, 0xb4, 4, 2, 8, 10];
    o.extend_from_slice(&1000u32.to_be_bytes());
    o.extend_from_slice(&[0, 0, 0, 0, 1, 3, 3, 9]);
    let (fate, _, sent) = go(
        &mut sf,
        &mut net,
        segment(true, v6, sport, dport, 5000, 0, SYN, &o, b""),
        0,
        NOW,
    );
    assert!(matches!(fate, Fate::Drop(Reason::Synproxy)), "{fate:?}");
    assert_eq!(sent.len(), 1, "one SYN-ACK");
    assert_eq!(sent[0].0, 0, "back to the client");
    let sa = tcp(&sent[0].1);
    assert_eq!(sa.flags, SYN | ACK);
    assert_eq!((sa.ack, sa.window), (5001, 0));
    assert_eq!(
        sa.opts.options,
        Info::MSS | Info::WSCALE | Info::SACK_PERM | Info::TIMESTAMP
    );
    assert_eq!(
        (sa.opts.mss_option, sa.opts.wscale, sa.opts.tsecr),
        (1460, 7, 1000)
    );
    assert_eq!(
        sa.opts.tsval & 0x3f,
        9 | 1 << 4,
        "the client's scale and SACK in the timestamp"
    );
    assert_eq!(&sent[0].1[0..6], &CMAC.0);
    let cookie = sa.seq;
    let ctsval = sa.opts.tsval;

    // a forged ACK: dropped, nothing sent
    let (fate, _, sent) = go(
        &mut sf,
        &mut net,
        segment(
            true,
            v6,
            sport,
            dport,
            5001,
            cookie.wrapping_add(0x10_0000),
            ACK,
            &ts(1001, ctsval),
            b"",
        ),
        0,
        NOW,
    );
    assert!(
        matches!(fate, Fate::Drop(Reason::SynproxyCookie)),
        "{fate:?}"
    );
    assert!(sent.is_empty());

    // the client's ACK: the SYN to the server, as the client's
    let (fate, _, sent) = go(
        &mut sf,
        &mut net,
        segment(
            true,
            v6,
            sport,
            dport,
            5001,
            cookie.wrapping_add(1),
            ACK,
            &ts(1001, ctsval),
            b"",
        ),
        0,
        NOW,
    );
    assert!(matches!(fate, Fate::Drop(Reason::Synproxy)), "{fate:?}");
    assert_eq!(sent.len(), 1, "one SYN");
    assert_eq!(sent[0].0, 1, "to the server");
    let syn = tcp(&sent[0].1);
    assert_eq!(syn.flags, SYN);
    assert_eq!((syn.seq, syn.ack, syn.window), (5000, cookie, 502));
    assert_eq!(
        (
            syn.opts.mss_option,
            syn.opts.wscale,
            syn.opts.tsval,
            syn.opts.tsecr
        ),
        (if v6 { 1440 } else { 1460 }, 9, 1001, ctsval)
    );
    assert_eq!(
        syn.opts.options,
        Info::MSS | Info::WSCALE | Info::SACK_PERM | Info::TIMESTAMP
    );
    let ip = &sent[0].1[14..];
    if v6 {
        assert_eq!(&ip[8..24], &CLIENT6.octets());
        assert_eq!(&ip[24..40], &SERVER6.octets());
    } else {
        assert_eq!(&ip[12..20], &[198, 18, 30, 2, 198, 18, 31, 2]);
    }
    assert_eq!(syn.pm.l3_len as usize, ip.len());

    // the SYN lost: the client (established with the proxy, window 0) probes with its
    // sequence number less one; the proxy sends the same SYN again
    let (fate, _, again) = go(
        &mut sf,
        &mut net,
        segment(
            true,
            v6,
            sport,
            dport,
            5000,
            cookie.wrapping_add(1),
            ACK,
            &ts(1002, ctsval),
            b"",
        ),
        0,
        NOW + 500_000,
    );
    assert!(matches!(fate, Fate::Drop(Reason::Synproxy)), "{fate:?}");
    assert_eq!(again.len(), 1, "the SYN again");
    let syn2 = tcp(&again[0].1);
    assert_eq!((syn2.flags, syn2.seq, syn2.ack), (SYN, 5000, cookie));
    assert_eq!(syn2.opts.mss_option, syn.opts.mss_option);
    assert_eq!(sf.stats().synproxy_cookie_retrans, 1);

    // the server's SYN-ACK: its own ISN 777000 and timestamp 50000; taken, both acknowledged
    let s_isn = 777_000u32;
    let mut so = vec![2, 4, 0x05, 0xb4, 4, 2, 8, 10];
    so.extend_from_slice(&50_000u32.to_be_bytes());
    so.extend_from_slice(&1001u32.to_be_bytes());
    so.extend_from_slice(&[1, 3, 3, 7]);
    let (fate, _, sent) = go(
        &mut sf,
        &mut net,
        segment(false, v6, sport, dport, s_isn, 5001, SYN | ACK, &so, b""),
        1,
        NOW + 1_000_000,
    );
    assert!(matches!(fate, Fate::Drop(Reason::Synproxy)), "{fate:?}");
    assert_eq!(sent.len(), 2, "an ACK each way: {sent:?}");
    assert_eq!(sent[0].0, 1);
    let to_server = tcp(&sent[0].1);
    assert_eq!(
        (to_server.flags, to_server.seq, to_server.ack),
        (ACK, 5001, s_isn + 1)
    );
    assert_eq!(to_server.opts.tsval, 1001);
    assert_eq!(sent[1].0, 0);
    let to_client = tcp(&sent[1].1);
    assert_eq!(to_client.flags, ACK);
    assert_eq!(
        (to_client.seq, to_client.ack),
        (cookie.wrapping_add(1), 5001)
    );
    assert_eq!(to_client.window, 509 >> 7, "the server's window, scaled");
    assert_eq!((to_client.opts.tsval, to_client.opts.tsecr), (ctsval, 1001));

    // data from the server: sequence numbers and timestamps as the client knows them
    let (fate, out, sent) = go(
        &mut sf,
        &mut net,
        segment(
            false,
            v6,
            sport,
            dport,
            s_isn + 1,
            5001,
            ACK | PSH,
            &ts(50_010, 1001),
            b"hello",
        ),
        1,
        NOW + 2_000_000,
    );
    assert!(matches!(fate, Fate::Out { port: 0, .. }), "{fate:?}");
    assert!(sent.is_empty());
    let d = tcp(&out);
    assert_eq!((d.seq, d.ack), (cookie.wrapping_add(1), 5001));
    assert_eq!((d.opts.tsval, d.opts.tsecr), (ctsval + 10, 1001));
    assert_eq!(d.payload, b"hello");

    // the client's answer: its acknowledgement and echoed timestamp as the server knows them
    let (fate, out, _) = go(
        &mut sf,
        &mut net,
        segment(
            true,
            v6,
            sport,
            dport,
            5001,
            cookie.wrapping_add(6),
            ACK | PSH,
            &ts(1002, ctsval + 10),
            b"hi",
        ),
        0,
        NOW + 3_000_000,
    );
    assert!(matches!(fate, Fate::Out { port: 1, .. }), "{fate:?}");
    let d = tcp(&out);
    assert_eq!((d.seq, d.ack), (5001, s_isn + 6));
    assert_eq!((d.opts.tsval, d.opts.tsecr), (1002, 50_010));
    assert_eq!(d.payload, b"hi");
    let st = sf.stats();
    assert_eq!(
        (
            st.synproxy_syn,
            st.synproxy_cookie_valid,
            st.synproxy_cookie_invalid
        ),
        (1, 2, 1)
    );
}

#[test]
fn synproxy_statement_opens_the_connection_with_a_cookie() {
    handshake_and_data(80, false);
}

#[test]
fn synproxy_object_does_the_same() {
    handshake_and_data(81, false);
}

#[test]
fn synproxy_over_ipv6() {
    handshake_and_data(80, true);
    handshake_and_data(81, true);
}
