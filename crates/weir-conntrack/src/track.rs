//! Tracking a packet ([`Conntrack::track`], [`Track`]): untracked and invalid packets, ICMP
//! errors related to a connection, and the trackers per protocol (TCP with [`crate::tcp`],
//! ICMP, UDP and the generic one).

use weir_wire::meta::proto;
use weir_wire::{Frag, PacketMeta, L3};

use crate::entry::{tick, S_ASSURED, S_EXPECTED, S_SEEN_REPLY, S_SEQADJ};
use crate::tcp;
use crate::tuple::{icmp6_untracked, icmp_creates, icmp_inverse};
use crate::{Conntrack, Dir, Entry, EntryId, Killed, Pending, TcpConn, Tuple};

/// Linux `ctinfo` (what `ct state` matches, with `Invalid` / `Untracked` from [`Track`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CtInfo {
    New,
    Established,
    Related,
}

/// Why a packet is invalid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Invalid {
    /// A non-first IP fragment (no reassembly here).
    Fragment,
    /// A broken transport header.
    Malformed,
    /// A TCP flag combination no stack sends (SYN+FIN, no flags, ...).
    TcpFlags,
    /// A TCP flag set not allowed in the connection's state (`sIV`).
    TcpState,
    /// TCP sequence number beyond the receiver's window.
    SeqOverWindow,
    /// TCP acknowledgement of data not yet sent.
    AckOverWindow,
    /// A TCP RST with a sequence number below what the peer acknowledged.
    TcpRst,
    /// No entry, and this packet may not create one (TCP without SYN and `tcp_loose` off,
    /// SYN/ACK, FIN, RST; ICMP replies and unknown types).
    CannotCreate,
    /// An ICMP error quoting a packet of no tracked connection (or quoting nothing usable).
    IcmpUnrelated,
}

/// What [`Conntrack::track`] found.
///
/// `New` carries the pending entry by value (no allocation per packet), hence the size.
#[derive(Clone, Copy, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Track<X> {
    Untracked,
    Invalid(Invalid),
    /// A tracked connection (already updated). If the packet ended the connection (a RST
    /// answering a connection that never saw a reply), the entry is already removed.
    Existing {
        id: EntryId,
        dir: Dir,
        info: CtInfo,
    },
    /// An ICMP error about connection `master`, travelling in `dir`.
    Related {
        master: EntryId,
        dir: Dir,
    },
    New(Pending<X>),
}

impl<X> PartialEq for Track<X> {
    /// Compares the variants and their ids; two `New` are equal when their tuples are.
    fn eq(&self, o: &Self) -> bool {
        match (self, o) {
            (Track::Untracked, Track::Untracked) => true,
            (Track::Invalid(a), Track::Invalid(b)) => a == b,
            (
                Track::Existing { id, dir, info },
                Track::Existing {
                    id: i2,
                    dir: d2,
                    info: n2,
                },
            ) => id == i2 && dir == d2 && info == n2,
            (
                Track::Related { master, dir },
                Track::Related {
                    master: m2,
                    dir: d2,
                },
            ) => master == m2 && dir == d2,
            (Track::New(a), Track::New(b)) => a.orig == b.orig && a.reply == b.reply,
            _ => false,
        }
    }
}

impl<X> Track<X> {
    /// The `ct state` / ctinfo this means (`None` for invalid and untracked).
    pub fn info(&self) -> Option<CtInfo> {
        match self {
            Track::Existing { info, .. } => Some(*info),
            Track::Related { .. } => Some(CtInfo::Related),
            Track::New(p) if p.master.is_some() => Some(CtInfo::Related),
            Track::New(_) => Some(CtInfo::New),
            _ => None,
        }
    }
}

impl<X: Copy + Default> Conntrack<X> {
    /// The entry the last [`Conntrack::track`] call ended, if it ended one.
    pub fn take_killed(&mut self) -> Option<Killed<X>> {
        self.killed.take()
    }

    /// Track one packet (see the crate docs), in the default zone.
    pub fn track(&mut self, pm: &PacketMeta, frame: &[u8], now_ns: u64) -> Track<X> {
        self.track_in(pm, frame, now_ns, crate::Zone::DEFAULT)
    }

