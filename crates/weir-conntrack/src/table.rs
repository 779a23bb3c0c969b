//! The connection table ([`Conntrack`]): the entry slab and its free list, the side slab of
//! IPv6 addresses, confirming and removing entries, the counters.

use crate::entry::{
    tick, MAX_TIMEOUT, S_ASSURED, S_EVICT, S_EXPECTED, S_LABELS, S_LIVE, S_SEEN_REPLY, S_SEQADJ,
    S_V6, TICK_SHIFT,
};
use crate::{Config, Dir, Entry, EntryId, Killed, Pending, Tuple};

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
    /// Expectations recorded by helpers.
    pub expect_created: u64,
    /// Expectations a new connection met.
    pub expect_matched: u64,
    /// Expectations refused (the table of expectations was full).
    pub expect_refused: u64,
}

/// The connection table. `X` is per-entry engine data.
#[derive(Clone, Debug)]
pub struct Conntrack<X> {
    pub(crate) cfg: Config,
    pub(crate) entries: Vec<Entry<X>>,
    free_head: u32,
    pub(crate) v6: Vec<[u128; 4]>,
    v6_free: Vec<u32>,
    pub(crate) slots: Vec<u32>,
    pub(crate) id_mask: u32,
    pub(crate) evict_cursor: usize,
    /// One bit per slab slot: the entry may be dropped early (not assured, or a closing TCP
    /// connection). The eviction clock looks here first, 64 slots a word.
    pub(crate) evictable: Vec<u64>,
    len: usize,
    pub(crate) gc_cursor: usize,
    pub(crate) max_ticks: u32,
    pub(crate) stats: Stats,
    pub(crate) killed: Option<Killed<X>>,
    pub(crate) expects: crate::expect::Expectations,
    /// Sequence shifts of connections with `S_SEQADJ`, by slot.
    pub(crate) seqadj: std::collections::HashMap<u32, [crate::expect::SeqOff; 2]>,
    /// Labels of entries with `S_LABELS`, by slot.
    labels: std::collections::HashMap<u32, u128>,
    /// SYN proxy state of the connections a SYN proxy opened, by slot.
    pub(crate) synproxy: std::collections::HashMap<u32, crate::synproxy::SynproxyExt>,
    /// Timeout policies (`ct timeout` objects), an entry's `policy` - 1 indexes them.
    policies: Vec<crate::Timeouts>,
    /// The zone of the packet [`Conntrack::track_in`] is tracking.
    pub(crate) cur_zone: crate::Zone,
}

const NIL: u32 = u32::MAX;

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

