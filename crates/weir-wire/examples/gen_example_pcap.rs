//! Writes `examples/gateway.pcap`, the capture of `weir replay --example`: traffic arriving at
//! the small office gateway described by `examples/gateway.nft` (see `examples/README.md`).
//!
//! Regenerate it (from the repository root; the output is deterministic, byte for byte):
//!
//! ```text
//! cargo run -p weir-wire --example gen_example_pcap            # writes examples/gateway.pcap
//! cargo run -p weir-wire --example gen_example_pcap -- OUT.pcap
//! ```
//!
//! It prints which packet numbers (1-based, as Wireshark counts) belong to which scene; keep
//! `examples/README.md` in step when a scene changes.
//!
//! What the capture is: every frame as it is *received* by the gateway, on the interface it
//! arrives on, before any NAT. So replies to the masqueraded desks arrive addressed to the
//! gateway's public address 198.19.0.2, and the port-forwarded web connection arrives
//! addressed to 198.19.0.2 as well (the DMZ server answers from its own address). The
//! receiving interface can be told from the destination MAC address: the gateway's port on
//! lan0 is 02:77:65:00:00:01, on dmz0 02:77:65:00:01:01, on wan0 02:77:65:00:02:01. Hosts
//! have 02:00:00:00:SS:HH (SS = 00 LAN, 01 DMZ, 02 WAN upstream router; HH = host number).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufWriter;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use weir_wire::build::{hostile, tcp_flags as tf, tcp_segment, Builder, Tcp};
use weir_wire::pcap::PcapWriter;
use weir_wire::LinkType;

/// 2026-01-15 09:00:00 UTC, in microseconds.
const EPOCH_US: u64 = 1_768_467_600 * 1_000_000;

const S: u64 = 1_000_000; // one second in microseconds
const MS: u64 = 1_000;

// ------------------------------------------------------------------------------------------
// Addressing
// ------------------------------------------------------------------------------------------

/// The interface a frame arrives on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Lan,
    Dmz,
    Wan,
}

fn gw_mac(side: Side) -> [u8; 6] {
    match side {
        Side::Lan => [0x02, 0x77, 0x65, 0, 0x00, 0x01],
        Side::Dmz => [0x02, 0x77, 0x65, 0, 0x01, 0x01],
        Side::Wan => [0x02, 0x77, 0x65, 0, 0x02, 0x01],
    }
}

fn last_byte(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(a) => a.octets()[3],
        IpAddr::V6(a) => a.octets()[15],
    }
}

/// A builder for a frame sent by `src` and received by the gateway on `side`.
fn l2(side: Side, src: IpAddr) -> Builder {
    let (mac, ttl) = match side {
        Side::Lan => ([0x02, 0, 0, 0, 0x00, last_byte(src)], 64),
        Side::Dmz => ([0x02, 0, 0, 0, 0x01, last_byte(src)], 64),
        // Everything from the WAN comes through the upstream router, from farther away.
        Side::Wan => ([0x02, 0, 0, 0, 0x02, 0x01], 64 - 6 - last_byte(src) % 9),
    };
    Builder::new().macs(mac, gw_mac(side)).ttl(ttl)
}

fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

fn v6(s: &str) -> IpAddr {
    IpAddr::V6(s.parse::<Ipv6Addr>().unwrap())
}

fn gw_wan() -> IpAddr {
    v4(198, 19, 0, 2)
}
fn web_srv() -> IpAddr {
    v4(198, 18, 1, 10)
}
fn web_srv6() -> IpAddr {
    v6("2001:db8:0:2::10")
}

// ------------------------------------------------------------------------------------------
// Deterministic filler bytes
// ------------------------------------------------------------------------------------------

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

// ------------------------------------------------------------------------------------------
// Application payloads
// ------------------------------------------------------------------------------------------

fn dns_name(out: &mut Vec<u8>, name: &str) {
    for label in name.split('.') {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
}

/// A DNS query (`qtype` 1 = A, 28 = AAAA).
fn dns_query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    dns_name(&mut m, name);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    m
}

