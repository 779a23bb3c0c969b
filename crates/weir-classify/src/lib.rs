//! Multi-field packet classification with the exact semantics of a linear first-match scan.
//!
//! # What it is for
//!
//! weir compiles a chain's rules into *entries*: one inclusive range per dimension of a packet
//! key (IPv4: `[saddr, daddr, sport, dport, proto]`; IPv6: the addresses as 64-bit halves), a
//! priority (lower wins), a rule payload, and a `residual` flag for rules that have further
//! conditions the classifier does not index. The engine asks [`Classifier::first_match`] for the
//! matching entry with the smallest priority `>= from`; after a rule that does not end evaluation
//! it asks again from the next priority. The answer is always exactly what [`Linear`], a plain
//! vector scanned in priority order, would give; [`Linear`] is kept as the reference for tests.
//!
//! The [`classbench`] module reads ClassBench rule sets and header traces, the standard
//! classifier benchmark (`examples/cbbench.rs` runs one).
//!
//! ```
//! use weir_classify::{Classifier, Entry};
//!
//! // IPv4 key: saddr, daddr, sport, dport (17 bits: 0x10000 = "no ports"), proto.
//! const ANY_ADDR: (u64, u64) = (0, 0xFFFF_FFFF);
//! const ANY_PORT: (u64, u64) = (0, 0x1_FFFF);
//! let ssh_from_10 = Entry { prio: 10, rule: 1, residual: false,
//!     ranges: [(0x0A00_0000, 0x0AFF_FFFF), ANY_ADDR, ANY_PORT, (22, 22), (6, 6)] };
//! // `tcp dport {80, 443} ct state new`: two entries, one rule, a condition the
//! // classifier does not index.
//! let web = |port| Entry { prio: 20, rule: 2, residual: true,
//!     ranges: [ANY_ADDR, ANY_ADDR, ANY_PORT, (port, port), (6, 6)] };
//! let counter = Entry { prio: 30, rule: 3, residual: false, ranges: [ANY_ADDR, ANY_ADDR, ANY_PORT, ANY_PORT, (0, 255)] };
//! let mut c = Classifier::build([32, 32, 17, 17, 8], vec![ssh_from_10, web(80), web(443), counter]);
//!
//! let key = [0x0A01_0203, 0xC0A8_0001, 40000, 443, 6];
//! assert_eq!(c.first_match(&key, 0, |_rule| true), Some((20, 2)));
//! assert_eq!(c.first_match(&key, 0, |rule| rule != 2), Some((30, 3))); // residual said no
//! assert_eq!(c.first_match(&key, 21, |_rule| true), Some((30, 3))); // resume after prio 20
//! assert_eq!(c.remove_rule(2), 2);
//! assert_eq!(c.first_match(&key, 0, |_rule| true), Some((30, 3)));
//! ```
//!
//! # How it works
//!
//! [`Classifier`] is a *tuple-space tree*: tuple space search with TupleMerge's relaxed tuples,
//! where an over-full hash bucket becomes a nested tuple space over its own entries.
//!
//! - **Tables.** Each hash table has a *tuple*: a prefix length per dimension. An entry fits a
//!   table when, in every dimension, the common-prefix length of its `[lo, hi]` is at least the
//!   table's length (any range fits a shorter length, so ranges that are not prefixes are
//!   fine). The table hashes the top `len[d]` bits of every dimension; a key's bucket is found
//!   with one hash and a short linear probe, and the bucket's entries are then range-checked in
//!   full, in priority order. Two masked keys that share a hash simply share a bucket.
//! - **Relaxed tuples** (TupleMerge, Daly, Liu and Torng): tables use tuples shorter than their
//!   entries' own prefix lengths, so that few tables cover many differently shaped entries
//!   (plain tuple space search needs one table per distinct shape).
//! - **Priority pruning.** Tables are kept sorted by their best (smallest) priority; a lookup
//!   stops as soon as the next table cannot beat the best match found, skips tables whose worst
//!   priority is below `from`, and skips buckets (whose slot records the bucket's best priority)
//!   that cannot win.
//! - **Nodes.** A bucket of more than 16 entries becomes a *node*: a nested tuple space over
//!   just those entries, with tuples longer than its table's. A hot prefix (ClassBench's fw1 has
//!   a source /27 shared by ~500 rules that differ in every other field) costs a few extra probes
//!   for the keys that land there, instead of extra tables that every lookup would probe.
//!   Entries that cannot be refined below a node's tuple (they differ only in non-prefix ranges)
//!   are kept in a priority-sorted list in the node.
//! - **Build.** Tables are chosen with TupleMerge's offline rule: walk the entries in priority
//!   order, generalising the tuple, and keep the tuple that covers the longest priority prefix
//!   with buckets under a *select limit*. The best select limit differs between rule sets, so
//!   [`Classifier::build`] builds with 4, 8, 16 and 32 and keeps the structure whose counted
//!   lookup cost (probes, entries compared, nodes entered) is lowest on a deterministic sample
//!   of synthetic keys drawn inside the entries' own boxes (the way ClassBench makes traces);
//!   then it greedily merges pairs of frequently probed top-level tables into their common
//!   generalisation while the counted cost drops. Sets under 256 entries skip this tuning.
//! - **Updates.** [`Classifier::insert`] puts an entry into the most specific compatible table
//!   of each level it descends (or a new table with a relaxed tuple); a leaf bucket that
//!   overflows becomes a node. [`Classifier::remove_rule`] finds the rule's entries through a
//!   per-rule index and removes them where the lookup would find them; a node that shrinks to
//!   half a leaf becomes a leaf again. Tables keep an exact priority multiset, so pruning stays
//!   exact. Nothing is ever rebuilt beyond one bucket (plus the occasional amortised arena
//!   compaction or slot-array resize).
//! - **Layout.** A table is an open-addressing slot array (16 bytes a slot: hash, bucket best
//!   priority, run start, run length, load at most 1/2) plus one arena of entries where each
//!   leaf bucket is a contiguous, priority-sorted run. Entries are stored as `lo` and `hi - lo`
//!   per dimension in 32-bit words when every width is at most 32 bits (52 bytes for IPv4,
//!   faster than 64-bit words by ~10% at 100k rules), 64-bit otherwise.
//!
//! # Costs
//!
//! Measured on one core of the development machine (Xeon, ClassBench sets, `cbbench`):
//!
//! | set | entries | lookup | vs linear | build | memory | insert / delete (median) |
//! |---|---|---|---|---|---|---|
//! | acl1_1k | 942 | 27 ns | 18x | 4 ms | 0.3 MB | 0.2 / 0.5 µs |
//! | acl1_100k | 99 414 | 28 ns | 4800x | 0.35 s | 28 MB | 0.3 / 2.2 µs |
//! | fw1_1k | 857 | 44 ns | 10x | 7 ms | 0.3 MB | 0.2 / 0.4 µs |
//! | fw1_100k | 88 976 | 73 ns | 2300x | 0.25 s | 25 MB | 0.3 / 2.6 µs |
//! | ipc1_1k | 974 | 57 ns | 11x | 5 ms | 0.4 MB | 0.3 / 0.6 µs |
//! | ipc1_100k | 99 259 | 66 ns | 2700x | 0.37 s | 26 MB | 0.4 / 2.6 µs |
//!
//! A lookup costs one hash and one slot probe per table it reaches (typically 1-4 at the top
//! level) plus a few range checks; [`Classifier::lookup_cost`] counts them and
//! [`Classifier::stats`] describes the shape. Memory is about 260 bytes per entry, about half of
//! it the per-rule index that `remove_rule` needs. Building one entry at a time with
//! [`Classifier::insert`] is fast (about 1 µs per entry) but gives a structure about 1.5-3x slower
//! to query than [`Classifier::build`]; rebuild after large batches of changes.
//!
//! Limits: a range is only hashed on its common prefix, so many entries that share every
//! hashed bit and differ only in wide non-prefix ranges (say thousands of distinct port ranges
//! with everything else equal) end up in one list and are scanned linearly. Keys are expected
//! to be `< 2^width` in each dimension; other keys still get the exact answer, by a full scan.

