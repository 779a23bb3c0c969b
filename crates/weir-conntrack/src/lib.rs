//! `weir-conntrack`: a sans-IO connection-tracking table with Linux `nf_conntrack` semantics.
//!
//! # What it is for
//!
//! The engine hands every parsed packet to [`Conntrack::track`] with the packet's timestamp and
//! gets back what Linux would put in `ct state` / `ctinfo`:
//!
//! - [`Track::Untracked`]: not IPv4/IPv6, a broken network header, or an ICMPv6 neighbour
//!   discovery / MLD message (Linux does not track those either).
//! - [`Track::Invalid`]: the packet cannot belong to a connection (invalid TCP flags, out of the
//!   TCP window, an invalid state transition, a first packet that may not create a connection,
//!   an ICMP error quoting nothing we track). The entry, if any, is left unchanged.
//! - [`Track::Existing`]: the packet belongs to a tracked connection, in the [`Dir`] it travels.
//!   Its [`CtInfo`] is `Established` in the reply direction, and in the original direction once
//!   a reply has been seen, `New` before that (Linux `resolve_normal_ct`). The entry has been
//!   updated as `nf_conntrack_in` does: protocol state, timeout, counters, seen-reply and
//!   assured bits.
//! - [`Track::Related`]: an ICMP / ICMPv6 error whose quoted header belongs to a connection.
//! - [`Track::New`]: the tuple is not in the table and the packet may create a connection. The
//!   [`Pending`] entry (protocol state already applied) is **not** in the table: Linux confirms
//!   a connection only when its first packet leaves the stack (end of postrouting / input), so
//!   the engine calls [`Conntrack::confirm`] when it accepts the packet, and simply drops the
//!   `Pending` otherwise. Before confirming, NAT may change the reply tuple
//!   ([`Pending::set_reply`]) using [`Conntrack::reply_in_use`] to avoid collisions.
//!
//! Nothing here reads a clock or does I/O: time is the `now_ns` given with each call, so tests
//! replay captures deterministically.
//!
//! ```
//! use std::net::Ipv4Addr;
//! use weir_conntrack::{Config, Conntrack, CtInfo, Dir, Track};
//! use weir_wire::build::{tcp4, tcp_flags::*};
//! use weir_wire::{LinkType, PacketMeta};
//!
//! let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
//! let mut ct: Conntrack<()> = Conntrack::new(Config::default());
//!
//! let syn = tcp4(a, b, 40000, 80, SYN, b"");
//! let pm = PacketMeta::parse(&syn, LinkType::Ethernet);
//! let Track::New(pending) = ct.track(&pm, &syn, 0) else { panic!() };
//! let id = ct.confirm(pending, 0).unwrap();
//!
//! // The builder's SYN/ACK acknowledges seq 1000 + 1.
//! let synack = weir_wire::build::Builder::new().tcp(b, a,
//!     &weir_wire::build::Tcp::new(80, 40000, SYN | ACK).seq(5000).ack(1001), b"");
//! let pm = PacketMeta::parse(&synack, LinkType::Ethernet);
//! assert_eq!(ct.track(&pm, &synack, 1_000),
//!            Track::Existing { id, dir: Dir::Reply, info: CtInfo::Established });
//! ```
//!
//! # How it is built
//!
//! - Entries live in a slab (`Vec<Entry<X>>`, ids are slab indexes). An IPv4 entry holds both
//!   tuples with 32-bit addresses, so it is 104 bytes with `X = ()`; an IPv6 entry keeps its four
//!   addresses in a side slab (64 more bytes).
//! - The hash index is open addressing with linear probing over `u32` slots, sized for a load
//!   of at most 3/4 at `max_entries` (two keys per entry: the original and the reply tuple).
//!   A slot holds the entry index, the direction and, in its spare high bits, a tag from the
//!   hash, so a lookup costs one hash, one or two adjacent slot reads and one entry read.
//!   Deletion shifts the cluster back (no tombstones).
//! - The table is bounded: when full, [`Conntrack::confirm`] evicts an entry that has expired,
//!   is not assured (Linux `IPS_ASSURED`: TCP established both ways, UDP stream), or is a
//!   closing TCP connection (Linux `tcp_can_early_drop`). An eviction clock sweeps the slab
//!   from where it last stopped and takes the first such entry; a freed slot is reused by the
//!   next connection, just behind the clock, so under a flood of new connections the victim
//!   is always the oldest unassured entry (FIFO), at the price of a sequential scan and no
//!   per-entry list links. If 256 slots hold nothing evictable, the connection is refused and
//!   counted ([`Stats::refused`]), as Linux's `early_drop` refuses after a bounded search.
//! - Expiry is lazy (an expired entry found by a lookup is removed) plus [`Conntrack::gc`],
//!   which examines a bounded number of slab slots per call.
//! - Deadlines are stored as 32-bit ticks of 2^20 ns (about 1.05 ms). Timeouts are capped at
//!   20 days; an entry not seen by a lookup or by `gc` for more than ~45 days could be taken
//!   for alive again, so call `gc` regularly (any budget sweeps the table quickly).
//!
//! # Protocols
//!
//! - TCP: the full Linux tracker ([`tcp`]): state table, window tracking with scaling and SACK,
//!   loose pick-up of connections seen mid-stream (`nf_conntrack_tcp_loose`), `be_liberal`,
//!   RST checks, SYN re-opening connections in TIME_WAIT / CLOSE, out-of-sync recovery.
//! - UDP and UDP-Lite: 30 s; once a reply has been seen and the entry is more than 2 s old,
//!   120 s and assured (Linux 5.x+ `stream_ts`).
//! - ICMP / ICMPv6: echo, timestamp, information and address-mask requests create entries
//!   (id in `sport`, type and code in `dport`), replies match them inverted, 30 s. Errors are
//!   [`Track::Related`] to the connection they quote, or invalid.
//! - Everything else (SCTP, DCCP, GRE, ESP, ...): the generic tracker, 600 s, keyed on
//!   addresses, protocol and, where the protocol has them, ports.
//!
//! # Not done (differences from Linux)
//!
//! - No IP defragmentation: a non-first fragment is [`Invalid::Fragment`]; a first fragment is
//!   tracked by its transport header (Linux reassembles before conntrack). The engine's
//!   virtual reassembly (`weir_engine::frag`) gives later fragments their first's connection
//!   and counts their TCP payload with [`Entry::extend_sent`].
//! - No expectations / helpers (FTP, SIP...): `Related` only comes from ICMP errors.
//! - No SCTP / DCCP / GRE state machines (generic tracker instead), no zones, no checksum
//!   verification (`nf_conntrack_checksum`), no retransmission counter
//!   (`nf_conntrack_tcp_max_retrans` / `timeout_max_retrans`), no zero-window timeout, no
//!   "overshot window" work-around of Linux 6.x, no UDP clash resolution (a clash at confirm
//!   is refused).
//! - Packet counters are 32-bit (wrapping), byte counters 64-bit.

