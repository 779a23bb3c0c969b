//! The compiled structure: tuple spaces ([`Level`]) made of hash tables ([`Table`]) whose
//! over-full buckets are nested tuple spaces.

use std::collections::BTreeMap;
use std::fmt::Debug;

/// Buckets with more entries than this become nodes (nested tuple spaces).
pub(super) const DEFAULT_LEAF_LIMIT: usize = 16;
/// Bucket size above which table selection counts an entry as "does not fit".
pub(super) const DEFAULT_SELECT_LIMIT: usize = 8;

/// Marks a [`Slot`] whose bucket is a node; `start` is then an index into `Table::nodes`.
const NODE: u32 = 1 << 31;

/// Storage word of compiled ranges: `u32` when every dimension is at most 32 bits wide (half the
/// memory traffic), `u64` otherwise.
pub(super) trait Word: Copy + Debug + Default + Eq + Ord + Into<u64> + 'static {
    /// Largest value.
    const MAX: u64;
    /// Truncating conversion (callers check `v <= MAX`).
    fn from_u64(v: u64) -> Self;
    fn wrapping_sub(self, o: Self) -> Self;
}

impl Word for u32 {
    const MAX: u64 = u32::MAX as u64;
    #[inline(always)]
    fn from_u64(v: u64) -> Self {
        v as u32
    }
    #[inline(always)]
    fn wrapping_sub(self, o: Self) -> Self {
        u32::wrapping_sub(self, o)
    }
}

impl Word for u64 {
    const MAX: u64 = u64::MAX;
    #[inline(always)]
    fn from_u64(v: u64) -> Self {
        v
    }
    #[inline(always)]
    fn wrapping_sub(self, o: Self) -> Self {
        u64::wrapping_sub(self, o)
    }
}

/// Entry in compiled form: it matches when `key[d] - lo[d] <= span[d]` (wrapping) for every `d`.
#[derive(Clone, Copy, Debug)]
pub(super) struct CEntry<const D: usize, W: Word> {
    pub lo: [W; D],
    pub span: [W; D],
    pub prio: u32,
    pub rule: u32,
    pub residual: bool,
}

impl<const D: usize, W: Word> CEntry<D, W> {
    /// Callers guarantee `key[d] <= W::MAX` for every `d`. (The key stays in 64-bit words:
    /// narrowing it into a `[u32; D]` first made lookups 2x slower, apparently through a
    /// store-forwarding stall when the hash reloads it with vector loads.)
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // lockstep over three arrays; branch-free
    pub fn matches(&self, key: &[u64; D]) -> bool {
        let mut ok = true;
        for d in 0..D {
            ok &= W::from_u64(key[d]).wrapping_sub(self.lo[d]) <= self.span[d];
        }
        ok
    }

    pub fn lo64(&self) -> [u64; D] {
        self.lo.map(Into::into)
    }
}

/// Parameters shared by every level.
#[derive(Clone, Copy, Debug)]
pub(super) struct Params<const D: usize> {
    pub widths: [u8; D],
    pub leaf_limit: usize,
    pub select_limit: usize,
}

impl<const D: usize> Params<D> {
    /// Per-dimension common-prefix lengths of a compiled entry.
    pub fn cpls_of<W: Word>(&self, e: &CEntry<D, W>) -> [u8; D] {
        std::array::from_fn(|d| {
            let lo: u64 = e.lo[d].into();
            let span: u64 = e.span[d].into();
            cpl(lo, lo + span, self.widths[d])
        })
    }

    /// The relaxed tuple for a new table holding an entry with prefix lengths `c`, inside a
    /// level whose entries all have lengths `>= parent` (and `c != parent`). Long address-like
    /// prefixes are shortened a little (TupleMerge's relaxation) so that later, similar entries
    /// share the table; in narrow fields (ports, protocol) only exact values are hashed.
    pub fn relax(&self, c: &[u8; D], parent: &[u8; D]) -> [u8; D] {
        let mut r = [0u8; D];
        for d in 0..D {
            let (w, l) = (self.widths[d], c[d]);
            let x = if w <= 24 {
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
            r[d] = x.max(parent[d]);
        }
        if r == *parent {
            *c
        } else {
            r
        }
    }
}

/// Hash-table slot; `len == 0` marks an empty slot.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// 32-bit hash of the masked key; also decides the home position. Two masked keys with
    /// the same hash share a bucket, which is harmless: every entry is range-checked.
    hash: u32,
    /// Smallest prio in the bucket.
    best: u32,
    /// Leaf: first entry of the bucket's run in `Table::arena`. Node: index in `Table::nodes`.
    start: u32,
    /// Leaf: number of entries (run capacity is `len.next_power_of_two()`). Node: `NODE`.
    len: u32,
}

