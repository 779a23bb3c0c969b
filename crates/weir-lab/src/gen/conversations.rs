//! Random conversations between the hosts around the router ([`capture`], [`GenCapture`]):
//! TCP connections, UDP, ICMP echo and errors, fragments, extension headers, port forwards,
//! malformed packets and spoofed sources (for the reverse path filter).

use super::router::{Host, HostKind, World};
use super::rulesets::PORTS;
use crate::rng::Rng;
use crate::topology::{PacketIn, Topology};
use std::net::IpAddr;
use weir_wire::build::{tcp_flags as tf, Builder, Tcp};
use weir_wire::pcap::Packet;
use weir_wire::LinkType;

/// A generated capture: Ethernet frames and the input interface of each.
#[derive(Clone, Debug, Default)]
pub struct GenCapture {
    pub packets: Vec<Packet>,
    pub iifs: Vec<usize>,
}

impl GenCapture {
    fn push(&mut self, iif: usize, frame: Vec<u8>) {
        let ts = 1_700_000_000_000_000_000u64 + self.packets.len() as u64 * 1_000_000;
        self.packets.push(Packet {
            ts_nanos: ts,
            orig_len: frame.len() as u32,
            data: frame,
            link: LinkType::Ethernet,
        });
        self.iifs.push(iif);
    }

    /// The topology file for this capture on the world's router.
    pub fn topology(&self, w: &World) -> Topology {
        let mut t = w.topo.clone();
        t.packets = self
            .iifs
            .iter()
            .map(|&i| PacketIn {
                iif: w.router.ifaces[i].name.clone(),
            })
            .collect();
        t
    }
}

fn builder(w: &World, from: &Host, ttl: u8) -> Builder {
    Builder::new()
        .macs(from.mac, w.router.ifaces[from.iface].mac)
        .ttl(ttl)
}

fn pick_pair<'a>(rng: &mut Rng, w: &'a World, v6: bool) -> (&'a Host, &'a Host) {
    let hs: Vec<&Host> = w.hosts.iter().filter(|h| h.addr.is_ipv6() == v6).collect();
    loop {
        let a = *rng.pick(&hs);
        let b = *rng.pick(&hs);
        if a.iface != b.iface {
            return (a, b);
        }
    }
}

fn ttl_of(rng: &mut Rng, h: &Host) -> u8 {
    match h.kind {
        HostKind::OnLink => *rng.pick(&[64, 64, 64, 128, 255]),
        HostKind::Behind => *rng.pick(&[57, 63, 118, 240]),
    }
}

/// The WAN interface of the world's router (index into its interfaces).
const WAN: usize = 2;

/// The router's address on the WAN (what masquerade uses, what a port forward targets).
fn wan_addr(v6: bool) -> IpAddr {
    if v6 {
        "2001:db8:ffff::2".parse().unwrap()
    } else {
        "198.19.0.2".parse().unwrap()
    }
}

/// The DMZ server port forwards go to.
fn dmz_server(v6: bool) -> IpAddr {
    if v6 {
        "2001:db8:0:2::10".parse().unwrap()
    } else {
        "198.18.1.16".parse().unwrap()
    }
}

/// A random capture of a few conversations (at most `max` packets).
pub fn capture(rng: &mut Rng, w: &World, max: usize) -> GenCapture {
    let mut cap = GenCapture::default();
    while cap.packets.len() + 8 <= max {
        conversation(rng, w, &mut cap);
    }
    cap
}

