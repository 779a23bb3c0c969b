//! Building test and example packets, with correct checksums.
//!
//! The one-liners ([`tcp4`], [`udp4`], [`icmp4_echo`], [`tcp6`], [`udp6`], [`icmp6_echo`])
//! give Ethernet frames with default MAC addresses. A [`Builder`] sets the rest: raw IP link,
//! VLAN / QinQ tags, TTL, DSCP/ECN, IP id, IPv4 options, IPv6 extension headers, fragment
//! fields; its terminal methods ([`Builder::tcp`], [`Builder::udp`], [`Builder::icmp_echo`],
//! [`Builder::icmp`], [`Builder::ip`]) pick IPv4 or IPv6 from the addresses given.
//!
//! [`hostile`] turns good frames into the malformed ones a firewall must survive: bad IHL,
//! lying length fields, bad TCP data offset, ICMP errors quoting cut-short packets.
//!
//! This module allocates freely; it is for tests, examples and tools, not the data path.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::checksum::{checksum, checksum_with, pseudo_v4, pseudo_v6, udp_final};
use crate::meta::{proto, LinkType, ETH_P_8021AD, ETH_P_8021Q, ETH_P_IP, ETH_P_IPV6};

/// TCP flag bits, as in the 8-bit flag byte (`tcp flags`).
pub mod tcp_flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
    pub const ECE: u8 = 0x40;
    pub const CWR: u8 = 0x80;
}

/// Default source MAC of built frames.
pub const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// Default destination MAC of built frames.
pub const DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

/// A TCP header to build. `Tcp::new(sport, dport, flags)` then set what else matters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tcp {
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
    pub urgptr: u16,
    /// Raw option bytes (padded with zeros to a multiple of 4).
    pub options: Vec<u8>,
    /// Override the data offset nibble (hostile packets); the header layout is not changed.
    pub doff: Option<u8>,
}

impl Tcp {
    pub fn new(sport: u16, dport: u16, flags: u8) -> Tcp {
        Tcp {
            sport,
            dport,
            seq: 1000,
            ack: if flags & tcp_flags::ACK != 0 { 2000 } else { 0 },
            flags,
            window: 64240,
            urgptr: 0,
            options: Vec::new(),
            doff: None,
        }
    }
    pub fn seq(mut self, seq: u32) -> Tcp {
        self.seq = seq;
        self
    }
    pub fn ack(mut self, ack: u32) -> Tcp {
        self.ack = ack;
        self
    }
    pub fn window(mut self, w: u16) -> Tcp {
        self.window = w;
        self
    }
    pub fn urgptr(mut self, u: u16) -> Tcp {
        self.urgptr = u;
        self
    }
    pub fn options(mut self, o: &[u8]) -> Tcp {
        self.options = o.to_vec();
        self
    }

    /// The header bytes with a zero checksum.
    fn header(&self) -> Vec<u8> {
        let mut opts = self.options.clone();
        opts.resize(opts.len().div_ceil(4) * 4, 0);
        let doff = self.doff.unwrap_or((5 + opts.len() / 4) as u8);
        let mut h = Vec::with_capacity(20 + opts.len());
        h.extend_from_slice(&self.sport.to_be_bytes());
        h.extend_from_slice(&self.dport.to_be_bytes());
        h.extend_from_slice(&self.seq.to_be_bytes());
        h.extend_from_slice(&self.ack.to_be_bytes());
        h.push(doff << 4);
        h.push(self.flags);
        h.extend_from_slice(&self.window.to_be_bytes());
        h.extend_from_slice(&[0, 0]);
        h.extend_from_slice(&self.urgptr.to_be_bytes());
        h.extend_from_slice(&opts);
        h
    }
}

/// The pseudo-header sum for a transport segment of `len` bytes.
fn pseudo(src: IpAddr, dst: IpAddr, proto: u8, len: usize) -> u64 {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => pseudo_v4(s.octets(), d.octets(), proto, len as u16),
        (IpAddr::V6(s), IpAddr::V6(d)) => pseudo_v6(s.octets(), d.octets(), proto, len as u32),
        _ => panic!("build: mixed address families {src} / {dst}"),
    }
}

