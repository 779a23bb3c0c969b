//! `exthdr load` as the kernel evaluates it (`nft_exthdr_ipv6_eval`, `nft_exthdr_tcp_eval`,
//! `nft_exthdr_sctp_eval`), and the generator's edits that put such a header, option or chunk
//! into a packet or take it out.
//!
//! - IPv6 (`exthdr load ipv6 Nb @ TYPE + OFF [present]`): `ipv6_find_hdr(skb, &off, TYPE)`
//!   walks hop-by-hop, routing, fragment, AH (`(len + 2) * 4` bytes) and destination options
//!   headers from the fixed header; a header that is not one of them ends the walk and is
//!   found only when it is the target; past a fragment header with a non-zero offset nothing
//!   else is found; a header that does not fit: not found. `present` stores 1 or 0, a load of
//!   a header not found breaks, and so does one past the packet's end (the header's own
//!   length is not checked).
//! - TCP options (`exthdr load tcpopt Nb @ KIND + OFF [present]`): a TCP packet, not a later
//!   fragment, with a header (`doff * 4`, at least 20) within the packet; options from byte
//!   20 while `i < doff * 4 - 1`, each `1` byte long for kinds 0 and 1 or a length of 0, else
//!   its length (EOL does not stop the walk); the first option of the kind answers: the
//!   option within the header and the field within the option, or not found.
//! - SCTP chunks (`exthdr load Nb @ TYPE + OFF [present]`): the transport protocol is SCTP,
//!   not a later fragment; chunks from the transport header + 12, each `length`
//!   padded to 4, until a chunk of length 0 or the packet's end; `present` answers at the
//!   first chunk of the type; a load needs the field within the chunk's length and the chunk
//!   within the packet, else breaks.

use super::bytecode::ExtKind;
use super::interp::{Pktinfo, ETH};

/// Where the header / option / chunk of the type starts in the frame (`Some`), or not found
/// (`None`); `need`: the bytes from its start the load reads (`off + len`; 0 for `present`).
pub fn find(
    kind: ExtKind,
    typ: u8,
    need: usize,
    present: bool,
    f: &[u8],
    info: &Pktinfo,
) -> Option<usize> {
    match kind {
        ExtKind::Ipv6 => ipv6_find(typ, f, info.end),
        ExtKind::Tcp => {
            let (th, hl) = tcp_header(f, info)?;
            let mut i = 20;
            while i + 1 < hl {
                let o = f[th + i];
                let optl = if o <= 1 || f[th + i + 1] == 0 {
                    1
                } else {
                    f[th + i + 1] as usize
                };
                if o == typ {
                    if i + optl > hl || need > optl {
                        return None;
                    }
                    return Some(th + i);
                }
                i += optl;
            }
            None
        }
        ExtKind::Sctp => {
            let th = sctp_thoff(info)?;
            let mut o = th + 12;
            loop {
                if o + 4 > info.end {
                    return None;
                }
                let l = u16::from_be_bytes([f[o + 2], f[o + 3]]) as usize;
                if l == 0 {
                    return None;
                }
                if f[o] == typ {
                    if present {
                        return Some(o);
                    }
                    if need > l || o + l > info.end {
                        return None;
                    }
                    return Some(o);
                }
                o += l.div_ceil(4) * 4;
                if o >= info.end {
                    return None;
                }
            }
        }
    }
}

/// The TCP header's offset and length (`nft_tcp_header_pointer`).
/// `reset tcp option TYPE` (nft_exthdr_tcp_strip_eval): None when the TCP header cannot be
/// read (NFT_BREAK); else the first option of the type, its offset in the frame and length,
/// or None when there is none (`i + len` past the header: the kernel drops the packet).
pub fn tcp_strip(typ: u8, f: &[u8], info: &Pktinfo) -> Option<Option<(usize, usize, bool)>> {
    let (th, hl) = tcp_header(f, info)?;
    let mut i = 20;
    while i + 1 < hl {
        let o = f[th + i];
        let optl = if o <= 1 || f[th + i + 1] == 0 {
            1
        } else {
            f[th + i + 1] as usize
        };
        if o == typ {
            return Some(Some((th + i, optl, i + optl <= hl)));
        }
        i += optl;
    }
    Some(None)
}

fn tcp_header(f: &[u8], info: &Pktinfo) -> Option<(usize, usize)> {
    let (th, proto) = info.l4?;
    if proto != 6 || info.fragoff || th + 20 > info.end {
        return None;
    }
    let hl = (f[th + 12] >> 4) as usize * 4;
    if hl < 20 || th + hl > info.end {
        return None;
    }
    Some((th, hl))
}