fn conversation(rng: &mut Rng, w: &World, cap: &mut GenCapture) {
    let v6 = rng.chance(35);
    let (c, s) = pick_pair(rng, w, v6);
    let (ct, st) = (ttl_of(rng, c), ttl_of(rng, s));
    let cport = if rng.chance(85) {
        rng.range(32768, 60999) as u16
    } else {
        *rng.pick(&PORTS)
    };
    let sport = if rng.chance(85) {
        *rng.pick(&PORTS)
    } else {
        rng.range(1000, 1010) as u16
    };
    let payload = |rng: &mut Rng| {
        let n = *rng.pick(&[0usize, 1, 12, 40, 100, 300]);
        rng.bytes(n)
    };
    let tos = if rng.chance(20) {
        Some((*rng.pick(&[8u8, 34, 46, 10]), rng.below(4) as u8))
    } else {
        None
    };
    let builder = |w: &World, h: &Host, ttl: u8| {
        let b = builder(w, h, ttl);
        match tos {
            Some((d, e)) => b.tos(d, e),
            None => b,
        }
    };
    // answers addressed to the router's WAN address, as they come back when the router
    // masquerades the client (a ruleset without NAT delivers them to the router itself)
    let wan = wan_addr(v6);
    let masq = c.iface != WAN && s.iface == WAN && rng.chance(40);
    let c_dst = if masq { wan } else { c.addr };
    match rng.weighted(&[30, 20, 12, 10, 5, 7, 5, 5, 4, 3, 8, 6, 8]) {
        0 => {
            // TCP: handshake, data both ways, FIN or RST; sometimes cut short
            let (mut a, mut b) = (rng.next_u64() as u32, rng.next_u64() as u32);
            let steps = rng.range(1, 7);
            // two connections in three announce an MSS in their SYN and SYN/ACK (MSS
            // clamping rewrites it), chosen from the ISN (no draw of the generator)
            let mss = [9000u16, 1460, 1380, 536][(a >> 8) as usize % 4];
            let with_mss = a % 3 != 0;
            let seg = |from_client: bool, flags: u8, seq: u32, ack: u32, data: &[u8]| {
                let (h, dst, ttl, sp, dp) = if from_client {
                    (c, s.addr, ct, cport, sport)
                } else {
                    (s, c_dst, st, sport, cport)
                };
                let mut t = Tcp::new(sp, dp, flags).seq(seq).ack(ack);
                if with_mss && flags & tf::SYN != 0 {
                    t = t.options(&[2, 4, (mss >> 8) as u8, mss as u8, 1, 1, 4, 2]);
                }
                (h.iface, builder(w, h, ttl).tcp(h.addr, dst, &t, data))
            };
            let mut put = |(i, f): (usize, Vec<u8>)| cap.push(i, f);
            put(seg(true, tf::SYN, a, 0, &[]));
            a = a.wrapping_add(1);
            if steps > 1 {
                put(seg(false, tf::SYN | tf::ACK, b, a, &[]));
                b = b.wrapping_add(1);
            }
            if steps > 2 {
                put(seg(true, tf::ACK, a, b, &[]));
            }
            if steps > 3 {
                let d = payload(rng);
                put(seg(true, tf::PSH | tf::ACK, a, b, &d));
                a = a.wrapping_add(d.len() as u32);
            }
            if steps > 4 {
                let d = payload(rng);
                put(seg(false, tf::PSH | tf::ACK, b, a, &d));
                b = b.wrapping_add(d.len() as u32);
            }
            if steps > 3 && rng.chance(25) {
                // far outside the receiver's window (connection tracking: invalid)
                let d = payload(rng);
                let from_client = rng.chance(50);
                let (sq, ak) = if from_client { (a, b) } else { (b, a) };
                put(seg(
                    from_client,
                    tf::PSH | tf::ACK,
                    sq.wrapping_add(0x4000_0000),
                    ak,
                    &d,
                ));
            }
            if steps > 2 && rng.chance(15) {
                // an ICMP error about the client's segment, on its way back (related)
                let orig = Builder::raw().ttl(1).tcp(
                    c.addr,
                    s.addr,
                    &Tcp::new(cport, sport, tf::ACK).seq(a).ack(b),
                    &[],
                );
                let (t, code) = if v6 { (1u8, 4u8) } else { (3u8, 3u8) };
                put((
                    s.iface,
                    builder(w, s, st).icmp_error(
                        s.addr,
                        c.addr,
                        t,
                        code,
                        &orig,
                        orig.len().min(64),
                    ),
                ));
            }
            if steps > 5 {
                if rng.chance(75) {
                    put(seg(true, tf::FIN | tf::ACK, a, b, &[]));
                    put(seg(false, tf::FIN | tf::ACK, b, a.wrapping_add(1), &[]));
                } else {
                    put(seg(false, tf::RST, b, 0, &[]));
                }
            }
        }
        1 => {
            let d = payload(rng);
            let req = builder(w, c, ct).udp(c.addr, s.addr, cport, sport, &d);
            cap.push(c.iface, req);
            if rng.chance(20) {
                // port unreachable quoting the request (related to it)
                let orig = Builder::raw().ttl(ct).udp(c.addr, s.addr, cport, sport, &d);
                let (t, code) = if v6 { (1u8, 4u8) } else { (3u8, 3u8) };
                cap.push(
                    s.iface,
                    builder(w, s, st).icmp_error(
                        s.addr,
                        c.addr,
                        t,
                        code,
                        &orig,
                        orig.len().min(64),
                    ),
                );
            }
            for _ in 0..rng.range(0, 2) {
                let d = payload(rng);
                cap.push(
                    s.iface,
                    builder(w, s, st).udp(s.addr, c_dst, sport, cport, &d),
                );
            }
        }
        2 => {
            let id = rng.below(65536) as u16;
            for seq in 0..rng.range(1, 2) as u16 {
                let d = payload(rng);
                cap.push(
                    c.iface,
                    builder(w, c, ct).icmp_echo(c.addr, s.addr, true, id, seq, &d),
                );
                if rng.chance(70) {
                    cap.push(
                        s.iface,
                        builder(w, s, st).icmp_echo(s.addr, c_dst, false, id, seq, &d),
                    );
                }
            }
        }
        3 => {
            // to the router itself
            let dsts: Vec<IpAddr> = w
                .router_addrs
                .iter()
                .copied()
                .filter(|a| a.is_ipv6() == v6)
                .collect();
            let d = *rng.pick(&dsts);
            let b = builder(w, c, ct);
            let f = match rng.below(3) {
                0 => b.tcp(
                    c.addr,
                    d,
                    &Tcp::new(cport, *rng.pick(&[22, 53, 80]), tf::SYN),
                    &[],
                ),
                1 => b.udp(c.addr, d, cport, *rng.pick(&[53, 67, 123]), &payload(rng)),
                _ => b.icmp_echo(c.addr, d, true, 7, 1, &payload(rng)),
            };
            cap.push(c.iface, f);
        }
        4 => {
            // TTL 1 and 2: not forwarded / forwarded with 1
            let ttl = *rng.pick(&[1u8, 2]);
            cap.push(
                c.iface,
                builder(w, c, ttl).udp(c.addr, s.addr, cport, 33434, &[]),
            );
        }
        5 => {
            let flags = *rng.pick(&[
                tf::FIN | tf::PSH | tf::URG,
                0,
                tf::RST,
                tf::SYN | tf::FIN,
                tf::RST | tf::ACK,
                tf::ACK,
                tf::FIN,
                tf::SYN | tf::ECE | tf::CWR,
            ]);
            cap.push(
                c.iface,
                builder(w, c, ct).tcp(
                    c.addr,
                    s.addr,
                    &Tcp::new(cport, sport, flags).seq(rng.next_u64() as u32),
                    &payload(rng),
                ),
            );
        }
        6 => {
            // a spoofed source: arrives on an interface where it does not live
            let iif = rng.below(w.router.ifaces.len() as u64) as usize;
            let f = Builder::new()
                .macs(c.mac, w.router.ifaces[iif].mac)
                .ttl(ct)
                .tcp(c.addr, s.addr, &Tcp::new(cport, sport, tf::SYN), &[]);
            cap.push(iif, f);
        }
        7 => {
            // an ICMP error from the server quoting the client's datagram
            let orig = Builder::raw()
                .ttl(1)
                .udp(c.addr, s.addr, cport, sport, &payload(rng));
            let (t, code) = if v6 {
                (*rng.pick(&[1u8, 3]), 0)
            } else {
                (*rng.pick(&[3u8, 11]), *rng.pick(&[0u8, 1, 3]))
            };
            let keep = if v6 { 48 } else { 28 };
            cap.push(
                s.iface,
                builder(w, s, st).icmp_error(
                    s.addr,
                    c.addr,
                    t,
                    code,
                    &orig,
                    keep.max(orig.len().min(64)),
                ),
            );
        }
        8 => {
            // fragments: a first and a later one (no reassembly without conntrack)
            let d = rng.bytes(64);
            let id = rng.below(65536) as u16;
            let first = builder(w, c, ct)
                .ip_id(id)
                .fragment(0, true)
                .udp(c.addr, s.addr, cport, sport, &d);
            cap.push(c.iface, first);
            // "more fragments" set on the later one too: never a whole datagram, so a kernel
            // that reassembles (connection tracking on) holds both
            let later = builder(w, c, ct).ip_id(id).fragment(9, true).ip(
                c.addr,
                s.addr,
                17,
                &rng.bytes(24),
            );
            cap.push(c.iface, later);
        }
        10 => hostile(rng, w, cap, c, s, ct, cport, sport),
        12 => spoofed(rng, w, cap, v6, ct, cport, sport),
        11 => {
            // a port forward: a WAN host to the router's WAN address, the answer from the DMZ
            // server a `dnat` would send it to
            let clients: Vec<&Host> = w
                .hosts
                .iter()
                .filter(|h| h.iface == WAN && h.addr.is_ipv6() == v6)
                .collect();
            let client = *rng.pick(&clients);
            let srv_addr = dmz_server(v6);
            let Some(server) = w.hosts.iter().find(|h| h.addr == srv_addr) else {
                return;
            };
            let dport = *rng.pick(&[80u16, 443, 8080]);
            let sport_srv = if dport == 8080 { 80 } else { dport };
            let (a, b) = (rng.next_u64() as u32, rng.next_u64() as u32);
            let tc = ttl_of(rng, client);
            cap.push(
                client.iface,
                builder(w, client, tc).tcp(
                    client.addr,
                    wan,
                    &Tcp::new(cport, dport, tf::SYN).seq(a),
                    &[],
                ),
            );
            cap.push(
                server.iface,
                builder(w, server, 64).tcp(
                    server.addr,
                    client.addr,
                    &Tcp::new(sport_srv, cport, tf::SYN | tf::ACK)
                        .seq(b)
                        .ack(a.wrapping_add(1)),
                    &[],
                ),
            );
            if rng.chance(70) {
                cap.push(
                    client.iface,
                    builder(w, client, tc).tcp(
                        client.addr,
                        wan,
                        &Tcp::new(cport, dport, tf::ACK)
                            .seq(a.wrapping_add(1))
                            .ack(b.wrapping_add(1)),
                        &[],
                    ),
                );
            }
        }
        _ => {
            // IPv6 extension headers in front of TCP (IPv4: options)
            if v6 {
                let b = builder(w, c, ct);
                let b = if rng.chance(50) {
                    b.hop_by_hop()
                } else {
                    b.dest_opts()
                };
                cap.push(
                    c.iface,
                    b.tcp(c.addr, s.addr, &Tcp::new(cport, sport, tf::SYN), &[]),
                );
            } else {
                let b = builder(w, c, ct).ipv4_options(&[1, 1, 1, 1]);
                cap.push(
                    c.iface,
                    b.tcp(c.addr, s.addr, &Tcp::new(cport, sport, tf::SYN), &[]),
                );
            }
        }
    }
}