/// A complete TCP segment (header + payload) with its checksum.
pub fn tcp_segment(src: IpAddr, dst: IpAddr, t: &Tcp, payload: &[u8]) -> Vec<u8> {
    let mut seg = t.header();
    seg.extend_from_slice(payload);
    let c = checksum_with(pseudo(src, dst, proto::TCP, seg.len()), &seg);
    seg[16..18].copy_from_slice(&c.to_be_bytes());
    seg
}

/// A complete UDP datagram with its checksum.
pub fn udp_datagram(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let len = 8 + payload.len();
    let mut seg = Vec::with_capacity(len);
    seg.extend_from_slice(&sport.to_be_bytes());
    seg.extend_from_slice(&dport.to_be_bytes());
    seg.extend_from_slice(&(len as u16).to_be_bytes());
    seg.extend_from_slice(&[0, 0]);
    seg.extend_from_slice(payload);
    let c = udp_final(checksum_with(pseudo(src, dst, proto::UDP, len), &seg));
    seg[6..8].copy_from_slice(&c.to_be_bytes());
    seg
}

/// A complete ICMP (IPv4 source) or ICMPv6 (IPv6 source) message with its checksum.
/// `rest` is the second 32-bit word (id + sequence for echo, unused / MTU for errors).
pub fn icmp_message(
    src: IpAddr,
    dst: IpAddr,
    typ: u8,
    code: u8,
    rest: u32,
    body: &[u8],
) -> Vec<u8> {
    let mut m = Vec::with_capacity(8 + body.len());
    m.push(typ);
    m.push(code);
    m.extend_from_slice(&[0, 0]);
    m.extend_from_slice(&rest.to_be_bytes());
    m.extend_from_slice(body);
    let c = match src {
        IpAddr::V4(_) => checksum(&m),
        IpAddr::V6(_) => checksum_with(pseudo(src, dst, proto::ICMPV6, m.len()), &m),
    };
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Ext {
    /// A generic extension header: type and body after the next-header/length bytes.
    Generic(u8, Vec<u8>),
    Fragment,
}

/// Builds frames. Defaults: Ethernet with [`SRC_MAC`] / [`DST_MAC`], no VLAN, TTL 64, DSCP/ECN
/// 0, IP id 1, DF clear, no options or extension headers, not a fragment.
#[derive(Clone, Debug)]
pub struct Builder {
    link: LinkType,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    vlans: Vec<(u16, u16)>,
    ttl: u8,
    tos: u8,
    ip_id: u16,
    df: bool,
    flow_label: u32,
    ipv4_options: Vec<u8>,
    ext: Vec<Ext>,
    /// Fragment offset in 8-byte units and "more fragments".
    frag: Option<(u16, bool)>,
    frag_id: u32,
    ethertype: Option<u16>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            link: LinkType::Ethernet,
            src_mac: SRC_MAC,
            dst_mac: DST_MAC,
            vlans: Vec::new(),
            ttl: 64,
            tos: 0,
            ip_id: 1,
            df: false,
            flow_label: 0,
            ipv4_options: Vec::new(),
            ext: Vec::new(),
            frag: None,
            frag_id: 0x1234,
            ethertype: None,
        }
    }
}