    /// Track one packet in conntrack zone `zone` (`ct zone set`, before conntrack): its tuple
    /// is looked up in the zone's id for the original direction (as Linux hashes it,
    /// `nf_ct_zone_id(zone, IP_CT_DIR_ORIGINAL)`), and a new connection is in that zone.
    pub fn track_in(
        &mut self,
        pm: &PacketMeta,
        frame: &[u8],
        now_ns: u64,
        zone: crate::Zone,
    ) -> Track<X> {
        self.cur_zone = zone;
        self.killed = None;
        let r = self.track_inner(pm, frame, now_ns);
        if let Track::Invalid(_) = r {
            self.stats.invalid += 1;
        }
        r
    }

    fn track_inner(&mut self, pm: &PacketMeta, frame: &[u8], now_ns: u64) -> Track<X> {
        if !pm.l3_ok() {
            return Track::Untracked;
        }
        let v6 = pm.l3 == L3::Ipv6;
        if pm.frag == Frag::Later {
            return Track::Invalid(Invalid::Fragment);
        }
        let icmp_proto = if v6 { proto::ICMPV6 } else { proto::ICMP };
        if pm.l4proto == icmp_proto && pm.has_l4 && pm.malformed.is_none() {
            let l4 = pm.l4_off as usize;
            let typ = frame.get(l4).copied().unwrap_or(0);
            if v6 && icmp6_untracked(typ) {
                return Track::Untracked;
            }
            if pm.is_icmp_error(frame) {
                return self.related(pm, frame, v6, now_ns);
            }
        }
        if pm.malformed.is_some() {
            return Track::Invalid(Invalid::Malformed);
        }
        let len = pm.l3_len as u32;
        match pm.l4proto {
            proto::TCP if pm.has_l4 => self.track_tcp(pm, frame, v6, len, now_ns),
            p if p == icmp_proto && pm.has_l4 => self.track_icmp(pm, frame, v6, len, now_ns),
            p => {
                let t = Tuple {
                    zone: self.cur_zone.id_for(Dir::Original),
                    src: pm.saddr,
                    dst: pm.daddr,
                    sport: if pm.has_ports { pm.sport } else { 0 },
                    dport: if pm.has_ports { pm.dport } else { 0 },
                    proto: p,
                    v6,
                };
                let udp = matches!(p, proto::UDP | proto::UDPLITE);
                self.track_simple(t, udp, len, now_ns)
            }
        }
    }

    /// A new connection, expected or not.
    fn new_pending(&mut self, t: Tuple, mut e: Entry<X>, now_ns: u64) -> Track<X> {
        let exp = self.take_expected(&t, now_ns);
        if exp.is_some() {
            e.tcp.ct_status |= S_EXPECTED;
        }
        let zone = self.cur_zone;
        (e.zone, e.zone_dir) = (zone.id, zone.dir);
        let mut reply = t.invert();
        reply.zone = zone.id_for(Dir::Reply);
        Track::New(Pending {
            orig: t,
            reply,
            entry: e,
            master: exp.map(|x| x.master),
            // (a master without NAT leaves its expected connection to the nat chains)
            follow: exp
                .map(|x| x.follow)
                .filter(|f| *f != crate::Follow::default()),
            labels: 0,
        })
    }

    fn related(&mut self, pm: &PacketMeta, frame: &[u8], v6: bool, now_ns: u64) -> Track<X> {
        let bad = Track::Invalid(Invalid::IcmpUnrelated);
        let Some(q) = pm.icmp_quoted(frame) else {
            return bad;
        };
        if !q.l3_ok() || q.frag == Frag::Later || (q.l3 == L3::Ipv6) != v6 {
            return bad;
        }
        let icmp_proto = if v6 { proto::ICMPV6 } else { proto::ICMP };
        let (sport, dport) = if q.has_ports {
            (q.sport, q.dport)
        } else if q.l4proto == icmp_proto {
            let l4 = q.l4_off as usize;
            let (Some(&typ), Some(&code), Some(id)) =
                (frame.get(l4), frame.get(l4 + 1), frame.get(l4 + 4..l4 + 6))
            else {
                return bad;
            };
            if icmp_inverse(v6, typ) == 0xff {
                return bad;
            }
            (
                u16::from_be_bytes([id[0], id[1]]),
                ((typ as u16) << 8) | code as u16,
            )
        } else if matches!(
            q.l4proto,
            proto::TCP | proto::UDP | proto::UDPLITE | proto::SCTP | proto::DCCP
        ) {
            return bad;
        } else {
            (0, 0)
        };
        let inner = Tuple {
            zone: self.cur_zone.id_for(Dir::Original),
            src: q.saddr,
            dst: q.daddr,
            sport,
            dport,
            proto: q.l4proto,
            v6,
        };
        let want = inner.invert();
        // nf_conntrack_inet_error: the error must be for the connection's end that sent the
        // quoted packet: its outer destination is the quoted packet's source (the found
        // direction's destination); an error quoting B->T sent to X is not related to it
        if pm.daddr != want.dst {
            return bad;
        }
        let h = self.hash(&want);
        match self.live_lookup(&want, h, tick(now_ns)) {
            Some(k) => Track::Related {
                master: EntryId((k - 1) >> 1),
                dir: Dir::from_index(((k - 1) & 1) as usize),
            },
            None => bad,
        }
    }

