//! Tuple space search with TupleMerge-style relaxed tuples (see the crate docs).

use std::collections::{BTreeMap, HashMap};

use crate::{check_widths, Entry};

/// Default bucket-size limit above which a bucket is split into a more specific table.
const DEFAULT_BUCKET_LIMIT: usize = 8;

/// Entry in compiled form: `key[d] - lo[d] <= span[d]` (wrapping) for every `d`.
#[derive(Clone, Copy, Debug)]
struct CEntry<const D: usize> {
    lo: [u64; D],
    span: [u64; D],
    prio: u32,
    rule: u32,
    residual: bool,
}

impl<const D: usize> CEntry<D> {
    #[inline(always)]
    fn matches(&self, key: &[u64; D]) -> bool {
        let mut ok = true;
        for d in 0..D {
            ok &= key[d].wrapping_sub(self.lo[d]) <= self.span[d];
        }
        ok
    }
}

/// Hash-table slot. `len == 0` marks an empty slot.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// 32-bit hash of the masked key; also decides the home position.
    hash: u32,
    /// Priority of the bucket's first (best) entry.
    best: u32,
    /// First entry of the bucket's run in the table's arena.
    start: u32,
    /// Number of entries in the run (capacity is `len.next_power_of_two()`).
    len: u32,
}

#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

const SEEDS: [u64; 8] = [
    0x243F_6A88_85A3_08D3,
    0x1319_8A2E_0370_7344,
    0xA409_3822_299F_31D0,
    0x082E_FA98_EC4E_6C89,
    0x4528_21E6_38D0_1377,
    0xBE54_66CF_34E9_0C6C,
    0xC0AC_29B7_C97C_50DD,
    0x3F84_D5B5_B547_0917,
];
const MUL: u64 = 0x9E37_79B9_7F4A_7C15;
const MUL2: u64 = 0xD6E8_FEB8_6659_FD93;

#[inline(always)]
fn hash_masked<const D: usize>(key: &[u64; D], masks: &[u64; D]) -> u32 {
    let mut h: u64 = 0;
    for d in 0..D {
        h = h.wrapping_add(fold_mul((key[d] & masks[d]) ^ SEEDS[d % 8], MUL ^ (d as u64)));
    }
    (fold_mul(h, MUL2) >> 32) as u32
}

/// Length of the common prefix of `lo` and `hi` within a `w`-bit field.
#[inline]
fn cpl(lo: u64, hi: u64, w: u8) -> u8 {
    let lz = (lo ^ hi).leading_zeros() as i32 - (64 - i32::from(w));
    lz.clamp(0, i32::from(w)) as u8
}

/// Mask of the top `len` bits of a `w`-bit field.
#[inline]
fn prefix_mask(len: u8, w: u8) -> u64 {
    let field = u64::MAX >> (64 - u32::from(w));
    let low_bits = u32::from(w - len);
    let low = if low_bits >= 64 { u64::MAX } else { (1u64 << low_bits) - 1 };
    field & !low
}

#[inline]
fn run_cap(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        len.next_power_of_two()
    }
}

/// One hash table: all entries whose per-dimension common-prefix lengths are >= `lens`.
#[derive(Clone, Debug)]
struct Table<const D: usize> {
    masks: [u64; D],
    /// Smallest prio in the table (exact).
    best: u32,
    /// Largest prio in the table (exact).
    worst: u32,
    slot_mask: u32,
    slots: Vec<Slot>,
    arena: Vec<CEntry<D>>,
    lens: [u8; D],
    nbuckets: usize,
    nentries: usize,
    garbage: usize,
    prios: BTreeMap<u32, u32>,
}

