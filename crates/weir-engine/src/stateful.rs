//! The stateful layer: connection tracking between the base chains of a hook, as netfilter
//! places it.
//!
//! [`Stateful`] owns an [`Engine`] and a [`Conntrack`] table. A packet crossing the hooks of a
//! host carries a [`PacketCt`]: empty at first; at `prerouting` and `output` the table is
//! consulted at priority -200 (chains with a lower priority, `raw`, see `ct state invalid` as in
//! the kernel, and may `notrack` the packet); later chains see the connection's state, mark,
//! direction, counters and tuples. A new connection is only a pending entry until the packet
//! leaves the host: [`Stateful::finish`] confirms it after `postrouting` (forwarded) or `input`
//! (delivered); a packet dropped on the way leaves no entry, exactly as Linux confirms at the
//! last hook. `nat` chains run for a connection's first packet only.
//!
//! Connection tracking runs for a family only when the ruleset needs it (a `ct` expression,
//! `notrack`, a NAT statement or a `nat` chain in a table of that family), as the kernel only
//! registers its conntrack hooks then; otherwise packets stay untracked. When it runs, IP
//! fragments are held for reassembly by the kernel; weir does not reassemble and drops them
//! with a counted reason instead (see KNOWN_DIFFERENCES).

use crate::compile::HookEntry;
use crate::eval::{CtView, Decision, DropReason, Engine, Pkt};
use weir_conntrack::{Config, Conntrack, CtInfo, Dir, EntryId, Pending, Track};
use weir_lang::ir::{self, ChainType, Family, Hook};
use weir_wire::{Frag, L3};

/// Engine data kept in each connection entry.
#[derive(Clone, Copy, Debug, Default)]
pub struct CtExt {
    /// Linux IPS_* status bits weir sets itself (src-nat 16, dst-nat 32).
    pub nat_status: u8,
}

/// `ct state` bits.
pub mod state {
    pub const INVALID: u32 = 1;
    pub const ESTABLISHED: u32 = 2;
    pub const RELATED: u32 = 4;
    pub const NEW: u32 = 8;
    pub const UNTRACKED: u32 = 64;
}

/// What connection tracking decided for one packet, carried across its hooks.
#[derive(Clone, Copy, Debug, Default)]
pub enum CtPkt {
    /// Connection tracking has not seen the packet yet.
    #[default]
    NotYet,
    /// Not tracked: `notrack`, not IP, or the family is not tracked.
    Untracked,
    Invalid,
    Entry {
        id: EntryId,
        dir: Dir,
        info: CtInfo,
    },
    Related {
        master: EntryId,
        dir: Dir,
    },
    New(Pending<CtExt>),
}

/// One packet's connection-tracking context.
#[derive(Clone, Copy, Debug, Default)]
pub struct PacketCt {
    pub ct: CtPkt,
    pub notrack: bool,
}

/// Counters of the stateful layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatefulStats {
    /// Fragments dropped because weir does not reassemble (the kernel would hold them).
    pub fragments: u64,
    /// New connections whose entry could not be inserted (table full, clash): dropped.
    pub refused: u64,
    /// Connections confirmed.
    pub confirmed: u64,
    /// NAT statements that chose a binding this build does not apply yet.
    pub nat_not_applied: u64,
}

/// The engine plus a connection table.
pub struct Stateful {
    pub eng: Engine,
    pub ct: Conntrack<CtExt>,
    /// Connection tracking runs for IPv4 / IPv6 packets.
    pub track_v4: bool,
    pub track_v6: bool,
    pub stats: StatefulStats,
}

/// Whether a table's rules need connection tracking.
fn table_needs_ct(t: &ir::Table) -> bool {
    t.chains.iter().any(|c| {
        c.base.as_ref().is_some_and(|b| b.ty == ChainType::Nat)
            || c.rules.iter().any(|r| r.exprs.iter().any(expr_needs_ct))
    })
}

fn key_needs_ct(k: &ir::Key) -> bool {
    k.iter().any(|p| match &p.src {
        ir::Source::Field(f) => f.is_conntrack(),
        ir::Source::Jhash { key, .. } => key_needs_ct(key),
        _ => false,
    })
}

fn value_needs_ct(v: &ir::ValueExpr) -> bool {
    match v {
        ir::ValueExpr::Key(k) | ir::ValueExpr::Map { key: k, .. } => key_needs_ct(k),
        _ => false,
    }
}

