//! The path of one frame through the router ([`Router::route_frame`]), and the way out of
//! the router's own answers ([`Router::icmp_answer`], [`Router::answer_out`]).

use crate::adj::Adj;
use crate::fate::{Fate, Reason};
use crate::Router;
use weir_engine::answer::{self, RejectAnswer};
use weir_engine::compile::HookEntry;
use weir_engine::stateful::{PacketCt, Stateful};
use weir_engine::{Decision, DropReason};
use weir_lang::ir::Hook;
use weir_wire::{Addr, Family, Frag, LinkType, Mac, PacketMeta};

/// What the receiving side knows of a frame besides its bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rx {
    /// The hash of its tuple from [`Stateful::prefetch_index`] (0: compute it).
    pub hash: u64,
    /// What the receiver knows of its transport checksum.
    pub csum: RxCsum,
}

/// What a receiver knows of a frame's TCP or UDP checksum. A sender on the same host leaves
/// it to offload (Linux's `CHECKSUM_PARTIAL`: the field holds the pseudo-header's sum); a
/// router forwarding such a frame must complete it, as the device would have.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RxCsum {
    /// Nothing (AF_XDP, a capture): a field holding exactly the partial sum is completed.
    #[default]
    Unknown,
    /// The kernel says it is partial (AF_PACKET's `TP_STATUS_CSUMNOTREADY`).
    Partial,
    /// The kernel says it is whole (or the frame came from the wire).
    Complete,
}

/// What became of an ICMP error due to a sender ([`Router::icmp_answer`]).
#[derive(Debug)]
pub enum IcmpAnswer {
    /// The error, through the output, postrouting and egress hooks: to send out of the port
    /// the packet came in on.
    Send(Vec<u8>),
    /// Held back by the rate limits.
    Limited,
    /// None is due (an error about an error, a multicast, a port without an address of the
    /// family...) or the output hooks dropped it.
    None,
}

/// How a packet finds its way out: the adjacency its connection cached, or a route.
#[derive(Clone, Copy)]
enum Way {
    Cached(Adj),
    Route(usize),
}

/// The TTL (hop limit) of an IP header at `l3`.
fn ttl_at(l3: usize, f: Family) -> usize {
    l3 + if f.is_v6() { 7 } else { 8 }
}

/// Decrement the TTL (hop limit) of an IP header at `l3`, updating the IPv4 header checksum
/// as Linux does (`ip_decrease_ttl`).
#[inline(always)]
pub(crate) fn dec_ttl(frame: &mut [u8], l3: usize, f: Family) {
    frame[ttl_at(l3, f)] -= 1;
    if !f.is_v6() {
        let c = u16::from_be_bytes([frame[l3 + 10], frame[l3 + 11]]);
        frame[l3 + 10..l3 + 12]
            .copy_from_slice(&weir_wire::checksum::ttl_decrement(c).to_be_bytes());
    }
}