/// The answer to [`dns_query`] with one address record.
fn dns_answer(id: u16, name: &str, addr: IpAddr) -> Vec<u8> {
    let (qtype, rdata) = match addr {
        IpAddr::V4(a) => (1u16, a.octets().to_vec()),
        IpAddr::V6(a) => (28u16, a.octets().to_vec()),
    };
    let mut m = Vec::new();
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&[0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
    dns_name(&mut m, name);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    m.extend_from_slice(&[0xc0, 0x0c]); // the name, by pointer to the question
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    m.extend_from_slice(&300u32.to_be_bytes());
    m.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    m.extend_from_slice(&rdata);
    m
}

fn u16_len_prefixed(body: &[u8]) -> Vec<u8> {
    let mut v = (body.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(body);
    v
}

fn tls_ext(typ: u16, body: &[u8]) -> Vec<u8> {
    let mut v = typ.to_be_bytes().to_vec();
    v.extend_from_slice(&u16_len_prefixed(body));
    v
}

fn tls_record(content_type: u8, version: u16, body: &[u8]) -> Vec<u8> {
    let mut v = vec![content_type];
    v.extend_from_slice(&version.to_be_bytes());
    v.extend_from_slice(&u16_len_prefixed(body));
    v
}

fn tls_handshake(typ: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![typ];
    v.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    v.extend_from_slice(body);
    v
}

/// A well-formed TLS 1.3 ClientHello record with SNI `host` and ALPN h2/http1.1.
fn tls_client_hello(rng: &mut Rng, host: &str) -> Vec<u8> {
    let mut b = vec![0x03, 0x03];
    b.extend_from_slice(&rng.bytes(32)); // random
    b.push(32);
    b.extend_from_slice(&rng.bytes(32)); // legacy session id
    b.extend_from_slice(&u16_len_prefixed(&[
        0x13, 0x01, 0x13, 0x02, 0x13, 0x03, 0xc0, 0x2f,
    ]));
    b.extend_from_slice(&[1, 0]); // compression: null
    let mut ext = Vec::new();
    let mut sni = vec![0u8];
    sni.extend_from_slice(&u16_len_prefixed(host.as_bytes()));
    ext.extend_from_slice(&tls_ext(0, &u16_len_prefixed(&sni)));
    ext.extend_from_slice(&tls_ext(10, &u16_len_prefixed(&[0x00, 0x1d, 0x00, 0x17])));
    ext.extend_from_slice(&tls_ext(
        13,
        &u16_len_prefixed(&[0x04, 0x03, 0x08, 0x04, 0x04, 0x01]),
    ));
    let alpn = [&[2u8][..], b"h2", &[8], b"http/1.1"].concat();
    ext.extend_from_slice(&tls_ext(16, &u16_len_prefixed(&alpn)));
    ext.extend_from_slice(&tls_ext(43, &[4, 0x03, 0x04, 0x03, 0x03]));
    let mut share = vec![0x00, 0x1d];
    share.extend_from_slice(&u16_len_prefixed(&rng.bytes(32)));
    ext.extend_from_slice(&tls_ext(51, &u16_len_prefixed(&share)));
    b.extend_from_slice(&u16_len_prefixed(&ext));
    tls_record(0x16, 0x0301, &tls_handshake(1, &b))
}

/// ServerHello + ChangeCipherSpec + an encrypted record (the rest of the server's flight).
fn tls_server_flight(rng: &mut Rng, encrypted: usize) -> Vec<u8> {
    let mut b = vec![0x03, 0x03];
    b.extend_from_slice(&rng.bytes(32));
    b.push(32);
    b.extend_from_slice(&rng.bytes(32));
    b.extend_from_slice(&[0x13, 0x01, 0x00]);
    let mut ext = tls_ext(43, &[0x03, 0x04]);
    let mut share = vec![0x00, 0x1d];
    share.extend_from_slice(&u16_len_prefixed(&rng.bytes(32)));
    ext.extend_from_slice(&tls_ext(51, &share));
    b.extend_from_slice(&u16_len_prefixed(&ext));
    let mut v = tls_record(0x16, 0x0303, &tls_handshake(2, &b));
    v.extend_from_slice(&tls_record(0x14, 0x0303, &[1]));
    v.extend_from_slice(&tls_app_data(rng, encrypted));
    v
}

/// One TLS application-data record of `n` opaque bytes.
fn tls_app_data(rng: &mut Rng, n: usize) -> Vec<u8> {
    tls_record(0x17, 0x0303, &rng.bytes(n))
}

fn http_get(host: &str, path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n")
        .into_bytes()
}

fn http_ok(body: &str, content_type: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

const PAGE: &str = "<!doctype html>\n<html><head><title>Example Office</title></head>\n\
<body><h1>Example Office</h1><p>This page is served from the DMZ.</p></body></html>\n";

/// An SSH binary packet of `n` opaque bytes (after version exchange, all encrypted).
fn ssh_blob(rng: &mut Rng, n: usize) -> Vec<u8> {
    let mut v = ((n - 4) as u32).to_be_bytes().to_vec();
    v.extend_from_slice(&rng.bytes(n - 4));
    v
}

/// Linux ping's 56-byte payload: a timeval then 0x10, 0x11, ...
fn ping_payload(t_us: u64) -> Vec<u8> {
    let mut p = (t_us / S).to_le_bytes().to_vec();
    p.extend_from_slice(&(t_us % S).to_le_bytes());
    p.extend((0x10u8..0x38).take(40));
    p
}

/// A QUIC v1 Initial packet, padded to 1200 bytes as RFC 9000 requires.
fn quic_initial(rng: &mut Rng, dcid: &[u8], scid: &[u8]) -> Vec<u8> {
    let mut v = vec![0xc3, 0, 0, 0, 1, dcid.len() as u8];
    v.extend_from_slice(dcid);
    v.push(scid.len() as u8);
    v.extend_from_slice(scid);
    v.push(0); // token length
    let rest = 1200 - v.len() - 2;
    v.extend_from_slice(&(0x4000u16 | rest as u16).to_be_bytes());
    v.extend_from_slice(&rng.bytes(rest));
    v
}

/// The 48-byte NTPv4 client request / server response.
fn ntp(mode: u8, rng: &mut Rng) -> Vec<u8> {
    let mut v = vec![(4 << 3) | mode, if mode == 4 { 2 } else { 0 }, 6, 0xe9];
    v.extend_from_slice(&rng.bytes(44));
    v
}

// ------------------------------------------------------------------------------------------
// Scenes: lists of (time, frame)
// ------------------------------------------------------------------------------------------

struct Scene {
    name: &'static str,
    frames: Vec<(u64, Vec<u8>)>,
}

impl Scene {
    fn new(name: &'static str) -> Scene {
        Scene {
            name,
            frames: Vec::new(),
        }
    }
    fn at(&mut self, t: u64, frame: Vec<u8>) {
        self.frames.push((t, frame));
    }
}

/// One TCP connection as the gateway sees it. `c_to` is the address the client sends to
/// (the server's, or the gateway's for the port forward); `s_to` the address the server's
/// packets carry (the client's, or the gateway's for a masqueraded desk).
struct TcpConv {
    c: IpAddr,
    c_side: Side,
    cport: u16,
    c_to: IpAddr,
    s: IpAddr,
    s_side: Side,
    sport: u16,
    s_to: IpAddr,
    cseq: u32,
    sseq: u32,
    c_id: u16,
    s_id: u16,
    t: u64,
}

const SYN_OPTS: [u8; 8] = [2, 4, 0x05, 0xb4, 1, 1, 4, 2]; // MSS 1460, SACK permitted

impl TcpConv {
    #[allow(clippy::too_many_arguments)]
    fn new(
        t: u64,
        (c, c_side, cport): (IpAddr, Side, u16),
        (s, s_side, sport): (IpAddr, Side, u16),
        c_to: Option<IpAddr>,
        s_to: Option<IpAddr>,
        isn: u32,
    ) -> TcpConv {
        TcpConv {
            c,
            c_side,
            cport,
            c_to: c_to.unwrap_or(s),
            s,
            s_side,
            sport,
            s_to: s_to.unwrap_or(c),
            cseq: isn,
            sseq: isn.wrapping_mul(2_654_435_761).wrapping_add(0x5eed),
            c_id: (isn >> 7) as u16,
            s_id: (isn >> 3) as u16 ^ 0x5a5a,
            t,
        }
    }

    fn client_pkt(&mut self, sc: &mut Scene, dt: u64, flags: u8, payload: &[u8], opts: &[u8]) {
        self.t += dt;
        let t = Tcp::new(self.cport, self.sport, flags)
            .seq(self.cseq)
            .ack(if flags & tf::ACK != 0 { self.sseq } else { 0 })
            .window(64240)
            .options(opts);
        self.c_id = self.c_id.wrapping_add(1);
        let b = l2(self.c_side, self.c).ip_id(self.c_id).dont_fragment();
        sc.at(self.t, b.tcp(self.c, self.c_to, &t, payload));
        self.cseq = self
            .cseq
            .wrapping_add(payload.len() as u32 + (flags & (tf::SYN | tf::FIN) != 0) as u32);
    }

    fn server_pkt(&mut self, sc: &mut Scene, dt: u64, flags: u8, payload: &[u8], opts: &[u8]) {
        self.t += dt;
        let t = Tcp::new(self.sport, self.cport, flags)
            .seq(self.sseq)
            .ack(if flags & tf::ACK != 0 { self.cseq } else { 0 })
            .window(65160)
            .options(opts);
        self.s_id = self.s_id.wrapping_add(1);
        let b = l2(self.s_side, self.s).ip_id(self.s_id).dont_fragment();
        sc.at(self.t, b.tcp(self.s, self.s_to, &t, payload));
        self.sseq = self
            .sseq
            .wrapping_add(payload.len() as u32 + (flags & (tf::SYN | tf::FIN) != 0) as u32);
    }

    /// SYN, SYN-ACK, ACK with `rtt` between the gateway and the server side.
    fn open(&mut self, sc: &mut Scene, rtt: u64) {
        self.client_pkt(sc, 0, tf::SYN, &[], &SYN_OPTS);
        self.server_pkt(sc, rtt, tf::SYN | tf::ACK, &[], &SYN_OPTS);
        self.client_pkt(sc, 300, tf::ACK, &[], &[]);
    }

    /// The client sends `data`; the server acknowledges it.
    fn client_sends(&mut self, sc: &mut Scene, dt: u64, data: &[u8], rtt: u64) {
        self.client_pkt(sc, dt, tf::PSH | tf::ACK, data, &[]);
        self.server_pkt(sc, rtt, tf::ACK, &[], &[]);
    }

    /// The server sends `data` in segments of at most `mss`; the client acknowledges every
    /// second segment and the last one.
    fn server_sends(&mut self, sc: &mut Scene, dt: u64, data: &[u8], mss: usize) {
        let chunks: Vec<&[u8]> = data.chunks(mss).collect();
        for (i, ch) in chunks.iter().enumerate() {
            let last = i + 1 == chunks.len();
            let flags = if last { tf::PSH | tf::ACK } else { tf::ACK };
            self.server_pkt(sc, if i == 0 { dt } else { 120 }, flags, ch, &[]);
            if i % 2 == 1 || last {
                self.client_pkt(sc, 200, tf::ACK, &[], &[]);
            }
        }
    }

    /// The client closes first: FIN, FIN, ACK.
    fn close(&mut self, sc: &mut Scene, dt: u64, rtt: u64) {
        self.client_pkt(sc, dt, tf::FIN | tf::ACK, &[], &[]);
        self.server_pkt(sc, rtt, tf::FIN | tf::ACK, &[], &[]);
        self.client_pkt(sc, 250, tf::ACK, &[], &[]);
    }

    /// The server closes first (HTTP/1.1 with Connection: close).
    fn server_close(&mut self, sc: &mut Scene, dt: u64, rtt: u64) {
        self.server_pkt(sc, dt, tf::FIN | tf::ACK, &[], &[]);
        self.client_pkt(sc, 400, tf::FIN | tf::ACK, &[], &[]);
        self.server_pkt(sc, rtt, tf::ACK, &[], &[]);
    }
}

/// A lone SYN (a scan probe, or a connection attempt that gets no answer through the gateway),
/// with retransmissions after 1 s and 3 s when `retries`.
#[allow(clippy::too_many_arguments)]
fn syn_probe(
    sc: &mut Scene,
    t: u64,
    side: Side,
    src: IpAddr,
    sport: u16,
    dst: IpAddr,
    dport: u16,
    retries: usize,
) {
    let isn = (sport as u32).wrapping_mul(0x01000193) ^ dport as u32;
    for (i, dt) in [0, S, 3 * S].iter().take(1 + retries).enumerate() {
        let tcp = Tcp::new(sport, dport, tf::SYN).seq(isn).options(&SYN_OPTS);
        let f = l2(side, src)
            .ip_id(sport ^ i as u16)
            .dont_fragment()
            .tcp(src, dst, &tcp, &[]);
        sc.at(t + dt, f);
    }
}

#[allow(clippy::too_many_arguments)]
fn ping(
    sc: &mut Scene,
    t: u64,
    (src, side): (IpAddr, Side),
    (dst, dside): (IpAddr, Side),
    reply_to: IpAddr,
    id: u16,
    seq: u16,
    rtt: u64,
    answered: bool,
) {
    let p = ping_payload(EPOCH_US + t);
    sc.at(
        t,
        l2(side, src)
            .ip_id(0x4000 + seq)
            .dont_fragment()
            .icmp_echo(src, dst, true, id, seq, &p),
    );
    if answered {
        let r = l2(dside, dst)
            .ip_id(0x7000 + seq)
            .icmp_echo(dst, reply_to, false, id, seq, &p);
        sc.at(t + rtt, r);
    }
}

#[allow(clippy::too_many_arguments)]
fn udp_exchange(
    sc: &mut Scene,
    t: u64,
    (c, c_side, cport): (IpAddr, Side, u16),
    (s, s_side, sport): (IpAddr, Side, u16),
    s_to: IpAddr,
    q: &[u8],
    a: Option<&[u8]>,
    rtt: u64,
) {
    sc.at(t, l2(c_side, c).ip_id(cport).udp(c, s, cport, sport, q));
    if let Some(a) = a {
        sc.at(
            t + rtt,
            l2(s_side, s)
                .ip_id(sport ^ cport)
                .udp(s, s_to, sport, cport, a),
        );
    }
}

fn build_scenes() -> Vec<Scene> {
    let mut rng = Rng(0x5745_4952); // "WEIR"
    let mut scenes = Vec::new();
    let lan = |d: u8| v4(198, 18, 0, d);
    let wan = |c: u8, d: u8| v4(198, 19, c, d);
    let gw = gw_wan();
    let web = web_srv();
    use Side::*;

    // 1. A desk resolves names through the upstream resolver (masqueraded).
    {
        let mut sc =
            Scene::new("LAN DNS lookups (lan_out: udp dport 53 accept; replies established)");
        let resolver = wan(53, 53);
        let names = [
            ("www.example.com", 1u16, wan(100, 80)),
            ("www.example.com", 28, v6("2001:db8:ffff::80")),
            ("news.example.net", 1, wan(100, 81)),
            ("cdn.example.org", 1, wan(100, 82)),
        ];
        for (i, (name, qt, addr)) in names.iter().enumerate() {
            let id = 0x1a2b + i as u16 * 0x111;
            let (client, cport) = if i < 2 {
                (lan(23), 40001 + i as u16)
            } else {
                (lan(42), 51000 + i as u16)
            };
            udp_exchange(
                &mut sc,
                i as u64 * 7 * MS,
                (client, Lan, cport),
                (resolver, Wan, 53),
                gw,
                &dns_query(id, name, *qt),
                Some(&dns_answer(id, name, *addr)),
                18 * MS,
            );
        }
        scenes.push(sc);
    }

    // 2. HTTPS from a desk to a web site (lan_out: meta mark set 0x1, accept).
    {
        let mut sc = Scene::new(
            "LAN HTTPS 198.18.0.23 -> 198.19.100.80:443 (lan_out: mark 0x1, accept; masqueraded)",
        );
        let mut c = TcpConv::new(
            60 * MS,
            (lan(23), Lan, 50412),
            (wan(100, 80), Wan, 443),
            None,
            Some(gw),
            0x1f3a_0001,
        );
        c.open(&mut sc, 21 * MS);
        let ch = tls_client_hello(&mut rng, "www.example.com");
        c.client_sends(&mut sc, 200, &ch, 21 * MS);
        let fl = tls_server_flight(&mut rng, 2400);
        c.server_sends(&mut sc, 2 * MS, &fl, 1448);
        let fin = tls_app_data(&mut rng, 58);
        c.client_pkt(&mut sc, 3 * MS, tf::PSH | tf::ACK, &fin, &[]);
        let req = tls_app_data(&mut rng, 190);
        c.client_sends(&mut sc, 400, &req, 22 * MS);
        let resp = tls_app_data(&mut rng, 3900);
        c.server_sends(&mut sc, 30 * MS, &resp, 1448);
        c.close(&mut sc, 2 * S, 21 * MS);
        scenes.push(sc);
    }

    // 3. Plain HTTP from another desk.
    {
        let mut sc = Scene::new(
            "LAN HTTP 198.18.0.42 -> 198.19.100.81:80 (lan_out: mark 0x1, accept; masqueraded)",
        );
        let mut c = TcpConv::new(
            900 * MS,
            (lan(42), Lan, 43122),
            (wan(100, 81), Wan, 80),
            None,
            Some(gw),
            0x0bad_cafe,
        );
        c.open(&mut sc, 35 * MS);
        c.client_sends(&mut sc, 150, &http_get("news.example.net", "/"), 35 * MS);
        c.server_sends(
            &mut sc,
            5 * MS,
            &http_ok(&PAGE.repeat(6), "text/html"),
            1448,
        );
        c.server_close(&mut sc, 2 * MS, 35 * MS);
        scenes.push(sc);
    }

    // 4. Pings from a desk, one a second (forward: icmp echo-request accept).
    {
        let mut sc = Scene::new(
            "LAN ping 198.18.0.23 -> 198.19.100.80, 4 requests (accepted, replies established)",
        );
        for i in 0..4u16 {
            ping(
                &mut sc,
                300 * MS + i as u64 * S,
                (lan(23), Lan),
                (wan(100, 80), Wan),
                gw,
                0x0c1e,
                i + 1,
                20 * MS,
                true,
            );
        }
        scenes.push(sc);
    }

    // 5. NTP and QUIC from desks.
    {
        let mut sc = Scene::new("LAN NTP (udp 123 accept) and QUIC (udp 443: mark 0x1, accept)");
        let (q, a) = (ntp(3, &mut rng), ntp(4, &mut rng));
        udp_exchange(
            &mut sc,
            1500 * MS,
            (lan(23), Lan, 123),
            (wan(123, 1), Wan, 123),
            gw,
            &q,
            Some(&a),
            25 * MS,
        );
        let dcid = rng.bytes(8);
        let scid = rng.bytes(8);
        let ci = quic_initial(&mut rng, &dcid, &[]);
        let si = quic_initial(&mut rng, &scid, &dcid);
        udp_exchange(
            &mut sc,
            2000 * MS,
            (lan(42), Lan, 58844),
            (wan(100, 80), Wan, 443),
            gw,
            &ci,
            Some(&si),
            21 * MS,
        );
        scenes.push(sc);
    }

    // 6. A desk's mail client talks SMTP to the world: refused.
    {
        let mut sc = Scene::new(
            "LAN SMTP 198.18.0.42 -> 198.19.25.25:25 and :587 (lan_out: reject with tcp reset)",
        );
        syn_probe(&mut sc, 2200 * MS, Lan, lan(42), 39001, wan(25, 25), 25, 0);
        syn_probe(&mut sc, 2210 * MS, Lan, lan(42), 39002, wan(25, 25), 587, 0);
        scenes.push(sc);
    }

    // 7. A DNS query to a dead resolver: the ICMP error that comes back is RELATED.
    {
        let mut sc =
            Scene::new("LAN DNS to 198.19.53.54, ICMP port unreachable back (ct related accept)");
        let q = dns_query(0x4242, "www.example.com", 1);
        sc.at(
            2500 * MS,
            l2(Lan, lan(23))
                .ip_id(0x2001)
                .udp(lan(23), wan(53, 54), 40007, 53, &q),
        );
        // What left the gateway, masqueraded, is what the error quotes.
        let sent = Builder::raw()
            .ttl(63)
            .ip_id(0x2001)
            .udp(gw, wan(53, 54), 40007, 53, &q);
        sc.at(
            2519 * MS,
            l2(Wan, wan(53, 54)).icmp_error(wan(53, 54), gw, 3, 3, &sent, sent.len()),
        );
        scenes.push(sc);
    }

    // 8. The public web site, straight to its DMZ address.
    {
        let mut sc = Scene::new(
            "WAN HTTPS 198.19.44.4 -> 198.18.1.10:443 (to_dmz: vmap 443 -> web: accept)",
        );
        let mut c = TcpConv::new(
            3 * S,
            (wan(44, 4), Wan, 61001),
            (web, Dmz, 443),
            None,
            None,
            0x7777_0001,
        );
        c.open(&mut sc, 400);
        let ch = tls_client_hello(&mut rng, "www.office.example");
        c.client_sends(&mut sc, 40 * MS, &ch, 300);
        let fl = tls_server_flight(&mut rng, 1900);
        c.server_sends(&mut sc, MS, &fl, 1448);
        let fin = tls_app_data(&mut rng, 58);
        c.client_pkt(&mut sc, 40 * MS, tf::PSH | tf::ACK, &fin, &[]);
        let req = tls_app_data(&mut rng, 160);
        c.client_sends(&mut sc, 200, &req, 300);
        let resp = tls_app_data(&mut rng, 1800);
        c.server_sends(&mut sc, 2 * MS, &resp, 1448);
        c.close(&mut sc, 500 * MS, 400);
        scenes.push(sc);
    }

    // 9. The same site through the port forward on the gateway's address.
    {
        let mut sc =
            Scene::new("WAN HTTP 198.19.45.5 -> 198.19.0.2:80, dnat to 198.18.1.10 (web: accept)");
        let mut c = TcpConv::new(
            4 * S,
            (wan(45, 5), Wan, 52555),
            (web, Dmz, 80),
            Some(gw),
            None,
            0x4545_0001,
        );
        c.open(&mut sc, 300);
        c.client_sends(&mut sc, 45 * MS, &http_get("office.example", "/"), 300);
        c.server_sends(&mut sc, MS, &http_ok(PAGE, "text/html"), 1448);
        c.server_close(&mut sc, MS, 300);
        scenes.push(sc);
    }

    // 10. SSH into the DMZ: the admin workstation may, another desk may not.
    {
        let mut sc = Scene::new("SSH 198.18.0.10 -> 198.18.1.10:22 (to_dmz: @mgmt_access accept)");
        let mut c = TcpConv::new(
            5 * S,
            (lan(10), Lan, 48022),
            (web, Dmz, 22),
            None,
            None,
            0x5511_0001,
        );
        c.open(&mut sc, 250);
        c.server_pkt(
            &mut sc,
            3 * MS,
            tf::PSH | tf::ACK,
            b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n",
            &[],
        );
        c.client_pkt(
            &mut sc,
            MS,
            tf::PSH | tf::ACK,
            b"SSH-2.0-OpenSSH_9.6\r\n",
            &[],
        );
        for (i, n) in [1400usize, 1080, 48, 520, 64, 36, 36, 36]
            .iter()
            .enumerate()
        {
            let blob = ssh_blob(&mut rng, *n);
            if i % 2 == 0 {
                c.client_pkt(&mut sc, 2 * MS, tf::PSH | tf::ACK, &blob, &[]);
            } else {
                c.server_pkt(&mut sc, MS, tf::PSH | tf::ACK, &blob, &[]);
            }
        }
        c.close(&mut sc, 800 * MS, 250);
        scenes.push(sc);

        let mut sc =
            Scene::new("SSH 198.18.0.42 -> 198.18.1.10:22 (ssh_in: log, reject with tcp reset)");
        syn_probe(&mut sc, 5500 * MS, Lan, lan(42), 48100, web, 22, 0);
        scenes.push(sc);
    }

    // 11. PostgreSQL in the DMZ: admin yes, anyone else no.
    {
        let mut sc = Scene::new("PostgreSQL 198.18.0.10 -> 198.18.1.10:5432 (@mgmt_access accept)");
        let mut c = TcpConv::new(
            6 * S,
            (lan(10), Lan, 49432),
            (web, Dmz, 5432),
            None,
            None,
            0x6543_0001,
        );
        c.open(&mut sc, 250);
        c.client_sends(&mut sc, 300, &[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f], 250); // SSLRequest
        c.server_pkt(&mut sc, 200, tf::PSH | tf::ACK, b"S", &[]);
        c.close(&mut sc, 30 * MS, 250);
        scenes.push(sc);

        let mut sc = Scene::new("PostgreSQL 198.18.0.42 -> 198.18.1.10:5432, 2 tries (not in @mgmt_access: forward drop)");
        syn_probe(&mut sc, 6200 * MS, Lan, lan(42), 49500, web, 5432, 1);
        scenes.push(sc);
    }

    // 12. The remote operations host: SSH and metrics, both listed in @mgmt_access.
    {
        let mut sc =
            Scene::new("Ops host 198.19.7.7 -> 198.18.1.10:22 and :9100 (@mgmt_access accept)");
        let mut c = TcpConv::new(
            7 * S,
            (wan(7, 7), Wan, 40222),
            (web, Dmz, 22),
            None,
            None,
            0x0707_0001,
        );
        c.open(&mut sc, 300);
        c.server_pkt(
            &mut sc,
            3 * MS,
            tf::PSH | tf::ACK,
            b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n",
            &[],
        );
        c.client_pkt(
            &mut sc,
            30 * MS,
            tf::PSH | tf::ACK,
            b"SSH-2.0-OpenSSH_9.3\r\n",
            &[],
        );
        let blob = ssh_blob(&mut rng, 1200);
        c.server_pkt(&mut sc, MS, tf::PSH | tf::ACK, &blob, &[]);
        c.close(&mut sc, 300 * MS, 300);
        let mut m = TcpConv::new(
            7600 * MS,
            (wan(7, 7), Wan, 40299),
            (web, Dmz, 9100),
            None,
            None,
            0x0707_0002,
        );
        m.open(&mut sc, 300);
        m.client_sends(
            &mut sc,
            30 * MS,
            &http_get("198.18.1.10:9100", "/metrics"),
            300,
        );
        let metrics = "# TYPE node_load1 gauge\nnode_load1 0.12\n# TYPE node_memory_MemAvailable_bytes gauge\nnode_memory_MemAvailable_bytes 3.123e+09\n";
        m.server_sends(
            &mut sc,
            2 * MS,
            &http_ok(metrics, "text/plain; version=0.0.4"),
            1448,
        );
        m.server_close(&mut sc, MS, 300);
        scenes.push(sc);
    }

    // 13. Password guessing from the WAN.
    {
        let mut sc = Scene::new(
            "SSH 198.19.88.8 -> 198.18.1.10:22, 3 attempts (ssh_in: reject with tcp reset)",
        );
        for i in 0..3u16 {
            syn_probe(
                &mut sc,
                8 * S + i as u64 * 400 * MS,
                Wan,
                wan(88, 8),
                33000 + i * 17,
                web,
                22,
                0,
            );
        }
        scenes.push(sc);
    }

    // 14. A port scan of the DMZ and the LAN.
    {
        let mut sc = Scene::new(
            "Port scan from 198.19.66.99 (mostly forward drop; 22 rejected; 80 answered)",
        );
        let scanner = wan(66, 99);
        let mut t = 9 * S;
        for p in [
            21u16, 22, 23, 25, 80, 110, 135, 139, 443, 445, 1433, 3306, 3389, 5432, 5900, 8080,
            8443, 9100,
        ] {
            syn_probe(&mut sc, t, Wan, scanner, 44444, web, p, 0);
            if p == 80 || p == 443 {
                // The web server answers; the scanner resets instead of completing.
                let isn = 44444u32.wrapping_mul(0x01000193) ^ p as u32;
                let sa = Tcp::new(p, 44444, tf::SYN | tf::ACK)
                    .seq(0x00c0_ffee ^ p as u32)
                    .ack(isn + 1)
                    .window(65160)
                    .options(&SYN_OPTS);
                sc.at(
                    t + 350,
                    l2(Dmz, web).dont_fragment().tcp(web, scanner, &sa, &[]),
                );
                let rst = Tcp::new(44444, p, tf::RST).seq(isn + 1).window(0);
                sc.at(t + 700, l2(Wan, scanner).tcp(scanner, web, &rst, &[]));
            }
            t += 2 * MS;
        }
        // Another DMZ address whose port 80 is not published: web chain rejects.
        syn_probe(&mut sc, t, Wan, scanner, 44444, v4(198, 18, 1, 20), 80, 0);
        // The desks are not reachable from outside at all.
        for (i, p) in [445u16, 3389].iter().enumerate() {
            syn_probe(
                &mut sc,
                t + (i as u64 + 1) * 2 * MS,
                Wan,
                scanner,
                44444,
                lan(23),
                *p,
                0,
            );
        }
        // XMAS and NULL scans: flag combinations conntrack calls INVALID.
        let xmas = Tcp::new(44445, 8080, tf::FIN | tf::PSH | tf::URG).seq(77);
        sc.at(t + 10 * MS, l2(Wan, scanner).tcp(scanner, web, &xmas, &[]));
        let xmas2 = Tcp::new(44445, 22, tf::FIN | tf::PSH | tf::URG).seq(77);
        sc.at(t + 12 * MS, l2(Wan, scanner).tcp(scanner, web, &xmas2, &[]));
        let null = Tcp::new(44446, 3389, 0).seq(78);
        sc.at(t + 14 * MS, l2(Wan, scanner).tcp(scanner, web, &null, &[]));
        scenes.push(sc);
    }

    // 15. Sources on the block list.
    {
        let mut sc = Scene::new("Blocked sources 198.19.13.37, 198.19.66.5, 198.19.200.7, 2001:db8:bad::5 (forward: @blocklist drop)");
        syn_probe(&mut sc, 11 * S, Wan, wan(13, 37), 55123, web, 443, 2);
        syn_probe(&mut sc, 11200 * MS, Wan, wan(66, 5), 51000, web, 80, 0);
        for i in 0..2u16 {
            ping(
                &mut sc,
                11500 * MS + i as u64 * S,
                (wan(200, 7), Wan),
                (web, Dmz),
                wan(200, 7),
                0x0bad,
                i + 1,
                0,
                false,
            );
        }
        syn_probe(
            &mut sc,
            11700 * MS,
            Wan,
            v6("2001:db8:bad::5"),
            60606,
            web_srv6(),
            443,
            0,
        );
        scenes.push(sc);
    }

    // 16. A ping flood at the web server: the limit lets the first few through.
    {
        let mut sc = Scene::new("Ping flood 198.19.77.7 -> 198.18.1.10, 30 requests in 145 ms (limit rate over 10/s burst 5: 6 pass)");
        for i in 0..30u16 {
            // The kernel's limiter lets the burst of 5 through, then one more when a token
            // has come back 100 ms later; what got through is answered.
            let answered = i < 5 || i == 20;
            ping(
                &mut sc,
                14 * S + i as u64 * 5 * MS,
                (wan(77, 7), Wan),
                (web, Dmz),
                wan(77, 7),
                0x3131,
                i + 1,
                300,
                answered,
            );
        }
        scenes.push(sc);
    }

    // 17. IPv6: pings, HTTPS out and in, SSH from the IPv6 admin and from another desk.
    {
        let c6 = v6("2001:db8:0:1::23");
        let site6 = v6("2001:db8:ffff::80");
        let mut sc =
            Scene::new("IPv6 ping 2001:db8:0:1::23 -> 2001:db8:ffff::80, 3 requests (accepted)");
        for i in 0..3u16 {
            ping(
                &mut sc,
                16 * S + i as u64 * S,
                (c6, Lan),
                (site6, Wan),
                c6,
                0x0c16,
                i + 1,
                19 * MS,
                true,
            );
        }
        scenes.push(sc);

        let mut sc = Scene::new("IPv6 HTTPS 2001:db8:0:1::23 -> [2001:db8:ffff::80]:443, with an ICMPv6 packet-too-big (lan_out accept; related)");
        let mut c = TcpConv::new(
            16300 * MS,
            (c6, Lan, 50600),
            (site6, Wan, 443),
            None,
            None,
            0x6666_0001,
        );
        c.open(&mut sc, 19 * MS);
        let ch = tls_client_hello(&mut rng, "www.example.com");
        c.client_sends(&mut sc, 200, &ch, 19 * MS);
        let fl = tls_server_flight(&mut rng, 1500);
        c.server_sends(&mut sc, MS, &fl, 1428);
        let fin = tls_app_data(&mut rng, 58);
        c.client_pkt(&mut sc, 2 * MS, tf::PSH | tf::ACK, &fin, &[]);
        // A 1440-byte upload segment; a router beyond the gateway has a 1280-byte MTU.
        let up = tls_app_data(&mut rng, 1375);
        let big_seq = c.cseq;
        c.client_pkt(&mut sc, 5 * MS, tf::ACK, &up, &[]);
        let quoted = {
            let t = Tcp::new(50600, 443, tf::ACK)
                .seq(big_seq)
                .ack(c.sseq)
                .window(64240);
            Builder::raw().ttl(63).tcp(c6, site6, &t, &up)
        };
        let router = v6("2001:db8:ffff::1");
        let ptb = l2(Wan, router).icmp(router, c6, 2, 0, 1280, &quoted[..1232]);
        sc.at(c.t + 9 * MS, ptb);
        c.t += 10 * MS;
        // The client resends in two smaller segments.
        c.cseq = big_seq;
        c.client_pkt(&mut sc, MS, tf::ACK, &up[..1200], &[]);
        c.client_pkt(&mut sc, 100, tf::PSH | tf::ACK, &up[1200..], &[]);
        c.server_pkt(&mut sc, 19 * MS, tf::ACK, &[], &[]);
        c.close(&mut sc, 600 * MS, 19 * MS);
        scenes.push(sc);

        let mut sc = Scene::new(
            "IPv6 HTTPS 2001:db8:ffff:44::4 -> [2001:db8:0:2::10]:443 (vmap 443 -> web: accept)",
        );
        let mut c = TcpConv::new(
            17500 * MS,
            (v6("2001:db8:ffff:44::4"), Wan, 61600),
            (web_srv6(), Dmz, 443),
            None,
            None,
            0x6644_0001,
        );
        c.open(&mut sc, 400);
        let ch = tls_client_hello(&mut rng, "www.office.example");
        c.client_sends(&mut sc, 40 * MS, &ch, 300);
        let fl = tls_server_flight(&mut rng, 1200);
        c.server_sends(&mut sc, MS, &fl, 1428);
        c.close(&mut sc, 200 * MS, 400);
        scenes.push(sc);

        let mut sc =
            Scene::new("IPv6 SSH 2001:db8:0:1::10 -> [2001:db8:0:2::10]:22 (ssh_in: admin accept)");
        let mut c = TcpConv::new(
            18 * S,
            (v6("2001:db8:0:1::10"), Lan, 48222),
            (web_srv6(), Dmz, 22),
            None,
            None,
            0x6610_0001,
        );
        c.open(&mut sc, 250);
        c.server_pkt(
            &mut sc,
            3 * MS,
            tf::PSH | tf::ACK,
            b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n",
            &[],
        );
        c.client_pkt(
            &mut sc,
            MS,
            tf::PSH | tf::ACK,
            b"SSH-2.0-OpenSSH_9.6\r\n",
            &[],
        );
        c.close(&mut sc, 100 * MS, 250);
        scenes.push(sc);

        let mut sc = Scene::new(
            "IPv6 SSH 2001:db8:0:1::42 -> [2001:db8:0:2::10]:22 (ssh_in: reject with tcp reset)",
        );
        syn_probe(
            &mut sc,
            18500 * MS,
            Lan,
            v6("2001:db8:0:1::42"),
            48300,
            web_srv6(),
            22,
            0,
        );
        scenes.push(sc);
    }

    // 18. The DMZ server's own outbound traffic.
    {
        let mut sc =
            Scene::new("DMZ 198.18.1.10 outbound: DNS and HTTPS updates accepted, SMTP dropped");
        let q = dns_query(0x7171, "deb.example.org", 1);
        let a = dns_answer(0x7171, "deb.example.org", wan(150, 1));
        udp_exchange(
            &mut sc,
            19 * S,
            (web, Dmz, 33333),
            (wan(53, 53), Wan, 53),
            web,
            &q,
            Some(&a),
            18 * MS,
        );
        let mut c = TcpConv::new(
            19030 * MS,
            (web, Dmz, 41443),
            (wan(150, 1), Wan, 443),
            None,
            None,
            0x1500_0001,
        );
        c.open(&mut sc, 24 * MS);
        let ch = tls_client_hello(&mut rng, "deb.example.org");
        c.client_sends(&mut sc, 200, &ch, 24 * MS);
        let fl = tls_server_flight(&mut rng, 1000);
        c.server_sends(&mut sc, MS, &fl, 1448);
        c.close(&mut sc, 100 * MS, 24 * MS);
        syn_probe(&mut sc, 19500 * MS, Dmz, web, 42525, wan(25, 25), 25, 1);
        scenes.push(sc);
    }

    // 19. Odd but well-formed packets from the WAN.
    {
        let mut sc = Scene::new("Spoofed LAN source from wan0, stray ACK to a desk (forward drop)");
        // Claims to be a desk but arrives on wan0: the anti-spoofing rule.
        syn_probe(&mut sc, 21 * S, Wan, lan(99), 40404, web, 80, 0);
        // An ACK for no known connection, to a desk's address (after NAT it would be the
        // gateway's): nothing lets it in.
        let stray = Tcp::new(443, 51111, tf::ACK).seq(123_456).ack(654_321);
        sc.at(
            21100 * MS,
            l2(Wan, wan(90, 9)).tcp(wan(90, 9), lan(23), &stray, &[]),
        );
        scenes.push(sc);
    }

    // 20. Malformed frames: each shows up under its own reason in the malformed counters.
    {
        let mut sc = Scene::new("Malformed frames from wan0 (dropped: truncated/bad headers)");
        let src = wan(66, 200);
        let mut t = 22 * S;
        let mut next = |sc: &mut Scene, f: Vec<u8>| {
            sc.at(t, f);
            t += 3 * MS;
        };
        let good = || l2(Wan, src).tcp(src, web, &Tcp::new(40001, 80, tf::SYN).seq(1), &[]);
        // truncated-tcp: the IP packet is whole but holds only 12 bytes of TCP header.
        let seg = tcp_segment(src, web, &Tcp::new(40002, 80, tf::SYN), &[]);
        next(&mut sc, l2(Wan, src).ip(src, web, 6, &seg[..12]));
        // bad-ihl: IHL 3 (12 bytes), less than the minimum of 5.
        let mut f = good();
        hostile::set_ipv4_ihl(&mut f, LinkType::Ethernet, 3);
        next(&mut sc, f);
        // bad-tcp-doff: data offset 2 (8 bytes).
        let mut f = good();
        hostile::set_tcp_doff(&mut f, LinkType::Ethernet, 2);
        next(&mut sc, f);
        // bad-ipv4-total-length: says 1400 bytes, 40 present.
        let mut f = good();
        hostile::set_ipv4_total_length(&mut f, LinkType::Ethernet, 1400);
        next(&mut sc, f);
        // bad-udp-length: UDP length 200 in a 20-byte datagram.
        let mut f = l2(Wan, src).udp(src, web, 40003, 53, &[0u8; 12]);
        hostile::set_udp_length(&mut f, LinkType::Ethernet, 200);
        next(&mut sc, f);
        // bad-ipv6-payload-length: says 512, 20 present.
        let s6 = v6("2001:db8:ffff:66::200");
        let mut f = l2(Wan, s6).tcp(s6, web_srv6(), &Tcp::new(40004, 443, tf::SYN), &[]);
        hostile::set_ipv6_payload_length(&mut f, LinkType::Ethernet, 512);
        next(&mut sc, f);
        // tiny-fragment: a first fragment carrying only 8 bytes of the TCP header.
        let seg = tcp_segment(src, web, &Tcp::new(40005, 22, tf::SYN), &[]);
        next(
            &mut sc,
            l2(Wan, src)
                .ip_id(0x7777)
                .fragment(0, true)
                .ip(src, web, 6, &seg[..8]),
        );
        // truncated-ethernet: a 10-byte runt.
        next(&mut sc, good()[..10].to_vec());
        scenes.push(sc);
    }

    // 21. A last busy moment on the LAN: several desks browsing at once.
    {
        let mut sc = Scene::new(
            "LAN browsing burst: 198.18.0.57/.61/.77 -> 198.19.100.82:443 (lan_out accept)",
        );
        for (i, d) in [57u8, 61, 77].iter().enumerate() {
            let t0 = 24 * S + i as u64 * 40 * MS;
            let id = 0x5000 + i as u16;
            udp_exchange(
                &mut sc,
                t0,
                (lan(*d), Lan, 35000 + i as u16),
                (wan(53, 53), Wan, 53),
                gw,
                &dns_query(id, "cdn.example.org", 1),
                Some(&dns_answer(id, "cdn.example.org", wan(100, 82))),
                17 * MS,
            );
            let mut c = TcpConv::new(
                t0 + 20 * MS,
                (lan(*d), Lan, 52000 + i as u16 * 11),
                (wan(100, 82), Wan, 443),
                None,
                Some(gw),
                0x8200_0001 + i as u32,
            );
            c.open(&mut sc, 16 * MS);
            let ch = tls_client_hello(&mut rng, "cdn.example.org");
            c.client_sends(&mut sc, 200, &ch, 16 * MS);
            let fl = tls_server_flight(&mut rng, 1100 + i * 300);
            c.server_sends(&mut sc, MS, &fl, 1448);
            let fin = tls_app_data(&mut rng, 58);
            c.client_pkt(&mut sc, 2 * MS, tf::PSH | tf::ACK, &fin, &[]);
            let req = tls_app_data(&mut rng, 120);
            c.client_sends(&mut sc, 300, &req, 16 * MS);
            let resp = tls_app_data(&mut rng, 1400 + i * 500);
            c.server_sends(&mut sc, 8 * MS, &resp, 1448);
            c.close(&mut sc, 900 * MS, 16 * MS);
        }
        scenes.push(sc);
    }

    scenes
}

/// "1-3, 7, 9-12"
fn ranges(nums: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < nums.len() {
        let mut j = i;
        while j + 1 < nums.len() && nums[j + 1] == nums[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            format!("{}", nums[i])
        } else {
            format!("{}-{}", nums[i], nums[j])
        });
        i = j + 1;
    }
    out.join(", ")
}

fn main() {
    let out = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // crates/weir-wire -> the repository root.
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/gateway.pcap")
        });
    let scenes = build_scenes();

    // Merge the scenes in time order (ties: scene order, then order within the scene), and
    // make the timestamps strictly increasing.
    let mut all: BTreeMap<(u64, usize, usize), &[u8]> = BTreeMap::new();
    for (si, sc) in scenes.iter().enumerate() {
        for (fi, (t, f)) in sc.frames.iter().enumerate() {
            all.insert((*t, si, fi), f);
        }
    }
    let file =
        File::create(&out).unwrap_or_else(|e| panic!("cannot create {}: {e}", out.display()));
    let mut w = PcapWriter::new(BufWriter::new(file), LinkType::Ethernet).unwrap();
    let mut per_scene: Vec<Vec<usize>> = vec![Vec::new(); scenes.len()];
    let mut last = 0u64;
    let mut bytes = 0usize;
    for (n, ((t, si, _), f)) in all.iter().enumerate() {
        assert!(
            f.len() <= 1514,
            "packet {} of '{}' is {} bytes, more than an Ethernet MTU",
            n + 1,
            scenes[*si].name,
            f.len()
        );
        let t = if n == 0 { *t } else { (*t).max(last + 1) };
        last = t;
        w.write((EPOCH_US + t) * 1000, f).unwrap();
        per_scene[*si].push(n + 1);
        bytes += f.len();
    }
    w.into_inner().unwrap();

    println!(
        "wrote {} ({} packets, {} bytes of frames, {:.1} s)",
        out.display(),
        all.len(),
        bytes,
        last as f64 / 1e6
    );
    for (sc, nums) in scenes.iter().zip(&per_scene) {
        println!("  {:>3} pkts  #{}  {}", nums.len(), ranges(nums), sc.name);
    }
}
