//! Classifier vs. the Linear reference on random entries, keys, updates and `from` values.

use proptest::prelude::*;
use weir_classify::{BuildOptions, Classifier, Entry, Linear};

/// Deterministic residual condition.
fn residual_ok(rule: u32) -> bool {
    rule % 3 != 1
}

fn range_strategy(width: u8) -> BoxedStrategy<(u64, u64)> {
    let max = if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    prop_oneof![
        // Prefix.
        (any::<u64>(), 0..=width).prop_map(move |(v, len)| {
            let low = if u32::from(width - len) >= 64 {
                u64::MAX
            } else {
                (1u64 << (width - len)) - 1
            };
            let lo = v & max & !low;
            (lo, lo | (low & max))
        }),
        // Exact value (often small, so that keys collide).
        (0..8u64).prop_map(move |v| (v & max, v & max)),
        any::<u64>().prop_map(move |v| (v & max, v & max)),
        // Arbitrary range.
        (any::<u64>(), any::<u64>()).prop_map(move |(a, b)| {
            let (a, b) = (a & max, b & max);
            (a.min(b), a.max(b))
        }),
        // Small range near zero.
        (0..16u64, 0..16u64).prop_map(move |(a, b)| ((a.min(b)) & max, (a.max(b)) & max)),
        // Wildcard.
        Just((0, max)),
    ]
    .boxed()
}

#[derive(Clone, Debug)]
struct Rule<const D: usize> {
    prio: u32,
    rule: u32,
    boxes: Vec<[(u64, u64); D]>,
    residual: bool,
}

fn rule_strategy<const D: usize>(widths: [u8; D]) -> impl Strategy<Value = Rule<D>> {
    let one_box = widths
        .map(range_strategy)
        .to_vec()
        .prop_map(|v: Vec<(u64, u64)>| {
            let mut b = [(0u64, 0u64); D];
            b.copy_from_slice(&v);
            b
        });
    (
        prop::collection::vec(one_box, 1..4),
        any::<bool>(),
        prop::bool::weighted(0.05),
    )
        .prop_map(|(boxes, residual, empty)| {
            let mut boxes = boxes;
            if empty {
                // An entry with lo > hi matches nothing but still counts.
                boxes[0][0] = (5, 4);
            }
            Rule {
                prio: 0,
                rule: 0,
                boxes,
                residual,
            }
        })
}

fn entries_of<const D: usize>(r: &Rule<D>) -> Vec<Entry<D>> {
    r.boxes
        .iter()
        .map(|b| Entry {
            prio: r.prio,
            rule: r.rule,
            ranges: *b,
            residual: r.residual,
        })
        .collect()
}

#[derive(Clone, Debug)]
enum Op<const D: usize> {
    Insert(Rule<D>),
    Remove(usize),
    Lookup([u64; D], u32),
    LookupNear(usize, u64, u32),
}

fn op_strategy<const D: usize>(widths: [u8; D]) -> impl Strategy<Value = Op<D>> {
    let key = widths
        .map(|w| {
            if w == 64 {
                any::<u64>().boxed()
            } else {
                (0..(1u64 << w)).boxed()
            }
        })
        .to_vec();
    prop_oneof![
        3 => rule_strategy(widths).prop_map(Op::Insert),
        2 => any::<usize>().prop_map(Op::Remove),
        3 => (key, any::<u32>()).prop_map(|(k, f): (Vec<u64>, u32)| {
            let mut a = [0u64; D];
            a.copy_from_slice(&k);
            Op::Lookup(a, f)
        }),
        6 => (any::<usize>(), any::<u64>(), any::<u32>()).prop_map(|(i, r, f)| Op::LookupNear(i, r, f)),
    ]
}

/// A key inside (or just outside) one of the boxes of `r`.
fn key_near<const D: usize>(r: &Rule<D>, mut rnd: u64, widths: [u8; D]) -> [u64; D] {
    let b = r.boxes[(rnd % r.boxes.len() as u64) as usize];
    let mut k = [0u64; D];
    for d in 0..D {
        rnd = rnd
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let (lo, hi) = b[d];
        let max = if widths[d] == 64 {
            u64::MAX
        } else {
            (1u64 << widths[d]) - 1
        };
        let (lo, hi) = if lo > hi { (hi, lo) } else { (lo, hi) };
        k[d] = match (rnd >> 60) % 8 {
            0 => lo,
            1 => hi,
            2 => lo.saturating_sub(1),
            3 => hi.saturating_add(1).min(max),
            _ => {
                lo + if hi - lo == u64::MAX {
                    rnd >> 3
                } else {
                    (rnd >> 3) % (hi - lo + 1)
                }
            }
        };
    }
    k
}

