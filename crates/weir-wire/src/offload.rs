//! Doing in software what a device would do for offloaded frames: finishing partial
//! checksums and cutting TCP super-frames into MTU-sized segments.
//!
//! Senders on the same host (veth pairs, containers, VMs through tap) leave work to the
//! device by default, and a frame weir reads from an interface can carry it unfinished:
//!
//! - **Partial checksums** (Linux `CHECKSUM_PARTIAL`): the TCP/UDP checksum field holds the
//!   folded sum of the pseudo-header, not complemented (`~csum_tcpudp_magic(saddr, daddr,
//!   len, proto, 0)` in `__tcp_v4_send_check`, `udp4_hwcsum`, `__tcp_v6_send_check`,
//!   `udp6_hwcsum_outgoing`; `len` is the whole transport length, for a super-frame too, and
//!   for GRO-merged frames `tcp4_gro_complete` / `tcp6_gro_complete` leave the same value).
//!   [`partial_checksum`] gives that value, [`looks_partial`] tells a frame that carries it
//!   and does not verify, [`complete_checksum`] computes the checksum from scratch and stores
//!   it, [`finish_partial`] does what a device does with `csum_start` / `csum_offset`.
//! - **Super-frames** (TSO/GSO on the sender, GRO on a receiving NIC): one TCP segment larger
//!   than the MTU, which the device was to cut. [`segment_tcp`] cuts it as Linux's software
//!   GSO does (`tcp_gso_segment` with `inet_gso_segment` / `ipv6_gso_segment`): the headers
//!   are copied to every segment, each carries `mss` payload bytes (the last the rest), the
//!   IPv4 ID goes up by one per segment (from the super-frame's), the IPv4 total length or
//!   IPv6 payload length is each segment's, the sequence number advances by the payload
//!   before it, FIN and PSH stay only on the last segment and CWR only on the first, and the
//!   IPv4 header and TCP checksums are computed in full.
//!
//! Every function takes the frame with the [`PacketMeta`] it was parsed into
//! ([`PacketMeta::parse`]), reads through bounds-checked accesses and answers an
//! [`OffloadError`] instead of panicking when the frame is not what it should be (too short,
//! lengths that lie, a meta of another frame). Only TCP and UDP over IPv4 or IPv6 (with
//! extension headers) are handled; not fragments, and not IPv4 / IPv6 packets whose length
//! field is 0 (BIG TCP, jumbograms). An IPv6 routing header with segments left makes the
//! pseudo-header use the final destination (RFC 8200 section 8.1): the last address of a
//! type 0 or 2 header, the first segment of a type 4 (segment routing) header.
//!
//! [`complete_checksum`], [`set_partial_checksum`] and [`finish_partial`] do not allocate;
//! [`segment_tcp`] returns new frames, [`segment_tcp_each`] reuses one buffer.

use crate::checksum::{fold, pseudo_v4, pseudo_v6, sum};
use crate::meta::{proto, Frag, PacketMeta, L3};
use std::fmt;

/// Why an offload could not be done on a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OffloadError {
    /// Not TCP or UDP with a complete header over a sound IPv4 / IPv6 header (including
    /// frames the parser found malformed, and non-IP frames).
    NotTcpUdp,
    /// An IP fragment: its transport checksum covers the reassembled datagram.
    Fragment,
    /// The frame is shorter than its headers or length fields say (or the meta is not this
    /// frame's).
    Truncated,
    /// An IPv4 total length or IPv6 payload length of 0 (BIG TCP, jumbogram): not handled.
    Jumbo,
    /// Segmenting a frame that is not TCP.
    NotTcp,
    /// An MSS of 0.
    BadMss,
    /// A checksum start / offset outside the packet (see [`finish_partial`]).
    BadOffset,
}