impl<const D: usize> Table<D> {
    fn new(lens: [u8; D], widths: &[u8; D], expected_buckets: usize) -> Self {
        let mut masks = [0u64; D];
        for d in 0..D {
            masks[d] = prefix_mask(lens[d], widths[d]);
        }
        let nslots = (expected_buckets * 2).max(8).next_power_of_two();
        Table {
            masks,
            best: u32::MAX,
            worst: 0,
            slot_mask: (nslots - 1) as u32,
            slots: vec![Slot::default(); nslots],
            arena: Vec::new(),
            lens,
            nbuckets: 0,
            nentries: 0,
            garbage: 0,
            prios: BTreeMap::new(),
        }
    }

    /// Bulk load into an empty table: `entries` sorted by prio, `nbuckets` distinct hashes.
    fn fill(&mut self, entries: Vec<CEntry<D>>, nbuckets: usize) {
        debug_assert_eq!(self.nentries, 0);
        self.resize((nbuckets * 2).max(8).next_power_of_two());
        // Group by hash (stable, so each group stays sorted by prio).
        let mut keyed: Vec<(u32, CEntry<D>)> = entries.into_iter().map(|e| (self.hash(&e.lo), e)).collect();
        keyed.sort_by_key(|(h, _)| *h);
        let total: usize = {
            let mut n = 0;
            let mut i = 0;
            while i < keyed.len() {
                let j = i + keyed[i..].iter().take_while(|(h, _)| *h == keyed[i].0).count();
                n += run_cap(j - i);
                i = j;
            }
            n
        };
        self.arena = Vec::with_capacity(total);
        let mask = self.slot_mask as usize;
        let mut i = 0;
        while i < keyed.len() {
            let h = keyed[i].0;
            let j = i + keyed[i..].iter().take_while(|(x, _)| *x == h).count();
            let start = self.arena.len();
            self.arena.extend(keyed[i..j].iter().map(|(_, e)| *e));
            let pad = keyed[i].1;
            self.arena.extend(std::iter::repeat_n(pad, run_cap(j - i) - (j - i)));
            for (_, e) in &keyed[i..j] {
                *self.prios.entry(e.prio).or_insert(0) += 1;
            }
            let mut s = h as usize & mask;
            while self.slots[s].len != 0 {
                s = (s + 1) & mask;
            }
            self.slots[s] = Slot { hash: h, best: keyed[i].1.prio, start: start as u32, len: (j - i) as u32 };
            self.nbuckets += 1;
            self.nentries += j - i;
            i = j;
        }
        self.refresh_bounds();
    }

    #[inline(always)]
    fn hash(&self, key: &[u64; D]) -> u32 {
        hash_masked(key, &self.masks)
    }