fn expr_needs_ct(e: &ir::Expr) -> bool {
    match e {
        ir::Expr::Match(m) => key_needs_ct(&m.key),
        ir::Expr::Vmap { key, .. } => key_needs_ct(key),
        ir::Expr::Assign { field, value } => field.is_conntrack() || value_needs_ct(value),
        ir::Expr::CtCount { .. } | ir::Expr::Nat(_) | ir::Expr::FlowAdd(_) => true,
        _ => false,
    }
}

impl Stateful {
    pub fn new(eng: Engine, cfg: Config) -> Stateful {
        let (mut v4, mut v6) = (false, false);
        for t in &eng.rs.tables {
            if table_needs_ct(&t.ir) {
                match t.family {
                    Family::Ip => v4 = true,
                    Family::Ip6 => v6 = true,
                    Family::Inet => {
                        v4 = true;
                        v6 = true;
                    }
                    _ => {}
                }
            }
        }
        Stateful {
            eng,
            ct: Conntrack::new(cfg),
            track_v4: v4,
            track_v6: v6,
            stats: StatefulStats::default(),
        }
    }

    fn tracks(&self, l3: L3) -> bool {
        match l3 {
            L3::Ipv4 => self.track_v4,
            L3::Ipv6 => self.track_v6,
            _ => false,
        }
    }

    /// Fill the packet's `ct` view from its context.
    fn load_view(&self, p: &mut Pkt, pc: &PacketCt) {
        let m = &mut p.meta;
        m.has_ct = false;
        let (id, dir, bits) = match pc.ct {
            CtPkt::NotYet => {
                // before conntrack (raw priority): no entry, and not marked untracked
                m.ct_state = if pc.notrack {
                    state::UNTRACKED
                } else if self.tracks(p.pm.l3) {
                    state::INVALID
                } else {
                    state::UNTRACKED
                };
                return;
            }
            CtPkt::Untracked => {
                m.ct_state = state::UNTRACKED;
                return;
            }
            CtPkt::Invalid => {
                m.ct_state = state::INVALID;
                return;
            }
            CtPkt::New(pend) => {
                m.ct_state = state::NEW;
                m.has_ct = true;
                let (o, r) = (pend.orig(), pend.reply());
                let e = &pend.entry;
                m.ct_mark = e.mark;
                m.ct = CtView {
                    dir: 0,
                    status: (e.ext.nat_status as u32) << 4 & 0x30,
                    expiration_ms: e.timeout_remaining(p.now_ns).as_millis() as u32,
                    l3proto: if o.v6 { 10 } else { 2 },
                    protocol: o.proto,
                    orig_src: o.src,
                    orig_dst: o.dst,
                    orig_sport: o.sport,
                    orig_dport: o.dport,
                    reply_src: r.src,
                    reply_dst: r.dst,
                    packets: [e.packets(Dir::Original), e.packets(Dir::Reply)],
                    bytes: [e.bytes(Dir::Original), e.bytes(Dir::Reply)],
                };
                return;
            }
            CtPkt::Entry { id, dir, info } => (
                id,
                dir,
                match info {
                    CtInfo::New => state::NEW,
                    CtInfo::Established => state::ESTABLISHED,
                    CtInfo::Related => state::RELATED,
                },
            ),
            CtPkt::Related { master, dir } => (master, dir, state::RELATED),
        };
        m.ct_state = bits;
        let (Some(e), Some(o), Some(r)) = (
            self.ct.get(id),
            self.ct.tuple(id, Dir::Original),
            self.ct.tuple(id, Dir::Reply),
        ) else {
            // the entry ended with this packet (a RST): the state stays, the rest is gone
            return;
        };
        m.has_ct = true;
        m.ct_mark = e.mark;
        let mut status = 8; // confirmed
        if e.seen_reply() {
            status |= 2;
        }
        if e.assured() {
            status |= 4;
        }
        status |= (e.ext.nat_status as u32) & 0x30;
        m.ct = CtView {
            dir: dir as u8,
            status,
            expiration_ms: e.timeout_remaining(p.now_ns).as_millis() as u32,
            l3proto: if o.v6 { 10 } else { 2 },
            protocol: o.proto,
            orig_src: o.src,
            orig_dst: o.dst,
            orig_sport: o.sport,
            orig_dport: o.dport,
            reply_src: r.src,
            reply_dst: r.dst,
            packets: [e.packets(Dir::Original), e.packets(Dir::Reply)],
            bytes: [e.bytes(Dir::Original), e.bytes(Dir::Reply)],
        };
    }