#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

const MULS: [u64; 8] = [
    0x243F_6A88_85A3_08D3,
    0x1319_8A2E_0370_7345,
    0xA409_3822_299F_31D1,
    0x082E_FA98_EC4E_6C89,
    0x4528_21E6_38D0_1377,
    0xBE54_66CF_34E9_0C6D,
    0xC0AC_29B7_C97C_50DD,
    0x3F84_D5B5_B547_0917,
];

/// Hash of the masked key: a sum of independent odd-constant products (one multiply per
/// dimension, all in parallel), finished with one folded 64x64->128 multiply.
#[inline(always)]
pub(super) fn hash_masked<const D: usize, K: Copy + Into<u64>>(
    key: &[K; D],
    masks: &[u64; D],
) -> u32 {
    let mut h: u64 = 0;
    for d in 0..D {
        let m = MULS[d % 8] ^ ((d as u64 / 8) << 1);
        h = h.wrapping_add((key[d].into() & masks[d]).wrapping_mul(m));
    }
    (fold_mul(h, 0x9E37_79B9_7F4A_7C15) >> 32) as u32
}

/// Length of the common prefix of `lo` and `hi` within a `w`-bit field.
#[inline]
pub(super) fn cpl(lo: u64, hi: u64, w: u8) -> u8 {
    let lz = (lo ^ hi).leading_zeros() as i32 - (64 - i32::from(w));
    lz.clamp(0, i32::from(w)) as u8
}

/// Mask of the top `len` bits of a `w`-bit field.
#[inline]
pub(super) fn prefix_mask(len: u8, w: u8) -> u64 {
    let field = u64::MAX >> (64 - u32::from(w));
    let low_bits = u32::from(w - len);
    let low = if low_bits >= 64 {
        u64::MAX
    } else {
        (1u64 << low_bits) - 1
    };
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

pub(super) fn fits<const D: usize>(c: &[u8; D], lens: &[u8; D]) -> bool {
    (0..D).all(|d| c[d] >= lens[d])
}

fn multiset_add(m: &mut BTreeMap<u32, u32>, p: u32) {
    *m.entry(p).or_insert(0) += 1;
}

fn multiset_remove(m: &mut BTreeMap<u32, u32>, p: u32) {
    match m.get_mut(&p) {
        Some(c) if *c > 1 => *c -= 1,
        _ => {
            m.remove(&p);
        }
    }
}

/// Best match so far; `bound` is the exclusive upper bound on the prio of a better one.
pub(super) struct Best {
    pub bound: u64,
    pub rule: u32,
}

impl Best {
    pub fn new() -> Self {
        Best {
            bound: 1 << 32,
            rule: 0,
        }
    }

    pub fn result(&self) -> Option<(u32, u32)> {
        (self.bound < 1 << 32).then_some((self.bound as u32, self.rule))
    }
}

/// Scans prio-sorted entries; records the first acceptable match below the bound.
#[inline(always)]
fn scan<const D: usize, W: Word, F: FnMut(u32) -> bool>(
    run: &[CEntry<D, W>],
    key: &[u64; D],
    from: u32,
    st: &mut Best,
    residual: &mut F,
) {
    for e in run {
        if u64::from(e.prio) >= st.bound {
            break;
        }
        if e.prio >= from && e.matches(key) && (!e.residual || residual(e.rule)) {
            st.bound = u64::from(e.prio);
            st.rule = e.rule;
            break;
        }
    }
}

/// Lookup counters (for tuning and benchmarks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    /// Hash tables probed, at all levels.
    pub probes: usize,
    /// Entries range-checked.
    pub compared: usize,
    /// Nodes entered.
    pub nodes: usize,
}

impl Cost {
    /// Weighted sum, roughly proportional to measured lookup time (a probe is the unit).
    pub fn weighted(&self) -> f64 {
        self.probes as f64 + 0.25 * self.compared as f64 + 0.5 * self.nodes as f64
    }
}

