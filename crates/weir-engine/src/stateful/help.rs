//! Connection-tracking helpers where netfilter runs them: at the confirm point, when a packet
//! leaves the host (Linux `nf_confirm`: the helper, then `nf_ct_seq_adjust`, then confirmation).
//!
//! - A connection gets its helper from `ct helper set` while it is new ([`CtExt::helper`]).
//! - [`Stateful::finish_frame`] runs the helper ([`crate::helper`]) on each packet of such a
//!   connection as it leaves: the connections it announces become expectations of the table
//!   ([`weir_conntrack::expect`]), translated as their master is (`nf_nat_follow_master`, see
//!   [`Stateful::follow_master`]); its payload rewrites are applied (UDP and TCP lengths, IP
//!   lengths, checksums); a TCP payload whose length changed shifts the connection's later
//!   sequence numbers, which this point then rewrites in every packet of the connection, both
//!   ways (`seq` one way, `ack` and SACK edges the other).
//! - A packet whose length changes cannot be rewritten in the caller's buffer: its rewritten
//!   copy joins the packets the router sends by route ([`Stateful::take_queue_out`]) and the
//!   packet itself ends with [`DropReason::Replaced`]. Where the caller cannot send a
//!   replacement (a packet delivered locally), the expectations are made and the rewrite is
//!   not (counted in [`StatefulStats::helper_unmangled`]).
//! - Not done: a first IP fragment (Linux reassembles first; weir's helpers skip fragments,
//!   counted as unmangled), helpers in NFQUEUE mode (the kernel routes and tracks there; put
//!   the helper in the kernel's rules).

use super::{CtExt, CtPkt, PacketCt, Stateful};
use crate::eval::{Decision, DropReason};
use crate::helper::{self, Cx, Kind, Out};
#[cfg(doc)]
use crate::stateful::StatefulStats;
use weir_conntrack::{Dir, EntryId, Follow, Pending, Tuple};
use weir_wire::checksum::{checksum_with, pseudo_v4, pseudo_v6};
use weir_wire::meta::proto;
use weir_wire::{Frag, PacketMeta, L3};

/// How long an expectation waits for its connection (Linux's helpers' `exp_policy`).
fn expect_timeout_ns(k: Kind) -> u64 {
    let s = match k {
        Kind::Ftp | Kind::Tftp => 300,
        Kind::Sip => 180,
    };
    s * 1_000_000_000
}

impl Stateful {
    /// [`Stateful::finish`] for a packet whose frame the caller gives: the connection's helper
    /// reads the packet (and rewrites it under NAT), sequence numbers shifted by an earlier
    /// rewrite are adjusted, then the connection is confirmed. `can_replace`: the caller sends
    /// what [`Stateful::take_queue_out`] holds in place of a packet dropped with
    /// [`DropReason::Replaced`] (a forwarded packet; not one delivered locally).
    pub fn finish_frame(
        &mut self,
        frame: &mut [u8],
        pm: &mut PacketMeta,
        pc: &mut PacketCt,
        now_ns: u64,
        can_replace: bool,
    ) -> Decision {
        let d = self.finish(pc, now_ns);
        if !d.is_accept() {
            return d;
        }
        // (a packet the host sends attached to a connection, as the SYN proxy's ACK to the
        // client: no helper, but the connection's shifts)
        let (id, dir, attached) = match pc.ct {
            CtPkt::Entry { id, dir, .. } => (id, dir, false),
            CtPkt::Attached { id: Some(id), dir } => (id, dir, true),
            _ => return d,
        };
        let Some(e) = self.ct.get(id) else {
            return d;
        };
        let kind = Kind::from_u8(e.ext.helper).filter(|_| !attached);
        let mut adjusted = e.seq_adjusted();
        if e.ext.synproxy != 0 && pm.l4proto == proto::TCP && pm.frag == Frag::None {
            let d = self.synproxy_hook(id, dir, frame, pm, now_ns);
            if !d.is_accept() {
                return d;
            }
            // (the proxy's hook may have set the connection's shift)
            adjusted = self.ct.get(id).is_some_and(|e| e.seq_adjusted());
        }
        if kind.is_none() && !adjusted {
            return d;
        }
        self.help(id, dir, kind, frame, pm, now_ns, can_replace)
    }

