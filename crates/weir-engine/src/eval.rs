//! Evaluation: a packet through the base chains of a hook, with nftables semantics.
//!
//! Base chains at a hook run in priority order; `accept` ends the current base chain (the next
//! one still runs), `drop` and `reject` end everything; the end of a base chain applies its
//! policy; `jump` pushes a return point, `goto` does not, `return` (or the end of a regular
//! chain) pops it. In each chain the next candidate rule comes from the classifier (or, in the
//! reference mode, from the next rule in order); the executor runs its remaining items in
//! order, so statements without a verdict, counters and `meta mark set` behave exactly as in a
//! linear scan. A match whose field the packet does not carry fails, negated or not (the
//! implicit protocol dependency of nftables).

use crate::compile::*;
pub(crate) use crate::dynset::{dynset_op, set_contains, set_get, DynElem};
pub use crate::dynset::{DynSet, DYNSET_DEFAULT_SIZE};
use crate::hash::{jhash_key, symhash};
pub(crate) use crate::meta::dev_type;
pub use crate::meta::*;
use crate::sets::{KeyVals, MAX_KEY};
use weir_lang::ir::{self, Key, KeyPart, MapValue, Policy, Source, Verdict};
use weir_wire::{tunnel, Field, Frag, LinkType, Malformed, PacketMeta, L3};

/// Why a packet was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// A rule's `drop` (the rule's counter id).
    Rule(usize),
    /// A rule's `reject` (the rule's counter id).
    Reject(usize),
    /// A base chain's policy (table, chain).
    Policy(usize, usize),
    /// A packet whose network header cannot be trusted, dropped by a policy.
    Malformed(weir_wire::Malformed),
    /// An IP fragment met by connection tracking: the kernel holds it for reassembly, weir does
    /// not reassemble.
    Fragment,
    /// A new connection that could not be entered in the connection table (full, or a clash).
    CtRefused,
    /// Handed to a queue (`queue num N`) whose per-flow processing dropped it, or that
    /// nobody listens on (without `bypass`).
    Queue(u16),
    /// A connection-tracking helper rewrote the packet to another length: its rewritten copy
    /// is sent in its place (`Stateful::take_queue_out`).
    Replaced,
    /// Taken by the SYN proxy (`synproxy`): a client's SYN it answered, an ACK whose cookie
    /// opened the connection to the server, the server's SYN-ACK it acknowledged (what it
    /// sends: `Stateful::take_stack_out`).
    Synproxy,
    /// An ACK `synproxy` met whose cookie is not one of the proxy's (or too old).
    SynproxyCookie,
}

/// The final decision for one packet at one hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Accept,
    Drop(DropReason),
}