    #[inline(always)]
    fn find(&self, h: u32) -> Option<usize> {
        let mask = self.slot_mask as usize;
        let mut i = h as usize & mask;
        loop {
            let s = &self.slots[i];
            if s.len == 0 {
                return None;
            }
            if s.hash == h {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    fn fits(&self, c: &[u8; D]) -> bool {
        (0..D).all(|d| c[d] >= self.lens[d])
    }

    fn bucket_len(&self, h: u32) -> usize {
        self.find(h).map_or(0, |i| self.slots[i].len as usize)
    }

    fn bucket(&self, i: usize) -> &[CEntry<D>] {
        let s = self.slots[i];
        &self.arena[s.start as usize..(s.start + s.len) as usize]
    }

    fn refresh_bounds(&mut self) {
        self.best = self.prios.keys().next().copied().unwrap_or(u32::MAX);
        self.worst = self.prios.keys().next_back().copied().unwrap_or(0);
    }

    fn resize(&mut self, nslots: usize) {
        let old = std::mem::replace(&mut self.slots, vec![Slot::default(); nslots]);
        self.slot_mask = (nslots - 1) as u32;
        let mask = nslots - 1;
        for s in old.into_iter().filter(|s| s.len != 0) {
            let mut i = s.hash as usize & mask;
            while self.slots[i].len != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = s;
        }
    }

    /// Inserts one entry; returns the hash of its bucket.
    fn insert(&mut self, ce: CEntry<D>) -> u32 {
        if (self.nbuckets + 1) * 2 > self.slots.len() {
            self.resize(self.slots.len() * 2);
        }
        let h = self.hash(&ce.lo);
        let mask = self.slot_mask as usize;
        let mut i = h as usize & mask;
        loop {
            let s = self.slots[i];
            if s.len == 0 {
                let start = self.arena.len() as u32;
                self.arena.push(ce);
                self.slots[i] = Slot { hash: h, best: ce.prio, start, len: 1 };
                self.nbuckets += 1;
                break;
            }
            if s.hash == h {
                let len = s.len as usize;
                let cap = run_cap(len);
                let mut start = s.start as usize;
                if len == cap {
                    let new_start = self.arena.len();
                    self.arena.extend_from_within(start..start + len);
                    self.arena.extend(std::iter::repeat_n(ce, cap));
                    self.garbage += cap;
                    start = new_start;
                }
                let run = &mut self.arena[start..start + len + 1];
                let pos = run[..len].partition_point(|x| x.prio <= ce.prio);
                run.copy_within(pos..len, pos + 1);
                run[pos] = ce;
                self.slots[i] = Slot { hash: h, best: run[0].prio, start: start as u32, len: s.len + 1 };
                break;
            }
            i = (i + 1) & mask;
        }
        *self.prios.entry(ce.prio).or_insert(0) += 1;
        self.nentries += 1;
        self.refresh_bounds();
        h
    }

    fn delete_slot(&mut self, mut i: usize) {
        let mask = self.slot_mask as usize;
        'outer: loop {
            self.slots[i].len = 0;
            let mut j = i;
            loop {
                j = (j + 1) & mask;
                if self.slots[j].len == 0 {
                    break 'outer;
                }
                let home = self.slots[j].hash as usize & mask;
                let stays = if i <= j { i < home && home <= j } else { i < home || home <= j };
                if !stays {
                    self.slots[i] = self.slots[j];
                    i = j;
                    continue 'outer;
                }
            }
        }
        self.nbuckets -= 1;
    }

    /// Removes the entries of bucket `h` for which `take` is true, returning them.
    fn take_from_bucket(&mut self, h: u32, mut take: impl FnMut(&CEntry<D>) -> bool) -> Vec<CEntry<D>> {
        let Some(i) = self.find(h) else { return Vec::new() };
        let s = self.slots[i];
        let len = s.len as usize;
        let run = &mut self.arena[s.start as usize..s.start as usize + len];
        let mut taken = Vec::new();
        let mut w = 0;
        for r in 0..len {
            if take(&run[r]) {
                taken.push(run[r]);
            } else {
                run[w] = run[r];
                w += 1;
            }
        }
        if taken.is_empty() {
            return taken;
        }
        for e in &taken {
            match self.prios.get_mut(&e.prio) {
                Some(c) if *c > 1 => *c -= 1,
                _ => {
                    self.prios.remove(&e.prio);
                }
            }
        }
        self.nentries -= taken.len();
        self.garbage += run_cap(len) - run_cap(w);
        if w == 0 {
            self.delete_slot(i);
        } else {
            self.slots[i].len = w as u32;
            self.slots[i].best = run[0].prio;
        }
        self.refresh_bounds();
        if self.garbage > 64 && self.garbage * 2 > self.arena.len() {
            self.compact();
        }
        taken
    }

    fn compact(&mut self) {
        let mut arena = Vec::with_capacity(self.arena.len() - self.garbage);
        for s in self.slots.iter_mut().filter(|s| s.len != 0) {
            let start = s.start as usize;
            let len = s.len as usize;
            s.start = arena.len() as u32;
            arena.extend_from_slice(&self.arena[start..start + len]);
            let pad = self.arena[start];
            arena.extend(std::iter::repeat_n(pad, run_cap(len) - len));
        }
        self.arena = arena;
        self.garbage = 0;
    }

    fn memory_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.arena.capacity() * std::mem::size_of::<CEntry<D>>()
            // BTreeMap<u32, u32>: roughly 8 bytes of payload per key plus node overhead.
            + self.prios.len() * 16
    }
}

/// Shape of a [`Classifier`], for benchmarks and tuning.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Number of hash tables.
    pub tables: usize,
    /// Number of buckets over all tables.
    pub buckets: usize,
    /// Largest bucket.
    pub max_bucket: usize,
    /// Per table: (tuple lengths, entries, buckets), in lookup order.
    pub per_table: Vec<(Vec<u8>, usize, usize)>,
}