/// One hash table: entries whose per-dimension common-prefix lengths are all `>= lens`,
/// bucketed by the top `lens[d]` bits of each dimension.
#[derive(Clone, Debug)]
pub(super) struct Table<const D: usize, W: Word> {
    masks: [u64; D],
    /// Smallest prio in the table (exact).
    pub best: u32,
    /// Largest prio in the table (exact).
    worst: u32,
    slot_mask: u32,
    slots: Vec<Slot>,
    /// Leaf buckets: runs of prio-sorted entries, capacity a power of two.
    arena: Vec<CEntry<D, W>>,
    nodes: Vec<Level<D, W>>,
    free_nodes: Vec<u32>,
    pub lens: [u8; D],
    pub nbuckets: usize,
    pub nentries: usize,
    /// Arena slots not in any run.
    garbage: usize,
    /// Multiset of the prios in the table (all levels below), for exact `best`/`worst`.
    prios: BTreeMap<u32, u32>,
}

impl<const D: usize, W: Word> Table<D, W> {
    pub fn new(lens: [u8; D], p: &Params<D>) -> Self {
        let mut masks = [0u64; D];
        for d in 0..D {
            masks[d] = prefix_mask(lens[d], p.widths[d]);
        }
        Table {
            masks,
            best: u32::MAX,
            worst: 0,
            slot_mask: 7,
            slots: vec![Slot::default(); 8],
            arena: Vec::new(),
            nodes: Vec::new(),
            free_nodes: Vec::new(),
            lens,
            nbuckets: 0,
            nentries: 0,
            garbage: 0,
            prios: BTreeMap::new(),
        }
    }

    /// A table holding `entries` (sorted by prio, all fitting `lens`).
    pub fn from_entries(
        lens: [u8; D],
        entries: Vec<(CEntry<D, W>, [u8; D])>,
        p: &Params<D>,
    ) -> Self {
        debug_assert!(entries.iter().all(|(_, c)| fits(c, &lens)));
        let mut t = Table::new(lens, p);
        let mut keyed: Vec<(u32, CEntry<D, W>, [u8; D])> = entries
            .into_iter()
            .map(|(e, c)| (t.hash(&e.lo), e, c))
            .collect();
        // Stable: every group stays sorted by prio.
        keyed.sort_by_key(|k| k.0);
        let mut groups: Vec<(usize, usize)> = Vec::new();
        let mut i = 0;
        while i < keyed.len() {
            let h = keyed[i].0;
            let j = i + keyed[i..].iter().take_while(|k| k.0 == h).count();
            groups.push((i, j));
            i = j;
        }
        t.resize((groups.len() * 2).max(8).next_power_of_two());
        let arena_len: usize = groups
            .iter()
            .map(|&(i, j)| {
                if j - i <= p.leaf_limit {
                    run_cap(j - i)
                } else {
                    0
                }
            })
            .sum();
        t.arena.reserve_exact(arena_len);
        for (i, j) in groups {
            let h = keyed[i].0;
            let best = keyed[i].1.prio;
            let slot = if j - i <= p.leaf_limit {
                let start = t.arena.len();
                t.arena.extend(keyed[i..j].iter().map(|k| k.1));
                let pad = keyed[i].1;
                t.arena
                    .extend(std::iter::repeat_n(pad, run_cap(j - i) - (j - i)));
                Slot {
                    hash: h,
                    best,
                    start: start as u32,
                    len: (j - i) as u32,
                }
            } else {
                let sub: Vec<(CEntry<D, W>, [u8; D])> =
                    keyed[i..j].iter().map(|k| (k.1, k.2)).collect();
                t.nodes.push(Level::build(sub, lens, p));
                Slot {
                    hash: h,
                    best,
                    start: (t.nodes.len() - 1) as u32,
                    len: NODE,
                }
            };
            for k in &keyed[i..j] {
                multiset_add(&mut t.prios, k.1.prio);
            }
            t.nentries += j - i;
            t.put_slot(slot);
        }
        t.refresh_bounds();
        t
    }

    /// Identity of the table that survives moves of the struct (its slot buffer's address).
    pub fn ident(&self) -> usize {
        self.slots.as_ptr() as usize
    }