impl fmt::Display for OffloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OffloadError::NotTcpUdp => "not TCP or UDP over a sound IP header",
            OffloadError::Fragment => "an IP fragment",
            OffloadError::Truncated => "frame shorter than its headers say",
            OffloadError::Jumbo => "IP length field 0 (BIG TCP / jumbogram) not handled",
            OffloadError::NotTcp => "not TCP",
            OffloadError::BadMss => "MSS 0",
            OffloadError::BadOffset => "checksum start or offset outside the packet",
        })
    }
}

impl std::error::Error for OffloadError {}

/// What the transport checksum of a frame is, as [`classify_checksum`] finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CsumState {
    /// It verifies.
    Valid,
    /// UDP over IPv4 with a checksum field of 0: no checksum (RFC 768).
    None,
    /// It does not verify and the field holds what Linux leaves for the device to finish
    /// ([`partial_checksum`]).
    Partial,
    /// It does not verify and is not partial: a damaged packet.
    Bad,
}

#[inline]
fn b16(f: &[u8], i: usize) -> Option<u16> {
    let s = f.get(i..i.checked_add(2)?)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

#[inline]
fn b32(f: &[u8], i: usize) -> Option<u32> {
    let s = f.get(i..i.checked_add(4)?)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

#[inline]
fn arr<const N: usize>(f: &[u8], i: usize) -> Option<[u8; N]> {
    f.get(i..i.checked_add(N)?)?.try_into().ok()
}

/// Where the transport segment of a frame lies, and its pseudo-header sum.
#[derive(Clone, Copy, Debug)]
struct Span {
    l3: usize,
    l4: usize,
    /// End of the bytes the checksum covers (the UDP length for UDP, the IP packet's end for
    /// TCP).
    end: usize,
    /// End of the IP packet.
    ip_end: usize,
    proto: u8,
    v4: bool,
    /// Offset of the checksum field inside the transport header.
    csum_at: usize,
    /// Partial sum of the pseudo-header (with the transport length).
    pseudo: u64,
}

/// The destination address an IPv6 pseudo-header uses: the final one when a routing header
/// with segments left is on the way to `l4`, else the header's.
fn v6_final_dst(f: &[u8], l3: usize, l4: usize) -> Option<[u8; 16]> {
    let mut dst: [u8; 16] = arr(f, l3 + 24)?;
    let mut nh = *f.get(l3 + 6)?;
    let mut off = l3 + 40;
    // Each step moves `off` forward by at least 8 bytes, and the walk stops at `l4`.
    while off < l4 {
        let len = match nh {
            proto::FRAGMENT => 8,
            proto::AH => (*f.get(off + 1)? as usize + 2) * 4,
            _ => (*f.get(off + 1)? as usize + 1) * 8,
        };
        if nh == proto::ROUTING {
            let (typ, left, ext) = (*f.get(off + 2)?, *f.get(off + 3)?, *f.get(off + 1)?);
            if left > 0 {
                let at = match typ {
                    // type 0 (deprecated) and 2 (mobile IPv6): addresses from byte 8, the
                    // final destination last
                    0 | 2 if ext >= 2 => Some(off + 8 + 16 * (ext as usize / 2 - 1)),
                    // type 4 (segment routing): segment list[0] is the final destination
                    4 if ext >= 2 => Some(off + 8),
                    _ => None,
                };
                if let Some(at) = at {
                    if at + 16 <= off + len {
                        dst = arr(f, at)?;
                    }
                }
            }
        }
        nh = *f.get(off)?;
        off += len;
    }
    Some(dst)
}

fn span(f: &[u8], m: &PacketMeta) -> Result<Span, OffloadError> {
    if !matches!(m.l3, L3::Ipv4 | L3::Ipv6)
        || !m.l3_ok()
        || m.malformed.is_some()
        || !m.has_l4
        || !matches!(m.l4proto, proto::TCP | proto::UDP)
    {
        return Err(OffloadError::NotTcpUdp);
    }
    if m.frag != Frag::None {
        return Err(OffloadError::Fragment);
    }
    let (l3, l4) = (m.l3_off as usize, m.l4_off as usize);
    let v4 = m.l3 == L3::Ipv4;
    // The IP packet's end from its own length field (the meta's l3_len saturates for IPv6).
    let ip_end = if v4 {
        let tot = b16(f, l3 + 2).ok_or(OffloadError::Truncated)? as usize;
        if tot == 0 {
            return Err(OffloadError::Jumbo);
        }
        l3 + tot
    } else {
        let plen = b16(f, l3 + 4).ok_or(OffloadError::Truncated)? as usize;
        if plen == 0 {
            return Err(OffloadError::Jumbo);
        }
        l3 + 40 + plen
    };
    let hdr = if m.l4proto == proto::TCP {
        (*f.get(l4 + 12).ok_or(OffloadError::Truncated)? >> 4) as usize * 4
    } else {
        8
    };
    let ip_hdr = if v4 {
        (*f.get(l3).ok_or(OffloadError::Truncated)? & 0x0f) as usize * 4
    } else {
        40
    };
    let min_hdr = if m.l4proto == proto::TCP { 20 } else { 8 };
    if ip_end > f.len() || ip_hdr < 20 || l4 < l3 + ip_hdr || hdr < min_hdr || l4 + hdr > ip_end {
        return Err(OffloadError::Truncated);
    }
    let (end, csum_at) = if m.l4proto == proto::UDP {
        let ulen = b16(f, l4 + 4).ok_or(OffloadError::Truncated)? as usize;
        if ulen < 8 || l4 + ulen > ip_end {
            return Err(OffloadError::Truncated);
        }
        (l4 + ulen, 6)
    } else {
        (ip_end, 16)
    };
    let len = end - l4;
    let pseudo = if v4 {
        let (s, d) = (arr(f, l3 + 12), arr(f, l3 + 16));
        let (Some(s), Some(d)) = (s, d) else {
            return Err(OffloadError::Truncated);
        };
        pseudo_v4(s, d, m.l4proto, len as u16)
    } else {
        let s = arr(f, l3 + 8).ok_or(OffloadError::Truncated)?;
        let d = v6_final_dst(f, l3, l4).ok_or(OffloadError::Truncated)?;
        pseudo_v6(s, d, m.l4proto, len as u32)
    };
    Ok(Span {
        l3,
        l4,
        end,
        ip_end,
        proto: m.l4proto,
        v4,
        csum_at,
        pseudo,
    })
}

/// Sum of the segment without its checksum field.
fn sum_without_field(f: &[u8], s: &Span) -> u64 {
    let at = s.l4 + s.csum_at;
    // `span` checked l4 + header <= end <= f.len(), and the field lies inside the header;
    // the field's offset is even, so the second slice starts on a word boundary.
    sum(&f[s.l4..at]) + sum(&f[at + 2..s.end])
}

fn stored(f: &[u8], s: &Span) -> u16 {
    b16(f, s.l4 + s.csum_at).unwrap_or(0)
}

fn store(f: &mut [u8], s: &Span, v: u16) {
    let at = s.l4 + s.csum_at;
    f[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

fn finish(s: &Span, c: u16) -> u16 {
    if s.proto == proto::UDP && c == 0 {
        0xffff
    } else {
        c
    }
}

/// The correct TCP / UDP checksum of the frame, computed from scratch over the pseudo-header
/// and the segment (whatever its checksum field holds). For UDP a result of 0 is given as
/// 0xffff (RFC 768).
pub fn transport_checksum(frame: &[u8], meta: &PacketMeta) -> Result<u16, OffloadError> {
    let s = span(frame, meta)?;
    Ok(finish(&s, !fold(s.pseudo + sum_without_field(frame, &s))))
}

/// Complete the TCP / UDP checksum of the frame in place: compute it from scratch
/// ([`transport_checksum`]) and store it. Returns the value stored. The rest of the frame is
/// not touched (the IPv4 header checksum is the sender's; Linux computes it in software).
pub fn complete_checksum(frame: &mut [u8], meta: &PacketMeta) -> Result<u16, OffloadError> {
    let s = span(frame, meta)?;
    let c = finish(&s, !fold(s.pseudo + sum_without_field(frame, &s)));
    store(frame, &s, c);
    Ok(c)
}

/// The value Linux leaves in the checksum field of a `CHECKSUM_PARTIAL` frame for the device
/// to finish: the folded pseudo-header sum with the transport length, not complemented
/// (`~csum_tcpudp_magic(saddr, daddr, len, proto, 0)`, `~csum_ipv6_magic(...)`). Never 0.
pub fn partial_checksum(frame: &[u8], meta: &PacketMeta) -> Result<u16, OffloadError> {
    span(frame, meta).map(|s| fold(s.pseudo))
}

/// Store [`partial_checksum`] in the frame's checksum field, as Linux does before handing a
/// frame to a device that finishes checksums (to send a frame with a `NEEDS_CSUM` virtio-net
/// header, or to make test frames). Returns the value stored.
pub fn set_partial_checksum(frame: &mut [u8], meta: &PacketMeta) -> Result<u16, OffloadError> {
    let s = span(frame, meta)?;
    let p = fold(s.pseudo);
    store(frame, &s, p);
    Ok(p)
}

/// What the frame's TCP / UDP checksum is: valid, absent (UDP over IPv4 with 0), partial (it
/// does not verify and the field holds exactly [`partial_checksum`]) or bad.
pub fn classify_checksum(frame: &[u8], meta: &PacketMeta) -> Result<CsumState, OffloadError> {
    let s = span(frame, meta)?;
    let field = stored(frame, &s);
    if s.v4 && s.proto == proto::UDP && field == 0 {
        return Ok(CsumState::None);
    }
    let rest = s.pseudo + sum_without_field(frame, &s);
    Ok(if fold(rest + field as u64) == 0xffff {
        CsumState::Valid
    } else if field == fold(s.pseudo) {
        CsumState::Partial
    } else {
        CsumState::Bad
    })
}

/// Whether the checksum field holds exactly what Linux leaves there for `CHECKSUM_PARTIAL`,
/// without summing the payload (the pseudo-header only): what a receiver that is not told
/// (AF_XDP) can afford to ask of every frame. A complete checksum that happens to hold the
/// same value is completed to itself by [`complete_checksum`].
#[inline(always)]
pub fn field_is_partial(frame: &[u8], meta: &PacketMeta) -> bool {
    // the common case first, in a few loads: an IPv4 segment whose field is not its
    // pseudo-header's sum (the same sum `span` makes, so a mismatch here is one there)
    if meta.l3 == L3::Ipv4 && meta.has_l4 && quick_v4_mismatch(frame, meta) == Some(true) {
        return false;
    }
    field_is_partial_full(frame, meta)
}

#[inline(never)]
fn field_is_partial_full(frame: &[u8], meta: &PacketMeta) -> bool {
    span(frame, meta).is_ok_and(|s| stored(frame, &s) == fold(s.pseudo))
}

/// For an IPv4 TCP or UDP segment: whether its checksum field differs from its pseudo-header
/// sum (None: cannot tell without the full checks of `span`). The addresses and the IP
/// length come from the meta (what the frame holds, for a packet parsed whole and not
/// malformed), so that the common case reads two bytes of the frame.
#[inline(always)]
fn quick_v4_mismatch(f: &[u8], m: &PacketMeta) -> Option<bool> {
    if m.malformed.is_some() {
        return None;
    }
    let l4 = m.l4_off as usize;
    let (at, len) = match m.l4proto {
        proto::TCP => (l4 + 16, m.l3_end().checked_sub(l4)?),
        proto::UDP => (l4 + 6, b16(f, l4 + 4)? as usize),
        _ => return None,
    };
    let (s, d) = (m.saddr as u64, m.daddr as u64);
    let pseudo = (s >> 16)
        + (s & 0xffff)
        + (d >> 16)
        + (d & 0xffff)
        + m.l4proto as u64
        + (len as u16) as u64;
    Some(b16(f, at)? != fold(pseudo))
}

/// True when the frame's TCP / UDP checksum looks partial: it does not verify and the field
/// holds exactly what Linux leaves for `CHECKSUM_PARTIAL` ([`partial_checksum`]). A receiver
/// without checksum metadata (AF_XDP gives none) can complete such frames, and only those,
/// with [`complete_checksum`]; a damaged frame stays damaged (the chance that damage leaves
/// exactly that value is about 1 in 65535). False for anything it cannot judge.
pub fn looks_partial(frame: &[u8], meta: &PacketMeta) -> bool {
    classify_checksum(frame, meta) == Ok(CsumState::Partial)
}

/// Finish a partial checksum as a device does with the `csum_start` / `csum_offset` the
/// kernel gives (Linux `skb_checksum_help`): the ones' complement sum of `frame[csum_start ..
/// end]`, whose checksum field (at `csum_start + csum_offset`) holds the pseudo-header sum,
/// complemented and stored in that field (0 is stored as 0xffff). `end` is the end of the IP
/// packet ([`PacketMeta::l3_end`]), not of the frame, which may carry link padding. Returns
/// the value stored. Trusts the field, so use it only on frames the kernel marked partial;
/// [`complete_checksum`] computes from scratch.
pub fn finish_partial(
    frame: &mut [u8],
    end: usize,
    csum_start: usize,
    csum_offset: usize,
) -> Result<u16, OffloadError> {
    let at = csum_start
        .checked_add(csum_offset)
        .ok_or(OffloadError::BadOffset)?;
    let field_end = at.checked_add(2).ok_or(OffloadError::BadOffset)?;
    if end > frame.len() || csum_start >= end || field_end > end {
        return Err(OffloadError::BadOffset);
    }
    let c = match !fold(sum(&frame[csum_start..end])) {
        0 => 0xffff,
        c => c,
    };
    frame[at..at + 2].copy_from_slice(&c.to_be_bytes());
    Ok(c)
}

/// The MSS that makes a TCP frame's segments fit an MTU of `mtu` bytes (the largest IP
/// packet of the link): `mtu` less the IP header (with options or extension headers) and the
/// TCP header (with options). `None` if the frame is not TCP or the headers do not fit.
pub fn tcp_mss_for_mtu(frame: &[u8], meta: &PacketMeta, mtu: usize) -> Option<u16> {
    let s = span(frame, meta).ok()?;
    if s.proto != proto::TCP {
        return None;
    }
    let thl = (*frame.get(s.l4 + 12)? >> 4) as usize * 4;
    let mss = mtu.checked_sub(s.l4 - s.l3 + thl)?;
    (mss > 0).then(|| mss.min(u16::MAX as usize) as u16)
}

/// Cut a TCP super-frame (IPv4 or IPv6, with its link header in front) into frames of `mss`
/// payload bytes each (the last one the rest), as Linux's software GSO does (see the module
/// documentation), calling `f` with each segment in order; the segment is built in `buf`
/// (cleared first, its allocation reused). Returns the number of segments. A frame whose
/// payload already fits in `mss` bytes comes out as one segment, with its checksums
/// computed. Link padding after the IP packet is dropped. Errors leave `f` uncalled.
pub fn segment_tcp_each(
    frame: &[u8],
    meta: &PacketMeta,
    mss: u16,
    buf: &mut Vec<u8>,
    mut f: impl FnMut(&[u8]),
) -> Result<usize, OffloadError> {
    let s = span(frame, meta)?;
    if s.proto != proto::TCP {
        return Err(OffloadError::NotTcp);
    }
    if mss == 0 {
        return Err(OffloadError::BadMss);
    }
    let mss = mss as usize;
    let thl = (frame[s.l4 + 12] >> 4) as usize * 4;
    let hdr_end = s.l4 + thl;
    let (hdr, payload) = (&frame[..hdr_end], &frame[hdr_end..s.ip_end]);
    let ihl = if s.v4 {
        (frame[s.l3] & 0x0f) as usize * 4
    } else {
        0
    };
    let ip_id = if s.v4 {
        b16(frame, s.l3 + 4).unwrap_or(0)
    } else {
        0
    };
    let seq0 = b32(frame, s.l4 + 4).ok_or(OffloadError::Truncated)?;
    let flags0 = frame[s.l4 + 13];
    let (src4, dst4) = if s.v4 {
        (
            arr::<4>(frame, s.l3 + 12).unwrap_or_default(),
            arr::<4>(frame, s.l3 + 16).unwrap_or_default(),
        )
    } else {
        ([0; 4], [0; 4])
    };
    let (src6, dst6) = if s.v4 {
        ([0; 16], [0; 16])
    } else {
        (
            arr::<16>(frame, s.l3 + 8).unwrap_or([0; 16]),
            v6_final_dst(frame, s.l3, s.l4).unwrap_or([0; 16]),
        )
    };
    let count = payload.len().div_ceil(mss).max(1);
    // FIN and PSH on the last segment only, CWR on the first only (tcp_gso_segment).
    const FIN: u8 = 0x01;
    const PSH: u8 = 0x08;
    const CWR: u8 = 0x80;
    for i in 0..count {
        let chunk = payload.get(i * mss..((i + 1) * mss).min(payload.len()));
        let chunk = chunk.unwrap_or(&[]);
        buf.clear();
        buf.extend_from_slice(hdr);
        buf.extend_from_slice(chunk);
        let tcp_len = thl + chunk.len();
        let ip_len = s.l4 - s.l3 + tcp_len;
        if s.v4 {
            buf[s.l3 + 2..s.l3 + 4].copy_from_slice(&(ip_len as u16).to_be_bytes());
            let id = ip_id.wrapping_add(i as u16);
            buf[s.l3 + 4..s.l3 + 6].copy_from_slice(&id.to_be_bytes());
            buf[s.l3 + 10..s.l3 + 12].copy_from_slice(&[0, 0]);
            let c = crate::checksum::checksum(&buf[s.l3..s.l3 + ihl]);
            buf[s.l3 + 10..s.l3 + 12].copy_from_slice(&c.to_be_bytes());
        } else {
            let plen = (ip_len - 40) as u16;
            buf[s.l3 + 4..s.l3 + 6].copy_from_slice(&plen.to_be_bytes());
        }
        let seq = seq0.wrapping_add((i * mss) as u32);
        buf[s.l4 + 4..s.l4 + 8].copy_from_slice(&seq.to_be_bytes());
        let mut flags = flags0;
        if i + 1 < count {
            flags &= !(FIN | PSH);
        }
        if i > 0 {
            flags &= !CWR;
        }
        buf[s.l4 + 13] = flags;
        buf[s.l4 + 16..s.l4 + 18].copy_from_slice(&[0, 0]);
        let pseudo = if s.v4 {
            pseudo_v4(src4, dst4, proto::TCP, tcp_len as u16)
        } else {
            pseudo_v6(src6, dst6, proto::TCP, tcp_len as u32)
        };
        let c = !fold(pseudo + sum(&buf[s.l4..]));
        buf[s.l4 + 16..s.l4 + 18].copy_from_slice(&c.to_be_bytes());
        f(buf);
    }
    Ok(count)
}

/// Cut a TCP super-frame into frames of `mss` payload bytes each, as [`segment_tcp_each`]
/// does, returning them. For an MTU, take the MSS from [`tcp_mss_for_mtu`]; for a frame
/// received with a virtio-net header, its `gso_size`.
pub fn segment_tcp(
    frame: &[u8],
    meta: &PacketMeta,
    mss: u16,
) -> Result<Vec<Vec<u8>>, OffloadError> {
    let mut out = Vec::new();
    let mut buf = Vec::with_capacity(frame.len().min(mss as usize + 256));
    segment_tcp_each(frame, meta, mss, &mut buf, |seg| out.push(seg.to_vec()))?;
    Ok(out)
}