/// Multi-field classifier: tuple space search over TupleMerge-style relaxed tuples.
///
/// See the crate documentation for how it works and what it costs.
#[derive(Clone, Debug)]
pub struct Classifier<const D: usize> {
    widths: [u8; D],
    /// Sorted by `best` (ascending): the lookup order.
    tables: Vec<Table<D>>,
    /// Every entry, by rule payload (for `remove_rule`).
    by_rule: HashMap<u32, Vec<Entry<D>>>,
    len: usize,
    bucket_limit: usize,
}

impl<const D: usize> Classifier<D> {
    /// An empty classifier. `widths[d]` is the number of significant bits of dimension `d`
    /// (`1..=64`); keys are expected to be `< 2^width` in each dimension.
    ///
    /// # Panics
    /// If a width is outside `1..=64`.
    pub fn new(widths: [u8; D]) -> Self {
        check_widths(&widths);
        Classifier {
            widths,
            tables: Vec::new(),
            by_rule: HashMap::new(),
            len: 0,
            bucket_limit: DEFAULT_BUCKET_LIMIT,
        }
    }

    /// Builds a classifier from a list of entries (any order).
    pub fn build(widths: [u8; D], entries: Vec<Entry<D>>) -> Self {
        Self::build_with_limit(widths, entries, DEFAULT_BUCKET_LIMIT)
    }

    #[doc(hidden)]
    pub fn build_with_limit(widths: [u8; D], mut entries: Vec<Entry<D>>, limit: usize) -> Self {
        let mut c = Self::new(widths);
        c.bucket_limit = limit.max(1);
        entries.sort_by_key(|e| e.prio);
        let mut remaining: Vec<(CEntry<D>, [u8; D])> = Vec::with_capacity(entries.len());
        for e in &entries {
            if let Some(ce) = Self::compile(e) {
                remaining.push((ce, c.cpls(e)));
            }
        }
        while !remaining.is_empty() {
            let lens = c.select_tuple(&remaining);
            let mut t = Table::new(lens, &widths, 0);
            let mut counts: HashMap<u32, usize> = HashMap::new();
            let mut rest = Vec::new();
            let mut taken = Vec::new();
            for (ce, cp) in remaining {
                if t.fits(&cp) {
                    let n = counts.entry(t.hash(&ce.lo)).or_insert(0);
                    if *n < c.bucket_limit {
                        *n += 1;
                        taken.push(ce);
                        continue;
                    }
                }
                rest.push((ce, cp));
            }
            t.fill(taken, counts.len());
            c.tables.push(t);
            remaining = rest;
        }
        c.resort();
        c.len = entries.len();
        for e in entries {
            c.by_rule.entry(e.rule).or_default().push(e);
        }
        c
    }

