//! Prefetching for batches of packets: hints that start loading, a stage at a time, the hash
//! index slot, the entry's first bytes and the rest of the entry a lookup will read.

use crate::{Conntrack, Entry, Tuple};

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

impl<X: Copy + Default> Conntrack<X> {
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
}