impl Builder {
    /// Ethernet frames.
    pub fn new() -> Builder {
        Builder::default()
    }
    /// Raw IP frames (no link header).
    pub fn raw() -> Builder {
        Builder {
            link: LinkType::RawIp,
            ..Builder::default()
        }
    }
    /// The link type of the frames built.
    pub fn link_type(&self) -> LinkType {
        self.link
    }
    pub fn link(mut self, link: LinkType) -> Builder {
        self.link = link;
        self
    }
    pub fn macs(mut self, src: [u8; 6], dst: [u8; 6]) -> Builder {
        self.src_mac = src;
        self.dst_mac = dst;
        self
    }
    /// Add an 802.1Q tag (outermost first when called several times).
    pub fn vlan(mut self, id: u16) -> Builder {
        self.vlans.push((ETH_P_8021Q, id & 0x0fff));
        self
    }
    /// Add a tag with any TPID and TCI (priority bits included).
    pub fn vlan_tag(mut self, tpid: u16, tci: u16) -> Builder {
        self.vlans.push((tpid, tci));
        self
    }
    /// QinQ: an 802.1ad outer tag and an 802.1Q inner tag.
    pub fn qinq(mut self, outer: u16, inner: u16) -> Builder {
        self.vlans.push((ETH_P_8021AD, outer & 0x0fff));
        self.vlans.push((ETH_P_8021Q, inner & 0x0fff));
        self
    }
    /// Override the EtherType (after tags).
    pub fn ethertype(mut self, et: u16) -> Builder {
        self.ethertype = Some(et);
        self
    }
    /// IPv4 TTL / IPv6 hop limit.
    pub fn ttl(mut self, ttl: u8) -> Builder {
        self.ttl = ttl;
        self
    }
    /// DSCP (6 bits) and ECN (2 bits).
    pub fn tos(mut self, dscp: u8, ecn: u8) -> Builder {
        self.tos = (dscp << 2) | (ecn & 3);
        self
    }
    pub fn ip_id(mut self, id: u16) -> Builder {
        self.ip_id = id;
        self
    }
    pub fn dont_fragment(mut self) -> Builder {
        self.df = true;
        self
    }
    pub fn flow_label(mut self, l: u32) -> Builder {
        self.flow_label = l & 0x000f_ffff;
        self
    }
    /// IPv4 options (padded with zeros, i.e. end-of-options, to a multiple of 4; at most 40).
    pub fn ipv4_options(mut self, o: &[u8]) -> Builder {
        self.ipv4_options = o.to_vec();
        let n = self.ipv4_options.len().div_ceil(4) * 4;
        self.ipv4_options.resize(n, 0);
        self
    }
    /// Append an IPv6 extension header of type `kind` (0, 43, 60, 135, ...) whose body (after
    /// the next-header and length bytes) is `body`, padded with zeros to a multiple of 8 bytes.
    /// For AH (51) the length is counted in 4-byte units minus 2, as RFC 4302 says (the
    /// header is still padded to a multiple of 8).
    pub fn ext(mut self, kind: u8, body: &[u8]) -> Builder {
        self.ext.push(Ext::Generic(kind, body.to_vec()));
        self
    }
    /// Hop-by-hop options header with a PadN option (8 bytes).
    pub fn hop_by_hop(self) -> Builder {
        self.ext(proto::HOPOPTS, &[1, 4, 0, 0, 0, 0])
    }
    /// Destination options header (8 bytes).
    pub fn dest_opts(self) -> Builder {
        self.ext(proto::DSTOPTS, &[1, 4, 0, 0, 0, 0])
    }
    /// Routing header type 4 (segment routing) with segments left 0, no segments (8 bytes).
    pub fn routing(self) -> Builder {
        self.ext(proto::ROUTING, &[4, 0, 0, 0, 0, 0])
    }
    /// Fragment fields: offset in 8-byte units and "more fragments". IPv4: the flags/offset
    /// word. IPv6: a fragment header at this position of the extension chain.
    pub fn fragment(mut self, offset8: u16, more: bool) -> Builder {
        self.frag = Some((offset8 & 0x1fff, more));
        self.ext.push(Ext::Fragment);
        self
    }
    /// Identification of IPv6 fragment headers (IPv4 uses [`ip_id`](Self::ip_id)).
    pub fn frag_id(mut self, id: u32) -> Builder {
        self.frag_id = id;
        self
    }

    fn link_header(&self, out: &mut Vec<u8>, ethertype: u16) {
        if self.link == LinkType::Ethernet {
            out.extend_from_slice(&self.dst_mac);
            out.extend_from_slice(&self.src_mac);
            for (tpid, tci) in &self.vlans {
                out.extend_from_slice(&tpid.to_be_bytes());
                out.extend_from_slice(&tci.to_be_bytes());
            }
            out.extend_from_slice(&self.ethertype.unwrap_or(ethertype).to_be_bytes());
        }
    }