    #[allow(clippy::too_many_arguments)]
    fn help(
        &mut self,
        id: EntryId,
        dir: Dir,
        kind: Option<Kind>,
        frame: &mut [u8],
        pm: &mut PacketMeta,
        now_ns: u64,
        can_replace: bool,
    ) -> Decision {
        let (Some(orig), Some(reply)) = (
            self.ct.tuple(id, Dir::Original),
            self.ct.tuple(id, Dir::Reply),
        ) else {
            return Decision::Accept;
        };
        if pm.frag != Frag::None || !pm.has_l4 || pm.malformed.is_some() {
            if kind.is_some() {
                self.stats.helper_unmangled += 1;
            }
            return Decision::Accept;
        }
        let Some((ps, plen)) = pm.payload(frame) else {
            return Decision::Accept;
        };
        let (this, other) = match dir {
            Dir::Original => (orig, reply),
            Dir::Reply => (reply, orig),
        };
        let mut out = Out::default();
        if let Some(k) = kind {
            if plen > 0 {
                let cx = Cx { dir, this, other };
                helper::help(k, &cx, &frame[ps..ps + plen], &mut out);
            }
            for x in &out.expects {
                let tuple = Tuple {
                    zone: 0,
                    src: other.src,
                    dst: x.dst.0,
                    sport: x.sport.unwrap_or(0),
                    dport: x.dst.1,
                    proto: x.proto,
                    v6: this.v6,
                };
                // translated as the master is; a master without NAT leaves the expected
                // connection to the nat chains (Linux sets nf_nat_follow_master only then)
                let follow = if other != this.invert() {
                    Follow {
                        src: this.dst,
                        dst: x.to.0,
                        dport: x.to.1,
                    }
                } else {
                    Follow::default()
                };
                match self.ct.expect(
                    id,
                    tuple,
                    x.sport.is_none(),
                    follow,
                    expect_timeout_ns(k),
                    now_ns,
                ) {
                    Ok(()) => self.stats.helper_expectations += 1,
                    Err(_) => self.stats.helper_expect_refused += 1,
                }
            }
        }
        let tcp = pm.l4proto == proto::TCP;
        let delta: isize = out
            .edits
            .iter()
            .map(|e| e.with.len() as isize - e.len as isize)
            .sum();
        if !out.edits.is_empty() && (delta == 0 || can_replace) {
            let sane = out.edits.windows(2).all(|w| w[0].at + w[0].len <= w[1].at)
                && out.edits.iter().all(|e| e.at + e.len <= plen);
            if !sane {
                self.stats.helper_unmangled += 1;
                return Decision::Accept;
            }
            if tcp && delta != 0 {
                let seq = tcp_seq(frame, pm.l4_off as usize);
                self.ct.seqadj_set(id, dir, seq, delta as i32);
            }
            self.stats.helper_rewritten += 1;
            if delta == 0 {
                // the same length in all (edits may still differ in length one by one): the
                // payload rebuilt and written over itself
                let mut body = Vec::with_capacity(plen);
                let mut at = 0;
                for e in &out.edits {
                    body.extend_from_slice(&frame[ps + at..ps + e.at]);
                    body.extend_from_slice(&e.with);
                    at = e.at + e.len;
                }
                body.extend_from_slice(&frame[ps + at..ps + plen]);
                frame[ps..ps + plen].copy_from_slice(&body);
                self.seq_adjust(id, dir, frame, pm);
                finish_transport(frame, pm);
                *pm = PacketMeta::parse(frame, pm.link);
                return Decision::Accept;
            }
            // a new length: a copy of the IP packet, rewritten, sent in its place
            let (l3, l4) = (pm.l3_off as usize, pm.l4_off as usize);
            let mut ip = Vec::with_capacity(pm.l3_len as usize + delta.max(0) as usize);
            ip.extend_from_slice(&frame[l3..ps]);
            let mut at = ps;
            for e in &out.edits {
                ip.extend_from_slice(&frame[at..ps + e.at]);
                ip.extend_from_slice(&e.with);
                at = ps + e.at + e.len;
            }
            ip.extend_from_slice(&frame[at..ps + plen]);
            let mut cpm = *pm;
            cpm.l3_off = 0;
            cpm.l4_off = (l4 - l3) as u16;
            cpm.l3_len = ip.len() as u16;
            set_lengths(&mut ip, &cpm);
            self.seq_adjust(id, dir, &mut ip, &cpm);
            finish_transport(&mut ip, &cpm);
            self.stats.helper_replaced += 1;
            self.queue_out.push(ip);
            return Decision::Drop(DropReason::Replaced);
        }
        if !out.edits.is_empty() {
            self.stats.helper_unmangled += 1;
        }
        if tcp
            && self.ct.get(id).is_some_and(|e| e.seq_adjusted())
            && self.seq_adjust(id, dir, frame, pm)
        {
            finish_transport(frame, pm);
        }
        Decision::Accept
    }

