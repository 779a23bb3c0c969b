//! What a caller reads and sets of a [`Stateful`] besides running packets: the ruleset and
//! the engine, the connection table, the counters, saving and restoring its state, and the
//! device-bound (netdev) chains of a device.

use super::*;

impl Stateful {
    /// Which ruleset the engine runs: unique among the engines of the process, and new at
    /// each [`Stateful::reload`], so that what a caller derived from the ruleset (the chains
    /// bound to its devices) can tell it is stale.
    #[inline]
    pub fn ruleset_id(&self) -> u64 {
        self.ruleset_id
    }

    /// The compiled ruleset.
    pub fn ruleset(&self) -> &crate::Compiled {
        &self.eng.rs
    }

    /// The engine (the ruleset and its state: counters, limits, sets, logs).
    pub fn engine(&self) -> &Engine {
        &self.eng
    }

    /// The engine, to change its state (run-time set elements).
    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.eng
    }

    /// The connection table.
    pub fn ct(&self) -> &Conntrack<CtExt> {
        &self.ct
    }

    /// Whether the ruleset reads `rt ip|ip6 nexthop` (the caller then sets
    /// `Meta::nexthop` where the packet's route is known).
    pub fn reads_nexthop(&self) -> bool {
        self.eng.rs.reads_nexthop
    }

    /// The connection table, to change it (flush entries, collect expired ones).
    pub fn ct_mut(&mut self) -> &mut Conntrack<CtExt> {
        &mut self.ct
    }

    /// The counters of the stateful layer.
    pub fn stats(&self) -> &StatefulStats {
        &self.stats
    }

    /// Virtual reassembly's table (what a holder of early later fragments consults).
    pub fn frags_mut(&mut self) -> &mut frag::Table {
        &mut self.frags
    }

    /// Whether connection tracking runs for a family (the ruleset needs it there).
    pub fn tracks_family(&self, l3: L3) -> bool {
        self.tracks(l3)
    }

    /// Whether the ruleset may translate packets (nat chains, so NAT bindings).
    pub fn has_nat(&self) -> bool {
        self.nat_v4 || self.nat_v6
    }

    /// Whether the ruleset has flowtables.
    pub fn has_flowtables(&self) -> bool {
        !self.flowtables.is_empty()
    }

    /// Several workers share the traffic, each with its own table: `(workers, this worker)`.
    /// A source NAT binding then picks a port whose reply tuple steers to this worker
    /// ([`weir_conntrack::steer::worker`]), as it avoids a port in use.
    pub fn set_steer(&mut self, steer: Option<(u32, u32)>) {
        self.steer = steer;
    }

    /// See [`Stateful::set_steer`].
    pub fn steer(&self) -> Option<(u32, u32)> {
        self.steer
    }

    /// What packets change, saved (connections, statistics, virtual reassembly, the
    /// ruleset's state, the NAT port generator), to run a packet and come back to this
    /// state ([`Stateful::restore`]).
    pub fn save(&self) -> Saved {
        Saved {
            ct: self.ct.clone(),
            stats: self.stats,
            frags: self.frags.clone(),
            st: self.eng.st.clone(),
            nat_rng: self.nat_rng,
        }
    }

    /// Come back to a [`Stateful::save`]d state (of the same ruleset).
    pub fn restore(&mut self, s: &Saved) {
        self.ct = s.ct.clone();
        self.stats = s.stats;
        self.frags = s.frags.clone();
        self.eng.st = s.st.clone();
        self.nat_rng = s.nat_rng;
    }

    /// The base chains of a device-bound hook (`ingress`, `egress`) bound to device `dev`,
    /// in priority order.
    pub fn device_chains(&self, hook: Hook, dev: &str) -> Vec<HookEntry> {
        self.eng.rs.hooks[hook as usize]
            .iter()
            .filter(|h| {
                self.eng.rs.tables[h.table].chains[h.chain]
                    .base
                    .as_ref()
                    .is_some_and(|b| b.binds(dev))
            })
            .copied()
            .collect()
    }

    /// A device's netdev chains (from [`Stateful::device_chains`]) for a frame, before (at
    /// ingress) or after (at egress) the IP hooks: no connection tracking (the packet has no
    /// connection there: `ct state` is `invalid`), header writes applied after each chain.
    /// `meta`: the device as its input (ingress) or output (egress) interface; the mark it
    /// leaves is the packet's from then on. A `fwd` ends them: the packet leaves by the
    /// device `meta.fwd` names (the kernel steals it, no later chain runs).
    pub fn netdev_hook(
        &mut self,
        chains: &[HookEntry],
        frame: &mut [u8],
        pm: &mut PacketMeta,
        meta: &mut Meta,
        now_ns: u64,
    ) -> Decision {
        let mut buf = Buf::Rw(frame);
        meta.fwd = None;
        for &h in chains {
            meta.notrack = false;
            meta.nat = None;
            meta.flow_add = None;
            meta.has_ct = false;
            meta.ct_state = state::INVALID;
            let d = {
                let mut p = Pkt {
                    frame: buf.get(),
                    pm,
                    meta,
                    now_ns,
                    conns: Some(&self.ct),
                };
                self.eng.process_base(h, &mut p)
            };
            self.dup_take(h.hook, &buf, pm, meta);
            self.apply_writes(&mut buf, pm, meta);
            if !d.is_accept() || meta.fwd.is_some() {
                return d;
            }
        }
        Decision::Accept
    }
}
