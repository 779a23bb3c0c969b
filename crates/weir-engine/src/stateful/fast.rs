//! The flowtable fast path (netfilter's flowtable ingress hook) and the route cache kept in
//! each connection, with the prefetch stages a receive loop runs ahead of them.

use super::*;

impl Stateful {
    /// Mark the packet's connection offloaded (`flow add @ft`), as `nft_flow_offload_eval`
    /// allows it: a confirmed TCP connection in the established state (not on a FIN or RST)
    /// or a UDP one; and not while a `queue` listener still acts on it (its packets must
    /// keep reaching the `queue` statements).
    pub(super) fn flow_add(&mut self, ft: (u16, u16), pm: &PacketMeta, pc: &PacketCt) {
        let CtPkt::Entry { id, .. } = pc.ct else {
            return;
        };
        if let Some(h) = &self.flow_hook {
            if self
                .ct
                .tuple(id, Dir::Original)
                .is_some_and(|t| h.holds(&t))
            {
                self.stats.offload_deferred += 1;
                return;
            }
        }
        let Some(gi) = self
            .flowtables
            .iter()
            .position(|f| (f.0 as u16, f.1 as u16) == ft)
        else {
            return;
        };
        let Some(e) = self.ct.get_mut(id) else {
            return;
        };
        // nft_flow_offload: not a connection with a helper (its packets must be read) or
        // whose sequence numbers a helper shifted
        if e.ext.helper != 0 || e.seq_adjusted() {
            return;
        }
        let ok = match e.proto() {
            6 => {
                pm.tcp_flags & 0x05 == 0
                    && e.tcp_state() == Some(weir_conntrack::TcpState::Established)
            }
            17 => true,
            _ => false,
        };
        if ok && e.ext.flowtable == 0 {
            e.ext.flowtable = (gi + 1) as u8;
            self.stats.offloaded += 1;
        }
    }

    /// Start loading the connection entries of a batch of packets (hash index slots first,
    /// then the entries they name), so that their cache misses overlap instead of adding up:
    /// call it on a received batch before running its packets one by one.
    pub fn prefetch(&self, pms: &[PacketMeta]) {
        const MAX: usize = 64;
        let mut hs = [0u64; MAX];
        let n = pms.len().min(MAX);
        for (h, pm) in hs.iter_mut().zip(&pms[..n]) {
            *h = self.prefetch_index(pm);
        }
        for &h in hs[..n].iter().filter(|&&h| h != 0) {
            // the whole entry: its first bytes are not here yet to tell whether the rest is
            // needed (a pipelined loop runs [`Stateful::prefetch_rest`] a batch later)
            self.ct.prefetch_entry(h);
            self.ct.prefetch_rest(h, |_| true);
        }
    }

    /// The first stage of [`Stateful::prefetch`] for one packet (a receive loop may run the
    /// stages on different batches): start loading its connection's hash slot; returns the
    /// hash for the second stage (0: nothing to fetch).
    #[inline]
    pub fn prefetch_index(&self, pm: &PacketMeta) -> u64 {
        if !pm.has_ports || !matches!(pm.l3, L3::Ipv4 | L3::Ipv6) {
            return 0;
        }
        self.ct.prefetch_index(&weir_conntrack::Tuple {
            zone: 0,
            src: pm.saddr,
            dst: pm.daddr,
            sport: pm.sport,
            dport: pm.dport,
            proto: pm.l4proto,
            v6: pm.l3 == L3::Ipv6,
        })
    }

    /// The second stage: start loading the first bytes of the entry the slot names (all
    /// that the flowtable fast path reads).
    #[inline]
    pub fn prefetch_entry(&self, h: u64) {
        if h != 0 {
            self.ct.prefetch_entry(h);
        }
    }

    /// The third stage: start loading the rest of the entry (TCP state, counters) unless the
    /// connection is offloaded to a flowtable (the fast path does not read them).
    #[inline]
    pub fn prefetch_rest(&self, h: u64) {
        if h != 0 {
            self.ct.prefetch_rest(h, |x| x.flowtable == 0);
        }
    }

    /// Remember the output interface of the packet's direction in its connection (the route
    /// cache; the flowtable fast path forwards with it).
    pub fn cache_route(&mut self, pc: &PacketCt, oif: u16) {
        if let CtPkt::Entry { id, dir, .. } = pc.ct {
            if let Some(e) = self.ct.get_mut(id) {
                e.ext.route[dir as usize] = oif.saturating_add(1);
            }
        }
    }

    /// The packet's connection (original and reply tuples) and the packet's direction.
    pub fn conn(
        &self,
        pc: &PacketCt,
    ) -> Option<(weir_conntrack::Tuple, weir_conntrack::Tuple, Dir)> {
        match pc.ct {
            CtPkt::Entry { id, dir, .. } => Some((
                self.ct.tuple(id, Dir::Original)?,
                self.ct.tuple(id, Dir::Reply)?,
                dir,
            )),
            _ => None,
        }
    }

    /// Whether the packet's connection is in a flowtable, and whether a direction's route is
    /// cached.
    pub fn offloaded(&self, pc: &PacketCt) -> Option<[bool; 2]> {
        match pc.ct {
            CtPkt::Entry { id, .. } => {
                let e = self.ct.get(id)?;
                (e.ext.flowtable != 0).then_some([e.ext.route[0] != 0, e.ext.route[1] != 0])
            }
            _ => None,
        }
    }