    /// A frame carrying `l4` (transport bytes, taken as they are) in IP protocol `proto`.
    /// IPv4 or IPv6 from the addresses.
    pub fn ip(
        &self,
        src: impl Into<IpAddr>,
        dst: impl Into<IpAddr>,
        proto: u8,
        l4: &[u8],
    ) -> Vec<u8> {
        match (src.into(), dst.into()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => self.ipv4(s, d, proto, l4),
            (IpAddr::V6(s), IpAddr::V6(d)) => self.ipv6(s, d, proto, l4),
            (s, d) => panic!("build: mixed address families {s} / {d}"),
        }
    }

    fn ipv4(&self, src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, l4: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + l4.len());
        self.link_header(&mut out, ETH_P_IP);
        let l3 = out.len();
        let hlen = 20 + self.ipv4_options.len();
        let tot = hlen + l4.len();
        out.push(0x40 | (hlen / 4) as u8);
        out.push(self.tos);
        out.extend_from_slice(&(tot as u16).to_be_bytes());
        out.extend_from_slice(&self.ip_id.to_be_bytes());
        let mut fw = if self.df { 0x4000u16 } else { 0 };
        if let Some((off, more)) = self.frag {
            fw |= off;
            if more {
                fw |= 0x2000;
            }
        }
        out.extend_from_slice(&fw.to_be_bytes());
        out.push(self.ttl);
        out.push(protocol);
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&src.octets());
        out.extend_from_slice(&dst.octets());
        out.extend_from_slice(&self.ipv4_options);
        let c = checksum(&out[l3..]);
        out[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
        out.extend_from_slice(l4);
        out
    }

    fn ipv6(&self, src: Ipv6Addr, dst: Ipv6Addr, protocol: u8, l4: &[u8]) -> Vec<u8> {
        // Extension headers, each with its next-header byte filled in afterwards.
        let mut exts: Vec<(u8, Vec<u8>)> = Vec::new();
        for e in &self.ext {
            match e {
                Ext::Generic(kind, body) => {
                    let mut h = vec![0u8, 0u8];
                    h.extend_from_slice(body);
                    if *kind == proto::AH {
                        // 4-byte units minus 2 in the length; a multiple of 8 in IPv6.
                        while h.len() % 8 != 0 || h.len() < 8 {
                            h.push(0);
                        }
                        h[1] = (h.len() / 4 - 2) as u8;
                    } else {
                        while h.len() % 8 != 0 {
                            h.push(0);
                        }
                        h[1] = (h.len() / 8 - 1) as u8;
                    }
                    exts.push((*kind, h));
                }
                Ext::Fragment => {
                    let (off, more) = self.frag.unwrap_or((0, false));
                    let fw = (off << 3) | more as u16;
                    let mut h = vec![0u8, 0u8];
                    h.extend_from_slice(&fw.to_be_bytes());
                    h.extend_from_slice(&self.frag_id.to_be_bytes());
                    exts.push((proto::FRAGMENT, h));
                }
            }
        }
        for i in 0..exts.len() {
            let next = exts.get(i + 1).map(|e| e.0).unwrap_or(protocol);
            exts[i].1[0] = next;
        }
        let first = exts.first().map(|e| e.0).unwrap_or(protocol);
        let plen: usize = exts.iter().map(|e| e.1.len()).sum::<usize>() + l4.len();

        let mut out = Vec::with_capacity(64 + plen);
        self.link_header(&mut out, ETH_P_IPV6);
        let w0 = (6u32 << 28) | ((self.tos as u32) << 20) | self.flow_label;
        out.extend_from_slice(&w0.to_be_bytes());
        out.extend_from_slice(&(plen as u16).to_be_bytes());
        out.push(first);
        out.push(self.ttl);
        out.extend_from_slice(&src.octets());
        out.extend_from_slice(&dst.octets());
        for (_, h) in &exts {
            out.extend_from_slice(h);
        }
        out.extend_from_slice(l4);
        out
    }

    /// A TCP frame.
    pub fn tcp(
        &self,
        src: impl Into<IpAddr>,
        dst: impl Into<IpAddr>,
        t: &Tcp,
        payload: &[u8],
    ) -> Vec<u8> {
        let (s, d) = (src.into(), dst.into());
        self.ip(s, d, proto::TCP, &tcp_segment(s, d, t, payload))
    }

    /// A UDP frame.
    pub fn udp(
        &self,
        src: impl Into<IpAddr>,
        dst: impl Into<IpAddr>,
        sport: u16,
        dport: u16,
        payload: &[u8],
    ) -> Vec<u8> {
        let (s, d) = (src.into(), dst.into());
        self.ip(s, d, proto::UDP, &udp_datagram(s, d, sport, dport, payload))
    }

    /// An ICMP (IPv4) or ICMPv6 (IPv6) frame.
    pub fn icmp(
        &self,
        src: impl Into<IpAddr>,
        dst: impl Into<IpAddr>,
        typ: u8,
        code: u8,
        rest: u32,
        body: &[u8],
    ) -> Vec<u8> {
        let (s, d) = (src.into(), dst.into());
        let p = if s.is_ipv4() {
            proto::ICMP
        } else {
            proto::ICMPV6
        };
        self.ip(s, d, p, &icmp_message(s, d, typ, code, rest, body))
    }

    /// An echo request (or reply) frame: ICMP type 8/0, ICMPv6 type 128/129.
    pub fn icmp_echo(
        &self,
        src: impl Into<IpAddr>,
        dst: impl Into<IpAddr>,
        request: bool,
        id: u16,
        seq: u16,
        payload: &[u8],
    ) -> Vec<u8> {
        let (s, d) = (src.into(), dst.into());
        let typ = match (s.is_ipv4(), request) {
            (true, true) => 8,
            (true, false) => 0,
            (false, true) => 128,
            (false, false) => 129,
        };
        self.icmp(s, d, typ, 0, ((id as u32) << 16) | seq as u32, payload)
    }

    /// An ICMP error (e.g. 3/3 port unreachable, 11/0 time exceeded; ICMPv6 1/4, 3/0) quoting
    /// the first `keep` bytes of `original`, a raw IP packet (no link header).
    pub fn icmp_error(
        &self,
        src: impl Into<IpAddr>,
        dst: impl Into<IpAddr>,
        typ: u8,
        code: u8,
        original: &[u8],
        keep: usize,
    ) -> Vec<u8> {
        self.icmp(
            src,
            dst,
            typ,
            code,
            0,
            &original[..keep.min(original.len())],
        )
    }
}