impl Router {
    /// One frame read on port `in_port` (parsed as `pm`) through the router (see the crate's
    /// documentation for the steps). The frame is rewritten in place (NAT, TTL, MACs); the
    /// fate says where it goes.
    pub fn route_frame(
        &mut self,
        sf: &mut Stateful,
        frame: &mut [u8],
        mut pm: PacketMeta,
        in_port: usize,
        rx: Rx,
        now: u64,
    ) -> Fate {
        self.bind(sf);
        self.install_fib(sf);
        if self.record {
            self.note = crate::PathNote::default();
        }
        let fam = match Family::of(pm.l3) {
            Some(f) => f,
            // a runt: not even a link header
            None if pm.malformed.is_some_and(|m| m.is_l3()) => {
                return Fate::Drop(Reason::Malformed)
            }
            None => return Fate::NotMine,
        };
        let eth = pm.link == LinkType::Ethernet;
        // whether the frame is the router's is decided as it arrives, as Linux's
        // eth_type_trans sets its pkt_type before the ingress hook (an `ether daddr set` there
        // does not change it)
        let hot = self.bound.hot[in_port];
        let mine = match (eth, hot.mac) {
            (true, Some(mac)) => Mac::dst_of(frame) == Some(mac),
            _ => true,
        };
        // 1. the arrival device's netdev ingress chains, before anything else
        let mut mark = 0u32;
        if hot.ingress {
            match self.ingress(sf, in_port, frame, &mut pm, now) {
                Ok(m) => mark = m,
                Err(fate) => return fate,
            }
        }
        // 2. IP input: another host's frame, a VLAN the router has no interface for, a
        // broken header; link padding dropped
        if !mine {
            return Fate::NotMine;
        }
        if pm.vlan.is_some() {
            return Fate::NotMine;
        }
        if pm.malformed.is_some_and(|m| m.is_l3()) {
            return Fate::Drop(Reason::Malformed);
        }
        let len = pm.l3_end().min(frame.len());
        let l3 = pm.l3_off as usize;
        // a checksum its sender left to offload is completed before anything reads or
        // rewrites it (NAT updates it incrementally, reject checks it, it leaves whole)
        let complete = match rx.csum {
            RxCsum::Partial => true,
            RxCsum::Unknown => {
                matches!(pm.l4proto, 6 | 17) && weir_wire::offload::field_is_partial(frame, &pm)
            }
            RxCsum::Complete => false,
        };
        if complete {
            let _ = weir_wire::offload::complete_checksum(frame, &pm);
        }
        // 3. the flowtable fast path: an offloaded connection arriving where its direction
        // arrives (the fast path takes only TTLs above 1 and IPv4 headers without options; a
        // packet too large for some port takes the slow path, which checks the MTU)
        let devs = hot.flowtables;
        if devs.0 != 0 && self.fast_path && (pm.l3_len as usize) <= self.min_mtu {
            let adjs = &self.adjs;
            let here = |i: u16| adjs.get(i).is_some_and(|a| a.in_port == in_port);
            if let Some(fp) = sf.fast_path(frame, &mut pm, devs, rx.hash, now, here) {
                let Some(adj) = self.adjs.get(fp.oif) else {
                    return Fate::Drop(Reason::NoRoute);
                };
                dec_ttl(frame, l3, fam);
                if self.record {
                    self.note.fast_path = true;
                }
                return self.output(sf, frame, &mut pm, adj, mark, len, false, now);
            }
        }
        self.route_slow(sf, frame, pm, in_port, now, fam, mark, len)
    }

    /// The arrival device's netdev ingress chains: the mark they leave, or the frame's fate.
    #[inline(never)]
    fn ingress(
        &mut self,
        sf: &mut Stateful,
        in_port: usize,
        frame: &mut [u8],
        pm: &mut PacketMeta,
        now: u64,
    ) -> Result<u32, Fate> {
        let chains = std::mem::take(&mut self.bound.ingress[in_port]);
        let mut meta = self.meta(Some(in_port), None, 0);
        let r = self.netdev(sf, Hook::Ingress, &chains, frame, pm, &mut meta, now);
        self.bound.ingress[in_port] = chains;
        match r {
            Some(fate) => Err(fate),
            None => Ok(meta.mark),
        }
    }

