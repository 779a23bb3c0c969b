//! The checked ruleset: what the engine compiles. Names are resolved to indices, constants are
//! numbers of the right width, and every match has one shape: "key (after an optional mask) is
//! (or is not) in a set of ranges". Nothing here refers to the source text except spans and the
//! rule text kept for counters and traces.

use crate::source::{SourceMap, Span};
use std::sync::Arc;
use weir_wire::{DataType, Field};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    Ip,
    Ip6,
    Inet,
    Arp,
    Bridge,
    Netdev,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Ip => "ip",
            Family::Ip6 => "ip6",
            Family::Inet => "inet",
            Family::Arp => "arp",
            Family::Bridge => "bridge",
            Family::Netdev => "netdev",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hook {
    Ingress,
    Prerouting,
    Input,
    Forward,
    Output,
    Postrouting,
    Egress,
}

impl Hook {
    pub fn name(self) -> &'static str {
        match self {
            Hook::Ingress => "ingress",
            Hook::Prerouting => "prerouting",
            Hook::Input => "input",
            Hook::Forward => "forward",
            Hook::Output => "output",
            Hook::Postrouting => "postrouting",
            Hook::Egress => "egress",
        }
    }

    pub fn from_name(s: &str) -> Option<Hook> {
        Some(match s {
            "ingress" => Hook::Ingress,
            "prerouting" => Hook::Prerouting,
            "input" => Hook::Input,
            "forward" => Hook::Forward,
            "output" => Hook::Output,
            "postrouting" => Hook::Postrouting,
            "egress" => Hook::Egress,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChainType {
    Filter,
    Nat,
    Route,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    Accept,
    Drop,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaseChain {
    pub ty: ChainType,
    pub hook: Hook,
    pub priority: i32,
    pub policy: Policy,
    /// The devices a `netdev` base chain (or an `inet` ingress chain) is bound to: `device
    /// "eth0"` or `devices = { "eth0", "eth1" }`; a name ending in `*` stands for every device
    /// whose name starts with what comes before it. Empty elsewhere.
    pub devices: Vec<String>,
}

impl BaseChain {
    /// Whether the chain is bound to device `dev`.
    pub fn binds(&self, dev: &str) -> bool {
        self.devices.iter().any(|d| device_matches(d, dev))
    }
}

/// Whether device name `pattern` (a name, or a prefix followed by `*`) stands for `dev`.
pub fn device_matches(pattern: &str, dev: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => dev.starts_with(prefix),
        None => pattern == dev,
    }
}

/// A verdict. Jump and goto name a chain of the same table by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    Accept,
    Drop,
    Continue,
    Return,
    Jump(usize),
    Goto(usize),
}

/// One component of a key: a field, or a hash/number generator, with an optional mask and shift
/// applied (`tcp flags & (syn|ack)`, `meta mark & 0xff00 >> 8`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPart {
    pub src: Source,
    /// Applied first: `value & and ^ xor`. `and` is all ones when absent.
    pub and: u128,
    pub xor: u128,
    /// Then shifted: positive = right shift, negative = left shift.
    pub shift: i8,
    pub dtype: DataType,
}

impl KeyPart {
    pub fn field(f: Field) -> KeyPart {
        KeyPart {
            src: Source::Field(f),
            and: u128::MAX,
            xor: 0,
            shift: 0,
            dtype: f.datatype(),
        }
    }

    pub fn is_plain(&self) -> bool {
        self.and == u128::MAX && self.xor == 0 && self.shift == 0
    }
}

/// A bitwise operation between two values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BitOp {
    And,
    Or,
    Xor,
}