/// Ethernet + IPv4 + TCP with the given flags (seq 1000, ack 2000 when ACK is set).
pub fn tcp4(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    Builder::new().tcp(src, dst, &Tcp::new(sport, dport, flags), payload)
}

/// Ethernet + IPv4 + UDP.
pub fn udp4(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    Builder::new().udp(src, dst, sport, dport, payload)
}

/// Ethernet + IPv4 + ICMP echo request.
pub fn icmp4_echo(src: Ipv4Addr, dst: Ipv4Addr, id: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    Builder::new().icmp_echo(src, dst, true, id, seq, payload)
}

/// Ethernet + IPv6 + TCP with the given flags.
pub fn tcp6(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    sport: u16,
    dport: u16,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    Builder::new().tcp(src, dst, &Tcp::new(sport, dport, flags), payload)
}

/// Ethernet + IPv6 + UDP.
pub fn udp6(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    Builder::new().udp(src, dst, sport, dport, payload)
}

/// Ethernet + IPv6 + ICMPv6 echo request.
pub fn icmp6_echo(src: Ipv6Addr, dst: Ipv6Addr, id: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    Builder::new().icmp_echo(src, dst, true, id, seq, payload)
}

/// Turning good frames into malformed ones. Each function takes a well-formed frame (so its
/// offsets can be found), changes one thing, and keeps the IPv4 header checksum correct so that
/// only the intended defect is present.
pub mod hostile {
    use crate::checksum::checksum;
    use crate::meta::{LinkType, PacketMeta};