pub mod classbench;
mod linear;
mod tss;

pub use linear::Linear;
#[doc(hidden)]
pub use tss::BuildOptions;
pub use tss::{Classifier, Cost, Stats};

/// One classifier entry: it matches a key when, for every dimension `d`,
/// `ranges[d].0 <= key[d] <= ranges[d].1`.
///
/// `prio`: lower wins (the engine assigns sparse, unique-per-rule priorities; several entries
/// may share a prio and rule, e.g. a rule `tcp dport {22, 80}` becomes two entries with the same
/// prio and rule). `rule`: opaque payload returned on match. `residual`: when true the entry
/// matches only if the caller's residual callback also returns true for it (the rule has further
/// conditions the classifier does not index). An entry with `lo > hi` in some dimension matches
/// nothing, but still counts in `len` and is removed by `remove_rule`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry<const D: usize> {
    /// Priority; lower wins.
    pub prio: u32,
    /// Opaque payload returned on match.
    pub rule: u32,
    /// Inclusive range per dimension.
    pub ranges: [(u64, u64); D],
    /// The entry also needs the caller's residual callback to return true.
    pub residual: bool,
}

impl<const D: usize> Entry<D> {
    /// True when every dimension of `key` is inside the entry's range (ignores `residual`).
    #[inline]
    pub fn matches(&self, key: &[u64; D]) -> bool {
        self.ranges
            .iter()
            .zip(key)
            .all(|(&(lo, hi), &k)| lo <= k && k <= hi)
    }
}

pub(crate) fn check_widths(widths: &[u8]) {
    for (d, &w) in widths.iter().enumerate() {
        assert!(
            (1..=64).contains(&w),
            "weir-classify: width of dimension {d} is {w}, must be 1..=64"
        );
    }
}
