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

/// The expectations of a table, by destination.
#[derive(Clone, Debug, Default)]
pub(crate) struct Expectations {
    by_dst: HashMap<Key, Vec<Expectation>>,
    pub(crate) len: usize,
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
        let ex = &mut self.expects;
        let list = ex.by_dst.entry(key(&tuple)).or_default();
        let before = list.len();
        // the same expectation again (a retransmitted command) replaces the old one
        list.retain(|e| {
            !(e.tuple == tuple && e.any_sport == any_sport && e.master == master)
                && e.expires_ns > now_ns
        });
        ex.len -= before - list.len();
        if list.is_empty() {
            ex.by_dst.remove(&key(&tuple));
        }
        let mine: usize = ex
            .by_dst
            .values()
            .map(|l| l.iter().filter(|e| e.master == master).count())
            .sum();
        if mine >= MAX_PER_MASTER {
            let oldest = ex
                .by_dst
                .iter()
                .flat_map(|(k, l)| l.iter().map(move |e| (*k, e)))
                .filter(|(_, e)| e.master == master)
                .min_by_key(|(_, e)| e.expires_ns)
                .map(|(k, e)| (k, *e));
            if let Some((k, e)) = oldest {
                if let Some(l) = ex.by_dst.get_mut(&k) {
                    l.retain(|x| *x != e);
                    ex.len -= 1;
                    if l.is_empty() {
                        ex.by_dst.remove(&k);
                    }
                }
            }
        }
        if ex.len >= MAX_EXPECTATIONS {
            self.stats.expect_refused += 1;
            return Err(ExpectRefused::Full);
        }
        ex.by_dst.entry(key(&tuple)).or_default().push(Expectation {
            tuple,
            any_sport,
            master,
            master_orig,
            follow,
            expires_ns: now_ns.saturating_add(timeout_ns),
        });
        ex.len += 1;
        self.stats.expect_created += 1;
        Ok(())
    }

    /// The expectations in the table (expired ones may still be listed).
    pub fn expectations(&self) -> impl Iterator<Item = &Expectation> + '_ {
        self.expects.by_dst.values().flatten()
    }

    /// Take the expectation a new connection's first packet (tuple `t`) meets, if any.
    pub(crate) fn take_expected(&mut self, t: &Tuple, now_ns: u64) -> Option<Expectation> {
        if self.expects.len == 0 {
            return None;
        }
        let k = key(t);
        let list = self.expects.by_dst.get_mut(&k)?;
        let mut found = None;
        let mut i = 0;
        while i < list.len() {
            let e = list[i];
            let stale = e.expires_ns <= now_ns;
            let hit = !stale
                && e.tuple.src == t.src
                && (e.any_sport || e.tuple.sport == t.sport)
                && found.is_none();
            if stale || hit {
                list.swap_remove(i);
                self.expects.len -= 1;
                if hit {
                    found = Some(e);
                }
                continue;
            }
            i += 1;
        }
        if list.is_empty() {
            self.expects.by_dst.remove(&k);
        }
        let e = found?;
        // the master must still be the connection that asked
        let alive = self.get(e.master).is_some()
            && self.tuple(e.master, Dir::Original) == Some(e.master_orig);
        if !alive {
            return None;
        }
        self.stats.expect_matched += 1;
        Some(e)
    }

    /// Drop expired expectations and those whose master is gone ([`Conntrack::gc`] does it
    /// once per sweep of the table).
    pub fn expect_gc(&mut self, now_ns: u64) {
        let alive = |c: &Self, e: &Expectation| {
            e.expires_ns > now_ns
                && c.entries
                    .get(e.master.0 as usize)
                    .is_some_and(|x| x.tcp.ct_status & S_LIVE != 0)
                && c.tuple(e.master, Dir::Original) == Some(e.master_orig)
        };
        let mut by_dst = std::mem::take(&mut self.expects.by_dst);
        by_dst.retain(|_, l| {
            l.retain(|e| alive(self, e));
            !l.is_empty()
        });
        self.expects.len = by_dst.values().map(Vec::len).sum();
        self.expects.by_dst = by_dst;
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
