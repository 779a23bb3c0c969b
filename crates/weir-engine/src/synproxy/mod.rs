//! The SYN proxy (`synproxy` statement and objects; Linux's `nf_synproxy_core` and
//! `nft_synproxy`), the protocol half: TCP options read and written as the proxy keeps
//! them, the timestamp cookie, SYN cookies ([`cookie`]) and the four segments the proxy
//! makes. Pure functions of bytes; [`crate::stateful`] runs them (`stateful/synproxy.rs`).
//!
//! 1. A client's SYN meets `synproxy` (at input or forward, usually as `ct state invalid,
//!    untracked` after a `notrack` of SYNs): the proxy answers with a SYN-ACK from the
//!    server's address whose sequence number is a SYN cookie, window 0, with the MSS and
//!    window scale of the statement; the client's window scale, SACK permission and ECN
//!    ride in the low bits of the timestamp it is given (so only with `timestamp`).
//! 2. The client's ACK meets `synproxy`: a good cookie gives back the client's MSS; the
//!    proxy sends the server a SYN as the client (its sequence number, its options), the
//!    cookie in the SYN's acknowledgement field; a connection entry is made for it.
//! 3. The server's SYN-ACK (the entry in SYN_RECV): the proxy acknowledges it to the server,
//!    and sends the client an ACK with the server's window; from then on the server's
//!    sequence numbers are shifted to the cookie's (`seqadj`) and its timestamps to the
//!    client's view, both ways, for the connection's life.

pub mod cookie;

use weir_lang::ir::Synproxy as Info;
use weir_wire::checksum::{checksum, checksum_with, pseudo_v4, pseudo_v6, update32};
use weir_wire::{PacketMeta, L3};

/// TCP flag bits.
pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const ACK: u8 = 0x10;
pub const ECE: u8 = 0x40;
pub const CWR: u8 = 0x80;

/// The TCP options of a segment as the proxy reads and writes them (`struct
/// synproxy_options`); `options` holds [`Info`]'s flag bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Opts {
    pub options: u8,
    pub wscale: u8,
    pub mss_option: u16,
    pub mss_encode: u16,
    pub tsval: u32,
    pub tsecr: u32,
}

/// The most a window may be scaled by (RFC 7323).
const MAX_WSCALE: u8 = 14;

/// The addresses and ports of a TCP segment in a frame.
#[derive(Clone, Copy, Debug)]
pub struct Seg {
    pub v6: bool,
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
}

impl Seg {
    /// The segment's header, or None when the frame has no whole TCP header.
    pub fn of(frame: &[u8], pm: &PacketMeta) -> Option<Seg> {
        let (l3, l4) = (pm.l3_off as usize, pm.l4_off as usize);
        let th = frame.get(l4..l4 + 20)?;
        let v6 = pm.l3 == L3::Ipv6;
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        if v6 {
            src.copy_from_slice(frame.get(l3 + 8..l3 + 24)?);
            dst.copy_from_slice(frame.get(l3 + 24..l3 + 40)?);
        } else {
            src[..4].copy_from_slice(frame.get(l3 + 12..l3 + 16)?);
            dst[..4].copy_from_slice(frame.get(l3 + 16..l3 + 20)?);
        }
        let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        Some(Seg {
            v6,
            src,
            dst,
            sport: u16::from_be_bytes([th[0], th[1]]),
            dport: u16::from_be_bytes([th[2], th[3]]),
            seq: be32(&th[4..8]),
            ack: be32(&th[8..12]),
            flags: th[13],
            window: u16::from_be_bytes([th[14], th[15]]),
        })
    }

    /// An address as fields hold it (IPv4 in the low 32 bits).
    pub fn addr(a: &[u8; 16], v6: bool) -> u128 {
        if v6 {
            u128::from_be_bytes(*a)
        } else {
            u32::from_be_bytes([a[0], a[1], a[2], a[3]]) as u128
        }
    }

    /// The cookie's view of the client's connection.
    pub fn flow(&self) -> cookie::Flow {
        cookie::Flow {
            src: Seg::addr(&self.src, self.v6),
            dst: Seg::addr(&self.dst, self.v6),
            sport: self.sport,
            dport: self.dport,
            v6: self.v6,
        }
    }
}