    #[inline(always)]
    fn hash<K: Copy + Into<u64>>(&self, key: &[K; D]) -> u32 {
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

    fn refresh_bounds(&mut self) {
        self.best = self.prios.keys().next().copied().unwrap_or(u32::MAX);
        self.worst = self.prios.keys().next_back().copied().unwrap_or(0);
    }

    /// Puts a slot whose hash is not present yet.
    fn put_slot(&mut self, s: Slot) {
        let mask = self.slot_mask as usize;
        let mut i = s.hash as usize & mask;
        while self.slots[i].len != 0 {
            i = (i + 1) & mask;
        }
        self.slots[i] = s;
        self.nbuckets += 1;
    }

    fn resize(&mut self, nslots: usize) {
        let old = std::mem::replace(&mut self.slots, vec![Slot::default(); nslots]);
        self.slot_mask = (nslots - 1) as u32;
        self.nbuckets = 0;
        for s in old.into_iter().filter(|s| s.len != 0) {
            self.put_slot(s);
        }
    }

    /// Appends a run of capacity `cap` holding `src`; grows the arena by ~25% at a time.
    fn arena_push_run(&mut self, src: &[CEntry<D, W>], cap: usize) -> usize {
        if self.arena.capacity() - self.arena.len() < cap {
            let extra = cap.max(self.arena.len() / 4).max(16);
            self.arena.reserve_exact(extra);
        }
        let start = self.arena.len();
        self.arena.extend_from_slice(src);
        let pad = src[0];
        self.arena.extend(std::iter::repeat_n(pad, cap - src.len()));
        start
    }

    fn alloc_node(&mut self, node: Level<D, W>) -> u32 {
        if let Some(i) = self.free_nodes.pop() {
            self.nodes[i as usize] = node;
            i
        } else {
            self.nodes.push(node);
            (self.nodes.len() - 1) as u32
        }
    }

    fn free_node(&mut self, i: usize) {
        self.nodes[i] = Level::empty(self.lens);
        self.free_nodes.push(i as u32);
    }

    pub fn insert(&mut self, ce: CEntry<D, W>, c: [u8; D], p: &Params<D>) {
        if (self.nbuckets + 1) * 2 > self.slots.len() {
            self.resize(self.slots.len() * 2);
        }
        let h = self.hash(&ce.lo);
        match self.find(h) {
            None => {
                let start = self.arena_push_run(&[ce], 1);
                self.put_slot(Slot {
                    hash: h,
                    best: ce.prio,
                    start: start as u32,
                    len: 1,
                });
            }
            Some(i) => {
                let s = self.slots[i];
                if s.len & NODE != 0 {
                    self.nodes[s.start as usize].insert(ce, c, p);
                    self.slots[i].best = s.best.min(ce.prio);
                } else if (s.len as usize) < p.leaf_limit {
                    let len = s.len as usize;
                    let cap = run_cap(len);
                    let mut start = s.start as usize;
                    if len == cap {
                        let old: Vec<CEntry<D, W>> = self.arena[start..start + len].to_vec();
                        start = self.arena_push_run(&old, cap * 2);
                        self.garbage += cap;
                    }
                    let run = &mut self.arena[start..start + len + 1];
                    let pos = run[..len].partition_point(|x| x.prio <= ce.prio);
                    run.copy_within(pos..len, pos + 1);
                    run[pos] = ce;
                    self.slots[i] = Slot {
                        hash: h,
                        best: run[0].prio,
                        start: start as u32,
                        len: s.len + 1,
                    };
                } else {
                    // The leaf is full: it becomes a node.
                    let (start, len) = (s.start as usize, s.len as usize);
                    let mut sub: Vec<(CEntry<D, W>, [u8; D])> = self.arena[start..start + len]
                        .iter()
                        .map(|e| (*e, p.cpls_of(e)))
                        .collect();
                    let pos = sub.partition_point(|x| x.0.prio <= ce.prio);
                    sub.insert(pos, (ce, c));
                    self.garbage += run_cap(len);
                    let node = Level::build(sub, self.lens, p);
                    let ni = self.alloc_node(node);
                    self.slots[i] = Slot {
                        hash: h,
                        best: s.best.min(ce.prio),
                        start: ni,
                        len: NODE,
                    };
                }
            }
        }
        multiset_add(&mut self.prios, ce.prio);
        self.nentries += 1;
        self.refresh_bounds();
    }

    /// Backward-shift deletion (linear probing).
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
                let stays = if i <= j {
                    i < home && home <= j
                } else {
                    i < home || home <= j
                };
                if !stays {
                    self.slots[i] = self.slots[j];
                    i = j;
                    continue 'outer;
                }
            }
        }
        self.nbuckets -= 1;
    }

    /// Removes the entries of `rule` from the bucket of `lo`, pushing their prios to `removed`.
    pub fn remove(
        &mut self,
        rule: u32,
        lo: &[u64; D],
        c: &[u8; D],
        p: &Params<D>,
        removed: &mut Vec<u32>,
    ) {
        let h = self.hash(lo);
        let Some(i) = self.find(h) else { return };
        let s = self.slots[i];
        let before = removed.len();
        if s.len & NODE != 0 {
            let ni = s.start as usize;
            self.nodes[ni].remove(rule, lo, c, p, removed);
            if removed.len() == before {
                return;
            }
            let node = &self.nodes[ni];
            if node.nentries == 0 {
                self.delete_slot(i);
                self.free_node(ni);
            } else if node.nentries <= p.leaf_limit / 2 {
                // Small again: back to a leaf.
                let mut all = Vec::with_capacity(node.nentries);
                node.collect(&mut all);
                all.sort_by_key(|e| e.prio);
                let start = self.arena_push_run(&all, run_cap(all.len()));
                self.free_node(ni);
                self.slots[i] = Slot {
                    hash: h,
                    best: all[0].prio,
                    start: start as u32,
                    len: all.len() as u32,
                };
            } else {
                self.slots[i].best = node.best();
            }
        } else {
            let len = s.len as usize;
            let run = &mut self.arena[s.start as usize..s.start as usize + len];
            let mut w = 0;
            for r in 0..len {
                if run[r].rule == rule {
                    removed.push(run[r].prio);
                } else {
                    run[w] = run[r];
                    w += 1;
                }
            }
            if w == len {
                return;
            }
            self.garbage += run_cap(len) - run_cap(w);
            if w == 0 {
                self.delete_slot(i);
            } else {
                self.slots[i].len = w as u32;
                self.slots[i].best = run[0].prio;
            }
        }
        for &pr in &removed[before..] {
            multiset_remove(&mut self.prios, pr);
        }
        self.nentries -= removed.len() - before;
        self.refresh_bounds();
        if self.garbage > 64 && self.garbage * 2 > self.arena.len() {
            self.compact();
        }
    }

    fn compact(&mut self) {
        let mut arena = Vec::with_capacity(self.arena.len() - self.garbage);
        for s in self
            .slots
            .iter_mut()
            .filter(|s| s.len != 0 && s.len & NODE == 0)
        {
            let (start, len) = (s.start as usize, s.len as usize);
            s.start = arena.len() as u32;
            arena.extend_from_slice(&self.arena[start..start + len]);
            let pad = self.arena[start];
            arena.extend(std::iter::repeat_n(pad, run_cap(len) - len));
        }
        self.arena = arena;
        self.garbage = 0;
    }

    pub fn collect(&self, out: &mut Vec<CEntry<D, W>>) {
        for s in self.slots.iter().filter(|s| s.len != 0) {
            if s.len & NODE != 0 {
                self.nodes[s.start as usize].collect(out);
            } else {
                out.extend_from_slice(&self.arena[s.start as usize..(s.start + s.len) as usize]);
            }
        }
    }

    #[inline]
    fn lookup<F: FnMut(u32) -> bool>(
        &self,
        key: &[u64; D],
        from: u32,
        st: &mut Best,
        residual: &mut F,
    ) {
        let Some(si) = self.find(self.hash(key)) else {
            return;
        };
        let s = self.slots[si];
        if u64::from(s.best) >= st.bound {
            return;
        }
        if s.len & NODE != 0 {
            self.nodes[s.start as usize].lookup(key, from, st, residual);
        } else {
            scan(
                &self.arena[s.start as usize..(s.start + s.len) as usize],
                key,
                from,
                st,
                residual,
            );
        }
    }

    fn check(&self, p: &Params<D>) -> Result<usize, String> {
        let mask = self.slot_mask as usize;
        let mut n = 0;
        let mut buckets = 0;
        let mut prios: Vec<u32> = Vec::new();
        for (i, s) in self.slots.iter().enumerate().filter(|x| x.1.len != 0) {
            buckets += 1;
            // Every slot between home and i is occupied (the probe reaches it).
            let mut j = s.hash as usize & mask;
            while j != i {
                if self.slots[j].len == 0 {
                    return Err("probe chain broken".into());
                }
                j = (j + 1) & mask;
            }
            let mut entries = Vec::new();
            if s.len & NODE != 0 {
                let node = &self.nodes[s.start as usize];
                if node.parent != self.lens {
                    return Err("node parent differs from table tuple".into());
                }
                let m = node.check(p).map_err(|e| {
                    format!(
                        "in node of table {:?} (parent {:?}): {e}",
                        self.lens, node.parent
                    )
                })?;
                if m == 0 {
                    return Err("empty node".into());
                }
                node.collect(&mut entries);
            } else {
                let run = &self.arena[s.start as usize..(s.start + s.len) as usize];
                for w in run.windows(2) {
                    if w[0].prio > w[1].prio {
                        return Err("leaf not sorted".into());
                    }
                }
                if s.len as usize > p.leaf_limit {
                    return Err(format!("leaf of {} entries", s.len));
                }
                entries.extend_from_slice(run);
            }
            let best = entries.iter().map(|e| e.prio).min().unwrap_or(u32::MAX);
            if best != s.best {
                return Err(format!("slot best {} != {}", s.best, best));
            }
            for e in &entries {
                if !fits(&p.cpls_of(e), &self.lens) {
                    return Err(format!("entry {e:?} does not fit {:?}", self.lens));
                }
                if self.hash(&e.lo) != s.hash {
                    return Err(format!(
                        "entry {e:?} in the wrong bucket of {:?}",
                        self.lens
                    ));
                }
                prios.push(e.prio);
            }
            n += entries.len();
        }
        if buckets != self.nbuckets || n != self.nentries {
            return Err(format!(
                "table counts: buckets {}/{} entries {}/{}",
                self.nbuckets, buckets, self.nentries, n
            ));
        }
        let mut want: Vec<u32> = self
            .prios
            .iter()
            .flat_map(|(&p, &c)| std::iter::repeat_n(p, c as usize))
            .collect();
        prios.sort_unstable();
        want.sort_unstable();
        if prios != want {
            return Err("prio multiset differs".into());
        }
        if n > 0 && (self.best != prios[0] || self.worst != prios[n - 1]) {
            return Err("table best/worst stale".into());
        }
        Ok(n)
    }

    fn memory_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.arena.capacity() * std::mem::size_of::<CEntry<D, W>>()
            + self.nodes.capacity() * std::mem::size_of::<Level<D, W>>()
            + self.nodes.iter().map(Level::memory_bytes).sum::<usize>()
            + self.free_nodes.capacity() * 4
            // BTreeMap<u32, u32>: 8 bytes of payload per key plus node overhead.
            + self.prios.len() * 20
    }
}

