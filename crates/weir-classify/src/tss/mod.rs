//! The [`Classifier`]: a tuple-space tree (see the crate documentation for the design).

mod build;
mod space;

use std::collections::HashMap;

use crate::{check_widths, Entry};
use space::{Best, CEntry, Level, Params, Word, DEFAULT_LEAF_LIMIT, DEFAULT_SELECT_LIMIT};

pub use space::Cost;

/// Shape of a [`Classifier`], for benchmarks and tuning.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Hash tables at the top level.
    pub root_tables: usize,
    /// Hash tables at all levels.
    pub tables: usize,
    /// Buckets at all levels.
    pub buckets: usize,
    /// Nodes (over-full buckets turned into nested tuple spaces).
    pub nodes: usize,
    /// Deepest node nesting (0: no nodes).
    pub max_depth: usize,
    /// Largest leaf bucket.
    pub max_bucket: usize,
    /// Entries kept in prio-sorted lists (not refinable below their level's tuple).
    pub list_entries: usize,
    /// Bytes per compiled entry (narrow form when every width is at most 32 bits).
    pub entry_bytes: usize,
    /// Sum over buckets of the distance from their home slot (linear probing).
    pub displacement: usize,
    /// Select limit used by the build.
    pub select_limit: usize,
    /// Per top-level table, in lookup order: (tuple lengths, entries, buckets).
    pub per_table: Vec<(Vec<u8>, usize, usize)>,
}

/// Build options (for tests and tuning; [`Classifier::build`] uses the defaults).
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct BuildOptions {
    /// `None`: try several select limits and keep the cheapest, then merge tables.
    pub select_limit: Option<usize>,
    /// Buckets with more entries become nodes.
    pub leaf_limit: usize,
    /// Force 64-bit compiled entries even when every width is at most 32 bits.
    pub force_wide: bool,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            select_limit: None,
            leaf_limit: DEFAULT_LEAF_LIMIT,
            force_wide: false,
        }
    }
}

/// The compiled structure, in the storage word chosen from the widths.
#[derive(Clone, Debug)]
enum Repr<const D: usize> {
    Narrow(Level<D, u32>),
    Wide(Level<D, u64>),
}

/// Multi-field classifier with the semantics of a linear first-match scan.
///
/// See the crate documentation for the data structure and its costs. All methods give exactly
/// the answers of [`crate::Linear`] for the same entries.
#[derive(Clone, Debug)]
pub struct Classifier<const D: usize> {
    params: Params<D>,
    repr: Repr<D>,
    /// Every entry as given, by rule payload: for `remove_rule` and the out-of-range-key path.
    by_rule: HashMap<u32, Vec<Entry<D>>>,
    len: usize,
}

/// Compiles an entry for storage word `W`. `None`: the entry matches no key whose every
/// dimension is `<= W::MAX` (an empty range, or a range entirely above `W::MAX`).
fn compile<const D: usize, W: Word>(e: &Entry<D>) -> Option<CEntry<D, W>> {
    let mut lo = [W::default(); D];
    let mut span = [W::default(); D];
    for d in 0..D {
        let (l, h) = e.ranges[d];
        if l > h || l > W::MAX {
            return None;
        }
        let h = h.min(W::MAX);
        lo[d] = W::from_u64(l);
        span[d] = W::from_u64(h - l);
    }
    Some(CEntry {
        lo,
        span,
        prio: e.prio,
        rule: e.rule,
        residual: e.residual,
    })
}

impl<const D: usize> Classifier<D> {
    /// An empty classifier. `widths[d]` is the number of significant bits of dimension `d`
    /// (`1..=64`); keys are expected to be `< 2^width` in each dimension.
    ///
    /// # Panics
    /// If a width is outside `1..=64`.
    pub fn new(widths: [u8; D]) -> Self {
        Self::with_options(widths, BuildOptions::default())
    }

    fn with_options(widths: [u8; D], o: BuildOptions) -> Self {
        check_widths(&widths);
        let params = Params {
            widths,
            leaf_limit: o.leaf_limit.clamp(1, 1 << 16),
            select_limit: o.select_limit.unwrap_or(DEFAULT_SELECT_LIMIT).max(1),
        };
        let repr = if !o.force_wide && widths.iter().all(|&w| w <= 32) {
            Repr::Narrow(Level::empty([0; D]))
        } else {
            Repr::Wide(Level::empty([0; D]))
        };
        Classifier {
            params,
            repr,
            by_rule: HashMap::new(),
            len: 0,
        }
    }