/// Where a key component's value comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Field(Field),
    /// Two values combined (`meta mark | iif`, `ct mark & 0xffff0000 | meta mark & 0xffff`,
    /// `ip dscp << 2 | 0x10`: nft's bitwise with a second register, or after a shift); the
    /// part's own mask and shift apply to the result.
    Binop {
        op: BitOp,
        a: Box<KeyPart>,
        b: Box<KeyPart>,
    },
    /// A constant (one side of a [`Source::Binop`]).
    Const(u128),
    /// `jhash key mod N seed S offset O`
    Jhash {
        key: Vec<KeyPart>,
        modulus: u32,
        seed: u32,
        offset: u32,
    },
    /// `symhash mod N offset O`
    Symhash {
        modulus: u32,
        offset: u32,
    },
    /// `numgen inc|random mod N offset O`
    Numgen {
        random: bool,
        modulus: u32,
        offset: u32,
    },
    /// A TCP option's or an SCTP chunk's bytes (nft_exthdr's `tcpopt` and `sctp`): in the
    /// first option or chunk of `kind` in the packet's TCP options (`proto` 6) or SCTP
    /// chunks (132), `len` bytes at `offset`, big-endian; with `present`, 1 when there is
    /// one and 0 when not (`tcp option sack-perm exists`).
    Exthdr {
        proto: u8,
        kind: u8,
        offset: u8,
        len: u8,
        present: bool,
    },
    /// Raw payload (`@th,16,16`): `len` bits at `offset` bits from a header's start (`base`
    /// 0 link layer, 1 network, 2 transport, 3 the transport's payload), big-endian.
    Raw {
        base: u8,
        offset: u16,
        len: u8,
    },
    /// The sender's operating system as passive OS fingerprinting tells it from a TCP SYN
    /// (`osf [ttl loose|skip] name|version`, nft_osf): the genre (`version`: `genre:version`)
    /// as a 16-byte string, "unknown" when no fingerprint matches; `ttl` 0 compares the
    /// TTL exactly, 1 allows it lower (`loose`), 2 not at all (`skip`).
    Osf {
        ttl: u8,
        version: bool,
    },
    /// A route lookup (`fib saddr . iif oif`): `flags` as nft's `NFTA_FIB_F_*` bits
    /// ([`fib`]: saddr, daddr, mark, iif, oif, present), `result` as `NFT_FIB_RESULT_*`
    /// (1 the output device's index, 2 its name, 3 the address type). With
    /// [`fib::F_PRESENT`] the oif lookup gives 1 when it finds a device, 0 when not
    /// (`fib daddr check exists`).
    Fib {
        flags: u8,
        result: u8,
    },
    /// A field of a tunnel's inner packet (`vxlan ip saddr`: `field` is `ip saddr`, read in
    /// the packet the VXLAN header carries) or of the tunnel's own header (`vxlan vni`,
    /// `gre version`), found as the kernel's `nft_inner` finds it
    /// ([`weir_wire::tunnel::Inner`]); when it gives up the rule breaks. GRE's own fields
    /// are the outer transport header's.
    Inner {
        tunnel: weir_wire::tunnel::Tunnel,
        field: Field,
    },
}

/// nftables' `fib` flags and results, as the kernel numbers them (`nf_tables.h`).
pub mod fib {
    pub const F_SADDR: u8 = 1;
    pub const F_DADDR: u8 = 2;
    pub const F_MARK: u8 = 4;
    pub const F_IIF: u8 = 8;
    pub const F_OIF: u8 = 16;
    pub const F_PRESENT: u8 = 32;
    pub const RESULT_OIF: u8 = 1;
    pub const RESULT_OIFNAME: u8 = 2;
    pub const RESULT_ADDRTYPE: u8 = 3;
}

/// A key: one or more components (a concatenation).
pub type Key = Vec<KeyPart>;

/// One element: an inclusive range per key component.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Element {
    pub key: Vec<(u128, u128)>,
    pub data: Option<MapValue>,
    /// Milliseconds, when the element has its own timeout.
    pub timeout_ms: Option<u64>,
}

/// The data side of a map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapValue {
    Verdict(Verdict),
    /// A value (or a concatenation of values, e.g. address . port for dnat).
    Value(Vec<u128>),
}

/// A set or map (named or anonymous).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Set {
    pub name: String,
    pub key_types: Vec<DataType>,
    /// For maps: the data types; `None` data type list with `verdict_map` for vmaps.
    pub data_types: Vec<DataType>,
    pub is_map: bool,
    pub verdict_map: bool,
    /// An object map (`type ipv4_addr : counter`): the kind of its objects; each element's
    /// data is the object's index in the table's list of that kind.
    pub objects: Option<ObjKind>,
    pub interval: bool,
    pub dynamic: bool,
    pub constant: bool,
    pub timeout_ms: Option<u64>,
    pub size: Option<u64>,
    pub elements: Vec<Element>,
    /// The catch-all element (`*`, its key empty): what a lookup finds when no element of
    /// `elements` has the key (nft_set_catchall_lookup).
    pub catchall: Option<Element>,
    pub span: Span,
    /// The set's handle in its table (0 for anonymous sets).
    pub handle: u64,
    /// Its elements as the commands wrote them, in order (with their counters, comments
    /// and timeouts): what the listing prints.
    pub listed: Vec<crate::ast::Elem>,
}