    fn track_icmp(
        &mut self,
        pm: &PacketMeta,
        frame: &[u8],
        v6: bool,
        len: u32,
        now_ns: u64,
    ) -> Track<X> {
        let l4 = pm.l4_off as usize;
        let (Some(&typ), Some(&code)) = (frame.get(l4), frame.get(l4 + 1)) else {
            return Track::Invalid(Invalid::Malformed);
        };
        if icmp_inverse(v6, typ) == 0xff {
            return Track::Invalid(Invalid::CannotCreate);
        }
        let Some(id) = frame.get(l4 + 4..l4 + 6) else {
            return Track::Invalid(Invalid::Malformed);
        };
        let t = Tuple {
            zone: self.cur_zone.id_for(Dir::Original),
            src: pm.saddr,
            dst: pm.daddr,
            sport: u16::from_be_bytes([id[0], id[1]]),
            dport: ((typ as u16) << 8) | code as u16,
            proto: pm.l4proto,
            v6,
        };
        let timeout = self.cfg.timeouts.icmp;
        let h = self.hash(&t);
        if let Some(k) = self.packet_lookup(&t, h, tick(now_ns)) {
            let (idx, d) = (((k - 1) >> 1) as usize, ((k - 1) & 1) as usize);
            let timeout = self.timeouts_of(self.entries[idx].tcp.policy).icmp;
            let e = &mut self.entries[idx];
            let info = ctinfo(e, d);
            e.refresh(now_ns, timeout);
            e.account(d, len);
            if d == 1 {
                e.tcp.ct_status |= S_SEEN_REPLY;
            }
            return Track::Existing {
                id: EntryId(idx as u32),
                dir: Dir::from_index(d),
                info,
            };
        }
        if !icmp_creates(v6, typ) {
            return Track::Invalid(Invalid::CannotCreate);
        }
        let mut e = Entry::blank(pm.l4proto, v6);
        e.refresh(now_ns, timeout);
        e.account(0, len);
        self.new_pending(t, e, now_ns)
    }

    fn track_simple(&mut self, t: Tuple, udp: bool, len: u32, now_ns: u64) -> Track<X> {
        let to = self.cfg.timeouts;
        let h = self.hash(&t);
        let now = tick(now_ns);
        if let Some(k) = self.packet_lookup(&t, h, now) {
            let (idx, d) = (((k - 1) >> 1) as usize, ((k - 1) & 1) as usize);
            let to = self.timeouts_of(self.entries[idx].tcp.policy);
            let e = &mut self.entries[idx];
            let info = ctinfo(e, d);
            let mut now_assured = false;
            if udp && e.seen_reply() {
                // Linux: the stream timeout once replies were seen and the entry is > 2 s old.
                let stream_ts = e.tcp.end[0];
                if (now.wrapping_sub(stream_ts) as i32) > 0 {
                    e.refresh(now_ns, to.udp_stream);
                    now_assured = !e.assured();
                } else {
                    e.refresh(now_ns, to.udp);
                }
            } else {
                e.refresh(now_ns, if udp { to.udp } else { to.generic });
            }
            e.account(d, len);
            if d == 1 {
                e.tcp.ct_status |= S_SEEN_REPLY;
            }
            if now_assured {
                e.tcp.ct_status |= S_ASSURED;
                self.update_evictable(idx);
            }
            return Track::Existing {
                id: EntryId(idx as u32),
                dir: Dir::from_index(d),
                info,
            };
        }
        let mut e = Entry::blank(t.proto, t.v6);
        e.refresh(now_ns, if udp { to.udp } else { to.generic });
        if udp {
            e.tcp.end[0] = tick(now_ns.saturating_add(2_000_000_000));
        }
        e.account(0, len);
        self.new_pending(t, e, now_ns)
    }

