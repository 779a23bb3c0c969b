//! One tracked connection ([`Entry`]), one not yet in the table ([`Pending`]) and one a
//! packet ended ([`Killed`]); the entry's status bits, and the ticks of 2^20 ns its deadline
//! is kept in.

use std::time::Duration;

use weir_wire::meta::proto;

#[cfg(doc)]
use crate::{Conntrack, Track};
use crate::{Dir, EntryId, TcpConn, TcpState, Tuple};

pub(crate) const TICK_SHIFT: u32 = 20;
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(20 * 86400);

// Entry status bits.
pub(crate) const S_V6: u8 = 0x01;
pub(crate) const S_SEEN_REPLY: u8 = 0x02;
pub(crate) const S_ASSURED: u8 = 0x04;
pub(crate) const S_LIVE: u8 = 0x08;
/// The entry's bit is set in the evictable bitmap.
pub(crate) const S_EVICT: u8 = 0x10;
/// The connection was expected by a helper (Linux `IPS_EXPECTED`): `related` until a reply.
pub(crate) const S_EXPECTED: u8 = 0x20;
/// A helper shifted the connection's sequence numbers (Linux `IPS_SEQ_ADJUST`).
pub(crate) const S_SEQADJ: u8 = 0x40;
/// The connection has labels (`ct label set`), kept beside the table.
pub(crate) const S_LABELS: u8 = 0x80;

#[inline]
pub(crate) fn tick(now_ns: u64) -> u32 {
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
    pub(crate) addr: [u32; 4],
    /// Original sport, dport, reply sport, dport.
    pub(crate) port: [u16; 4],
    pub(crate) deadline: u32,
    /// The connection's zone ([`crate::Zone`]): its id and directions (in the deadline's
    /// padding).
    pub(crate) zone: u16,
    pub(crate) zone_dir: u8,
    /// Engine data (NAT binding, cached forwarding decision, offload flag...).
    pub ext: X,
    /// TCP state (UDP keeps its stream tick in `end[0]`); it starts with the protocol and
    /// status bytes.
    pub(crate) tcp: TcpConn,
    /// The connection mark (`ct mark`).
    pub mark: u32,
    packets: [u32; 2],
    bytes: [u64; 2],
}

impl<X: Copy + Default> Entry<X> {
    pub(crate) fn blank(proto: u8, v6: bool) -> Entry<X> {
        Entry {
            addr: [0; 4],
            port: [0; 4],
            deadline: 0,
            zone: 0,
            zone_dir: crate::Zone::DEFAULT.dir,
            mark: 0,
            packets: [0; 2],
            bytes: [0; 2],
            tcp: TcpConn::with_header(proto, if v6 { S_V6 } else { 0 }),
            ext: X::default(),
        }
    }
}

impl<X> Entry<X> {
    /// The connection's conntrack zone.
    pub fn zone(&self) -> crate::Zone {
        crate::Zone {
            id: self.zone,
            dir: self.zone_dir,
        }
    }

    /// The zone id of the connection's tuple of direction `d` (index 0 or 1).
    #[inline]
    pub(crate) fn zone_id(&self, d: usize) -> u16 {
        if self.zone_dir & (1 << d) != 0 {
            self.zone
        } else {
            0
        }
    }

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
    /// Expected by a helper (Linux `IPS_EXPECTED`).
    pub fn expected(&self) -> bool {
        self.tcp.ct_status & S_EXPECTED != 0
    }
    /// A helper shifted the connection's sequence numbers (Linux `IPS_SEQ_ADJUST`).
    pub fn seq_adjusted(&self) -> bool {
        self.tcp.ct_status & S_SEQADJ != 0
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
    pub(crate) fn account(&mut self, d: usize, len: u32) {
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
    pub(crate) orig: Tuple,
    pub(crate) reply: Tuple,
    /// The entry to insert: protocol state, counters, deadline of the first packet. Set
    /// `entry.mark` and `entry.ext` as needed.
    pub entry: Entry<X>,
    /// The connection whose helper expected this one (see [`crate::expect`]).
    pub master: Option<EntryId>,
    /// How the expectation asks this connection to be translated.
    pub follow: Option<crate::Follow>,
    /// Its labels (`ct label set`), kept when it is confirmed.
    pub labels: u128,
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
