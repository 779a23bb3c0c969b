//! The packet the actions work on, cut once into its IP header (IPv4 with options, or IPv6
//! with its extension headers), its TCP or UDP header and its payload ([`Dissect`]), and the
//! packets they make from it ([`Seg`]): the same headers with fields changed and another
//! payload, rebuilt with correct lengths and checksums ([`Seg::build`]), and cut into two IP
//! fragments at a position ([`ip_fragment`]).

use weir_wire::checksum::{checksum, checksum_with, pseudo_v4, pseudo_v6, udp_final};
use weir_wire::{Frag, LinkType, PacketMeta, L3};

pub(crate) const TCP: u8 = 6;
pub(crate) const UDP: u8 = 17;

/// A sound, unfragmented IPv4/IPv6 TCP or UDP packet, cut into its parts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dissect<'a> {
    pub v6: bool,
    /// The IP header with options / extension headers: everything before the L4 header.
    pub ip: &'a [u8],
    pub l4proto: u8,
    /// The TCP header with its options, or the 8-byte UDP header.
    pub l4: &'a [u8],
    pub payload: &'a [u8],
}

impl<'a> Dissect<'a> {
    /// None for anything else: not IP at offset 0, malformed, a fragment, not TCP/UDP, a
    /// jumbogram, lengths that lie.
    pub fn parse(packet: &'a [u8]) -> Option<Dissect<'a>> {
        let m = PacketMeta::parse(packet, LinkType::RawIp);
        if !m.l3_ok() || m.malformed.is_some() || m.frag != Frag::None || !m.has_l4 {
            return None;
        }
        if m.l3_off != 0 || !matches!(m.l4proto, TCP | UDP) {
            return None;
        }
        let v6 = match m.l3 {
            L3::Ipv4 => false,
            L3::Ipv6 => true,
            _ => return None,
        };
        let end = m.l3_end();
        if end > packet.len() || (v6 && u16::from_be_bytes([packet[4], packet[5]]) == 0) {
            return None;
        }
        let l4off = m.l4_off as usize;
        let hlen = if m.l4proto == TCP {
            (*packet.get(l4off + 12)? >> 4) as usize * 4
        } else {
            8
        };
        if hlen < if m.l4proto == TCP { 20 } else { 8 } || l4off + hlen > end || l4off < 20 {
            return None;
        }
        Some(Dissect {
            v6,
            ip: &packet[..l4off],
            l4proto: m.l4proto,
            l4: &packet[l4off..l4off + hlen],
            payload: &packet[l4off + hlen..end],
        })
    }

    pub fn is_tcp(&self) -> bool {
        self.l4proto == TCP
    }

    pub fn tcp_flags(&self) -> u8 {
        if self.is_tcp() {
            self.l4[13]
        } else {
            0
        }
    }
}

/// A packet being made: headers copied from a [`Dissect`], changed, with a payload.
#[derive(Clone, Debug)]
pub(crate) struct Seg {
    pub v6: bool,
    pub ip: Vec<u8>,
    pub l4proto: u8,
    pub l4: Vec<u8>,
    pub payload: Vec<u8>,
    /// Make the TCP/UDP checksum invalid.
    pub badsum: bool,
}

fn rd32(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// IPv6 extension headers whose length byte counts 8-byte units after the first 8 (AH: 4-byte
/// units after the first 8, as RFC 4302 says).
fn ext_len(kind: u8, lenbyte: u8) -> Option<usize> {
    match kind {
        0 | 43 | 60 | 135 | 139 | 140 | 253 | 254 => Some((lenbyte as usize + 1) * 8),
        51 => Some((lenbyte as usize + 2) * 4),
        _ => None,
    }
}

/// The extension headers of an IPv6 header block: (type, offset), and the offset of the
/// next-header byte that names each (6 for the first).
fn ext_chain(ip: &[u8]) -> Vec<(u8, usize, usize)> {
    let mut v = Vec::new();
    let (mut nh, mut nh_pos, mut off) = (ip[6], 6usize, 40usize);
    while off + 2 <= ip.len() {
        let Some(len) = ext_len(nh, ip[off + 1]) else {
            break;
        };
        v.push((nh, off, nh_pos));
        nh_pos = off;
        nh = ip[off];
        off += len;
    }
    v
}

impl Seg {
    pub fn from(d: &Dissect) -> Seg {
        Seg {
            v6: d.v6,
            ip: d.ip.to_vec(),
            l4proto: d.l4proto,
            l4: d.l4.to_vec(),
            payload: d.payload.to_vec(),
            badsum: false,
        }
    }

    pub fn is_tcp(&self) -> bool {
        self.l4proto == TCP
    }
    pub fn seq(&self) -> u32 {
        rd32(&self.l4, 4)
    }
    pub fn set_seq(&mut self, v: u32) {
        self.l4[4..8].copy_from_slice(&v.to_be_bytes());
    }
    pub fn ack(&self) -> u32 {
        rd32(&self.l4, 8)
    }
    pub fn set_ack(&mut self, v: u32) {
        self.l4[8..12].copy_from_slice(&v.to_be_bytes());
    }
    pub fn flags(&self) -> u8 {
        self.l4[13]
    }
    pub fn set_flags(&mut self, f: u8) {
        self.l4[13] = f;
    }
    pub fn set_urgent(&mut self, p: u16) {
        self.l4[18..20].copy_from_slice(&p.to_be_bytes());
    }
    pub fn set_window(&mut self, w: u16) {
        self.l4[14..16].copy_from_slice(&w.to_be_bytes());
    }
    /// IPv4 TTL / IPv6 hop limit.
    pub fn set_ttl(&mut self, t: u8) {
        let i = if self.v6 { 7 } else { 8 };
        self.ip[i] = t;
    }
    pub fn ip_id(&self) -> Option<u16> {
        (!self.v6).then(|| u16::from_be_bytes([self.ip[4], self.ip[5]]))
    }
    pub fn set_ip_id(&mut self, id: u16) {
        if !self.v6 {
            self.ip[4..6].copy_from_slice(&id.to_be_bytes());
        }
    }

    /// The TCP options, each as its bytes (kind, length, data; a lone byte for NOP), up to
    /// end-of-options. None when they are malformed (or for UDP).
    pub fn options(&self) -> Option<Vec<Vec<u8>>> {
        if !self.is_tcp() {
            return None;
        }
        let o = &self.l4[20..];
        let mut v = Vec::new();
        let mut i = 0;
        while i < o.len() {
            match o[i] {
                0 => break,
                1 => {
                    v.push(vec![1]);
                    i += 1;
                }
                _ => {
                    let len = *o.get(i + 1)? as usize;
                    if len < 2 || i + len > o.len() {
                        return None;
                    }
                    v.push(o[i..i + len].to_vec());
                    i += len;
                }
            }
        }
        Some(v)
    }

    /// Replace the TCP options (padded with end-of-options to a multiple of 4). False, and
    /// nothing changed, if they would take more than 40 bytes.
    pub fn set_options(&mut self, opts: &[Vec<u8>]) -> bool {
        let mut raw: Vec<u8> = opts.concat();
        raw.resize(raw.len().div_ceil(4) * 4, 0);
        if raw.len() > 40 {
            return false;
        }
        self.l4.truncate(20);
        self.l4.extend_from_slice(&raw);
        true
    }

    /// Insert an IPv6 extension header (`data`: the bytes after next-header and length) at
    /// the front of the chain or at its end (before the transport header).
    pub fn insert_ext(&mut self, kind: u8, data: &[u8], front: bool) {
        if !self.v6 {
            return;
        }
        let lenbyte = if kind == 51 {
            ((data.len() + 2) / 4).saturating_sub(2)
        } else {
            ((data.len() + 2) / 8).saturating_sub(1)
        } as u8;
        let (at, nh_pos) = if front {
            (40, 6)
        } else {
            let chain = ext_chain(&self.ip);
            match chain.last() {
                Some(&(_, off, _)) => (self.ip.len(), off),
                None => (40, 6),
            }
        };
        let mut h = vec![self.ip[nh_pos], lenbyte];
        h.extend_from_slice(data);
        self.ip[nh_pos] = kind;
        self.ip.splice(at..at, h);
    }

    /// The bytes of IP options / extension headers and TCP options (nfqws2's
    /// `l3l4_extra_len`).
    pub fn extra_len(&self) -> usize {
        let l3 = self.ip.len() - if self.v6 { 40 } else { 20 };
        let l4 = self.l4.len() - if self.is_tcp() { 20 } else { 8 };
        l3 + l4
    }

    /// The packet, with lengths, the IPv4 header checksum and the transport checksum
    /// computed (the transport checksum made wrong if `badsum`). None if it would be longer
    /// than an IP length field can say.
    pub fn build(&self) -> Option<Vec<u8>> {
        let mut l4 = self.l4.clone();
        let l4len = l4.len() + self.payload.len();
        if self.is_tcp() {
            l4[12] = (((l4.len() / 4) as u8) << 4) | (l4[12] & 0x0f);
            l4[16..18].fill(0);
        } else {
            l4[4..6].copy_from_slice(&u16::try_from(l4len).ok()?.to_be_bytes());
            l4[6..8].fill(0);
        }
        let mut p = self.ip.clone();
        let pseudo = if self.v6 {
            let plen = u16::try_from(p.len() - 40 + l4len).ok()?;
            p[4..6].copy_from_slice(&plen.to_be_bytes());
            let s: [u8; 16] = p[8..24].try_into().ok()?;
            let d: [u8; 16] = p[24..40].try_into().ok()?;
            pseudo_v6(s, d, self.l4proto, l4len as u32)
        } else {
            let tot = u16::try_from(p.len() + l4len).ok()?;
            p[2..4].copy_from_slice(&tot.to_be_bytes());
            p[10..12].fill(0);
            let c = checksum(&p);
            p[10..12].copy_from_slice(&c.to_be_bytes());
            let s: [u8; 4] = p[12..16].try_into().ok()?;
            let d: [u8; 4] = p[16..20].try_into().ok()?;
            pseudo_v4(s, d, self.l4proto, l4len as u16)
        };
        let hl = p.len();
        p.extend_from_slice(&l4);
        p.extend_from_slice(&self.payload);
        let mut c = checksum_with(pseudo, &p[hl..]);
        let at = hl + if self.is_tcp() { 16 } else { 6 };
        if !self.is_tcp() {
            c = udp_final(c);
        }
        if self.badsum {
            // never the other form of the right sum (0 <-> 0xffff), never "no checksum"
            c ^= 0xbeaf;
            if c == 0 {
                c = 0x4eaf;
            }
        }
        p[at..at + 2].copy_from_slice(&c.to_be_bytes());
        Some(p)
    }
}

/// Cut a packet made by [`Seg::build`] into two IP fragments, the first carrying `pos` bytes
/// (a multiple of 8) of what follows the IPv4 header, or of the IPv6 fragmentable part. An
/// IPv6 fragment header goes after hop-by-hop, routing and a destination options header
/// before them; `next` overrides its next-header byte in the second fragment. `id` is the
/// identification (IPv4: its low 16 bits, never 0). None when `pos` is not inside.
pub(crate) fn ip_fragment(
    pkt: &[u8],
    v6: bool,
    pos: usize,
    next: Option<u8>,
    id: u32,
) -> Option<(Vec<u8>, Vec<u8>)> {
    if pos == 0 || !pos.is_multiple_of(8) {
        return None;
    }
    if !v6 {
        let hl = (*pkt.first()? & 0x0f) as usize * 4;
        if hl < 20 || hl + pos >= pkt.len() || hl + pos > 0xffff {
            return None;
        }
        let mut id16 = u16::from_be_bytes([pkt[4], pkt[5]]);
        if id16 == 0 {
            id16 = (id as u16).max(1);
        }
        let mk = |body: &[u8], off8: usize, more: bool| {
            let mut h = pkt[..hl].to_vec();
            h[2..4].copy_from_slice(&((hl + body.len()) as u16).to_be_bytes());
            h[4..6].copy_from_slice(&id16.to_be_bytes());
            let fw = (off8 as u16 & 0x1fff) | if more { 0x2000 } else { 0 };
            h[6..8].copy_from_slice(&fw.to_be_bytes());
            h[10..12].fill(0);
            let c = checksum(&h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            h.extend_from_slice(body);
            h
        };
        return Some((
            mk(&pkt[hl..hl + pos], 0, true),
            mk(&pkt[hl + pos..], pos / 8, false),
        ));
    }
    if pkt.len() < 40 {
        return None;
    }
    // the end of the IPv6 header block: walk the chain over the whole packet
    let chain = ext_chain(pkt);
    let l4off = chain.last().map_or(40, |&(k, off, _)| {
        off + ext_len(k, pkt[off + 1]).unwrap_or(0)
    });
    let first_dst = chain.iter().position(|c| c.0 == 60);
    let idx = chain
        .iter()
        .enumerate()
        .rev()
        .find(|(i, c)| c.0 == 0 || c.0 == 43 || (c.0 == 60 && Some(*i) == first_dst))
        .map_or(0, |(i, _)| i + 1);
    let (ins, nh_pos) = match chain.get(idx) {
        Some(&(_, off, nhp)) => (off, nhp),
        None => (l4off, chain.last().map_or(6, |&(_, off, _)| off)),
    };
    let frag_part = pkt.get(ins..)?;
    if pos >= frag_part.len() || ins + 8 + pos > 0xffff + 40 {
        return None;
    }
    let nh = pkt[nh_pos];
    let mk = |body: &[u8], off: usize, more: bool, nh: u8| {
        let mut h = pkt[..ins].to_vec();
        h[nh_pos] = 44;
        let plen = (ins - 40 + 8 + body.len()) as u16;
        h[4..6].copy_from_slice(&plen.to_be_bytes());
        h.push(nh);
        h.push(0);
        let fw = ((off as u16) & 0xfff8) | more as u16;
        h.extend_from_slice(&fw.to_be_bytes());
        h.extend_from_slice(&id.to_be_bytes());
        h.extend_from_slice(body);
        h
    };
    Some((
        mk(&frag_part[..pos], 0, true, nh),
        mk(&frag_part[pos..], pos, false, next.unwrap_or(nh)),
    ))
}