/// A tuple space: entries that cannot be refined beyond `parent` (kept in a prio-sorted list)
/// plus hash tables sorted by their best prio. The root has `parent == [0; D]`; a node holds
/// the entries of one over-full bucket of a table whose tuple is `parent`.
#[derive(Clone, Debug)]
pub(super) struct Level<const D: usize, W: Word> {
    list: Vec<CEntry<D, W>>,
    pub tables: Vec<Table<D, W>>,
    pub parent: [u8; D],
    nentries: usize,
}

impl<const D: usize, W: Word> Level<D, W> {
    pub fn empty(parent: [u8; D]) -> Self {
        Level {
            list: Vec::new(),
            tables: Vec::new(),
            parent,
            nentries: 0,
        }
    }

    fn best(&self) -> u32 {
        let l = self.list.first().map_or(u32::MAX, |e| e.prio);
        let t = self.tables.first().map_or(u32::MAX, |t| t.best);
        l.min(t)
    }

    /// Builds from entries sorted by prio, each with its prefix lengths (all `>= parent`).
    pub fn build(entries: Vec<(CEntry<D, W>, [u8; D])>, parent: [u8; D], p: &Params<D>) -> Self {
        let mut level = Level::empty(parent);
        level.nentries = entries.len();
        let mut remaining = Vec::with_capacity(entries.len());
        for (e, c) in entries {
            if c == parent {
                level.list.push(e);
            } else {
                remaining.push((e, c));
            }
        }
        while !remaining.is_empty() {
            let lens = super::build::select_tuple(&remaining, &parent, p);
            let (fit, rest): (Vec<_>, Vec<_>) =
                remaining.into_iter().partition(|(_, c)| fits(c, &lens));
            debug_assert!(!fit.is_empty());
            level.tables.push(Table::from_entries(lens, fit, p));
            remaining = rest;
        }
        level.sort_tables();
        level
    }