/// `nft_thoff` of an SCTP packet: `pkt->tprot == IPPROTO_SCTP`, not a later fragment (the
/// kernel's "nft_exthdr: ... only unfragmented packets or the first fragment" fix; before
/// it, later fragments' data were walked as chunks).
fn sctp_thoff(info: &Pktinfo) -> Option<usize> {
    let (th, proto) = info.l4?;
    if proto != 132 || info.fragoff {
        return None;
    }
    Some(th)
}

/// `ipv6_find_hdr(skb, &offset, target, NULL, NULL)` from the frame's network header.
pub fn ipv6_find(target: u8, f: &[u8], end: usize) -> Option<usize> {
    let mut nexthdr = *f.get(ETH + 6)?;
    let mut start = ETH + 40;
    loop {
        let found = nexthdr == target;
        if !super::interp::ipv6_ext(nexthdr) || nexthdr == 59 {
            return if found { Some(start) } else { None };
        }
        if start + 2 > end {
            return None;
        }
        let (hnext, hlen) = (f[start], f[start + 1] as usize);
        if nexthdr == 43 && start + 4 > end {
            return None;
        }
        let size = match nexthdr {
            44 => {
                if start + 4 > end {
                    return None;
                }
                let off = u16::from_be_bytes([f[start + 2], f[start + 3]]) & !0x7;
                if off != 0 {
                    return if found { Some(start) } else { None };
                }
                8
            }
            51 => (hlen + 2) << 2,
            _ => (hlen + 1) << 3,
        };
        if found {
            return Some(start);
        }
        nexthdr = hnext;
        start += size;
    }
}

/// Put a header / option / chunk of the type holding `need` bytes into the frame (first of
/// its kind); the offset it was put at and its length, or None when it cannot be.
pub fn insert(
    kind: ExtKind,
    typ: u8,
    need: usize,
    f: &mut Vec<u8>,
    info: &Pktinfo,
) -> Option<(usize, usize)> {
    match kind {
        ExtKind::Ipv6 => {
            if f.get(12..14) != Some(&[0x86, 0xdd]) || f.len() < ETH + 40 {
                return None;
            }
            let nh = f[ETH + 6];
            let h = match typ {
                0 | 60 | 43 | 135 => {
                    let n = need.max(8).div_ceil(8) * 8;
                    let mut h = vec![0u8; n];
                    h[0] = if typ == 135 { 59 } else { nh };
                    h[1] = (n / 8 - 1) as u8;
                    if typ != 43 && typ != 135 && n > 2 {
                        // PadN over the options
                        h[2] = 1;
                        h[3] = (n - 4) as u8;
                    }
                    h
                }
                44 => {
                    let mut h = vec![0u8; need.max(8).div_ceil(8) * 8];
                    h[0] = nh;
                    h[4..8].copy_from_slice(&[0, 0, 0, 9]);
                    h
                }
                51 => {
                    let n = need.max(12).div_ceil(4) * 4;
                    let mut h = vec![0u8; n];
                    h[0] = nh;
                    h[1] = (n / 4 - 2) as u8;
                    h
                }
                _ => return None,
            };
            if h.len() > 2048 {
                return None;
            }
            f[ETH + 6] = typ;
            let n = h.len();
            f.splice(ETH + 40..ETH + 40, h);
            Some((ETH + 40, n))
        }
        ExtKind::Tcp => {
            let (th, hl) = tcp_header(f, info)?;
            let optl = if typ <= 1 { 1 } else { need.max(2) };
            if optl > 40 {
                return None;
            }
            let mut o = vec![1u8; optl.div_ceil(4) * 4];
            o[0] = typ;
            if typ > 1 {
                o[1] = optl as u8;
                o[2..optl].fill(0);
            }
            if hl + o.len() > 60 {
                return None;
            }
            let n = o.len();
            f[th + 12] = (f[th + 12] & 0x0f) | (((hl + n) / 4) as u8) << 4;
            f.splice(th + 20..th + 20, o);
            Some((th + 20, n))
        }
        ExtKind::Sctp => {
            let th = sctp_thoff(info)?;
            if th + 12 > f.len() {
                return None;
            }
            let l = need.max(4);
            if l > 1024 {
                return None;
            }
            let mut c = vec![0u8; l.div_ceil(4) * 4];
            c[0] = typ;
            c[2..4].copy_from_slice(&(l as u16).to_be_bytes());
            let n = c.len();
            f.splice(th + 12..th + 12, c);
            Some((th + 12, n))
        }
    }
}