    fn track_tcp(
        &mut self,
        pm: &PacketMeta,
        frame: &[u8],
        v6: bool,
        len: u32,
        now_ns: u64,
    ) -> Track<X> {
        if !tcp::flags_valid(pm.tcp_flags) {
            return Track::Invalid(Invalid::TcpFlags);
        }
        let l4 = pm.l4_off as usize;
        // the segment's length comes from the IP header: the frame may hold only the headers
        // (a capture cut short, an NFQUEUE header copy)
        let wire_end = pm.l3_end();
        let end = wire_end.min(frame.len());
        let Some(mut seg) = frame
            .get(l4..end)
            .and_then(|th| tcp::Seg::parse(th, wire_end.saturating_sub(l4)))
        else {
            return Track::Invalid(Invalid::Malformed);
        };
        let t = Tuple {
            zone: self.cur_zone.id_for(Dir::Original),
            src: pm.saddr,
            dst: pm.daddr,
            sport: pm.sport,
            dport: pm.dport,
            proto: proto::TCP,
            v6,
        };
        let h = self.hash(&t);
        let now = tick(now_ns);
        let liberal = self.cfg.tcp_be_liberal;
        let to = self.cfg.timeouts;
        // At most twice: a SYN re-opening a closed connection removes it and starts again.
        for _ in 0..2 {
            let Some(k) = self.packet_lookup(&t, h, now) else {
                break;
            };
            let (idx, d) = (((k - 1) >> 1) as usize, ((k - 1) & 1) as usize);
            let id = EntryId(idx as u32);
            let dir = Dir::from_index(d);
            let to = self.timeouts_of(self.entries[idx].tcp.policy);
            seg.ack_off = 0;
            if self.entries[idx].tcp.ct_status & S_SEQADJ != 0 {
                let other = Dir::from_index(1 - d);
                seg.ack_off = self.seq_offset(id, other, seg.ack.wrapping_sub(1)) as u32;
            }
            let proxied = !self.synproxy.is_empty() && self.synproxy.contains_key(&(idx as u32));
            let e = &mut self.entries[idx];
            let info = ctinfo(e, d);
            if proxied && e.tcp.synproxy_keepalive(d, &seg) {
                return Track::Existing { id, dir, info };
            }
            match e
                .tcp
                .packet(d, &seg, e.seen_reply(), e.assured(), liberal, &to)
            {
                tcp::TcpVerdict::Reopen => {
                    self.remove_idx(idx as u32);
                    continue;
                }
                tcp::TcpVerdict::Invalid(r) => return Track::Invalid(r),
                tcp::TcpVerdict::Ignore => {
                    if d == 1 {
                        e.tcp.ct_status |= S_SEEN_REPLY;
                    }
                    return Track::Existing { id, dir, info };
                }
                tcp::TcpVerdict::Accept {
                    timeout,
                    kill,
                    set_assured,
                } => {
                    e.refresh(now_ns, timeout);
                    e.account(d, len);
                    if d == 1 {
                        e.tcp.ct_status |= S_SEEN_REPLY;
                    }
                    if set_assured {
                        e.tcp.ct_status |= S_ASSURED;
                    }
                    self.update_evictable(idx);
                    if kill {
                        self.killed = Some(Killed {
                            id,
                            orig: self.tuple_of(idx as u32, 0),
                            reply: self.tuple_of(idx as u32, 1),
                            entry: self.entries[idx],
                        });
                        self.remove_idx(idx as u32);
                    }
                    return Track::Existing { id, dir, info };
                }
            }
        }
        let mut conn = match TcpConn::new_conn(&seg, self.cfg.tcp_loose) {
            Ok(c) => c,
            Err(r) => return Track::Invalid(r),
        };
        match conn.packet(0, &seg, false, false, liberal, &to) {
            tcp::TcpVerdict::Accept { timeout, .. } => {
                let mut e = Entry::blank(proto::TCP, v6);
                conn.ct_proto = e.tcp.ct_proto;
                conn.ct_status = e.tcp.ct_status;
                e.tcp = conn;
                e.refresh(now_ns, timeout);
                e.account(0, len);
                self.new_pending(t, e, now_ns)
            }
            tcp::TcpVerdict::Invalid(r) => Track::Invalid(r),
            _ => Track::Invalid(Invalid::CannotCreate),
        }
    }
}

fn ctinfo<X>(e: &Entry<X>, d: usize) -> CtInfo {
    if d == 1 || e.seen_reply() {
        CtInfo::Established
    } else if e.tcp.ct_status & S_EXPECTED != 0 {
        CtInfo::Related
    } else {
        CtInfo::New
    }
}
