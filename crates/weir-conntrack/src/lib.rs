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
//! A packet given a conntrack zone (`ct zone set`, [`Zone`]) is tracked with
//! [`Conntrack::track_in`]: the zone's id is part of each direction's [`Tuple`] (hashed and
//! compared), so one tuple in two zones is two connections.
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
//! - Expectations ([`expect`]): connections a helper announced are `Related` until their
//!   reply; sequence shifts of payloads a helper rewrote are read through by the TCP tracker.
//! - Everything else (SCTP, DCCP, GRE, ESP, ...): the generic tracker, 600 s, keyed on
//!   addresses, protocol and, where the protocol has them, ports.
//!
//! # Not done (differences from Linux)
//!
//! - No IP defragmentation: a non-first fragment is [`Invalid::Fragment`]; a first fragment is
//!   tracked by its transport header (Linux reassembles before conntrack). The engine's
//!   virtual reassembly (`weir_engine::frag`) gives later fragments their first's connection
//!   and counts their TCP payload with [`Entry::extend_sent`].
//! - No SCTP / DCCP / GRE state machines (generic tracker instead), no checksum
//!   verification (`nf_conntrack_checksum`), no retransmission counter
//!   (`nf_conntrack_tcp_max_retrans` / `timeout_max_retrans`), no zero-window timeout, no
//!   "overshot window" work-around of Linux 6.x, no UDP clash resolution (a clash at confirm
//!   is refused).
//! - Packet counters are 32-bit (wrapping), byte counters 64-bit.

pub mod steer;
pub mod tcp;

mod config;
mod entry;
mod evict;
pub mod expect;
mod index;
mod prefetch;
pub mod synproxy;
mod table;
mod track;
mod tuple;
#[cfg(test)]
mod unit;

pub use config::{Config, Timeouts};
pub use entry::{Entry, Killed, Pending};
pub use expect::{ExpectRefused, Expectation, Follow, SeqOff, SharedExpectations};
pub use table::{Conntrack, Refused, Stats};
pub use tcp::{TcpConn, TcpState};
pub use track::{CtInfo, Invalid, Track};
pub use tuple::{Dir, EntryId, Tuple, Zone};
