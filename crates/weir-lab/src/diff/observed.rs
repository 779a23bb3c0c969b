//! What the kernel did with one packet ([`kernel_view`]): which frames of its window are its
//! forwarded copies (as sent, or translated by NAT), whether it was delivered locally, and
//! the router's own answers.

use crate::kernel::Observed;
use crate::model::Prepared;
use std::net::IpAddr;
use weir_wire::{Frag, LinkType, PacketMeta, L3};

/// What identifies a packet on the wire after forwarding: family, addresses, protocol and the
/// first 8 transport bytes (ports, or ICMP type/code/checksum/id).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Ident {
    v6: bool,
    saddr: u128,
    daddr: u128,
    proto: u8,
    head: Vec<u8>,
}

fn ident(frame: &[u8], link: LinkType) -> Option<Ident> {
    let pm = PacketMeta::parse(frame, link);
    if !pm.l3_ok() {
        return None;
    }
    let l4 = pm.l4_off as usize;
    let end = pm.l3_end().min(frame.len()).min(l4 + 8);
    Some(Ident {
        v6: pm.l3 == L3::Ipv6,
        saddr: pm.saddr,
        daddr: pm.daddr,
        proto: pm.l4proto,
        head: frame.get(l4..end).unwrap_or(&[]).to_vec(),
    })
}

/// What NAT does not change in a packet: family, protocol, IPv4 identification and the
/// transport bytes other than ports, ICMP identifier and checksums (TCP sequence numbers,
/// flags, options but an MSS value, and data; UDP length and data; ICMP type, code, sequence and data). A copy
/// that left the router with other addresses or ports is the packet, translated.
pub(super) fn nat_key(v6: bool, proto: u8, ip_id: Option<u16>, t: &[u8]) -> Vec<u8> {
    let mut k = vec![v6 as u8, proto];
    if let Some(id) = ip_id {
        k.extend_from_slice(&id.to_be_bytes());
    }
    let part = |a: usize, b: usize| t.get(a..b.min(t.len())).unwrap_or(&[]).to_vec();
    match proto {
        6 if t.len() >= 20 => {
            k.extend(part(4, 14));
            // MSS clamping (`tcp option maxseg size set`) may lower an MSS option's value
            let mut rest = part(20, t.len());
            let hlen = ((t[12] >> 4) as usize * 4).clamp(20, t.len()) - 20;
            let mut i = 0;
            while i + 1 < hlen {
                match rest[i] {
                    0 => break,
                    1 => i += 1,
                    kind => {
                        let l = rest[i + 1] as usize;
                        if l < 2 {
                            break;
                        }
                        if kind == 2 && l == 4 && i + 4 <= hlen {
                            rest[i + 2..i + 4].copy_from_slice(&[0, 0]);
                        }
                        i += l;
                    }
                }
            }
            k.extend(rest);
        }
        17 if t.len() >= 8 => {
            k.extend(part(4, 6));
            k.extend(part(8, t.len()));
        }
        // ICMP errors: NAT rewrites the quoted packet too; type, code and size remain
        1 | 58 if t.len() >= 8 && is_icmp_error(v6, t[0]) => {
            k.extend(part(0, 2));
            k.extend_from_slice(&(t.len() as u32).to_be_bytes());
        }
        1 | 58 if t.len() >= 8 => {
            k.extend(part(0, 2));
            k.extend(part(6, t.len()));
        }
        // a truncated ICMP header: its checksum (an address rewrite updates ICMPv6's) and
        // what there is of the identifier may change; type, code and size remain
        1 | 58 => {
            k.extend(part(0, 2));
            k.extend_from_slice(&(t.len() as u32).to_be_bytes());
        }
        _ => k.extend_from_slice(t),
    }
    k
}

/// Whether one address of the packet (source or destination) is the same in both frames:
/// NAT rewrites one side of a packet (a header write may change a port of the other side:
/// `udp dport set 53` before `snat`).
pub(super) fn one_side_kept(a: &[u8], b: &[u8]) -> bool {
    let (x, y) = (
        PacketMeta::parse(a, LinkType::Ethernet),
        PacketMeta::parse(b, LinkType::Ethernet),
    );
    x.saddr == y.saddr || x.daddr == y.daddr
}

fn is_icmp_error(v6: bool, ty: u8) -> bool {
    if v6 {
        ty < 128
    } else {
        matches!(ty, 3 | 4 | 5 | 11 | 12)
    }
}

pub(super) fn frame_nat_key(frame: &[u8], link: LinkType) -> Option<Vec<u8>> {
    let pm = PacketMeta::parse(frame, link);
    if !pm.l3_ok() {
        return None;
    }
    let l3 = pm.l3_off as usize;
    let v6 = pm.l3 == L3::Ipv6;
    let ip_id = (!v6).then(|| u16::from_be_bytes([frame[l3 + 4], frame[l3 + 5]]));
    if pm.frag == Frag::Later {
        // no transport header: an address rewrite leaves all of the payload as it was
        let mut k = vec![v6 as u8, pm.l4proto, 0xff];
        k.extend_from_slice(&ip_id.unwrap_or(0).to_be_bytes());
        k.extend_from_slice(frame.get(pm.l4_off as usize..pm.l3_end().min(frame.len()))?);
        return Some(k);
    }
    let l4 = pm.l4_off as usize;
    let end = pm.l3_end().min(frame.len());
    Some(nat_key(v6, pm.l4proto, ip_id, frame.get(l4..end)?))
}

/// The kernel's handling of one packet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelView {
    /// Copies of the packet that left the router: (interface, frame).
    pub forwarded: Vec<(usize, Vec<u8>)>,
    /// The packet reached the router's own stack.
    pub local: bool,
    /// Other frames the router sent in the packet's window (its answers).
    pub other: Vec<(usize, Vec<u8>)>,
    pub skipped: bool,
}

/// Sort the frames of a packet's window.
pub fn kernel_view(p: &Prepared, ob: &Observed) -> KernelView {
    let mut v = KernelView {
        skipped: ob.skipped,
        ..KernelView::default()
    };
    let id = ident(&p.frame, LinkType::Ethernet);
    let nk = frame_nat_key(&p.frame, LinkType::Ethernet);
    for c in &ob.frames {
        let same = match &id {
            Some(i) => ident(&c.frame, LinkType::Ethernet).as_ref() == Some(i),
            None => false,
        };
        // translated: the same packet with one side (source or destination) rewritten
        // (an IPv4 packet's key holds its IP id: both sides may have changed, a netdev
        // `ip daddr set` at ingress and a `masquerade` at postrouting)
        let v4 = p.frame.get(12..14) == Some(&[0x08, 0x00]);
        let translated = nk.is_some()
            && frame_nat_key(&c.frame, LinkType::Ethernet) == nk
            && (v4 || one_side_kept(&p.frame, &c.frame));
        if same || translated {
            v.forwarded.push((c.iface, c.frame.clone()))
        } else {
            v.other.push((c.iface, c.frame.clone()))
        }
    }
    if let Some(i) = &id {
        v.local = ob.local.iter().any(|l| {
            if l.v6 {
                (l.src == Some(IpAddr::V6(i.saddr.into()))
                    && l.proto == i.proto
                    && i.v6
                    && l.data.starts_with(&i.head))
                    || (i.v6 && nk.as_ref() == Some(&nat_key(true, l.proto, None, &l.data)))
            } else {
                ident(&l.data, LinkType::RawIp).as_ref() == Some(i)
                    || (nk.is_some() && frame_nat_key(&l.data, LinkType::RawIp) == nk)
            }
        });
    }
    v
}