impl<X: Copy + Default> Conntrack<X> {
    /// An empty table. The hash index is allocated now (about 10.7 bytes per entry of
    /// `max_entries`); entries are allocated as they are confirmed.
    pub fn new(cfg: Config) -> Conntrack<X> {
        let mut cfg = cfg;
        cfg.max_entries = cfg.max_entries.clamp(1, 1 << 30);
        cfg.timeouts.clamp(MAX_TIMEOUT);
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
            cur_zone: crate::Zone::DEFAULT,
            expects: Default::default(),
            seqadj: Default::default(),
            policies: Vec::new(),
            labels: Default::default(),
            synproxy: Default::default(),
        }
    }

    /// Set the timeout policies entries may be given ([`Conntrack::set_policy`]; at most 255,
    /// each timeout at most 20 days). Entries keep their policy number: give the same list
    /// again, in the same order, after a reload.
    pub fn set_timeout_policies(&mut self, mut p: Vec<crate::Timeouts>) {
        p.truncate(255);
        for t in &mut p {
            t.clamp(MAX_TIMEOUT);
        }
        let max_t = p
            .iter()
            .chain(std::iter::once(&self.cfg.timeouts))
            .flat_map(|t| t.all())
            .max()
            .unwrap_or_default();
        self.max_ticks = self
            .max_ticks
            .max(((max_t.as_nanos() as u64) >> TICK_SHIFT) as u32 + 2);
        self.policies = p;
    }

    /// The timeouts of policy `p` (0, or one not set: the configured ones).
    #[inline]
    pub(crate) fn timeouts_of(&self, p: u8) -> crate::Timeouts {
        match p {
            0 => self.cfg.timeouts,
            p => self
                .policies
                .get(p as usize - 1)
                .copied()
                .unwrap_or(self.cfg.timeouts),
        }
    }

    /// Give a new connection timeout policy `p` (index + 1 into
    /// [`Conntrack::set_timeout_policies`]'s list) and its timeout for the state it is in (Linux
    /// `nft_ct_timeout_obj_eval`: the connection refreshed with the policy's first value).
    pub fn set_policy(&self, pend: &mut Pending<X>, p: u8, now_ns: u64) {
        let to = self.timeouts_of(p);
        let e = &mut pend.entry;
        e.tcp.policy = p;
        let t = match e.proto() {
            weir_wire::meta::proto::TCP => to.tcp(e.tcp.state()),
            weir_wire::meta::proto::UDP | weir_wire::meta::proto::UDPLITE => to.udp,
            weir_wire::meta::proto::ICMP | weir_wire::meta::proto::ICMPV6 => to.icmp,
            _ => to.generic,
        };
        e.refresh(now_ns, t);
    }

    /// A connection's labels (`ct label`: bit N for label N).
    #[inline]
    pub fn labels(&self, id: EntryId) -> u128 {
        match self.get(id) {
            Some(e) if e.tcp.ct_status & S_LABELS != 0 => {
                self.labels.get(&id.0).copied().unwrap_or(0)
            }
            _ => 0,
        }
    }

    /// Set a connection's labels (`ct label set` adds bits: give the union).
    pub fn set_labels(&mut self, id: EntryId, labels: u128) {
        if self.get(id).is_none() || labels == self.labels(id) {
            return;
        }
        self.entries[id.0 as usize].tcp.ct_status |= S_LABELS;
        self.labels.insert(id.0, labels);
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
        // the zone as the tuples carry it (what the index hashes): one id, in the directions
        // whose tuple has it
        let (zo, zr) = (p.orig.zone, p.reply.zone);
        if (zo, zr) != (e.zone_id(0), e.zone_id(1)) {
            e.zone = zo.max(zr);
            e.zone_dir = match (zo != 0, zr != 0) {
                (true, false) => crate::Zone::ORIGINAL,
                (false, true) => crate::Zone::REPLY,
                _ => crate::Zone::DEFAULT.dir,
            };
        }
        e.tcp.ct_status =
            (e.tcp.ct_status & (S_V6 | S_SEEN_REPLY | S_ASSURED | S_EXPECTED)) | S_LIVE;
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
        if p.labels != 0 {
            self.set_labels(EntryId(idx), p.labels);
        }
        Ok(EntryId(idx))
    }

    pub(crate) fn remove_idx(&mut self, idx: u32) {
        self.index_remove(idx * 2 + 1);
        self.index_remove(idx * 2 + 2);
        let e = &mut self.entries[idx as usize];
        if e.tcp.ct_status & S_V6 != 0 {
            self.v6_free.push(e.addr[0]);
        }
        if e.tcp.ct_status & S_EVICT != 0 {
            self.evictable[idx as usize / 64] &= !(1 << (idx % 64));
        }
        if e.tcp.ct_status & S_SEQADJ != 0 {
            self.seqadj.remove(&idx);
        }
        if e.tcp.ct_status & S_LABELS != 0 {
            self.labels.remove(&idx);
        }
        if !self.synproxy.is_empty() {
            self.synproxy.remove(&idx);
        }
        e.tcp.ct_status = 0;
        e.addr[0] = self.free_head;
        self.free_head = idx;
        self.len -= 1;
    }
}
