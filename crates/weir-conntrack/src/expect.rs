//! Expectations (Linux `nf_conntrack_expect`) and sequence adjustment (`nf_conntrack_seqadj`):
//! what connection-tracking helpers leave in the table.
//!
//! A helper that reads an FTP `PORT` command, a TFTP request or SIP media lines tells the table
//! which connection to expect ([`Conntrack::expect`]): its tuple, the source port possibly any.
//! The first packet that would create a connection with that tuple takes the expectation (once)
//! and becomes [`Track::New`] with [`Pending::master`] set: `ct state related` until the reply
//! is seen, as Linux's `IPS_EXPECTED`; [`Pending::follow`] carries the translation its master's
//! NAT asked for (`nf_nat_follow_master`). Expectations end with their timeout, when their master
//! is gone (checked when one is found: the master's slot must still hold the same connection),
//! and when a master has more than [`MAX_PER_MASTER`] (the oldest goes).
//!
//! A helper that changes a TCP payload's length records the shift of later sequence numbers
//! ([`Conntrack::seqadj_set`]); the TCP tracker reads acknowledgements of the other side through
//! it, as Linux's `tcp_in_window` does with `nf_ct_seq_offset`, and the engine rewrites `seq` and
//! `ack` of later packets with [`Conntrack::seq_offset`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::entry::{S_LIVE, S_SEQADJ};
use crate::{Conntrack, Dir, EntryId, Tuple};
#[cfg(doc)]
use crate::{Pending, Track};

/// At most this many expectations per master connection (the oldest is replaced).
pub const MAX_PER_MASTER: usize = 8;
/// At most this many expectations in the table (more are refused and counted).
pub const MAX_EXPECTATIONS: usize = 4096;

/// How an expected connection is translated (Linux `nf_nat_follow_master`): its source becomes
/// `src` and its destination `dst:dport`. `Follow::default()`: not translated by its master
/// (whose connection has no NAT); the `nat` chains decide, as for any new connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Follow {
    pub src: u128,
    pub dst: u128,
    pub dport: u16,
}

/// One expected connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expectation {
    /// The first packet's tuple; `sport` is ignored when `any_sport`.
    pub tuple: Tuple,
    pub any_sport: bool,
    pub master: EntryId,
    /// The master's original tuple (an id is a slab slot, reused after removal).
    pub master_orig: Tuple,
    pub follow: Follow,
    pub expires_ns: u64,
}

/// Why [`Conntrack::expect`] did not record an expectation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpectRefused {
    /// The master is not in the table.
    NoMaster,
    /// The table holds [`MAX_EXPECTATIONS`].
    Full,
}

type Key = (u128, u16, u8, bool);

fn key(t: &Tuple) -> Key {
    (t.dst, t.dport, t.proto, t.v6)
}

/// Expectations by destination, each with the table (worker) whose connection is its master.
type Map = HashMap<Key, Vec<(u32, Expectation)>>;

/// Expectations shared by the tables of several workers
/// ([`Conntrack::share_expectations`]): an expected connection is steered by its own
/// addresses and ports, so it may reach another worker than its master's; that worker finds
/// the expectation here. Each table checks its own masters' expectations when it sweeps
/// (`expect_gc`); the others trust them until they expire.
#[derive(Debug, Default)]
pub struct SharedExpectations {
    /// How many there are (read without the lock: most new connections expect nothing).
    len: AtomicUsize,
    map: Mutex<Map>,
}

/// The expectations of a table, by destination: its own, or the workers' shared ones.
#[derive(Clone, Debug, Default)]
pub(crate) struct Expectations {
    by_dst: Map,
    pub(crate) len: usize,
    /// Shared with other workers' tables, and this table's number among them.
    shared: Option<(Arc<SharedExpectations>, u32)>,
}

impl Expectations {
    /// This table's number among those sharing (0 alone).
    fn me(&self) -> u32 {
        self.shared.as_ref().map_or(0, |s| s.1)
    }

    /// Whether there may be any expectation to find.
    pub(crate) fn any(&self) -> bool {
        match &self.shared {
            Some((s, _)) => s.len.load(Ordering::Relaxed) > 0,
            None => self.len > 0,
        }
    }

