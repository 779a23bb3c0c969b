//! Connection-tracking helpers on the router's path, on frames built in memory: an FTP client
//! behind masquerade (active mode: its `PORT` rewritten to the router's address, the segment
//! one byte shorter, later sequence numbers shifted both ways, the server's data connection
//! `related` and translated back to the client; passive mode: the client's data connection
//! `related` and masqueraded), a TFTP transfer, a SIP call (the INVITE's addresses rewritten,
//! media both ways `related`), and the same traffic without `ct helper set`
//! (the data connections are then new, and the ruleset drops them).

use std::net::Ipv4Addr;
use weir_engine::stateful::Stateful;
use weir_engine::{Compiled, Engine, Mode};
use weir_router::{Fate, Port, PortAddr, Reason, Route, Router, Routes, Rx};
use weir_wire::build::{Builder, Tcp};
use weir_wire::{Addr, LinkType, Mac, PacketMeta};

const LAN: Mac = Mac([2, 0, 0, 0, 0, 1]);
const WAN: Mac = Mac([2, 0, 0, 0, 1, 1]);
const CMAC: Mac = Mac([2, 0, 0, 0, 0, 2]);
const SMAC: Mac = Mac([2, 0, 0, 0, 1, 2]);
/// The client: "198,18,30,22" is one character longer than the router's "198,18,31,1".
const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 30, 22);
const SERVER: Ipv4Addr = Ipv4Addr::new(198, 18, 31, 2);
const PUBLIC: Ipv4Addr = Ipv4Addr::new(198, 18, 31, 1);

fn ruleset(helpers: bool) -> String {
    let set = if helpers {
        r#"tcp dport 21 ct helper set "ftp-standard"
    udp dport 69 ct helper set "tftp-standard"
    udp dport 5060 ct helper set "sip-standard""#
    } else {
        ""
    };
    format!(
        r#"table ip f {{
  ct helper ftp-standard {{ type "ftp" protocol tcp; }}
  ct helper tftp-standard {{ type "tftp" protocol udp; }}
  ct helper sip-standard {{ type "sip" protocol udp; }}
  chain pre {{
    type filter hook prerouting priority 0; policy accept;
    {set}
  }}
  chain fwd {{
    type filter hook forward priority 0; policy drop;
    ct state established counter accept
    ct state related counter accept
    iifname "lan0" tcp dport 21 ct state new accept
    iifname "lan0" udp dport 69 ct state new accept
    iifname "lan0" udp dport 5060 ct state new accept
  }}
}}
table ip nat {{
  chain post {{ type nat hook postrouting priority srcnat; oifname "wan0" masquerade; }}
}}
"#
    )
}

fn a(s: &str) -> Addr {
    s.parse().unwrap()
}

fn lab(helpers: bool) -> (Stateful, Router) {
    let rs = weir_lang::load_str("t.nft", &ruleset(helpers)).unwrap().0;
    assert!(rs.unevaluated().is_empty(), "{:?}", rs.unevaluated());
    let sf = Stateful::new(
        Engine::new(Compiled::build(&rs, Mode::Compiled)),
        weir_conntrack::Config::default(),
    );
    let mut net = Router::new(
        vec![
            Port::new("lan0")
                .with_mac(LAN)
                .with_mtu(1500)
                .with_addrs([PortAddr::host(a("198.18.30.1"))]),
            Port::new("wan0")
                .with_mac(WAN)
                .with_mtu(1500)
                .with_addrs([PortAddr::host(PUBLIC.into())]),
        ],
        Routes::new(vec![
            Route::new(a("198.18.30.0"), 24, 0, None),
            Route::new(a("198.18.31.0"), 24, 1, None),
        ])
        .unwrap(),
    );
    net.set_neighbour(CLIENT.into(), CMAC);
    net.set_neighbour(SERVER.into(), SMAC);
    (sf, net)
}

/// A frame through the router: its fate and the frame as it left.
fn go(sf: &mut Stateful, net: &mut Router, mut f: Vec<u8>, pi: usize) -> (Fate, Vec<u8>) {
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    let fate = net.route_frame(sf, &mut f, pm, pi, Rx::default(), 1_000_000_000);
    (fate, f)
}

fn from_client(t: Tcp, data: &[u8]) -> Vec<u8> {
    Builder::new()
        .macs(CMAC.0, LAN.0)
        .tcp(CLIENT, SERVER, &t, data)
}
fn from_server(dst: Ipv4Addr, t: Tcp, data: &[u8]) -> Vec<u8> {
    Builder::new()
        .macs(SMAC.0, WAN.0)
        .tcp(SERVER, dst, &t, data)
}