pub mod steer;
pub mod tcp;

use std::time::Duration;

use weir_wire::meta::proto;
use weir_wire::{Frag, PacketMeta, L3};

pub use tcp::{TcpConn, TcpState};

/// Timeouts per protocol and state. `Default` is Linux's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub tcp_syn_sent: Duration,
    pub tcp_syn_recv: Duration,
    pub tcp_established: Duration,
    pub tcp_fin_wait: Duration,
    pub tcp_close_wait: Duration,
    pub tcp_last_ack: Duration,
    pub tcp_time_wait: Duration,
    pub tcp_close: Duration,
    pub tcp_syn_sent2: Duration,
    /// `nf_conntrack_tcp_timeout_max_retrans` (kept for configuration; see crate docs).
    pub tcp_retrans: Duration,
    /// Used instead of a longer state timeout while data is unacknowledged.
    pub tcp_unack: Duration,
    pub udp: Duration,
    pub udp_stream: Duration,
    pub icmp: Duration,
    pub generic: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        let s = Duration::from_secs;
        Timeouts {
            tcp_syn_sent: s(120),
            tcp_syn_recv: s(60),
            tcp_established: s(432_000),
            tcp_fin_wait: s(120),
            tcp_close_wait: s(60),
            tcp_last_ack: s(30),
            tcp_time_wait: s(120),
            tcp_close: s(10),
            tcp_syn_sent2: s(120),
            tcp_retrans: s(300),
            tcp_unack: s(300),
            udp: s(30),
            udp_stream: s(120),
            icmp: s(30),
            generic: s(600),
        }
    }
}

impl Timeouts {
    /// The timeout of a TCP state (`None` state: SYN_SENT's).
    pub fn tcp(&self, s: TcpState) -> Duration {
        match s {
            TcpState::None | TcpState::SynSent => self.tcp_syn_sent,
            TcpState::SynRecv => self.tcp_syn_recv,
            TcpState::Established => self.tcp_established,
            TcpState::FinWait => self.tcp_fin_wait,
            TcpState::CloseWait => self.tcp_close_wait,
            TcpState::LastAck => self.tcp_last_ack,
            TcpState::TimeWait => self.tcp_time_wait,
            TcpState::Close => self.tcp_close,
            TcpState::SynSent2 => self.tcp_syn_sent2,
        }
    }

    fn all(&self) -> [Duration; 15] {
        [
            self.tcp_syn_sent,
            self.tcp_syn_recv,
            self.tcp_established,
            self.tcp_fin_wait,
            self.tcp_close_wait,
            self.tcp_last_ack,
            self.tcp_time_wait,
            self.tcp_close,
            self.tcp_syn_sent2,
            self.tcp_retrans,
            self.tcp_unack,
            self.udp,
            self.udp_stream,
            self.icmp,
            self.generic,
        ]
    }
}

/// Table configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The most entries the table holds (`nf_conntrack_max`); at most 2^30.
    pub max_entries: usize,
    pub timeouts: Timeouts,
    /// Pick up TCP connections from a mid-stream ACK (`nf_conntrack_tcp_loose`, default on).
    pub tcp_loose: bool,
    /// Accept out-of-window TCP segments (`nf_conntrack_tcp_be_liberal`, default off); invalid
    /// RSTs are still invalid.
    pub tcp_be_liberal: bool,
    /// Seed of the hash (set it randomly to resist hash flooding).
    pub hash_seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_entries: 65536,
            timeouts: Timeouts::default(),
            tcp_loose: true,
            tcp_be_liberal: false,
            hash_seed: 0x2545_f491_4f6c_dd1d,
        }
    }
}

/// Direction of a packet relative to its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dir {
    /// From the side that opened the connection.
    Original = 0,
    Reply = 1,
}

impl Dir {
    fn from_index(i: usize) -> Dir {
        if i == 0 {
            Dir::Original
        } else {
            Dir::Reply
        }
    }
}

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

/// Why [`Conntrack::confirm`] did not insert.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refused {
    /// The table is full and no entry could be evicted.
    Full,
    /// The original or the reply tuple is already in the table.
    Clash,
    /// The reply tuple is of another protocol or address family.
    BadReply,
}

/// Identifies an entry while it is in the table (a slab index: reused after removal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId(pub u32);

/// A connection tuple. IPv4 addresses are in the low 32 bits. ICMP: the identifier in `sport`,
/// `type << 8 | code` in `dport` (as Linux's ICMP tuple); protocols without ports: 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tuple {
    pub src: u128,
    pub dst: u128,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub v6: bool,
}

