//! `inner` expressions (`[ inner type 1 hdrsize 8 flags f [ payload load 4b @ network header
//! + 12 => reg 1 ] ]`) as the kernel evaluates them, and the generator's tunnels.
//!
//! The kernel (`nft_inner_eval`): `nft_payload_inner_offset` finds where the inner part starts
//! (after the UDP header, the TCP header, a GRE version 0 header with its optional words, or
//! at the transport header for IPIP; nothing in a later fragment); `nft_inner_parse` then
//! computes the tunnel context: with `NFT_INNER_HDRSIZE`, after UDP the tunnel header there
//! and `hdrsize` bytes skipped (Geneve: its options too, `opt_len * 4` from the header's first
//! byte), after GRE the GRE header as the tunnel header and nothing skipped, another protocol
//! breaks; with `NFT_INNER_LL` an Ethernet header (IPv4, IPv6, or one 802.1Q tag: `llproto`
//! 0x8100, the network header after the tag), else the IP version nibble; IPv4 needs version
//! 4 and IHL >= 5, and has a transport header unless it is a later fragment; IPv6 needs
//! version 6, `ipv6_find_hdr` (from the inner network header) gives its l4 protocol, and the
//! transport header is right after the 40-byte header, unless a later fragment. Payload loads
//! read at the context's offsets (a base it lacks breaks), bounded by the packet; `meta
//! protocol` is `llproto`, `meta l4proto` needs the transport header.

use super::bytecode::{InnerBase, InnerLoad};
use super::interp::{Loc, Pktinfo, Prov};

/// `struct nft_inner_tun_ctx`: the offsets found (absolute in the frame).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ctx {
    pub tun: Option<usize>,
    pub ll: Option<usize>,
    pub nh: Option<usize>,
    pub th: Option<usize>,
    pub llproto: u16,
    pub l4proto: u8,
    /// Where `l4proto` was read (IPv4's protocol byte, IPv6's next header without extension
    /// headers), for the generator.
    pub l4proto_at: Option<usize>,
}

const HDRSIZE: u8 = 1;
const LL: u8 = 2;
const NH: u8 = 4;
const TH: u8 = 8;

fn be16(f: &[u8], i: usize, end: usize) -> Option<u16> {
    (i + 2 <= end).then(|| u16::from_be_bytes([f[i], f[i + 1]]))
}

fn byte(f: &[u8], i: usize, end: usize) -> Option<u8> {
    (i < end).then(|| f[i])
}

/// `nft_payload_inner_offset`, with GRE (version 0: 4 bytes, and 4 for each of the C, K, S
/// flags) and IPIP.
pub fn tunnel_offset(f: &[u8], info: &Pktinfo) -> Option<usize> {
    let (th, proto) = info.l4?;
    if info.fragoff {
        return None;
    }
    let end = info.end.min(f.len());
    match proto {
        17 => Some(th + 8),
        6 => Some(th + (byte(f, th + 12, end)? >> 4) as usize * 4),
        47 => {
            let fl = be16(f, th, end)?;
            (fl & 7 == 0).then(|| {
                th + 4
                    + [0x8000u16, 0x2000, 0x1000]
                        .iter()
                        .filter(|&&b| fl & b != 0)
                        .count()
                        * 4
            })
        }
        4 => Some(th),
        _ => None,
    }
}

