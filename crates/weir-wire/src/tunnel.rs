//! A tunnel's inner packet, found on demand as the kernel's `nft_inner` finds it: VXLAN and
//! Geneve after a UDP header, GRE and GRETAP after the GRE header of an IP packet.
//!
//! [`Inner::parse`] takes an outer [`PacketMeta`] and computes, without allocating or
//! copying, the offsets `nft_inner_parse` gives (`struct nft_inner_tun_ctx`): the tunnel
//! header's (`inner_tunoff`), the inner link layer's (`inner_lloff`), network header's
//! (`inner_nhoff`) and transport header's (`inner_thoff`), the inner `meta protocol`
//! (`llproto`) and `meta l4proto`. [`Inner::get`] reads a field of the inner packet (or of
//! the tunnel header) through them.
//!
//! What the kernel does, and so this module:
//!
//! - Where the inner part starts (`nft_payload_inner_offset`): after the 8-byte UDP header,
//!   after the TCP header (`doff * 4`), after a GRE version 0 header (4 bytes, 4 more for each
//!   of the checksum, key and sequence flags; another version gives up); never in a later
//!   fragment or without a transport header.
//! - VXLAN and Geneve (`NFT_INNER_HDRSIZE`): after UDP, the tunnel header is there, 8 bytes
//!   (Geneve: plus its options, `opt_len * 4`), and an Ethernet frame follows; after GRE the
//!   tunnel header is the GRE header and the frame follows it; another protocol gives up.
//! - GRE (no link layer): the inner network protocol is the IP version nibble (4 or 6, else
//!   it gives up); GRETAP: an Ethernet frame follows the GRE header.
//! - An inner Ethernet frame must carry IPv4, IPv6 or one 802.1Q tag (then `meta protocol`
//!   is 0x8100 and the network header is after the tag); anything else gives up.
//! - Inner IPv4: version 4 and IHL >= 5 (the total length is not checked); a fragment whose
//!   offset is not 0 has no transport header. Inner IPv6: version 6; `meta l4proto` is the
//!   protocol after the extension headers, but the transport header is taken right after
//!   the fixed header (as `nft_inner_parse_l2l3` does); a later fragment has none.
//!
//! When it gives up (a header cut short, a fragment, an inner packet it cannot parse), every
//! inner read is `None`: the rule breaks.

use crate::field::{Field, Layer};
use crate::meta::{proto, Frag, LinkType, PacketMeta, ETH_P_8021Q, ETH_P_IP, ETH_P_IPV6, L3};

/// A tunnel whose inner packet a rule reads, numbered as nft's `enum nft_inner_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tunnel {
    Vxlan = 1,
    Geneve = 2,
    Gre = 3,
    Gretap = 4,
}

/// `NFT_INNER_HDRSIZE`: a tunnel header of a fixed size follows the outer UDP header.
pub const INNER_HDRSIZE: u8 = 1;
/// `NFT_INNER_LL`: the inner packet starts with an Ethernet header.
pub const INNER_LL: u8 = 2;
/// `NFT_INNER_NH`: the inner network header is parsed.
pub const INNER_NH: u8 = 4;
/// `NFT_INNER_TH`: the inner transport header is parsed.
pub const INNER_TH: u8 = 8;

impl Tunnel {
    /// By nft's keyword (`vxlan`, `geneve`, `gre`, `gretap`).
    pub fn from_name(s: &str) -> Option<Tunnel> {
        Some(match s {
            "vxlan" => Tunnel::Vxlan,
            "geneve" => Tunnel::Geneve,
            "gre" => Tunnel::Gre,
            "gretap" => Tunnel::Gretap,
            _ => return None,
        })
    }