/// ICMP request <-> reply types (Linux `invmap`); 0xff when the type has no inverse.
fn icmp_inverse(v6: bool, t: u8) -> u8 {
    if v6 {
        match t {
            128 => 129,
            129 => 128,
            139 => 140,
            140 => 139,
            _ => 0xff,
        }
    } else {
        match t {
            8 => 0,
            0 => 8,
            13 => 14,
            14 => 13,
            15 => 16,
            16 => 15,
            17 => 18,
            18 => 17,
            _ => 0xff,
        }
    }
}

/// ICMP types that may create an entry (requests).
fn icmp_creates(v6: bool, t: u8) -> bool {
    if v6 {
        matches!(t, 128 | 139)
    } else {
        matches!(t, 8 | 13 | 15 | 17)
    }
}

/// ICMPv6 types Linux leaves untracked (neighbour discovery, MLD).
fn icmp6_untracked(t: u8) -> bool {
    matches!(t, 130..=136 | 143)
}

impl Tuple {
    /// The tuple of the other direction: addresses and ports swapped; ICMP keeps the id and
    /// maps a request type to its reply type (and back).
    pub fn invert(&self) -> Tuple {
        let icmp =
            (self.proto == proto::ICMP && !self.v6) || (self.proto == proto::ICMPV6 && self.v6);
        if icmp {
            let t = (self.dport >> 8) as u8;
            let inv = icmp_inverse(self.v6, t);
            let t2 = if inv == 0xff { t } else { inv };
            Tuple {
                src: self.dst,
                dst: self.src,
                sport: self.sport,
                dport: ((t2 as u16) << 8) | (self.dport & 0xff),
                proto: self.proto,
                v6: self.v6,
            }
        } else {
            Tuple {
                src: self.dst,
                dst: self.src,
                sport: self.dport,
                dport: self.sport,
                proto: self.proto,
                v6: self.v6,
            }
        }
    }
}

const NIL: u32 = u32::MAX;
const TICK_SHIFT: u32 = 20;
const MAX_TIMEOUT: Duration = Duration::from_secs(20 * 86400);

// Entry status bits.
const S_V6: u8 = 0x01;
const S_SEEN_REPLY: u8 = 0x02;
const S_ASSURED: u8 = 0x04;
const S_LIVE: u8 = 0x08;
/// The entry's bit is set in the evictable bitmap.
const S_EVICT: u8 = 0x10;

#[inline]
fn tick(now_ns: u64) -> u32 {
    (now_ns >> TICK_SHIFT) as u32
}

/// One tracked connection.
///
/// Tuples are read with [`Conntrack::tuple`] (IPv6 addresses live outside the entry).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct Entry<X> {
    // The fields a lookup and the flowtable fast path read (the tuple, the deadline, the
    // engine data, the protocol and status bytes at the start of `tcp`) come first: about 40
    // bytes, one cache line or two adjacent ones.
    /// IPv4: original src, dst, reply src, dst. IPv6: `[side slot, 0, 0, 0]`. A free slab
    /// slot keeps the free-list link in `addr[0]`.
    addr: [u32; 4],
    /// Original sport, dport, reply sport, dport.
    port: [u16; 4],
    deadline: u32,
    /// Engine data (NAT binding, cached forwarding decision, offload flag...).
    pub ext: X,
    /// TCP state (UDP keeps its stream tick in `end[0]`); it starts with the protocol and
    /// status bytes.
    tcp: TcpConn,
    /// The connection mark (`ct mark`).
    pub mark: u32,
    packets: [u32; 2],
    bytes: [u64; 2],
}

impl<X: Copy + Default> Entry<X> {
    fn blank(proto: u8, v6: bool) -> Entry<X> {
        Entry {
            addr: [0; 4],
            port: [0; 4],
            deadline: 0,
            mark: 0,
            packets: [0; 2],
            bytes: [0; 2],
            tcp: TcpConn::with_header(proto, if v6 { S_V6 } else { 0 }),
            ext: X::default(),
        }
    }
}

impl<X> Entry<X> {
    /// IP protocol number.
    pub fn proto(&self) -> u8 {
        self.tcp.ct_proto
    }
    pub fn is_v6(&self) -> bool {
        self.tcp.ct_status & S_V6 != 0
    }
    /// A packet has been seen in the reply direction (`IPS_SEEN_REPLY`).
    pub fn seen_reply(&self) -> bool {
        self.tcp.ct_status & S_SEEN_REPLY != 0
    }
    /// Linux `IPS_ASSURED`: not evicted when the table is full.
    pub fn assured(&self) -> bool {
        self.tcp.ct_status & S_ASSURED != 0
    }
    /// TCP tracking state (`None` for other protocols).
    pub fn tcp(&self) -> Option<&TcpConn> {
        (self.tcp.ct_proto == proto::TCP).then_some(&self.tcp)
    }
    /// Forget the TCP windows, as Linux does when a connection leaves a flowtable
    /// (`flow_offload_fixup_tcp`): the next packet of each side sets them again, so segments
    /// the fast path let through unseen do not make the connection invalid.
    pub fn forget_windows(&mut self) {
        self.tcp.maxwin = [0, 0];
    }

    /// Count `bytes` more sent in direction `d` of a TCP connection: the payload of the later
    /// fragments of a segment whose first fragment was tracked (its length gave only the
    /// first fragment's end), so that the peer's ACK of the whole segment stays in window.
    pub fn extend_sent(&mut self, d: Dir, bytes: u32) {
        if self.tcp.ct_proto == proto::TCP {
            let i = d as usize;
            self.tcp.end[i] = self.tcp.end[i].wrapping_add(bytes);
        }
    }