impl Decision {
    pub fn is_accept(self) -> bool {
        matches!(self, Decision::Accept)
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Bucket {
    pub(crate) tokens: u64,
    pub(crate) last_ns: u64,
    pub(crate) init: bool,
}

/// The rate limiters and quotas of one ruleset, shared by the engines of several workers. The
/// kernel keeps one `limit` (`nft_limit`, under a spinlock) and one `quota` (an atomic
/// counter) per rule for all CPUs; so does weir: with four workers a `limit rate 10/second`
/// still admits 10 packets a second, not 10 per worker. An engine without one (replay, one
/// worker) keeps them in its own [`State`].
#[derive(Debug, Default)]
pub struct Shared {
    limits: Vec<std::sync::Mutex<Bucket>>,
    pub(crate) quotas: Vec<std::sync::atomic::AtomicU64>,
    pub(crate) named_quotas: Vec<Vec<std::sync::atomic::AtomicU64>>,
    /// The tables' named limits (`limit NAME { ... }`): one bucket each for all workers.
    pub(crate) named_limits: Vec<Vec<std::sync::Mutex<Bucket>>>,
}

impl Shared {
    /// Fresh limiters and quotas for a compiled ruleset (named quotas start at their `used`).
    pub fn new(rs: &Compiled) -> std::sync::Arc<Shared> {
        use std::sync::atomic::AtomicU64;
        std::sync::Arc::new(Shared {
            limits: (0..rs.limit_slots).map(|_| Default::default()).collect(),
            quotas: (0..rs.quota_slots).map(|_| AtomicU64::new(0)).collect(),
            named_quotas: rs
                .tables
                .iter()
                .map(|t| {
                    t.ir.quotas
                        .iter()
                        .map(|(_, q)| AtomicU64::new(q.used))
                        .collect()
                })
                .collect(),
            named_limits: rs
                .tables
                .iter()
                .map(|t| t.ir.limits.iter().map(|_| Default::default()).collect())
                .collect(),
        })
    }
}

/// The connection table as `ct count` sees it (nf_conncount looks the connections it counts
/// up in conntrack); the stateful layer lends it to the evaluator in [`Pkt::conns`].
pub trait Conns {
    /// The connection whose original tuple is `t`, at `now_ns`: None when it is not in the
    /// table (or has expired), else whether it has closed (TCP TIME_WAIT or CLOSE).
    fn closed(&self, t: &weir_conntrack::Tuple, now_ns: u64) -> Option<bool>;
}

/// One `ct count` list (Linux `nf_conncount_list`): the original tuples of the connections
/// counted, oldest first.
#[derive(Clone, Debug, Default)]
pub struct ConnList {
    conns: Vec<weir_conntrack::Tuple>,
}

/// Connections a `ct count` evaluation may drop from its list at most (Linux
/// `CONNCOUNT_GC_MAX_NODES`).
const CONNCOUNT_GC_MAX_NODES: usize = 8;

impl ConnList {
    /// `nf_conncount_add`: drop connections that left the table or closed (a bounded number
    /// per call), then add `t` unless the list holds it already. Returns the count.
    ///
    /// Linux skips the collection (and the duplicate check) when the list was collected in the
    /// same jiffy; weir collects on every call, so within one jiffy it counts a connection
    /// that vanished or closed one time less than Linux may.
    pub fn add(&mut self, t: &weir_conntrack::Tuple, conns: &dyn Conns, now_ns: u64) -> usize {
        let mut collect = 0;
        let mut i = 0;
        while i < self.conns.len() {
            if collect > CONNCOUNT_GC_MAX_NODES {
                break;
            }
            let c = self.conns[i];
            match conns.closed(&c, now_ns) {
                None => {
                    self.conns.remove(i);
                    collect += 1;
                    continue;
                }
                Some(_) if c == *t => return self.conns.len(),
                Some(true) => {
                    self.conns.remove(i);
                    collect += 1;
                    continue;
                }
                Some(false) => i += 1,
            }
        }
        self.conns.push(*t);
        self.conns.len()
    }

    pub fn len(&self) -> usize {
        self.conns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }
}

/// Mutable per-worker state: counters, rate limiters, quotas.
#[derive(Clone, Debug, Default)]
pub struct State {
    /// (packets, bytes) per rule counter id.
    pub rule_hits: Vec<(u64, u64)>,
    /// Per rule counter id, for rules with `last`: when a packet last reached the
    /// statement (the evaluation's clock, nanoseconds; 0: never).
    pub rule_last: Vec<u64>,
    /// Named counters per table.
    pub named_counters: Vec<Vec<(u64, u64)>>,
    limits: Vec<Bucket>,
    pub(crate) quotas: Vec<u64>,
    pub(crate) named_quotas: Vec<Vec<u64>>,
    /// The tables' named limits, when no [`Shared`] holds them.
    pub(crate) named_limits: Vec<Vec<Bucket>>,
    numgen: Vec<u32>,
    rng: u64,
    /// `meta random`'s xorshift64 generator (seeded when the engine is made).
    pub(crate) meta_rng: u64,
    /// Log lines (the first ones; `log_count` counts them all).
    pub logs: Vec<String>,
    pub log_count: u64,
    /// Items of the stateful engine met and passed over (ct count, NAT, notrack, flow add, set updates).
    pub stateful_skipped: u64,
    /// Header rewrites not yet performed by this engine (`ip saddr set ...`).
    pub rewrites_skipped: u64,
    /// Elements added from the packet path, per table and set (empty until a rule adds one).
    pub dynsets: Vec<Vec<DynSet>>,
    /// `add @s` refused because the set was full.
    pub dynset_full: u64,
    /// The lists of rule-level `ct count` matches, by (rule id, item index).
    pub conncount: std::collections::HashMap<(usize, usize), ConnList>,
    /// Limiters and quotas shared with other workers' engines (then `limits`, `quotas` and
    /// `named_quotas` above are not used for the slots it has).
    pub shared: Option<std::sync::Arc<Shared>>,
    /// The routing table `fib` asks ([`crate::fib`]); None: every lookup finds no route.
    pub fib: Option<crate::fib::FibTable>,
    /// The host's sockets `tproxy` asks ([`crate::socket`]); None: no socket anywhere.
    pub sockets: Option<crate::socket::SocketTable>,
    /// The OS fingerprints `osf` asks ([`crate::osf`]); None: none loaded, every SYN's OS
    /// is "unknown" (as in a kernel no `nfnl_osf -f` has filled).
    pub osf: Option<std::sync::Arc<crate::osf::OsfDb>>,
    /// The hook of the base chain running (what `fib` needs to know).
    pub(crate) hook: Option<ir::Hook>,
}

impl State {
    /// The packet-path elements of a table's set (None when it has none).
    pub fn dynset(&self, table: usize, set: usize) -> Option<&DynSet> {
        self.dynsets.get(table)?.get(set)
    }

    /// Add an element as the packet path would (`weir ctl set add`): lookups see it at once;
    /// `expires_ns` 0 means no timeout. False when the set is full (`size`).
    pub fn dynset_add(
        &mut self,
        table: usize,
        set: usize,
        key: Vec<u128>,
        expires_ns: u64,
        size: usize,
    ) -> bool {
        if self.dynsets.len() <= table {
            self.dynsets.resize(table + 1, Vec::new());
        }
        let sets = &mut self.dynsets[table];
        if sets.len() <= set {
            sets.resize(set + 1, DynSet::default());
        }
        let ds = &mut sets[set];
        if ds.elems.len() >= size && !ds.elems.contains_key(&key) {
            return false;
        }
        ds.elems.insert(
            key,
            DynElem {
                expires_ns,
                ..DynElem::default()
            },
        );
        true
    }

    /// Remove an element the packet path (or `weir ctl set add`) added; false when absent.
    pub fn dynset_remove(&mut self, table: usize, set: usize, key: &[u128]) -> bool {
        self.dynsets
            .get_mut(table)
            .and_then(|s| s.get_mut(set))
            .is_some_and(|d| d.elems.remove(key).is_some())
    }
}

pub const MAX_LOG_LINES: usize = 1000;
const MAX_STACK: usize = 16;

/// The stateless engine: a compiled ruleset plus its state.
pub struct Engine {
    pub rs: Compiled,
    pub st: State,
}

/// A packet being evaluated.
pub struct Pkt<'a> {
    /// The connection table, for `ct count` (None: the stateless engine passes it over).
    pub conns: Option<&'a dyn Conns>,
    pub frame: &'a [u8],
    pub pm: &'a PacketMeta,
    /// Borrowed, not copied: it is a few hundred bytes and the stateful layer keeps it
    /// across the base chains of all hooks.
    pub meta: &'a mut Meta,
    pub now_ns: u64,
}

impl<'a> Pkt<'a> {
    /// The original tuple of the packet's connection (`ct count` counts these); without a
    /// connection (invalid, untracked), the packet's own tuple, as `nf_ct_get_tuplepr`.
    pub fn conn_tuple(&self) -> weir_conntrack::Tuple {
        if self.meta.has_ct {
            let c = &self.meta.ct;
            weir_conntrack::Tuple {
                zone: c.zone.id_for(weir_conntrack::Dir::Original),
                src: c.orig_src,
                dst: c.orig_dst,
                sport: c.orig_sport,
                dport: c.orig_dport,
                proto: c.protocol,
                v6: c.l3proto == 10,
            }
        } else {
            let pm = self.pm;
            weir_conntrack::Tuple {
                zone: self
                    .meta
                    .ct_zone
                    .unwrap_or_default()
                    .id_for(weir_conntrack::Dir::Original),
                src: pm.saddr,
                dst: pm.daddr,
                sport: if pm.has_ports { pm.sport } else { 0 },
                dport: if pm.has_ports { pm.dport } else { 0 },
                proto: pm.l4proto,
                v6: pm.l3 == L3::Ipv6,
            }
        }
    }

    pub fn bytes(&self) -> u64 {
        if matches!(self.pm.l3, L3::Ipv4 | L3::Ipv6) && self.pm.malformed.is_none_or(|m| !m.is_l3())
        {
            self.pm.l3_len as u64
        } else {
            self.pm.len as u64
        }
    }

    #[inline]
    fn is_ip(&self) -> bool {
        matches!(self.pm.l3, L3::Ipv4 | L3::Ipv6)
    }