/// Take the header / option / chunk of the type out of the frame (the first one found):
/// the offset and the number of bytes removed (0: an option turned into NOPs), or None.
pub fn remove(kind: ExtKind, typ: u8, f: &mut Vec<u8>, info: &Pktinfo) -> Option<(usize, usize)> {
    let at = find(kind, typ, 0, true, f, info)?;
    match kind {
        ExtKind::Ipv6 => {
            // the next-header byte that names it
            let prev = ipv6_prev(f, at)?;
            if !super::interp::ipv6_ext(typ) || typ == 59 {
                return None;
            }
            let size = match typ {
                44 => 8,
                51 => (f[at + 1] as usize + 2) << 2,
                _ => (f[at + 1] as usize + 1) << 3,
            };
            if at + size > f.len() {
                return None;
            }
            f[prev] = f[at];
            f.drain(at..at + size);
            Some((at, size))
        }
        ExtKind::Tcp => {
            let optl = if f[at] <= 1 || f[at + 1] == 0 {
                1
            } else {
                f[at + 1] as usize
            };
            let end = (at + optl).min(f.len());
            f[at..end].fill(1);
            if typ == 1 {
                f[at..end].fill(0);
            }
            Some((at, 0))
        }
        ExtKind::Sctp => {
            let l = u16::from_be_bytes([f[at + 2], f[at + 3]]) as usize;
            let size = l.div_ceil(4) * 4;
            if at + size > f.len() {
                return None;
            }
            f.drain(at..at + size);
            Some((at, size))
        }
    }
}

/// Frames around a found header / option / chunk (`at`) that the walks treat each their own
/// way: lengths that overrun, zero lengths, headers of other types in front, a packet that
/// ends inside it. Lengths of the IP header are fixed by the caller.
pub fn edges(kind: ExtKind, need: usize, at: usize, f: &[u8], info: &Pktinfo) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let with = |edit: &dyn Fn(&mut Vec<u8>)| {
        let mut g = f.to_vec();
        edit(&mut g);
        g
    };
    match kind {
        ExtKind::Ipv6 => {
            let Some(prev) = ipv6_prev(f, at) else {
                return out;
            };
            // an AH (12 bytes), a routing header in front of it
            for (t, h) in [
                (51u8, vec![0u8, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2]),
                (43, vec![0, 0, 0, 0, 0, 0, 0, 0]),
            ] {
                out.push(with(&|g| {
                    let mut h = h.clone();
                    h[0] = g[prev];
                    g[prev] = t;
                    g.splice(at..at, h);
                }));
            }
            // the packet ends inside it (a routing header is read 4 bytes at a time)
            for k in 1..4 {
                if at + k < f.len() {
                    out.push(f[..at + k].to_vec());
                }
            }
            if need > 0 && at + need - 1 < f.len() {
                out.push(f[..at + need - 1].to_vec());
            }
        }
        ExtKind::Tcp => {
            let Some((th, hl)) = tcp_header(f, info) else {
                return out;
            };
            let optl = f[at + 1] as usize;
            if f[at] > 1 {
                // its length past the header's end, short of the field, 0
                out.push(with(&|g| g[at + 1] = (th + hl + 1 - at).min(255) as u8));
                if need > 2 {
                    out.push(with(&|g| g[at + 1] = (need - 1) as u8));
                }
                out.push(with(&|g| g[at + 1] = 0));
            }
            // in front of it: an EOL and NOPs, an option of length 0, one that runs over it
            if hl + 4 <= 60 {
                for o in [[0u8, 1, 1, 1], [0x22, 0, 1, 1], [0x22, 6, 1, 1]] {
                    out.push(with(&|g| {
                        g[th + 12] += 0x10;
                        g.splice(at..at, o);
                    }));
                }
            }
            let _ = optl;
        }
        ExtKind::Sctp => {
            let l = u16::from_be_bytes([f[at + 2], f[at + 3]]) as usize;
            let set = |g: &mut Vec<u8>, v: usize| {
                g[at + 2..at + 4].copy_from_slice(&(v as u16).to_be_bytes())
            };
            // its length short of the field, past the packet, 0
            if need > 4 {
                out.push(with(&|g| set(g, need - 1)));
            }
            out.push(with(&|g| set(g, info.end - at + 1)));
            out.push(with(&|g| set(g, 0)));
            // in front of it: a chunk of length 0, one of 5 bytes (padded to 8)
            out.push(with(&|g| {
                g.splice(at..at, [0x40, 0, 0, 0]);
            }));
            out.push(with(&|g| {
                g.splice(at..at, [0x40, 0, 0, 5, 1, 2, 3, 4]);
            }));
            // the packet ends inside it
            if at + l > at + 4 && at + l - 1 <= f.len() {
                out.push(f[..at + l - 1].to_vec());
            }
        }
    }
    out
}