    /// TCP connection state (`None` for other protocols).
    pub fn tcp_state(&self) -> Option<TcpState> {
        self.tcp().map(|t| t.state())
    }
    /// Packets counted in a direction (32-bit, wrapping).
    pub fn packets(&self, d: Dir) -> u64 {
        self.packets[d as usize] as u64
    }
    /// Bytes (IP packet lengths) counted in a direction.
    pub fn bytes(&self, d: Dir) -> u64 {
        self.bytes[d as usize]
    }
    /// Time left before the entry expires, seen at `now_ns` (zero once expired).
    pub fn timeout_remaining(&self, now_ns: u64) -> Duration {
        let rem = self.deadline.wrapping_sub(tick(now_ns));
        if rem as i32 <= 0 {
            Duration::ZERO
        } else {
            Duration::from_nanos((rem as u64) << TICK_SHIFT)
        }
    }
    fn account(&mut self, d: usize, len: u32) {
        self.packets[d] = self.packets[d].wrapping_add(1);
        self.bytes[d] = self.bytes[d].wrapping_add(len as u64);
    }
    /// Push the entry's timeout to `now + t` (a fast path that bypasses tracking keeps its
    /// connections alive this way).
    pub fn refresh(&mut self, now_ns: u64, t: Duration) {
        self.deadline = tick(now_ns.saturating_add(t.as_nanos() as u64));
    }
}

/// A connection not yet in the table (see [`Track::New`]).
#[derive(Clone, Copy, Debug)]
pub struct Pending<X> {
    orig: Tuple,
    reply: Tuple,
    /// The entry to insert: protocol state, counters, deadline of the first packet. Set
    /// `entry.mark` and `entry.ext` as needed.
    pub entry: Entry<X>,
}

impl<X> Pending<X> {
    /// The original tuple (the first packet's).
    pub fn orig(&self) -> &Tuple {
        &self.orig
    }
    /// The reply tuple (the original one inverted unless NAT changed it).
    pub fn reply(&self) -> &Tuple {
        &self.reply
    }
    /// Set the reply tuple (NAT). It must keep the protocol and address family.
    pub fn set_reply(&mut self, t: Tuple) {
        self.reply = t;
    }
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
            Track::New(_) => Some(CtInfo::New),
            _ => None,
        }
    }
}

/// Counters of the table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Entries confirmed into the table.
    pub inserted: u64,
    /// Unassured (or closing) entries evicted to make room.
    pub evicted: u64,
    /// Confirmations refused because the table was full and nothing could be evicted.
    pub refused: u64,
    /// Confirmations refused because a tuple was already present.
    pub clash: u64,
    /// Entries removed because their timeout passed (lazily or by `gc`).
    pub expired: u64,
    /// Packets found invalid.
    pub invalid: u64,
    /// Entries examined while looking for room (eviction and expiry searches).
    pub searched: u64,
}

/// The connection table. `X` is per-entry engine data.
#[derive(Clone, Debug)]
pub struct Conntrack<X> {
    cfg: Config,
    entries: Vec<Entry<X>>,
    free_head: u32,
    v6: Vec<[u128; 4]>,
    v6_free: Vec<u32>,
    slots: Vec<u32>,
    id_mask: u32,
    evict_cursor: usize,
    /// One bit per slab slot: the entry may be dropped early (not assured, or a closing TCP
    /// connection). The eviction clock looks here first, 64 slots a word.
    evictable: Vec<u64>,
    len: usize,
    gc_cursor: usize,
    max_ticks: u32,
    stats: Stats,
    killed: Option<Killed<X>>,
}

/// An entry that the last tracked packet ended (a RST before any reply: Linux
/// `nf_ct_kill_acct`). The packet still belongs to it (its NAT binding applies), so
/// [`Conntrack::take_killed`] gives it back once.
#[derive(Clone, Copy, Debug)]
pub struct Killed<X> {
    pub id: EntryId,
    pub orig: Tuple,
    pub reply: Tuple,
    pub entry: Entry<X>,
}