    /// Read a field (None: the packet does not carry it), with what statements of this
    /// chain wrote to its bytes.
    #[inline]
    pub fn field(&self, f: Field) -> Option<u128> {
        let v = self.read(f);
        // a write shows through a selector only where the packet carries it (`udp dport set`
        // wrote the bytes `th dport` reads too, but a UDP datagram has no `tcp dport`)
        if self.meta.nwrites > 0 && v.is_some() {
            if let Some(w) = self.meta.written(f) {
                return Some(w);
            }
        }
        v
    }

    /// The packet's wall-clock time ([`Meta::wall_ns`], or `now_ns`).
    fn wall_ns(&self) -> u64 {
        if self.meta.wall_ns != 0 {
            self.meta.wall_ns
        } else {
            self.now_ns
        }
    }

    /// A field as the packet's headers and metadata hold it (no pending writes).
    #[inline]
    fn read(&self, f: Field) -> Option<u128> {
        let pm = self.pm;
        match f {
            Field::IpSaddr if pm.l3 == L3::Ipv4 => Some(pm.saddr),
            Field::IpDaddr if pm.l3 == L3::Ipv4 => Some(pm.daddr),
            Field::Ip6Saddr if pm.l3 == L3::Ipv6 => Some(pm.saddr),
            Field::Ip6Daddr if pm.l3 == L3::Ipv6 => Some(pm.daddr),
            Field::RtIpNexthop if pm.l3 == L3::Ipv4 => self.meta.nexthop,
            Field::RtIp6Nexthop if pm.l3 == L3::Ipv6 => self.meta.nexthop,
            Field::ThSport => self.th_ports().map(|p| p.0 as u128),
            Field::ThDport => self.th_ports().map(|p| p.1 as u128),
            Field::TcpSport if pm.l4proto == 6 => self.th_ports().map(|p| p.0 as u128),
            Field::TcpDport if pm.l4proto == 6 => self.th_ports().map(|p| p.1 as u128),
            Field::UdpSport if pm.l4proto == 17 => self.th_ports().map(|p| p.0 as u128),
            Field::UdpDport if pm.l4proto == 17 => self.th_ports().map(|p| p.1 as u128),
            Field::SctpSport if pm.l4proto == 132 => self.th_ports().map(|p| p.0 as u128),
            Field::SctpDport if pm.l4proto == 132 => self.th_ports().map(|p| p.1 as u128),
            Field::TcpSport
            | Field::TcpDport
            | Field::UdpSport
            | Field::UdpDport
            | Field::SctpSport
            | Field::SctpDport => None,
            Field::MetaL4proto => self.is_ip().then_some(pm.l4proto as u128),
            Field::MetaNfproto => match pm.l3 {
                L3::Ipv4 => Some(2),
                L3::Ipv6 => Some(10),
                _ => None,
            },
            Field::MetaProtocol => Some(pm.l3.ethertype() as u128),
            Field::MetaLength => Some(self.bytes() as u128),
            Field::MetaMark => Some(self.meta.mark as u128),
            // the wall clock, as the kernel's nft_meta reads it (UTC: the kernel's timezone
            // is 0 unless set): nanoseconds since the epoch, the day of the week (0 is
            // Sunday; 1970-01-01 was a Thursday), seconds since midnight
            Field::MetaTime => Some(self.wall_ns() as u128),
            Field::MetaDay => Some(((self.wall_ns() / 1_000_000_000 / 86_400 + 4) % 7) as u128),
            Field::MetaHour => Some((self.wall_ns() / 1_000_000_000 % 86_400) as u128),
            Field::MetaPriority => Some(self.meta.priority as u128),
            // a hook without an input or output device compares the empty name / index 0
            Field::MetaIif => Some(self.meta.iif as u128),
            Field::MetaOif => Some(self.meta.oif as u128),
            Field::MetaIifname => Some(self.meta.iifname),
            Field::MetaOifname => Some(self.meta.oifname),
            Field::MetaCpu => Some(self.meta.cpu as u128),
            Field::RtMtu => (self.meta.rt_mss != 0).then_some(self.meta.rt_mss as u128),
            Field::MetaSkuid => self.meta.skuid.map(u128::from),
            Field::MetaNftrace => Some(self.meta.nftrace as u128),
            Field::MetaSkgid => self.meta.skgid.map(u128::from),
            f if crate::host::is_host(f) => crate::host::field(f, self.meta),
            // a hook without the device breaks the rule, as nft_meta does
            Field::MetaIifgroup => dev_type(self.meta.iif, self.meta.iifname, 1)
                .map(|_| self.meta.iifgroup.unwrap_or(0) as u128),
            Field::MetaOifgroup => dev_type(self.meta.oif, self.meta.oifname, 1)
                .map(|_| self.meta.oifgroup.unwrap_or(0) as u128),
            Field::MetaIiftype => {
                dev_type(self.meta.iif, self.meta.iifname, self.meta.iiftype).map(u128::from)
            }
            Field::MetaOiftype => {
                dev_type(self.meta.oif, self.meta.oifname, self.meta.oiftype).map(u128::from)
            }
            Field::MetaPkttype => {
                if pm.link != LinkType::Ethernet {
                    return Some(0);
                }
                let d = self.frame.first().copied()?;
                if self.frame.get(..6) == Some(&[0xff; 6]) {
                    Some(1)
                } else if d & 1 == 1 {
                    Some(2)
                } else {
                    Some(0)
                }
            }
            Field::CtState => Some(self.meta.ct_state as u128),
            Field::CtLabel => self.meta.has_ct.then_some(self.meta.ct_labels),
            f if f.is_conntrack() => {
                if !self.meta.has_ct {
                    return None;
                }
                crate::ct::ct_key(&self.meta.ct, self.meta.ct_mark, f)
            }
            // nft reads `icmp id` / `icmp sequence` behind `icmp type { echo-reply,
            // echo-request }` (the messages of other types with an identifier do not match)
            Field::IcmpId | Field::IcmpSequence
                if !matches!(pm.get(self.frame, Field::IcmpType), Some(0 | 8)) =>
            {
                None
            }
            f => pm.get(self.frame, f),
        }
    }

