//! Parsing a frame once into a [`PacketMeta`], and reading header [`Field`]s through it.
//!
//! [`PacketMeta::parse`] walks the link layer (Ethernet with up to two VLAN tags, or raw IP),
//! the network layer (IPv4 with options, IPv6 with its extension-header chain) and the
//! transport header, and records offsets, the 5-tuple, fragment facts and TCP flags. It never
//! panics, never allocates and reads each header byte at most once or twice, whatever the
//! input. When the packet is malformed it says why ([`Malformed`]) and whether the network
//! header itself is to blame ([`Malformed::is_l3`]).
//!
//! [`PacketMeta::get`] then reads any header field from the same frame with a bounds-checked
//! load at a known offset; it answers `None` when the packet does not carry the field (wrong
//! family or protocol, no transport header, non-first fragment, truncated).
//!
//! The rules follow what Linux does before nftables sees a packet:
//!
//! - IPv4: version 4, IHL >= 5, the header within the frame, `IHL*4 <= total length <= bytes
//!   present` (Ethernet padding after the packet is ignored); options are skipped, not checked.
//! - IPv6: version 6 and `40 + payload length <= bytes present` (payload length 0 with a
//!   hop-by-hop header is a jumbogram and takes the rest of the frame). Extension headers
//!   (hop-by-hop, routing, fragment, destination options, AH, mobility, HIP, shim6) are walked up
//!   to [`MAX_EXT_HEADERS`]; `l4proto` is the first next-header value that is not one of them.
//! - A fragment whose offset is not 0 has no transport header (`frag == Frag::Later`,
//!   `has_l4 == false`, not malformed). A first fragment too short for the transport header it
//!   announces is [`Malformed::TinyFragment`].
//! - Transport problems (truncated header, bad TCP data offset, bad UDP length) leave the
//!   transport fields absent (`has_l4 == false`) but the network fields readable, as nftables
//!   does for packets whose transport header it cannot read.
//!
//! Offsets are absolute positions in the frame, so a field read is one slice access.

use crate::field::Field;

/// How a frame starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// Ethernet II (with optional 802.1Q / 802.1ad tags).
    #[default]
    Ethernet,
    /// A raw IP packet; the version nibble says v4 or v6.
    RawIp,
}

/// The network layer found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum L3 {
    Ipv4,
    Ipv6,
    /// Not IP: the EtherType (0 when there is none, e.g. a truncated or non-IP raw frame).
    Other(u16),
}

impl Default for L3 {
    fn default() -> Self {
        L3::Other(0)
    }
}

impl L3 {
    /// The EtherType of this network layer (`meta protocol`).
    pub fn ethertype(self) -> u16 {
        match self {
            L3::Ipv4 => ETH_P_IP,
            L3::Ipv6 => ETH_P_IPV6,
            L3::Other(t) => t,
        }
    }

    /// The netfilter protocol family (`meta nfproto`): 2 for IPv4, 10 for IPv6.
    pub fn nfproto(self) -> Option<u8> {
        match self {
            L3::Ipv4 => Some(2),
            L3::Ipv6 => Some(10),
            L3::Other(_) => None,
        }
    }
}

/// Fragment status of an IP packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Frag {
    /// Not a fragment (IPv6 atomic fragments, offset 0 without "more fragments", count as this).
    #[default]
    None,
    /// Offset 0 with "more fragments" set: carries the transport header.
    First,
    /// Offset not 0: no transport header.
    Later,
}

/// The most IPv6 extension headers walked before giving up with
/// [`Malformed::ExtHeaderChainTooLong`].
pub const MAX_EXT_HEADERS: usize = 16;

pub const ETH_P_IP: u16 = 0x0800;
pub const ETH_P_IPV6: u16 = 0x86dd;
pub const ETH_P_8021Q: u16 = 0x8100;
pub const ETH_P_8021AD: u16 = 0x88a8;
/// Pre-standard QinQ outer tag.
pub const ETH_P_QINQ1: u16 = 0x9100;

/// IP protocol numbers used here.
pub mod proto {
    pub const HOPOPTS: u8 = 0;
    pub const ICMP: u8 = 1;
    pub const IGMP: u8 = 2;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const DCCP: u8 = 33;
    pub const ROUTING: u8 = 43;
    pub const FRAGMENT: u8 = 44;
    pub const GRE: u8 = 47;
    pub const ESP: u8 = 50;
    pub const AH: u8 = 51;
    pub const ICMPV6: u8 = 58;
    pub const COMP: u8 = 108;
    pub const NONE: u8 = 59;
    pub const DSTOPTS: u8 = 60;
    pub const MOBILITY: u8 = 135;
    pub const SCTP: u8 = 132;
    pub const UDPLITE: u8 = 136;
    pub const HIP: u8 = 139;
    pub const SHIM6: u8 = 140;
}

