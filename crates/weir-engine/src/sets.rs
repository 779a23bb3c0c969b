//! Runtime sets and maps: membership and lookup in time that does not grow with the number of
//! elements, and element insertion and removal without rebuilding.
//!
//! A set keyed by single values is a hash table; a set of ranges or prefixes on one component is
//! a sorted list of disjoint intervals searched by binary search (elements that overlap are
//! split at their boundaries once, when added, so that a lookup returns the first element added
//! that covers the key, as nftables' anonymous sets do). A concatenation of single values hashes the
//! whole key; a concatenation with ranges is indexed on its first component's value when that
//! is a single value and scanned within that bucket.

use std::collections::{BTreeMap, HashMap};
use weir_lang::ir::{Element, MapValue, Set};

/// Up to this many key components (nftables allows a key of at most 64 bytes).
pub const MAX_KEY: usize = 8;

/// A key as read from a packet.
pub type KeyVals = [u128; MAX_KEY];

#[derive(Clone, Debug)]
enum Index {
    /// One component, single values: value -> element.
    Points(HashMap<u128, u32>),
    /// One component with ranges: disjoint lo -> (hi, element).
    Intervals(BTreeMap<u128, (u128, u32)>),
    /// Several components, all single values: hash of the key -> elements with that hash.
    ConcatPoints(HashMap<u64, Vec<u32>>),
    /// Several components with ranges: first component's single value -> elements; elements
    /// whose first component is a range go in `wide`.
    ConcatRanges {
        by_first: HashMap<u128, Vec<u32>>,
        wide: Vec<u32>,
    },
}

/// A set or map ready for lookups.
#[derive(Clone, Debug)]
pub struct SetIndex {
    pub comps: usize,
    elements: Vec<Option<Element>>,
    free: Vec<u32>,
    index: Index,
    live: usize,
    exact: HashMap<Vec<(u128, u128)>, u32>,
    /// Some interval element was split around another one (only inline sets overlap; nftables
    /// refuses overlapping intervals in named sets).
    overlaps: bool,
    /// The catch-all element (`*`): kept out of the index, found when the index misses, as
    /// nft_set_catchall_lookup after the set's own lookup.
    catchall: Option<Element>,
}

fn hash_key(k: &[u128]) -> u64 {
    // FNV-1a over the components' bytes folded: good enough spread for a hash map key
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in k {
        for w in [(*v >> 64) as u64, *v as u64] {
            h ^= w;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
            h ^= h >> 29;
        }
    }
    h
}