    /// The first two 16-bit words of the transport header, as `th sport` / `th dport` (and the
    /// protocol-specific port fields) read them: for any protocol, whenever the packet holds
    /// them and is not a later fragment, as nftables reads them from the transport offset.
    #[inline]
    pub fn th_ports(&self) -> Option<(u16, u16)> {
        let pm = self.pm;
        if pm.has_ports {
            return Some((pm.sport, pm.dport));
        }
        if !matches!(pm.l3, L3::Ipv4 | L3::Ipv6) || pm.frag == Frag::Later {
            return None;
        }
        if let Some(m) = pm.malformed {
            if m.is_l3()
                || matches!(
                    m,
                    Malformed::TruncatedExtHeader | Malformed::ExtHeaderChainTooLong
                )
            {
                return None;
            }
        }
        let o = pm.l4_off as usize;
        let end = pm.l3_end().min(self.frame.len());
        if o == 0 || o + 4 > end {
            return None;
        }
        let w = |i: usize| u16::from_be_bytes([self.frame[i], self.frame[i + 1]]);
        Some((w(o), w(o + 2)))
    }

    #[inline]
    fn part(&self, p: &KeyPart, st: &mut State) -> Option<u128> {
        let v = match &p.src {
            Source::Field(Field::MetaRandom) => crate::random::next(st) as u128,
            Source::Field(f) => self.field(*f)?,
            Source::Jhash {
                key,
                modulus,
                seed,
                offset,
            } => {
                let mut vals = [0u128; MAX_KEY];
                let n = key.len().min(MAX_KEY);
                for (i, kp) in key.iter().take(n).enumerate() {
                    vals[i] = self.part(kp, st)?;
                }
                let h = jhash_key(&vals[..n], key, *seed);
                (((h as u64 * *modulus as u64) >> 32) as u32 + offset) as u128
            }
            Source::Exthdr {
                proto,
                kind,
                offset,
                len,
                present,
            } if *proto == 6 && crate::tcp_strip::pending(self.meta, *kind) => {
                // an option a `reset tcp option` of this chain strips is missing
                if *present {
                    0
                } else {
                    return None;
                }
            }
            Source::Exthdr {
                proto,
                kind,
                offset,
                len,
                present,
            } => self.pm.exthdr_l4(
                self.frame,
                *proto,
                *kind,
                *offset as usize,
                *len as usize,
                *present,
            )?,
            Source::Raw { base, offset, len } => {
                self.pm
                    .raw(self.frame, *base, *offset as usize, *len as usize)?
            }
            Source::Fib { flags, result } => crate::fib::eval(st, *flags, *result, self)?,
            Source::Osf { ttl, version } => {
                crate::osf::key(st.osf.as_deref(), self.frame, self.pm, *ttl, *version)?
            }
            Source::Const(c) => *c,
            Source::Binop { op, a, b } => {
                let (x, y) = (self.part(a, st)?, self.part(b, st)?);
                match op {
                    ir::BitOp::And => x & y,
                    ir::BitOp::Or => x | y,
                    ir::BitOp::Xor => x ^ y,
                }
            }
            Source::Inner { tunnel, field } => tunnel::read(self.frame, self.pm, *tunnel, *field)?,
            Source::Symhash { modulus, offset } => {
                let h = symhash(self.pm);
                (((h as u64 * *modulus as u64) >> 32) as u32 + offset) as u128
            }
            Source::Numgen {
                random,
                modulus,
                offset,
            } => {
                if *random {
                    st.rng = st
                        .rng
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let r = (st.rng >> 32) as u32;
                    (((r as u64 * *modulus as u64) >> 32) as u32 + offset) as u128
                } else {
                    // one shared counter per engine (nftables keeps one per expression)
                    if st.numgen.is_empty() {
                        st.numgen.push(0);
                    }
                    let c = st.numgen[0];
                    st.numgen[0] = c.wrapping_add(1);
                    ((c % modulus) + offset) as u128
                }
            }
        };
        let v = (v & p.and) ^ p.xor;
        Some(match p.shift {
            0 => v,
            s if s > 0 => v >> s,
            s => v << (-s),
        })
    }

    #[inline]
    pub(crate) fn key(&self, k: &Key, st: &mut State, out: &mut KeyVals) -> Option<usize> {
        let n = k.len().min(MAX_KEY);
        for (i, p) in k.iter().take(n).enumerate() {
            out[i] = self.part(p, st)?;
        }
        Some(n)
    }

    /// The IPv4 classifier key.
    #[inline]
    fn key4(&self) -> [u64; 5] {
        let pm = self.pm;
        let (sp, dp) = self
            .th_ports()
            .map_or((NO_PORT, NO_PORT), |(a, b)| (a as u64, b as u64));
        [pm.saddr as u64, pm.daddr as u64, sp, dp, pm.l4proto as u64]
    }

    #[inline]
    fn key6(&self) -> [u64; 7] {
        let pm = self.pm;
        let (sp, dp) = self
            .th_ports()
            .map_or((NO_PORT, NO_PORT), |(a, b)| (a as u64, b as u64));
        [
            (pm.saddr >> 64) as u64,
            pm.saddr as u64,
            (pm.daddr >> 64) as u64,
            pm.daddr as u64,
            sp,
            dp,
            pm.l4proto as u64,
        ]
    }
}

/// Evaluate a pure match.
#[inline]
fn eval_match(t: &CTable, key: &Key, negate: bool, set: &SetSlot, p: &Pkt, st: &mut State) -> bool {
    let mut kv = [0u128; MAX_KEY];
    let Some(n) = p.key(key, st, &mut kv) else {
        return false;
    };
    set_contains(t, set, &kv[..n], st, p.now_ns) != negate
}

/// Evaluate a pure match item (false for statements).
#[inline]
fn eval_item(t: &CTable, e: &CExpr, p: &Pkt, st: &mut State) -> bool {
    match e {
        CExpr::Cmp {
            field,
            negate,
            lo,
            hi,
        } => match p.field(*field) {
            Some(v) => (*lo <= v && v <= *hi) != *negate,
            None => false,
        },
        CExpr::In { field, negate, set } => match p.field(*field) {
            Some(v) => set_contains(t, set, &[v], st, p.now_ns) != *negate,
            None => false,
        },
        CExpr::Match { key, negate, set } => eval_match(t, key, *negate, set, p, st),
        _ => false,
    }
}

/// The leading matches of a rule (before its first statement).
#[inline]
fn leading_ok(t: &CTable, r: &CRule, p: &Pkt, st: &mut State) -> bool {
    r.exprs[..r.first_stmt]
        .iter()
        .all(|e| eval_item(t, e, p, st))
}

enum Outcome {
    Next,
    Verdict(Verdict),
    Reject,
}

impl Engine {
    pub fn new(rs: Compiled) -> Engine {
        let mut e = Engine {
            rs,
            st: State::default(),
        };
        e.sync_state();
        e
    }