    pub fn sort_tables(&mut self) {
        self.tables.sort_by_key(|t| t.best);
    }

    pub fn insert(&mut self, ce: CEntry<D, W>, c: [u8; D], p: &Params<D>) {
        self.nentries += 1;
        if c == self.parent {
            let pos = self.list.partition_point(|x| x.prio <= ce.prio);
            self.list.insert(pos, ce);
            return;
        }
        // The most specific compatible table, or a new one with a relaxed tuple.
        let mut chosen: Option<(usize, u32)> = None;
        for (ti, t) in self.tables.iter().enumerate() {
            if fits(&c, &t.lens) {
                let score: u32 = t.lens.iter().map(|&l| u32::from(l)).sum();
                if chosen.is_none_or(|(_, s)| score > s) {
                    chosen = Some((ti, score));
                }
            }
        }
        let ti = match chosen {
            Some((ti, _)) => ti,
            None => {
                self.tables.push(Table::new(p.relax(&c, &self.parent), p));
                self.tables.len() - 1
            }
        };
        let old_best = self.tables[ti].best;
        self.tables[ti].insert(ce, c, p);
        if self.tables[ti].best != old_best {
            self.sort_tables();
        }
    }

    pub fn remove(
        &mut self,
        rule: u32,
        lo: &[u64; D],
        c: &[u8; D],
        p: &Params<D>,
        removed: &mut Vec<u32>,
    ) {
        let before = removed.len();
        if *c == self.parent {
            self.list.retain(|e| {
                if e.rule == rule {
                    removed.push(e.prio);
                    false
                } else {
                    true
                }
            });
        } else {
            for t in self.tables.iter_mut() {
                if fits(c, &t.lens) {
                    t.remove(rule, lo, c, p, removed);
                }
            }
            if removed.len() > before {
                self.tables.retain(|t| t.nentries > 0);
                self.sort_tables();
            }
        }
        self.nentries -= removed.len() - before;
    }