macro_rules! malformed {
    ($($(#[$doc:meta])* $var:ident => $name:literal, $l3:literal;)*) => {
        /// Why a packet is malformed. Each has a stable short name for counters and JSON.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Malformed { $($(#[$doc])* $var,)* }

        impl Malformed {
            /// Every reason, in declaration order.
            pub const ALL: &'static [Malformed] = &[$(Malformed::$var,)*];

            /// The stable kebab-case name (`"truncated-ipv4"`).
            pub fn reason(self) -> &'static str {
                match self { $(Malformed::$var => $name,)* }
            }

            /// True when the network header itself cannot be trusted: the engine applies the
            /// chain policy without evaluating rules. False for transport-level problems: rules
            /// are evaluated with the transport fields absent.
            pub fn is_l3(self) -> bool {
                match self { $(Malformed::$var => $l3,)* }
            }

            /// Look a reason up by its name.
            pub fn from_reason(s: &str) -> Option<Malformed> {
                match s { $($name => Some(Malformed::$var),)* _ => None }
            }
        }
    };
}

malformed! {
    /// Fewer than 14 bytes: no complete Ethernet header.
    TruncatedEthernet => "truncated-ethernet", true;
    /// A VLAN tag cut short.
    TruncatedVlan => "truncated-vlan", true;
    /// A raw-IP frame with no bytes at all.
    TruncatedIp => "truncated-ip", true;
    /// The version nibble does not match the EtherType (or is neither 4 nor 6 on raw IP).
    BadIpVersion => "bad-ip-version", true;
    /// Fewer than 20 bytes, or fewer than IHL*4 bytes, of IPv4 header.
    TruncatedIpv4 => "truncated-ipv4", true;
    /// IHL < 5.
    BadIhl => "bad-ihl", true;
    /// Total length smaller than the header or larger than the bytes present.
    BadIpv4TotalLength => "bad-ipv4-total-length", true;
    /// Fewer than 40 bytes of IPv6 header.
    TruncatedIpv6 => "truncated-ipv6", true;
    /// 40 + payload length larger than the bytes present.
    BadIpv6PayloadLength => "bad-ipv6-payload-length", true;
    /// An IPv6 extension header runs past the end of the packet (`l4proto` is then 0, as the
    /// kernel reports when `ipv6_find_hdr` fails).
    TruncatedExtHeader => "truncated-ext-header", false;
    /// More than [`MAX_EXT_HEADERS`] IPv6 extension headers. Transport-level on purpose: the
    /// addresses are sound, so address rules (block lists) still apply; `l4proto` is 0 and the
    /// transport fields are absent.
    ExtHeaderChainTooLong => "ext-header-chain-too-long", false;
    /// Fewer than 20 bytes of TCP header.
    TruncatedTcp => "truncated-tcp", false;
    /// TCP data offset < 5, or the header it announces runs past the packet.
    BadTcpDoff => "bad-tcp-doff", false;
    /// Fewer than 8 bytes of UDP (or UDP-Lite) header.
    TruncatedUdp => "truncated-udp", false;
    /// UDP length field < 8, or (unfragmented) larger than the IP payload.
    BadUdpLength => "bad-udp-length", false;
    /// Fewer than 12 bytes of SCTP common header.
    TruncatedSctp => "truncated-sctp", false;
    /// Fewer than 12 bytes of DCCP header.
    TruncatedDccp => "truncated-dccp", false;
    /// Fewer than 4 bytes of ICMP, or fewer than 8 for a message with id and sequence.
    TruncatedIcmp => "truncated-icmp", false;
    /// Fewer than 4 bytes of ICMPv6, or fewer than 8 for an echo message.
    TruncatedIcmpv6 => "truncated-icmpv6", false;
    /// A first fragment too short to hold the transport header it announces.
    TinyFragment => "tiny-fragment", false;
}

/// Everything the engine needs from one parse of a frame.
///
/// All offsets are absolute positions in the frame. Fields that do not apply are zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketMeta {
    /// Frame length in bytes (saturating at `u32::MAX`).
    pub len: u32,
    /// The network layer (`Other(ethertype)` for non-IP frames).
    pub l3: L3,
    /// Outermost VLAN id if tagged (802.1Q 0x8100, 802.1ad 0x88a8, 0x9100; up to 2 tags).
    pub vlan: Option<u16>,
    /// Offset of the IP header in the frame (after Ethernet and VLAN tags).
    pub l3_off: u16,
    /// Length of the IP packet as its header says (saturating at 65535 for IPv6 packets longer
    /// than that, i.e. payload length > 65495, and jumbograms).
    pub l3_len: u16,
    /// Offset of the transport header (for non-first fragments: of the fragment's payload).
    pub l4_off: u16,
    /// IPv4 protocol / IPv6 final next header after extension headers (0 if not IP).
    pub l4proto: u8,
    /// The transport header is present and complete (false for non-first fragments, truncated
    /// or malformed transport headers, IPv6 "no next header"). For protocols weir does not
    /// parse (GRE, ESP, ...), true when the fragment carries the start of the payload.
    pub has_l4: bool,
    pub frag: Frag,
    /// The identification of a fragment's datagram (IPv4: 16 bits, IPv6: the fragment
    /// header's 32 bits); 0 when `frag` is [`Frag::None`].
    pub frag_id: u32,
    /// Numeric source address, IPv4 in the low 32 bits.
    pub saddr: u128,
    /// Numeric destination address, IPv4 in the low 32 bits.
    pub daddr: u128,
    /// Valid only when `has_ports`.
    pub sport: u16,
    /// Valid only when `has_ports`.
    pub dport: u16,
    /// TCP, UDP, UDP-Lite, SCTP or DCCP with a complete header (for a quoted packet inside an
    /// ICMP error, see [`PacketMeta::icmp_quoted`]: the first 4 bytes suffice).
    pub has_ports: bool,
    /// The TCP flag byte; valid only when `l4proto == 6 && has_l4`.
    pub tcp_flags: u8,
    pub malformed: Option<Malformed>,
    /// The link type the frame was parsed as.
    pub link: LinkType,
}

#[inline(always)]
fn b8(f: &[u8], i: usize) -> Option<u8> {
    f.get(i).copied()
}