/// A reference from a rule to a set: an index into the table's sets, or an inline set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetRef {
    Named(usize),
    Anon(Arc<Set>),
}

/// A match: `key [& mask] in set` (or not in it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Match {
    pub key: Key,
    pub negate: bool,
    pub set: SetRef,
}

/// An expression that yields a value for a statement (`set`, nat `to`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValueExpr {
    Const(Vec<u128>),
    /// An address or port range (NAT `to 198.18.0.1-198.18.0.9`).
    Range(u128, u128),
    Key(Key),
    Map {
        key: Key,
        map: SetRef,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateUnit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
}

impl RateUnit {
    /// As nft writes it (`second`, `minute`, ...).
    pub fn name(self) -> &'static str {
        match self {
            RateUnit::Second => "second",
            RateUnit::Minute => "minute",
            RateUnit::Hour => "hour",
            RateUnit::Day => "day",
            RateUnit::Week => "week",
        }
    }

    pub fn seconds(self) -> u64 {
        match self {
            RateUnit::Second => 1,
            RateUnit::Minute => 60,
            RateUnit::Hour => 3600,
            RateUnit::Day => 86400,
            RateUnit::Week => 604800,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    /// Packets (or bytes when `bytes`) per `unit`.
    pub rate: u64,
    pub unit: RateUnit,
    pub bytes: bool,
    pub burst: u64,
    /// `over`: the statement matches while the rate is exceeded.
    pub over: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quota {
    pub bytes: u64,
    pub used: u64,
    pub over: bool,
    /// A named quota of the table.
    pub named: Option<usize>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reject {
    /// Default: ICMP port unreachable (ICMPv6 for IPv6), whatever the protocol (nft emits
    /// `reject type 0 code 3` in ip tables, `type 2 code 1`, icmpx port-unreachable, in inet).
    Default,
    TcpReset,
    Icmp(u8),
    Icmp6(u8),
    /// icmpx: family-independent code.
    Icmpx(u8),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NatKind {
    Snat,
    Dnat,
    Masquerade,
    Redirect,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nat {
    pub kind: NatKind,
    /// 4 or 6 when the family was given or implied.
    pub family: Option<u8>,
    pub addr: Option<ValueExpr>,
    /// A port, a port range (lo, hi), or from an expression.
    pub port: Option<ValueExpr>,
    pub port_range: Option<(u16, u16)>,
    pub random: bool,
    pub fully_random: bool,
    pub persistent: bool,
    /// `snat|dnat ip prefix to ...` (`NF_NAT_RANGE_NETMAP`): the address range is a prefix
    /// the translation maps onto, keeping the host part of the address.
    pub netmap: bool,
}

/// A `fwd` statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fwd {
    /// The output device, as an interface-name value (`weir_wire::field::ifname_value`): a
    /// constant, `meta iifname` / `meta oifname` (what `fwd to meta iif` / `meta oif` name), or
    /// an inline map to device names.
    pub dev: ValueExpr,
    /// `fwd ip|ip6 to ADDR device DEV`: the family (4 or 6) and the next hop's address, whose
    /// link-layer address the neighbour table gives (nft_fwd_neigh).
    pub neigh: Option<(u8, ValueExpr)>,
}

/// A `dup` statement (nft_dup_ipv4 / nft_dup_ipv6, nft_dup_netdev).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dup {
    /// `dup to ADDR [device DEV]` (ip and ip6 tables): the family (4 or 6) and the gateway
    /// the copy is routed to. None in the netdev family.
    pub addr: Option<(u8, ValueExpr)>,
    /// The device, as an interface-name value (as [`Fwd::dev`]): `device DEV` of the ip
    /// families (the copy leaves by it), or the netdev family's `dup to DEV`.
    pub dev: Option<ValueExpr>,
}

/// A `tproxy` statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tproxy {
    /// 4 or 6 (the table's or the one the statement names), 0: either (`tproxy to :PORT` in
    /// an inet table).
    pub family: u8,
    pub addr: Option<ValueExpr>,
    pub port: Option<ValueExpr>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetOpKind {
    Add,
    Update,
    Delete,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetOp {
    pub op: SetOpKind,
    pub set: usize,
    pub key: Key,
    pub timeout_ms: Option<u64>,
    /// Per-element statements (`limit`, `counter`): the element's own state.
    pub limit: Option<Limit>,
    pub counter: bool,
    /// `ct count [over] N` (nft_connlimit in the element): (N, over).
    pub ct_count: Option<(u32, bool)>,
    /// A map's value (`update @m { ip saddr : ct mark }`, nft_dynset's `sreg_data`): the data
    /// a new element gets.
    pub data: Option<ValueExpr>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Log {
    pub prefix: Option<String>,
    pub level: Option<String>,
    pub group: Option<u16>,
}

/// One item of a rule, evaluated in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    Match(Match),
    /// `ct count [over] N`: a stateful match.
    CtCount {
        count: u32,
        over: bool,
    },
    Verdict(Verdict),
    Vmap {
        key: Key,
        map: SetRef,
    },
    /// An anonymous counter (`counter`) or a named one (`counter name x`).
    Counter {
        named: Option<usize>,
    },
    Log(Log),
    Limit(Limit),
    Quota(Quota),
    Reject(Reject),
    /// `meta mark set ...`, `ct mark set ...`, `ip saddr set ...`
    Assign {
        field: Field,
        value: ValueExpr,
    },
    Nat(Nat),
    Notrack,
    /// `fwd to DEV` / `fwd ip|ip6 to ADDR device DEV` (netdev ingress and egress only;
    /// nft_fwd_netdev, nft_fwd_neigh): the packet leaves by that device as it is and its
    /// processing ends (the kernel steals it: no later rule or chain runs).
    Fwd(Fwd),
    /// `dup to ADDR [device DEV]` (ip, ip6) / `dup to DEV` (netdev): a copy of the packet as
    /// it is at this point is sent to the gateway ADDR (untracked, through the output and
    /// postrouting hooks) or out of device DEV as it is; the original goes on unchanged.
    Dup(Dup),
    FlowAdd(usize),
    SetOp(SetOp),
    /// `queue num N`, `queue to N-M`: the packet goes to weir's per-flow processing of that
    /// queue (its profiles, `weir_script`), as the kernel hands it to the program listening
    /// on the NFQUEUE; the base chain ends (as NF_QUEUE ends it).
    Queue(Queue),
    /// `queue to EXPR`: the queue computed per packet (`queue to symhash mod 4`, `queue flags
    /// bypass to jhash ip saddr mod 2 offset 10`, `queue to oifname map { ... }`), as
    /// `nft_queue_sreg_eval` takes its low 16 bits.
    QueueTo {
        num: ValueExpr,
        bypass: bool,
        fanout: bool,
    },
    /// `last [used never|TIME]` (`nft_last`): the rule records when a packet last reached
    /// it. The time given (what `nft list ruleset` wrote) is kept as written; weir's record
    /// starts at the load, as the rule's counters do.
    Last {
        used_ms: Option<u64>,
    },
    /// `synproxy [mss N] [wscale N] [timestamp] [sack-perm]`, or `synproxy name "NAME"` (the
    /// table's object, its settings copied): a TCP SYN is answered with a SYN cookie, the
    /// client's ACK checked and the connection opened to the server in its place
    /// (`nft_synproxy`; input and forward hooks). The packet is stolen; the rule stops for a
    /// packet that is not TCP, and goes on for one that is neither SYN nor ACK.
    Synproxy(Synproxy),
    /// `tproxy [ip|ip6] to [ADDR][:PORT]` (`nft_tproxy`, prerouting): the packet is given to
    /// a transparent local socket, the one of its own connection or one listening on
    /// ADDR:PORT (ADDR: the input device's first address when not given; PORT: the packet's
    /// destination port), and delivered locally; without such a socket the rule stops.
    Tproxy(Tproxy),
    /// A reference to a named stateful object of the table (`limit name "l"`, `counter name
    /// tcp dport map { 443 : "c1" }`, `quota name ip saddr map @m`), as `nft_objref`.
    ObjRef(ObjRef),
    /// A construct weir loads, checks and prints but does not evaluate yet (`ct helper set`):
    /// `weir check` lists it, and `weir run` / `weir replay` refuse the ruleset
    /// ([`Ruleset::refuse_unevaluated`]) rather than pass it over.
    Unevaluated(&'static str),
    /// `ct helper set "NAME"`: the table's `ct helper` object NAME (`type`, `protocol`) given to
    /// the packet's connection if it is new (`nft_ct_helper_obj_eval`). Only helpers weir has
    /// (ftp over tcp, tftp over udp, sip over either) lower to this; others are unevaluated.
    CtHelper {
        helper: String,
        l4proto: u8,
    },
    /// `ct timeout set "NAME"`: the table's `ct timeout` object `obj` (an index into
    /// [`Table::ct_timeouts`]) given to the packet's connection while it is new, when the
    /// packet's protocol is the object's (`nft_ct_timeout_obj_eval`).
    CtTimeout {
        obj: usize,
        l4proto: u8,
    },
    /// `ct expectation set "NAME"`: a new connection expects one from its peer
    /// (`nft_ct_expect_obj_eval`); the rule stops for a packet of a connection already
    /// confirmed, or untracked.
    CtExpect(CtExpectation),
    /// `tcp option KIND FIELD set VALUE` (`tcp option maxseg size set rt mtu`): bytes
    /// `offset..offset + len` of the first option of that kind written
    /// (`nft_exthdr_tcp_set_eval`: an MSS only ever lowered).
    SetTcpOption {
        kind: u8,
        offset: u8,
        len: u8,
        value: ValueExpr,
    },
    /// `reset tcp option KIND`: the first option of that kind in the TCP header turned into
    /// NOPs (nft_exthdr_tcp_strip_eval).
    ResetTcpOption(u8),
    /// A statement chosen per packet among the table's objects of one kind by a map (`ct
    /// helper set tcp dport map { 21 : "ftp" }`, `ct timeout set ... map @m`, `synproxy name
    /// ip saddr map { ... }`): the map's data are indices into `stmts` (the table's objects
    /// of that kind, in order, each as the statement naming it would be); a key not in the
    /// map stops the rule (`nft_objref_map_eval`).
    ObjStmt {
        key: Key,
        map: SetRef,
        stmts: Vec<Expr>,
    },
    /// `@BASE,OFFSET,LEN set VALUE`: raw payload written (nft's `payload write`, with the
    /// load and `bitwise` before it when the bits do not fill whole bytes): `len` bits (at
    /// most 64) at `offset` bits from the header `base` names (as in [`Source::Raw`]).
    SetRaw {
        base: u8,
        offset: u16,
        len: u8,
        value: ValueExpr,
    },
}

/// The kinds of named stateful objects weir evaluates (nft's `NFT_OBJECT_COUNTER` 1,
/// `NFT_OBJECT_QUOTA` 2, `NFT_OBJECT_LIMIT` 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObjKind {
    Counter,
    Quota,
    Limit,
}

impl ObjKind {
    pub fn name(self) -> &'static str {
        match self {
            ObjKind::Counter => "counter",
            ObjKind::Quota => "quota",
            ObjKind::Limit => "limit",
        }
    }
    pub fn from_name(s: &str) -> Option<ObjKind> {
        Some(match s {
            "counter" => ObjKind::Counter,
            "quota" => ObjKind::Quota,
            "limit" => ObjKind::Limit,
            _ => return None,
        })
    }
}

/// Which object of a kind a reference names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjTarget {
    /// The object at this index of the table's list of its kind (`Table::counters`,
    /// `Table::quotas`, `Table::limits`).
    Name(usize),
    /// The key looked up in an object map whose data are such indices (one value an
    /// element); a key not in the map stops the rule (`nft_objref_map_eval`).
    Map { key: Key, map: SetRef },
}

/// A reference to a named object: its state is the table's, shared by every reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjRef {
    pub kind: ObjKind,
    pub target: ObjTarget,
}

/// A `queue` statement with a fixed number or range (one computed by an expression is
/// [`Expr::QueueTo`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Queue {
    /// The queue, or the first of a range (`queue to 2-3`: 2).
    pub first: u16,
    /// The last of the range (`first` for one queue).
    pub last: u16,
    /// `bypass`: with nobody on the queue, the packet is accepted instead of dropped.
    pub bypass: bool,
    /// `fanout`: the range's queues are spread by CPU rather than by connection.
    pub fanout: bool,
}