    /// TupleMerge's offline table selection: generalise the tuple along the remaining entries
    /// (in priority order) and keep the one that covers the longest priority prefix.
    fn select_tuple(&self, remaining: &[(CEntry<D>, [u8; D])]) -> [u8; D] {
        let mut best_tuple = remaining[0].1;
        let mut best_index = 0usize;
        let mut best_size = 0usize;
        let mut current = remaining[0].1;
        let mut first = true;
        let mut counts: HashMap<u32, usize> = HashMap::new();
        for (_, cp) in remaining {
            let mut changed = first;
            first = false;
            for d in 0..D {
                if cp[d] < current[d] {
                    current[d] = cp[d];
                    changed = true;
                }
            }
            if !changed {
                continue;
            }
            let mut masks = [0u64; D];
            for d in 0..D {
                masks[d] = prefix_mask(current[d], self.widths[d]);
            }
            counts.clear();
            let mut first_out = remaining.len();
            let mut size = 0;
            for (i, (ce, c)) in remaining.iter().enumerate() {
                if (0..D).all(|d| c[d] >= current[d]) {
                    let n = counts.entry(hash_masked(&ce.lo, &masks)).or_insert(0);
                    *n += 1;
                    if *n > self.bucket_limit {
                        first_out = first_out.min(i);
                    } else {
                        size += 1;
                    }
                } else {
                    first_out = first_out.min(i);
                }
                if first_out < best_index {
                    return best_tuple;
                }
            }
            if first_out > best_index || size > best_size {
                best_tuple = current;
                best_index = first_out;
                best_size = size;
            }
        }
        best_tuple
    }

    /// The dimension widths given to [`Classifier::new`].
    pub fn widths(&self) -> [u8; D] {
        self.widths
    }

    fn cpls(&self, e: &Entry<D>) -> [u8; D] {
        let mut c = [0u8; D];
        for d in 0..D {
            c[d] = cpl(e.ranges[d].0, e.ranges[d].1, self.widths[d]);
        }
        c
    }

    fn compile(e: &Entry<D>) -> Option<CEntry<D>> {
        let mut lo = [0u64; D];
        let mut span = [0u64; D];
        for d in 0..D {
            let (l, h) = e.ranges[d];
            if l > h {
                return None;
            }
            lo[d] = l;
            span[d] = h - l;
        }
        Some(CEntry { lo, span, prio: e.prio, rule: e.rule, residual: e.residual })
    }

    /// The relaxed tuple used when a new table must be created for an entry with
    /// common-prefix lengths `c`.
    fn relax(&self, c: &[u8; D]) -> [u8; D] {
        let mut r = [0u8; D];
        for d in 0..D {
            let (w, l) = (self.widths[d], c[d]);
            r[d] = if w <= 24 {
                if l == w {
                    w
                } else {
                    0
                }
            } else if l == w {
                w - w / 8
            } else if l > w - w / 4 {
                l - 3
            } else if l > w / 2 {
                l - 2
            } else if l > w / 4 {
                l - 1
            } else {
                l
            };
        }
        r
    }

    fn resort(&mut self) {
        self.tables.retain(|t| t.nentries > 0);
        self.tables.sort_by_key(|t| t.best);
    }

    fn find_or_make(&mut self, lens: [u8; D]) -> usize {
        if let Some(i) = self.tables.iter().position(|t| t.lens == lens) {
            return i;
        }
        self.tables.push(Table::new(lens, &self.widths, 0));
        self.tables.len() - 1
    }

    /// Places a compiled entry into some table (no bookkeeping of `by_rule`/`len`).
    fn place(&mut self, ce: CEntry<D>, c: [u8; D]) {
        let mut chosen: Option<(usize, u32)> = None; // (table, score)
        let mut full: Option<(usize, usize)> = None; // (table, bucket len)
        for (ti, t) in self.tables.iter().enumerate() {
            if !t.fits(&c) {
                continue;
            }
            let blen = t.bucket_len(t.hash(&ce.lo));
            if blen < self.bucket_limit {
                let score: u32 = t.lens.iter().map(|&l| u32::from(l)).sum();
                if chosen.is_none_or(|(_, s)| score > s) {
                    chosen = Some((ti, score));
                }
            } else if full.is_none_or(|(_, l)| blen < l) {
                full = Some((ti, blen));
            }
        }
        if let Some((ti, _)) = chosen {
            self.tables[ti].insert(ce);
        } else if let Some((ti, _)) = full {
            let h = self.tables[ti].insert(ce);
            self.maybe_split(ti, h);
        } else {
            let lens = self.relax(&c);
            let ti = self.find_or_make(lens);
            self.tables[ti].insert(ce);
        }
        self.resort();
    }