    /// Share the ruleset's limiters and quotas with other engines of the same ruleset (the
    /// workers of one daemon), as [`Shared::new`] made them for it.
    pub fn share(&mut self, shared: std::sync::Arc<Shared>) {
        self.st.shared = Some(shared);
    }

    /// Grow the state to the compiled ruleset's counters (after incremental inserts).
    pub fn sync_state(&mut self) {
        let st = &mut self.st;
        st.rule_hits.resize(self.rs.rule_loc.len(), (0, 0));
        st.rule_last.resize(self.rs.rule_loc.len(), 0);
        st.limits.resize(self.rs.limit_slots, Bucket::default());
        st.quotas.resize(self.rs.quota_slots, 0);
        st.named_counters.resize(self.rs.tables.len(), Vec::new());
        st.named_quotas.resize(self.rs.tables.len(), Vec::new());
        st.named_limits.resize(self.rs.tables.len(), Vec::new());
        for (i, t) in self.rs.tables.iter().enumerate() {
            st.named_limits[i].resize(t.ir.limits.len(), Bucket::default());
            if st.named_counters[i].len() < t.ir.counters.len() {
                st.named_counters[i] = t.ir.counters.iter().map(|c| (c.packets, c.bytes)).collect();
            }
            st.named_quotas[i].resize(t.ir.quotas.len(), 0);
            for (qi, (_, q)) in t.ir.quotas.iter().enumerate() {
                if st.named_quotas[i][qi] == 0 {
                    st.named_quotas[i][qi] = q.used;
                }
            }
        }
        if st.rng == 0 {
            st.rng = 0x853c_49e6_748f_ea9b;
        }
        if st.meta_rng == 0 {
            st.meta_rng = crate::random::seed();
        }
    }

    /// Run a packet through the base chains of a hook. Only chains of families that see this
    /// packet run (ip: IPv4, ip6: IPv6, inet: both, netdev and bridge: all).
    pub fn process(&mut self, hook: ir::Hook, p: &mut Pkt) -> Decision {
        let n = self.rs.hooks[hook as usize].len();
        for i in 0..n {
            let h = self.rs.hooks[hook as usize][i];
            let before = p.meta.fwd;
            match self.process_base(h, p) {
                // `fwd`: the packet has left, no later chain sees it
                Decision::Accept if p.meta.fwd.is_some() && p.meta.fwd != before => {
                    return Decision::Accept
                }
                Decision::Accept => continue,
                d => return d,
            }
        }
        Decision::Accept
    }

    /// Run a packet through one base chain (one entry of `rs.hooks`); Accept when the chain's
    /// family does not see the packet. The stateful layer calls this chain by chain, with
    /// connection tracking and NAT between them.
    pub fn process_base(&mut self, h: HookEntry, p: &mut Pkt) -> Decision {
        let l3_bad = p.pm.malformed.filter(|m| m.is_l3());
        if let Some(m) = l3_bad {
            // the network header cannot be trusted: the chain's policy decides
            if h.policy == Policy::Drop {
                return Decision::Drop(DropReason::Malformed(m));
            }
            return Decision::Accept;
        }
        let sees = match h.family {
            ir::Family::Ip => p.pm.l3 == L3::Ipv4,
            ir::Family::Ip6 => p.pm.l3 == L3::Ipv6,
            ir::Family::Inet => matches!(p.pm.l3, L3::Ipv4 | L3::Ipv6),
            ir::Family::Arp => p.pm.l3 == L3::Other(0x0806),
            _ => true,
        };
        if !sees {
            return Decision::Accept;
        }
        self.st.hook = Some(h.hook);
        p.meta.hook = Some(h.hook);
        self.run_chain(h.table, h.chain, p)
    }

    /// The next candidate rule at or after priority `from` in a chain.
    #[inline]
    fn next_rule(&mut self, ti: usize, ci: usize, from: u32, p: &Pkt) -> Option<(u32, u32)> {
        let t = &self.rs.tables[ti];
        let c = &t.chains[ci];
        let st = &mut self.st;
        // after a header write the classifier's key (read from the parsed headers) is stale:
        // the rest of this packet's walk is linear
        if p.meta.nwrites > 0 {
            return linear_next(t, c, from, p, st);
        }
        match self.rs.mode {
            Mode::Compiled => match p.pm.l3 {
                L3::Ipv4 => c.v4.first_match(&p.key4(), from, |slot| {
                    leading_ok(t, c.slots[slot as usize].as_ref().unwrap(), p, st)
                }),
                L3::Ipv6 => c.v6.first_match(&p.key6(), from, |slot| {
                    leading_ok(t, c.slots[slot as usize].as_ref().unwrap(), p, st)
                }),
                _ => linear_next(t, c, from, p, st),
            },
            Mode::Linear => linear_next(t, c, from, p, st),
        }
    }

    /// The first rule of a chain whose leading matches accept the packet (its counter id):
    /// what a classifier answers, without running any statement. Used by benchmarks and
    /// differential tests.
    pub fn first_candidate(&mut self, ti: usize, ci: usize, p: &Pkt) -> Option<usize> {
        let (_, slot) = self.next_rule(ti, ci, 0, p)?;
        Some(self.rs.tables[ti].chains[ci].gids[slot as usize] as usize)
    }

    fn run_chain(&mut self, ti: usize, base: usize, p: &mut Pkt) -> Decision {
        let mut stack: [(usize, u32); MAX_STACK + 1] = [(0, 0); MAX_STACK + 1];
        let mut depth = 0usize;
        let mut cur = base;
        let mut from = 0u32;
        let policy = || match self_policy(&self.rs, ti, base) {
            Policy::Accept => Decision::Accept,
            Policy::Drop => Decision::Drop(DropReason::Policy(ti, base)),
        };
        let policy = policy();
        loop {
            let next = self.next_rule(ti, cur, from, p);
            let Some((prio, slot)) = next else {
                if depth == 0 {
                    return policy;
                }
                depth -= 1;
                (cur, from) = stack[depth];
                continue;
            };
            from = prio.saturating_add(1);
            match self.exec_rule(ti, cur, slot, p) {
                Outcome::Next => {}
                Outcome::Reject => {
                    let gid = self.rs.tables[ti].chains[cur].slots[slot as usize]
                        .as_ref()
                        .unwrap()
                        .gid;
                    return Decision::Drop(DropReason::Reject(gid));
                }
                Outcome::Verdict(v) => match v {
                    Verdict::Accept => return Decision::Accept,
                    Verdict::Drop => {
                        let gid = self.rs.tables[ti].chains[cur].slots[slot as usize]
                            .as_ref()
                            .unwrap()
                            .gid;
                        return Decision::Drop(DropReason::Rule(gid));
                    }
                    Verdict::Continue => {}
                    Verdict::Return => {
                        if depth == 0 {
                            return policy;
                        }
                        depth -= 1;
                        (cur, from) = stack[depth];
                    }
                    Verdict::Jump(c) => {
                        if depth >= MAX_STACK {
                            // the checker refuses deeper rulesets; a defensive stop
                            return Decision::Drop(DropReason::Policy(ti, base));
                        }
                        stack[depth] = (cur, from);
                        depth += 1;
                        cur = c;
                        from = 0;
                    }
                    Verdict::Goto(c) => {
                        cur = c;
                        from = 0;
                    }
                },
            }
        }
    }