    pub fn collect(&self, out: &mut Vec<CEntry<D, W>>) {
        out.extend_from_slice(&self.list);
        for t in &self.tables {
            t.collect(out);
        }
    }

    #[inline]
    pub fn lookup<F: FnMut(u32) -> bool>(
        &self,
        key: &[u64; D],
        from: u32,
        st: &mut Best,
        residual: &mut F,
    ) {
        scan(&self.list, key, from, st, residual);
        for t in &self.tables {
            if u64::from(t.best) >= st.bound {
                break;
            }
            if t.worst < from {
                continue;
            }
            t.lookup(key, from, st, residual);
        }
    }

    /// Lookup (from 0, residual conditions taken as true) that counts its work; with
    /// `per_table`, also counts (probes, hits) per table of this level.
    pub fn profile(
        &self,
        key: &[u64; D],
        st: &mut Best,
        cost: &mut Cost,
        mut per_table: Option<&mut [(usize, usize)]>,
    ) {
        let count_scan = |run: &[CEntry<D, W>], st: &mut Best, cost: &mut Cost| {
            for e in run {
                if u64::from(e.prio) >= st.bound {
                    break;
                }
                cost.compared += 1;
                if e.matches(key) {
                    st.bound = u64::from(e.prio);
                    st.rule = e.rule;
                    break;
                }
            }
        };
        count_scan(&self.list, st, cost);
        for (ti, t) in self.tables.iter().enumerate() {
            if u64::from(t.best) >= st.bound {
                break;
            }
            cost.probes += 1;
            let before = st.bound;
            if let Some(si) = t.find(t.hash(key)) {
                let s = t.slots[si];
                if u64::from(s.best) < st.bound {
                    if s.len & NODE != 0 {
                        cost.nodes += 1;
                        t.nodes[s.start as usize].profile(key, st, cost, None);
                    } else {
                        count_scan(
                            &t.arena[s.start as usize..(s.start + s.len) as usize],
                            st,
                            cost,
                        );
                    }
                }
            }
            if let Some(x) = per_table.as_deref_mut().and_then(|pt| pt.get_mut(ti)) {
                x.0 += 1;
                if st.bound != before {
                    x.1 += 1;
                }
            }
        }
    }