    /// Splits an over-full bucket by moving part of it into a more specific table.
    fn maybe_split(&mut self, ti: usize, h: u32) {
        let t = &self.tables[ti];
        let Some(si) = t.find(h) else { return };
        let bucket = t.bucket(si);
        let n = bucket.len();
        if n <= self.bucket_limit || !(n == self.bucket_limit + 1 || n.is_power_of_two()) {
            return;
        }
        let lens = t.lens;
        let cpls: Vec<[u8; D]> = bucket
            .iter()
            .map(|e| {
                let mut c = [0u8; D];
                for d in 0..D {
                    c[d] = cpl(e.lo[d], e.lo[d] + e.span[d], self.widths[d]);
                }
                c
            })
            .collect();
        // Candidate: raise one dimension to a length some entries have.
        let mut best: Option<(usize, usize, u8)> = None; // (score, dim, len)
        for d in 0..D {
            let mut cands: Vec<u8> = cpls.iter().map(|c| c[d]).filter(|&l| l > lens[d]).collect();
            cands.sort_unstable();
            cands.dedup();
            for &l in &cands {
                let m = prefix_mask(l, self.widths[d]);
                let mut groups: HashMap<u64, usize> = HashMap::new();
                let mut stay = 0;
                for (e, c) in bucket.iter().zip(&cpls) {
                    if c[d] >= l {
                        *groups.entry(e.lo[d] & m).or_insert(0) += 1;
                    } else {
                        stay += 1;
                    }
                }
                let g = groups.values().copied().max().unwrap_or(0);
                let score = stay.max(g);
                if best.is_none_or(|(s, _, _)| score < s) {
                    best = Some((score, d, l));
                }
            }
        }
        let Some((score, d, l)) = best else { return };
        if score >= n {
            return;
        }
        let mut new_lens = lens;
        new_lens[d] = l;
        let widths = self.widths;
        let moved = self.tables[ti].take_from_bucket(h, |e| cpl(e.lo[d], e.lo[d] + e.span[d], widths[d]) >= l);
        let tj = self.find_or_make(new_lens);
        for e in moved {
            self.tables[tj].insert(e);
        }
    }

    /// Adds one entry.
    pub fn insert(&mut self, e: Entry<D>) {
        self.len += 1;
        let compiled = Self::compile(&e);
        let c = self.cpls(&e);
        self.by_rule.entry(e.rule).or_default().push(e);
        if let Some(ce) = compiled {
            self.place(ce, c);
        }
    }

    /// Removes every entry whose `rule` equals `rule`; returns how many were removed.
    pub fn remove_rule(&mut self, rule: u32) -> usize {
        let Some(entries) = self.by_rule.remove(&rule) else { return 0 };
        let mut removed = 0;
        for e in &entries {
            if Self::compile(e).is_none() {
                continue;
            }
            let c = self.cpls(e);
            let mut key = [0u64; D];
            for d in 0..D {
                key[d] = e.ranges[d].0;
            }
            for t in self.tables.iter_mut() {
                if t.fits(&c) {
                    let h = t.hash(&key);
                    removed += t.take_from_bucket(h, |x| x.rule == rule).len();
                }
            }
        }
        debug_assert_eq!(removed, entries.iter().filter(|e| Self::compile(e).is_some()).count());
        self.len -= entries.len();
        self.resort();
        entries.len()
    }