    /// Linux `nf_ct_seq_adjust`: this direction's `seq` shifted by its rewrites so far, `ack`
    /// and SACK edges by the other direction's. Whether the packet changed.
    fn seq_adjust(&mut self, id: EntryId, dir: Dir, frame: &mut [u8], pm: &PacketMeta) -> bool {
        if pm.l4proto != proto::TCP {
            return false;
        }
        let l4 = pm.l4_off as usize;
        let Some(th) = frame.get(l4..l4 + 20) else {
            return false;
        };
        let seq = u32::from_be_bytes([th[4], th[5], th[6], th[7]]);
        let ack = u32::from_be_bytes([th[8], th[9], th[10], th[11]]);
        let other = match dir {
            Dir::Original => Dir::Reply,
            Dir::Reply => Dir::Original,
        };
        let soff = self.ct.seq_offset(id, dir, seq);
        let aoff = ack_shift(&self.ct, id, other, ack);
        if soff == 0 && aoff == 0 {
            return false;
        }
        let flags = frame[l4 + 13];
        frame[l4 + 4..l4 + 8].copy_from_slice(&seq.wrapping_add(soff as u32).to_be_bytes());
        if flags & 0x10 != 0 {
            frame[l4 + 8..l4 + 12].copy_from_slice(&ack.wrapping_sub(aoff as u32).to_be_bytes());
        }
        // SACK blocks acknowledge the other way's numbers too
        let doff = (frame[l4 + 12] >> 4) as usize * 4;
        let end = (l4 + doff).min(frame.len());
        let mut i = l4 + 20;
        while i < end {
            match frame[i] {
                0 => break,
                1 => i += 1,
                k => {
                    let Some(&n) = frame.get(i + 1) else { break };
                    let n = n as usize;
                    if n < 2 || i + n > end {
                        break;
                    }
                    if k == 5 {
                        let mut j = i + 2;
                        while j + 4 <= i + n {
                            let v = u32::from_be_bytes([
                                frame[j],
                                frame[j + 1],
                                frame[j + 2],
                                frame[j + 3],
                            ]);
                            let off = ack_shift(&self.ct, id, other, v);
                            frame[j..j + 4]
                                .copy_from_slice(&v.wrapping_sub(off as u32).to_be_bytes());
                            j += 4;
                        }
                    }
                    i += n;
                }
            }
        }
        self.stats.seq_adjusted += 1;
        true
    }

    /// An expected connection's first packet: bind its NAT as its master's asks (Linux
    /// `nf_nat_follow_master`: the source to the address the master's peer knows this side by,
    /// the destination to the endpoint announced); no `nat` chain runs for it.
    pub(super) fn follow_master(&mut self, pend: &mut Pending<CtExt>) {
        let Some(f) = pend.follow else {
            return;
        };
        let o = *pend.orig();
        let mut translated = Tuple {
            src: f.src,
            dst: f.dst,
            dport: f.dport,
            ..o
        };
        // several workers: the translated connection's reply must steer back to this worker;
        // where it would not, the source port moves to one whose reply does (as a NAT
        // binding's; Linux's nf_nat_follow_master moves it only for a clash)
        if let Some((n, me)) = self.steer {
            let mine = |t: &Tuple| weir_conntrack::steer::worker(t, n) == me;
            if translated != o
                && weir_conntrack::steer::port_steers(&translated)
                && !mine(&translated)
            {
                let req = crate::nat::Request {
                    manip: crate::nat::Manip::Src,
                    addr: Some((f.src, f.src)),
                    port: Some((1024, 65535)),
                    random: false,
                    persistent: false,
                    netmap: false,
                };
                let ct = &self.ct;
                let pick = crate::nat::unique_tuple(&translated, &req, &mut self.nat_rng, |t| {
                    ct.reply_in_use(&t.invert()) || !mine(t)
                });
                match pick {
                    Ok(t) => translated = t,
                    Err(_) => self.stats.nat_steer_missed += 1,
                }
            }
        }
        let mut status = crate::nat::status::SRC_NAT_DONE | crate::nat::status::DST_NAT_DONE;
        if (translated.src, translated.sport) != (o.src, o.sport) {
            status |= crate::nat::status::SRC_NAT;
        }
        if (translated.dst, translated.dport) != (o.dst, o.dport) {
            status |= crate::nat::status::DST_NAT;
        }
        if translated != o {
            pend.set_reply(translated.invert());
        }
        pend.entry.ext.nat_status |= status;
        self.stats.helper_related += 1;
    }
}

