//! Compiling a checked ruleset ([`weir_lang::ir`]) into the form the engine evaluates.
//!
//! Each chain keeps its rules in priority order and two classifiers (IPv4 and IPv6) that answer
//! "the first rule at or after this position whose leading matches accept this packet". The
//! leading matches of a rule are its match items before its first statement; those on source
//! and destination address, ports and protocol (with single values, prefixes, ranges and inline
//! sets) become classifier dimensions, and the rest (named sets, marks, interfaces, flags, ...)
//! are checked by a callback only for candidates that pass the indexed dimensions. The executor
//! then runs the rule's remaining items in order, exactly as a linear scan would.
//!
//! Rules are stored in slots with sparse priorities, so that inserting or removing one rule
//! touches only that rule's classifier entries; named sets are [`SetIndex`]es that take element
//! additions and removals directly.

use crate::sets::SetIndex;
use std::collections::{BTreeMap, HashMap};
use weir_classify::{Classifier, Entry};
use weir_lang::ir::{
    self, Element, Expr, Family, Hook, Key, KeyPart, Policy, SetRef, Source, Verdict,
};
use weir_wire::{Field, Layer};

/// Distance between the priorities of consecutive rules at build time (room for insertions).
pub const PRIO_GAP: u32 = 1 << 10;
/// A rule expands into at most this many classifier entries; beyond it, the widest dimension is
/// left to the residual check.
pub const MAX_ENTRIES_PER_RULE: usize = 256;

pub const V4_WIDTHS: [u8; 5] = [32, 32, 17, 17, 8];
pub const V6_WIDTHS: [u8; 7] = [64, 64, 64, 64, 17, 17, 8];
/// Port value meaning "this packet has no ports".
pub const NO_PORT: u64 = 0x1_0000;

/// Where a rule goes in its chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    First,
    Last,
    After(u64),
    Before(u64),
}

/// How a chain finds candidate rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Through the classifiers.
    Compiled,
    /// Every rule in order: the reference.
    Linear,
}

/// A set reference resolved for evaluation.
#[derive(Clone, Debug)]
pub enum SetSlot {
    Named(usize),
    /// A large inline set or an inline map.
    Anon(Box<SetIndex>),
    /// A small inline set (the common `tcp dport { 22, 80 }`, or a single value): its elements'
    /// ranges, `comps` per element, scanned in order.
    Small {
        comps: usize,
        ranges: Box<[(u128, u128)]>,
    },
}

/// Inline sets up to this many elements are scanned instead of indexed.
pub const SMALL_SET: usize = 16;

impl CExpr {
    /// True for pure matches (no side effect).
    pub fn is_match(&self) -> bool {
        matches!(
            self,
            CExpr::Cmp { .. } | CExpr::In { .. } | CExpr::Match { .. }
        )
    }

    /// For a match on one plain field: the field, whether it is negated, and its ranges (None
    /// for named sets).
    #[allow(clippy::type_complexity)]
    pub fn single_field(&self) -> Option<(Field, bool, Option<Vec<(u128, u128)>>)> {
        match self {
            CExpr::Cmp {
                field,
                negate,
                lo,
                hi,
            } => Some((*field, *negate, Some(vec![(*lo, *hi)]))),
            CExpr::In { field, negate, set } => Some((
                *field,
                *negate,
                set.inline_ranges()
                    .map(|v| v.iter().map(|e| e[0]).collect()),
            )),
            _ => None,
        }
    }

    /// The field layers a match reads (for implicit protocol requirements).
    fn layers(&self, out: &mut Vec<Layer>) {
        match self {
            CExpr::Cmp { field, .. } | CExpr::In { field, .. } => out.push(field.layer()),
            CExpr::Match { key, .. } => key_layers(key, out),
            _ => {}
        }
    }
}

impl SetSlot {
    /// The elements' key ranges, for inline sets (the classifier indexes those). None for a
    /// named set, and for an inline set with a catch-all element (it matches every key: the
    /// match is checked by the residual, not indexed).
    pub fn inline_ranges(&self) -> Option<Vec<&[(u128, u128)]>> {
        match self {
            SetSlot::Named(_) => None,
            SetSlot::Anon(s) if s.catchall().is_some() => None,
            SetSlot::Anon(s) => Some(s.elements().map(|e| &e.key[..]).collect()),
            SetSlot::Small { comps, ranges } => Some(ranges.chunks(*comps).collect()),
        }
    }
}