/// A packet with a spoofed source, for the reverse path filter: a source that routes out of
/// another interface than the one the packet arrives on (strict drops it, loose lets it
/// through), or (IPv4) one that no route covers (both drop it); to a host behind another
/// interface or to the router itself; sometimes the destination answers (a new connection if
/// the filter dropped the first packet, its reply if not).
fn spoofed(
    rng: &mut Rng,
    w: &World,
    cap: &mut GenCapture,
    v6: bool,
    ttl: u8,
    cport: u16,
    sport: u16,
) {
    let n = w.router.ifaces.len();
    let iif = loop {
        let i = rng.below(n as u64) as usize;
        // an interface with an address of the family (the IPv6-only one takes IPv4 too,
        // sometimes: unfiltered)
        if v6 || i != 3 || rng.chance(20) {
            break i;
        }
    };
    let src = if !v6 && rng.chance(35) {
        *rng.pick(&w.unrouted4)
    } else {
        let others: Vec<&Host> = w
            .hosts
            .iter()
            .filter(|h| h.addr.is_ipv6() == v6 && h.iface != iif)
            .collect();
        rng.pick(&others).addr
    };
    let to_router = rng.chance(20);
    let dst = if to_router {
        let d: Vec<IpAddr> = w
            .router_addrs
            .iter()
            .copied()
            .filter(|a| a.is_ipv6() == v6)
            .collect();
        *rng.pick(&d)
    } else {
        let d: Vec<&Host> = w
            .hosts
            .iter()
            .filter(|h| h.addr.is_ipv6() == v6 && h.iface != iif)
            .collect();
        rng.pick(&d).addr
    };
    // from a host on the arrival link, or from its gateway
    let on_iif: Vec<&Host> = w.hosts.iter().filter(|h| h.iface == iif).collect();
    let mac = if on_iif.is_empty() {
        crate::model::peer_mac(iif)
    } else {
        rng.pick(&on_iif).mac
    };
    let b = Builder::new().macs(mac, w.router.ifaces[iif].mac).ttl(ttl);
    let kind = rng.below(3);
    let f = match kind {
        0 => b.tcp(src, dst, &Tcp::new(cport, sport, tf::SYN).seq(7), &[]),
        1 => b.udp(src, dst, cport, sport, &rng.bytes(12)),
        _ => b.icmp_echo(src, dst, true, 0x5150, 1, &rng.bytes(8)),
    };
    cap.push(iif, f);
    // the destination answers the spoofed source
    if to_router || !rng.chance(40) {
        return;
    }
    let Some(server) = w.hosts.iter().find(|h| h.addr == dst) else {
        return;
    };
    let b = builder(w, server, ttl_of(rng, server));
    let f = match kind {
        0 => b.tcp(
            dst,
            src,
            &Tcp::new(sport, cport, tf::SYN | tf::ACK).seq(99).ack(8),
            &[],
        ),
        1 => b.udp(dst, src, sport, cport, &rng.bytes(12)),
        _ => b.icmp_echo(dst, src, false, 0x5150, 1, &rng.bytes(8)),
    };
    cap.push(server.iface, f);
}