    /// Write what the chain changed (`ct mark set`) back to the entry.
    fn store_mark(&mut self, p: &Pkt, pc: &mut PacketCt) {
        if !p.meta.has_ct {
            return;
        }
        let mark = p.meta.ct_mark;
        match &mut pc.ct {
            CtPkt::New(pend) => pend.entry.mark = mark,
            CtPkt::Entry { id, .. } | CtPkt::Related { master: id, .. } => {
                if let Some(e) = self.ct.get_mut(*id) {
                    e.mark = mark;
                }
            }
            _ => {}
        }
    }

    /// Connection tracking alone, for a packet that did not cross `prerouting` or `output`
    /// here (replaying one hook): the state later hooks see.
    pub fn track_only(&mut self, p: &mut Pkt, pc: &mut PacketCt) -> Decision {
        pc.ct = CtPkt::NotYet;
        self.conntrack(p, pc).unwrap_or(Decision::Accept)
    }

    /// Connection tracking proper (netfilter's `nf_conntrack_in` at priority -200).
    fn conntrack(&mut self, p: &mut Pkt, pc: &mut PacketCt) -> Option<Decision> {
        if pc.notrack || !self.tracks(p.pm.l3) {
            pc.ct = CtPkt::Untracked;
            return None;
        }
        if p.pm.frag != Frag::None {
            // the kernel's defragmentation (priority -400) holds fragments until reassembled
            self.stats.fragments += 1;
            return Some(Decision::Drop(DropReason::Fragment));
        }
        pc.ct = match self.ct.track(p.pm, p.frame, p.now_ns) {
            Track::Untracked => CtPkt::Untracked,
            Track::Invalid(_) => CtPkt::Invalid,
            Track::Existing { id, dir, info } => CtPkt::Entry { id, dir, info },
            Track::Related { master, dir } => CtPkt::Related { master, dir },
            Track::New(pend) => CtPkt::New(pend),
        };
        None
    }

    /// Run the base chains of `hook` for a packet, with connection tracking where netfilter
    /// does it. The caller then calls [`Stateful::finish`] when the packet leaves the host.
    pub fn hook(&mut self, hook: Hook, p: &mut Pkt, pc: &mut PacketCt) -> Decision {
        let ct_point = matches!(hook, Hook::Prerouting | Hook::Output);
        if ct_point {
            pc.ct = CtPkt::NotYet;
        }
        let n = self.eng.rs.hooks[hook as usize].len();
        let mut tracked = !ct_point;
        self.load_view(p, pc);
        for i in 0..n {
            let h: HookEntry = self.eng.rs.hooks[hook as usize][i];
            if !tracked && h.priority >= -200 {
                tracked = true;
                if let Some(d) = self.conntrack(p, pc) {
                    return d;
                }
                self.load_view(p, pc);
            }
            let ty = self.eng.rs.tables[h.table].chains[h.chain]
                .base
                .as_ref()
                .map(|b| b.ty);
            if ty == Some(ChainType::Nat) && !matches!(pc.ct, CtPkt::New(_)) {
                // nat chains see a connection's first packet only
                continue;
            }
            p.meta.notrack = false;
            p.meta.nat = None;
            let d = self.eng.process_base(h, p);
            if p.meta.nat.is_some() {
                self.stats.nat_not_applied += 1;
            }
            if p.meta.notrack && !tracked {
                pc.notrack = true;
            }
            self.store_mark(p, pc);
            if !d.is_accept() {
                return d;
            }
            if !tracked {
                self.load_view(p, pc);
            }
        }
        if !tracked {
            if let Some(d) = self.conntrack(p, pc) {
                return d;
            }
        }
        Decision::Accept
    }

    /// The packet leaves the host (forwarded after postrouting, or delivered after input):
    /// a new connection is confirmed into the table. Drop when it cannot be.
    pub fn finish(&mut self, pc: &mut PacketCt, now_ns: u64) -> Decision {
        if let CtPkt::New(pend) = pc.ct {
            match self.ct.confirm(pend, now_ns) {
                Ok(id) => {
                    self.stats.confirmed += 1;
                    pc.ct = CtPkt::Entry {
                        id,
                        dir: Dir::Original,
                        info: CtInfo::New,
                    };
                }
                Err(_) => {
                    self.stats.refused += 1;
                    return Decision::Drop(DropReason::CtRefused);
                }
            }
        }
        Decision::Accept
    }
}