/// A compiled rule item.
#[derive(Clone, Debug)]
pub enum CExpr {
    /// One plain field against one value or range (most matches): no key vector, no set.
    Cmp {
        field: Field,
        negate: bool,
        lo: u128,
        hi: u128,
    },
    /// One plain field in a set.
    In {
        field: Field,
        negate: bool,
        set: SetSlot,
    },
    /// The general form: a key (concatenation, masks, hashes) in a set.
    Match {
        key: Key,
        negate: bool,
        set: SetSlot,
    },
    Vmap {
        key: Key,
        map: SetSlot,
    },
    Verdict(Verdict),
    Counter {
        named: Option<usize>,
    },
    Log(Box<ir::Log>),
    Limit {
        limit: Box<ir::Limit>,
        slot: usize,
    },
    Quota {
        quota: Box<ir::Quota>,
        slot: usize,
    },
    Reject(ir::Reject),
    Assign {
        field: Field,
        value: Box<CValue>,
    },
    /// `notrack`: the packet will not be tracked (it must run before connection tracking).
    /// `tcp option KIND FIELD set VALUE` (bytes `offset..offset + len` of the option).
    SetTcpOption {
        kind: u8,
        offset: u8,
        len: u8,
        value: Box<CValue>,
    },
    /// A statement chosen by a map among the table's objects of one kind
    /// ([`ir::Expr::ObjStmt`]): the map's data index `stmts`.
    ObjStmt(Box<CObjStmt>),
    /// `@BASE,OFFSET,LEN set VALUE` ([`crate::raw_write`]).
    SetRaw {
        base: u8,
        offset: u16,
        len: u8,
        value: Box<CValue>,
    },
    Notrack,
    /// `snat`, `dnat`, `masquerade`, `redirect`: evaluated to a [`crate::NatAction`] for the
    /// stateful layer; it ends the chain like `accept`.
    Nat {
        nat: Box<ir::Nat>,
        addr: Option<Box<CValue>>,
        port: Option<Box<CValue>>,
    },
    /// `fwd to DEV` / `fwd ip|ip6 to ADDR device DEV`: evaluated to a [`crate::Fwd`] in
    /// `Meta::fwd`; it ends the base chain like `accept`, and the caller runs no later chain.
    Fwd {
        dev: Box<CValue>,
        neigh: Option<(u8, Box<CValue>)>,
    },
    /// `queue`: recorded in `Meta::queue`; it ends the base chain like `accept` (the later
    /// base chains of the hook run, as after NF_QUEUE's reinjection with NF_ACCEPT) and the
    /// caller hands the packet to the queue's per-flow processing.
    Queue(ir::Queue),
    QueueTo {
        num: Box<CValue>,
        bypass: bool,
        fanout: bool,
    },
    Synproxy(ir::Synproxy),
    /// `last`: the rule's last-use time recorded ([`crate::eval::State::rule_last`]).
    Last,
    /// `dup`: recorded in `Meta::dups` (`stateful::dup`); the rule goes on.
    Dup(Box<crate::stateful::dup::CDup>),
    /// `tproxy` (`stateful::tproxy`): the rule stops without a transparent socket.
    Tproxy(Box<crate::stateful::tproxy::CTproxy>),
    /// A reference to a named object of the table (`limit name`, an object map).
    ObjRef(Box<CObjRef>),
    /// Evaluated by the stateful engine (ct count, flow add, dynamic sets); the
    /// stateless engine passes over them and counts them.
    Stateful(Box<ir::Expr>),
}

/// An [`ir::Expr::ObjStmt`] compiled: the key, the map giving an index into `stmts`.
#[derive(Clone, Debug)]
pub struct CObjStmt {
    pub key: Key,
    pub map: SetSlot,
    pub stmts: Box<[CExpr]>,
}

/// An [`ir::ObjRef`] compiled: the object by index, or a key and the map giving it.
#[derive(Clone, Debug)]
pub struct CObjRef {
    pub kind: ir::ObjKind,
    pub target: CObjTarget,
}

#[derive(Clone, Debug)]
pub enum CObjTarget {
    Name(usize),
    Map { key: Key, map: SetSlot },
}

#[derive(Clone, Debug)]
pub enum CValue {
    Const(Vec<u128>),
    Range(u128, u128),
    Key(Key),
    /// `comps`: the map's data components (0: a named map, its table's set says).
    Map {
        key: Key,
        map: SetSlot,
        comps: usize,
    },
}

#[derive(Clone, Debug)]
pub struct CRule {
    pub handle: u64,
    pub text: String,
    pub prio: u32,
    /// Index into the engine's per-rule counters.
    pub gid: usize,
    pub exprs: Vec<CExpr>,
    /// Items before this index are pure matches (checked by classifier + residual callback).
    pub first_stmt: usize,
    /// Which packets the rule can match at all.
    pub v4: bool,
    pub v6: bool,
    pub other: bool,
    /// The rule's statements are only anonymous counters and a final verdict (`counter
    /// accept`, `drop`): the evaluator returns it without reading `exprs` (one cache line
    /// less per matched rule in large rulesets).
    pub terminal: Option<Verdict>,
}

#[derive(Clone, Debug)]
pub struct CChain {
    pub name: String,
    pub base: Option<ir::BaseChain>,
    /// Rule slots (None: removed, reusable).
    pub slots: Vec<Option<CRule>>,
    free: Vec<u32>,
    /// Live rules: priority -> slot.
    pub order: BTreeMap<u32, u32>,
    /// Live rules: handle -> slot.
    pub by_handle: HashMap<u64, u32>,
    /// Slot -> rule counter id, compact (what a classification answers).
    pub gids: Vec<u32>,
    pub v4: Classifier<5>,
    pub v6: Classifier<7>,
}

#[derive(Clone, Debug)]
pub struct CTable {
    /// Its index in `Compiled::tables` (the per-worker state of its dynamic sets is kept by
    /// this index).
    pub index: usize,
    pub family: Family,
    pub name: String,
    pub chains: Vec<CChain>,
    pub sets: Vec<SetIndex>,
    pub set_names: Vec<String>,
    pub ir: ir::Table,
    /// The highest rule handle given out in this table.
    pub next_handle: u64,
}

/// One base chain attached to a hook.
#[derive(Clone, Copy, Debug)]
pub struct HookEntry {
    /// The hook it is attached to.
    pub hook: ir::Hook,
    pub table: usize,
    pub chain: usize,
    pub priority: i32,
    pub family: Family,
    pub policy: Policy,
}