    /// Builds a classifier from a list of entries (any order).
    ///
    /// For a few hundred entries or more, several table selections are built and the one with
    /// the lowest counted lookup cost on a synthetic key sample (points inside the entries'
    /// boxes) is kept and refined; see the crate documentation.
    pub fn build(widths: [u8; D], entries: Vec<Entry<D>>) -> Self {
        Self::build_with(widths, entries, BuildOptions::default())
    }

    #[doc(hidden)]
    pub fn build_with(widths: [u8; D], mut entries: Vec<Entry<D>>, o: BuildOptions) -> Self {
        let mut c = Self::with_options(widths, o);
        entries.sort_by_key(|e| e.prio);
        let tune = o.select_limit.is_none();
        c.repr = match c.repr {
            Repr::Narrow(_) => {
                let compiled = c.compiled::<u32>(&entries);
                let (root, sel) = build::build_root(compiled, &c.params, tune);
                c.params.select_limit = sel;
                Repr::Narrow(root)
            }
            Repr::Wide(_) => {
                let compiled = c.compiled::<u64>(&entries);
                let (root, sel) = build::build_root(compiled, &c.params, tune);
                c.params.select_limit = sel;
                Repr::Wide(root)
            }
        };
        c.len = entries.len();
        c.by_rule.reserve(entries.len());
        for e in entries {
            c.index_add(e);
        }
        c
    }

    fn compiled<W: Word>(&self, entries: &[Entry<D>]) -> Vec<(CEntry<D, W>, [u8; D])> {
        entries
            .iter()
            .filter_map(|e| compile::<D, W>(e).map(|ce| (ce, self.params.cpls_of(&ce))))
            .collect()
    }

    /// The dimension widths given to [`Classifier::new`].
    pub fn widths(&self) -> [u8; D] {
        self.params.widths
    }

    fn index_add(&mut self, e: Entry<D>) {
        self.by_rule
            .entry(e.rule)
            .or_insert_with(|| Vec::with_capacity(1))
            .push(e);
    }

    /// Adds one entry.
    pub fn insert(&mut self, e: Entry<D>) {
        self.len += 1;
        let p = &self.params;
        match &mut self.repr {
            Repr::Narrow(root) => {
                if let Some(ce) = compile::<D, u32>(&e) {
                    root.insert(ce, p.cpls_of(&ce), p);
                }
            }
            Repr::Wide(root) => {
                if let Some(ce) = compile::<D, u64>(&e) {
                    root.insert(ce, p.cpls_of(&ce), p);
                }
            }
        }
        self.index_add(e);
    }

    /// Removes every entry whose `rule` equals `rule`; returns how many were removed.
    pub fn remove_rule(&mut self, rule: u32) -> usize {
        let Some(entries) = self.by_rule.remove(&rule) else {
            return 0;
        };
        let p = &self.params;
        let mut removed = Vec::new();
        let mut expected = 0;
        for e in &entries {
            match &mut self.repr {
                Repr::Narrow(root) => {
                    if let Some(ce) = compile::<D, u32>(e) {
                        expected += 1;
                        root.remove(rule, &ce.lo64(), &p.cpls_of(&ce), p, &mut removed);
                    }
                }
                Repr::Wide(root) => {
                    if let Some(ce) = compile::<D, u64>(e) {
                        expected += 1;
                        root.remove(rule, &ce.lo64(), &p.cpls_of(&ce), p, &mut removed);
                    }
                }
            }
        }
        debug_assert_eq!(removed.len(), expected);
        self.len -= entries.len();
        entries.len()
    }

    /// The matching entry with the smallest `prio >= from`, as `(prio, rule)`.
    ///
    /// For a candidate with `residual == true` that matches every range and could still win
    /// (its prio is below the best match found so far), `residual(rule)` is called; `false`
    /// means the entry does not match.
    #[inline]
    pub fn first_match(
        &self,
        key: &[u64; D],
        from: u32,
        mut residual: impl FnMut(u32) -> bool,
    ) -> Option<(u32, u32)> {
        let mut st = Best::new();
        match &self.repr {
            Repr::Narrow(root) => {
                if key.iter().any(|&k| k > u64::from(u32::MAX)) {
                    return self.first_match_slow(key, from, residual);
                }
                root.lookup(key, from, &mut st, &mut residual);
            }
            Repr::Wide(root) => root.lookup(key, from, &mut st, &mut residual),
        }
        st.result()
    }