/// `nft_inner_parse` for an expression of tunnel type `typ` (`hdrsize`, `flags`).
pub fn parse(f: &[u8], info: &Pktinfo, typ: u8, hdrsize: u8, flags: u8) -> Option<Ctx> {
    let start = tunnel_offset(f, info)?;
    let end = info.end.min(f.len());
    let proto = info.l4?.1;
    let mut c = Ctx::default();
    let mut off = start;
    if flags & HDRSIZE != 0 {
        match proto {
            47 => c.tun = info.l4.map(|(th, _)| th),
            17 => {
                c.tun = Some(off);
                off += hdrsize as usize;
                if typ == 2 {
                    off += (byte(f, start, end)? & 0x3f) as usize * 4;
                }
            }
            _ => return None,
        }
    }
    if flags & (LL | NH) == 0 {
        if flags & TH != 0 {
            c.th = Some(off);
        }
        return Some(c);
    }
    let l3 = if flags & LL != 0 {
        let t = be16(f, off + 12, end)?;
        c.ll = Some(off);
        match t {
            0x0800 | 0x86dd => {
                c.llproto = t;
                off += 14;
                t
            }
            0x8100 => {
                let inner = be16(f, off + 16, end)?;
                c.llproto = t;
                off += 18;
                inner
            }
            _ => return None,
        }
    } else {
        c.llproto = match byte(f, off, end)? >> 4 {
            4 => 0x0800,
            6 => 0x86dd,
            _ => return None,
        };
        c.llproto
    };
    let nh = off;
    match l3 {
        0x0800 => {
            if nh + 20 > end {
                return None;
            }
            if f[nh] >> 4 != 4 || f[nh] & 0xf < 5 {
                return None;
            }
            c.nh = Some(nh);
            if be16(f, nh + 6, end)? & 0x1fff == 0 {
                c.th = Some(nh + (f[nh] & 0xf) as usize * 4);
                c.l4proto = f[nh + 9];
                c.l4proto_at = Some(nh + 9);
            }
        }
        0x86dd => {
            if nh + 40 > end || f[nh] >> 4 != 6 {
                return None;
            }
            c.nh = Some(nh);
            let (l4, later, plain) = find_l4(f, nh, end)?;
            if !later {
                c.th = Some(nh + 40);
                c.l4proto = l4;
                c.l4proto_at = plain.then_some(nh + 6);
            }
        }
        _ => return None,
    }
    Some(c)
}

/// `ipv6_find_hdr(skb, &off, -1, &fragoff, &flags)` from an inner IPv6 header at `nh`: the
/// protocol, whether a later fragment, whether no extension header came first.
fn find_l4(f: &[u8], nh: usize, end: usize) -> Option<(u8, bool, bool)> {
    let mut next = f[nh + 6];
    let mut at = nh + 40;
    let mut plain = true;
    loop {
        if !matches!(next, 0 | 43 | 44 | 51 | 60) {
            return Some((next, false, plain));
        }
        plain = false;
        let (n, l) = (byte(f, at, end)?, byte(f, at + 1, end)? as usize);
        let size = match next {
            44 => {
                if be16(f, at + 2, end)? & !7 != 0 {
                    return Some((n, true, false));
                }
                8
            }
            51 => (l + 2) * 4,
            _ => (l + 1) * 8,
        };
        next = n;
        at += size;
    }
}

/// The bytes an inner load puts in its register and where each came from; None: the
/// expression breaks.
pub fn load(
    f: &[u8],
    info: &Pktinfo,
    (typ, hdrsize, flags): (u8, u8, u8),
    what: &InnerLoad,
) -> Option<(Vec<u8>, Vec<Option<Prov>>)> {
    let c = parse(f, info, typ, hdrsize, flags)?;
    let at = |o: usize| {
        Some(Prov {
            loc: Loc::Frame(o),
            mask: 0xff,
            xor: 0,
        })
    };
    match what {
        InnerLoad::Payload { base, off, len } => {
            let start = match base {
                InnerBase::Tunnel => c.tun?,
                InnerBase::Link => c.ll?,
                InnerBase::Network => c.nh?,
                InnerBase::Transport => c.th?,
            };
            let (a, z) = (start + off, start + off + len);
            if z > info.end.min(f.len()) {
                return None;
            }
            Some((f[a..z].to_vec(), (a..z).map(at).collect()))
        }
        InnerLoad::Meta(k) if k == "protocol" => {
            let prov = match c.ll {
                Some(ll) => vec![at(ll + 12), at(ll + 13)],
                None => vec![None, None],
            };
            Some((c.llproto.to_be_bytes().to_vec(), prov))
        }
        InnerLoad::Meta(k) if k == "l4proto" => {
            c.th?;
            Some((vec![c.l4proto], vec![c.l4proto_at.and_then(at)]))
        }
        InnerLoad::Meta(_) => None,
    }
}