/// A compiled ruleset.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub tables: Vec<CTable>,
    /// Base chains per hook (indexed by `Hook as usize`), in priority order.
    pub hooks: [Vec<HookEntry>; 7],
    /// gid -> (table, chain, slot)
    pub rule_loc: Vec<(u32, u32, u32)>,
    pub limit_slots: usize,
    pub quota_slots: usize,
    /// Some rule rejects: a dataplane that answers rejected packets keeps their headers as
    /// they arrived (NAT may rewrite them before the rule runs).
    pub rejects: bool,
    /// The targets of the ruleset's `tproxy` statements (`stateful::tproxy::targets`; empty
    /// when they cannot be listed, which `weir run` refuses).
    pub tproxy: Vec<crate::stateful::tproxy::Target>,
    /// Some rule reads `socket` keys ([`crate::socket::reads_socket`]).
    pub reads_socket: bool,
    /// Some rule reads `rt ip|ip6 nexthop` (the caller then sets `Meta::nexthop`).
    pub reads_nexthop: bool,
    pub mode: Mode,
    pub build_ns: u64,
}

fn full(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

fn key_layers(k: &[KeyPart], out: &mut Vec<Layer>) {
    for p in k {
        match &p.src {
            Source::Field(f) => out.push(f.layer()),
            Source::Jhash { key, .. } => key_layers(key, out),
            Source::Binop { a, b, .. } => {
                key_layers(std::slice::from_ref(&**a), out);
                key_layers(std::slice::from_ref(&**b), out);
            }
            // (presence needs no protocol: the kernel answers 0 for a packet of another one;
            // the IPv6 routing header's bytes, `srh sid[N]`, need IPv6)
            Source::Exthdr {
                proto: weir_wire::meta::proto::ROUTING,
                present: false,
                ..
            } => out.push(Layer::Ip6),
            Source::Exthdr {
                proto,
                present: false,
                ..
            } => out.push(weir_wire::field::Layer::Transport(*proto)),
            // (the outer packet's: UDP for VXLAN and Geneve, GRE for GRE and GRETAP)
            Source::Inner { tunnel, .. } => {
                out.push(weir_wire::field::Layer::Transport(match tunnel {
                    weir_wire::tunnel::Tunnel::Vxlan | weir_wire::tunnel::Tunnel::Geneve => 17,
                    _ => 47,
                }))
            }
            _ => {}
        }
    }
}

/// What one leading match contributes to a family's classifier.
enum Dim {
    /// (dimension, ranges) for the v4 or v6 key layout (v6 addresses are split by the caller).
    Index(usize, Vec<(u128, u128)>),
    Residual,
}

fn sport_field(f: Field) -> bool {
    matches!(
        f,
        Field::TcpSport | Field::UdpSport | Field::SctpSport | Field::ThSport
    )
}
fn dport_field(f: Field) -> bool {
    matches!(
        f,
        Field::TcpDport | Field::UdpDport | Field::SctpDport | Field::ThDport
    )
}

/// Union of ranges, sorted and merged.
fn merge(mut r: Vec<(u128, u128)>) -> Vec<(u128, u128)> {
    r.sort();
    let mut out: Vec<(u128, u128)> = Vec::new();
    for (a, b) in r {
        if let Some(last) = out.last_mut() {
            if a <= last.1.saturating_add(1) {
                last.1 = last.1.max(b);
                continue;
            }
        }
        out.push((a, b));
    }
    out
}

fn complement(r: &[(u128, u128)], max: u128) -> Vec<(u128, u128)> {
    let mut out = Vec::new();
    let mut cur = 0u128;
    let mut done = false;
    for &(a, b) in r {
        if a > cur {
            out.push((cur, a - 1));
        }
        if b >= max {
            done = true;
            break;
        }
        cur = b + 1;
    }
    if !done {
        out.push((cur, max));
    }
    out
}

fn intersect(a: &[(u128, u128)], b: &[(u128, u128)]) -> Vec<(u128, u128)> {
    let mut out = Vec::new();
    for &(a0, a1) in a {
        for &(b0, b1) in b {
            let lo = a0.max(b0);
            let hi = a1.min(b1);
            if lo <= hi {
                out.push((lo, hi));
            }
        }
    }
    merge(out)
}

fn index_dim(m: &CExpr, v6: bool) -> Dim {
    let Some((f, negate, Some(ranges))) = m.single_field() else {
        return Dim::Residual;
    };
    let dim = match f {
        Field::IpSaddr if !v6 => 0,
        Field::IpDaddr if !v6 => 1,
        Field::Ip6Saddr if v6 => 0,
        Field::Ip6Daddr if v6 => 2,
        f if sport_field(f) => {
            if v6 {
                4
            } else {
                2
            }
        }
        f if dport_field(f) => {
            if v6 {
                5
            } else {
                3
            }
        }
        Field::MetaL4proto => {
            if v6 {
                6
            } else {
                4
            }
        }
        Field::IpProtocol if !v6 => 4,
        _ => return Dim::Residual,
    };
    let ranges = merge(ranges);
    let max = full(f.bits());
    let ranges = if negate {
        complement(&ranges, max)
    } else {
        ranges
    };
    Dim::Index(dim, ranges)
}

/// The classifier entries of a rule for one family, or None when it cannot match that family.
fn rule_entries<const D: usize>(r: &CRule, slot: u32, v6: bool) -> Option<Vec<Entry<D>>> {
    if (v6 && !r.v6) || (!v6 && !r.v4) {
        return None;
    }
    // per logical dimension (v6 addresses as one 128-bit dimension first)
    // logical dimensions: saddr, daddr, sport, dport, proto (v6 addresses split later)
    let logical_max: [u128; 5] = if v6 {
        [u128::MAX, u128::MAX, 0x1_FFFF, 0x1_FFFF, 255]
    } else {
        [u32::MAX as u128, u32::MAX as u128, 0x1_FFFF, 0x1_FFFF, 255]
    };
    let mut dims: Vec<Vec<(u128, u128)>> = (0..5).map(|i| vec![(0, logical_max[i])]).collect();
    let mut residual = false;
    let to_logical = |d: usize| -> usize {
        if v6 {
            match d {
                0 => 0,
                2 => 1,
                4 => 2,
                5 => 3,
                _ => 4,
            }
        } else {
            d
        }
    };
    for e in &r.exprs[..r.first_stmt] {
        // implicit protocol requirements of every field read
        {
            let mut layers = Vec::new();
            e.layers(&mut layers);
            for l in layers {
                let req: Option<Vec<(u128, u128)>> = match l {
                    Layer::Transport(p) => Some(vec![(p as u128, p as u128)]),
                    // `th` reads the transport header of any protocol: no protocol requirement
                    Layer::Icmp => Some(vec![(1, 1)]),
                    Layer::Icmp6 => Some(vec![(58, 58)]),
                    _ => None,
                };
                if let Some(req) = req {
                    dims[4] = intersect(&dims[4], &merge(req));
                }
                // port fields need ports present: the indexed port dimension excludes NO_PORT
                // by construction; a residual port match still reads the field and fails.
            }
        }
        match index_dim(e, v6) {
            Dim::Index(d, ranges) => {
                let ld = to_logical(d);
                dims[ld] = intersect(&dims[ld], &ranges);
            }
            Dim::Residual => residual = true,
        }
    }
    if dims.iter().any(|d| d.is_empty()) {
        // the indexed matches can never all hold (e.g. tcp dport with meta l4proto udp): the
        // rule never matches this family
        return Some(Vec::new());
    }
    // keep the expansion bounded: give up indexing the widest dimensions first
    loop {
        let product: usize = dims
            .iter()
            .map(|d| d.len())
            .fold(1usize, |a, b| a.saturating_mul(b));
        if product <= MAX_ENTRIES_PER_RULE {
            break;
        }
        let (wi, _) = dims
            .iter()
            .enumerate()
            .max_by_key(|(_, d)| d.len())
            .unwrap();
        dims[wi] = vec![(0, logical_max[wi])];
        residual = true;
    }
    // expand to physical dimensions
    let mut phys: Vec<Vec<Vec<(u64, u64)>>> = Vec::new(); // per logical dim: list of alternatives, each a list of physical ranges
    for (ld, ranges) in dims.iter().enumerate() {
        let mut alts = Vec::new();
        for &(lo, hi) in ranges {
            if v6 && ld < 2 {
                for (h, l) in split128(lo, hi) {
                    alts.push(vec![h, l]);
                }
            } else {
                alts.push(vec![(lo as u64, hi as u64)]);
            }
        }
        phys.push(alts);
    }
    let mut out = Vec::new();
    let mut idx = vec![0usize; phys.len()];
    loop {
        let mut ranges = [(0u64, 0u64); D];
        let mut p = 0;
        for (ld, alts) in phys.iter().enumerate() {
            for &r in &alts[idx[ld]] {
                ranges[p] = r;
                p += 1;
            }
        }
        debug_assert_eq!(p, D);
        out.push(Entry {
            prio: r.prio,
            rule: slot,
            ranges,
            residual,
        });
        // next combination
        let mut k = 0;
        loop {
            if k == idx.len() {
                return Some(out);
            }
            idx[k] += 1;
            if idx[k] < phys[k].len() {
                break;
            }
            idx[k] = 0;
            k += 1;
        }
    }
}

/// Split a 128-bit range into at most three (hi-range, lo-range) boxes.
fn split128(lo: u128, hi: u128) -> Vec<((u64, u64), (u64, u64))> {
    let (lh, ll) = ((lo >> 64) as u64, lo as u64);
    let (hh, hl) = ((hi >> 64) as u64, hi as u64);
    if lh == hh {
        return vec![((lh, lh), (ll, hl))];
    }
    let mut v = Vec::new();
    if ll == 0 && hl == u64::MAX {
        return vec![((lh, hh), (0, u64::MAX))];
    }
    let mut mid_lo = lh;
    if ll != 0 {
        v.push(((lh, lh), (ll, u64::MAX)));
        mid_lo = lh + 1;
    }
    let mut mid_hi = hh;
    let tail = if hl != u64::MAX {
        mid_hi = hh - 1;
        Some(((hh, hh), (0, hl)))
    } else {
        None
    };
    if mid_lo <= mid_hi && !(mid_lo == hh && tail.is_some()) {
        v.push(((mid_lo, mid_hi), (0, u64::MAX)));
    }
    if let Some(t) = tail {
        v.push(t);
    }
    v
}

struct Slots {
    limits: usize,
    quotas: usize,
    /// A rule with `reject` was compiled.
    rejects: bool,
}

fn compile_set_ref(s: &SetRef) -> SetSlot {
    match s {
        SetRef::Named(i) => SetSlot::Named(*i),
        SetRef::Anon(a) if !a.is_map && a.catchall.is_none() && a.elements.len() <= SMALL_SET => {
            SetSlot::Small {
                comps: a.key_types.len().max(1),
                ranges: a
                    .elements
                    .iter()
                    .flat_map(|e| e.key.iter().copied())
                    .collect(),
            }
        }
        SetRef::Anon(a) => SetSlot::Anon(Box::new(SetIndex::build(a))),
    }
}

fn compile_expr(e: &Expr, slots: &mut Slots) -> CExpr {
    match e {
        Expr::Match(m) => {
            let set = compile_set_ref(&m.set);
            match (&m.key[..], &set) {
                // a new number each read: through the key, where the engine's state is at hand
                (
                    [KeyPart {
                        src: Source::Field(Field::MetaRandom),
                        ..
                    }],
                    _,
                ) => CExpr::Match {
                    key: m.key.clone(),
                    negate: m.negate,
                    set,
                },
                (
                    [KeyPart {
                        src: Source::Field(f),
                        ..
                    }],
                    SetSlot::Small { comps: 1, ranges },
                ) if m.key[0].is_plain() && ranges.len() == 1 => CExpr::Cmp {
                    field: *f,
                    negate: m.negate,
                    lo: ranges[0].0,
                    hi: ranges[0].1,
                },
                (
                    [KeyPart {
                        src: Source::Field(f),
                        ..
                    }],
                    _,
                ) if m.key[0].is_plain() => CExpr::In {
                    field: *f,
                    negate: m.negate,
                    set,
                },
                _ => CExpr::Match {
                    key: m.key.clone(),
                    negate: m.negate,
                    set,
                },
            }
        }
        Expr::Vmap { key, map } => CExpr::Vmap {
            key: key.clone(),
            map: compile_set_ref(map),
        },
        Expr::Verdict(v) => CExpr::Verdict(*v),
        Expr::Counter { named } => CExpr::Counter { named: *named },
        Expr::Log(l) => CExpr::Log(Box::new(l.clone())),
        Expr::Limit(l) => {
            slots.limits += 1;
            CExpr::Limit {
                limit: Box::new(l.clone()),
                slot: slots.limits - 1,
            }
        }
        Expr::Quota(q) => {
            slots.quotas += 1;
            CExpr::Quota {
                quota: Box::new(q.clone()),
                slot: slots.quotas - 1,
            }
        }
        Expr::Reject(r) => {
            slots.rejects = true;
            CExpr::Reject(r.clone())
        }
        Expr::Assign { field, value } => CExpr::Assign {
            field: *field,
            value: Box::new(compile_value(value)),
        },
        Expr::SetTcpOption {
            kind,
            offset,
            len,
            value,
        } => CExpr::SetTcpOption {
            kind: *kind,
            offset: *offset,
            len: *len,
            value: Box::new(compile_value(value)),
        },
        Expr::ObjStmt { key, map, stmts } => CExpr::ObjStmt(Box::new(CObjStmt {
            key: key.clone(),
            map: compile_set_ref(map),
            stmts: stmts.iter().map(|e| compile_expr(e, slots)).collect(),
        })),
        Expr::SetRaw {
            base,
            offset,
            len,
            value,
        } => CExpr::SetRaw {
            base: *base,
            offset: *offset,
            len: *len,
            value: Box::new(compile_value(value)),
        },
        Expr::Notrack => CExpr::Notrack,
        Expr::Nat(n) => CExpr::Nat {
            nat: Box::new(n.clone()),
            addr: n.addr.as_ref().map(|v| Box::new(compile_value(v))),
            port: n.port.as_ref().map(|v| Box::new(compile_value(v))),
        },
        Expr::Fwd(f) => CExpr::Fwd {
            dev: Box::new(compile_value(&f.dev)),
            neigh: f
                .neigh
                .as_ref()
                .map(|(fam, a)| (*fam, Box::new(compile_value(a)))),
        },
        Expr::Queue(q) => CExpr::Queue(*q),
        Expr::QueueTo {
            num,
            bypass,
            fanout,
        } => CExpr::QueueTo {
            num: Box::new(compile_value(num)),
            bypass: *bypass,
            fanout: *fanout,
        },
        Expr::Dup(d) => CExpr::Dup(Box::new(crate::stateful::dup::CDup {
            addr: d.addr.as_ref().map(|(f, a)| (*f, compile_value(a))),
            dev: d.dev.as_ref().map(compile_value),
        })),
        Expr::Synproxy(s) => CExpr::Synproxy(*s),
        Expr::Tproxy(x) => CExpr::Tproxy(Box::new(crate::stateful::tproxy::CTproxy {
            family: x.family,
            addr: x.addr.as_ref().map(compile_value),
            port: x.port.as_ref().map(compile_value),
        })),
        Expr::Last { .. } => CExpr::Last,
        Expr::ObjRef(o) => CExpr::ObjRef(Box::new(CObjRef {
            kind: o.kind,
            target: match &o.target {
                ir::ObjTarget::Name(i) => CObjTarget::Name(*i),
                ir::ObjTarget::Map { key, map } => CObjTarget::Map {
                    key: key.clone(),
                    map: compile_set_ref(map),
                },
            },
        })),
        other => CExpr::Stateful(Box::new(other.clone())),
    }
}

fn compile_value(value: &ir::ValueExpr) -> CValue {
    match value {
        ir::ValueExpr::Const(c) => CValue::Const(c.clone()),
        ir::ValueExpr::Range(a, b) => CValue::Range(*a, *b),
        ir::ValueExpr::Key(k) => CValue::Key(k.clone()),
        ir::ValueExpr::Map { key, map } => CValue::Map {
            key: key.clone(),
            map: compile_set_ref(map),
            comps: match map {
                ir::SetRef::Anon(s) => s.data_types.len(),
                ir::SetRef::Named(_) => 0,
            },
        },
    }
}

fn compile_rule(r: &ir::Rule, family: Family, gid: usize, prio: u32, slots: &mut Slots) -> CRule {
    let exprs: Vec<CExpr> = r.exprs.iter().map(|e| compile_expr(e, slots)).collect();
    let first_stmt = exprs
        .iter()
        .position(|e| !e.is_match())
        .unwrap_or(exprs.len());
    // which packet kinds can the leading matches accept at all
    let mut layers = Vec::new();
    for e in &exprs[..first_stmt] {
        e.layers(&mut layers);
    }
    // (an ICMP field implies IPv4 packets, as nft's dependency `meta nfproto ipv4` says,
    // except in an ip6 table, where nft reads it in IPv6 packets carrying protocol 1; and
    // the other way round for ICMPv6)
    let needs_v4 = layers
        .iter()
        .any(|l| *l == Layer::Ip4 || (*l == Layer::Icmp && family != Family::Ip6));
    let needs_v6 = layers
        .iter()
        .any(|l| *l == Layer::Ip6 || (*l == Layer::Icmp6 && family != Family::Ip));
    let needs_ip = layers
        .iter()
        .any(|l| matches!(l, Layer::Transport(_) | Layer::AnyPorts))
        || needs_v4
        || needs_v6;
    let fam_v4 = matches!(
        family,
        Family::Ip | Family::Inet | Family::Netdev | Family::Bridge
    );
    let fam_v6 = matches!(
        family,
        Family::Ip6 | Family::Inet | Family::Netdev | Family::Bridge
    );
    let terminal = match exprs[first_stmt..].split_last() {
        Some((CExpr::Verdict(v), rest))
            if rest
                .iter()
                .all(|e| matches!(e, CExpr::Counter { named: None })) =>
        {
            Some(*v)
        }
        _ => None,
    };
    CRule {
        handle: r.handle,
        text: r.text.clone(),
        prio,
        gid,
        exprs,
        first_stmt,
        terminal,
        v4: fam_v4 && !needs_v6,
        v6: fam_v6 && !needs_v4,
        other: !needs_ip && matches!(family, Family::Netdev | Family::Bridge | Family::Arp),
    }
}

impl CChain {
    fn insert_entries(&mut self, slot: u32) {
        let r = self.slots[slot as usize].as_ref().unwrap();
        if let Some(es) = rule_entries::<5>(r, slot, false) {
            for e in es {
                self.v4.insert(e);
            }
        }
        let r = self.slots[slot as usize].as_ref().unwrap();
        if let Some(es) = rule_entries::<7>(r, slot, true) {
            for e in es {
                self.v6.insert(e);
            }
        }
    }

    /// Live rules in order.
    pub fn rules(&self) -> impl Iterator<Item = &CRule> {
        self.order
            .values()
            .filter_map(|&s| self.slots[s as usize].as_ref())
    }

    /// Number of live rules.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The rule with a handle.
    pub fn rule(&self, handle: u64) -> Option<&CRule> {
        self.by_handle
            .get(&handle)
            .and_then(|&s| self.slots[s as usize].as_ref())
    }
}

impl Compiled {
    /// The rule with a global id (`DropReason::Rule`, `DropReason::Reject`).
    pub fn rule_by_gid(&self, gid: usize) -> Option<&CRule> {
        let &(t, c, s) = self.rule_loc.get(gid)?;
        self.tables
            .get(t as usize)?
            .chains
            .get(c as usize)?
            .slots
            .get(s as usize)?
            .as_ref()
    }

    /// How the rule with a global id rejects (`DropReason::Reject`).
    pub fn reject_of(&self, gid: usize) -> Option<&ir::Reject> {
        self.rule_by_gid(gid)?.exprs.iter().find_map(|e| match e {
            CExpr::Reject(r) => Some(r),
            _ => None,
        })
    }

    /// Compile a checked ruleset.
    pub fn build(rs: &ir::Ruleset, mode: Mode) -> Compiled {
        let t0 = std::time::Instant::now();
        let mut slots = Slots {
            limits: 0,
            quotas: 0,
            rejects: false,
        };
        let mut tables = Vec::new();
        let mut hooks: [Vec<HookEntry>; 7] = Default::default();
        let mut rule_loc = Vec::new();
        for (ti, t) in rs.tables.iter().enumerate() {
            let sets: Vec<SetIndex> = t.sets.iter().map(SetIndex::build).collect();
            let mut chains = Vec::new();
            for (ci, c) in t.chains.iter().enumerate() {
                let mut crules = Vec::with_capacity(c.rules.len());
                let mut v4e = Vec::new();
                let mut v6e = Vec::new();
                for (i, r) in c.rules.iter().enumerate() {
                    let gid = rule_loc.len();
                    rule_loc.push((ti as u32, ci as u32, i as u32));
                    let cr = compile_rule(r, t.family, gid, (i as u32 + 1) * PRIO_GAP, &mut slots);
                    if mode == Mode::Compiled {
                        if let Some(es) = rule_entries::<5>(&cr, i as u32, false) {
                            v4e.extend(es);
                        }
                        if let Some(es) = rule_entries::<7>(&cr, i as u32, true) {
                            v6e.extend(es);
                        }
                    }
                    crules.push(Some(cr));
                }
                let order = crules
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (r.as_ref().unwrap().prio, i as u32))
                    .collect();
                let by_handle = crules
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (r.as_ref().unwrap().handle, i as u32))
                    .collect();
                let gids = crules
                    .iter()
                    .map(|r| r.as_ref().unwrap().gid as u32)
                    .collect();
                chains.push(CChain {
                    name: c.name.clone(),
                    base: c.base.clone(),
                    slots: crules,
                    free: Vec::new(),
                    order,
                    by_handle,
                    gids,
                    v4: Classifier::build(V4_WIDTHS, v4e),
                    v6: Classifier::build(V6_WIDTHS, v6e),
                });
                // (a dormant table's base chains are not hooked: nothing runs them)
                if let Some(b) = c.base.as_ref().filter(|_| !t.dormant) {
                    hooks[b.hook as usize].push(HookEntry {
                        hook: b.hook,
                        table: ti,
                        chain: ci,
                        priority: b.priority,
                        family: t.family,
                        policy: b.policy,
                    });
                }
            }
            tables.push(CTable {
                index: tables.len(),
                family: t.family,
                name: t.name.clone(),
                chains,
                sets,
                set_names: t.sets.iter().map(|s| s.name.clone()).collect(),
                next_handle: t
                    .chains
                    .iter()
                    .flat_map(|c| c.rules.iter().map(|r| r.handle))
                    .max()
                    .unwrap_or(0),
                ir: t.clone(),
            });
        }
        for v in hooks.iter_mut() {
            // the kernel registers a hook before the existing ones of the same priority
            // (nf_hook_entries_grow), so base chains of equal priority run newest first
            v.reverse();
            v.sort_by_key(|h| h.priority);
        }
        Compiled {
            tables,
            hooks,
            rule_loc,
            limit_slots: slots.limits,
            quota_slots: slots.quotas,
            rejects: slots.rejects,
            tproxy: crate::stateful::tproxy::targets(rs).unwrap_or_default(),
            reads_socket: crate::socket::reads_socket(rs),
            reads_nexthop: rs.reads(&|f| matches!(f, Field::RtIpNexthop | Field::RtIp6Nexthop)),
            mode,
            build_ns: t0.elapsed().as_nanos() as u64,
        }
    }

    /// The base chains at a hook, in priority order.
    pub fn hook_entries(&self, hook: Hook) -> &[HookEntry] {
        &self.hooks[hook as usize]
    }

    /// Number of rules.
    pub fn rule_count(&self) -> usize {
        self.tables
            .iter()
            .flat_map(|t| &t.chains)
            .map(|c| c.order.len())
            .sum()
    }

    /// Heap bytes of the compiled form: classifiers, sets, rules (their items and text).
    pub fn memory_bytes(&self) -> usize {
        self.memory_breakdown().iter().map(|x| x.1).sum()
    }

    /// Heap bytes by part: classifiers, named sets, rule items, rule text, indexes.
    pub fn memory_breakdown(&self) -> [(&'static str, usize); 5] {
        let (mut cls, mut sets, mut items, mut text, mut index) = (0, 0, 0, 0, 0);
        for t in &self.tables {
            sets += t.sets.iter().map(|s| s.memory_bytes()).sum::<usize>();
            for c in &t.chains {
                cls += c.v4.memory_bytes() + c.v6.memory_bytes();
                index += c.slots.capacity() * std::mem::size_of::<Option<CRule>>()
                    + c.order.len() * 24
                    + c.by_handle.capacity() * 17
                    + c.gids.capacity() * 4;
                for r in c.slots.iter().flatten() {
                    items += r.exprs.capacity() * std::mem::size_of::<CExpr>();
                    for e in &r.exprs {
                        let key_bytes = |k: &Key| k.capacity() * std::mem::size_of::<ir::KeyPart>();
                        match e {
                            CExpr::Match { key, set, .. } | CExpr::Vmap { key, map: set } => {
                                items += key_bytes(key);
                                match set {
                                    SetSlot::Anon(s) => items += s.memory_bytes(),
                                    SetSlot::Small { ranges, .. } => items += ranges.len() * 32,
                                    SetSlot::Named(_) => {}
                                }
                            }
                            CExpr::In { set, .. } => match set {
                                SetSlot::Anon(s) => items += s.memory_bytes(),
                                SetSlot::Small { ranges, .. } => items += ranges.len() * 32,
                                SetSlot::Named(_) => {}
                            },
                            CExpr::Log(_)
                            | CExpr::Limit { .. }
                            | CExpr::Quota { .. }
                            | CExpr::Assign { .. }
                            | CExpr::SetTcpOption { .. }
                            | CExpr::SetRaw { .. }
                            | CExpr::Stateful(_) => items += 64,
                            _ => {}
                        }
                    }
                    text += r.text.capacity();
                }
            }
        }
        [
            ("classifiers", cls),
            ("sets", sets),
            ("rule items", items),
            ("rule text", text),
            ("indexes", index),
        ]
    }

    /// Insert a rule into a chain, without rebuilding the chain: the rule takes a priority
    /// between its neighbours and only its own classifier entries are added. Returns the
    /// rule's counter id and the handle it was given (a new one, unique in the table), or None
    /// when `at` names a handle the chain does not have.
    pub fn insert_rule(
        &mut self,
        table: usize,
        chain: usize,
        at: At,
        rule: &ir::Rule,
    ) -> Option<(usize, u64)> {
        let family = self.tables[table].family;
        let c = &self.tables[table].chains[chain];
        let prio_of = |h: u64| {
            c.by_handle
                .get(&h)
                .map(|&s| c.slots[s as usize].as_ref().unwrap().prio)
        };
        let (prev, next) = match at {
            At::First => (0, c.order.keys().next().copied()),
            At::Last => (c.order.keys().next_back().copied().unwrap_or(0), None),
            At::After(h) => {
                let p = prio_of(h)?;
                (p, c.order.range(p + 1..).next().map(|(&k, _)| k))
            }
            At::Before(h) => {
                let p = prio_of(h)?;
                (
                    c.order.range(..p).next_back().map(|(&k, _)| k).unwrap_or(0),
                    Some(p),
                )
            }
        };
        let next = next.unwrap_or(prev.saturating_add(2 * PRIO_GAP));
        if next - prev < 2 {
            // no room between the neighbours: renumber this chain's priorities
            self.renumber(table, chain);
            return self.insert_rule(table, chain, at, rule);
        }
        let prio = prev + (next - prev) / 2;
        let gid = self.rule_loc.len();
        let mut slots = Slots {
            limits: self.limit_slots,
            quotas: self.quota_slots,
            rejects: self.rejects,
        };
        let mut cr = compile_rule(rule, family, gid, prio, &mut slots);
        self.tables[table].next_handle += 1;
        cr.handle = self.tables[table].next_handle;
        self.limit_slots = slots.limits;
        self.quota_slots = slots.quotas;
        self.rejects = slots.rejects;
        let c = &mut self.tables[table].chains[chain];
        let handle = cr.handle;
        let slot = match c.free.pop() {
            Some(s) => {
                c.slots[s as usize] = Some(cr);
                c.gids[s as usize] = gid as u32;
                s
            }
            None => {
                c.slots.push(Some(cr));
                c.gids.push(gid as u32);
                (c.slots.len() - 1) as u32
            }
        };
        c.order.insert(prio, slot);
        c.by_handle.insert(handle, slot);
        if self.mode == Mode::Compiled {
            c.insert_entries(slot);
        }
        self.rule_loc.push((table as u32, chain as u32, slot));
        Some((gid, handle))
    }

    /// Remove the rule with a handle from a chain. Returns whether it existed.
    pub fn remove_rule(&mut self, table: usize, chain: usize, handle: u64) -> bool {
        let c = &mut self.tables[table].chains[chain];
        let Some(slot) = c.by_handle.remove(&handle) else {
            return false;
        };
        let r = c.slots[slot as usize].take().unwrap();
        c.order.remove(&r.prio);
        c.free.push(slot);
        if self.mode == Mode::Compiled {
            c.v4.remove_rule(slot);
            c.v6.remove_rule(slot);
        }
        true
    }

    fn renumber(&mut self, table: usize, chain: usize) {
        let c = &mut self.tables[table].chains[chain];
        let slots: Vec<u32> = c.order.values().copied().collect();
        c.order.clear();
        for (i, &s) in slots.iter().enumerate() {
            let p = (i as u32 + 1) * PRIO_GAP;
            c.slots[s as usize].as_mut().unwrap().prio = p;
            c.order.insert(p, s);
        }
        let mut v4e = Vec::new();
        let mut v6e = Vec::new();
        for &s in &slots {
            let r = c.slots[s as usize].as_ref().unwrap();
            if let Some(es) = rule_entries::<5>(r, s, false) {
                v4e.extend(es);
            }
            if let Some(es) = rule_entries::<7>(r, s, true) {
                v6e.extend(es);
            }
        }
        c.v4 = Classifier::build(V4_WIDTHS, v4e);
        c.v6 = Classifier::build(V6_WIDTHS, v6e);
    }

    /// Add an element to a named set or map.
    pub fn add_element(&mut self, table: usize, set: usize, e: Element) -> bool {
        self.tables[table].sets[set].insert(e)
    }

    /// Remove an element (by its exact key) from a named set or map.
    pub fn remove_element(&mut self, table: usize, set: usize, key: &[(u128, u128)]) -> bool {
        self.tables[table].sets[set].remove(key)
    }

    /// Find a table and chain by name.
    pub fn find_chain(&self, table: &str, chain: &str) -> Option<(usize, usize)> {
        self.tables.iter().enumerate().find_map(|(ti, t)| {
            (t.name == table)
                .then(|| {
                    t.chains
                        .iter()
                        .position(|c| c.name == chain)
                        .map(|ci| (ti, ci))
                })
                .flatten()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split128_covers_exactly() {
        let cases = [
            (0u128, u128::MAX),
            (5, 10),
            ((1u128 << 64) - 3, (1u128 << 64) + 7),
            ((3u128 << 64) + 9, (7u128 << 64) + 2),
            (3u128 << 64, (4u128 << 64) - 1),
        ];
        for (lo, hi) in cases {
            let boxes = split128(lo, hi);
            let inside = |v: u128| {
                boxes.iter().any(|((a, b), (c, d))| {
                    let (h, l) = ((v >> 64) as u64, v as u64);
                    *a <= h && h <= *b && *c <= l && l <= *d
                })
            };
            for v in [
                lo,
                hi,
                lo.wrapping_sub(1),
                hi.wrapping_add(1),
                lo / 2 + hi / 2,
            ] {
                let want = lo <= v && v <= hi;
                assert_eq!(inside(v), want, "{lo:x}-{hi:x} at {v:x}");
            }
        }
    }

    #[test]
    fn sizes() {
        eprintln!(
            "CExpr {} KeyPart {} CRule {} SetSlot {}",
            std::mem::size_of::<CExpr>(),
            std::mem::size_of::<ir::KeyPart>(),
            std::mem::size_of::<CRule>(),
            std::mem::size_of::<SetSlot>()
        );
        assert!(std::mem::size_of::<CExpr>() <= 64);
    }

    #[test]
    fn complement_and_intersect() {
        assert_eq!(complement(&[(10, 20)], 100), vec![(0, 9), (21, 100)]);
        assert_eq!(complement(&[(0, 100)], 100), vec![]);
        assert_eq!(
            intersect(&[(0, 10), (20, 30)], &[(5, 25)]),
            vec![(5, 10), (20, 25)]
        );
        assert_eq!(merge(vec![(5, 6), (1, 4), (8, 9)]), vec![(1, 6), (8, 9)]);
    }
}