    /// Run `f` on the map and its length (the shared one under its lock).
    fn with<R>(&mut self, f: impl FnOnce(&mut Map, &mut usize) -> R) -> R {
        match &self.shared {
            Some((s, _)) => {
                let mut m = s.map.lock().unwrap_or_else(|e| e.into_inner());
                let mut n = s.len.load(Ordering::Relaxed);
                let r = f(&mut m, &mut n);
                s.len.store(n, Ordering::Relaxed);
                r
            }
            None => f(&mut self.by_dst, &mut self.len),
        }
    }
}

/// A TCP connection's sequence shift in one direction (Linux `struct nf_ct_seqadj`): segments
/// starting after `pos` are shifted by `after`, earlier ones (retransmissions) by `before`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqOff {
    pub pos: u32,
    pub before: i32,
    pub after: i32,
}

fn seq_after(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) < 0
}

impl<X: Copy + Default> Conntrack<X> {
    /// Expect a connection (see the module docs). `tuple.sport` is ignored when `any_sport`.
    pub fn expect(
        &mut self,
        master: EntryId,
        tuple: Tuple,
        any_sport: bool,
        follow: Follow,
        timeout_ns: u64,
        now_ns: u64,
    ) -> Result<(), ExpectRefused> {
        let Some(master_orig) = self.tuple(master, Dir::Original) else {
            return Err(ExpectRefused::NoMaster);
        };
        // the expected connection is in its master's zone
        let mut tuple = tuple;
        tuple.zone = self.get(master).map_or(0, |e| e.zone().id);
        let me = self.expects.me();
        let r = self.expects.with(|map, len| {
            let list = map.entry(key(&tuple)).or_default();
            let before = list.len();
            // the same expectation again (a retransmitted command) replaces the old one
            list.retain(|(o, e)| {
                !(*o == me && e.tuple == tuple && e.any_sport == any_sport && e.master == master)
                    && e.expires_ns > now_ns
            });
            *len -= before - list.len();
            if list.is_empty() {
                map.remove(&key(&tuple));
            }
            let mine = |o: &u32, e: &Expectation| *o == me && e.master == master;
            let n: usize = map
                .values()
                .map(|l| l.iter().filter(|(o, e)| mine(o, e)).count())
                .sum();
            if n >= MAX_PER_MASTER {
                let oldest = map
                    .iter()
                    .flat_map(|(k, l)| l.iter().map(move |x| (*k, x)))
                    .filter(|(_, (o, e))| mine(o, e))
                    .min_by_key(|(_, (_, e))| e.expires_ns)
                    .map(|(k, x)| (k, *x));
                if let Some((k, x)) = oldest {
                    if let Some(l) = map.get_mut(&k) {
                        l.retain(|y| *y != x);
                        *len -= 1;
                        if l.is_empty() {
                            map.remove(&k);
                        }
                    }
                }
            }
            if *len >= MAX_EXPECTATIONS {
                return Err(ExpectRefused::Full);
            }
            map.entry(key(&tuple)).or_default().push((
                me,
                Expectation {
                    tuple,
                    any_sport,
                    master,
                    master_orig,
                    follow,
                    expires_ns: now_ns.saturating_add(timeout_ns),
                },
            ));
            *len += 1;
            Ok(())
        });
        match r {
            Ok(()) => self.stats.expect_created += 1,
            Err(_) => self.stats.expect_refused += 1,
        }
        r
    }

    /// The expectations this table's connections made (expired ones may still be listed).
    pub fn expectations(&mut self) -> Vec<Expectation> {
        let me = self.expects.me();
        self.expects.with(|map, _| {
            map.values()
                .flatten()
                .filter(|(o, _)| *o == me)
                .map(|(_, e)| *e)
                .collect()
        })
    }

