//! Property tests: L7 detection and both reassemblies never panic, whatever the bytes
//! (arbitrary ones, and truncations and single-byte changes of nfqws2's fake payloads),
//! and keep their invariants (markers within the payload, budget accounting).

use proptest::prelude::*;

use weir_script::l7::quic::QuicReasm;
use weir_script::l7::{detect, Reasm, ReasmBudget, ReasmStatus, L4};
use weir_script::payload::PayloadType;

fn fakes() -> Vec<Vec<u8>> {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/zapret2/files/fake"
    );
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(dir)
        .expect("fake payload dir")
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    out.sort();
    assert!(out.len() >= 40);
    out
}

/// detect on `p` over both L4s, with its markers checked to lie within `p`.
fn detect_checked(p: &[u8]) {
    for l4 in [L4::Tcp, L4::Udp] {
        let d = detect(l4, p);
        if p.is_empty() {
            assert_eq!(d.ptype, PayloadType::Empty);
        }
        if let Some((s, e)) = d.markers.host {
            assert!(s <= e && e <= p.len(), "{:?} {}", d, p.len());
            if let Some(h) = &d.host {
                if h.is_ascii() {
                    assert_eq!(p[s..e].to_ascii_lowercase(), h.as_bytes());
                }
            }
        }
        if let Some(x) = d.markers.sniext {
            assert!(x < p.len());
        }
        if let Some(n) = d.incomplete {
            assert!(n > p.len());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn detect_arbitrary(p in proptest::collection::vec(any::<u8>(), 0..1600)) {
        detect_checked(&p);
    }

    #[test]
    fn detect_arbitrary_with_tls_and_quic_heads(
        head in prop_oneof![
            Just(vec![0x16u8, 3, 1]),
            Just(vec![0x16u8, 3, 1, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]),
            Just(vec![0xc3u8, 0, 0, 0, 1, 8]),
            Just(vec![0xd3u8, 0x6b, 0x33, 0x43, 0xcf, 8]),
            Just(vec![0x16u8, 0xfe, 0xfd]),
        ],
        tail in proptest::collection::vec(any::<u8>(), 0..1400),
    ) {
        let mut p = head;
        p.extend_from_slice(&tail);
        detect_checked(&p);
        let mut r = QuicReasm::new(QuicReasm::DEFAULT_LIMIT);
        r.feed(&p);
    }

    #[test]
    fn fakes_truncated_and_mutated(i in 0usize..64, cut in any::<prop::sample::Index>(),
                                   at in any::<prop::sample::Index>(), x in 1u8..=255) {
        let fakes = fakes();
        let p = &fakes[i % fakes.len()];
        let cut = cut.index(p.len() + 1);
        detect_checked(&p[..cut]);
        let mut m = p.clone();
        let at = at.index(m.len());
        m[at] ^= x;
        detect_checked(&m);
        let mut q = QuicReasm::new(QuicReasm::DEFAULT_LIMIT);
        q.feed(&m);
        q.feed(&p[..cut]);
        let mut budget = ReasmBudget::new(8192);
        let mut r = Reasm::new(4096);
        r.feed(&mut budget, 0, &m[..cut.min(m.len())]);
        r.feed(&mut budget, cut as u32, &m[cut..]);
        prop_assert_eq!(budget.used(), r.held());
    }

    #[test]
    fn reasm_arbitrary_segments(segs in proptest::collection::vec(
            (any::<u32>(), proptest::collection::vec(any::<u8>(), 0..600)), 0..12),
            limit in 0usize..5000, total in 0usize..9000) {
        let mut budget = ReasmBudget::new(total);
        let mut a = Reasm::new(limit);
        let mut b = Reasm::new(limit);
        for (k, (seq, bytes)) in segs.iter().enumerate() {
            let seq = seq % 8000;
            let r = if k % 2 == 0 { &mut a } else { &mut b };
            let st = r.feed(&mut budget, seq, bytes);
            if let ReasmStatus::Complete = st {
                prop_assert!(r.data().is_some());
            }
            prop_assert_eq!(budget.used(), a.held() + b.held());
            prop_assert!(budget.used() <= total);
            prop_assert!(a.held() <= limit && b.held() <= limit);
        }
        a.finish(&mut budget);
        b.finish(&mut budget);
        prop_assert_eq!(budget.used(), 0);
    }

    #[test]
    fn reasm_shuffled_hello(seed in any::<u64>(), size in 1usize..1500) {
        // a real hello cut in segments of `size` fed in a shuffled order, some twice
        let p = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/zapret2/files/fake/tls_clienthello_rutracker_org_kyber.bin")).unwrap();
        let mut segs: Vec<(u32, &[u8])> = p.chunks(size).enumerate()
            .map(|(i, c)| ((i * size) as u32, c)).collect();
        let mut s = seed;
        for i in (1..segs.len()).rev() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            segs.swap(i, (s >> 33) as usize % (i + 1));
        }
        let dup = segs[(seed as usize) % segs.len()];
        segs.insert((seed as usize >> 8) % segs.len(), dup);
        let mut budget = ReasmBudget::new(1 << 16);
        let mut r = Reasm::new(1 << 14);
        let mut done = false;
        for (seq, c) in segs {
            if r.feed(&mut budget, seq, c) == ReasmStatus::Complete {
                done = true;
            }
        }
        prop_assert!(done);
        prop_assert_eq!(r.data(), Some(&p[..]));
        let d = detect(L4::Tcp, r.data().unwrap());
        prop_assert_eq!(d.host.as_deref(), Some("rutracker.org"));
    }
}