    /// nft's keyword.
    pub fn name(self) -> &'static str {
        match self {
            Tunnel::Vxlan => "vxlan",
            Tunnel::Geneve => "geneve",
            Tunnel::Gre => "gre",
            Tunnel::Gretap => "gretap",
        }
    }

    /// The tunnel header's size as nft gives it (`hdrsize`: 8 for VXLAN and Geneve, 4 for
    /// GRE's base header).
    pub fn hdrsize(self) -> u8 {
        match self {
            Tunnel::Vxlan | Tunnel::Geneve => 8,
            Tunnel::Gre | Tunnel::Gretap => 4,
        }
    }

    /// The `NFT_INNER_*` flags nft compiles the tunnel's inner matches with.
    pub fn flags(self) -> u8 {
        match self {
            Tunnel::Vxlan | Tunnel::Geneve => INNER_HDRSIZE | INNER_LL | INNER_NH | INNER_TH,
            Tunnel::Gre => INNER_NH | INNER_TH,
            Tunnel::Gretap => INNER_LL | INNER_NH | INNER_TH,
        }
    }

    /// Whether the tunnel's own header field `f` belongs to this tunnel (`vxlan vni`).
    pub fn owns(self, f: Field) -> bool {
        matches!(
            (self, f),
            (Tunnel::Vxlan, Field::VxlanVni | Field::VxlanFlags)
                | (
                    Tunnel::Geneve,
                    Field::GeneveVni | Field::GeneveFlags | Field::GeneveType
                )
                | (
                    Tunnel::Gre | Tunnel::Gretap,
                    Field::GreVersion | Field::GreFlags | Field::GreProtocol
                )
        )
    }
}

#[inline]
fn b8(f: &[u8], i: usize) -> Option<u8> {
    f.get(i).copied()
}

#[inline]
fn b16(f: &[u8], i: usize) -> Option<u16> {
    let s = f.get(i..i.checked_add(2)?)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

/// Where a tunnel's inner part starts after the outer transport header
/// (`nft_payload_inner_offset`), or `None` (no transport header, a later fragment, a GRE
/// header cut short or not of version 0, a protocol that carries nothing inner).
pub fn inner_offset(frame: &[u8], pm: &PacketMeta) -> Option<usize> {
    if !pm.l3_ok() || pm.frag == Frag::Later || pm.l4_off == 0 {
        return None;
    }
    let th = pm.l4_off as usize;
    let ip = frame.get(..pm.l3_end().min(frame.len()))?;
    match pm.l4proto {
        proto::UDP => Some(th + 8),
        proto::TCP => {
            let doff = (b8(ip, th + 12)? >> 4) as usize * 4;
            Some(th + doff)
        }
        proto::GRE => {
            let flags = b16(ip, th)?;
            if flags & 7 != 0 {
                return None;
            }
            let mut off = th + 4;
            for bit in [0x8000u16, 0x2000, 0x1000] {
                if flags & bit != 0 {
                    off += 4;
                }
            }
            Some(off)
        }
        4 => Some(th),
        _ => None,
    }
}

/// The offsets of a tunnel's inner packet in the frame (all absolute), as
/// `struct nft_inner_tun_ctx` holds them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inner {
    /// The tunnel header (`NFT_PAYLOAD_CTX_INNER_TUN`): VXLAN's or Geneve's after the UDP
    /// header; None for GRE and GRETAP (their header is read as the outer transport header).
    pub tun_off: Option<usize>,
    /// The inner Ethernet header (VXLAN, Geneve, GRETAP).
    pub ll_off: Option<usize>,
    /// The inner network header.
    pub nh_off: usize,
    /// The inner transport header (None in a later fragment).
    pub th_off: Option<usize>,
    /// The inner `meta protocol`: 0x0800, 0x86dd or 0x8100 (a tagged inner frame).
    pub llproto: u16,
    /// The inner IP version's EtherType (under a tag too).
    pub l3proto: u16,
    /// The inner `meta l4proto` (valid with `th_off`).
    pub l4proto: u8,
    /// Where the packet the kernel reads ends (the outer IP packet's end).
    pub end: usize,
}