    /// The rest of [`Router::route_frame`], for a frame the flowtable did not take: out of
    /// line, so that the fast path does not set up its large stack frame.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn route_slow(
        &mut self,
        sf: &mut Stateful,
        frame: &mut [u8],
        mut pm: PacketMeta,
        in_port: usize,
        now: u64,
        fam: Family,
        mut mark: u32,
        len: usize,
    ) -> Fate {
        let l3 = pm.l3_off as usize;
        // the IPv4 header checksum, as Linux's ip_rcv checks it: after the flowtable, which
        // (at the ingress hook, as nf_flow_offload_ip_hook) does not
        if fam == Family::Ipv4 && !pm.ipv4_checksum_ok(frame) {
            return Fate::Drop(Reason::IpChecksum);
        }
        let Some(&ttl) = frame.get(ttl_at(l3, fam)) else {
            return Fate::Drop(Reason::Malformed);
        };
        // 4. prerouting
        let mut pc = PacketCt {
            iif_addr: self.ports[in_port].addr(fam).map(Addr::bits),
            ..PacketCt::default()
        };
        let mut meta = self.meta(Some(in_port), None, mark);
        let d = sf.hook_mut(Hook::Prerouting, frame, &mut pm, &mut meta, now, &mut pc);
        if self.record {
            self.note.ct_state = meta.ct_state;
        }
        if let Decision::Drop(why) = d {
            if matches!(why, DropReason::Fragment) && pm.frag == Frag::Later {
                // no first fragment kept for it yet: the kernel's reassembly would wait for it
                return Fate::Hold;
            }
            return self.refused(sf, Hook::Prerouting, in_port, why, frame, &pm, &pc, now);
        }
        mark = meta.mark;
        // 5. routing after prerouting, as the kernel does (a reply to a masqueraded
        // connection is addressed to the router until connection tracking translates it)
        let Some(dst) = Addr::dst_of(&pm) else {
            return Fate::Drop(Reason::Malformed);
        };
        // (a packet `tproxy` gave to a local socket is the host's, wherever it is addressed)
        if self.is_local(dst) || sf.tproxy_of(&pc).is_some() {
            // the reverse path filter holds for the router's own packets too (Linux's
            // ip_route_input_slow validates the source of local and broadcast input)
            if !self.source_valid(in_port, &pm) {
                return Fate::Drop(Reason::RpFilter);
            }
            return self.deliver(sf, in_port, frame, &mut pm, &mut pc, mark, len, now);
        }
        // the route cache: the adjacency (output port and next hop) of the connection's
        // direction, found for its first packet (a neighbour's new MAC changes the
        // adjacency in place)
        let cached = if self.route_cache {
            sf.cached_route(&pc)
                .and_then(|i| self.adjs.get(i))
                .filter(|a| a.in_port == in_port)
        } else {
            None
        };
        // the reverse path filter, with routing (Linux's ip_route_input): a cached
        // adjacency was filtered when it was found
        if cached.is_none() && !self.source_valid(in_port, &pm) {
            return Fate::Drop(Reason::RpFilter);
        }
        let way = match cached {
            Some(adj) => Way::Cached(adj),
            None => match self.routes.lookup(dst) {
                Some(ri) => Way::Route(ri),
                None => return icmp_fate(sf, &pc, Reason::NoRoute, fam, (3, 0), (1, 0), 0),
            },
        };
        let port = match way {
            Way::Cached(adj) => adj.port,
            Way::Route(ri) => self.routes.get(ri).port,
        };
        // 6. as Linux's ip_forward: the TTL is checked and decremented after routing, before
        // the forward hook (which sees the decremented TTL)
        if ttl <= 1 {
            return icmp_fate(sf, &pc, Reason::Ttl, fam, (11, 0), (3, 0), 0);
        }
        // as Linux's ip_forward / ip6_forward, before the forward hook: a packet larger than
        // the output link's MTU is refused with "fragmentation needed" (IPv4 with "don't
        // fragment") or "packet too big" (IPv6: routers never fragment), telling the sender
        // the MTU; other IPv4 packets leave in fragments
        let mtu = self.ports[port].mtu;
        let mtu = if fam.is_v6() { mtu.max(1280) } else { mtu };
        let fragment = pm.l3_len as usize > mtu;
        if fragment && (fam.is_v6() || frame[l3 + 6] & 0x40 != 0) {
            let info = mtu.min(u16::MAX as usize) as u32;
            return icmp_fate(sf, &pc, Reason::TooBig, fam, (3, 4), (2, 0), info);
        }
        if !crate::mutants::on(crate::mutants::Mutant::NoTtlDecrement) {
            dec_ttl(frame, l3, fam);
        }
        pc.oif_addr = self.ports[port].addr(fam).map(Addr::bits);
        let nexthop = self.nexthop(sf, &pm);
        for h in [Hook::Forward, Hook::Postrouting] {
            let mut meta = self.meta(Some(in_port), Some(port), mark);
            meta.rt_mss = self.tcp_mss(port, &pm);
            meta.nexthop = nexthop;
            if let Decision::Drop(why) = sf.hook_mut(h, frame, &mut pm, &mut meta, now, &mut pc) {
                return self.refused(sf, h, in_port, why, frame, &pm, &pc, now);
            }
            mark = meta.mark;
        }
        if let Decision::Drop(why) = sf.finish_frame(frame, &mut pm, &mut pc, now, true) {
            self.noted(Hook::Postrouting, why);
            return Fate::Drop(Reason::of(why));
        }
        // 7. the next hop after NAT (the hooks keep `pm` parsed from the rewritten frame)
        let adj = match way {
            Way::Cached(a) => a,
            Way::Route(ri) => {
                let Some(a) = self.adjacency(in_port, ri, &pm) else {
                    let r = self.routes.get(ri);
                    let hop = r.via.or(Addr::dst_of(&pm)).unwrap_or(dst);
                    return Fate::NoNeighbour {
                        port: r.port,
                        hop,
                        len,
                        mark,
                        ct: Box::new(sf.answer_ct(&pc)),
                    };
                };
                if self.route_cache {
                    if let Some(i) = self.adjs.index(a) {
                        sf.cache_route(&pc, i);
                        self.cache_other_direction(sf, &pc, a.port);
                    }
                }
                a
            }
        };
        self.output(sf, frame, &mut pm, adj, mark, len, fragment, now)
    }

    /// Out through an adjacency (after the hooks or the flowtable): the next hop's MAC and
    /// the port's own as the source, then the port's egress chains.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn output(
        &mut self,
        sf: &mut Stateful,
        frame: &mut [u8],
        pm: &mut PacketMeta,
        adj: Adj,
        mark: u32,
        len: usize,
        fragment: bool,
        now: u64,
    ) -> Fate {
        let hot = self.bound.hot[adj.port];
        if pm.link == LinkType::Ethernet {
            if adj.slot != crate::adj::KEEP_MAC {
                frame[..6].copy_from_slice(&self.neigh.mac_at(adj.slot).0);
            }
            if let Some(m) = hot.mac {
                frame[6..12].copy_from_slice(&m.0);
            }
        }
        if hot.egress {
            if let Some(f) = self.egress_chains(sf, adj.port, frame, pm, mark, now) {
                return f;
            }
        }
        if fragment {
            Fate::Fragments {
                port: adj.port,
                len,
            }
        } else {
            Fate::Out {
                port: adj.port,
                len,
            }
        }
    }

    /// A packet for the router itself: `input`, confirmation, delivery (IPv4 and IPv6
    /// fragments alike cross `input` with their datagram's first, as virtual reassembly has
    /// them; the host reassembles what it is given).
    #[allow(clippy::too_many_arguments)]
    fn deliver(
        &mut self,
        sf: &mut Stateful,
        in_port: usize,
        frame: &mut [u8],
        pm: &mut PacketMeta,
        pc: &mut PacketCt,
        mark: u32,
        len: usize,
        now: u64,
    ) -> Fate {
        if !self.local_delivery {
            return Fate::Drop(Reason::ToRouter);
        }
        if self.host_reassembles_v4 && pm.l3 == weir_wire::L3::Ipv4 && pm.frag != Frag::None {
            return Fate::Local { len, tproxy: None };
        }
        let mut meta = self.meta(Some(in_port), None, mark);
        meta.nexthop = self.nexthop(sf, pm);
        if let Decision::Drop(why) = sf.hook_mut(Hook::Input, frame, pm, &mut meta, now, pc) {
            return self.refused(sf, Hook::Input, in_port, why, frame, pm, pc, now);
        }
        if let Decision::Drop(why) = sf.finish_frame(frame, pm, pc, now, false) {
            self.noted(Hook::Input, why);
            return Fate::Drop(Reason::of(why));
        }
        Fate::Local {
            len,
            tproxy: sf.tproxy_of(pc),
        }
    }

    /// The reverse path filter of a packet arriving on `port`, as Linux's
    /// `fib_validate_source`: whether it passes. (IPv6 link-local sources are on every
    /// link.)
    #[inline]
    fn source_valid(&self, port: usize, pm: &PacketMeta) -> bool {
        use crate::RpFilter;
        if crate::mutants::on(crate::mutants::Mutant::NoRpFilter) {
            return true;
        }
        let Some(src) = Addr::src_of(pm) else {
            return false;
        };
        match self.ports[port].rp_filter {
            RpFilter::Off => true,
            _ if src.is_link_local() => true,
            RpFilter::Loose => self.routes.lookup(src).is_some(),
            RpFilter::Strict => self
                .routes
                .lookup(src)
                .is_some_and(|ri| self.routes.get(ri).port == port),
        }
    }

    /// The adjacency of route `ri` for the packet (its next hop: the route's gateway, or the
    /// destination on a link) arriving on `in_port`; None when the next hop's MAC is not
    /// known.
    #[inline]
    fn adjacency(&self, in_port: usize, ri: usize, pm: &PacketMeta) -> Option<Adj> {
        let r = self.routes.get(ri);
        let mut via = r.via;
        if via.is_some() && crate::mutants::on(crate::mutants::Mutant::OneGatewayPerPort) {
            via = self
                .routes
                .iter()
                .find(|o| o.port == r.port && o.net.family() == r.net.family() && o.via.is_some())
                .and_then(|o| o.via);
        }
        let hop = via.or(Addr::dst_of(pm))?;
        let mut slot = self.neighbour_slot(hop)?;
        if crate::mutants::on(crate::mutants::Mutant::AdjacencySlotZero) {
            slot = 0;
        }
        Some(Adj {
            in_port,
            port: r.port,
            slot,
        })
    }

    /// The next hop of the route a packet takes (`rt ip|ip6 nexthop`: the route's gateway,
    /// or the destination itself on its link or when it is the router's), where the ruleset
    /// reads it.
    fn nexthop(&self, sf: &Stateful, pm: &PacketMeta) -> Option<u128> {
        if !sf.reads_nexthop() {
            return None;
        }
        let dst = Addr::dst_of(pm)?;
        if self.is_local(dst) {
            return Some(dst.bits());
        }
        let ri = self.routes.lookup(dst)?;
        Some(self.routes.get(ri).via.unwrap_or(dst).bits())
    }

    /// The slot of a next hop's MAC (on a router that does not resolve neighbours, an unknown
    /// one keeps the frame's MAC).
    #[inline]
    fn neighbour_slot(&self, hop: Addr) -> Option<u32> {
        match self.neigh.slot(hop) {
            None if !self.resolve => Some(crate::adj::KEEP_MAC),
            s => s,
        }
    }

    /// A connection just put in a flowtable learns the adjacency of its other direction now,
    /// as netfilter's `flow add` looks both routes up: the other direction's packets arrive
    /// on this packet's output port and go to where this direction came from.
    fn cache_other_direction(&mut self, sf: &mut Stateful, pc: &PacketCt, out_port: usize) {
        let (Some(cached), Some((o, r, dir))) = (sf.offloaded(pc), sf.conn(pc)) else {
            return;
        };
        let other = 1 - dir as usize;
        if cached[other] {
            return;
        }
        // the other direction's packets go to this direction's source (after NAT)
        let back = if other == 0 { r.src } else { o.src };
        let fam = if o.v6 { Family::Ipv6 } else { Family::Ipv4 };
        let back = Addr::new(fam, back);
        let Some(ri) = self.routes.lookup(back) else {
            return;
        };
        let route = *self.routes.get(ri);
        let Some(slot) = self.neighbour_slot(route.via.unwrap_or(back)) else {
            return;
        };
        let adj = Adj {
            in_port: out_port,
            port: route.port,
            slot,
        };
        if let Some(i) = self.adjs.index(adj) {
            let d = if other == 0 {
                weir_conntrack::Dir::Original
            } else {
                weir_conntrack::Dir::Reply
            };
            sf.cache_route_dir(pc, d, i);
        }
    }

    /// A port's netdev chains (ingress or egress) for a frame: None when they let it go on;
    /// else its fate (dropped, or `fwd to` another port).
    #[allow(clippy::too_many_arguments)]
    fn netdev(
        &mut self,
        sf: &mut Stateful,
        hook: Hook,
        chains: &[HookEntry],
        frame: &mut [u8],
        pm: &mut PacketMeta,
        meta: &mut weir_engine::Meta,
        now: u64,
    ) -> Option<Fate> {
        match sf.netdev_hook(chains, frame, pm, meta, now) {
            Decision::Drop(why) => {
                self.noted(hook, why);
                Some(Fate::Drop(Reason::of(why)))
            }
            Decision::Accept => {
                let fate = self.fwd(frame, pm, meta.fwd?);
                // Linux sends a frame an ingress chain forwards with dev_queue_xmit, whose
                // egress hook runs the output device's egress chains (the kernel lab shows
                // them dropping it); what an egress chain forwards does not cross them again
                if let (Hook::Ingress, Fate::Out { port, .. }) = (hook, &fate) {
                    if let Some(f) = self.egress(sf, *port, frame, pm, meta.mark, now) {
                        return Some(f);
                    }
                }
                Some(fate)
            }
        }
    }

    /// `fwd to DEV` (the frame leaves by that port as it is) or `fwd ip|ip6 to ADDR device
    /// DEV` (as Linux's `nft_fwd_neigh`: a TTL or hop limit of 1 or 0 dropped, else
    /// decremented, the frame sent to
    /// that neighbour's MAC from the port's). From an ingress chain the frame then crosses
    /// the output port's egress chains ([`Router::netdev`]), from an egress chain not again.
    fn fwd(&mut self, frame: &mut [u8], pm: &PacketMeta, f: weir_engine::Fwd) -> Fate {
        let Some(port) = self
            .ports
            .iter()
            .position(|p| p.name_value == f.dev && f.dev != 0)
        else {
            return Fate::Drop(Reason::FwdUnknown);
        };
        let len = pm.l3_end().min(frame.len());
        let Some(n) = f.neigh else {
            return Fate::Out {
                port,
                len: frame.len(),
            };
        };
        let fam = if n.family == 6 {
            Family::Ipv6
        } else {
            Family::Ipv4
        };
        let hop = Addr::new(fam, n.addr);
        let Some(slot) = self.neigh.slot(hop) else {
            return Fate::NoNeighbour {
                port,
                hop,
                len: 0,
                mark: 0,
                ct: Box::default(),
            };
        };
        let l3 = pm.l3_off as usize;
        // as nft_fwd_neigh since Linux commit 1dfd95bdf4d1 ("drop packets if their ttl/hl is
        // too small for forwarding"): dropped, without an ICMP error
        match frame.get(ttl_at(l3, fam)) {
            Some(&t) if t > 1 => dec_ttl(frame, l3, fam),
            _ => return Fate::Drop(Reason::Ttl),
        }
        if pm.link == LinkType::Ethernet {
            frame[..6].copy_from_slice(&self.neigh.mac_at(slot).0);
            if let Some(m) = self.ports[port].mac {
                frame[6..12].copy_from_slice(&m.0);
            }
        }
        Fate::Out { port, len }
    }

    /// Note where and why the chains dropped the packet (when notes are kept).
    #[inline]
    fn noted(&mut self, hook: Hook, why: DropReason) {
        if self.record {
            self.note.dropped_at = Some((hook, why));
        }
    }

    /// The egress chains of `port` for a frame about to leave by it.
    #[inline(always)]
    pub(crate) fn egress(
        &mut self,
        sf: &mut Stateful,
        port: usize,
        frame: &mut [u8],
        pm: &mut PacketMeta,
        mark: u32,
        now: u64,
    ) -> Option<Fate> {
        if self.bound.egress[port].is_empty() {
            return None;
        }
        self.egress_chains(sf, port, frame, pm, mark, now)
    }

    #[inline(never)]
    fn egress_chains(
        &mut self,
        sf: &mut Stateful,
        port: usize,
        frame: &mut [u8],
        pm: &mut PacketMeta,
        mark: u32,
        now: u64,
    ) -> Option<Fate> {
        let chains = std::mem::take(&mut self.bound.egress[port]);
        let mut meta = self.meta(None, Some(port), mark);
        let r = self.netdev(sf, Hook::Egress, &chains, frame, pm, &mut meta, now);
        self.bound.egress[port] = chains;
        r
    }

    /// What becomes of a packet the hooks dropped: a counted drop, or for `reject` also the
    /// answer to its sender, as Linux's `nf_send_unreach` / `nf_send_reset` make it from the
    /// packet as it is at the rejecting hook: an ICMP error from the router (`Fate::Icmp`,
    /// rate-limited by [`Router::icmp_answer`]), or a TCP reset sent back out of the arrival
    /// port through [`Router::answer_out`]. No answer to a TCP or UDP packet whose checksum
    /// is wrong, as Linux.
    #[allow(clippy::too_many_arguments)]
    fn refused(
        &mut self,
        sf: &mut Stateful,
        hook: Hook,
        in_port: usize,
        why: DropReason,
        frame: &[u8],
        pm: &PacketMeta,
        pc: &PacketCt,
        now: u64,
    ) -> Fate {
        self.noted(hook, why);
        let Some(answer) = answer::refused_answer(sf.ruleset(), why, frame, pm, false) else {
            return Fate::Drop(Reason::of(why));
        };
        match answer {
            RejectAnswer::Icmp(typ, code) => Fate::Icmp {
                why: Reason::Reject,
                typ,
                code,
                info: 0,
                ct: Box::new(sf.answer_ct(pc)),
            },
            RejectAnswer::Reset => {
                let me = self.ports[in_port].mac.unwrap_or_default();
                let sender = Mac::src_of(frame).unwrap_or_default();
                answer::tcp_reset(frame, pm, me.0, sender.0)
                    .and_then(|rst| self.answer_out(sf, in_port, rst, sf.answer_ct(pc), now))
                    .map_or(Fate::Drop(Reason::Reject), Fate::Reset)
            }
        }
    }

    /// The ICMP error `fate` asks for, about `frame` (as it is where the error arose) read
    /// on `in_port`: back to its sender from the router's address on that port, rate-limited
    /// as Linux limits its own (path MTU discovery is not), and through the output,
    /// postrouting and egress hooks carrying the packet's connection. None is due where RFC
    /// 1812 (and Linux's `icmp_send`) sends none: the frame is an ICMP error itself, a
    /// fragment other than the first, to or from a multicast or broadcast address, or the
    /// port has no address of the family.
    #[allow(clippy::too_many_arguments)]
    pub fn icmp_answer(
        &mut self,
        sf: &mut Stateful,
        in_port: usize,
        frame: &[u8],
        why: Reason,
        typ: u8,
        code: u8,
        info: u32,
        ct: PacketCt,
        now: u64,
    ) -> IcmpAnswer {
        let Some(e) = self.icmp_error(in_port, frame, typ, code, info) else {
            return IcmpAnswer::None;
        };
        if why != Reason::TooBig {
            let pm = PacketMeta::parse(&e, LinkType::Ethernet);
            let Some(to) = Addr::dst_of(&pm) else {
                return IcmpAnswer::None;
            };
            let plen = self.routes.lookup(to).map(|ri| self.routes.get(ri).len);
            if !self.icmp.allow(to, plen, now) {
                return IcmpAnswer::Limited;
            }
        }
        match self.answer_out(sf, in_port, e, ct, now) {
            Some(e) => IcmpAnswer::Send(e),
            None => IcmpAnswer::None,
        }
    }

    /// The ICMP error for a frame read on `port`, back to its sender from the router's
    /// address there, or None where none is due (see [`Router::icmp_answer`]).
    pub fn icmp_error(
        &self,
        port: usize,
        frame: &[u8],
        typ: u8,
        code: u8,
        info: u32,
    ) -> Option<Vec<u8>> {
        let pm = PacketMeta::parse(frame, LinkType::Ethernet);
        let fam = Family::of(pm.l3)?;
        if Mac::dst_of(frame)?.is_multicast() || !answer::icmp_answerable(frame, &pm) {
            return None;
        }
        let src = self.ports[port].addr(fam)?;
        let l3 = pm.l3_off as usize;
        let quote = &frame[l3..pm.l3_end().min(frame.len())];
        let macs = (
            self.ports[port].mac.unwrap_or_default(),
            Mac::src_of(frame)?,
        );
        Some(answer::icmp_error(
            src,
            Addr::src_of(&pm)?,
            typ,
            code,
            info,
            quote,
            macs,
        ))
    }

    /// A packet the host's own stack sent out of `port` (an answer of a service on the
    /// router, a connection the router opens), seen as it leaves: through `output` and
    /// `postrouting` with connection tracking, so that its replies are `established`. It has
    /// left already: the verdict is only counted.
    pub fn host_out(
        &mut self,
        sf: &mut Stateful,
        port: usize,
        mut frame: Vec<u8>,
        now: u64,
    ) -> Decision {
        self.bind(sf);
        self.install_fib(sf);
        let pm = PacketMeta::parse(&frame, LinkType::Ethernet);
        let Some(fam) = Family::of(pm.l3) else {
            return Decision::Accept;
        };
        let mut meta = self.meta(None, Some(port), 0);
        meta.rt_mss = self.tcp_mss(port, &pm);
        meta.nexthop = self.nexthop(sf, &pm);
        let pc = PacketCt {
            oif_addr: self.ports[port].addr(fam).map(Addr::bits),
            ..PacketCt::default()
        };
        sf.local_out(&mut frame, meta, pc, now)
    }

    /// The router's answer `e` (a TCP reset, an ICMP error; an Ethernet frame) to a packet
    /// read on port `port`, out through the output and postrouting hooks towards that port,
    /// as the kernel sends its own (`ip_local_out`), carrying the packet's connection (`ct`,
    /// from [`Stateful::answer_ct`]): NAT gives it the addresses the sender knows (for an
    /// ICMP error, quote included: `nf_nat_icmp_reply_translation`), and an output chain may
    /// drop it (None). Then the port's egress chains.
    pub fn answer_out(
        &mut self,
        sf: &mut Stateful,
        port: usize,
        mut e: Vec<u8>,
        mut ct: PacketCt,
        now: u64,
    ) -> Option<Vec<u8>> {
        self.bind(sf);
        self.install_fib(sf);
        let mut pm = PacketMeta::parse(&e, LinkType::Ethernet);
        let fam = Family::of(pm.l3)?;
        let mut meta = self.meta(None, Some(port), 0);
        meta.nexthop = self.nexthop(sf, &pm);
        ct.oif_addr = self.ports[port].addr(fam).map(Addr::bits);
        let mark = meta.mark;
        if !sf.local_out(&mut e, meta, ct, now).is_accept() {
            return None;
        }
        pm = PacketMeta::parse(&e, pm.link);
        match self.egress(sf, port, &mut e, &mut pm, mark, now) {
            Some(_) => None,
            None => Some(e),
        }
    }
}

/// The ICMP error `why` to the sender of a packet (`pc`: its connection tracking, which the
/// error carries): type and code for IPv4 and for IPv6.
fn icmp_fate(
    sf: &Stateful,
    pc: &PacketCt,
    why: Reason,
    fam: Family,
    v4: (u8, u8),
    v6: (u8, u8),
    info: u32,
) -> Fate {
    let (typ, code) = if fam.is_v6() { v6 } else { v4 };
    Fate::Icmp {
        why,
        typ,
        code,
        info,
        ct: Box::new(sf.answer_ct(pc)),
    }
}