    /// Cache the output interface of one direction of the packet's connection.
    pub fn cache_route_dir(&mut self, pc: &PacketCt, dir: Dir, oif: u16) {
        if let CtPkt::Entry { id, .. } = pc.ct {
            if let Some(e) = self.ct.get_mut(id) {
                e.ext.route[dir as usize] = oif.saturating_add(1);
            }
        }
    }

    /// The output interface cached for the packet's connection and direction (after
    /// `prerouting`), if any: the route cache.
    pub fn cached_route(&self, pc: &PacketCt) -> Option<u16> {
        match pc.ct {
            CtPkt::Entry { id, dir, .. } => {
                let r = self.ct.get(id)?.ext.route[dir as usize];
                r.checked_sub(1)
            }
            _ => None,
        }
    }

    /// The flowtables that list a device (bit `i`: [`Stateful::flowtables`]`[i]`, the first
    /// 64): a receive loop computes it once per interface, as the kernel registers a
    /// flowtable's hook on its devices.
    pub fn flowtable_devices(&self, ifname: &str) -> FtDevices {
        let mut m = 0u64;
        for (i, f) in self.flowtables.iter().enumerate().take(64) {
            if f.2.iter().any(|d| d == ifname) {
                m |= 1 << i;
            }
        }
        FtDevices(m)
    }

    /// The flowtable fast path (netfilter's flowtable ingress hook): a packet of an offloaded
    /// connection arriving on one of the flowtable's devices (`devs`, from
    /// [`Stateful::flowtable_devices`] for the arrival device) skips every chain and
    /// connection tracking; it gets its NAT translation and leaves by the cached output (the
    /// caller decrements the TTL and writes the link header). Only a connection whose cached
    /// route `route_ok` accepts is taken (checked before anything is changed; e.g. that the
    /// packet arrived where its direction's packets arrive, as netfilter's flowtable tuple
    /// holds the input interface). A FIN or RST takes the connection out of the flowtable and
    /// the packet to the slow path, as do IPv4 options, fragments and a TTL of 1 or less.
    /// `hash`: the tuple's hash from [`Stateful::prefetch_index`] (0: compute it). None: the
    /// slow path.
    #[inline(always)]
    pub fn fast_path(
        &mut self,
        frame: &mut [u8],
        pm: &mut PacketMeta,
        devs: FtDevices,
        hash: u64,
        now_ns: u64,
        route_ok: impl FnOnce(u16) -> bool,
    ) -> Option<FastPath> {
        if devs.0 == 0
            || !matches!(pm.l3, L3::Ipv4 | L3::Ipv6)
            || pm.malformed.is_some()
            || pm.frag != Frag::None
            || !pm.has_ports
            || !matches!(pm.l4proto, 6 | 17)
        {
            return None;
        }
        let l3 = pm.l3_off as usize;
        let v6 = pm.l3 == L3::Ipv6;
        if !v6 && (frame.get(l3).map(|b| b & 0x0f) != Some(5)) {
            return None;
        }
        if frame
            .get(l3 + if v6 { 7 } else { 8 })
            .is_none_or(|&t| t <= 1)
        {
            return None;
        }
        let t = weir_conntrack::Tuple {
            zone: 0,
            src: pm.saddr,
            dst: pm.daddr,
            sport: pm.sport,
            dport: pm.dport,
            proto: pm.l4proto,
            v6,
        };
        let (id, dir) = if hash == 0 {
            self.ct.find(&t)?
        } else {
            self.ct.find_hashed(&t, hash)?
        };
        let e = self.ct.get(id)?;
        let gi = e.ext.flowtable.checked_sub(1)? as u32;
        if devs.0.checked_shr(gi).unwrap_or(0) & 1 == 0 {
            return None;
        }
        if pm.l4proto == 6 && pm.tcp_flags & 0x05 != 0 {
            // flow_offload_teardown: back to conntrack, which relearns the windows
            let e = self.ct.get_mut(id)?;
            e.ext.flowtable = 0;
            e.forget_windows();
            self.stats.offload_teardowns += 1;
            return None;
        }
        let oif = e.ext.route[dir as usize].checked_sub(1)?;
        if !route_ok(oif) {
            return None;
        }
        let nat_status = e.ext.nat_status;
        let is_reply = dir == Dir::Reply;
        for m in [Manip::Dst, Manip::Src] {
            if m.applies(nat_status, is_reply) {
                let (orig, reply) = (
                    self.ct.tuple(id, Dir::Original)?,
                    self.ct.tuple(id, Dir::Reply)?,
                );
                let other = if is_reply { orig } else { reply };
                if nat::manip_pkt(frame, pm, &other.invert(), m, false) {
                    self.stats.nat_rewritten += 1;
                    *pm = PacketMeta::parse(frame, pm.link);
                }
            }
        }
        let timeout = match pm.l4proto {
            6 => self.ct.config().timeouts.tcp_established,
            _ => self.ct.config().timeouts.udp_stream,
        };
        if let Some(e) = self.ct.get_mut(id) {
            e.refresh(now_ns, timeout);
        }
        self.stats.fast_path += 1;
        Some(FastPath { oif, dir })
    }
}