impl Inner {
    /// Find the inner packet of `tunnel` in `frame` (parsed as `pm`), as `nft_inner_parse`
    /// does; `None` when it gives up.
    pub fn parse(frame: &[u8], pm: &PacketMeta, tunnel: Tunnel) -> Option<Inner> {
        let start = inner_offset(frame, pm)?;
        let end = pm.l3_end().min(frame.len());
        let f = frame.get(..end)?;
        let flags = tunnel.flags();
        let mut off = start;
        let mut tun_off = None;
        if flags & INNER_HDRSIZE != 0 {
            if pm.l4proto == proto::GRE {
                // the tunnel header is the GRE header, nothing skipped (the kernel's
                // "set tunnel offset to GRE header offset")
                tun_off = Some(pm.l4_off as usize);
            } else if pm.l4proto != proto::UDP {
                return None;
            } else {
                tun_off = Some(off);
                off += tunnel.hdrsize() as usize;
                if tunnel == Tunnel::Geneve {
                    off += (b8(f, start)? & 0x3f) as usize * 4;
                }
            }
        }
        let mut ll_off = None;
        let (llproto, l3proto) = if flags & INNER_LL != 0 {
            match b16(f, off + 12)? {
                t @ (ETH_P_IP | ETH_P_IPV6) => {
                    ll_off = Some(off);
                    off += 14;
                    (t, t)
                }
                ETH_P_8021Q => {
                    let t = b16(f, off + 16)?;
                    ll_off = Some(off);
                    off += 18;
                    (ETH_P_8021Q, t)
                }
                _ => return None,
            }
        } else {
            match b8(f, off)? >> 4 {
                4 => (ETH_P_IP, ETH_P_IP),
                6 => (ETH_P_IPV6, ETH_P_IPV6),
                _ => return None,
            }
        };
        let nh = off;
        let mut inner = Inner {
            tun_off,
            ll_off,
            nh_off: nh,
            th_off: None,
            llproto,
            l3proto,
            l4proto: 0,
            end,
        };
        match l3proto {
            ETH_P_IP => {
                let vihl = b8(f, nh)?;
                f.get(nh..nh + 20)?;
                if vihl >> 4 != 4 || vihl & 0x0f < 5 {
                    return None;
                }
                if b16(f, nh + 6)? & 0x1fff == 0 {
                    inner.th_off = Some(nh + (vihl & 0x0f) as usize * 4);
                    inner.l4proto = b8(f, nh + 9)?;
                }
            }
            ETH_P_IPV6 => {
                f.get(nh..nh + 40)?;
                if b8(f, nh)? >> 4 != 6 {
                    return None;
                }
                let (l4, later) = ipv6_l4(f, nh)?;
                if !later {
                    inner.th_off = Some(nh + 40);
                    inner.l4proto = l4;
                }
            }
            _ => return None,
        }
        Some(inner)
    }

    /// A view of the inner packet for [`PacketMeta::get`], on `frame[base..self.end]`:
    /// `base` is the inner link layer's start (or the network header's, without one), `l3`
    /// the network layer the view says it has.
    fn view(&self, l3: L3) -> (usize, PacketMeta) {
        let base = self.ll_off.unwrap_or(self.nh_off);
        let rel = |o: usize| (o - base).min(u16::MAX as usize) as u16;
        let l3_len = self.end.saturating_sub(self.nh_off).min(u16::MAX as usize) as u16;
        let mut m = PacketMeta {
            len: (self.end - base).min(u32::MAX as usize) as u32,
            l3,
            vlan: None,
            l3_off: rel(self.nh_off),
            l3_len,
            link: if self.ll_off.is_some() {
                LinkType::Ethernet
            } else {
                LinkType::RawIp
            },
            ..PacketMeta::default()
        };
        if let Some(th) = self.th_off {
            m.l4_off = rel(th);
            m.l4proto = self.l4proto;
            m.has_l4 = true;
        }
        (base, m)
    }

