//! Expiry and eviction: deadlines passed (found by a lookup, or by [`Conntrack::gc`]), the
//! evictable bitmap, and the eviction clock that makes room when the table is full.

use crate::entry::{tick, S_EVICT, S_LIVE};
use crate::{Conntrack, Entry};

/// Words of the evictable bitmap (64 slots each) the eviction clock looks at for one new
/// connection when the table is full (131,072 slots).
const EVICT_WORDS: usize = 2048;

/// Slab slots then searched for an expired entry before the connection is refused.
const EVICT_SCAN: usize = 256;

impl<X: Copy + Default> Conntrack<X> {
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
                // once per sweep of the table: expectations that expired or lost their master
                if self.expects.any() {
                    self.expect_gc(now_ns);
                }
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

    pub(crate) fn is_expired(&self, e: &Entry<X>, now: u32) -> bool {
        let rem = e.deadline.wrapping_sub(now);
        rem == 0 || rem > self.max_ticks
    }

    /// Make room for one entry: the eviction clock moves over the slab from where it last
    /// stopped and removes the first entry that has expired or may be dropped early (not
    /// assured, or a closing TCP connection), looking at no more than [`EVICT_SCAN`] slots.
    pub(crate) fn make_room(&mut self, now_ns: u64) -> bool {
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

    /// Keep the entry's evictable bit (and `S_EVICT`) in step with its state: set while it is
    /// not assured or is a closing TCP connection. Touches the bitmap only on a change.
    #[inline]
    pub(crate) fn update_evictable(&mut self, idx: usize) {
        let e = &mut self.entries[idx];
        let live = e.tcp.ct_status & S_LIVE != 0;
        let want = live && (!e.assured() || e.tcp_state().is_some_and(|s| s.can_early_drop()));
        if want != (e.tcp.ct_status & S_EVICT != 0) {
            e.tcp.ct_status ^= S_EVICT;
            self.evictable[idx / 64] ^= 1 << (idx % 64);
        }
    }
}