/// What a `synproxy` statement does with a packet (`nft_synproxy_do_eval`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// Not TCP: the rule stops (NFT_BREAK).
    NotTcp,
    /// A wrong checksum (a fragment's cannot be checked over the fragment alone, and fails
    /// as the kernel's does), or no whole header: dropped.
    Drop,
    /// A SYN or an ACK: taken (NF_STOLEN), the proxy answers.
    Take,
    /// Any other segment: the rule goes on.
    Pass,
}

/// What `synproxy` does with the packet in `frame`.
pub fn act(frame: &[u8], pm: &PacketMeta) -> Act {
    if pm.l4proto != weir_wire::meta::proto::TCP {
        return Act::NotTcp;
    }
    let flags = pm
        .has_l4
        .then(|| frame.get(pm.l4_off as usize + 13).copied())
        .flatten()
        .filter(|_| pm.transport_checksum_ok(frame));
    match flags {
        None => Act::Drop,
        Some(f) if f & (SYN | ACK) != 0 => Act::Take,
        Some(_) => Act::Pass,
    }
}

/// Linux `synproxy_parse_options`: MSS, window scale, timestamps and SACK permission of the
/// segment at `pm.l4_off`. None when the header is cut short (the packet is dropped).
pub fn parse_options(frame: &[u8], pm: &PacketMeta) -> Option<Opts> {
    let l4 = pm.l4_off as usize;
    let doff = (*frame.get(l4 + 12)? >> 4) as usize * 4;
    if doff < 20 {
        return None;
    }
    let opt = frame.get(l4 + 20..l4 + doff)?;
    let mut o = Opts::default();
    let mut i = 0;
    while i < opt.len() {
        match opt[i] {
            0 => break,
            1 => i += 1,
            kind => {
                let Some(&n) = opt.get(i + 1) else { break };
                let n = n as usize;
                if n < 2 || i + n > opt.len() {
                    break;
                }
                let v = &opt[i + 2..i + n];
                match (kind, n) {
                    (2, 4) => {
                        o.mss_option = u16::from_be_bytes([v[0], v[1]]);
                        o.options |= Info::MSS;
                    }
                    (3, 3) => {
                        o.wscale = v[0].min(MAX_WSCALE);
                        o.options |= Info::WSCALE;
                    }
                    (8, 10) => {
                        o.tsval = u32::from_be_bytes([v[0], v[1], v[2], v[3]]);
                        o.tsecr = u32::from_be_bytes([v[4], v[5], v[6], v[7]]);
                        o.options |= Info::TIMESTAMP;
                    }
                    (4, 2) => o.options |= Info::SACK_PERM,
                    _ => {}
                }
                i += n;
            }
        }
    }
    Some(o)
}

/// Linux `synproxy_build_options`: the options the proxy writes, in its order and padding.
pub fn build_options(o: &Opts) -> Vec<u8> {
    let mut b = Vec::with_capacity(20);
    if o.options & Info::MSS != 0 {
        b.extend_from_slice(&[2, 4]);
        b.extend_from_slice(&o.mss_option.to_be_bytes());
    }
    if o.options & Info::TIMESTAMP != 0 {
        if o.options & Info::SACK_PERM != 0 {
            b.extend_from_slice(&[4, 2, 8, 10]);
        } else {
            b.extend_from_slice(&[1, 1, 8, 10]);
        }
        b.extend_from_slice(&o.tsval.to_be_bytes());
        b.extend_from_slice(&o.tsecr.to_be_bytes());
    } else if o.options & Info::SACK_PERM != 0 {
        b.extend_from_slice(&[1, 1, 4, 2]);
    }
    if o.options & Info::WSCALE != 0 {
        b.extend_from_slice(&[1, 3, 3, o.wscale]);
    }
    b
}

/// `nft_synproxy_tcp_options` and `synproxy_init_timestamp_cookie`: what the SYN-ACK to a
/// client's SYN carries. The client's MSS goes into the cookie (`mss_encode`), the
/// statement's is announced; without timestamps there is nowhere to keep the client's
/// window scale and SACK permission, and they are dropped.
pub fn synack_options(info: &Info, syn_flags: u8, mut o: Opts, now_ms: u32) -> Opts {
    if syn_flags & ECE != 0 && syn_flags & CWR != 0 {
        o.options |= Info::ECN;
    }
    o.options &= info.flags;
    o.mss_encode = o.mss_option;
    o.mss_option = info.mss;
    if o.options & Info::TIMESTAMP != 0 {
        o.tsecr = o.tsval;
        o.tsval = now_ms & !0x3f;
        if o.options & Info::WSCALE != 0 {
            o.tsval |= o.wscale as u32;
            o.wscale = info.wscale;
        } else {
            o.tsval |= 0xf;
        }
        if o.options & Info::SACK_PERM != 0 {
            o.tsval |= 1 << 4;
        }
        if o.options & Info::ECN != 0 {
            o.tsval |= 1 << 5;
        }
    } else {
        o.options &= !(Info::WSCALE | Info::SACK_PERM | Info::ECN);
    }
    o
}