    /// Run a candidate rule's items after its leading matches.
    fn exec_rule(&mut self, ti: usize, ci: usize, slot: u32, p: &mut Pkt) -> Outcome {
        let rs = &self.rs;
        let st = &mut self.st;
        let t = &rs.tables[ti];
        let r = t.chains[ci].slots[slot as usize].as_ref().unwrap();
        let bytes = p.bytes();
        if let Some(v) = r.terminal {
            let h = &mut st.rule_hits[r.gid];
            h.0 += 1;
            h.1 += bytes;
            return Outcome::Verdict(v);
        }
        for (ei, e) in r.exprs[r.first_stmt..].iter().enumerate() {
            // a map choosing one of the table's objects: the chosen object's statement runs
            let e = match e {
                CExpr::ObjStmt(o) => {
                    match crate::objects::choose(t, &o.key, &o.map, &o.stmts, p, st) {
                        Some(chosen) => chosen,
                        None => return Outcome::Next,
                    }
                }
                e => e,
            };
            match e {
                CExpr::Cmp { .. } | CExpr::In { .. } | CExpr::Match { .. } => {
                    if !eval_item(t, e, p, st) {
                        return Outcome::Next;
                    }
                }
                CExpr::Vmap { key, map } => {
                    let mut kv = [0u128; MAX_KEY];
                    let Some(n) = p.key(key, st, &mut kv) else {
                        return Outcome::Next;
                    };
                    match set_get(t, map, &kv[..n], st, p.now_ns) {
                        Some(MapValue::Verdict(v)) => {
                            let v = *v;
                            let h = &mut st.rule_hits[r.gid];
                            h.0 += 1;
                            h.1 += bytes;
                            return Outcome::Verdict(v);
                        }
                        _ => return Outcome::Next,
                    }
                }
                CExpr::Verdict(v) => {
                    let h = &mut st.rule_hits[r.gid];
                    h.0 += 1;
                    h.1 += bytes;
                    return Outcome::Verdict(*v);
                }
                CExpr::Counter { named } => {
                    if let Some(i) = named {
                        let c = &mut st.named_counters[ti][*i];
                        c.0 += 1;
                        c.1 += bytes;
                    }
                }
                CExpr::Log(l) => {
                    st.log_count += 1;
                    if st.logs.len() < MAX_LOG_LINES {
                        st.logs.push(format!(
                            "{}{} rule \"{}\" len={}",
                            l.prefix.as_deref().unwrap_or(""),
                            if l.prefix.is_some() { "" } else { "weir:" },
                            r.text,
                            bytes
                        ));
                    }
                }
                CExpr::Limit { limit, slot } => {
                    let pass = match st.shared.as_deref().and_then(|s| s.limits.get(*slot)) {
                        Some(b) => {
                            // a poisoned lock held a bucket whose update was cut short: the
                            // bucket is still a valid state
                            let mut b = b.lock().unwrap_or_else(|e| e.into_inner());
                            limit_pass(&mut b, limit, p.now_ns, bytes)
                        }
                        None => limit_pass(&mut st.limits[*slot], limit, p.now_ns, bytes),
                    };
                    if !pass {
                        return Outcome::Next;
                    }
                }
                CExpr::Quota { quota, slot } => {
                    if !crate::objects::quota(t, ti, quota, *slot, st, bytes) {
                        return Outcome::Next;
                    }
                }
                CExpr::ObjRef(o) => {
                    if !crate::objects::objref(t, ti, o, p, st, bytes) {
                        return Outcome::Next;
                    }
                }
                CExpr::Reject(rj) => {
                    // the dependencies nft puts before a reject of a given kind: `meta nfproto
                    // ipv4` (icmp), `meta nfproto ipv6` (icmpv6), `meta l4proto tcp` (tcp
                    // reset); a packet of another kind does not match the rule
                    let applies = match rj {
                        ir::Reject::Icmp(_) => p.pm.l3 == L3::Ipv4,
                        ir::Reject::Icmp6(_) => p.pm.l3 == L3::Ipv6,
                        ir::Reject::TcpReset => p.is_ip() && p.pm.l4proto == 6,
                        _ => true,
                    };
                    if !applies {
                        return Outcome::Next;
                    }
                    let h = &mut st.rule_hits[r.gid];
                    h.0 += 1;
                    h.1 += bytes;
                    return Outcome::Reject;
                }
                CExpr::Assign { field, value } => {
                    // nftables: a failed lookup stops the rule
                    let Some(v) = value_of(t, value, p, st) else {
                        return Outcome::Next;
                    };
                    match field {
                        Field::MetaMark => p.meta.mark = v as u32,
                        Field::MetaPriority => p.meta.priority = v as u32,
                        Field::MetaNftrace => p.meta.nftrace = v & 1 != 0,
                        Field::CtMark => p.meta.ct_mark = v as u32,
                        // nft_ct_set_eval: without a connection, nothing
                        Field::CtLabel if p.meta.has_ct => p.meta.ct_labels |= 1u128 << (v & 127),
                        Field::CtLabel => {}
                        // nft_ct_set_zone_eval: a packet not tracked yet (nor untracked)
                        // gets the zone, once
                        // (an untracked packet has no conntrack entry either: `notrack`
                        // before `ct zone set` is undone, the packet tracked in the zone)
                        Field::CtZone | Field::CtOriginalZone | Field::CtReplyZone => {
                            if !p.meta.has_ct && p.meta.ct_zone.is_none() {
                                p.meta.notrack = false;
                                p.meta.ct_zone = Some(weir_conntrack::Zone {
                                    id: v as u16,
                                    dir: match field {
                                        Field::CtOriginalZone => weir_conntrack::Zone::ORIGINAL,
                                        Field::CtReplyZone => weir_conntrack::Zone::REPLY,
                                        _ => weir_conntrack::Zone::DEFAULT.dir,
                                    },
                                });
                            }
                        }
                        f if f.is_header() && p.field(*f).is_some() => push_write(p, st, *f, v),
                        // `ether saddr set` without an Ethernet header (a raw-IP frame): nft
                        // puts `meta iiftype ether` before the write, the rule stops; so for
                        // a header the packet does not carry (`ip daddr set` on IPv6 in an
                        // inet table: `meta nfproto ipv4`; `udp dport set` on TCP: `meta
                        // l4proto udp`; a later fragment: the write itself breaks)
                        f if f.is_header() => return Outcome::Next,
                        _ => st.rewrites_skipped += 1,
                    }
                }
                CExpr::SetTcpOption {
                    kind,
                    offset,
                    len,
                    value,
                } => {
                    let Some(v) = value_of(t, value, p, st) else {
                        return Outcome::Next;
                    };
                    // nft_exthdr_tcp_set_eval: no TCP header, or the field beyond the
                    // option: the rule stops; no such option: nothing to do
                    if !crate::tcp_strip::can_set(p.frame, p.pm, *kind, *offset, *len) {
                        return Outcome::Next;
                    }
                    let packed = crate::tcp_strip::pack(*kind, *offset, *len, v);
                    push_write(p, st, Field::TcpOptionField, packed);
                }
                CExpr::SetRaw {
                    base,
                    offset,
                    len,
                    value,
                } => {
                    // the kernel's load and write fail past the packet: the rule stops
                    let v = value_of(t, value, p, st);
                    let Some(v) = v.filter(|_| {
                        crate::raw_write::window_ok(p.frame, p.pm, *base, *offset, *len)
                    }) else {
                        return Outcome::Next;
                    };
                    let packed = crate::raw_write::pack(*base, *offset, *len, v);
                    push_write(p, st, Field::RawPayload, packed);
                }
                // (resolved to the chosen statement above)
                CExpr::ObjStmt(_) => {}
                // nft_notrack_eval: a packet with a conntrack template (`ct zone set` ran)
                // is left as it is
                CExpr::Notrack if p.meta.ct_zone.is_some() => {}
                CExpr::Notrack => p.meta.notrack = true,
                CExpr::Last => {
                    if let Some(l) = st.rule_last.get_mut(r.gid) {
                        *l = p.now_ns.max(1);
                    }
                }
                CExpr::Dup(d) if !crate::stateful::dup::eval(t, d, p, st) => return Outcome::Next,
                CExpr::Dup(_) => {}
                CExpr::Tproxy(x) if !crate::stateful::tproxy::eval(&rs.tproxy, t, x, p, st) => {
                    return Outcome::Next
                }
                CExpr::Tproxy(_) => {}
                CExpr::Synproxy(info) => match crate::synproxy::act(p.frame, p.pm) {
                    crate::synproxy::Act::NotTcp => return Outcome::Next,
                    crate::synproxy::Act::Pass => {}
                    act => {
                        let h = &mut st.rule_hits[r.gid];
                        h.0 += 1;
                        h.1 += bytes;
                        if act == crate::synproxy::Act::Drop {
                            return Outcome::Verdict(Verdict::Drop);
                        }
                        p.meta.synproxy = Some(*info);
                        return Outcome::Verdict(Verdict::Accept);
                    }
                },
                CExpr::Queue(_) | CExpr::QueueTo { .. } => {
                    let Some(q) = crate::stateful::queue_of(t, e, p, st) else {
                        return Outcome::Next;
                    };
                    p.meta.queue = Some(q);
                    let h = &mut st.rule_hits[r.gid];
                    h.0 += 1;
                    h.1 += bytes;
                    // NF_QUEUE: the base chain ends here
                    return Outcome::Verdict(Verdict::Accept);
                }
                CExpr::Fwd { dev, neigh } => {
                    let neigh = match neigh {
                        Some((family, addr)) => {
                            // nft_fwd_neigh: a packet of the other family stops the rule
                            // (NFT_BREAK)
                            let l3 = if *family == 6 { L3::Ipv6 } else { L3::Ipv4 };
                            if p.pm.l3 != l3 {
                                return Outcome::Next;
                            }
                            let Some(a) = value_of(t, addr, p, st) else {
                                return Outcome::Next;
                            };
                            Some(FwdNeigh {
                                family: *family,
                                addr: a,
                            })
                        }
                        None => None,
                    };
                    // a failed map lookup stops the rule
                    let Some(d) = value_of(t, dev, p, st) else {
                        return Outcome::Next;
                    };
                    p.meta.fwd = Some(Fwd { dev: d, neigh });
                    let h = &mut st.rule_hits[r.gid];
                    h.0 += 1;
                    h.1 += bytes;
                    // NF_STOLEN: nothing after it runs; the base chain ends here
                    return Outcome::Verdict(Verdict::Accept);
                }
                CExpr::Nat { nat, addr, port } => {
                    // `snat ip to` / `dnat ip6 to` in an inet table: nothing for the other
                    // family (nft_nat_inet_eval), and the rule goes on
                    let fam = match p.pm.l3 {
                        L3::Ipv4 => 4,
                        L3::Ipv6 => 6,
                        _ => 0,
                    };
                    // (the addresses and ports are looked up first: a map lookup that fails
                    // stops the rule whatever the family, as the kernel's lookup expression
                    // runs before the nat expression)
                    let other_family = nat.family.is_some_and(|f| f != fam);
                    // (lo, hi) and, for an address . port map, the port range
                    #[allow(clippy::type_complexity)]
                    let range = |v: &CValue,
                                 p: &Pkt,
                                 st: &mut State|
                     -> Option<(u128, u128, Option<(u128, u128)>)> {
                        match v {
                            CValue::Const(c) => {
                                c.first().map(|&a| (a, a, c.get(1).map(|&p| (p, p))))
                            }
                            CValue::Range(a, b) => Some((*a, *b, None)),
                            CValue::Key(k) => {
                                let mut kv = [0u128; MAX_KEY];
                                p.key(k, st, &mut kv).map(|_| (kv[0], kv[0], None))
                            }
                            CValue::Map { key, map, comps } => {
                                let mut kv = [0u128; MAX_KEY];
                                let n = p.key(key, st, &mut kv)?;
                                let comps = match map {
                                    SetSlot::Named(i) if *comps == 0 => {
                                        t.ir.sets.get(*i).map_or(1, |s| s.data_types.len())
                                    }
                                    _ => *comps,
                                };
                                match set_get(t, map, &kv[..n], st, p.now_ns) {
                                    // with a range in the data, each component is lo, hi
                                    Some(MapValue::Value(v))
                                        if comps > 0 && v.len() == 2 * comps =>
                                    {
                                        Some((v[0], v[1], v.get(2..4).map(|r| (r[0], r[1]))))
                                    }
                                    Some(MapValue::Value(v)) => {
                                        v.first().map(|&a| (a, a, v.get(1).map(|&p| (p, p))))
                                    }
                                    _ => None,
                                }
                            }
                        }
                    };
                    let mut a = None;
                    let mut pr = nat.port_range;
                    if let Some(v) = addr {
                        // a failed map lookup stops the rule (nftables: NFT_BREAK)
                        let Some((lo, hi, port)) = range(v, p, st) else {
                            return Outcome::Next;
                        };
                        a = Some((lo, hi));
                        if let (None, Some((plo, phi))) = (pr, port) {
                            pr = Some((plo as u16, phi as u16));
                        }
                    }
                    if let Some(v) = port {
                        let Some((lo, hi, _)) = range(v, p, st) else {
                            return Outcome::Next;
                        };
                        pr = Some((lo as u16, hi as u16));
                    }
                    if other_family {
                        continue;
                    }
                    p.meta.nat = Some(NatAction {
                        kind: nat.kind,
                        addr: a,
                        port: pr,
                        random: nat.random || nat.fully_random,
                        persistent: nat.persistent,
                        netmap: nat.netmap,
                    });
                    let h = &mut st.rule_hits[r.gid];
                    h.0 += 1;
                    h.1 += bytes;
                    return Outcome::Verdict(Verdict::Accept);
                }
                CExpr::Stateful(e) => match &**e {
                    ir::Expr::FlowAdd(ft) => p.meta.flow_add = Some((ti as u16, *ft as u16)),
                    ir::Expr::SetOp(op) => {
                        if !dynset_op(t, op, p, st, bytes) {
                            return Outcome::Next;
                        }
                    }
                    ir::Expr::CtCount { count, over } => match p.conns {
                        Some(conns) => {
                            let n = st.conncount.entry((r.gid, ei)).or_default().add(
                                &p.conn_tuple(),
                                conns,
                                p.now_ns,
                            );
                            // nft_connlimit: the rule stops when (count > N) differs from
                            // `over`
                            if (n as u64 > *count as u64) != *over {
                                return Outcome::Next;
                            }
                        }
                        None => st.stateful_skipped += 1,
                    },
                    ir::Expr::CtHelper { helper, l4proto } => {
                        // nft_ct_helper_obj_eval: the helper's protocol must be the packet's
                        if p.pm.l4proto == *l4proto {
                            if let Some(k) = crate::helper::Kind::of_name(helper, *l4proto) {
                                p.meta.helper = k as u8;
                                // a connection not confirmed yet takes it now (`ct helper`
                                // reads it in the rules after)
                                if p.meta.ct_unconfirmed && p.meta.ct.helper == 0 {
                                    p.meta.ct.helper = k as u8;
                                }
                            }
                        }
                    }
                    ir::Expr::CtTimeout { obj, l4proto } => {
                        if p.pm.l4proto == *l4proto {
                            p.meta.ct_timeout = Some((ti as u16, *obj as u16));
                        }
                    }
                    ir::Expr::CtExpect(x) => {
                        // nft_ct_expect_obj_eval: NFT_BREAK without a connection not yet
                        // confirmed
                        if !p.meta.ct_unconfirmed {
                            return Outcome::Next;
                        }
                        p.meta.ct_expect = Some(*x);
                    }
                    ir::Expr::ResetTcpOption(kind) => {
                        use crate::tcp_strip::{check, Strip};
                        match check(p.frame, p.pm, *kind) {
                            Strip::Break => return Outcome::Next,
                            Strip::Drop => return Outcome::Verdict(Verdict::Drop),
                            Strip::Absent => {}
                            Strip::Found => {
                                push_write(p, st, Field::TcpOption, *kind as u128);
                            }
                        }
                    }
                    _ => st.stateful_skipped += 1,
                },
            }
        }
        let h = &mut st.rule_hits[r.gid];
        h.0 += 1;
        h.1 += bytes;
        Outcome::Next
    }
}

pub(crate) use crate::limit::limit_pass;

/// Record a header write for the stateful layer to make when the base chain ends (one more
/// than [`MAX_WRITES`] is counted as skipped).
fn push_write(p: &mut Pkt, st: &mut State, f: Field, v: u128) {
    let n = p.meta.nwrites as usize;
    if n < MAX_WRITES {
        p.meta.writes[n] = Some((f, v));
        p.meta.nwrites += 1;
    } else {
        st.rewrites_skipped += 1;
    }
}

/// The value a statement's expression gives (the first component of a map's data); None when
/// the key cannot be built or the map has no element for it (the rule stops).
#[inline]
pub(crate) fn value_of(t: &CTable, v: &CValue, p: &Pkt, st: &mut State) -> Option<u128> {
    match v {
        CValue::Const(c) => c.first().copied(),
        CValue::Range(a, _) => Some(*a),
        CValue::Key(k) => {
            let mut kv = [0u128; MAX_KEY];
            p.key(k, st, &mut kv).map(|_| kv[0])
        }
        CValue::Map { key, map, .. } => {
            let mut kv = [0u128; MAX_KEY];
            let n = p.key(key, st, &mut kv)?;
            match set_get(t, map, &kv[..n], st, p.now_ns) {
                Some(MapValue::Value(v)) => v.first().copied(),
                _ => None,
            }
        }
    }
}

fn self_policy(rs: &Compiled, ti: usize, ci: usize) -> Policy {
    rs.tables[ti].chains[ci]
        .base
        .as_ref()
        .map(|b| b.policy)
        .unwrap_or(Policy::Accept)
}

fn linear_next(t: &CTable, c: &CChain, from: u32, p: &Pkt, st: &mut State) -> Option<(u32, u32)> {
    for (_, &s) in c.order.range(from..) {
        let r = c.slots[s as usize].as_ref().unwrap();
        let fam_ok = match p.pm.l3 {
            L3::Ipv4 => r.v4,
            L3::Ipv6 => r.v6,
            _ => true,
        };
        if fam_ok && leading_ok(t, r, p, st) {
            return Some((r.prio, s));
        }
    }
    None
}
