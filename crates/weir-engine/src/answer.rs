//! The router's own answers to the packets it rejects or cannot forward, as Linux makes them,
//! and their way out: a locally generated packet leaves through the `output` and
//! `postrouting` hooks, so the ruleset filters it. An answer to a packet of a connection
//! carries that connection (Linux's `nf_ct_attach`): NAT gives it the addresses the peer knows
//! and the connection is left as it was. An answer to a packet without one is tracked like
//! any packet (a reset may then end the connection it finds).
//!
//! Also here: what a `reject` answers with ([`reject_answer`]), when a router may answer
//! with an ICMP error at all ([`icmp_answerable`]) and how much it quotes
//! ([`icmp_quote_max`]), and the error itself ([`icmp_error`]).
//!
//! A rare path: it allocates.

use crate::eval::{Decision, DropReason, Meta};
use crate::stateful::{CtPkt, CtTuples, PacketCt, Stateful};
use weir_conntrack::Dir;
use weir_lang::ir::Hook;
use weir_lang::ir::Reject;
use weir_wire::build::{tcp_flags, Builder, Tcp};
use weir_wire::field::ip_addr;
use weir_wire::{Addr, Frag, LinkType, Mac, PacketMeta, L3};

/// The TCP reset answering segment `frame` (of any link type, parsed as `pm`) as it is now,
/// built as
/// Linux's `nf_reject_ip_tcphdr_put` / `nf_reject_ip6_tcphdr_put` build it: from the
/// segment's destination address and port back to its source, with the sender's ACK as its
/// sequence number, or else acknowledging the segment's SYN, FIN and data; window 0, TTL 64.
/// It is an Ethernet frame from `src_mac` to `dst_mac`.
///
/// None for a reset, a non-first fragment or a segment cut short. Linux also answers no
/// segment whose checksum is wrong (`nf_reject_verify_csum`, `nf_ip_checksum`): the caller
/// checks it, as only it knows whether the checksum was verified or left to an offload.
pub fn tcp_reset(
    frame: &[u8],
    pm: &PacketMeta,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
) -> Option<Vec<u8>> {
    if pm.l4proto != 6 || !pm.has_ports || matches!(pm.frag, Frag::Later) {
        return None;
    }
    let l4 = pm.l4_off as usize;
    let end = pm.l3_end().min(frame.len());
    let tcp = frame.get(l4..end)?.get(..20)?;
    let flags = tcp[13];
    if flags & tcp_flags::RST != 0 {
        return None;
    }
    let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let v6 = match pm.l3 {
        L3::Ipv4 => false,
        L3::Ipv6 => true,
        _ => return None,
    };
    let (src, dst) = (ip_addr(pm.daddr, v6), ip_addr(pm.saddr, v6));
    let (sport, dport) = (pm.sport, pm.dport);
    let t = if flags & tcp_flags::ACK != 0 {
        Tcp::new(dport, sport, tcp_flags::RST).seq(be32(&tcp[8..12]))
    } else {
        let data = (end - l4).saturating_sub((tcp[12] >> 4) as usize * 4);
        let len = data as u32
            + (flags & tcp_flags::SYN != 0) as u32
            + (flags & tcp_flags::FIN != 0) as u32;
        Tcp::new(dport, sport, tcp_flags::RST | tcp_flags::ACK)
            .seq(0)
            .ack(be32(&tcp[4..8]).wrapping_add(len))
    };
    Some(
        Builder::new()
            .macs(src_mac, dst_mac)
            .ttl(64)
            .tcp(src, dst, &t.window(0), &[]),
    )
}

/// What a `reject` answers a packet with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RejectAnswer {
    /// An ICMP (IPv4) or ICMPv6 error: type and code.
    Icmp(u8, u8),
    Reset,
}

/// The answer of `reject` kind `r` to an IPv4 or IPv6 (`v6`) packet, as nft chooses it:
/// port unreachable by default; `with icmp` / `icmpv6` codes as written (None for the other
/// family: nft applies such a rule to its own family only); icmpx mapped per family.
pub fn reject_answer(r: &Reject, v6: bool) -> Option<RejectAnswer> {
    let unreachable = |c4, c6| {
        Some(RejectAnswer::Icmp(
            if v6 { 1 } else { 3 },
            if v6 { c6 } else { c4 },
        ))
    };
    match *r {
        Reject::Default => unreachable(3, 4),
        Reject::Icmp(c) if !v6 => Some(RejectAnswer::Icmp(3, c)),
        Reject::Icmp6(c) if v6 => Some(RejectAnswer::Icmp(1, c)),
        // icmpx: no-route, port-unreachable, host-unreachable, admin-prohibited
        Reject::Icmpx(0) => unreachable(0, 0),
        Reject::Icmpx(1) => unreachable(3, 4),
        Reject::Icmpx(2) => unreachable(1, 3),
        Reject::Icmpx(3) => unreachable(13, 1),
        Reject::TcpReset => Some(RejectAnswer::Reset),
        _ => None,
    }
}