/// The offset of the next-header byte that names the extension header at `at`.
fn ipv6_prev(f: &[u8], at: usize) -> Option<usize> {
    let mut prev = ETH + 6;
    let mut o = ETH + 40;
    while o < at {
        let size = match f[prev] {
            44 => 8,
            51 => (*f.get(o + 1)? as usize + 2) << 2,
            _ => (*f.get(o + 1)? as usize + 1) << 3,
        };
        prev = o;
        o += size;
    }
    (o == at).then_some(prev)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::bytecode::parse_file;
    use crate::oracle::interp::{eval, pktinfo, Env, Family, Outcome, Packet};
    use weir_lang::ir::Hook;

    fn template(v6: bool) -> Packet {
        let mut rng = crate::rng::Rng::new(3);
        crate::oracle::gen::template(v6, &mut rng)
    }

    fn env(family: Family) -> Env {
        Env {
            family,
            hook: Hook::Input,
            fib: None,
        }
    }

    #[test]
    fn reads_the_three_forms() {
        let src = "# x\nip6 t input\n  [ exthdr load ipv6 1b @ 43 + 2 => reg 1 ]\n  [ exthdr load tcpopt 1b @ 5 + 0 present => reg 1 ]\n  [ exthdr load 4b @ 193 + 4 => reg 1 ]\n";
        let b = &parse_file(src)[0];
        assert_eq!(b.error, None);
        assert!(matches!(
            b.exprs[0],
            crate::oracle::bytecode::Expr::Exthdr {
                kind: ExtKind::Ipv6,
                typ: 43,
                off: 2,
                len: 1,
                present: false,
                ..
            }
        ));
        assert!(matches!(
            b.exprs[1],
            crate::oracle::bytecode::Expr::Exthdr {
                kind: ExtKind::Tcp,
                typ: 5,
                present: true,
                ..
            }
        ));
        assert!(matches!(
            b.exprs[2],
            crate::oracle::bytecode::Expr::Exthdr {
                kind: ExtKind::Sctp,
                typ: 193,
                off: 4,
                len: 4,
                ..
            }
        ));
    }

    #[test]
    fn ipv6_headers_past_a_later_fragment_are_not_found() {
        let mut p = template(true);
        let e = env(Family::Ip6);
        let info = pktinfo(&p, &e).unwrap().unwrap();
        // a routing header behind a fragment header
        assert_eq!(
            insert(ExtKind::Ipv6, 43, 8, &mut p.frame, &info),
            Some((ETH + 40, 8))
        );
        let info = pktinfo(&p, &e).unwrap().unwrap();
        assert_eq!(
            insert(ExtKind::Ipv6, 44, 8, &mut p.frame, &info),
            Some((ETH + 40, 8))
        );
        let end = p.frame.len();
        assert_eq!(ipv6_find(43, &p.frame, end), Some(ETH + 48));
        p.frame[ETH + 43] = 0x10; // fragment offset 2
        assert_eq!(ipv6_find(43, &p.frame, end), None);
        assert_eq!(ipv6_find(44, &p.frame, end), Some(ETH + 40));
        // a non-extension header ends the walk: found only as the target
        assert_eq!(ipv6_find(6, &p.frame, end), None);
        p.frame[ETH + 43] = 0;
        assert_eq!(ipv6_find(6, &p.frame, end), Some(ETH + 56));
    }

    #[test]
    fn tcp_options_and_sctp_chunks() {
        // tcp option maxseg size 1460: an MSS option after a NOP, an EOL that does not stop
        let src = "# x\nip t input\n  [ exthdr load tcpopt 2b @ 2 + 2 => reg 1 ]\n  [ cmp eq reg 1 0x05b4 ]\n";
        let b = &parse_file(src)[0];
        let e = env(Family::Ip);
        let mut p = template(false);
        let th = ETH + 20;
        p.frame
            .splice(th + 20..th + 20, [0, 1, 2, 4, 0x05, 0xb4, 1, 1]);
        p.frame[th + 12] = 0x70;
        p.frame[ETH + 3] += 8;
        assert_eq!(eval(b, &p, &e).outcome, Outcome::Match);
        // the option's length says 3: the field is not within it
        p.frame[th + 23] = 3;
        assert_eq!(eval(b, &p, &e).outcome, Outcome::Break(0));
        // sctp chunk init exists, on an SCTP packet with a DATA chunk first
        let src =
            "# x\nip\n  [ exthdr load 1b @ 1 + 0 present => reg 1 ]\n  [ cmp eq reg 1 0x01 ]\n";
        let b = &parse_file(src)[0];
        let mut p = template(false);
        p.frame[ETH + 9] = 132;
        p.frame.truncate(th + 12);
        p.frame.extend([0, 0, 0, 5, 9, 9, 9, 9, 1, 0, 0, 4]);
        p.frame[ETH + 3] = (p.frame.len() - ETH) as u8;
        assert_eq!(eval(b, &p, &e).outcome, Outcome::Match);
        p.frame[th + 12 + 8] = 2;
        assert_eq!(eval(b, &p, &e).outcome, Outcome::Break(1));
    }
}