#[inline(always)]
fn b16(f: &[u8], i: usize) -> Option<u16> {
    let s = f.get(i..i.wrapping_add(2))?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

#[inline(always)]
fn b32(f: &[u8], i: usize) -> Option<u32> {
    let s = f.get(i..i.wrapping_add(4))?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

#[inline(always)]
fn b48(f: &[u8], i: usize) -> Option<u64> {
    let s = f.get(i..i.wrapping_add(6))?;
    let mut b = [0u8; 8];
    b[2..].copy_from_slice(s);
    Some(u64::from_be_bytes(b))
}

#[inline(always)]
fn b128(f: &[u8], i: usize) -> Option<u128> {
    let s = f.get(i..i.wrapping_add(16))?;
    let mut b = [0u8; 16];
    b.copy_from_slice(s);
    Some(u128::from_be_bytes(b))
}

/// ICMP types whose second word is identifier + sequence number (echo, timestamp,
/// information, address mask).
fn icmp4_has_id(t: u8) -> bool {
    matches!(t, 0 | 8 | 13 | 14 | 15 | 16 | 17 | 18)
}

/// ICMPv6 echo request / reply.
fn icmp6_has_id(t: u8) -> bool {
    matches!(t, 128 | 129)
}

/// ICMP error types that quote the offending packet.
fn icmp4_is_error(t: u8) -> bool {
    matches!(t, 3 | 4 | 5 | 11 | 12)
}

fn icmp6_is_error(t: u8) -> bool {
    matches!(t, 1..=4)
}

impl PacketMeta {
    /// Metadata of an IPv4 packet given by its 5-tuple alone, with no frame behind it (for
    /// benchmarks and tests that classify header traces). Ports are present for TCP, UDP,
    /// UDP-Lite, SCTP and DCCP; fields other than the tuple read as absent.
    pub fn ipv4_tuple(src: u32, dst: u32, proto: u8, sport: u16, dport: u16) -> PacketMeta {
        PacketMeta {
            len: 64,
            l3: L3::Ipv4,
            l3_len: 64,
            l4proto: proto,
            has_l4: true,
            saddr: src as u128,
            daddr: dst as u128,
            sport,
            dport,
            has_ports: matches!(proto, 6 | 17 | 33 | 132 | 136),
            ..PacketMeta::default()
        }
    }

    /// Parse once. Never panics, never allocates, whatever the bytes.
    pub fn parse(frame: &[u8], link: LinkType) -> PacketMeta {
        Self::parse_captured(frame, link, frame.len())
    }

    /// Parse the first bytes of a longer packet (a capture cut at a snap length, an NFQUEUE
    /// copy of the headers): `wire_len` is the whole packet's length. Lengths and the IP
    /// total length check are taken against `wire_len`; fields past the captured bytes are
    /// absent (a header cut short is malformed, as in a truncated packet). With `wire_len <=
    /// frame.len()` it is [`PacketMeta::parse`].
    pub fn parse_captured(frame: &[u8], link: LinkType, wire_len: usize) -> PacketMeta {
        let wire = wire_len.max(frame.len());
        let mut m = PacketMeta {
            len: u32::try_from(wire).unwrap_or(u32::MAX),
            link,
            ..PacketMeta::default()
        };
        match link {
            LinkType::Ethernet => {
                let Some(mut et) = b16(frame, 12) else {
                    m.malformed = Some(Malformed::TruncatedEthernet);
                    return m;
                };
                let mut off = 14usize;
                let mut tags = 0;
                while tags < 2 && matches!(et, ETH_P_8021Q | ETH_P_8021AD | ETH_P_QINQ1) {
                    let (Some(tci), Some(inner)) = (b16(frame, off), b16(frame, off + 2)) else {
                        m.malformed = Some(Malformed::TruncatedVlan);
                        return m;
                    };
                    if tags == 0 {
                        m.vlan = Some(tci & 0x0fff);
                    }
                    et = inner;
                    off += 4;
                    tags += 1;
                }
                m.l3_off = off as u16;
                match et {
                    ETH_P_IP => {
                        m.l3 = L3::Ipv4;
                        m.parse_ipv4(frame, off, wire, false);
                    }
                    ETH_P_IPV6 => {
                        m.l3 = L3::Ipv6;
                        m.parse_ipv6(frame, off, wire, false);
                    }
                    other => m.l3 = L3::Other(other),
                }
            }
            LinkType::RawIp => match frame.first() {
                None => m.malformed = Some(Malformed::TruncatedIp),
                Some(b) if b >> 4 == 4 => {
                    m.l3 = L3::Ipv4;
                    m.parse_ipv4(frame, 0, wire, false);
                }
                Some(b) if b >> 4 == 6 => {
                    m.l3 = L3::Ipv6;
                    m.parse_ipv6(frame, 0, wire, false);
                }
                Some(_) => m.malformed = Some(Malformed::BadIpVersion),
            },
        }
        m
    }

    /// Parse the IPv4 header at `off`; `limit` is the end of the bytes that belong to it.
    /// `quoted`: the packet is quoted inside an ICMP error and may be cut short.
    fn parse_ipv4(&mut self, f: &[u8], off: usize, limit: usize, quoted: bool) {
        let avail = limit.saturating_sub(off);
        let Some(b0) = b8(f, off).filter(|_| avail > 0) else {
            self.malformed = Some(Malformed::TruncatedIpv4);
            return;
        };
        if b0 >> 4 != 4 {
            self.malformed = Some(Malformed::BadIpVersion);
            return;
        }
        if avail < 20 {
            self.malformed = Some(Malformed::TruncatedIpv4);
            return;
        }
        let ihl = (b0 & 0x0f) as usize;
        if ihl < 5 {
            self.malformed = Some(Malformed::BadIhl);
            return;
        }
        let hlen = ihl * 4;
        if hlen > avail {
            self.malformed = Some(Malformed::TruncatedIpv4);
            return;
        }
        // All of off..off+20 is inside `f` from here on (avail <= f.len() - off).
        let tot = b16(f, off + 2).unwrap_or(0) as usize;
        if tot < hlen || (tot > avail && !quoted) {
            self.malformed = Some(Malformed::BadIpv4TotalLength);
            return;
        }
        let tot = tot.min(avail);
        self.l3_len = tot as u16;
        self.saddr = b32(f, off + 12).unwrap_or(0) as u128;
        self.daddr = b32(f, off + 16).unwrap_or(0) as u128;
        let protocol = b8(f, off + 9).unwrap_or(0);
        self.l4proto = protocol;
        self.l4_off = (off + hlen) as u16;
        let fw = b16(f, off + 6).unwrap_or(0);
        self.frag = if fw & 0x1fff != 0 {
            Frag::Later
        } else if fw & 0x2000 != 0 {
            Frag::First
        } else {
            Frag::None
        };
        if self.frag != Frag::None {
            self.frag_id = b16(f, off + 4).unwrap_or(0) as u32;
        }
        if self.frag == Frag::Later {
            return;
        }
        self.parse_l4(f, off + hlen, off + tot, true, quoted);
    }

    /// Parse the IPv6 header at `off` and its extension-header chain.
    fn parse_ipv6(&mut self, f: &[u8], off: usize, limit: usize, quoted: bool) {
        let avail = limit.saturating_sub(off);
        let Some(b0) = b8(f, off).filter(|_| avail > 0) else {
            self.malformed = Some(Malformed::TruncatedIpv6);
            return;
        };
        if b0 >> 4 != 6 {
            self.malformed = Some(Malformed::BadIpVersion);
            return;
        }
        if avail < 40 {
            self.malformed = Some(Malformed::TruncatedIpv6);
            return;
        }
        let plen = b16(f, off + 4).unwrap_or(0) as usize;
        let mut nh = b8(f, off + 6).unwrap_or(0);
        let tot = if plen == 0 && nh == proto::HOPOPTS {
            avail // jumbogram (RFC 2675): the hop-by-hop option carries the length
        } else {
            40 + plen
        };
        if tot > avail && !quoted {
            self.malformed = Some(Malformed::BadIpv6PayloadLength);
            return;
        }
        let tot = tot.min(avail);
        let end = off + tot;
        self.l3_len = tot.min(u16::MAX as usize) as u16;
        self.saddr = b128(f, off + 8).unwrap_or(0);
        self.daddr = b128(f, off + 24).unwrap_or(0);

        let mut cur = off + 40;
        let mut count = 0usize;
        loop {
            let hlen = match nh {
                proto::HOPOPTS
                | proto::ROUTING
                | proto::DSTOPTS
                | proto::MOBILITY
                | proto::HIP
                | proto::SHIM6 => match b8(f, cur + 1).filter(|_| cur + 2 <= end) {
                    Some(l) => (l as usize + 1) * 8,
                    None => return self.ext_malformed(Malformed::TruncatedExtHeader, cur),
                },
                proto::AH => match b8(f, cur + 1).filter(|_| cur + 2 <= end) {
                    Some(l) => (l as usize + 2) * 4,
                    None => return self.ext_malformed(Malformed::TruncatedExtHeader, cur),
                },
                proto::FRAGMENT => 8,
                _ => break,
            };
            if count >= MAX_EXT_HEADERS {
                return self.ext_malformed(Malformed::ExtHeaderChainTooLong, cur);
            }
            if cur + hlen > end {
                return self.ext_malformed(Malformed::TruncatedExtHeader, cur);
            }
            let next = b8(f, cur).unwrap_or(0);
            if nh == proto::FRAGMENT {
                let fw = b16(f, cur + 2).unwrap_or(0);
                if fw & 0xfff9 != 0 {
                    self.frag_id = b32(f, cur + 4).unwrap_or(0);
                }
                if fw & 0xfff8 != 0 {
                    // Non-first fragment: the rest is not interpretable.
                    self.frag = Frag::Later;
                    self.l4proto = next;
                    self.l4_off = (cur + 8) as u16;
                    return;
                } else if fw & 1 != 0 {
                    self.frag = Frag::First;
                }
            }
            nh = next;
            cur += hlen;
            count += 1;
        }
        self.l4proto = nh;
        self.l4_off = cur as u16;
        if nh == proto::NONE {
            return;
        }
        self.parse_l4(f, cur, end, false, quoted);
    }

    fn ext_malformed(&mut self, why: Malformed, cur: usize) {
        self.malformed = Some(why);
        self.l4proto = 0;
        self.l4_off = cur.min(u16::MAX as usize) as u16;
    }

    /// Parse the transport header at `off` (the IP packet ends at `end`).
    fn parse_l4(&mut self, f: &[u8], off: usize, end: usize, v4: bool, quoted: bool) {
        let avail = end.saturating_sub(off);
        let first = self.frag == Frag::First;
        // The reason for "not enough bytes": fragments are tiny, the others truncated.
        let short = |why| {
            if first {
                Malformed::TinyFragment
            } else {
                why
            }
        };
        let (need, why) = match self.l4proto {
            proto::TCP => (20, Malformed::TruncatedTcp),
            proto::UDP | proto::UDPLITE => (8, Malformed::TruncatedUdp),
            proto::SCTP => (12, Malformed::TruncatedSctp),
            proto::DCCP => (12, Malformed::TruncatedDccp),
            proto::ICMP if v4 => {
                let need = match b8(f, off) {
                    Some(t) if avail >= 1 && icmp4_has_id(t) => 8,
                    _ => 4,
                };
                (need, Malformed::TruncatedIcmp)
            }
            proto::ICMPV6 if !v4 => {
                let need = match b8(f, off) {
                    Some(t) if avail >= 1 && icmp6_has_id(t) => 8,
                    _ => 4,
                };
                (need, Malformed::TruncatedIcmpv6)
            }
            _ => {
                self.has_l4 = true;
                return;
            }
        };
        let ports = matches!(
            self.l4proto,
            proto::TCP | proto::UDP | proto::UDPLITE | proto::SCTP | proto::DCCP
        );
        if quoted && ports && avail >= 4 {
            // An ICMP error quotes at least 8 bytes of the transport header: enough for ports.
            self.sport = b16(f, off).unwrap_or(0);
            self.dport = b16(f, off + 2).unwrap_or(0);
            self.has_ports = true;
        }
        if avail < need {
            if !quoted {
                self.malformed = Some(short(why));
            }
            return;
        }
        match self.l4proto {
            proto::TCP => {
                let doff = (b8(f, off + 12).unwrap_or(0) >> 4) as usize;
                if doff < 5 {
                    self.malformed = Some(Malformed::BadTcpDoff);
                    self.has_ports = false;
                    return;
                }
                if doff * 4 > avail {
                    if !quoted {
                        self.malformed = Some(short(Malformed::BadTcpDoff));
                    }
                    return;
                }
                self.tcp_flags = b8(f, off + 13).unwrap_or(0);
            }
            proto::UDP => {
                let ulen = b16(f, off + 4).unwrap_or(0) as usize;
                if ulen < 8 || (ulen > avail && self.frag == Frag::None && !quoted) {
                    self.malformed = Some(Malformed::BadUdpLength);
                    self.has_ports = false;
                    return;
                }
            }
            _ => {}
        }
        self.has_l4 = true;
        if ports {
            self.sport = b16(f, off).unwrap_or(0);
            self.dport = b16(f, off + 2).unwrap_or(0);
            self.has_ports = true;
        }
    }

    /// True when the network header was parsed and can be read (`l3` is IP and no
    /// network-level problem was found).
    #[inline]
    pub fn l3_ok(&self) -> bool {
        matches!(self.l3, L3::Ipv4 | L3::Ipv6) && !self.malformed.is_some_and(|m| m.is_l3())
    }

    /// End of the IP packet in the frame (`l3_off + l3_len`); bytes after it are link padding.
    #[inline]
    pub fn l3_end(&self) -> usize {
        self.l3_off as usize + self.l3_len as usize
    }

    /// Offset and length of the transport payload (after the TCP/UDP/ICMP header), when the
    /// transport header is complete.
    pub fn payload(&self, frame: &[u8]) -> Option<(usize, usize)> {
        if !self.has_l4 || !self.l3_ok() {
            return None;
        }
        let l4 = self.l4_off as usize;
        let hlen = match self.l4proto {
            proto::TCP => (b8(frame, l4 + 12)? >> 4) as usize * 4,
            proto::UDP | proto::UDPLITE => 8,
            proto::SCTP | proto::DCCP => 12,
            proto::ICMP | proto::ICMPV6 => 8,
            _ => 0,
        };
        let end = self.l3_end().min(frame.len());
        let start = (l4 + hlen).min(end);
        Some((start, end - start))
    }

    /// The IPv4 header checksum is correct (false if this is not a sound IPv4 packet).
    pub fn ipv4_checksum_ok(&self, frame: &[u8]) -> bool {
        if self.l3 != L3::Ipv4 || !self.l3_ok() {
            return false;
        }
        let off = self.l3_off as usize;
        let Some(hl) = b8(frame, off).map(|b| (b & 0x0f) as usize * 4) else {
            return false;
        };
        match frame.get(off..off + hl) {
            Some(h) => crate::checksum::checksum(h) == 0,
            None => false,
        }
    }

    /// The TCP or UDP checksum is correct over the whole segment (false for other protocols,
    /// fragments and segments cut short; a UDP/IPv4 checksum of 0, "none", counts as correct).
    /// Linux answers a rejected packet only when this holds (`nf_ip_checksum`).
    pub fn transport_checksum_ok(&self, frame: &[u8]) -> bool {
        use crate::checksum::{checksum_with, pseudo_v4, pseudo_v6};
        if !matches!(self.l4proto, 6 | 17)
            || !self.has_l4
            || self.frag != Frag::None
            || self.malformed.is_some()
        {
            return false;
        }
        let (l3, l4, end) = (self.l3_off as usize, self.l4_off as usize, self.l3_end());
        let (Some(seg), Some(ip)) = (frame.get(l4..end), frame.get(l3..)) else {
            return false;
        };
        if self.l4proto == 17 && self.l3 == L3::Ipv4 && seg.get(6..8) == Some(&[0, 0]) {
            return true;
        }
        let pseudo = match self.l3 {
            L3::Ipv4 => match (ip.get(12..16), ip.get(16..20)) {
                (Some(s), Some(d)) => pseudo_v4(
                    s.try_into().unwrap_or_default(),
                    d.try_into().unwrap_or_default(),
                    self.l4proto,
                    seg.len() as u16,
                ),
                _ => return false,
            },
            L3::Ipv6 => match (ip.get(8..24), ip.get(24..40)) {
                (Some(s), Some(d)) => pseudo_v6(
                    s.try_into().unwrap_or([0; 16]),
                    d.try_into().unwrap_or([0; 16]),
                    self.l4proto,
                    seg.len() as u32,
                ),
                _ => return false,
            },
            _ => return false,
        };
        checksum_with(pseudo, seg) == 0
    }

    /// True for ICMP and ICMPv6 error messages (destination unreachable, time exceeded,
    /// parameter problem, ...), which quote the packet that caused them.
    pub fn is_icmp_error(&self, frame: &[u8]) -> bool {
        if !self.has_l4 || !self.l3_ok() {
            return false;
        }
        let t = b8(frame, self.l4_off as usize);
        match (self.l3, self.l4proto, t) {
            (L3::Ipv4, proto::ICMP, Some(t)) => icmp4_is_error(t),
            (L3::Ipv6, proto::ICMPV6, Some(t)) => icmp6_is_error(t),
            _ => false,
        }
    }

    /// For an ICMP / ICMPv6 error, parse the IP packet it quotes (8 bytes after the ICMP
    /// header). Offsets in the result are positions in the same frame, so
    /// [`get`](Self::get) works on it. The quoted packet is usually cut short, so its lengths
    /// are not held against it: `l3_len` is what is present, and `has_ports` is set as soon as
    /// the first 4 bytes of a TCP/UDP/SCTP/DCCP/UDP-Lite header are there (`has_l4` still means
    /// a complete header). The quoted packet's own ICMP errors are not followed.
    pub fn icmp_quoted(&self, frame: &[u8]) -> Option<PacketMeta> {
        if !self.is_icmp_error(frame) {
            return None;
        }
        let off = self.l4_off as usize + 8;
        let limit = self.l3_end().min(frame.len());
        let mut q = PacketMeta {
            len: self.len,
            link: self.link,
            vlan: self.vlan,
            l3_off: off.min(u16::MAX as usize) as u16,
            ..PacketMeta::default()
        };
        if off > limit {
            q.l3 = self.l3;
            q.malformed = Some(match self.l3 {
                L3::Ipv6 => Malformed::TruncatedIpv6,
                _ => Malformed::TruncatedIpv4,
            });
            return Some(q);
        }
        match self.l3 {
            L3::Ipv4 => {
                q.l3 = L3::Ipv4;
                q.parse_ipv4(frame, off, limit, true);
            }
            _ => {
                q.l3 = L3::Ipv6;
                q.parse_ipv6(frame, off, limit, true);
            }
        }
        Some(q)
    }

    /// Read a header field (`Field::is_header()`: link, ip, ip6, tcp, udp, sctp, th, icmp and
    /// icmpv6 fields) from the frame this meta was parsed from.
    ///
    /// `None` when the packet does not carry it (wrong family or protocol, no transport
    /// header, non-first fragment, truncated or malformed). Metadata and `ct` fields always
    /// answer `None`: the engine supplies them. Never panics, even on another frame.
    ///
    /// Encodings: addresses are numeric (IPv4 in the low 32 bits), Ethernet addresses 48-bit,
    /// `vlan id` 12-bit, `ip dscp` / `ip6 dscp` 6-bit, `ip ecn` 2-bit, `ip frag-off` the whole
    /// 16-bit flags + offset word (as nft reads it), `ip6 nexthdr` the IPv6 header's own
    /// next-header byte (`meta l4proto` is the final one), `ip6 flowlabel` 20-bit, `tcp doff` the
    /// 4-bit data offset in words, `tcp flags` the 8-bit flag byte (CWR ECE URG ACK PSH RST SYN
    /// FIN). `icmp id` / `icmp sequence` exist only for messages that have them (echo,
    /// timestamp, information, address mask; ICMPv6 echo).
    pub fn get(&self, frame: &[u8], f: Field) -> Option<u128> {
        use Field as F;
        let l3 = self.l3_off as usize;
        let l4 = self.l4_off as usize;
        let v4 = self.l3 == L3::Ipv4 && self.l3_ok();
        let v6 = self.l3 == L3::Ipv6 && self.l3_ok();
        let l4ok = self.has_l4 && self.l3_ok();
        let tcp = l4ok && self.l4proto == proto::TCP;
        let udp = l4ok && self.l4proto == proto::UDP;
        let sctp = l4ok && self.l4proto == proto::SCTP;
        // (by the protocol number, whatever the IP version, as nft's payload loads read the
        // transport header wherever `meta l4proto` says it is one: an IPv6 packet carrying
        // protocol 1 has its ICMP fields read)
        let icmp = (v4 || v6) && l4ok && self.l4proto == proto::ICMP;
        let icmp6 = (v4 || v6) && l4ok && self.l4proto == proto::ICMPV6;
        let eth = self.link == LinkType::Ethernet && frame.len() >= 14;
        let l4is = |p: u8| l4ok && self.l4proto == p;
        let v: u128 = match f {
            F::EtherDaddr if eth => b48(frame, 0)? as u128,
            F::EtherSaddr if eth => b48(frame, 6)? as u128,
            F::EtherType if eth => b16(frame, 12)? as u128,
            F::VlanId if eth => self.vlan? as u128,

            F::IpVersion if v4 => (b8(frame, l3)? >> 4) as u128,
            F::IpHdrlength if v4 => (b8(frame, l3)? & 0x0f) as u128,
            F::IpDscp if v4 => (b8(frame, l3 + 1)? >> 2) as u128,
            F::IpEcn if v4 => (b8(frame, l3 + 1)? & 3) as u128,
            F::IpLength if v4 => b16(frame, l3 + 2)? as u128,
            F::IpId if v4 => b16(frame, l3 + 4)? as u128,
            F::IpFragOff if v4 => b16(frame, l3 + 6)? as u128,
            F::IpTtl if v4 => b8(frame, l3 + 8)? as u128,
            F::IpProtocol if v4 => b8(frame, l3 + 9)? as u128,
            F::IpChecksum if v4 => b16(frame, l3 + 10)? as u128,
            F::IpSaddr if v4 => b32(frame, l3 + 12)? as u128,
            F::IpDaddr if v4 => b32(frame, l3 + 16)? as u128,

            F::Ip6Version if v6 => (b8(frame, l3)? >> 4) as u128,
            F::Ip6Dscp if v6 => ((b16(frame, l3)? >> 6) & 0x3f) as u128,
            F::Ip6Ecn if v6 => ((b16(frame, l3)? >> 4) & 3) as u128,
            F::Ip6Flowlabel if v6 => (b32(frame, l3)? & 0x000f_ffff) as u128,
            F::Ip6Length if v6 => b16(frame, l3 + 4)? as u128,
            F::Ip6Nexthdr if v6 => b8(frame, l3 + 6)? as u128,
            F::Ip6Hoplimit if v6 => b8(frame, l3 + 7)? as u128,
            F::Ip6Saddr if v6 => b128(frame, l3 + 8)?,
            F::Ip6Daddr if v6 => b128(frame, l3 + 24)?,

            F::TcpSport if tcp => b16(frame, l4)? as u128,
            F::TcpDport if tcp => b16(frame, l4 + 2)? as u128,
            F::TcpSequence if tcp => b32(frame, l4 + 4)? as u128,
            F::TcpAckseq if tcp => b32(frame, l4 + 8)? as u128,
            F::TcpDoff if tcp => (b8(frame, l4 + 12)? >> 4) as u128,
            F::TcpFlags if tcp => b8(frame, l4 + 13)? as u128,
            F::TcpWindow if tcp => b16(frame, l4 + 14)? as u128,
            F::TcpChecksum if tcp => b16(frame, l4 + 16)? as u128,
            F::TcpUrgptr if tcp => b16(frame, l4 + 18)? as u128,

            F::UdpSport if udp => b16(frame, l4)? as u128,
            F::UdpDport if udp => b16(frame, l4 + 2)? as u128,
            F::UdpLength if udp => b16(frame, l4 + 4)? as u128,
            F::UdpChecksum if udp => b16(frame, l4 + 6)? as u128,

            F::SctpSport if sctp => b16(frame, l4)? as u128,
            F::SctpDport if sctp => b16(frame, l4 + 2)? as u128,
            F::HbhNexthdr if v6 => self.exthdr(frame, proto::HOPOPTS, 0, 1)?,
            F::HbhHdrlength if v6 => self.exthdr(frame, proto::HOPOPTS, 1, 1)?,
            F::RtNexthdr if v6 => self.exthdr(frame, proto::ROUTING, 0, 1)?,
            F::RtHdrlength if v6 => self.exthdr(frame, proto::ROUTING, 1, 1)?,
            F::RtType if v6 => self.exthdr(frame, proto::ROUTING, 2, 1)?,
            F::RtSegLeft if v6 => self.exthdr(frame, proto::ROUTING, 3, 1)?,
            F::Rt0Reserved | F::Rt2Reserved if v6 => self.exthdr(frame, proto::ROUTING, 4, 4)?,
            F::Rt2Addr if v6 => self.exthdr(frame, proto::ROUTING, 8, 16)?,
            F::SrhLastEntry if v6 => self.exthdr(frame, proto::ROUTING, 4, 1)?,
            F::SrhFlags if v6 => self.exthdr(frame, proto::ROUTING, 5, 1)?,
            F::SrhTag if v6 => self.exthdr(frame, proto::ROUTING, 6, 2)?,
            F::FragNexthdr if v6 => self.exthdr(frame, proto::FRAGMENT, 0, 1)?,
            F::FragReserved if v6 => self.exthdr(frame, proto::FRAGMENT, 1, 1)?,
            F::FragFragOff if v6 => self.exthdr(frame, proto::FRAGMENT, 2, 2)? >> 3,
            F::FragReserved2 if v6 => (self.exthdr(frame, proto::FRAGMENT, 3, 1)? >> 1) & 3,
            F::FragMoreFragments if v6 => self.exthdr(frame, proto::FRAGMENT, 3, 1)? & 1,
            F::FragId if v6 => self.exthdr(frame, proto::FRAGMENT, 4, 4)?,
            F::DstNexthdr if v6 => self.exthdr(frame, proto::DSTOPTS, 0, 1)?,
            F::DstHdrlength if v6 => self.exthdr(frame, proto::DSTOPTS, 1, 1)?,
            F::MhNexthdr if v6 => self.exthdr(frame, proto::MOBILITY, 0, 1)?,
            F::MhHdrlength if v6 => self.exthdr(frame, proto::MOBILITY, 1, 1)?,
            F::MhType if v6 => self.exthdr(frame, proto::MOBILITY, 2, 1)?,
            F::MhReserved if v6 => self.exthdr(frame, proto::MOBILITY, 3, 1)?,
            F::MhChecksum if v6 => self.exthdr(frame, proto::MOBILITY, 4, 2)?,
            F::ExthdrHbh if v6 => self.find_exthdr(frame, proto::HOPOPTS).is_some() as u128,
            F::ExthdrRt if v6 => self.find_exthdr(frame, proto::ROUTING).is_some() as u128,
            F::ExthdrFrag if v6 => self.find_exthdr(frame, proto::FRAGMENT).is_some() as u128,
            F::ExthdrDst if v6 => self.find_exthdr(frame, proto::DSTOPTS).is_some() as u128,
            F::ExthdrMh if v6 => self.find_exthdr(frame, proto::MOBILITY).is_some() as u128,

            // the GRE header (RFC 2784: C R K S, reserved, version 3 bits; the protocol)
            F::GreFlags if l4is(proto::GRE) => (b8(frame, l4)? >> 3) as u128,
            F::GreVersion if l4is(proto::GRE) => (b8(frame, l4 + 1)? & 7) as u128,
            F::GreProtocol if l4is(proto::GRE) => b16(frame, l4 + 2)? as u128,

            F::SctpVtag if sctp => b32(frame, l4 + 4)? as u128,
            F::SctpChecksum if sctp => b32(frame, l4 + 8)? as u128,

            F::UdpliteSport if l4is(proto::UDPLITE) => b16(frame, l4)? as u128,
            F::UdpliteDport if l4is(proto::UDPLITE) => b16(frame, l4 + 2)? as u128,
            F::UdpliteCsumcov if l4is(proto::UDPLITE) => b16(frame, l4 + 4)? as u128,
            F::UdpliteChecksum if l4is(proto::UDPLITE) => b16(frame, l4 + 6)? as u128,
            F::DccpSport if l4is(proto::DCCP) => b16(frame, l4)? as u128,
            F::DccpDport if l4is(proto::DCCP) => b16(frame, l4 + 2)? as u128,
            F::DccpType if l4is(proto::DCCP) => ((b8(frame, l4 + 8)? >> 1) & 0x0f) as u128,
            F::AhNexthdr if l4is(proto::AH) => b8(frame, l4)? as u128,
            F::AhHdrlength if l4is(proto::AH) => b8(frame, l4 + 1)? as u128,
            F::AhReserved if l4is(proto::AH) => b16(frame, l4 + 2)? as u128,
            F::AhSpi if l4is(proto::AH) => b32(frame, l4 + 4)? as u128,
            F::AhSequence if l4is(proto::AH) => b32(frame, l4 + 8)? as u128,
            F::EspSpi if l4is(proto::ESP) => b32(frame, l4)? as u128,
            F::EspSequence if l4is(proto::ESP) => b32(frame, l4 + 4)? as u128,
            F::CompNexthdr if l4is(proto::COMP) => b8(frame, l4)? as u128,
            F::CompFlags if l4is(proto::COMP) => b8(frame, l4 + 1)? as u128,
            F::CompCpi if l4is(proto::COMP) => b16(frame, l4 + 2)? as u128,
            F::IgmpType if v4 && l4is(proto::IGMP) => b8(frame, l4)? as u128,
            F::IgmpMrt if v4 && l4is(proto::IGMP) => b8(frame, l4 + 1)? as u128,
            F::IgmpChecksum if v4 && l4is(proto::IGMP) => b16(frame, l4 + 2)? as u128,
            F::IgmpGroup if v4 && l4is(proto::IGMP) => b32(frame, l4 + 4)? as u128,

            F::ThSport if self.has_ports && l4ok => b16(frame, l4)? as u128,
            F::ThDport if self.has_ports && l4ok => b16(frame, l4 + 2)? as u128,

            F::IcmpType if icmp => b8(frame, l4)? as u128,
            F::IcmpCode if icmp => b8(frame, l4 + 1)? as u128,
            F::IcmpId if icmp && icmp4_has_id(b8(frame, l4)?) => self.icmp_word(frame, 4)?,
            F::IcmpSequence if icmp && icmp4_has_id(b8(frame, l4)?) => self.icmp_word(frame, 6)?,
            F::Icmp6Type if icmp6 => b8(frame, l4)? as u128,
            F::Icmp6Code if icmp6 => b8(frame, l4 + 1)? as u128,
            F::Icmp6Id if icmp6 && icmp6_has_id(b8(frame, l4)?) => self.icmp_word(frame, 4)?,
            F::Icmp6Sequence if icmp6 && icmp6_has_id(b8(frame, l4)?) => {
                self.icmp_word(frame, 6)?
            }
            // read behind the type nft's dependency names: redirect, destination unreachable
            // (the "fragmentation needed" MTU), packet too big
            F::IcmpGateway if icmp && b8(frame, l4)? == 5 => self.icmp_bytes(frame, 4, 4)?,
            F::IcmpMtu if icmp && b8(frame, l4)? == 3 => self.icmp_bytes(frame, 6, 2)?,
            F::Icmp6Mtu if icmp6 && b8(frame, l4)? == 2 => self.icmp_bytes(frame, 4, 4)?,
            F::IcmpChecksum if icmp => self.icmp_bytes(frame, 2, 2)?,
            F::Icmp6Checksum if icmp6 => self.icmp_bytes(frame, 2, 2)?,
            F::Icmp6PacketTooBig if icmp6 && b8(frame, l4)? == 2 => self.icmp_bytes(frame, 4, 4)?,
            F::Icmp6ParameterProblem if icmp6 && b8(frame, l4)? == 4 => {
                self.icmp_bytes(frame, 4, 4)?
            }
            F::Icmp6MaxDelay if icmp6 && b8(frame, l4)? == 130 => self.icmp_bytes(frame, 4, 2)?,
            F::Icmp6Taddr if icmp6 && matches!(b8(frame, l4)?, 130..=132 | 135..=137) => {
                self.icmp_bytes(frame, 8, 16)?
            }
            F::Icmp6Daddr if icmp6 && b8(frame, l4)? == 137 => self.icmp_bytes(frame, 24, 16)?,
            _ => return None,
        };
        Some(v)
    }

    /// Where the first IPv6 extension header of type `target` starts, found as the kernel's
    /// `ipv6_find_hdr` finds it: walking hop-by-hop, routing, fragment, AH and destination
    /// options headers from the fixed header; a header of another type (or no next header)
    /// ends the walk, found if it is the target; past a fragment header of a later fragment
    /// nothing is found; a header cut short by the packet's end is not found (the first 2
    /// bytes of each, 4 of a routing header, the fragment offset of a fragment header).
    pub fn find_exthdr(&self, frame: &[u8], target: u8) -> Option<usize> {
        if self.l3 != L3::Ipv6 || !self.l3_ok() {
            return None;
        }
        let l3 = self.l3_off as usize;
        let end = self.l3_end().min(frame.len());
        let ip = frame.get(..end)?;
        let mut nh = b8(ip, l3 + 6)?;
        let mut at = l3 + 40;
        for _ in 0..=MAX_EXT_HEADERS {
            let found = nh == target;
            let ext = matches!(
                nh,
                proto::HOPOPTS | proto::ROUTING | proto::FRAGMENT | proto::AH | proto::DSTOPTS
            );
            if !ext {
                // (no next header, 59, is not a header to find either)
                return (found && nh != proto::NONE).then_some(at);
            }
            let (next, len) = (b8(ip, at)?, b8(ip, at + 1)?);
            // a routing header is read whole (`struct ipv6_rt_hdr`, 4 bytes), target or not
            if nh == proto::ROUTING {
                b16(ip, at + 2)?;
            }
            let hlen = match nh {
                proto::FRAGMENT => {
                    if b16(ip, at + 2)? & !7 != 0 && !found {
                        return None;
                    }
                    8
                }
                proto::AH => (len as usize + 2) * 4,
                _ => (len as usize + 1) * 8,
            };
            if found {
                return Some(at);
            }
            nh = next;
            at += hlen;
        }
        None
    }

    /// Raw payload (`@th,16,16`), as nft_payload loads it: `len` bits (1 to 128) at `off`
    /// bits from the start of `base` (0 the link layer header: Ethernet frames only; 1 the
    /// network header; 2 the transport header, absent in later fragments; 3 after the
    /// TCP or UDP header, a GRE version 0 header, or at IPIP's inner header), big-endian; None when the bytes holding them pass the IP
    /// packet's end.
    pub fn raw(&self, frame: &[u8], base: u8, off: usize, len: usize) -> Option<u128> {
        let ip = self.l3_ok();
        if !ip && base != 0 {
            return None;
        }
        let l4 = self.l4_off as usize;
        let start = match base {
            0 if self.link == LinkType::Ethernet => 0,
            1 => self.l3_off as usize,
            2 if self.has_l4 => l4,
            3 if self.has_l4 => match self.l4proto {
                proto::TCP => l4 + (b8(frame, l4 + 12)? >> 4) as usize * 4,
                proto::UDP => l4 + 8,
                // after a GRE version 0 header and its optional words; IPIP's inner header
                proto::GRE | 4 => crate::tunnel::inner_offset(frame, self)?,
                _ => return None,
            },
            _ => return None,
        };
        // (a frame that is not IP: the link layer's bytes up to its end)
        let end = if ip {
            self.l3_end().min(frame.len())
        } else {
            frame.len()
        };
        let first = start + off / 8;
        let nbytes = (off % 8 + len).div_ceil(8);
        if len == 0 || len > 128 || first + nbytes > end {
            return None;
        }
        let b = &frame[first..first + nbytes];
        let skip = off % 8;
        let mut v: u128 = 0;
        for i in 0..len {
            let bit = skip + i;
            v = (v << 1) | ((b[bit / 8] >> (7 - bit % 8)) & 1) as u128;
        }
        Some(v)
    }

    /// A TCP option's (`proto` 6) or an SCTP chunk's (132) bytes, as nft_exthdr reads them:
    /// in the first option or chunk of type `kind`, `len` bytes (at most 16) at `offset`,
    /// big-endian; with `present`, 1 when there is one and 0 when not (also for a packet
    /// of another protocol, or a later fragment: the kernel finds no option there). TCP
    /// options are walked over the whole header (`doff`): an option of kind 0 or 1, or of
    /// length 0, counts one byte, and an end-of-list does not stop the walk; SCTP chunks
    /// from after the common header, padded to 4 bytes, until one of length 0 or the
    /// packet's end; bytes past the option's length or the chunk's length are not read, and
    /// an option that runs past the header is not found (nor seen by `present`).
    pub fn exthdr_l4(
        &self,
        frame: &[u8],
        proto: u8,
        kind: u8,
        offset: usize,
        len: usize,
        present: bool,
    ) -> Option<u128> {
        // an IPv6 extension header (`srh sid[N]`: the routing header's bytes)
        if proto == proto::ROUTING {
            return match (present, self.l3) {
                (_, crate::L3::Ipv6) if present => {
                    Some(self.find_exthdr(frame, proto).is_some() as u128)
                }
                (_, crate::L3::Ipv6) if matches!(len, 1 | 2 | 4 | 16) => {
                    self.exthdr(frame, proto, offset, len)
                }
                _ => None,
            };
        }
        let found = self.find_l4_ext(frame, proto, kind, (!present).then_some(offset + len));
        if present {
            return Some(found.is_some() as u128);
        }
        let at = found? + offset;
        let b = frame.get(at..at + len)?;
        Some(b.iter().fold(0u128, |a, x| (a << 8) | *x as u128))
    }

    /// Where the option or chunk of `kind` starts, when `need` bytes from there lie inside
    /// it (TCP: inside the header; SCTP: inside the chunk and the packet; None: presence
    /// only).
    fn find_l4_ext(&self, frame: &[u8], proto: u8, kind: u8, need: Option<usize>) -> Option<usize> {
        if !self.has_l4 || !self.l3_ok() || self.l4proto != proto {
            return None;
        }
        let l4 = self.l4_off as usize;
        let end = self.l3_end().min(frame.len());
        if proto == proto::TCP {
            let hlen = (b8(frame, l4 + 12)? >> 4) as usize * 4;
            if hlen < 20 || l4 + hlen > end {
                return None;
            }
            let opt = &frame[l4..l4 + hlen];
            let mut i = 20;
            while i + 1 < hlen {
                let l = if opt[i] <= 1 || opt[i + 1] == 0 {
                    1
                } else {
                    opt[i + 1] as usize
                };
                if opt[i] == kind {
                    // nft_exthdr_tcp_eval: the first option of the kind answers; it must lie
                    // inside the header and the field inside it, else it is not found
                    // (`present` too: it says 0)
                    return (i + l <= hlen && need.unwrap_or(1) <= l).then_some(l4 + i);
                }
                i += l;
            }
            None
        } else if proto == proto::SCTP {
            let mut at = l4 + 12;
            while at < end {
                let ty = b8(frame, at).filter(|_| at + 4 <= end)?;
                let clen = b16(frame, at + 2)? as usize;
                if clen == 0 {
                    return None;
                }
                if ty == kind {
                    // (presence needs only the chunk's header)
                    return need
                        .map_or(true, |n| n <= clen && at + clen <= end)
                        .then_some(at);
                }
                at += (clen + 3) & !3;
            }
            None
        } else {
            None
        }
    }

    /// `len` bytes (1, 2, 4 or 16) at `off` in the first extension header of type `target`
    /// ([`PacketMeta::find_exthdr`]), if they lie inside the IP packet.
    fn exthdr(&self, frame: &[u8], target: u8, off: usize, len: usize) -> Option<u128> {
        let at = self.find_exthdr(frame, target)? + off;
        let ip = frame.get(..self.l3_end().min(frame.len()))?;
        match len {
            1 => b8(ip, at).map(u128::from),
            2 => b16(ip, at).map(u128::from),
            4 => b32(ip, at).map(u128::from),
            _ => b128(ip, at),
        }
    }

    /// A 16-bit word of the ICMP header at `at`, if it lies inside the IP packet.
    /// `len` bytes (2 or 4) of the ICMP header at `at`, big-endian, if the packet holds them.
    fn icmp_bytes(&self, frame: &[u8], at: usize, len: usize) -> Option<u128> {
        let i = self.l4_off as usize + at;
        if i + len > self.l3_end() {
            return None;
        }
        match len {
            2 => b16(frame, i).map(u128::from),
            16 => frame
                .get(i..i + 16)
                .and_then(|b| b.try_into().ok())
                .map(u128::from_be_bytes),
            _ => b32(frame, i).map(u128::from),
        }
    }

    fn icmp_word(&self, frame: &[u8], at: usize) -> Option<u128> {
        let i = self.l4_off as usize + at;
        if i + 2 > self.l3_end() {
            return None;
        }
        b16(frame, i).map(u128::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_unique_kebab_case() {
        let mut seen = std::collections::HashSet::new();
        for m in Malformed::ALL {
            let r = m.reason();
            assert!(seen.insert(r), "duplicate reason {r}");
            assert!(r
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'));
            assert_eq!(Malformed::from_reason(r), Some(*m));
        }
        assert!(Malformed::TruncatedIpv4.is_l3());
        assert!(!Malformed::TruncatedTcp.is_l3());
    }

    #[test]
    fn defaults() {
        let m = PacketMeta::default();
        assert_eq!(m.l3, L3::Other(0));
        assert_eq!(m.frag, Frag::None);
        assert_eq!(m.malformed, None);
    }

    #[test]
    fn meta_is_small() {
        assert!(std::mem::size_of::<PacketMeta>() <= 80);
    }
}