/// An inner IPv4 (or IPv6) packet carrying a TCP SYN, for the generator.
fn inner_ip(v6: bool, seed: u64) -> Vec<u8> {
    let b = |i: u64| (seed >> (i * 8)) as u8;
    let mut tcp = vec![0u8; 20];
    tcp[0..4].copy_from_slice(&[b(0) | 4, b(1), 0, b(2) | 1]);
    tcp[12] = 0x50;
    tcp[13] = 0x02;
    tcp[14] = 0xff;
    let mut h = if v6 {
        let mut h = vec![0x60, 0, 0, 0, 0, 20, 6, 64];
        h.extend([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, b(3), 1]);
        h.extend([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, b(4), 2]);
        h
    } else {
        let mut h = vec![0x45, 0, 0, 40, 0, 1, 0, 0, 64, 6, 0, 0];
        h.extend([10, 141, b(3), 1, 10, 141, b(4), 2]);
        let c = super::interp::ip_checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h
    };
    h.extend(tcp);
    h
}

/// Put a tunnel of type `typ` after the outer transport header (a UDP or GRE header
/// first, as the tunnel needs it): the tunnel header and an inner packet. What the frame
/// already holds at the inner Ethernet header's addresses, tag and type (chosen by earlier
/// repairs) is kept; the rest is new. Returns where the new bytes start, or None when the
/// packet has no place for one.
pub fn encapsulate(f: &mut Vec<u8>, info: &Pktinfo, typ: u8, seed: u64) -> Option<usize> {
    let (th, proto) = info.l4?;
    if info.fragoff {
        return None;
    }
    let (start, ll) = match (typ, proto) {
        (1 | 2, 17) => (th + 8, Some(th + 16)),
        (3, 47) => (th, None),
        (4, 47) => (th, Some(th + 4)),
        _ => return None,
    };
    if f.len() < start {
        return None;
    }
    // an Ethernet header the rule already chose (kept as it is), else a new one
    let old = |o: usize| f.get(o).copied();
    let mut eth: Vec<u8> = Vec::new();
    let mut v6 = false;
    if let Some(ll) = ll {
        let t = old(ll + 12)
            .zip(old(ll + 13))
            .map(|(a, b)| u16::from_be_bytes([a, b]));
        eth.extend((0..12).map(|i| old(ll + i).unwrap_or(2 + i as u8)));
        match t {
            Some(0x8100) => {
                eth.extend([0x81, 0x00]);
                eth.extend([old(ll + 14).unwrap_or(0), old(ll + 15).unwrap_or(1)]);
                let t2 = old(ll + 16).zip(old(ll + 17));
                v6 = t2 == Some((0x86, 0xdd));
                eth.extend(if v6 { [0x86, 0xdd] } else { [0x08, 0x00] });
            }
            _ => {
                v6 = t == Some(0x86dd);
                eth.extend(if v6 { [0x86, 0xdd] } else { [0x08, 0x00] });
            }
        }
    }
    let mut tail = match typ {
        1 => vec![0x08, 0, 0, 0, 0, 0, 0, 0],
        2 => vec![0, 0, 0x65, 0x58, 0, 0, 0, 0],
        3 => vec![0, 0, 0x08, 0x00],
        _ => vec![0, 0, 0x65, 0x58],
    };
    tail.extend(eth);
    tail.extend(inner_ip(v6, seed));
    f.truncate(start);
    f.extend(tail);
    if proto == 17 {
        let l = (f.len() - th) as u16;
        f[th + 4..th + 6].copy_from_slice(&l.to_be_bytes());
        f[th + 6..th + 8].copy_from_slice(&[0, 0]);
    }
    Some(start)
}