/// Malformed and unusual packets: what the kernel's IP input drops before any hook, and what
/// reaches the hooks with a broken transport header.
#[allow(clippy::too_many_arguments)]
fn hostile(
    rng: &mut Rng,
    w: &World,
    cap: &mut GenCapture,
    c: &Host,
    s: &Host,
    ttl: u8,
    cport: u16,
    sport: u16,
) {
    use weir_wire::build::hostile as h;
    let e = LinkType::Ethernet;
    let b = builder(w, c, ttl);
    let n = *rng.pick(&[0usize, 4, 30]);
    let data = rng.bytes(n);
    let tcp = |b: &Builder| {
        b.tcp(
            c.addr,
            s.addr,
            &Tcp::new(cport, sport, tf::SYN | tf::ACK),
            &data,
        )
    };
    let udp = |b: &Builder| b.udp(c.addr, s.addr, cport, sport, &data);
    let f = match rng.below(12) {
        0 => {
            let mut f = tcp(&b);
            h::set_tcp_doff(&mut f, e, *rng.pick(&[0u8, 3, 4]));
            f
        }
        1 => {
            let mut f = tcp(&b);
            h::set_tcp_doff(&mut f, e, 15);
            f
        }
        2 => {
            let mut f = udp(&b);
            h::set_udp_length(&mut f, e, *rng.pick(&[0u16, 4, 7]));
            f
        }
        3 => {
            let mut f = udp(&b);
            h::set_udp_length(&mut f, e, 8 + data.len() as u16 + 20);
            f
        }
        4 if c.addr.is_ipv4() => {
            let mut f = udp(&b);
            f[24] ^= 0x5a; // the IPv4 header checksum
            f
        }
        5 if c.addr.is_ipv4() => {
            let mut f = udp(&b);
            let n = (f.len() - 14) as u16;
            h::set_ipv4_total_length(&mut f, e, n + 16);
            f
        }
        6 => {
            // link padding with garbage after the IP packet
            let mut f = udp(&b);
            let n = f.len();
            f.resize(n.max(60) + 6, 0xee);
            f
        }
        7 => b.clone().vlan(100).udp(c.addr, s.addr, cport, sport, &data),
        8 if c.addr.is_ipv6() => b
            .clone()
            .hop_by_hop()
            .dest_opts()
            .routing()
            .dest_opts()
            .tcp(c.addr, s.addr, &Tcp::new(cport, sport, tf::SYN), &[]),
        9 => {
            // an ICMP header cut to 4 bytes
            let (p, t) = if c.addr.is_ipv4() {
                (1u8, 8u8)
            } else {
                (58, 128)
            };
            b.ip(c.addr, s.addr, p, &[t, 0, 0x12, 0x34])
        }
        10 if c.addr.is_ipv4() => b
            .clone()
            .ipv4_options(&[1, 1, 1, 0])
            .udp(c.addr, s.addr, cport, sport, &data),
        _ if c.addr.is_ipv6() => {
            // payload length shorter than what follows: the rest is trimmed
            let mut f = udp(&b);
            let n = (f.len() - 14 - 40) as u16;
            h::set_ipv6_payload_length(&mut f, e, n - (data.len() as u16).min(4));
            f
        }
        _ => {
            let mut f = tcp(&b);
            h::set_tcp_doff(&mut f, e, 4);
            f
        }
    };
    cap.push(c.iface, f);
}