    /// Read field `f` of the inner packet (`vxlan ip saddr` reads `ip saddr` here) or of
    /// the tunnel header (`vxlan vni`: tunnel header fields need `tun_off`). Network fields
    /// need the inner `meta protocol` of their family (a tagged inner frame has none, as
    /// nft's dependency on `meta protocol` or `ether type` says), transport fields the inner
    /// transport header of their protocol; `meta protocol` and `meta l4proto` are the
    /// inner ones. `None`: the packet does not have it, the rule breaks.
    pub fn get(&self, frame: &[u8], f: Field) -> Option<u128> {
        let frame = frame.get(..self.end)?;
        match f {
            Field::MetaProtocol => return Some(self.llproto as u128),
            Field::MetaL4proto => return self.th_off.map(|_| self.l4proto as u128),
            Field::VxlanVni | Field::GeneveVni => {
                let t = self.tun_off?;
                let s = frame.get(t + 4..t + 7)?;
                return Some(u32::from_be_bytes([0, s[0], s[1], s[2]]) as u128);
            }
            Field::VxlanFlags => return b8(frame, self.tun_off?).map(u128::from),
            Field::GeneveFlags => return b8(frame, self.tun_off? + 1).map(u128::from),
            Field::GeneveType => return b16(frame, self.tun_off? + 2).map(u128::from),
            _ => {}
        }
        let l3 = match self.l3proto {
            ETH_P_IP => L3::Ipv4,
            _ => L3::Ipv6,
        };
        let shown = if self.llproto == self.l3proto {
            l3
        } else {
            L3::Other(self.llproto)
        };
        // (an inner ICMP field depends on the inner packet's version: nft checks the inner
        // EtherType first)
        match (f.layer(), shown) {
            (Layer::Icmp, L3::Ipv4) | (Layer::Icmp6, L3::Ipv6) => {}
            (Layer::Icmp | Layer::Icmp6, _) => return None,
            _ => {}
        }
        let l3 = match f.layer() {
            Layer::Ip4 | Layer::Ip6 | Layer::Icmp | Layer::Icmp6 => shown,
            Layer::Link if self.ll_off.is_none() => return None,
            Layer::Link | Layer::Transport(_) | Layer::AnyPorts => l3,
            Layer::Meta => return None,
        };
        let (base, mut m) = self.view(l3);
        let inner = frame.get(base..)?;
        if f == Field::VlanId {
            return (self.llproto == ETH_P_8021Q)
                .then(|| b16(inner, 14).map(|t| (t & 0x0fff) as u128))
                .flatten();
        }
        if f.layer() == Layer::AnyPorts && m.has_l4 {
            let th = m.l4_off as usize;
            m.has_ports = matches!(
                m.l4proto,
                proto::TCP | proto::UDP | proto::UDPLITE | proto::SCTP | proto::DCCP
            );
            m.sport = b16(inner, th)?;
            m.dport = b16(inner, th + 2)?;
        }
        m.get(inner, f)
    }
}

/// Read `field` of `tunnel` in a frame: a field of its inner packet or of its own header
/// ([`Inner::get`]), GRE's own header fields from the outer transport header (the kernel
/// reads them with a plain payload load, without looking inside). `None`: the rule breaks.
pub fn read(frame: &[u8], pm: &PacketMeta, tunnel: Tunnel, field: Field) -> Option<u128> {
    if matches!(
        field,
        Field::GreVersion | Field::GreFlags | Field::GreProtocol
    ) {
        return pm.get(frame, field);
    }
    Inner::parse(frame, pm, tunnel)?.get(frame, field)
}

/// The protocol after an IPv6 header's extension headers (`ipv6_find_hdr` with no target)
/// and whether the packet is a later fragment; `None` when a header is cut short.
fn ipv6_l4(f: &[u8], nh: usize) -> Option<(u8, bool)> {
    let mut next = b8(f, nh + 6)?;
    let mut at = nh + 40;
    for _ in 0..=crate::meta::MAX_EXT_HEADERS {
        match next {
            proto::HOPOPTS | proto::ROUTING | proto::DSTOPTS | proto::AH => {
                let n = b8(f, at)?;
                let len = b8(f, at + 1)? as usize;
                at += if next == proto::AH {
                    (len + 2) * 4
                } else {
                    (len + 1) * 8
                };
                next = n;
            }
            proto::FRAGMENT => {
                let n = b8(f, at)?;
                if b16(f, at + 2)? & !7 != 0 {
                    return Some((n, true));
                }
                at += 8;
                next = n;
            }
            p => return Some((p, false)),
        }
    }
    None
}

#[cfg(test)]
mod tests;