fn check_lookup<const D: usize>(
    c: &Classifier<D>,
    l: &Linear<D>,
    key: &[u64; D],
    from: u32,
) -> Result<(), TestCaseError> {
    let mut calls = Vec::new();
    let got = c.first_match(key, from, |r| {
        calls.push(r);
        residual_ok(r)
    });
    let want = l.first_match(key, from, residual_ok);
    prop_assert_eq!(got, want, "key {:?} from {}", key, from);
    // The residual callback is only called for entries that match every range.
    for r in calls {
        prop_assert!(
            l.entries()
                .iter()
                .any(|e| e.rule == r && e.residual && e.prio >= from && e.matches(key)),
            "residual called for rule {} that cannot match",
            r
        );
    }
    Ok(())
}

fn run<const D: usize>(
    widths: [u8; D],
    initial: Vec<Rule<D>>,
    ops: Vec<Op<D>>,
    prio_step: u32,
    limits: Option<(usize, usize)>,
) -> Result<(), TestCaseError> {
    let mut rules: Vec<Rule<D>> = Vec::new();
    let mut next_rule = 0u32;
    let mut used = std::collections::HashSet::new();
    let mut assign = |mut r: Rule<D>, rules: &mut Vec<Rule<D>>| {
        r.rule = next_rule;
        // Sparse, unique per rule, not monotonic in insertion order.
        let mut prio = next_rule.wrapping_mul(prio_step) % 1000 * 7 + next_rule % 3;
        while !used.insert(prio) {
            prio += 1;
        }
        r.prio = prio;
        next_rule += 1;
        rules.push(r.clone());
        r
    };
    let mut init_entries = Vec::new();
    for r in initial {
        let r = assign(r, &mut rules);
        init_entries.extend(entries_of(&r));
    }
    let mut c = match limits {
        None => Classifier::build(widths, init_entries.clone()),
        Some((s, l)) => Classifier::build_with(
            widths,
            init_entries.clone(),
            BuildOptions {
                select_limit: Some(s),
                leaf_limit: l,
                force_wide: s % 2 == 0,
            },
        ),
    };
    let mut l = Linear::build(widths, init_entries);
    prop_assert_eq!(c.len(), l.len());
    if let Err(e) = c.check_invariants() {
        return Err(TestCaseError::fail(format!("after build: {e}")));
    }
    for op in ops {
        match op {
            Op::Insert(r) => {
                let r = assign(r, &mut rules);
                for e in entries_of(&r) {
                    c.insert(e.clone());
                    l.insert(e);
                }
            }
            Op::Remove(i) => {
                if !rules.is_empty() {
                    let r = rules.swap_remove(i % rules.len());
                    prop_assert_eq!(c.remove_rule(r.rule), l.remove_rule(r.rule));
                    prop_assert_eq!(c.remove_rule(r.rule), 0);
                }
            }
            Op::Lookup(k, from) => {
                check_lookup(&c, &l, &k, from % 8000)?;
                check_lookup(&c, &l, &k, 0)?;
            }
            Op::LookupNear(i, rnd, from) => {
                if !rules.is_empty() {
                    let k = key_near(&rules[i % rules.len()], rnd, widths);
                    check_lookup(&c, &l, &k, 0)?;
                    check_lookup(&c, &l, &k, from % 8000)?;
                }
            }
        }
        prop_assert_eq!(c.len(), l.len());
        if let Err(e) = c.check_invariants() {
            return Err(TestCaseError::fail(e));
        }
    }
    // Final sweep: every rule's neighbourhood, from 0 and from just above each answer.
    for (i, r) in rules.iter().enumerate() {
        let k = key_near(r, i as u64 * 0x9E37_79B9, widths);
        check_lookup(&c, &l, &k, 0)?;
        if let Some((p, _)) = l.first_match(&k, 0, residual_ok) {
            check_lookup(&c, &l, &k, p.saturating_add(1))?;
        }
    }
    Ok(())
}