impl SetIndex {
    pub fn build(set: &Set) -> SetIndex {
        let comps = set.key_types.len().max(1);
        let has_ranges = set.interval
            || set
                .elements
                .iter()
                .any(|e| e.key.iter().any(|(a, b)| a != b));
        let index = match (comps, has_ranges) {
            (1, false) => Index::Points(HashMap::new()),
            (1, true) => Index::Intervals(BTreeMap::new()),
            (_, false) => Index::ConcatPoints(HashMap::new()),
            (_, true) => Index::ConcatRanges {
                by_first: HashMap::new(),
                wide: Vec::new(),
            },
        };
        let mut s = SetIndex {
            comps,
            elements: Vec::new(),
            free: Vec::new(),
            index,
            live: 0,
            exact: HashMap::new(),
            overlaps: false,
            catchall: set.catchall.clone(),
        };
        for e in &set.elements {
            s.insert(e.clone());
        }
        s
    }

    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Add an element. Returns false if an element with the same key already exists (the set is
    /// unchanged, as `add element` of an existing element is a no-op).
    pub fn insert(&mut self, e: Element) -> bool {
        if self.find_exact(&e.key).is_some() {
            return false;
        }
        let id = match self.free.pop() {
            Some(i) => {
                self.elements[i as usize] = Some(e);
                i
            }
            None => {
                self.elements.push(Some(e));
                (self.elements.len() - 1) as u32
            }
        };
        let key = self.elements[id as usize].as_ref().unwrap().key.clone();
        self.exact.insert(key.clone(), id);
        match &mut self.index {
            Index::Points(m) => {
                m.insert(key[0].0, id);
            }
            Index::Intervals(v) => self.overlaps |= insert_interval(v, key[0].0, key[0].1, id),
            Index::ConcatPoints(m) => {
                let k: Vec<u128> = key.iter().map(|r| r.0).collect();
                m.entry(hash_key(&k)).or_default().push(id);
            }
            Index::ConcatRanges { by_first, wide } => {
                if key[0].0 == key[0].1 {
                    by_first.entry(key[0].0).or_default().push(id);
                } else {
                    wide.push(id);
                }
            }
        }
        self.live += 1;
        true
    }

    /// Remove the element with exactly this key. Returns whether it existed.
    pub fn remove(&mut self, key: &[(u128, u128)]) -> bool {
        let Some(id) = self.find_exact(key) else {
            return false;
        };
        match &mut self.index {
            Index::Points(m) => {
                m.remove(&key[0].0);
            }
            // without overlaps an element is one piece, keyed by its start
            Index::Intervals(v) if !self.overlaps => {
                v.remove(&key[0].0);
            }
            Index::Intervals(v) => v.retain(|_, x| x.1 != id),
            Index::ConcatPoints(m) => {
                let k: Vec<u128> = key.iter().map(|r| r.0).collect();
                if let Some(b) = m.get_mut(&hash_key(&k)) {
                    b.retain(|&x| x != id);
                }
            }
            Index::ConcatRanges { by_first, wide } => {
                if let Some(b) = by_first.get_mut(&key[0].0) {
                    b.retain(|&x| x != id);
                }
                wide.retain(|&x| x != id);
            }
        }
        self.elements[id as usize] = None;
        self.exact.remove(key);
        self.free.push(id);
        self.live -= 1;
        // only where intervals overlapped can another element now cover the freed range
        if self.overlaps {
            if let Index::Intervals(_) = self.index {
                self.rebuild_intervals();
            }
        }
        true
    }

    fn rebuild_intervals(&mut self) {
        let mut v = BTreeMap::new();
        for (i, e) in self.elements.iter().enumerate() {
            if let Some(e) = e {
                insert_interval(&mut v, e.key[0].0, e.key[0].1, i as u32);
            }
        }
        self.index = Index::Intervals(v);
    }

    fn find_exact(&self, key: &[(u128, u128)]) -> Option<u32> {
        self.exact.get(key).copied()
    }

    /// The element matching a key read from a packet: one of the set's own, or else its
    /// catch-all element.
    #[inline]
    pub fn lookup(&self, k: &[u128]) -> Option<&Element> {
        self.lookup_own(k).or(self.catchall.as_ref())
    }

    /// The catch-all element (`*`), if the set has one.
    pub fn catchall(&self) -> Option<&Element> {
        self.catchall.as_ref()
    }

    /// The set's own element matching a key, the catch-all left out (as nft_dynset's update
    /// finds an element to refresh or adds one).
    #[inline]
    pub fn lookup_own(&self, k: &[u128]) -> Option<&Element> {
        let id = match &self.index {
            Index::Points(m) => *m.get(&k[0])?,
            Index::Intervals(v) => {
                let (_, &(hi, id)) = v.range(..=k[0]).next_back()?;
                if k[0] <= hi {
                    id
                } else {
                    return None;
                }
            }
            Index::ConcatPoints(m) => {
                let b = m.get(&hash_key(&k[..self.comps]))?;
                *b.iter().find(|&&id| self.covers(id, k))?
            }
            Index::ConcatRanges { by_first, wide } => {
                let best = by_first
                    .get(&k[0])
                    .and_then(|b| b.iter().copied().find(|&id| self.covers(id, k)));
                let w = wide.iter().copied().find(|&id| self.covers(id, k));
                match (best, w) {
                    (Some(a), Some(b)) => a.min(b),
                    (Some(a), None) => a,
                    (None, Some(b)) => b,
                    (None, None) => return None,
                }
            }
        };
        self.elements[id as usize].as_ref()
    }

    #[inline]
    fn covers(&self, id: u32, k: &[u128]) -> bool {
        match &self.elements[id as usize] {
            Some(e) => e.key.iter().zip(k).all(|((lo, hi), v)| lo <= v && v <= hi),
            None => false,
        }
    }

    #[inline]
    pub fn contains(&self, k: &[u128]) -> bool {
        self.lookup(k).is_some()
    }

    /// The map data for a key.
    #[inline]
    pub fn get(&self, k: &[u128]) -> Option<&MapValue> {
        self.lookup(k).and_then(|e| e.data.as_ref())
    }

    /// Every live element (for listing).
    pub fn elements(&self) -> impl Iterator<Item = &Element> {
        self.elements.iter().flatten()
    }

    /// Approximate heap bytes.
    pub fn memory_bytes(&self) -> usize {
        let el = self.elements.len() * (std::mem::size_of::<Option<Element>>() + self.comps * 32);
        let ix = match &self.index {
            Index::Points(m) => m.capacity() * 24,
            Index::Intervals(v) => v.len() * 64,
            Index::ConcatPoints(m) => m.capacity() * 40 + self.live * 4,
            Index::ConcatRanges { by_first, wide } => {
                by_first.capacity() * 48 + self.live * 4 + wide.capacity() * 4
            }
        };
        el + ix
    }
}

/// Insert [lo, hi] -> id into disjoint intervals; where it overlaps existing intervals, those
/// keep their element (first added wins) and only the uncovered parts take `id`. Returns
/// whether it overlapped any.
fn insert_interval(v: &mut BTreeMap<u128, (u128, u32)>, lo: u128, hi: u128, id: u32) -> bool {
    let mut pieces = Vec::new();
    let mut cur = lo;
    let mut covered_to_end = false;
    let before = v.range(..lo).next_back().map(|(&a, &b)| (a, b));
    let overlapping = before
        .into_iter()
        .filter(|(_, (b, _))| *b >= lo)
        .chain(v.range(lo..=hi).map(|(&a, &b)| (a, b)));
    for (a, (b, _)) in overlapping {
        if a > cur {
            pieces.push((cur, a - 1));
        }
        if b >= hi {
            covered_to_end = true;
            break;
        }
        cur = b + 1;
    }
    if !covered_to_end && cur <= hi {
        pieces.push((cur, hi));
    }
    let overlapped = pieces.len() != 1 || pieces[0] != (lo, hi);
    for (a, b) in pieces {
        v.insert(a, (b, id));
    }
    overlapped
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_wire::DataType;

    fn set(keys: &[Vec<(u128, u128)>]) -> Set {
        Set {
            name: "s".into(),
            key_types: vec![DataType::Integer(32); keys[0].len()],
            data_types: vec![],
            is_map: false,
            verdict_map: false,
            objects: None,
            interval: keys.iter().any(|k| k.iter().any(|(a, b)| a != b)),
            dynamic: false,
            constant: false,
            timeout_ms: None,
            size: None,
            elements: keys
                .iter()
                .map(|k| Element {
                    key: k.clone(),
                    data: None,
                    timeout_ms: None,
                })
                .collect(),
            catchall: None,
            span: Default::default(),
            handle: 0,
            listed: vec![],
        }
    }

    #[test]
    fn catchall_answers_a_miss() {
        let mut m = set(&[vec![(1, 1)], vec![(5, 9)]]);
        m.is_map = true;
        for e in &mut m.elements {
            e.data = Some(MapValue::Value(vec![1]));
        }
        m.catchall = Some(Element {
            key: vec![],
            data: Some(MapValue::Value(vec![2])),
            timeout_ms: None,
        });
        let s = SetIndex::build(&m);
        assert_eq!(s.get(&[1]), Some(&MapValue::Value(vec![1])));
        assert_eq!(s.get(&[7]), Some(&MapValue::Value(vec![1])));
        assert_eq!(s.get(&[3]), Some(&MapValue::Value(vec![2])));
        assert_eq!(s.len(), 2);
        assert_eq!(s.elements().count(), 2);
    }

    #[test]
    fn intervals_first_added_wins() {
        let s = SetIndex::build(&set(&[vec![(10, 20)], vec![(15, 30)], vec![(0, 100)]]));
        let which = |k: u128| s.lookup(&[k]).map(|e| e.key[0]);
        assert_eq!(which(12), Some((10, 20)));
        assert_eq!(which(25), Some((15, 30)));
        assert_eq!(which(5), Some((0, 100)));
        assert_eq!(which(99), Some((0, 100)));
        assert_eq!(which(101), None);
    }

    #[test]
    fn interval_removal() {
        // disjoint: one piece each, removed in place
        let mut s = SetIndex::build(&set(&[vec![(0, 9)], vec![(10, 19)], vec![(30, 39)]]));
        assert!(s.remove(&[(10, 19)]));
        assert!(s.contains(&[5]) && !s.contains(&[15]) && s.contains(&[35]));
        // overlapping: the freed range goes to the element that also covers it
        let mut s = SetIndex::build(&set(&[vec![(10, 20)], vec![(0, 100)]]));
        assert_eq!(s.lookup(&[15]).map(|e| e.key[0]), Some((10, 20)));
        assert!(s.remove(&[(10, 20)]));
        assert_eq!(s.lookup(&[15]).map(|e| e.key[0]), Some((0, 100)));
        assert!(s.remove(&[(0, 100)]));
        assert!(!s.contains(&[15]));
    }

    #[test]
    fn add_remove() {
        let mut s = SetIndex::build(&set(&[vec![(1, 1)], vec![(2, 2)]]));
        assert!(s.contains(&[1]));
        assert!(s.remove(&[(1, 1)]));
        assert!(!s.contains(&[1]));
        assert!(s.insert(Element {
            key: vec![(7, 7)],
            data: None,
            timeout_ms: None
        }));
        assert!(!s.insert(Element {
            key: vec![(7, 7)],
            data: None,
            timeout_ms: None
        }));
        assert!(s.contains(&[7]) && s.contains(&[2]));
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn concat() {
        let s = SetIndex::build(&set(&[
            vec![(1, 1), (22, 22)],
            vec![(2, 2), (80, 90)],
            vec![(0, 9), (443, 443)],
        ]));
        assert!(s.contains(&[1, 22]));
        assert!(!s.contains(&[1, 23]));
        assert!(s.contains(&[2, 85]));
        assert!(s.contains(&[5, 443]));
        assert!(!s.contains(&[10, 443]));
    }
}
