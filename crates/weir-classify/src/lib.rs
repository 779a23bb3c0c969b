//! weir-classify: multi-field packet classification with linear-scan first-match semantics.
//! (Docs are completed below.)

pub mod classbench;
mod linear;
mod tss;

pub use linear::Linear;
pub use tss::{Classifier, Stats};

/// One classifier entry: it matches a key when, for every dimension `d`,
/// `ranges[d].0 <= key[d] <= ranges[d].1`.
///
/// `prio`: lower wins. Several entries may share a `prio` and `rule` (a rule with a set of
/// ports becomes several entries). `rule`: opaque payload returned on match. `residual`: when
/// true the entry matches only if the caller's residual callback also returns true for `rule`.
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
        assert!((1..=64).contains(&w), "weir-classify: width of dimension {d} is {w}, must be 1..=64");
    }
}