impl Expr {
    /// True for items that change state or the packet (anything that is not a pure match).
    pub fn is_statement(&self) -> bool {
        !matches!(self, Expr::Match(_))
    }

    /// Whether `f` holds for the item or, for a map choosing among objects
    /// ([`Expr::ObjStmt`]), for one of the statements it can choose.
    pub fn is_or_chooses(&self, f: &dyn Fn(&Expr) -> bool) -> bool {
        f(self) || matches!(self, Expr::ObjStmt { stmts, .. } if stmts.iter().any(f))
    }

    /// Whether the item reads a field `pred` holds for (in a match's or a map's key, or in a
    /// value a statement computes).
    pub fn reads(&self, pred: &dyn Fn(Field) -> bool) -> bool {
        fn key(k: &[KeyPart], pred: &dyn Fn(Field) -> bool) -> bool {
            k.iter().any(|p| match &p.src {
                Source::Field(f) => pred(*f),
                Source::Jhash { key: k, .. } => key(k, pred),
                Source::Binop { a, b, .. } => {
                    key(std::slice::from_ref(&**a), pred) || key(std::slice::from_ref(&**b), pred)
                }
                _ => false,
            })
        }
        let value = |v: &ValueExpr| match v {
            ValueExpr::Key(k) | ValueExpr::Map { key: k, .. } => key(k, pred),
            _ => false,
        };
        let opt = |v: &Option<ValueExpr>| v.as_ref().is_some_and(value);
        match self {
            Expr::Match(m) => key(&m.key, pred),
            Expr::Vmap { key: k, .. } => key(k, pred),
            Expr::Assign { value: v, .. } => value(v),
            Expr::SetOp(s) => key(&s.key, pred) || opt(&s.data),
            Expr::Nat(n) => opt(&n.addr) || opt(&n.port),
            Expr::Tproxy(t) => opt(&t.addr) || opt(&t.port),
            Expr::QueueTo { num, .. } => value(num),
            Expr::ObjStmt { key: k, .. }
            | Expr::ObjRef(ObjRef {
                target: ObjTarget::Map { key: k, .. },
                ..
            }) => key(k, pred),
            _ => false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Unique in the ruleset, stable across incremental edits.
    pub handle: u64,
    /// The rule as written (tokens joined by single spaces).
    pub text: String,
    pub comment: Option<String>,
    pub span: Span,
    pub exprs: Vec<Expr>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    pub name: String,
    pub base: Option<BaseChain>,
    pub rules: Vec<Rule>,
    pub span: Span,
    /// The chain's handle in its table.
    pub handle: u64,
    pub comment: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flowtable {
    pub name: String,
    pub hook: Hook,
    pub priority: i32,
    pub devices: Vec<String>,
    pub handle: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedCounter {
    pub name: String,
    pub packets: u64,
    pub bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    pub family: Family,
    pub name: String,
    pub chains: Vec<Chain>,
    pub sets: Vec<Set>,
    pub flowtables: Vec<Flowtable>,
    pub counters: Vec<NamedCounter>,
    pub quotas: Vec<(String, Quota)>,
    /// The table's named limits (`limit NAME { rate ... }`): one token bucket each.
    pub limits: Vec<(String, Limit)>,
    /// The table's `ct timeout` objects that weir evaluates (`Expr::CtTimeout` indexes them).
    pub ct_timeouts: Vec<(String, CtTimeoutPolicy)>,
    /// `flags dormant`: nft keeps the table but does not run its chains (weir's engines
    /// and the kernel's netdev tables leave its base chains out).
    pub dormant: bool,
    pub span: Span,
    /// The table's handle (the kernel's, per namespace).
    pub handle: u64,
    /// Its flags (`dormant`, `owner`, `persist`) and comment, as declared.
    pub flags: Vec<String>,
    pub comment: Option<String>,
    /// Its named objects as declared (counters, quotas, limits, ct helpers...), with their
    /// handles: what the listing prints.
    pub objects: Vec<(u64, crate::ast::ObjDecl)>,
}

impl Table {
    pub fn chain(&self, name: &str) -> Option<usize> {
        self.chains.iter().position(|c| c.name == name)
    }
    pub fn set(&self, name: &str) -> Option<usize> {
        self.sets.iter().position(|s| s.name == name)
    }
}

/// A `ct timeout` object: its protocol and the timeouts it sets (state names as nft writes
/// them: `established`, `close`, `unreplied`, `replied`, `timeout`...; milliseconds). States it
/// does not name keep the configured timeouts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CtTimeoutPolicy {
    pub l4proto: u8,
    pub values: Vec<(String, u64)>,
}

/// A `ct expectation` object: the connection expected comes from the peer, to this side's
/// `dport` with protocol `l4proto`, within `timeout_ms`; at most `size` per connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtExpectation {
    pub l4proto: u8,
    pub dport: u16,
    pub timeout_ms: u64,
    pub size: u8,
}

/// A `synproxy` statement's or object's settings (`struct nf_synproxy_info`): the MSS and
/// window scale it announces to clients, and which TCP options it keeps (`flags`, Linux's
/// `NF_SYNPROXY_OPT_*` bits: [`Synproxy::MSS`], ...).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Synproxy {
    pub mss: u16,
    pub wscale: u8,
    pub flags: u8,
}

impl Synproxy {
    pub const MSS: u8 = 0x01;
    pub const WSCALE: u8 = 0x02;
    pub const SACK_PERM: u8 = 0x04;
    pub const TIMESTAMP: u8 = 0x08;
    pub const ECN: u8 = 0x10;
}

/// A checked ruleset with the sources it came from.
#[derive(Clone, Debug, Default)]
pub struct Ruleset {
    pub tables: Vec<Table>,
    pub sources: SourceMap,
}

impl Ruleset {
    /// Whether some rule reads a field `pred` holds for ([`Expr::reads`]).
    pub fn reads(&self, pred: &dyn Fn(Field) -> bool) -> bool {
        self.tables
            .iter()
            .flat_map(|t| &t.chains)
            .flat_map(|c| &c.rules)
            .flat_map(|r| &r.exprs)
            .any(|e| e.reads(pred))
    }