/// Linux `synproxy_check_timestamp_cookie`: the client's window scale, SACK permission and
/// ECN back from the timestamp it echoes.
pub fn check_timestamp_cookie(o: &mut Opts) {
    o.wscale = (o.tsecr & 0xf) as u8;
    if o.wscale != 0xf {
        o.options |= Info::WSCALE;
    }
    if o.tsecr & (1 << 4) != 0 {
        o.options |= Info::SACK_PERM;
    }
    if o.tsecr & (1 << 5) != 0 {
        o.options |= Info::ECN;
    }
}

/// A TCP segment without payload as the proxy sends it (`synproxy_build_ip`: TTL or hop
/// limit 64, IPv4 id 0 and don't-fragment), as an IP packet with good checksums.
#[allow(clippy::too_many_arguments)]
pub fn segment(
    v6: bool,
    src: &[u8; 16],
    dst: &[u8; 16],
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    o: &Opts,
) -> Vec<u8> {
    let opts = build_options(o);
    let tcp_len = 20 + opts.len();
    let mut p = Vec::with_capacity(40 + tcp_len);
    if v6 {
        p.extend_from_slice(&[0x60, 0, 0, 0]);
        p.extend_from_slice(&(tcp_len as u16).to_be_bytes());
        p.extend_from_slice(&[6, 64]);
        p.extend_from_slice(src);
        p.extend_from_slice(dst);
    } else {
        p.extend_from_slice(&[0x45, 0]);
        p.extend_from_slice(&((20 + tcp_len) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
        p.extend_from_slice(&src[..4]);
        p.extend_from_slice(&dst[..4]);
        let c = checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
    }
    let l4 = p.len();
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ack.to_be_bytes());
    p.push(((tcp_len / 4) as u8) << 4);
    p.push(flags);
    p.extend_from_slice(&window.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 0]);
    p.extend_from_slice(&opts);
    let pseudo = if v6 {
        pseudo_v6(*src, *dst, 6, tcp_len as u32)
    } else {
        let (mut s, mut d) = ([0u8; 4], [0u8; 4]);
        s.copy_from_slice(&src[..4]);
        d.copy_from_slice(&dst[..4]);
        pseudo_v4(s, d, 6, tcp_len as u16)
    };
    let c = checksum_with(pseudo, &p[l4..]);
    p[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
    p
}

/// Linux `synproxy_tstamp_adjust`: the server's timestamps as the client knows them (a reply
/// segment's `TSval` less `tsoff`, an original one's `TSecr` plus it), the checksum updated.
/// Whether the segment changed.
pub fn tstamp_adjust(frame: &mut [u8], pm: &PacketMeta, reply: bool, tsoff: u32) -> bool {
    if tsoff == 0 {
        return false;
    }
    let l4 = pm.l4_off as usize;
    let Some(&d) = frame.get(l4 + 12) else {
        return false;
    };
    let end = (l4 + (d >> 4) as usize * 4).min(frame.len());
    let mut i = l4 + 20;
    while i < end {
        match frame[i] {
            0 => return false,
            1 => i += 1,
            kind => {
                let Some(&n) = frame.get(i + 1) else {
                    return false;
                };
                let n = n as usize;
                if n < 2 || i + n > end {
                    return false;
                }
                if kind == 8 && n == 10 {
                    let at = if reply { i + 2 } else { i + 6 };
                    let old = u32::from_be_bytes([
                        frame[at],
                        frame[at + 1],
                        frame[at + 2],
                        frame[at + 3],
                    ]);
                    let new = if reply {
                        old.wrapping_sub(tsoff)
                    } else {
                        old.wrapping_add(tsoff)
                    };
                    frame[at..at + 4].copy_from_slice(&new.to_be_bytes());
                    let c = u16::from_be_bytes([frame[l4 + 16], frame[l4 + 17]]);
                    let c = update32(c, old, new);
                    frame[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
                    return true;
                }
                i += n;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests;
