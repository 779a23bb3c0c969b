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
//! fragments, which the kernel reassembles first, take weir's virtual reassembly
//! ([`crate::frag`]): the first fragment crosses the chains, the later ones of its datagram
//! follow it (its connection, its NAT translation, no chain); a later fragment without a
//! first that passed is dropped with a counted reason.

use crate::compile::HookEntry;
use crate::eval::{CtView, Decision, DropReason, Engine, Meta, Pkt};
use crate::frag;
use crate::nat::{self, Manip, NatError, Request};
use weir_conntrack::{Config, Conntrack, CtInfo, Dir, EntryId, Pending, Track, Tuple};
use weir_lang::ir::{self, ChainType, Family, Hook};
use weir_wire::{Frag, PacketMeta, L3};

mod access;
mod ctobj;
pub mod dup;
mod fast;
mod help;
mod queue;
mod synproxy;
pub mod tproxy;

pub use dup::{DupSend, DupTo};
pub(crate) use help::finish_transport;
pub(crate) use queue::queue_of;
pub use queue::{FlowHook, QueueVerdict, Queued, QueuedConn, TICK_NS};
pub use synproxy::StackSend;

/// Engine data kept in each connection entry.
#[derive(Clone, Copy, Debug, Default)]
pub struct CtExt {
    /// Linux IPS_* NAT status bits (src-nat 16, dst-nat 32, src-nat-done 128, dst-nat-done
    /// 256), see [`nat::status`].
    pub nat_status: u16,
    /// The flowtable the connection is offloaded to (index + 1 into
    /// [`Stateful::flowtables`]; 0: not offloaded).
    pub flowtable: u8,
    /// Route cache: the output interface of each direction (caller's index + 1; 0: unknown).
    pub route: [u16; 2],
    /// The `queue` listener is done with the connection's original (bit 0) or reply (bit 1)
    /// direction: its packets pass `queue` after one bit test, the listener not called.
    pub queue_done: u8,
    /// The connection's helper (`ct helper set`: [`crate::helper::Kind`] as u8; 0: none).
    pub helper: u8,
    /// A SYN proxy opened the connection (1): its state is the table's
    /// ([`Conntrack::synproxy`]), its packets pass the proxy's hook ([`crate::synproxy`]).
    pub synproxy: u8,
    /// A `tproxy` statement gave the connection to a transparent socket: its target + 1
    /// (`tproxy::Target`, by index); its packets are delivered locally.
    pub tproxy: u8,
}

/// The flowtables whose devices include an interface (see [`Stateful::flowtable_devices`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FtDevices(pub u64);

/// What the flowtable fast path did with a packet of an offloaded connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastPath {
    /// The output interface cached for the packet's direction (caller's index).
    pub oif: u16,
    pub dir: Dir,
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
///
/// `New` carries the pending entry by value, as [`Track::New`] does (no allocation per
/// packet); the context is passed by reference through the hooks.
#[derive(Clone, Copy, Debug, Default)]
#[allow(clippy::large_enum_variant)]
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
    /// The router's own answer to a packet of a connection (a reset, an ICMP error): it carries that
    /// connection, in the other direction, as Linux's `nf_ct_attach` attaches it. Connection
    /// tracking leaves it and the connection as they are; it is `related`, and NAT
    /// translates it by the connection's bindings (`PacketCt::tuples`). `id`: None for a
    /// connection not yet confirmed.
    Attached {
        id: Option<EntryId>,
        dir: Dir,
    },
}

/// A connection's tuples and NAT status as conntrack found them for this packet (the entry
/// may end with the packet, a RST, and still be translated).
#[derive(Clone, Copy, Debug, Default)]
pub struct CtTuples {
    pub orig: Tuple,
    pub reply: Tuple,
    pub nat_status: u16,
}

/// One packet's connection-tracking context.
#[derive(Clone, Copy, Debug, Default)]
pub struct PacketCt {
    pub ct: CtPkt,
    pub notrack: bool,
    /// The address of the packet's family on the output interface (masquerade), set by the
    /// caller once the route is known (before `postrouting`).
    pub oif_addr: Option<u128>,
    /// The address of the packet's family on the input interface (redirect at `prerouting`).
    pub iif_addr: Option<u128>,
    /// Filled by the stateful layer for packets of existing connections and related ICMP
    /// errors.
    pub tuples: Option<CtTuples>,
    /// The packet's part in virtual reassembly.
    pub frag: FragPkt,
    /// `ct expectation set` ran for the packet's new connection: the expectation made when
    /// it is confirmed.
    pub expect: Option<ir::CtExpectation>,
    /// The SYN proxy sends the packet (its SYN to the server): the connection it makes is
    /// the proxy's (Linux's synproxy conntrack template).
    pub synproxy: bool,
    /// A `tproxy` statement gave the packet to a transparent socket: the target (see
    /// [`Stateful::tproxy_of`]).
    pub tproxy: Option<u8>,
    /// The conntrack zone a chain before conntrack gave the packet (`ct zone set`).
    pub zone: Option<weir_conntrack::Zone>,
    /// The packet's trace flag (`meta nftrace`), carried from hook to hook.
    pub nftrace: bool,
}

/// A fragment's part in virtual reassembly ([`crate::frag`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FragPkt {
    /// Not a fragment, or not tracked.
    #[default]
    No,
    /// A first fragment: when it leaves, its datagram's later fragments may follow it.
    First(frag::Key),
    /// A later fragment following its first: no chain runs, NAT translates it.
    Follow,
}

/// A weir-private bit of [`CtExt::nat_status`]: source NAT changed the port because the
/// original was taken (Linux chooses the new one at random).
pub const NAT_PORT_CHOSEN: u16 = 0x8000;