    /// The matching entry with the smallest `prio >= from`, as `(prio, rule)`.
    ///
    /// For a candidate with `residual == true` that matches every range and could still win,
    /// `residual(rule)` is called; `false` means the entry does not match.
    #[inline]
    pub fn first_match(
        &self,
        key: &[u64; D],
        from: u32,
        mut residual: impl FnMut(u32) -> bool,
    ) -> Option<(u32, u32)> {
        // Exclusive upper bound on the prio of a better match.
        let mut bound: u64 = 1 << 32;
        let mut rule = 0;
        for t in &self.tables {
            if u64::from(t.best) >= bound {
                break;
            }
            if t.worst < from {
                continue;
            }
            let Some(si) = t.find(t.hash(key)) else { continue };
            let s = t.slots[si];
            if u64::from(s.best) >= bound {
                continue;
            }
            for e in &t.arena[s.start as usize..(s.start + s.len) as usize] {
                if u64::from(e.prio) >= bound {
                    break;
                }
                if e.prio >= from && e.matches(key) && (!e.residual || residual(e.rule)) {
                    bound = u64::from(e.prio);
                    rule = e.rule;
                    break;
                }
            }
        }
        (bound < 1 << 32).then_some((bound as u32, rule))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Estimated heap bytes: the compiled tables plus the per-rule index used by `remove_rule`.
    pub fn memory_bytes(&self) -> usize {
        let tables: usize = self.tables.iter().map(Table::memory_bytes).sum::<usize>()
            + self.tables.capacity() * std::mem::size_of::<Table<D>>();
        let index = self.by_rule.capacity() * (std::mem::size_of::<(u32, Vec<Entry<D>>)>() + 1)
            + self
                .by_rule
                .values()
                .map(|v| v.capacity() * std::mem::size_of::<Entry<D>>())
                .sum::<usize>();
        tables + index
    }

    #[doc(hidden)]
    pub fn memory_breakdown(&self) -> String {
        let slots: usize = self.tables.iter().map(|t| t.slots.capacity() * 16).sum();
        let arena: usize = self.tables.iter().map(|t| t.arena.capacity() * std::mem::size_of::<CEntry<D>>()).sum();
        let arena_len: usize = self.tables.iter().map(|t| t.arena.len()).sum();
        let garbage: usize = self.tables.iter().map(|t| t.garbage).sum();
        let prios: usize = self.tables.iter().map(|t| t.prios.len() * 16).sum();
        format!("slots {slots} arena {arena} (len {arena_len} garbage {garbage}) prios {prios} total {}", self.memory_bytes())
    }

    /// Shape of the structure.
    pub fn stats(&self) -> Stats {
        Stats {
            tables: self.tables.len(),
            buckets: self.tables.iter().map(|t| t.nbuckets).sum(),
            max_bucket: self
                .tables
                .iter()
                .flat_map(|t| t.slots.iter().map(|s| s.len as usize))
                .max()
                .unwrap_or(0),
            per_table: self
                .tables
                .iter()
                .map(|t| (t.lens.to_vec(), t.nentries, t.nbuckets))
                .collect(),
        }
    }

    /// Lookup cost counters for `key` (from 0, no residuals): (tables probed, entries compared).
    pub fn lookup_cost(&self, key: &[u64; D]) -> (usize, usize) {
        self.lookup_profile(key, &mut [], &mut [])
    }

    #[doc(hidden)]
    pub fn lookup_profile(&self, key: &[u64; D], probes: &mut [usize], hits: &mut [usize]) -> (usize, usize) {
        let mut bound: u64 = 1 << 32;
        let (mut probed, mut compared) = (0, 0);
        let mut hit = None;
        for (ti, t) in self.tables.iter().enumerate() {
            if u64::from(t.best) >= bound {
                break;
            }
            if let Some(p) = probes.get_mut(ti) {
                *p += 1;
            }
            probed += 1;
            let Some(si) = t.find(t.hash(key)) else { continue };
            let s = t.slots[si];
            if u64::from(s.best) >= bound {
                continue;
            }
            for e in &t.arena[s.start as usize..(s.start + s.len) as usize] {
                if u64::from(e.prio) >= bound {
                    break;
                }
                compared += 1;
                if e.matches(key) {
                    bound = u64::from(e.prio);
                    hit = Some(ti);
                    break;
                }
            }
        }
        if let Some(h) = hit.and_then(|ti| hits.get_mut(ti)) {
            *h += 1;
        }
        (probed, compared)
    }
}
