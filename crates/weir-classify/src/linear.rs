//! The reference classifier: a plain vector scanned in priority order.
//!
//! [`Linear`] exists so that every other structure in this crate (and the engine's compiled
//! chains) can be checked against something obviously correct. It keeps its entries sorted by
//! `prio` (insertion order among equal priorities) and [`Linear::first_match`] walks them until
//! the first entry that matches every range and passes the residual callback.
//!
//! Costs: lookup is O(n) (it stops at the first match); insert is O(n) (a sorted insert);
//! `remove_rule` is O(n). Memory is `n * size_of::<Entry<D>>()`.

use crate::{check_widths, Entry};

/// Linear first-match reference classifier (same API as [`crate::Classifier`]).
#[derive(Clone, Debug)]
pub struct Linear<const D: usize> {
    widths: [u8; D],
    /// Sorted by `prio`, stable for equal priorities.
    entries: Vec<Entry<D>>,
}

impl<const D: usize> Linear<D> {
    /// An empty classifier. `widths[d]` is the number of significant bits of dimension `d`.
    ///
    /// # Panics
    /// If a width is outside `1..=64`.
    pub fn new(widths: [u8; D]) -> Self {
        check_widths(&widths);
        Linear {
            widths,
            entries: Vec::new(),
        }
    }

    /// Builds from a list of entries (any order).
    pub fn build(widths: [u8; D], mut entries: Vec<Entry<D>>) -> Self {
        check_widths(&widths);
        entries.sort_by_key(|e| e.prio);
        Linear { widths, entries }
    }

    /// The dimension widths given to [`Linear::new`].
    pub fn widths(&self) -> [u8; D] {
        self.widths
    }

    /// Adds one entry.
    pub fn insert(&mut self, e: Entry<D>) {
        let pos = self.entries.partition_point(|x| x.prio <= e.prio);
        self.entries.insert(pos, e);
    }

    /// Removes every entry whose `rule` equals `rule`; returns how many were removed.
    pub fn remove_rule(&mut self, rule: u32) -> usize {
        let before = self.entries.len();
        self.entries.retain(|e| e.rule != rule);
        before - self.entries.len()
    }

    /// The matching entry with the smallest `prio >= from`, as `(prio, rule)`.
    pub fn first_match(
        &self,
        key: &[u64; D],
        from: u32,
        mut residual: impl FnMut(u32) -> bool,
    ) -> Option<(u32, u32)> {
        let start = self.entries.partition_point(|x| x.prio < from);
        self.entries[start..]
            .iter()
            .find(|e| e.matches(key) && (!e.residual || residual(e.rule)))
            .map(|e| (e.prio, e.rule))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Heap bytes used.
    pub fn memory_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry<D>>()
    }

    /// The entries, sorted by priority.
    pub fn entries(&self) -> &[Entry<D>] {
        &self.entries
    }
}