/// What `ct` expressions read of an entry (`status`: the IPS bits besides the NAT ones).
fn ct_view(
    e: &weir_conntrack::Entry<CtExt>,
    o: &weir_conntrack::Tuple,
    r: &weir_conntrack::Tuple,
    dir: Dir,
    status: u32,
    now_ns: u64,
) -> CtView {
    CtView {
        dir: dir as u8,
        status: status | (e.ext.nat_status & !NAT_PORT_CHOSEN) as u32,
        expiration_ms: e.timeout_remaining(now_ns).as_millis() as u32,
        l3proto: if o.v6 { 10 } else { 2 },
        protocol: o.proto,
        orig_src: o.src,
        orig_dst: o.dst,
        orig_sport: o.sport,
        orig_dport: o.dport,
        reply_src: r.src,
        reply_dst: r.dst,
        reply_sport: r.sport,
        reply_dport: r.dport,
        packets: [e.packets(Dir::Original), e.packets(Dir::Reply)],
        bytes: [e.bytes(Dir::Original), e.bytes(Dir::Reply)],
        helper: e.ext.helper,
        zone: e.zone(),
    }
}

/// Counters of the stateful layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatefulStats {
    /// Fragments dropped: later ones whose datagram's first did not pass (it came after
    /// them, was dropped, or expired), and first ones without a whole transport header.
    pub fragments: u64,
    /// Later fragments that followed their datagram's first.
    pub fragments_followed: u64,
    /// New connections whose entry could not be inserted (table full, clash): dropped.
    pub refused: u64,
    /// Connections confirmed.
    pub confirmed: u64,
    /// Packets whose NAT rewrite was due but not applied: they went through
    /// [`Stateful::hook`], which cannot write the frame (use [`Stateful::hook_mut`]).
    pub nat_not_applied: u64,
    /// NAT bindings made (a statement's translation chosen for a new connection).
    pub nat_bound: u64,
    /// Packets rewritten by NAT (each manip counts once).
    pub nat_rewritten: u64,
    /// New connections dropped because NAT found no free port / id in the range
    /// (`DropReason::CtRefused`).
    pub nat_no_port: u64,
    /// New connections dropped because masquerade / redirect had no interface address of the
    /// packet's family, or the statement's address was of the other family.
    pub nat_no_address: u64,
    /// Source NAT bindings that had to change the port (the original was taken): Linux picks
    /// the new port at random, weir by a hash of the tuple.
    pub nat_port_changed: u64,
    /// Packets rewritten for such a connection (their port is weir's choice).
    pub nat_port_changed_packets: u64,
    /// Source NAT bindings whose reply could not be steered to this worker ([`Stateful::steer`]:
    /// a single-port range, a protocol without ports): the replies reach another worker.
    pub nat_steer_missed: u64,
    /// Connections put in a flowtable (`flow add`).
    pub offloaded: u64,
    /// `flow add` on a connection a `queue` listener still acts on: left on the slow path.
    pub offload_deferred: u64,
    /// Packets forwarded by the flowtable fast path.
    pub fast_path: u64,
    /// Offloaded connections sent back to the slow path (FIN or RST).
    pub offload_teardowns: u64,
    /// Header fields written by rules (`ip daddr set ...`: stateless NAT).
    pub header_writes: u64,
    /// Packets a `queue` statement handed over.
    pub queued: u64,
    /// Of those, dropped because nobody listened on the queue (without `bypass`).
    pub queue_unheard: u64,
    /// Of those, changed in place by the listener.
    pub queue_modified: u64,
    /// Of `queued`, in a direction the listener is done with (accepted on the entry's bit).
    pub queue_done: u64,
    /// Connections given a helper (`ct helper set`).
    pub helper_assigned: u64,
    /// Expectations helpers recorded (an FTP data connection, TFTP transfer, SIP media).
    pub helper_expectations: u64,
    /// Expectations refused (the table of expectations full).
    pub helper_expect_refused: u64,
    /// New connections that met an expectation (`ct state related`).
    pub helper_related: u64,
    /// Packets whose payload a helper rewrote (NAT).
    pub helper_rewritten: u64,
    /// Of those, sent as a rewritten copy of another length ([`DropReason::Replaced`]).
    pub helper_replaced: u64,
    /// Packets a helper should have rewritten and did not (a fragment, a packet delivered
    /// locally that would change length, edits out of bounds).
    pub helper_unmangled: u64,
    /// Packets whose TCP sequence numbers were shifted after a helper's rewrite.
    pub seq_adjusted: u64,
    /// New connections given a `ct timeout` policy.
    pub ct_timeout_set: u64,
    /// The SYN proxy (`/proc/net/stat/synproxy`): SYNs it answered with a cookie, ACKs
    /// whose cookie was good / not, good ones that came again while the server had not
    /// answered, connections opened again on the same entry.
    pub synproxy_syn: u64,
    pub synproxy_cookie_valid: u64,
    pub synproxy_cookie_invalid: u64,
    pub synproxy_cookie_retrans: u64,
    pub synproxy_reopened: u64,
    /// Segments of the SYN proxy lost because the caller had not taken the ones before
    /// ([`Stateful::take_stack_out`]).
    pub synproxy_unsent: u64,
    /// Copies `dup` made ([`Stateful::take_dup_out`]), and the ones it could not make (no
    /// whole IP header, more than `dup::MAX_DUPS` in a chain, the caller had not taken the
    /// ones before).
    pub dup_copies: u64,
    pub dup_unsent: u64,
}