const W3: [u8; 3] = [8, 17, 4];
const W5: [u8; 5] = [32, 32, 17, 17, 8];
const W4: [u8; 4] = [64, 64, 1, 16];

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn small_widths(initial in prop::collection::vec(rule_strategy(W3), 0..60),
                    ops in prop::collection::vec(op_strategy(W3), 0..150),
                    step in 1u32..50) {
        run(W3, initial, ops, step, None)?;
    }

    #[test]
    fn small_widths_tiny_limits(initial in prop::collection::vec(rule_strategy(W3), 0..80),
                                ops in prop::collection::vec(op_strategy(W3), 0..200),
                                step in 1u32..50, sel in 1usize..4, leaf in 1usize..4) {
        run(W3, initial, ops, step, Some((sel, leaf)))?;
    }

    #[test]
    fn ipv4_five_tuple(initial in prop::collection::vec(rule_strategy(W5), 0..60),
                       ops in prop::collection::vec(op_strategy(W5), 0..120),
                       step in 1u32..50) {
        run(W5, initial, ops, step, None)?;
    }

    #[test]
    fn ipv4_five_tuple_tiny_limits(initial in prop::collection::vec(rule_strategy(W5), 0..60),
                                   ops in prop::collection::vec(op_strategy(W5), 0..120),
                                   step in 1u32..50, sel in 1usize..4, leaf in 1usize..4) {
        run(W5, initial, ops, step, Some((sel, leaf)))?;
    }

    #[test]
    fn wide_and_one_bit(initial in prop::collection::vec(rule_strategy(W4), 0..50),
                        ops in prop::collection::vec(op_strategy(W4), 0..120),
                        step in 1u32..50, sel in 1usize..6, leaf in 1usize..6) {
        run(W4, initial, ops, step, Some((sel, leaf)))?;
    }

    #[test]
    fn inserted_one_by_one(ops in prop::collection::vec(op_strategy(W3), 0..250), step in 1u32..50) {
        run(W3, Vec::new(), ops, step, Some((2, 2)))?;
    }
}