/// An empty vector with room for `n` items, its memory advised to use huge pages when it is
/// big (the table is read at random: with 4 KiB pages nearly every lookup would also miss the
/// TLB). The room is only address space until items are written.
fn huge_vec<T>(n: usize) -> Vec<T> {
    let v: Vec<T> = Vec::with_capacity(n);
    let bytes = n.saturating_mul(std::mem::size_of::<T>());
    #[cfg(target_os = "linux")]
    if bytes >= 4 << 20 {
        let start = (v.as_ptr() as usize).next_multiple_of(4096);
        let end = (v.as_ptr() as usize + bytes) & !4095;
        if end > start {
            // SAFETY: madvise only gives the kernel a hint about pages of this process's own
            // allocation (the vector's reserved capacity, page-aligned inside it); it does not
            // change their contents or validity. A failure is harmless and ignored.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = bytes;
    v
}

/// A hint to load the cache line holding `r` (no effect on other targets).
#[inline(always)]
fn prefetch<T>(r: &T) {
    prefetch_addr(r as *const T as *const u8);
}

/// A hint to load the cache line holding address `p` (any address: nothing is read).
#[inline(always)]
fn prefetch_addr(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it never faults, whatever the address, and reads
    // nothing into the program.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[inline]
fn mix(a: u64, b: u64) -> u64 {
    let r = (a as u128).wrapping_mul(b as u128);
    (r as u64) ^ ((r >> 64) as u64)
}

/// Words of the evictable bitmap (64 slots each) the eviction clock looks at for one new
/// connection when the table is full (131,072 slots).
const EVICT_WORDS: usize = 2048;

/// Slab slots then searched for an expired entry before the connection is refused.
const EVICT_SCAN: usize = 256;

impl<X: Copy + Default> Conntrack<X> {
    /// An empty table. The hash index is allocated now (about 10.7 bytes per entry of
    /// `max_entries`); entries are allocated as they are confirmed.
    pub fn new(cfg: Config) -> Conntrack<X> {
        let mut cfg = cfg;
        cfg.max_entries = cfg.max_entries.clamp(1, 1 << 30);
        let t = &mut cfg.timeouts;
        for d in [
            &mut t.tcp_syn_sent,
            &mut t.tcp_syn_recv,
            &mut t.tcp_established,
            &mut t.tcp_fin_wait,
            &mut t.tcp_close_wait,
            &mut t.tcp_last_ack,
            &mut t.tcp_time_wait,
            &mut t.tcp_close,
            &mut t.tcp_syn_sent2,
            &mut t.tcp_retrans,
            &mut t.tcp_unack,
            &mut t.udp,
            &mut t.udp_stream,
            &mut t.icmp,
            &mut t.generic,
        ] {
            *d = (*d).min(MAX_TIMEOUT);
        }
        let max_t = cfg.timeouts.all().into_iter().max().unwrap_or_default();
        let max_ticks = ((max_t.as_nanos() as u64) >> TICK_SHIFT) as u32 + 2;
        let keys = 2 * cfg.max_entries;
        let nslots = (keys * 4).div_ceil(3).max(8);
        let id_bits = 64 - (keys as u64).leading_zeros();
        let id_mask = if id_bits >= 32 {
            u32::MAX
        } else {
            (1u32 << id_bits) - 1
        };
        Conntrack {
            cfg,
            entries: huge_vec(cfg.max_entries),
            free_head: NIL,
            v6: Vec::new(),
            v6_free: Vec::new(),
            slots: {
                let mut v = huge_vec(nslots);
                v.resize(nslots, 0);
                v
            },
            id_mask,
            evict_cursor: 0,
            evictable: vec![0; cfg.max_entries.div_ceil(64)],
            len: 0,
            gc_cursor: 0,
            max_ticks,
            stats: Stats::default(),
            killed: None,
        }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Memory per IPv4 entry at the configured capacity: the entry plus its share of the hash
    /// index and of the evictable bitmap.
    pub fn bytes_per_entry(&self) -> usize {
        std::mem::size_of::<Entry<X>>()
            + (self.slots.len() * 4 + self.evictable.len() * 8).div_ceil(self.cfg.max_entries)
    }

    /// Memory per IPv6 entry (the IPv4 figure plus the four addresses kept aside).
    pub fn bytes_per_entry_v6(&self) -> usize {
        self.bytes_per_entry() + std::mem::size_of::<[u128; 4]>()
    }

    pub fn get(&self, id: EntryId) -> Option<&Entry<X>> {
        self.entries
            .get(id.0 as usize)
            .filter(|e| e.tcp.ct_status & S_LIVE != 0)
    }

    /// The entry, to change its `mark` or `ext`.
    pub fn get_mut(&mut self, id: EntryId) -> Option<&mut Entry<X>> {
        self.entries
            .get_mut(id.0 as usize)
            .filter(|e| e.tcp.ct_status & S_LIVE != 0)
    }

    /// The tuple of an entry in a direction.
    pub fn tuple(&self, id: EntryId, d: Dir) -> Option<Tuple> {
        self.get(id)?;
        Some(self.tuple_of(id.0, d as usize))
    }

    /// Live entries (expired ones not yet collected included).
    pub fn iter(&self) -> impl Iterator<Item = (EntryId, &Entry<X>)> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.tcp.ct_status & S_LIVE != 0)
            .map(|(i, e)| (EntryId(i as u32), e))
    }

    /// Remove an entry. Returns whether it was there.
    pub fn remove(&mut self, id: EntryId) -> bool {
        if self.get(id).is_none() {
            return false;
        }
        self.remove_idx(id.0);
        true
    }

    /// Whether some entry has `t` as its original or reply tuple (for NAT port allocation).
    /// Expired entries not yet collected count as in use.
    pub fn reply_in_use(&self, t: &Tuple) -> bool {
        self.lookup(t, self.hash(t)).is_some()
    }

    /// Look a tuple up without side effects: the entry and the direction `t` matches.
    pub fn find(&self, t: &Tuple) -> Option<(EntryId, Dir)> {
        self.find_hashed(t, self.hash(t))
    }

    /// Remove up to `budget` slab slots' worth of expired entries, resuming where the last call
    /// stopped. Returns how many were removed.
    pub fn gc(&mut self, now_ns: u64, budget: usize) -> usize {
        let n = self.entries.len();
        if n == 0 {
            return 0;
        }
        let now = tick(now_ns);
        let mut removed = 0;
        for _ in 0..budget.min(n) {
            if self.gc_cursor >= n {
                self.gc_cursor = 0;
            }
            let i = self.gc_cursor;
            self.gc_cursor += 1;
            let e = &self.entries[i];
            if e.tcp.ct_status & S_LIVE != 0 && self.is_expired(e, now) {
                self.remove_idx(i as u32);
                self.stats.expired += 1;
                removed += 1;
            }
        }
        removed
    }

    /// The entry the last [`Conntrack::track`] call ended, if it ended one.
    pub fn take_killed(&mut self) -> Option<Killed<X>> {
        self.killed.take()
    }

    /// Track one packet (see the crate docs).
    pub fn track(&mut self, pm: &PacketMeta, frame: &[u8], now_ns: u64) -> Track<X> {
        self.killed = None;
        let r = self.track_inner(pm, frame, now_ns);
        if let Track::Invalid(_) = r {
            self.stats.invalid += 1;
        }
        r
    }

    /// Insert a pending connection. When the table is full, the oldest evictable entry (or an
    /// expired one) makes room; otherwise the connection is refused.
    pub fn confirm(&mut self, p: Pending<X>, now_ns: u64) -> Result<EntryId, Refused> {
        if p.reply.proto != p.orig.proto || p.reply.v6 != p.orig.v6 {
            return Err(Refused::BadReply);
        }
        let now = tick(now_ns);
        let ho = self.hash(&p.orig);
        let hr = self.hash(&p.reply);
        if self.live_lookup(&p.orig, ho, now).is_some()
            || self.live_lookup(&p.reply, hr, now).is_some()
        {
            self.stats.clash += 1;
            return Err(Refused::Clash);
        }
        if self.len >= self.cfg.max_entries && !self.make_room(now_ns) {
            self.stats.refused += 1;
            return Err(Refused::Full);
        }
        let mut e = p.entry;
        e.tcp.ct_status = (e.tcp.ct_status & (S_V6 | S_SEEN_REPLY | S_ASSURED)) | S_LIVE;
        debug_assert_eq!(e.tcp.ct_status & S_EVICT, 0);
        if p.orig.v6 {
            let addrs = [p.orig.src, p.orig.dst, p.reply.src, p.reply.dst];
            let slot = match self.v6_free.pop() {
                Some(s) => {
                    self.v6[s as usize] = addrs;
                    s
                }
                None => {
                    self.v6.push(addrs);
                    (self.v6.len() - 1) as u32
                }
            };
            e.addr = [slot, 0, 0, 0];
        } else {
            e.addr = [
                p.orig.src as u32,
                p.orig.dst as u32,
                p.reply.src as u32,
                p.reply.dst as u32,
            ];
        }
        e.port = [p.orig.sport, p.orig.dport, p.reply.sport, p.reply.dport];
        let idx = if self.free_head != NIL {
            let i = self.free_head;
            self.free_head = self.entries[i as usize].addr[0];
            self.entries[i as usize] = e;
            i
        } else {
            self.entries.push(e);
            (self.entries.len() - 1) as u32
        };
        self.index_insert(idx * 2 + 1, ho);
        self.index_insert(idx * 2 + 2, hr);
        self.update_evictable(idx as usize);
        self.len += 1;
        self.stats.inserted += 1;
        Ok(EntryId(idx))
    }

    /// Mean distance (in slots) between a key's home slot and where it sits, plus one: the
    /// slots a successful lookup reads. For benchmarks and tuning.
    #[doc(hidden)]
    pub fn mean_probe_len(&self) -> f64 {
        let n = self.slots.len();
        let (mut sum, mut cnt) = (0usize, 0usize);
        for (i, &s) in self.slots.iter().enumerate() {
            if s == 0 {
                continue;
            }
            let k = s & self.id_mask;
            let t = self.tuple_of((k - 1) >> 1, ((k - 1) & 1) as usize);
            let home = self.home(self.hash(&t));
            sum += (i + n - home) % n + 1;
            cnt += 1;
        }
        sum as f64 / cnt.max(1) as f64
    }

    // ----- packet paths -----

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
            src: q.saddr,
            dst: q.daddr,
            sport,
            dport,
            proto: q.l4proto,
            v6,
        };
        let want = inner.invert();
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
            src: pm.saddr,
            dst: pm.daddr,
            sport: u16::from_be_bytes([id[0], id[1]]),
            dport: ((typ as u16) << 8) | code as u16,
            proto: pm.l4proto,
            v6,
        };
        let timeout = self.cfg.timeouts.icmp;
        let h = self.hash(&t);
        if let Some(k) = self.live_lookup(&t, h, tick(now_ns)) {
            let (idx, d) = (((k - 1) >> 1) as usize, ((k - 1) & 1) as usize);
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
        Track::New(Pending {
            orig: t,
            reply: t.invert(),
            entry: e,
        })
    }

    fn track_simple(&mut self, t: Tuple, udp: bool, len: u32, now_ns: u64) -> Track<X> {
        let to = self.cfg.timeouts;
        let h = self.hash(&t);
        let now = tick(now_ns);
        if let Some(k) = self.live_lookup(&t, h, now) {
            let (idx, d) = (((k - 1) >> 1) as usize, ((k - 1) & 1) as usize);
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
        Track::New(Pending {
            orig: t,
            reply: t.invert(),
            entry: e,
        })
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
        let Some(seg) = frame
            .get(l4..end)
            .and_then(|th| tcp::Seg::parse(th, wire_end.saturating_sub(l4)))
        else {
            return Track::Invalid(Invalid::Malformed);
        };
        let t = Tuple {
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
            let Some(k) = self.live_lookup(&t, h, now) else {
                break;
            };
            let (idx, d) = (((k - 1) >> 1) as usize, ((k - 1) & 1) as usize);
            let e = &mut self.entries[idx];
            let info = ctinfo(e, d);
            let id = EntryId(idx as u32);
            let dir = Dir::from_index(d);
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
                Track::New(Pending {
                    orig: t,
                    reply: t.invert(),
                    entry: e,
                })
            }
            tcp::TcpVerdict::Invalid(r) => Track::Invalid(r),
            _ => Track::Invalid(Invalid::CannotCreate),
        }
    }

    // ----- table internals -----

    fn is_expired(&self, e: &Entry<X>, now: u32) -> bool {
        let rem = e.deadline.wrapping_sub(now);
        rem == 0 || rem > self.max_ticks
    }

    /// Make room for one entry: the eviction clock moves over the slab from where it last
    /// stopped and removes the first entry that has expired or may be dropped early (not
    /// assured, or a closing TCP connection), looking at no more than [`EVICT_SCAN`] slots.
    fn make_room(&mut self, now_ns: u64) -> bool {
        let n = self.entries.len();
        let now = tick(now_ns);
        // the evictable bitmap from the clock's position, a word (64 slots) at a time
        let words = self.evictable.len();
        if n > 0 && words > 0 {
            let start = if self.evict_cursor >= n {
                0
            } else {
                self.evict_cursor
            };
            let mut w = start / 64;
            let mut mask = !0u64 << (start % 64);
            for _ in 0..=EVICT_WORDS.min(words) {
                let bits = self.evictable[w] & mask;
                if bits != 0 {
                    let i = w * 64 + bits.trailing_zeros() as usize;
                    self.evict_cursor = i + 1;
                    self.stats.searched += 1;
                    let expired = self.is_expired(&self.entries[i], now);
                    self.remove_idx(i as u32);
                    if expired {
                        self.stats.expired += 1;
                    } else {
                        self.stats.evicted += 1;
                    }
                    return true;
                }
                mask = !0;
                w += 1;
                if w == words {
                    w = 0;
                }
            }
        }
        // nothing evictable near the clock: an expired entry will do
        for _ in 0..EVICT_SCAN.min(n) {
            if self.evict_cursor >= n {
                self.evict_cursor = 0;
            }
            let i = self.evict_cursor;
            self.evict_cursor += 1;
            self.stats.searched += 1;
            let e = &self.entries[i];
            if e.tcp.ct_status & S_LIVE == 0 {
                continue;
            }
            if self.is_expired(e, now) {
                self.remove_idx(i as u32);
                self.stats.expired += 1;
                return true;
            }
        }
        false
    }

    fn hash(&self, t: &Tuple) -> u64 {
        let seed = self.cfg.hash_seed;
        let ports = ((t.sport as u64) << 48)
            | ((t.dport as u64) << 32)
            | ((t.proto as u64) << 8)
            | t.v6 as u64;
        let a = mix(
            (t.src as u64) ^ 0x9e37_79b9_7f4a_7c15,
            ((t.src >> 64) as u64) ^ seed ^ 0xbf58_476d_1ce4_e5b9,
        );
        let b = mix(
            (t.dst as u64) ^ a ^ 0x94d0_49bb_1331_11eb,
            ((t.dst >> 64) as u64) ^ 0x2545_f491_4f6c_dd1d,
        );
        mix(
            ports ^ b ^ 0xd6e8_feb8_6659_fd93,
            seed ^ 0xa076_1d64_78bd_642f,
        )
    }

    #[inline]
    fn home(&self, h: u64) -> usize {
        (((h >> 32) * self.slots.len() as u64) >> 32) as usize
    }

    fn tuple_of(&self, idx: u32, d: usize) -> Tuple {
        let e = &self.entries[idx as usize];
        let v6 = e.tcp.ct_status & S_V6 != 0;
        let (src, dst) = if v6 {
            let a = &self.v6[e.addr[0] as usize];
            (a[2 * d], a[2 * d + 1])
        } else {
            (e.addr[2 * d] as u128, e.addr[2 * d + 1] as u128)
        };
        Tuple {
            src,
            dst,
            sport: e.port[2 * d],
            dport: e.port[2 * d + 1],
            proto: e.tcp.ct_proto,
            v6,
        }
    }

    #[inline]
    fn key_matches(&self, key: u32, t: &Tuple) -> bool {
        let idx = ((key - 1) >> 1) as usize;
        let d = ((key - 1) & 1) as usize;
        let e = &self.entries[idx];
        if e.tcp.ct_proto != t.proto
            || e.port[2 * d] != t.sport
            || e.port[2 * d + 1] != t.dport
            || (e.tcp.ct_status & S_V6 != 0) != t.v6
        {
            return false;
        }
        if t.v6 {
            let a = &self.v6[e.addr[0] as usize];
            a[2 * d] == t.src && a[2 * d + 1] == t.dst
        } else {
            e.addr[2 * d] as u128 == t.src && e.addr[2 * d + 1] as u128 == t.dst
        }
    }

    /// The key (`idx * 2 + dir + 1`) holding `t`.
    #[inline]
    fn lookup(&self, t: &Tuple, h: u64) -> Option<u32> {
        let n = self.slots.len();
        let tag = (h as u32) & !self.id_mask;
        let mut i = self.home(h);
        loop {
            let s = self.slots[i];
            if s == 0 {
                return None;
            }
            if s & !self.id_mask == tag && self.key_matches(s & self.id_mask, t) {
                return Some(s & self.id_mask);
            }
            i += 1;
            if i == n {
                i = 0;
            }
        }
    }

    /// Start loading the hash index slot a lookup of `t` reads first (the first stage of a
    /// batch: the cache misses of several packets overlap). Returns the tuple's hash.
    #[inline]
    pub fn prefetch_index(&self, t: &Tuple) -> u64 {
        let h = self.hash(t);
        prefetch(&self.slots[self.home(h)]);
        h
    }

    /// Where the bytes a lookup or a flowtable fast path reads end in an entry: the protocol
    /// and status bytes at the start of `tcp` are the last of them.
    #[inline(always)]
    fn hot_end() -> usize {
        std::mem::offset_of!(Entry<X>, tcp) + 2
    }

    /// The slab index of the entry a lookup with hash `h` will most likely read: the first
    /// slot on the probe sequence whose tag matches (linear probing at load 3/4 puts most
    /// keys past their home slot). For prefetching only: the tuple is not compared.
    #[inline]
    fn probable_entry(&self, h: u64) -> Option<&Entry<X>> {
        let n = self.slots.len();
        let tag = (h as u32) & !self.id_mask;
        let mut i = self.home(h);
        for _ in 0..8 {
            let s = self.slots[i];
            if s == 0 {
                return None;
            }
            if s & !self.id_mask == tag {
                return self.entries.get((((s & self.id_mask) - 1) >> 1) as usize);
            }
            i += 1;
            if i == n {
                i = 0;
            }
        }
        None
    }

    /// Start loading the first bytes of the entry the index names for hash `h` (the second
    /// stage, once the slot is in the cache): the tuple, deadline, `ext`, protocol and status,
    /// all that a lookup and a flowtable fast path read; one cache line or two.
    #[inline]
    pub fn prefetch_entry(&self, h: u64) {
        if let Some(e) = self.probable_entry(h) {
            let p = e as *const Entry<X> as *const u8;
            prefetch_addr(p);
            prefetch_addr(p.wrapping_add(Self::hot_end() - 1));
        }
    }

    /// The third stage: once the entry's first bytes are in the cache, start loading the rest
    /// of it (TCP state, counters) if `want(&entry.ext)` says the packet will need them.
    #[inline]
    pub fn prefetch_rest(&self, h: u64, want: impl Fn(&X) -> bool) {
        if let Some(e) = self.probable_entry(h) {
            if want(&e.ext) {
                let p = e as *const Entry<X> as *const u8;
                let (hot, size) = (Self::hot_end(), std::mem::size_of::<Entry<X>>());
                prefetch_addr(p.wrapping_add(hot));
                prefetch_addr(p.wrapping_add((hot + 64).min(size - 1)));
                prefetch_addr(p.wrapping_add(size - 1));
            }
        }
    }

    /// [`Conntrack::find`] with the tuple's hash already computed (by
    /// [`Conntrack::prefetch_index`]).
    #[inline]
    pub fn find_hashed(&self, t: &Tuple, h: u64) -> Option<(EntryId, Dir)> {
        self.lookup(t, h).map(|k| {
            (
                EntryId((k - 1) >> 1),
                Dir::from_index(((k - 1) & 1) as usize),
            )
        })
    }

    /// `lookup`, removing the entry found if it has expired.
    fn live_lookup(&mut self, t: &Tuple, h: u64, now: u32) -> Option<u32> {
        let k = self.lookup(t, h)?;
        let idx = (k - 1) >> 1;
        if self.is_expired(&self.entries[idx as usize], now) {
            self.remove_idx(idx);
            self.stats.expired += 1;
            return None;
        }
        Some(k)
    }

    fn index_insert(&mut self, key: u32, h: u64) {
        let n = self.slots.len();
        let mut i = self.home(h);
        while self.slots[i] != 0 {
            i += 1;
            if i == n {
                i = 0;
            }
        }
        self.slots[i] = ((h as u32) & !self.id_mask) | key;
    }

    fn index_remove(&mut self, key: u32) {
        let idx = (key - 1) >> 1;
        let d = ((key - 1) & 1) as usize;
        let t = self.tuple_of(idx, d);
        let h = self.hash(&t);
        let n = self.slots.len();
        let want = ((h as u32) & !self.id_mask) | key;
        let mut i = self.home(h);
        while self.slots[i] != want {
            debug_assert!(self.slots[i] != 0, "conntrack index lost a key");
            if self.slots[i] == 0 {
                return;
            }
            i += 1;
            if i == n {
                i = 0;
            }
        }
        // Backward-shift deletion.
        self.slots[i] = 0;
        let mut j = i;
        loop {
            j += 1;
            if j == n {
                j = 0;
            }
            let s = self.slots[j];
            if s == 0 {
                break;
            }
            let k = s & self.id_mask;
            let kt = self.tuple_of((k - 1) >> 1, ((k - 1) & 1) as usize);
            let home = self.home(self.hash(&kt));
            // Leave it if its home lies cyclically in (i, j].
            let stays = if i <= j {
                i < home && home <= j
            } else {
                i < home || home <= j
            };
            if !stays {
                self.slots[i] = s;
                self.slots[j] = 0;
                i = j;
            }
        }
    }

    /// Keep the entry's evictable bit (and `S_EVICT`) in step with its state: set while it is
    /// not assured or is a closing TCP connection. Touches the bitmap only on a change.
    #[inline]
    fn update_evictable(&mut self, idx: usize) {
        let e = &mut self.entries[idx];
        let live = e.tcp.ct_status & S_LIVE != 0;
        let want = live && (!e.assured() || e.tcp_state().is_some_and(|s| s.can_early_drop()));
        if want != (e.tcp.ct_status & S_EVICT != 0) {
            e.tcp.ct_status ^= S_EVICT;
            self.evictable[idx / 64] ^= 1 << (idx % 64);
        }
    }

    fn remove_idx(&mut self, idx: u32) {
        self.index_remove(idx * 2 + 1);
        self.index_remove(idx * 2 + 2);
        let e = &mut self.entries[idx as usize];
        if e.tcp.ct_status & S_V6 != 0 {
            self.v6_free.push(e.addr[0]);
        }
        if e.tcp.ct_status & S_EVICT != 0 {
            self.evictable[idx as usize / 64] &= !(1 << (idx % 64));
        }
        e.tcp.ct_status = 0;
        e.addr[0] = self.free_head;
        self.free_head = idx;
        self.len -= 1;
    }
}

fn ctinfo<X>(e: &Entry<X>, d: usize) -> CtInfo {
    if d == 1 || e.seen_reply() {
        CtInfo::Established
    } else {
        CtInfo::New
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn entry_sizes() {
        assert_eq!(std::mem::size_of::<TcpConn>(), 48);
        assert!(std::mem::size_of::<Entry<()>>() <= 112);
        let ct: Conntrack<()> = Conntrack::new(Config {
            max_entries: 1 << 20,
            ..Config::default()
        });
        assert!(ct.bytes_per_entry() <= 128, "{}", ct.bytes_per_entry());
    }

    #[test]
    fn tcp_table_rows() {
        // sanity: every cell is a state, IV or IG
        for d in tcp::TABLE {
            for row in d {
                for c in row {
                    assert!(c <= 11);
                }
            }
        }
    }
}