/// The engine plus a connection table.
pub struct Stateful {
    eng: Engine,
    ct: Conntrack<CtExt>,
    /// Connection tracking runs for IPv4 / IPv6 packets.
    track_v4: bool,
    track_v6: bool,
    stats: StatefulStats,
    /// State of the generator of `random` / `fully-random` port offsets.
    nat_rng: u64,
    /// Several workers share the traffic, each with its own table: `(workers, this worker)`.
    /// A source NAT binding then picks a port whose reply tuple steers to this worker
    /// ([`weir_conntrack::steer::worker`]), as it avoids a port in use.
    steer: Option<(u32, u32)>,
    /// The ruleset has nat chains for IPv4 / IPv6: netfilter's NAT hooks are registered, and
    /// every connection gets a binding (a null one when no rule binds it).
    nat_v4: bool,
    nat_v6: bool,
    /// The ruleset's flowtables: (table, flowtable in the table, devices).
    flowtables: Vec<(usize, usize, Vec<String>)>,
    /// The wall clock less the `now_ns` clock (`meta time`, `day`, `hour`): 0 when `now_ns`
    /// is wall-clock time already (a capture's).
    wall_offset_ns: i64,
    /// The CPU the hooks run on (`meta cpu`), as the caller last said.
    cpu: u32,
    /// A hook ran with the packet's trace flag set since [`Stateful::take_nftrace`] last
    /// asked (`meta nftrace set 1`: `nft monitor trace` shows the packet).
    nftrace_seen: bool,
    /// The entry the current packet ended (a RST before any reply): gone from the table, but
    /// the packet still carries it through the chains, as the kernel's skb keeps its ct.
    dying: Option<weir_conntrack::Killed<CtExt>>,
    /// Virtual reassembly: the datagrams whose first fragment passed.
    frags: frag::Table,
    /// Which ruleset this is (unique among the engines of a process, new at each reload).
    ruleset_id: u64,
    /// Who takes the packets of `queue` statements ([`FlowHook`]).
    flow_hook: Option<Box<dyn FlowHook>>,
    /// What it asked to send.
    queue_out: Vec<Vec<u8>>,
    /// What the SYN proxy sends, as the host's own packets ([`Stateful::take_stack_out`]).
    stack_out: Vec<StackSend>,
    /// The copies `dup` made ([`Stateful::take_dup_out`]).
    dup_out: Vec<DupSend>,
    /// A copy is crossing the hooks: `dup` makes none ([`Stateful::set_duplicating`]).
    duplicating: bool,
    /// The timeout policy number (1-based, in the connection table) of each table's
    /// `ct timeout` objects.
    timeout_ids: Vec<Vec<u8>>,
    /// When its timers last ran, and whether it had any then ([`Stateful::tick`]).
    ticked: Option<u64>,
    ticking: bool,
}

/// A saved state of a [`Stateful`] ([`Stateful::save`]).
#[derive(Clone)]
pub struct Saved {
    ct: Conntrack<CtExt>,
    stats: StatefulStats,
    frags: frag::Table,
    st: crate::eval::State,
    nat_rng: u64,
}

/// A new ruleset's id ([`Stateful::ruleset_id`]).
fn next_ruleset_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Priority of netfilter's NAT hooks: destination NAT (prerouting, output) at -100, source
/// NAT (postrouting, input) at 100.
fn nat_priority(m: Manip) -> i32 {
    match m {
        Manip::Dst => -100,
        Manip::Src => 100,
    }
}

/// The frame of a packet: read-only ([`Stateful::hook`]) or writable ([`Stateful::hook_mut`]).
enum Buf<'a> {
    Ro(&'a [u8]),
    Rw(&'a mut [u8]),
}

impl Buf<'_> {
    fn get(&self) -> &[u8] {
        match self {
            Buf::Ro(f) => f,
            Buf::Rw(f) => f,
        }
    }
}

/// Whether a table's rules need connection tracking.
fn table_needs_ct(t: &ir::Table) -> bool {
    t.chains.iter().any(|c| {
        c.base.as_ref().is_some_and(|b| b.ty == ChainType::Nat)
            || c.rules.iter().any(|r| r.exprs.iter().any(expr_needs_ct))
    })
}