    fn l3(frame: &[u8], link: LinkType) -> usize {
        let m = PacketMeta::parse(frame, link);
        assert!(
            m.l3_ok(),
            "hostile: start from a well-formed IP frame ({:?})",
            m.malformed
        );
        m.l3_off as usize
    }

    fn l4(frame: &[u8], link: LinkType) -> usize {
        let m = PacketMeta::parse(frame, link);
        assert!(
            m.has_l4,
            "hostile: start from a frame with a transport header ({:?})",
            m.malformed
        );
        m.l4_off as usize
    }

    /// Recompute the IPv4 header checksum of the header at `l3_off` (IHL as it says, clamped
    /// to the frame).
    pub fn fix_ipv4_checksum_at(frame: &mut [u8], l3_off: usize) {
        let ihl = (frame[l3_off] & 0x0f) as usize * 4;
        let end = (l3_off + ihl.max(20)).min(frame.len());
        if end < l3_off + 12 {
            return;
        }
        frame[l3_off + 10] = 0;
        frame[l3_off + 11] = 0;
        let c = checksum(&frame[l3_off..end]);
        frame[l3_off + 10..l3_off + 12].copy_from_slice(&c.to_be_bytes());
    }

    /// Set the IPv4 IHL nibble.
    pub fn set_ipv4_ihl(frame: &mut [u8], link: LinkType, ihl: u8) {
        let o = l3(frame, link);
        frame[o] = (frame[o] & 0xf0) | (ihl & 0x0f);
        fix_ipv4_checksum_at(frame, o);
    }

    /// Set the IPv4 version nibble (or the IPv6 one).
    pub fn set_ip_version(frame: &mut [u8], link: LinkType, version: u8) {
        let o = l3(frame, link);
        frame[o] = (frame[o] & 0x0f) | (version << 4);
    }

    /// Set the IPv4 total length.
    pub fn set_ipv4_total_length(frame: &mut [u8], link: LinkType, len: u16) {
        let o = l3(frame, link);
        frame[o + 2..o + 4].copy_from_slice(&len.to_be_bytes());
        fix_ipv4_checksum_at(frame, o);
    }

    /// Set the IPv6 payload length.
    pub fn set_ipv6_payload_length(frame: &mut [u8], link: LinkType, len: u16) {
        let o = l3(frame, link);
        frame[o + 4..o + 6].copy_from_slice(&len.to_be_bytes());
    }

    /// Set the TCP data offset nibble.
    pub fn set_tcp_doff(frame: &mut [u8], link: LinkType, doff: u8) {
        let o = l4(frame, link);
        frame[o + 12] = (frame[o + 12] & 0x0f) | (doff << 4);
    }

    /// Set the UDP length field.
    pub fn set_udp_length(frame: &mut [u8], link: LinkType, len: u16) {
        let o = l4(frame, link);
        frame[o + 4..o + 6].copy_from_slice(&len.to_be_bytes());
    }

    /// Ethernet padding: append zero bytes after the IP packet (lengths unchanged).
    pub fn pad(frame: &[u8], to: usize) -> Vec<u8> {
        let mut v = frame.to_vec();
        if v.len() < to {
            v.resize(to, 0);
        }
        v
    }

    /// The raw IP packet inside an Ethernet frame (for quoting in ICMP errors).
    pub fn ip_packet(frame: &[u8], link: LinkType) -> Vec<u8> {
        let m = PacketMeta::parse(frame, link);
        frame[m.l3_off as usize..m.l3_end()].to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::{checksum_with, sum};

    #[test]
    fn ipv4_tcp_checksums_verify() {
        let f = tcp4(
            Ipv4Addr::new(198, 18, 0, 1),
            Ipv4Addr::new(198, 18, 0, 2),
            1234,
            80,
            tcp_flags::SYN,
            b"hello",
        );
        assert_eq!(checksum(&f[14..34]), 0);
        let seg = &f[34..];
        let p = pseudo_v4([198, 18, 0, 1], [198, 18, 0, 2], 6, seg.len() as u16);
        assert_eq!(checksum_with(p, seg), 0);
        assert_eq!(f.len(), 14 + 20 + 20 + 5);
        let _ = sum(&f);
    }
}