    /// Exact answer by scanning every entry; only for keys outside the narrow form's range
    /// (which break the `key[d] < 2^width` contract).
    #[cold]
    fn first_match_slow(
        &self,
        key: &[u64; D],
        from: u32,
        mut residual: impl FnMut(u32) -> bool,
    ) -> Option<(u32, u32)> {
        let mut candidates: Vec<&Entry<D>> = self
            .by_rule
            .values()
            .flatten()
            .filter(|e| e.prio >= from && e.matches(key))
            .collect();
        candidates.sort_by_key(|e| e.prio);
        candidates
            .into_iter()
            .find(|e| !e.residual || residual(e.rule))
            .map(|e| (e.prio, e.rule))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Estimated heap bytes: the compiled structure plus the per-rule index used by
    /// `remove_rule` (with ~16 bytes of allocator overhead per per-rule vector).
    pub fn memory_bytes(&self) -> usize {
        let index = self.by_rule.capacity() * (std::mem::size_of::<(u32, Vec<Entry<D>>)>() + 1)
            + self
                .by_rule
                .values()
                .map(|v| v.capacity() * std::mem::size_of::<Entry<D>>() + 16)
                .sum::<usize>();
        let compiled = match &self.repr {
            Repr::Narrow(root) => root.memory_bytes(),
            Repr::Wide(root) => root.memory_bytes(),
        };
        compiled + index
    }

    /// Shape of the structure.
    pub fn stats(&self) -> Stats {
        let mut s = Stats {
            select_limit: self.params.select_limit,
            ..Stats::default()
        };
        fn fill<const D: usize, W: Word>(root: &Level<D, W>, s: &mut Stats) {
            root.stats(0, s);
            s.root_tables = root.tables.len();
            s.entry_bytes = std::mem::size_of::<CEntry<D, W>>();
            s.per_table = root
                .tables
                .iter()
                .map(|t| (t.lens.to_vec(), t.nentries, t.nbuckets))
                .collect();
        }
        match &self.repr {
            Repr::Narrow(root) => fill(root, &mut s),
            Repr::Wide(root) => fill(root, &mut s),
        }
        s
    }

    /// Checks the internal invariants (for tests): every entry sits where lookups and
    /// `remove_rule` look for it, orders and counts are exact.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        let n = match &self.repr {
            Repr::Narrow(root) => root.check(&self.params)?,
            Repr::Wide(root) => root.check(&self.params)?,
        };
        let indexed = self.by_rule.values().map(Vec::len).sum::<usize>();
        if indexed != self.len {
            return Err(format!(
                "index holds {indexed} entries, len is {}",
                self.len
            ));
        }
        let compiled = self
            .by_rule
            .values()
            .flatten()
            .filter(|e| match self.repr {
                Repr::Narrow(_) => compile::<D, u32>(e).is_some(),
                Repr::Wide(_) => compile::<D, u64>(e).is_some(),
            })
            .count();
        if compiled != n {
            return Err(format!(
                "structure holds {n} entries, index says {compiled}"
            ));
        }
        Ok(())
    }

    /// Lookup counters for `key` (from 0, residual conditions taken as true).
    pub fn lookup_cost(&self, key: &[u64; D]) -> Cost {
        self.profile(key, None)
    }

    /// Like [`Classifier::lookup_cost`], also counting (probes, hits) per top-level table.
    #[doc(hidden)]
    pub fn lookup_profile(&self, key: &[u64; D], per_table: &mut [(usize, usize)]) -> Cost {
        self.profile(key, Some(per_table))
    }

    fn profile(&self, key: &[u64; D], per_table: Option<&mut [(usize, usize)]>) -> Cost {
        let mut cost = Cost::default();
        match &self.repr {
            Repr::Narrow(root) => {
                if key.iter().all(|&k| k <= u64::from(u32::MAX)) {
                    root.profile(key, &mut Best::new(), &mut cost, per_table);
                }
            }
            Repr::Wide(root) => root.profile(key, &mut Best::new(), &mut cost, per_table),
        }
        cost
    }
}