fn key_needs_ct(k: &[ir::KeyPart]) -> bool {
    k.iter().any(|p| match &p.src {
        ir::Source::Field(f) => f.is_conntrack(),
        ir::Source::Jhash { key, .. } => key_needs_ct(key),
        ir::Source::Binop { a, b, .. } => {
            key_needs_ct(std::slice::from_ref(&**a)) || key_needs_ct(std::slice::from_ref(&**b))
        }
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
        // (`queue`: the listener keeps its state per connection)
        ir::Expr::CtCount { .. }
        | ir::Expr::Nat(_)
        | ir::Expr::FlowAdd(_)
        | ir::Expr::Queue(_)
        | ir::Expr::QueueTo { .. }
        | ir::Expr::Synproxy(_)
        // (the connection keeps its transparent socket: `tproxy`)
        | ir::Expr::Tproxy(_)
        | ir::Expr::CtHelper { .. }
        | ir::Expr::CtTimeout { .. }
        | ir::Expr::CtExpect(_) => true,
        ir::Expr::ObjStmt { stmts, .. } => stmts.iter().any(expr_needs_ct),
        _ => false,
    }
}

impl Stateful {
    /// Swap in a new ruleset without losing state (hot reload): connection tracking entries
    /// stay (with their NAT bindings and cached routes; offloaded connections return to the
    /// slow path until a rule offloads them again), and named objects (counters, quotas,
    /// limits: [`crate::objects::carry`]) and the elements sets
    /// gained from the packet path carry over to the table and set of the same family and
    /// name. Rule counters start again (rules may have moved). The old engine is returned:
    /// a caller whose packets wait drops it elsewhere (a large ruleset takes milliseconds to
    /// free).
    pub fn reload(&mut self, eng: Engine) -> Engine {
        let cfg = *self.ct.config();
        let mut fresh = Stateful::new(
            eng,
            Config {
                max_entries: 1,
                ..cfg
            },
        );
        let old = &self.eng;
        for (ti, t) in fresh.eng.rs.tables.iter().enumerate() {
            let Some(oi) = old
                .rs
                .tables
                .iter()
                .position(|o| o.family == t.family && o.name == t.name)
            else {
                continue;
            };
            let ot = &old.rs.tables[oi];
            for (si, name) in t.set_names.iter().enumerate() {
                let Some(os) = ot.set_names.iter().position(|x| x == name) else {
                    continue;
                };
                let Some(ds) = old.st.dynset(oi, os) else {
                    continue;
                };
                let sets = &mut fresh.eng.st.dynsets;
                if sets.len() <= ti {
                    sets.resize(ti + 1, Vec::new());
                }
                if sets[ti].len() <= si {
                    sets[ti].resize(si + 1, Default::default());
                }
                sets[ti][si] = ds.clone();
            }
        }
        // the named objects: counters, quotas, limits
        crate::objects::carry(&mut fresh.eng, old);
        if fresh.eng.st.fib.is_none() {
            fresh.eng.st.fib = self.eng.st.fib.take();
        }
        let old = std::mem::replace(&mut self.eng, fresh.eng);
        self.ruleset_id = fresh.ruleset_id;
        self.track_v4 = fresh.track_v4;
        self.track_v6 = fresh.track_v6;
        self.nat_v4 = fresh.nat_v4;
        self.nat_v6 = fresh.nat_v6;
        self.flowtables = fresh.flowtables;
        // the new ruleset's timeout policies (entries keep their numbers)
        let (policies, timeout_ids) = ctobj::policies(&self.eng, &cfg.timeouts);
        self.ct.set_timeout_policies(policies);
        self.timeout_ids = timeout_ids;
        let ids: Vec<EntryId> = self
            .ct
            .iter()
            .filter(|(_, e)| e.ext.flowtable != 0)
            .map(|(id, _)| id)
            .collect();
        for id in ids {
            if let Some(e) = self.ct.get_mut(id) {
                e.ext.flowtable = 0;
                e.forget_windows();
            }
        }
        old
    }

    pub fn new(eng: Engine, cfg: Config) -> Stateful {
        let (mut v4, mut v6) = (false, false);
        let (mut n4, mut n6) = (false, false);
        for t in &eng.rs.tables {
            let has_nat =
                t.ir.chains
                    .iter()
                    .any(|c| c.base.as_ref().is_some_and(|b| b.ty == ChainType::Nat));
            if has_nat {
                n4 |= matches!(t.family, Family::Ip | Family::Inet);
                n6 |= matches!(t.family, Family::Ip6 | Family::Inet);
            }
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
        let mut flowtables = Vec::new();
        for (ti, t) in eng.rs.tables.iter().enumerate() {
            for (fi, f) in t.ir.flowtables.iter().enumerate() {
                flowtables.push((ti, fi, f.devices.clone()));
            }
        }
        let (policies, timeout_ids) = ctobj::policies(&eng, &cfg.timeouts);
        let mut ct = Conntrack::new(cfg);
        ct.set_timeout_policies(policies);
        Stateful {
            eng,
            ct,
            timeout_ids,
            track_v4: v4,
            track_v6: v6,
            stats: StatefulStats::default(),
            nat_rng: 0x2545_f491_4f6c_dd1d,
            steer: None,
            nat_v4: n4,
            nat_v6: n6,
            flowtables,
            dying: None,
            wall_offset_ns: 0,
            cpu: 0,
            nftrace_seen: false,
            frags: frag::Table::default(),
            ruleset_id: next_ruleset_id(),
            flow_hook: None,
            queue_out: Vec::new(),
            stack_out: Vec::new(),
            dup_out: Vec::new(),
            duplicating: false,
            ticked: None,
            ticking: false,
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
    fn load_view(&self, m: &mut Meta, l3: L3, pc: &PacketCt) {
        m.has_ct = false;
        m.ct_unconfirmed = false;
        let (id, bits) = match pc.ct {
            CtPkt::NotYet => {
                // before conntrack (raw priority): no entry, and not marked untracked
                m.ct_state = if pc.notrack {
                    state::UNTRACKED
                } else if self.tracks(l3) {
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
                m.ct_unconfirmed = true;
                m.ct_labels = pend.labels;
                m.ct_state = if pend.master.is_some() {
                    state::RELATED
                } else {
                    state::NEW
                };
                m.has_ct = true;
                m.ct_mark = pend.entry.mark;
                return;
            }
            CtPkt::Entry { id, info, .. } => (
                id,
                match info {
                    CtInfo::New => state::NEW,
                    CtInfo::Established => state::ESTABLISHED,
                    CtInfo::Related => state::RELATED,
                },
            ),
            CtPkt::Related { master, .. } => (master, state::RELATED),
            CtPkt::Attached { id, .. } => {
                m.ct_state = state::RELATED;
                match id {
                    Some(id) => (id, state::RELATED),
                    None => return,
                }
            }
        };
        m.ct_state = bits;

        let e = self
            .ct
            .get(id)
            .or_else(|| self.dying.as_ref().filter(|k| k.id == id).map(|k| &k.entry));
        if let Some(e) = e {
            m.has_ct = true;
            m.ct_mark = e.mark;
            m.ct_labels = self.ct.labels(id);
        }
    }

    /// A connection the current packet belongs to, with its original and reply tuples: in
    /// the table, or ended by this packet.
    fn entry_of(
        &self,
        id: EntryId,
    ) -> Option<(
        &weir_conntrack::Entry<CtExt>,
        weir_conntrack::Tuple,
        weir_conntrack::Tuple,
    )> {
        match (
            self.ct.get(id),
            self.ct.tuple(id, Dir::Original),
            self.ct.tuple(id, Dir::Reply),
        ) {
            (Some(e), Some(o), Some(r)) => Some((e, o, r)),
            _ => self
                .dying
                .as_ref()
                .filter(|k| k.id == id)
                .map(|k| (&k.entry, k.orig, k.reply)),
        }
    }

    /// Fill `m.ct` (the `ct` fields other than state and mark) for a chain about to run: the
    /// tuples, status, counters and expiration of the packet's connection. Done per chain,
    /// not per hook, since most hooks run no chain.
    fn load_ct_view(&self, m: &mut Meta, now_ns: u64, pc: &PacketCt) {
        if !m.has_ct {
            return;
        }
        let (id, dir) = match pc.ct {
            CtPkt::New(pend) => {
                let e = &pend.entry;
                let expected = if pend.master.is_some() { 1 } else { 0 };
                m.ct = ct_view(
                    e,
                    pend.orig(),
                    pend.reply(),
                    Dir::Original,
                    expected,
                    now_ns,
                );
                return;
            }
            CtPkt::Entry { id, dir, .. } | CtPkt::Related { master: id, dir } => (id, dir),
            _ => return,
        };
        let Some((e, o, r)) = self.entry_of(id) else {
            return;
        };
        let mut status = 8; // confirmed
        if e.expected() {
            status |= 1;
        }
        if e.seen_reply() {
            status |= 2;
        }
        if e.assured() {
            status |= 4;
        }
        m.ct = ct_view(e, &o, &r, dir, status, now_ns);
    }

    /// Write what the chain changed (`ct mark set`) back to the entry.
    fn store_mark(&mut self, m: &Meta, pc: &mut PacketCt) {
        if !m.has_ct {
            return;
        }
        let mark = m.ct_mark;
        match &mut pc.ct {
            CtPkt::New(pend) => {
                pend.entry.mark = mark;
                pend.labels = m.ct_labels;
            }
            CtPkt::Entry { id, .. } | CtPkt::Related { master: id, .. } => {
                if let Some(e) = self.ct.get_mut(*id) {
                    e.mark = mark;
                }
                if m.ct_labels != 0 {
                    self.ct.set_labels(*id, m.ct_labels);
                }
            }
            _ => {}
        }
    }

    /// Connection tracking alone, for a packet that did not cross `prerouting` or `output`
    /// here (replaying one hook): the state later hooks see.
    pub fn track_only(&mut self, p: &mut Pkt, pc: &mut PacketCt) -> Decision {
        pc.ct = CtPkt::NotYet;
        self.conntrack(p.frame, p.pm, p.now_ns, pc)
            .unwrap_or(Decision::Accept)
    }

    /// Connection tracking proper (netfilter's `nf_conntrack_in` at priority -200).
    fn conntrack(
        &mut self,
        frame: &[u8],
        pm: &PacketMeta,
        now_ns: u64,
        pc: &mut PacketCt,
    ) -> Option<Decision> {
        if let CtPkt::Attached { .. } = pc.ct {
            return None;
        }
        pc.tuples = None;
        self.dying = None;
        if pc.notrack || !self.tracks(pm.l3) {
            pc.ct = CtPkt::Untracked;
            return None;
        }
        if pm.frag == Frag::Later {
            // (a later fragment that did not cross the ct point of `run_hook`)
            self.stats.fragments += 1;
            return Some(Decision::Drop(DropReason::Fragment));
        }
        let zone = pc.zone.unwrap_or_default();
        pc.ct = match self.ct.track_in(pm, frame, now_ns, zone) {
            Track::Untracked => CtPkt::Untracked,
            Track::Invalid(_) => CtPkt::Invalid,
            Track::Existing { id, dir, info } => CtPkt::Entry { id, dir, info },
            Track::Related { master, dir } => CtPkt::Related { master, dir },
            Track::New(mut pend) => {
                if pend.master.is_some() {
                    self.follow_master(&mut pend);
                }
                if pc.synproxy {
                    pend.entry.ext.synproxy = 1;
                }
                CtPkt::New(pend)
            }
        };
        if let CtPkt::Entry { id, .. } | CtPkt::Related { master: id, .. } = pc.ct {
            if let (Some(e), Some(orig), Some(reply)) = (
                self.ct.get(id),
                self.ct.tuple(id, Dir::Original),
                self.ct.tuple(id, Dir::Reply),
            ) {
                pc.tuples = Some(CtTuples {
                    orig,
                    reply,
                    nat_status: e.ext.nat_status,
                });
            } else if let Some(k) = self.ct.take_killed().filter(|k| k.id == id) {
                // ended by this packet, which still belongs to it (and to its NAT binding)
                pc.tuples = Some(CtTuples {
                    orig: k.orig,
                    reply: k.reply,
                    nat_status: k.entry.ext.nat_status,
                });
                self.dying = Some(k);
            }
        }
        None
    }

    fn chain_type(&self, h: HookEntry) -> Option<ChainType> {
        self.eng.rs.tables[h.table].chains[h.chain]
            .base
            .as_ref()
            .map(|b| b.ty)
    }

    /// Run the base chains of `hook` for a packet, with connection tracking where netfilter
    /// does it. The caller then calls [`Stateful::finish`] when the packet leaves the host.
    ///
    /// The frame is not written: NAT bindings are made (so replies are recognised) but the
    /// packets are not translated (counted in `stats.nat_not_applied`); header assignments
    /// (`ip daddr set`) are not performed. [`Stateful::hook_mut`] does both.
    pub fn hook(&mut self, hook: Hook, p: &mut Pkt, pc: &mut PacketCt) -> Decision {
        let mut pm = *p.pm;
        p.meta.nftrace |= pc.nftrace;
        let d = self.run_hook(hook, Buf::Ro(p.frame), &mut pm, p.meta, p.now_ns, pc);
        pc.nftrace = p.meta.nftrace;
        self.nftrace_seen |= p.meta.nftrace;
        d
    }

    /// Whether a hook ran with the packet's trace flag set (`meta nftrace set 1`) since the
    /// last call.
    pub fn take_nftrace(&mut self) -> bool {
        std::mem::take(&mut self.nftrace_seen)
    }

    /// Set the wall clock's offset from the `now_ns` clock the hooks are given (a daemon
    /// on CLOCK_MONOTONIC: CLOCK_REALTIME less CLOCK_MONOTONIC, set again as the clock
    /// moves); `meta time`, `day` and `hour` read `now_ns` plus it.
    pub fn set_wall_offset(&mut self, offset_ns: i64) {
        self.wall_offset_ns = offset_ns;
    }

    /// The CPU the hooks run on from now (`meta cpu`; a worker sets it each batch).
    pub fn set_cpu(&mut self, cpu: u32) {
        self.cpu = cpu;
    }

    /// The routing table `fib` expressions ask ([`crate::fib`]): the router's routes and
    /// addresses inline, the kernel's in NFQUEUE mode. None (the default): every lookup
    /// finds no route (`oif` 0, `check` missing, `type` unspec). It stays across
    /// [`Stateful::reload`].
    pub fn set_fib(&mut self, fib: Option<std::sync::Arc<dyn crate::fib::Fib>>) {
        self.eng.st.fib = fib.map(crate::fib::FibTable);
    }

    /// The routing table `fib` asks, when one was given.
    pub fn fib(&self) -> Option<&std::sync::Arc<dyn crate::fib::Fib>> {
        self.eng.st.fib.as_ref().map(|f| &f.0)
    }

    /// [`Stateful::hook`] on a writable frame: NAT rewrites the packet (at priority -100 for
    /// destination NAT at prerouting / output, +100 for source NAT at postrouting / input,
    /// where netfilter's NAT hooks sit) and `pm` is parsed again after each rewrite, so the
    /// chains after that point see the translated header, as in Linux. Header assignments
    /// (`ip saddr set`, `tcp dport set`...: stateless NAT) are written too, with checksum
    /// updates. The frame's length never changes.
    pub fn hook_mut(
        &mut self,
        hook: Hook,
        frame: &mut [u8],
        pm: &mut PacketMeta,
        meta: &mut Meta,
        now_ns: u64,
        pc: &mut PacketCt,
    ) -> Decision {
        meta.nftrace |= pc.nftrace;
        let d = self.run_hook(hook, Buf::Rw(frame), pm, meta, now_ns, pc);
        pc.nftrace = meta.nftrace;
        self.nftrace_seen |= meta.nftrace;
        d
    }

    /// One base chain.
    fn run_chain(
        &mut self,
        h: HookEntry,
        buf: &Buf,
        pm: &PacketMeta,
        meta: &mut Meta,
        now_ns: u64,
        pc: &PacketCt,
    ) -> Decision {
        self.load_ct_view(meta, now_ns, pc);
        meta.iif_addr = pc.iif_addr;
        if self.eng.rs.reads_socket {
            meta.sock = self.socket_of(h.hook, pm, meta);
        }
        let mut p = Pkt {
            frame: buf.get(),
            pm,
            meta,
            now_ns,
            conns: Some(&self.ct),
        };
        self.eng.process_base(h, &mut p)
    }

    /// Write the header fields the chain's statements set (stateless NAT) into the frame,
    /// with checksum updates, and parse it again.
    fn apply_writes(&mut self, buf: &mut Buf, pm: &mut PacketMeta, meta: &mut Meta) {
        let n = meta.nwrites as usize;
        if n == 0 {
            return;
        }
        match buf {
            Buf::Rw(frame) => {
                for (f, v) in meta.writes[..n].iter().flatten() {
                    if nat::set_header_field(frame, pm, *f, *v) {
                        self.stats.header_writes += 1;
                        *pm = PacketMeta::parse(frame, pm.link);
                    }
                }
            }
            Buf::Ro(_) => self.stats.nat_not_applied += n as u64,
        }
        meta.writes = Default::default();
        meta.nwrites = 0;
    }

    /// Virtual reassembly at a ct point (where the kernel defragments, priority -400): a
    /// first fragment is marked to be kept when it leaves; a later one follows its first
    /// (Some(Accept)) or is dropped.
    fn defrag(&mut self, pm: &PacketMeta, now_ns: u64, pc: &mut PacketCt) -> Option<Decision> {
        pc.frag = FragPkt::No;
        if pm.frag == Frag::None || !self.tracks(pm.l3) || !pm.l3_ok() {
            return None;
        }
        let key = frag::Key::of(pm);
        if pm.frag == Frag::First {
            if pm.malformed.is_some() {
                // a first fragment without a whole transport header (RFC 1858's tiny
                // fragment): the kernel would wait for the rest; weir cannot judge it alone
                self.stats.fragments += 1;
                return Some(Decision::Drop(DropReason::Fragment));
            }
            pc.frag = FragPkt::First(key);
            return None;
        }
        let followed = match self.frags.get(&key, now_ns) {
            Some(frag::Follow::Untracked) => {
                pc.ct = CtPkt::Untracked;
                true
            }
            Some(frag::Follow::Entry {
                id,
                dir,
                info,
                tuple,
            }) if self.ct.tuple(id, dir) == Some(tuple) => {
                let payload = pm.l3_end().saturating_sub(pm.l4_off as usize) as u32;
                match (
                    self.ct.tuple(id, Dir::Original),
                    self.ct.tuple(id, Dir::Reply),
                    self.ct.get_mut(id),
                ) {
                    (Some(orig), Some(reply), Some(e)) => {
                        e.extend_sent(dir, payload);
                        pc.ct = CtPkt::Entry { id, dir, info };
                        pc.tuples = Some(CtTuples {
                            orig,
                            reply,
                            nat_status: e.ext.nat_status,
                        });
                        true
                    }
                    _ => false,
                }
            }
            _ => false,
        };
        if !followed {
            // the kernel would hold it until its datagram is whole
            self.stats.fragments += 1;
            return Some(Decision::Drop(DropReason::Fragment));
        }
        self.stats.fragments_followed += 1;
        pc.frag = FragPkt::Follow;
        Some(Decision::Accept)
    }

    fn run_hook(
        &mut self,
        hook: Hook,
        mut buf: Buf,
        pm: &mut PacketMeta,
        meta: &mut Meta,
        now_ns: u64,
        pc: &mut PacketCt,
    ) -> Decision {
        if self.wall_offset_ns != 0 {
            meta.wall_ns = (now_ns as i64).saturating_add(self.wall_offset_ns).max(1) as u64;
        }
        meta.cpu = self.cpu;
        let ct_point = matches!(hook, Hook::Prerouting | Hook::Output);
        if ct_point && !matches!(pc.ct, CtPkt::Attached { .. }) {
            pc.ct = CtPkt::NotYet;
            pc.tuples = None;
            if let Some(Decision::Drop(r)) = self.defrag(pm, now_ns, pc) {
                return Decision::Drop(r);
            }
        }
        // netfilter registers its NAT hooks only while the family has nat chains
        let nat_hooks = match pm.l3 {
            L3::Ipv4 => self.nat_v4,
            L3::Ipv6 => self.nat_v6,
            _ => false,
        };
        let manip = Manip::of_hook(hook).filter(|_| nat_hooks);
        if pc.frag == FragPkt::Follow {
            // a later fragment: its first took the chains' decision for the datagram; it
            // gets the same translation (addresses only)
            self.load_view(meta, pm.l3, pc);
            if let Some(m) = manip {
                if let Some(d) = self.nat_point(hook, m, &mut buf, pm, meta, now_ns, pc) {
                    return d;
                }
            }
            return Decision::Accept;
        }
        let n = self.eng.rs.hooks[hook as usize].len();
        if n == 0 && !ct_point && manip.is_none() {
            // nothing registered at this hook
            self.load_view(meta, pm.l3, pc);
            return Decision::Accept;
        }
        let mut tracked = !ct_point;
        let mut nat_done = manip.is_none();
        self.load_view(meta, pm.l3, pc);
        for i in 0..n {
            let h: HookEntry = self.eng.rs.hooks[hook as usize][i];
            if !tracked && h.priority >= -200 {
                tracked = true;
                if let Some(d) = self.conntrack(buf.get(), pm, now_ns, pc) {
                    return d;
                }
                self.load_view(meta, pm.l3, pc);
            }
            if let Some(m) = manip {
                // the NAT hook runs where the kernel registered it: at the first nat chain
                // of the hook (equal priorities: the newest registration first, as the
                // hook entries are ordered), or at its priority when the hook has none
                let here = h.priority > nat_priority(m)
                    || (self.chain_type(h) == Some(ChainType::Nat)
                        && h.priority == nat_priority(m));
                if !nat_done && tracked && here {
                    nat_done = true;
                    if let Some(d) = self.nat_point(hook, m, &mut buf, pm, meta, now_ns, pc) {
                        return d;
                    }
                }
            }
            if self.chain_type(h) == Some(ChainType::Nat) {
                // nat chains run inside the NAT hook (nat_point), for a connection's first
                // packet only
                continue;
            }
            meta.notrack = false;
            // the zone an earlier chain gave (its template stays on the packet)
            meta.ct_zone = if tracked { None } else { pc.zone };
            meta.nat = None;
            meta.flow_add = None;
            meta.fwd = None;
            meta.queue = None;
            meta.synproxy = None;
            let d = self.run_chain(h, &buf, pm, meta, now_ns, pc);
            self.tproxy_keep(meta, pc);
            self.dup_take(hook, &buf, pm, meta);
            self.apply_writes(&mut buf, pm, meta);
            if let Some(info) = meta.synproxy.take() {
                // NF_STOLEN: nothing after this runs for the packet
                return self.synproxy_stmt(&info, buf.get(), pm, pc, now_ns);
            }
            if let Some(q) = meta.queue.take() {
                // NF_QUEUE: the listener now; accepted, the packet goes on with the next
                // base chain (as the kernel's reinjection)
                let link = pm.link;
                let frame = match &mut buf {
                    Buf::Rw(f) => Some(&mut **f),
                    Buf::Ro(_) => None,
                };
                match self.queued(q, hook, frame, pm, pc, now_ns) {
                    Some(Decision::Accept) => {}
                    Some(d) => return d,
                    None => *pm = PacketMeta::parse(buf.get(), link),
                }
            }
            if let Some(ft) = meta.flow_add.take() {
                self.flow_add(ft, pm, pc);
            }
            self.ct_objects(meta, pc, now_ns);
            if meta.helper != 0 {
                // nft_ct_helper_obj_eval: a connection not confirmed yet, without a helper
                if let CtPkt::New(pend) = &mut pc.ct {
                    if pend.entry.ext.helper == 0 {
                        pend.entry.ext.helper = meta.helper;
                        self.stats.helper_assigned += 1;
                    }
                }
                meta.helper = 0;
            }
            if meta.notrack && !tracked {
                pc.notrack = true;
            }
            if let Some(z) = meta.ct_zone.take() {
                if !tracked && pc.zone.is_none() {
                    // (a template on an untracked packet: tracked after all)
                    pc.zone = Some(z);
                    pc.notrack = false;
                }
            }
            self.store_mark(meta, pc);
            if !d.is_accept() {
                return d;
            }
            if !tracked {
                self.load_view(meta, pm.l3, pc);
            }
        }
        if !tracked {
            if let Some(d) = self.conntrack(buf.get(), pm, now_ns, pc) {
                return d;
            }
            self.load_view(meta, pm.l3, pc);
        }
        if let (Some(m), false) = (manip, nat_done) {
            if let Some(d) = self.nat_point(hook, m, &mut buf, pm, meta, now_ns, pc) {
                return d;
            }
        }
        Decision::Accept
    }

    /// Netfilter's NAT hook (`nf_nat_inet_fn`): for a new connection whose `m` half is not
    /// bound yet, run the hook's nat chains in priority order until one binds (or bind to
    /// nothing: `nf_nat_alloc_null_binding`); then translate the packet.
    #[allow(clippy::too_many_arguments)]
    fn nat_point(
        &mut self,
        hook: Hook,
        m: Manip,
        buf: &mut Buf,
        pm: &mut PacketMeta,
        meta: &mut Meta,
        now_ns: u64,
        pc: &mut PacketCt,
    ) -> Option<Decision> {
        if let CtPkt::New(pend) = pc.ct {
            if pend.entry.ext.nat_status & m.done_bit() == 0 {
                let v6 = pend.orig().v6;
                let n = self.eng.rs.hooks[hook as usize].len();
                let has_nat = if v6 { self.nat_v6 } else { self.nat_v4 };
                for i in 0..n {
                    let h: HookEntry = self.eng.rs.hooks[hook as usize][i];
                    if self.chain_type(h) != Some(ChainType::Nat) {
                        continue;
                    }
                    let fam_ok = match h.family {
                        Family::Ip => !v6,
                        Family::Ip6 => v6,
                        Family::Inet => true,
                        _ => false,
                    };
                    if !fam_ok {
                        continue;
                    }
                    meta.notrack = false;
                    meta.nat = None;
                    let d = self.run_chain(h, buf, pm, meta, now_ns, pc);
                    self.dup_take(hook, buf, pm, meta);
                    self.apply_writes(buf, pm, meta);
                    self.store_mark(meta, pc);
                    if !d.is_accept() {
                        return Some(d);
                    }
                    let Some(act) = meta.nat.take() else {
                        continue;
                    };
                    if Manip::of_kind(act.kind) != m {
                        continue;
                    }
                    let req = Request::from_action(&act, v6, hook, pc.oif_addr, pc.iif_addr);
                    if let Err(e) = req.and_then(|r| self.bind(m, &r, pc, true)) {
                        match e {
                            NatError::NoPort => self.stats.nat_no_port += 1,
                            _ => self.stats.nat_no_address += 1,
                        }
                        return Some(Decision::Drop(DropReason::CtRefused));
                    }
                    break;
                }
                let bound =
                    matches!(pc.ct, CtPkt::New(p) if p.entry.ext.nat_status & m.done_bit() != 0);
                if has_nat && !bound {
                    // nf_nat_alloc_null_binding: the same address, a unique tuple (a source
                    // port is changed when the reply tuple is taken)
                    let null = Request {
                        manip: m,
                        addr: None,
                        port: None,
                        random: false,
                        persistent: false,
                        netmap: false,
                    };
                    if self.bind(m, &null, pc, false).is_err() {
                        self.stats.nat_no_port += 1;
                        return Some(Decision::Drop(DropReason::CtRefused));
                    }
                }
                self.load_view(meta, pm.l3, pc);
            }
        }
        // the translation of this packet
        let (t, reply, related) = match pc.ct {
            CtPkt::New(pend) => (
                CtTuples {
                    orig: *pend.orig(),
                    reply: *pend.reply(),
                    nat_status: pend.entry.ext.nat_status,
                },
                false,
                false,
            ),
            CtPkt::Entry { dir, .. } => (pc.tuples?, dir == Dir::Reply, false),
            CtPkt::Related { dir, .. } => (pc.tuples?, dir == Dir::Reply, true),
            // (an ICMP error carrying its connection is translated as a related one)
            CtPkt::Attached { dir, .. } => {
                (pc.tuples?, dir == Dir::Reply, pm.is_icmp_error(buf.get()))
            }
            _ => return None,
        };
        if !m.applies(t.nat_status, reply) {
            return None;
        }
        let Buf::Rw(frame) = buf else {
            self.stats.nat_not_applied += 1;
            return None;
        };
        let changed = if related {
            nat::icmp_reply_translation(frame, pm, &t.orig, &t.reply, reply, m)
        } else {
            let other = if reply { t.orig } else { t.reply };
            nat::manip_pkt(frame, pm, &other.invert(), m, false)
        };
        if changed {
            self.stats.nat_rewritten += 1;
            if t.nat_status & NAT_PORT_CHOSEN != 0 {
                self.stats.nat_port_changed_packets += 1;
            }
            *pm = PacketMeta::parse(frame, pm.link);
        }
        None
    }

    /// Bind the `m` half of a new connection as the statement asks (`nf_nat_setup_info`).
    fn bind(
        &mut self,
        m: Manip,
        req: &Request,
        pc: &mut PacketCt,
        by_rule: bool,
    ) -> Result<(), NatError> {
        let CtPkt::New(pend) = &mut pc.ct else {
            return Ok(());
        };
        let cur = pend.reply().invert();
        let req = req.netmapped(if m == Manip::Src { cur.src } else { cur.dst }, cur.v6);
        debug_assert_eq!(req.manip, m);
        let ct = &self.ct;
        // only a source binding whose port enters the hash can steer the reply; a full range
        // (every port taken or steering elsewhere) falls back to any free port
        let steer = self
            .steer
            .filter(|_| m == Manip::Src && weir_conntrack::steer::port_steers(&cur));
        let mine =
            |t: &Tuple| steer.is_none_or(|(n, me)| weir_conntrack::steer::worker(t, n) == me);
        let new = match nat::unique_tuple(&cur, &req, &mut self.nat_rng, |t| {
            ct.reply_in_use(&t.invert()) || !mine(t)
        }) {
            Err(_) if steer.is_some() => nat::unique_tuple(&cur, &req, &mut self.nat_rng, |t| {
                ct.reply_in_use(&t.invert())
            })?,
            r => r?,
        };
        if !mine(&new) {
            self.stats.nat_steer_missed += 1;
        }
        if new != cur {
            if m == Manip::Src && (new.sport != cur.sport) && req.port.is_none() {
                self.stats.nat_port_changed += 1;
                pend.entry.ext.nat_status |= NAT_PORT_CHOSEN;
            }
            pend.set_reply(new.invert());
            pend.entry.ext.nat_status |= m.status_bit();
        }
        pend.entry.ext.nat_status |= m.done_bit();
        if by_rule {
            self.stats.nat_bound += 1;
        }
        Ok(())
    }

    /// The packet leaves the host (forwarded after postrouting, or delivered after input):
    /// a new connection is confirmed into the table. Drop when it cannot be.
    pub fn finish(&mut self, pc: &mut PacketCt, now_ns: u64) -> Decision {
        if let CtPkt::New(pend) = pc.ct {
            match self.ct.confirm(pend, now_ns) {
                Ok(id) => {
                    self.stats.confirmed += 1;
                    if let Some(x) = pc.expect.take() {
                        self.expect_object(id, &x, now_ns);
                    }
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
        if let FragPkt::First(key) = pc.frag {
            // a first fragment leaves: the rest of its datagram may follow
            let follow = match pc.ct {
                CtPkt::Entry { id, dir, info } => {
                    self.ct.tuple(id, dir).map(|tuple| frag::Follow::Entry {
                        id,
                        dir,
                        info,
                        tuple,
                    })
                }
                CtPkt::Untracked => Some(frag::Follow::Untracked),
                _ => None,
            };
            if let Some(f) = follow {
                self.frags.insert(key, f, now_ns);
            }
        }
        Decision::Accept
    }
}

impl crate::eval::Conns for Conntrack<CtExt> {
    fn closed(&self, t: &weir_conntrack::Tuple, now_ns: u64) -> Option<bool> {
        let (id, _) = self.find(t)?;
        let e = self.get(id)?;
        if e.timeout_remaining(now_ns).is_zero() {
            return None;
        }
        Some(matches!(
            e.tcp_state(),
            Some(weir_conntrack::TcpState::TimeWait | weir_conntrack::TcpState::Close)
        ))
    }
}