    /// Take the expectation a new connection's first packet (tuple `t`) meets, if any.
    pub(crate) fn take_expected(&mut self, t: &Tuple, now_ns: u64) -> Option<Expectation> {
        if !self.expects.any() {
            return None;
        }
        let k = key(t);
        let zone = self.cur_zone.id;
        let (owner, e) = self.expects.with(|map, len| {
            let list = map.get_mut(&k)?;
            let mut found = None;
            let mut i = 0;
            while i < list.len() {
                let (o, e) = list[i];
                let stale = e.expires_ns <= now_ns;
                let hit = !stale
                    && e.tuple.zone == zone
                    && e.tuple.src == t.src
                    && (e.any_sport || e.tuple.sport == t.sport)
                    && found.is_none();
                if stale || hit {
                    list.swap_remove(i);
                    *len -= 1;
                    if hit {
                        found = Some((o, e));
                    }
                    continue;
                }
                i += 1;
            }
            if list.is_empty() {
                map.remove(&k);
            }
            found
        })?;
        // the master must still be the connection that asked (another worker's master: that
        // worker's sweep drops its expectations when it goes)
        if owner == self.expects.me() {
            let alive = self.get(e.master).is_some()
                && self.tuple(e.master, Dir::Original) == Some(e.master_orig);
            if !alive {
                return None;
            }
        }
        self.stats.expect_matched += 1;
        Some(e)
    }

    /// Share expectations with the tables of other workers (each given the same `shared` and
    /// its own number `me`): see [`SharedExpectations`]. This table's own expectations move
    /// there.
    pub fn share_expectations(&mut self, shared: Arc<SharedExpectations>, me: u32) {
        let own: Vec<Expectation> = self.expectations();
        self.expects.by_dst.clear();
        self.expects.len = 0;
        self.expects.shared = Some((shared, me));
        self.expects.with(|map, len| {
            for e in own {
                map.entry(key(&e.tuple)).or_default().push((me, e));
                *len += 1;
            }
        });
    }

    /// Drop expired expectations and those whose master is gone ([`Conntrack::gc`] does it
    /// once per sweep of the table).
    pub fn expect_gc(&mut self, now_ns: u64) {
        let me = self.expects.me();
        // this table's masters, checked outside the shared lock
        let mut ex = std::mem::take(&mut self.expects);
        ex.with(|map, len| {
            map.retain(|_, l| {
                l.retain(|(o, e)| {
                    e.expires_ns > now_ns
                        && (*o != me
                            || (self
                                .entries
                                .get(e.master.0 as usize)
                                .is_some_and(|x| x.tcp.ct_status & S_LIVE != 0)
                                && self.tuple(e.master, Dir::Original) == Some(e.master_orig)))
                });
                !l.is_empty()
            });
            *len = map.values().map(Vec::len).sum();
        });
        self.expects = ex;
    }

    /// Record that a helper changed the length of the segment of `id` in direction `d` that
    /// starts at `seq` by `delta` bytes (Linux `nf_ct_seqadj_set`).
    pub fn seqadj_set(&mut self, id: EntryId, d: Dir, seq: u32, delta: i32) {
        if delta == 0 || self.get(id).is_none() {
            return;
        }
        self.entries[id.0 as usize].tcp.ct_status |= S_SEQADJ;
        let o = &mut self.seqadj.entry(id.0).or_default()[d as usize];
        if o.before == o.after || seq_after(seq, o.pos) {
            // a new correction point (Linux: only when the segment is after the last one)
            o.pos = seq;
            o.before = o.after;
            o.after = o.after.wrapping_add(delta);
        }
    }

    /// The sequence shift of direction `d` of a connection, if a helper made one.
    pub fn seqadj(&self, id: EntryId, d: Dir) -> Option<SeqOff> {
        let e = self.get(id)?;
        if e.tcp.ct_status & S_SEQADJ == 0 {
            return None;
        }
        self.seqadj.get(&id.0).map(|o| o[d as usize])
    }

    /// The shift of sequence numbers of direction `d` for a segment starting at `seq`.
    pub fn seq_offset(&self, id: EntryId, d: Dir, seq: u32) -> i32 {
        let Some(e) = self.get(id) else { return 0 };
        if e.tcp.ct_status & S_SEQADJ == 0 {
            return 0;
        }
        match self.seqadj.get(&id.0) {
            Some(o) => {
                let o = o[d as usize];
                if seq_after(seq, o.pos) {
                    o.after
                } else {
                    o.before
                }
            }
            None => 0,
        }
    }
}