/// How much of a packet an ICMP error quotes: as much as fits in 576 bytes of IPv4 (RFC 1812)
/// or 1280 of IPv6.
pub fn icmp_quote_max(v6: bool) -> usize {
    if v6 {
        1280 - 48
    } else {
        576 - 28
    }
}

/// Whether an ICMP error may answer this packet (RFC 1812 and Linux's `icmp_send`): not an
/// ICMP error itself, not a fragment other than the first, not to or from a multicast or
/// broadcast address.
pub fn icmp_answerable(frame: &[u8], pm: &PacketMeta) -> bool {
    let (Some(s), Some(d)) = (Addr::src_of(pm), Addr::dst_of(pm)) else {
        return false;
    };
    !(pm.is_icmp_error(frame)
        || pm.frag == Frag::Later
        || s.is_multicast_or_broadcast()
        || d.is_multicast_or_broadcast())
}

/// Whether a dropped packet's sender is answered at all, as Linux's `nf_send_reset` /
/// `nf_send_unreach` decide: for a `reject`, what it answers with; never for a TCP or UDP
/// packet whose checksum is wrong (`checksum_trusted`: the caller knows it is right, e.g.
/// left to the sender's offload).
pub fn refused_answer(
    rejects: &crate::Compiled,
    why: DropReason,
    frame: &[u8],
    pm: &PacketMeta,
    checksum_trusted: bool,
) -> Option<RejectAnswer> {
    let DropReason::Reject(g) = why else {
        return None;
    };
    if matches!(pm.l4proto, 6 | 17) && !checksum_trusted && !pm.transport_checksum_ok(frame) {
        return None;
    }
    reject_answer(rejects.reject_of(g)?, pm.l3 == L3::Ipv6)
}

/// An ICMP or ICMPv6 error (type, code, and `info`: the 32 bits after the checksum, the MTU
/// of a "fragmentation needed" or "packet too big") from `from` to `to`, quoting `quote` (the
/// IP packet it is about, cut to [`icmp_quote_max`]), as an Ethernet frame with these MACs
/// (source, destination). TTL 64.
pub fn icmp_error(
    from: Addr,
    to: Addr,
    typ: u8,
    code: u8,
    info: u32,
    quote: &[u8],
    macs: (Mac, Mac),
) -> Vec<u8> {
    let keep = icmp_quote_max(from.is_v6()).min(quote.len());
    Builder::new().macs(macs.0 .0, macs.1 .0).ttl(64).icmp(
        from.ip(),
        to.ip(),
        typ,
        code,
        info,
        &quote[..keep],
    )
}

impl Stateful {
    /// The connection context of the router's answer to the packet whose context is `of`,
    /// for [`Stateful::local_out`], as Linux's `nf_ct_attach` gives it: the packet's
    /// connection (confirmed or new) in the other direction, or, for a packet without one
    /// (invalid, untracked), none: the answer is then looked up like any packet, and may
    /// belong to, and change, a connection of its own.
    pub fn answer_ct(&self, of: &PacketCt) -> PacketCt {
        let back = |d: Dir| match d {
            Dir::Original => Dir::Reply,
            Dir::Reply => Dir::Original,
        };
        let (ct, tuples) = match of.ct {
            CtPkt::Entry { id, dir, .. } | CtPkt::Related { master: id, dir } => (
                CtPkt::Attached {
                    id: Some(id),
                    dir: back(dir),
                },
                of.tuples,
            ),
            CtPkt::New(p) => (
                CtPkt::Attached {
                    id: None,
                    dir: Dir::Reply,
                },
                Some(CtTuples {
                    orig: *p.orig(),
                    reply: *p.reply(),
                    nat_status: p.entry.ext.nat_status,
                }),
            ),
            _ => (CtPkt::NotYet, None),
        };
        PacketCt {
            ct,
            tuples,
            ..PacketCt::default()
        }
    }

    /// A packet the router made (Ethernet `frame`) through the `output` and `postrouting`
    /// hooks, and confirmed, as `ip_local_out` sends it: the ruleset may drop it, connection
    /// tracking sees it (unless `pc` attaches it to a connection, see
    /// [`Stateful::answer_ct`]), NAT rewrites it in place. `meta`: its output interface;
    /// `pc.oif_addr`: that interface's address of the packet's family.
    pub fn local_out(
        &mut self,
        frame: &mut [u8],
        meta: Meta,
        mut pc: PacketCt,
        now: u64,
    ) -> Decision {
        let mut pm = PacketMeta::parse(frame, LinkType::Ethernet);
        // (one metadata for both hooks: a mark set in output is seen in postrouting)
        let mut meta = meta;
        for hook in [Hook::Output, Hook::Postrouting] {
            let d = self.hook_mut(hook, frame, &mut pm, &mut meta, now, &mut pc);
            if !d.is_accept() {
                return d;
            }
        }
        self.finish_frame(frame, &mut pm, &mut pc, now, false)
    }
}