    /// The rules with constructs weir does not evaluate yet ([`Expr::Unevaluated`]), as
    /// `file:line:col: what (in rule)` lines.
    pub fn unevaluated(&self) -> Vec<String> {
        let mut v = Vec::new();
        for t in &self.tables {
            for c in &t.chains {
                for r in &c.rules {
                    for e in &r.exprs {
                        if let Expr::Unevaluated(what) = e {
                            v.push(format!(
                                "{}: {what} is not evaluated yet (table {} {}, chain {}: {})",
                                self.sources.location(r.span),
                                t.family.name(),
                                t.name,
                                c.name,
                                r.text
                            ));
                        }
                    }
                }
            }
        }
        v
    }

    /// Err naming each rule weir would have to pass over ([`Ruleset::unevaluated`]): what
    /// `weir run` and `weir replay` say instead of running such a ruleset.
    pub fn refuse_unevaluated(&self) -> Result<(), String> {
        let u = self.unevaluated();
        if u.is_empty() {
            return Ok(());
        }
        Err(format!(
            "{}\nweir loads these constructs but does not evaluate them yet; it will not run a ruleset it would evaluate only in part",
            u.join("\n")
        ))
    }

    /// Totals for `weir check`.
    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for t in &self.tables {
            s.tables += 1;
            s.chains += t.chains.len();
            s.base_chains += t.chains.iter().filter(|c| c.base.is_some()).count();
            s.rules += t.chains.iter().map(|c| c.rules.len()).sum::<usize>();
            s.sets += t.sets.len();
            s.elements += t.sets.iter().map(|x| x.elements.len()).sum::<usize>();
            s.flowtables += t.flowtables.len();
            for c in &t.chains {
                for r in &c.rules {
                    for e in &r.exprs {
                        if let Expr::Match(Match {
                            set: SetRef::Anon(a),
                            ..
                        }) = e
                        {
                            s.anon_elements += a.elements.len();
                        }
                    }
                }
            }
        }
        s
    }

    /// True when some rule reads connection state or does NAT / flow offload (the stateful
    /// engine evaluates those).
    pub fn uses_state(&self) -> bool {
        self.tables.iter().any(|t| {
            t.chains.iter().any(|c| {
                c.rules.iter().any(|r| {
                    r.exprs.iter().any(|e| match e {
                        Expr::Match(m) => m
                            .key
                            .iter()
                            .any(|k| matches!(k.src, Source::Field(f) if f.is_conntrack())),
                        Expr::Nat(_) | Expr::FlowAdd(_) | Expr::Notrack | Expr::CtCount { .. } => {
                            true
                        }
                        _ => false,
                    })
                })
            })
        })
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub tables: usize,
    pub chains: usize,
    pub base_chains: usize,
    pub rules: usize,
    pub sets: usize,
    pub elements: usize,
    pub anon_elements: usize,
    pub flowtables: usize,
}
