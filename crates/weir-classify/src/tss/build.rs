//! Bulk construction: table selection, the cost model and the merge pass.

use std::collections::HashMap;

use super::space::{
    fits, hash_masked, prefix_mask, Best, CEntry, Cost, Level, Params, Table, Word,
};

/// Select limits tried by a tuned build.
const SELECT_CANDIDATES: &[usize] = &[4, 8, 16, 32];
/// Below this many entries a build is not tuned (one candidate, no merge pass).
const TUNE_MIN_ENTRIES: usize = 256;
/// Largest synthetic key sample used to compare candidate structures.
const SAMPLE_KEYS: usize = 4096;
/// Largest number of table merges tried by the merge pass.
const MERGE_TRIES: usize = 24;

/// TupleMerge's offline table selection: walk the entries in priority order, generalising the
/// tuple to cover each in turn, and keep the tuple that covers the longest priority prefix
/// without buckets above the select limit (ties: the most entries). Tuples never go below
/// `parent` and never equal it.
pub(super) fn select_tuple<const D: usize, W: Word>(
    remaining: &[(CEntry<D, W>, [u8; D])],
    parent: &[u8; D],
    p: &Params<D>,
) -> [u8; D] {
    let mut best_tuple = remaining[0].1;
    let mut best_index = 0usize;
    let mut best_size = 0usize;
    let mut current = remaining[0].1;
    let mut first = true;
    let mut counts: HashMap<u32, usize> = HashMap::new();
    for (_, cp) in remaining {
        let mut next = current;
        for d in 0..D {
            next[d] = next[d].min(cp[d]);
        }
        if next == *parent {
            break;
        }
        if !first && next == current {
            continue;
        }
        first = false;
        current = next;
        let mut masks = [0u64; D];
        for d in 0..D {
            masks[d] = prefix_mask(current[d], p.widths[d]);
        }
        counts.clear();
        let mut first_out = remaining.len();
        let mut size = 0;
        for (i, (ce, c)) in remaining.iter().enumerate() {
            if fits(c, &current) {
                let n = counts.entry(hash_masked(&ce.lo, &masks)).or_insert(0);
                *n += 1;
                if *n > p.select_limit {
                    first_out = first_out.min(i);
                } else {
                    size += 1;
                }
            } else {
                first_out = first_out.min(i);
            }
            if first_out < best_index {
                // A more general tuple only does worse from here on.
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

/// Builds the root level from prio-sorted compiled entries. With `tune`, large inputs are built
/// once per select limit in [`SELECT_CANDIDATES`], the cheapest on a synthetic key sample is
/// kept and then improved by [`merge_tables`]; returns the root and the select limit used.
pub(super) fn build_root<const D: usize, W: Word>(
    compiled: Vec<(CEntry<D, W>, [u8; D])>,
    p: &Params<D>,
    tune: bool,
) -> (Level<D, W>, usize) {
    if !tune || compiled.len() < TUNE_MIN_ENTRIES {
        return (Level::build(compiled, [0; D], p), p.select_limit);
    }
    let keys = sample_keys(&compiled, SAMPLE_KEYS.min(compiled.len() * 4));
    let mut best: Option<(f64, Level<D, W>, usize)> = None;
    for &sel in SELECT_CANDIDATES {
        let params = Params {
            select_limit: sel,
            ..*p
        };
        let root = Level::build(compiled.clone(), [0; D], &params);
        let cost = estimate_cost(&root, &keys);
        if best.as_ref().is_none_or(|b| cost < b.0) {
            best = Some((cost, root, sel));
        }
    }
    let (_, mut root, sel) = best.expect("at least one candidate");
    merge_tables(
        &mut root,
        &keys,
        &Params {
            select_limit: sel,
            ..*p
        },
    );
    (root, sel)
}

/// Deterministic synthetic keys: a point drawn uniformly inside the box of a random entry (the
/// way ClassBench's trace generator makes headers).
fn sample_keys<const D: usize, W: Word>(
    entries: &[(CEntry<D, W>, [u8; D])],
    n: usize,
) -> Vec<[u64; D]> {
    if entries.is_empty() {
        return Vec::new();
    }
    let mut rng: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    (0..n)
        .map(|_| {
            let e = &entries[(next() % entries.len() as u64) as usize].0;
            std::array::from_fn(|d| {
                let r = next();
                let (lo, span): (u64, u64) = (e.lo[d].into(), e.span[d].into());
                lo + if span == u64::MAX { r } else { r % (span + 1) }
            })
        })
        .collect()
}

/// Counted lookup cost over `keys`.
fn estimate_cost<const D: usize, W: Word>(root: &Level<D, W>, keys: &[[u64; D]]) -> f64 {
    let mut total = Cost::default();
    for k in keys {
        root.profile(k, &mut Best::new(), &mut total, None);
    }
    total.weighted()
}

/// Probe count of each top-level table over `keys`.
fn table_frequencies<const D: usize, W: Word>(root: &Level<D, W>, keys: &[[u64; D]]) -> Vec<usize> {
    let mut per = vec![(0usize, 0usize); root.tables.len()];
    for k in keys {
        root.profile(k, &mut Best::new(), &mut Cost::default(), Some(&mut per));
    }
    per.into_iter().map(|x| x.0).collect()
}

/// Greedy post-pass over the top level: replaces two frequently probed tables by one table on
/// their common generalisation (over-full buckets become nodes) when that lowers the counted
/// cost on `keys` by at least 1%.
fn merge_tables<const D: usize, W: Word>(root: &mut Level<D, W>, keys: &[[u64; D]], p: &Params<D>) {
    let mut tries = 0;
    let mut cost = estimate_cost(root, keys);
    'outer: while tries < MERGE_TRIES && root.tables.len() > 1 {
        let freq = table_frequencies(root, keys);
        // Candidate pairs: both probed by at least 1/8 of the keys; closest tuples first.
        let mut pairs = Vec::new();
        for a in 0..root.tables.len() {
            for b in a + 1..root.tables.len() {
                if freq[a] * 8 < keys.len() || freq[b] * 8 < keys.len() {
                    continue;
                }
                let (la, lb) = (&root.tables[a].lens, &root.tables[b].lens);
                let mut merged = [0u8; D];
                let mut dist = 0u32;
                for d in 0..D {
                    merged[d] = la[d].min(lb[d]);
                    dist += u32::from(la[d].abs_diff(lb[d]));
                }
                if merged != root.parent {
                    pairs.push((dist, root.tables[a].ident(), root.tables[b].ident(), merged));
                }
            }
        }
        pairs.sort_by_key(|x| x.0);
        for (_, ida, idb, lens) in pairs {
            if tries >= MERGE_TRIES {
                break 'outer;
            }
            // Positions change as trials are undone: find the pair by identity.
            let pos = |id: usize| root.tables.iter().position(|t| t.ident() == id);
            let (Some(a), Some(b)) = (pos(ida), pos(idb)) else {
                continue;
            };
            tries += 1;
            let (a, b) = (a.min(b), a.max(b));
            // a < b: remove b first so that a's index stays valid.
            let tb = root.tables.swap_remove(b);
            let ta = root.tables.swap_remove(a);
            let mut all = Vec::with_capacity(ta.nentries + tb.nentries);
            ta.collect(&mut all);
            tb.collect(&mut all);
            all.sort_by_key(|e| e.prio);
            let with_cpls = all.into_iter().map(|e| (e, p.cpls_of(&e))).collect();
            let merged = Table::from_entries(lens, with_cpls, p);
            let merged_id = merged.ident();
            root.tables.push(merged);
            root.sort_tables();
            let new_cost = estimate_cost(root, keys);
            if new_cost < cost * 0.99 {
                cost = new_cost;
                continue 'outer;
            }
            root.tables.retain(|t| t.ident() != merged_id);
            root.tables.push(ta);
            root.tables.push(tb);
            root.sort_tables();
        }
        break;
    }
    root.sort_tables();
}