fn tcp_fields(f: &[u8]) -> (u32, u32, Vec<u8>, PacketMeta) {
    let pm = PacketMeta::parse(f, LinkType::Ethernet);
    let l4 = pm.l4_off as usize;
    let seq = u32::from_be_bytes(f[l4 + 4..l4 + 8].try_into().unwrap());
    let ack = u32::from_be_bytes(f[l4 + 8..l4 + 12].try_into().unwrap());
    let (ps, pl) = pm.payload(f).unwrap();
    (seq, ack, f[ps..ps + pl].to_vec(), pm)
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const PSH: u8 = 0x08;

/// The control connection's handshake; the client's port as masqueraded.
fn handshake(sf: &mut Stateful, net: &mut Router) -> u16 {
    let (fate, f) = go(
        sf,
        net,
        from_client(Tcp::new(40000, 21, SYN).seq(1000), b""),
        0,
    );
    assert!(matches!(fate, Fate::Out { port: 1, .. }), "{fate:?}");
    let port = PacketMeta::parse(&f, LinkType::Ethernet).sport;
    let (fate, _) = go(
        sf,
        net,
        from_server(
            PUBLIC,
            Tcp::new(21, port, SYN | ACK).seq(5000).ack(1001),
            b"",
        ),
        1,
    );
    assert!(matches!(fate, Fate::Out { port: 0, .. }), "{fate:?}");
    let (fate, _) = go(
        sf,
        net,
        from_client(Tcp::new(40000, 21, ACK).seq(1001).ack(5001), b""),
        0,
    );
    assert!(matches!(fate, Fate::Out { port: 1, .. }), "{fate:?}");
    port
}

#[test]
fn ftp_active_mode_behind_masquerade() {
    let (mut sf, mut net) = lab(true);
    let port = handshake(&mut sf, &mut net);
    // PORT 198,18,30,22,156,65: the client listens on 40001
    let cmd = b"PORT 198,18,30,22,156,65\r\n";
    let (fate, _) = go(
        &mut sf,
        &mut net,
        from_client(Tcp::new(40000, 21, ACK | PSH).seq(1001).ack(5001), cmd),
        0,
    );
    assert!(
        matches!(fate, Fate::Drop(Reason::Replaced)),
        "a shorter copy leaves: {fate:?}"
    );
    let out = sf.take_queue_out();
    assert_eq!(out.len(), 1);
    let ip = &out[0];
    let pm = PacketMeta::parse(ip, LinkType::RawIp);
    assert!(pm.ipv4_checksum_ok(ip) && pm.transport_checksum_ok(ip));
    assert_eq!(pm.saddr, u32::from(PUBLIC) as u128, "masqueraded");
    let (ps, pl) = pm.payload(ip).unwrap();
    assert_eq!(&ip[ps..ps + pl], b"PORT 198,18,31,1,156,65\r\n");
    assert_eq!(pl, cmd.len() - 1);
    assert_eq!(sf.stats().helper_expectations, 1);
    // the server acknowledges the shorter command: the client hears its own numbers
    let (fate, f) = go(
        &mut sf,
        &mut net,
        from_server(
            PUBLIC,
            Tcp::new(21, port, ACK | PSH).seq(5001).ack(1001 + 25),
            b"200 PORT command successful\r\n",
        ),
        1,
    );
    assert!(matches!(fate, Fate::Out { port: 0, .. }), "{fate:?}");
    let (seq, ack, _, pm) = tcp_fields(&f);
    assert_eq!((seq, ack), (5001, 1001 + 26), "ack shifted back by one");
    assert!(pm.transport_checksum_ok(&f));
    // the client's next command: its sequence number shifted by one
    let (fate, f) = go(
        &mut sf,
        &mut net,
        from_client(
            Tcp::new(40000, 21, ACK | PSH).seq(1001 + 26).ack(5001 + 29),
            b"RETR f\r\n",
        ),
        0,
    );
    assert!(matches!(fate, Fate::Out { port: 1, .. }), "{fate:?}");
    let (seq, ack, data, pm) = tcp_fields(&f);
    assert_eq!(
        (seq, ack, &data[..]),
        (1001 + 25, 5001 + 29, &b"RETR f\r\n"[..])
    );
    assert!(pm.transport_checksum_ok(&f));
    // the server's data connection, from port 20 to the address it was told: related,
    // translated to the client's own
    let (fate, f) = go(
        &mut sf,
        &mut net,
        from_server(PUBLIC, Tcp::new(20, 40001, SYN).seq(9000), b""),
        1,
    );
    assert!(matches!(fate, Fate::Out { port: 0, .. }), "{fate:?}");
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    assert_eq!(
        (pm.daddr, pm.dport),
        (u32::from(CLIENT) as u128, 40001),
        "to the client's announced endpoint"
    );
    assert!(pm.transport_checksum_ok(&f));
    assert_eq!(sf.stats().helper_related, 1);
    // and its answer goes back as from the router
    let (fate, f) = go(
        &mut sf,
        &mut net,
        Builder::new().macs(CMAC.0, LAN.0).tcp(
            CLIENT,
            SERVER,
            &Tcp::new(40001, 20, SYN | ACK).seq(7000).ack(9001),
            b"",
        ),
        0,
    );
    assert!(matches!(fate, Fate::Out { port: 1, .. }), "{fate:?}");
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    assert_eq!((pm.saddr, pm.sport), (u32::from(PUBLIC) as u128, 40001));
}

#[test]
fn ftp_passive_mode_behind_masquerade() {
    let (mut sf, mut net) = lab(true);
    let port = handshake(&mut sf, &mut net);
    let pasv = b"227 Entering Passive Mode (198,18,31,2,195,80).\r\n";
    let (fate, f) = go(
        &mut sf,
        &mut net,
        from_server(
            PUBLIC,
            Tcp::new(21, port, ACK | PSH).seq(5001).ack(1001),
            pasv,
        ),
        1,
    );
    assert!(matches!(fate, Fate::Out { port: 0, .. }), "{fate:?}");
    assert_eq!(
        tcp_fields(&f).2,
        pasv.to_vec(),
        "the server's own address: kept"
    );
    let (fate, f) = go(
        &mut sf,
        &mut net,
        from_client(Tcp::new(40002, 50000, SYN).seq(100), b""),
        0,
    );
    assert!(matches!(fate, Fate::Out { port: 1, .. }), "{fate:?}");
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    assert_eq!(
        pm.saddr,
        u32::from(PUBLIC) as u128,
        "masqueraded as its master"
    );
    assert_eq!(sf.stats().helper_related, 1);
    assert_eq!(sf.stats().seq_adjusted, 0);
}

#[test]
fn tftp_answer_from_another_port_is_related() {
    let (mut sf, mut net) = lab(true);
    let rrq =
        Builder::new()
            .macs(CMAC.0, LAN.0)
            .udp(CLIENT, SERVER, 3000, 69, b"\x00\x01f\x00octet\x00");
    let (fate, f) = go(&mut sf, &mut net, rrq, 0);
    assert!(matches!(fate, Fate::Out { port: 1, .. }), "{fate:?}");
    let sport = PacketMeta::parse(&f, LinkType::Ethernet).sport;
    let data = Builder::new().macs(SMAC.0, WAN.0).udp(
        SERVER,
        PUBLIC,
        33333,
        sport,
        b"\x00\x03\x00\x01hello",
    );
    let (fate, f) = go(&mut sf, &mut net, data, 1);
    assert!(matches!(fate, Fate::Out { port: 0, .. }), "{fate:?}");
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    assert_eq!((pm.daddr, pm.dport), (u32::from(CLIENT) as u128, 3000));
    assert!(pm.transport_checksum_ok(&f));
}

#[test]
fn without_the_helper_the_data_connections_are_new_and_dropped() {
    let (mut sf, mut net) = lab(false);
    let port = handshake(&mut sf, &mut net);
    let cmd = b"PORT 198,18,30,22,156,65\r\n";
    let (fate, f) = go(
        &mut sf,
        &mut net,
        from_client(Tcp::new(40000, 21, ACK | PSH).seq(1001).ack(5001), cmd),
        0,
    );
    assert!(matches!(fate, Fate::Out { port: 1, .. }), "{fate:?}");
    assert_eq!(tcp_fields(&f).2, cmd.to_vec(), "not rewritten");
    let (fate, _) = go(
        &mut sf,
        &mut net,
        from_server(PUBLIC, Tcp::new(20, 40001, SYN).seq(9000), b""),
        1,
    );
    // not forwarded: for the router itself (nothing listens there)
    assert!(!matches!(fate, Fate::Out { .. }), "{fate:?}");
    let _ = port;
    let rrq =
        Builder::new()
            .macs(CMAC.0, LAN.0)
            .udp(CLIENT, SERVER, 3000, 69, b"\x00\x01f\x00octet\x00");
    let (_, f) = go(&mut sf, &mut net, rrq, 0);
    let sport = PacketMeta::parse(&f, LinkType::Ethernet).sport;
    let data = Builder::new().macs(SMAC.0, WAN.0).udp(
        SERVER,
        PUBLIC,
        33333,
        sport,
        b"\x00\x03\x00\x01hello",
    );
    let (fate, _) = go(&mut sf, &mut net, data, 1);
    // not forwarded: for the router itself (nothing listens there)
    assert!(!matches!(fate, Fate::Out { .. }), "{fate:?}");
    assert_eq!(sf.stats().helper_expectations, 0);
}

fn sip(from_client: bool, body_addr: &str, media_port: u16, first: &str) -> Vec<u8> {
    let sdp = format!(
        "v=0\r\no=- 1 1 IN IP4 {body_addr}\r\ns=-\r\nc=IN IP4 {body_addr}\r\nt=0 0\r\nm=audio {media_port} RTP/AVP 0\r\n"
    );
    let msg = format!(
        "{first}\r\nVia: SIP/2.0/UDP 198.18.30.22:5060;branch=z9hG4bK1\r\nFrom: <sip:a@198.18.30.22>;tag=1\r\nTo: <sip:b@198.18.31.2>\r\nCall-ID: 1@x\r\nCSeq: 1 INVITE\r\nContact: <sip:a@198.18.30.22:5060>\r\nContent-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
        sdp.len()
    );
    if from_client {
        Builder::new()
            .macs(CMAC.0, LAN.0)
            .udp(CLIENT, SERVER, 5060, 5060, msg.as_bytes())
    } else {
        Builder::new()
            .macs(SMAC.0, WAN.0)
            .udp(SERVER, PUBLIC, 5060, 5060, msg.as_bytes())
    }
}

#[test]
fn sip_call_behind_masquerade() {
    let (mut sf, mut net) = lab(true);
    let invite = sip(
        true,
        "198.18.30.22",
        20000,
        "INVITE sip:b@198.18.31.2 SIP/2.0",
    );
    let (fate, _) = go(&mut sf, &mut net, invite, 0);
    assert!(matches!(fate, Fate::Drop(Reason::Replaced)), "{fate:?}");
    let out = sf.take_queue_out();
    assert_eq!(out.len(), 1);
    let pm = PacketMeta::parse(&out[0], LinkType::RawIp);
    assert!(pm.ipv4_checksum_ok(&out[0]) && pm.transport_checksum_ok(&out[0]));
    let (ps, pl) = pm.payload(&out[0]).unwrap();
    let text = String::from_utf8_lossy(&out[0][ps..ps + pl]).to_string();
    assert!(!text.contains("198.18.30.22"), "{text}");
    assert!(text.contains("c=IN IP4 198.18.31.1\r\n"), "{text}");
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(
        head.contains(&format!("Content-Length: {}", body.len())),
        "{text}"
    );
    // the server answers with its media port; media from it to the address it was told
    let ok = sip(false, "198.18.31.2", 30000, "SIP/2.0 200 OK");
    let (fate, _) = go(&mut sf, &mut net, ok, 1);
    assert!(
        matches!(
            fate,
            Fate::Out { port: 0, .. } | Fate::Drop(Reason::Replaced)
        ),
        "{fate:?}"
    );
    sf.take_queue_out();
    let rtp = Builder::new()
        .macs(SMAC.0, WAN.0)
        .udp(SERVER, PUBLIC, 30000, 20000, b"rtp");
    let (fate, f) = go(&mut sf, &mut net, rtp, 1);
    assert!(matches!(fate, Fate::Out { port: 0, .. }), "{fate:?}");
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    assert_eq!((pm.daddr, pm.dport), (u32::from(CLIENT) as u128, 20000));
    let rtp = Builder::new()
        .macs(CMAC.0, LAN.0)
        .udp(CLIENT, SERVER, 20002, 30000, b"rtp");
    let (fate, f) = go(&mut sf, &mut net, rtp, 0);
    assert!(matches!(fate, Fate::Out { port: 1, .. }), "{fate:?}");
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    assert_eq!(pm.saddr, u32::from(PUBLIC) as u128);
    assert_eq!(sf.stats().helper_related, 2);
}