/// The shift of the `other` way's sequence numbers to take off a number `x` the peer sends
/// (an ACK or a SACK edge), as Linux reads it: the correction applies when `x`, less the shift
/// before it, is past the correction point.
fn ack_shift(ct: &weir_conntrack::Conntrack<CtExt>, id: EntryId, other: Dir, x: u32) -> i32 {
    let Some(o) = ct.seqadj(id, other) else {
        return 0;
    };
    let un = x.wrapping_sub(o.before as u32);
    if (o.pos.wrapping_sub(un) as i32) < 0 {
        o.after
    } else {
        o.before
    }
}

fn tcp_seq(frame: &[u8], l4: usize) -> u32 {
    frame
        .get(l4 + 4..l4 + 8)
        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// The IP total (IPv4) or payload (IPv6) length and the UDP length of an IP packet at the
/// start of `ip` whose length changed; the IPv4 header checksum.
fn set_lengths(ip: &mut [u8], pm: &PacketMeta) {
    let n = ip.len();
    match pm.l3 {
        L3::Ipv4 => {
            ip[2..4].copy_from_slice(&(n as u16).to_be_bytes());
            let hl = ((ip[0] & 0x0f) as usize * 4).min(n);
            ip[10..12].copy_from_slice(&[0, 0]);
            let c = checksum_with(0, &ip[..hl]);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
        }
        _ => {
            ip[4..6].copy_from_slice(&((n - 40) as u16).to_be_bytes());
        }
    }
    if pm.l4proto == proto::UDP {
        let l4 = pm.l4_off as usize;
        ip[l4 + 4..l4 + 6].copy_from_slice(&((n - l4) as u16).to_be_bytes());
    }
}

/// The transport checksum recomputed over the rewritten segment (a UDP/IPv4 datagram sent
/// without one stays without).
pub(crate) fn finish_transport(frame: &mut [u8], pm: &PacketMeta) {
    let (l3, l4) = (pm.l3_off as usize, pm.l4_off as usize);
    let end = pm.l3_end().min(frame.len());
    let at = match pm.l4proto {
        proto::TCP => 16,
        proto::UDP => 6,
        _ => return,
    };
    if l4 + at + 2 > end {
        return;
    }
    let v4 = pm.l3 == L3::Ipv4;
    if v4 && pm.l4proto == proto::UDP && frame[l4 + 6..l4 + 8] == [0, 0] {
        return;
    }
    frame[l4 + at..l4 + at + 2].copy_from_slice(&[0, 0]);
    let len = end - l4;
    let pseudo = if v4 {
        let mut s = [0u8; 4];
        let mut d = [0u8; 4];
        s.copy_from_slice(&frame[l3 + 12..l3 + 16]);
        d.copy_from_slice(&frame[l3 + 16..l3 + 20]);
        pseudo_v4(s, d, pm.l4proto, len as u16)
    } else {
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&frame[l3 + 8..l3 + 24]);
        d.copy_from_slice(&frame[l3 + 24..l3 + 40]);
        pseudo_v6(s, d, pm.l4proto, len as u32)
    };
    let mut c = checksum_with(pseudo, &frame[l4..end]);
    if pm.l4proto == proto::UDP && c == 0 {
        c = 0xffff;
    }
    frame[l4 + at..l4 + at + 2].copy_from_slice(&c.to_be_bytes());
}