    pub fn stats(&self, depth: usize, s: &mut super::Stats) {
        s.max_depth = s.max_depth.max(depth);
        s.list_entries += self.list.len();
        for t in &self.tables {
            s.tables += 1;
            s.buckets += t.nbuckets;
            let mask = t.slot_mask as usize;
            for (i, sl) in t.slots.iter().enumerate().filter(|x| x.1.len != 0) {
                s.displacement += (i.wrapping_sub(sl.hash as usize)) & mask;
                if sl.len & NODE != 0 {
                    s.nodes += 1;
                    t.nodes[sl.start as usize].stats(depth + 1, s);
                } else {
                    s.max_bucket = s.max_bucket.max(sl.len as usize);
                }
            }
        }
    }

    /// Checks the structural invariants; returns the number of entries below this level.
    pub fn check(&self, p: &Params<D>) -> Result<usize, String> {
        let mut n = 0;
        for w in self.list.windows(2) {
            if w[0].prio > w[1].prio {
                return Err("list not sorted".into());
            }
        }
        for e in &self.list {
            if p.cpls_of(e) != self.parent {
                return Err(format!(
                    "list entry {e:?} is refinable below {:?}",
                    self.parent
                ));
            }
        }
        n += self.list.len();
        for w in self.tables.windows(2) {
            if w[0].best > w[1].best {
                return Err("tables not sorted by best".into());
            }
        }
        for t in &self.tables {
            if !fits(&t.lens, &self.parent) {
                let all: Vec<_> = self.tables.iter().map(|t| (t.lens, t.nentries)).collect();
                return Err(format!(
                    "table {:?} below parent {:?}; list {} tables {all:?}",
                    t.lens,
                    self.parent,
                    self.list.len()
                ));
            }
            n += t.check(p)?;
        }
        if n != self.nentries {
            return Err(format!("level count {} != {}", self.nentries, n));
        }
        Ok(n)
    }

    pub fn memory_bytes(&self) -> usize {
        self.list.capacity() * std::mem::size_of::<CEntry<D, W>>()
            + self.tables.capacity() * std::mem::size_of::<Table<D, W>>()
            + self.tables.iter().map(Table::memory_bytes).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_helpers() {
        assert_eq!(cpl(0, u64::MAX, 64), 0);
        assert_eq!(cpl(5, 5, 64), 64);
        assert_eq!(cpl(0x0A00_0000, 0x0AFF_FFFF, 32), 8);
        assert_eq!(cpl(1024, 65535, 17), 1);
        assert_eq!(cpl(0, 0x1FFFF, 17), 0);
        assert_eq!(cpl(7, 7, 1), 1);
        // Bits above the width make the common prefix empty.
        assert_eq!(cpl(0, 1 << 40, 32), 0);
        assert_eq!(prefix_mask(0, 32), 0);
        assert_eq!(prefix_mask(8, 32), 0xFF00_0000);
        assert_eq!(prefix_mask(32, 32), 0xFFFF_FFFF);
        assert_eq!(prefix_mask(64, 64), u64::MAX);
        assert_eq!(prefix_mask(1, 64), 1 << 63);
        assert_eq!(prefix_mask(1, 1), 1);
        assert_eq!(run_cap(0), 0);
        assert_eq!(run_cap(5), 8);
    }

    #[test]
    fn relax_stays_above_parent() {
        let p = Params {
            widths: [32u8, 17, 8],
            leaf_limit: 8,
            select_limit: 8,
        };
        assert_eq!(p.relax(&[32, 17, 8], &[0, 0, 0]), [28, 17, 8]);
        assert_eq!(p.relax(&[24, 5, 8], &[0, 0, 0]), [22, 0, 8]);
        assert_eq!(p.relax(&[24, 5, 8], &[24, 0, 8]), [24, 5, 8]);
        assert_eq!(p.relax(&[30, 17, 0], &[29, 0, 0]), [29, 17, 0]);
    }
}