/// Packets around a hit packet's tunnel that make the kernel give up or read elsewhere: the
/// inner packet cut inside its network header, an inner later fragment, an inner IHL below
/// 5, an inner frame of another type, the inner packet as IPv6 (behind a hop-by-hop header
/// too); a GRE header with its optional words (the inner part
/// further on) or of version 1; Geneve options; a VLAN tag in front of the inner packet.
pub fn edges(f: &[u8], info: &Pktinfo, typ: u8, hdrsize: u8, flags: u8) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let Some(c) = parse(f, info, typ, hdrsize, flags) else {
        return out;
    };
    let Some(nh) = c.nh else {
        return out;
    };
    let (th, proto) = info.l4.unwrap_or((0, 0));
    out.push(f[..(nh + 12).min(f.len())].to_vec());
    if c.llproto == 0x0800 {
        let mut q = f.to_vec();
        q[nh + 7] = 0x10;
        out.push(q);
        let mut q = f.to_vec();
        q[nh] = 0x44;
        out.push(q);
    }
    // the inner packet as IPv6 with the same transport header, also behind a hop-by-hop
    // header (the kernel takes the transport header right after the fixed header)
    if let (0x0800, Some(th_in)) = (c.llproto, c.th) {
        let end = info.end.min(f.len());
        let l4 = &f[th_in.min(end)..end];
        for hbh in [false, true] {
            let mut h = vec![0x60, 0, 0, 0];
            let plen = l4.len() + if hbh { 8 } else { 0 };
            h.extend((plen as u16).to_be_bytes());
            h.extend([if hbh { 0 } else { c.l4proto }, 64]);
            h.extend([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            h.extend([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
            if hbh {
                h.extend([c.l4proto, 0, 1, 4, 0, 0, 0, 0]);
            }
            h.extend(l4);
            let mut q = f[..nh].to_vec();
            q.extend(h);
            if let Some(ll) = c.ll {
                q[ll + 12..ll + 14].copy_from_slice(&[0x86, 0xdd]);
            }
            out.push(q);
        }
    }
    if let Some(ll) = c.ll {
        let mut q = f.to_vec();
        q[ll + 12..ll + 14].copy_from_slice(&[0x08, 0x06]);
        out.push(q);
        if c.llproto != 0x8100 {
            let mut q = f.to_vec();
            q.splice(ll + 12..ll + 12, [0x81, 0x00, 0x00, 0x0a]);
            out.push(q);
        }
    }
    if proto == 47 && th > 0 && f.get(th + 1) == Some(&0) && f.get(th) == Some(&0) {
        for (flag, words) in [(0x80u8, 1usize), (0x20, 1), (0x10, 1), (0xb0, 3)] {
            let mut q = f.to_vec();
            q[th] = flag;
            q.splice(th + 4..th + 4, vec![0u8; 4 * words]);
            out.push(q);
        }
        let mut q = f.to_vec();
        q[th + 1] = 1;
        out.push(q);
    }
    if typ == 2 && proto == 17 {
        if let Some(t) = c.tun {
            let mut q = f.to_vec();
            q[t] = (q[t] & 0xc0) | 2;
            q.splice(t + 8..t + 8, [0x01, 0x02, 0x03, 0x04, 0, 0, 0, 0]);
            out.push(q);
        }
    }
    // (an outer UDP length that says where the datagram ends)
    if proto == 17 {
        for q in out.iter_mut() {
            if q.len() >= th + 8 {
                let l = (q.len() - th) as u16;
                q[th + 4..th + 6].copy_from_slice(&l.to_be_bytes());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::bytecode::{parse_file, Expr};
    use crate::oracle::gen::{hit, misses};
    use crate::oracle::interp::{eval, pktinfo, Env, Family, Outcome};
    use crate::rng::Rng;
    use weir_lang::ir::Hook;

    const VXLAN: &str = "# udp dport 4789 vxlan ip saddr 10.141.11.2\nnetdev test-netdev ingress\n  [ meta load l4proto => reg 1 ]\n  [ cmp eq reg 1 0x11 ]\n  [ payload load 2b @ transport header + 2 => reg 1 ]\n  [ cmp eq reg 1 0x12b5 ]\n  [ inner type 1 hdrsize 8 flags f [ meta load protocol => reg 1 ] ]\n  [ cmp eq reg 1 0x0800 ]\n  [ inner type 1 hdrsize 8 flags f [ payload load 4b @ network header + 12 => reg 1 ] ]\n  [ cmp eq reg 1 0x0a8d0b02 ]\n";

    const GRE: &str = "# gre udp sport 8888\nip test-ip4 input\n  [ meta load l4proto => reg 1 ]\n  [ cmp eq reg 1 0x2f ]\n  [ inner type 3 hdrsize 4 flags c [ meta load l4proto => reg 1 ] ]\n  [ cmp eq reg 1 0x11 ]\n  [ inner type 3 hdrsize 4 flags c [ payload load 2b @ transport header + 0 => reg 1 ] ]\n  [ cmp eq reg 1 0x22b8 ]\n";

    #[test]
    fn reads_inner_expressions() {
        let b = &parse_file(VXLAN)[0];
        assert!(b.error.is_none(), "{:?}", b.error);
        assert_eq!(
            b.exprs[4],
            Expr::Inner {
                typ: 1,
                hdrsize: 8,
                flags: 0xf,
                load: InnerLoad::Meta("protocol".into()),
                dreg: 4,
            }
        );
        assert!(matches!(
            b.exprs[6],
            Expr::Inner {
                load: InnerLoad::Payload {
                    base: InnerBase::Network,
                    off: 12,
                    len: 4
                },
                ..
            }
        ));
    }

    #[test]
    fn hit_packets_carry_a_tunnel_and_misses_do_not_match() {
        for (src, family, hook, typ) in [
            (VXLAN, Family::Netdev, Hook::Ingress, 1u8),
            (GRE, Family::Ip, Hook::Input, 3),
        ] {
            let b = &parse_file(src)[0];
            let env = Env {
                family,
                hook,
                fib: None,
            };
            let mut rng = Rng::new(3);
            let h = hit(b, &env, &mut rng).expect("a hit packet");
            assert_eq!(eval(b, &h.packet, &env).outcome, Outcome::Match);
            let info = pktinfo(&h.packet, &env).unwrap().unwrap();
            let flags = if typ == 1 { 0xf } else { 0xc };
            let c = parse(&h.packet.frame, &info, typ, 8, flags).expect("a tunnel");
            assert_eq!(c.llproto, 0x0800);
            let m = misses(b, &env, &h, &mut rng);
            assert!(m.len() >= 5);
            assert!(m.iter().all(|p| eval(b, p, &env).outcome != Outcome::Match
                || p.frame[c.nh.unwrap()..] != h.packet.frame[c.nh.unwrap()..]));
        }
    }

    #[test]
    fn gre_words_and_versions() {
        // Ethernet, IPv4 (protocol 47), GRE with the key flag, an inner IPv4 UDP header
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let mut ip = vec![
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, 47, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        ip.extend([0x20, 0, 0x08, 0x00, 0, 0, 0, 7]);
        ip.extend([
            0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 1, 2, 3, 4, 4, 3, 2, 1,
        ]);
        ip.extend([0x22, 0xb8, 0, 53, 0, 8, 0, 0]);
        let tot = ip.len() as u16;
        ip[2..4].copy_from_slice(&tot.to_be_bytes());
        f.extend(ip);
        let info = Pktinfo {
            ethertype: 0x0800,
            l4: Some((34, 47)),
            fragoff: false,
            len: f.len() - 14,
            end: f.len(),
            nfproto: 2,
        };
        assert_eq!(tunnel_offset(&f, &info), Some(42));
        let c = parse(&f, &info, 3, 4, 0xc).unwrap();
        assert_eq!((c.nh, c.th, c.l4proto), (Some(42), Some(62), 17));
        // as VXLAN (hdrsize): the tunnel header is the GRE header, nothing skipped
        assert_eq!(parse(&f, &info, 1, 8, 0xf), None);
        assert_eq!(parse(&f, &info, 1, 8, 0xd).map(|c| c.tun), Some(Some(34)));
        // version 1: nothing inner
        f[35] = 1;
        assert_eq!(tunnel_offset(&f, &info), None);
    }
}