/// Many entries sharing every hashed bit (they differ only in arbitrary ranges) must not break
/// anything: they end up in node lists.
#[test]
fn identical_tuples_many_entries() {
    let widths = [8u8, 16];
    let mut entries = Vec::new();
    for i in 0..300u32 {
        entries.push(Entry {
            prio: 1000 - i,
            rule: i,
            ranges: [(3, 3), (i as u64 * 7, i as u64 * 7 + 100)],
            residual: i % 5 == 0,
        });
    }
    let c = Classifier::build_with(
        widths,
        entries.clone(),
        BuildOptions {
            select_limit: Some(2),
            leaf_limit: 2,
            force_wide: false,
        },
    );
    let l = Linear::build(widths, entries.clone());
    let mut c2 = Classifier::new(widths);
    for e in entries {
        c2.insert(e);
    }
    for k1 in 0..2200u64 {
        let k = [3, k1];
        let want = l.first_match(&k, 0, |r| r % 2 == 0);
        assert_eq!(c.first_match(&k, 0, |r| r % 2 == 0), want);
        assert_eq!(c2.first_match(&k, 0, |r| r % 2 == 0), want);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Large enough (>= 256 entries) for the tuned build: several table selections, the cost
    /// model and the merge pass.
    #[test]
    fn tuned_build(initial in prop::collection::vec(rule_strategy(W5), 150..300),
                   ops in prop::collection::vec(op_strategy(W5), 0..200),
                   step in 1u32..50) {
        run(W5, initial, ops, step, None)?;
    }

    #[test]
    fn tuned_build_small_widths(initial in prop::collection::vec(rule_strategy(W3), 150..300),
                                ops in prop::collection::vec(op_strategy(W3), 0..200),
                                step in 1u32..50) {
        run(W3, initial, ops, step, None)?;
    }
}

/// Keys and entries outside the `< 2^width` contract still get the linear answer (the narrow
/// form answers such keys by a full scan).
#[test]
fn out_of_range_keys_and_entries() {
    let widths = [8u8, 32];
    let entries = vec![
        Entry {
            prio: 5,
            rule: 1,
            ranges: [(0, 255), (0, u64::MAX)],
            residual: false,
        },
        Entry {
            prio: 3,
            rule: 2,
            ranges: [(1 << 40, 1 << 41), (0, 10)],
            residual: false,
        },
        Entry {
            prio: 4,
            rule: 3,
            ranges: [(0, 300), (7, 7)],
            residual: true,
        },
        Entry {
            prio: 1,
            rule: 4,
            ranges: [(9, 9), (u64::from(u32::MAX) + 1, u64::MAX)],
            residual: false,
        },
    ];
    for wide in [false, true] {
        let o = BuildOptions {
            select_limit: None,
            leaf_limit: 2,
            force_wide: wide,
        };
        let c = Classifier::build_with(widths, entries.clone(), o);
        let l = Linear::build(widths, entries.clone());
        for k0 in [0u64, 9, 255, 256, 300, 1 << 40, u64::MAX] {
            for k1 in [
                0u64,
                7,
                10,
                u64::from(u32::MAX),
                u64::from(u32::MAX) + 1,
                u64::MAX,
            ] {
                for from in [0, 2, 4, 5, 6] {
                    let k = [k0, k1];
                    assert_eq!(
                        c.first_match(&k, from, |r| r != 3),
                        l.first_match(&k, from, |r| r != 3),
                        "{k:?} {from}"
                    );
                    assert_eq!(
                        c.first_match(&k, from, |_| true),
                        l.first_match(&k, from, |_| true),
                        "{k:?} {from}"
                    );
                }
            }
        }
    }
}

#[test]
fn extreme_prios_and_edge_cases() {
    let widths = [64u8, 1];
    let mut c = Classifier::new(widths);
    let mut l = Linear::new(widths);
    assert!(c.is_empty());
    assert_eq!(c.first_match(&[0, 0], 0, |_| true), None);
    assert_eq!(c.remove_rule(7), 0);
    let es = [
        Entry {
            prio: u32::MAX,
            rule: u32::MAX,
            ranges: [(0, u64::MAX), (0, 1)],
            residual: false,
        },
        Entry {
            prio: 0,
            rule: 0,
            ranges: [(u64::MAX, u64::MAX), (1, 1)],
            residual: false,
        },
        Entry {
            prio: 10,
            rule: 10,
            ranges: [(5, 4), (0, 1)],
            residual: false,
        },
        Entry {
            prio: 10,
            rule: 10,
            ranges: [(1 << 63, u64::MAX), (0, 0)],
            residual: true,
        },
    ];
    for e in es {
        c.insert(e.clone());
        l.insert(e);
    }
    assert_eq!(c.len(), 4);
    for k in [[0, 0], [u64::MAX, 1], [u64::MAX, 0], [1 << 63, 0], [5, 1]] {
        for from in [0, 1, 10, 11, u32::MAX] {
            assert_eq!(
                c.first_match(&k, from, |_| false),
                l.first_match(&k, from, |_| false)
            );
            assert_eq!(
                c.first_match(&k, from, |_| true),
                l.first_match(&k, from, |_| true)
            );
        }
    }
    assert_eq!(
        c.first_match(&[u64::MAX, 0], 11, |_| true),
        Some((u32::MAX, u32::MAX))
    );
    assert_eq!(c.remove_rule(10), 2);
    assert_eq!(c.len(), 2);
    assert_eq!(
        c.first_match(&[1 << 63, 0], 0, |_| true),
        Some((u32::MAX, u32::MAX))
    );
    assert!(c.memory_bytes() > 0);
}

/// The residual callback is called only for entries that match and could still win, in prio
/// order, and stops at the first acceptance.
#[test]
fn residual_calls_are_few() {
    let widths = [16u8];
    let entries: Vec<Entry<1>> = (0..100u32)
        .map(|i| Entry {
            prio: i * 2,
            rule: i,
            ranges: [(u64::from(i), 1000)],
            residual: i % 2 == 0,
        })
        .collect();
    let c = Classifier::build(widths, entries);
    let mut calls = Vec::new();
    // Key 50 matches rules 0..=50; even ones are residual.
    let got = c.first_match(&[50], 0, |r| {
        calls.push(r);
        r >= 6
    });
    assert_eq!(got, Some((2, 1)));
    assert_eq!(calls, vec![0]);
    calls.clear();
    let got = c.first_match(&[50], 4, |r| {
        calls.push(r);
        false
    });
    assert_eq!(got, Some((6, 3)));
    assert_eq!(calls, vec![2]);
}
