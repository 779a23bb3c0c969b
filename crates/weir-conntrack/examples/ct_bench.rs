//! Conntrack throughput on one core: new connections/s (track + confirm) filling a table of
//! 1M entries, then lookups/s of established flows in random order (both directions), through
//! `track` (lookup + state/counter update) and through `find` (lookup only).
//!
//! `cargo run -p weir-conntrack --release --example ct_bench [entries]`
//!
//! Packets are UDP/IPv4 given as `PacketMeta::ipv4_tuple` (no frame: UDP tracking reads only the
//! metadata), so the figures are the table's, not the parser's.

use std::hint::black_box;
use std::time::Instant;

use weir_conntrack::{Config, Conntrack, Track, Tuple};
use weir_wire::PacketMeta;

fn flow(i: u32) -> (u32, u32, u16, u16) {
    (
        0x0a00_0000 | (i >> 8),
        0xc0a8_0001 + (i & 7),
        1024 + (i & 0xff) as u16,
        53,
    )
}

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1 << 20);
    let mut ct: Conntrack<u64> = Conntrack::new(Config {
        max_entries: n as usize,
        ..Config::default()
    });
    println!(
        "entries: {n}, size_of Entry<u64>: {} B, bytes/entry (IPv4, incl. index): {} B, IPv6: {} B",
        std::mem::size_of::<weir_conntrack::Entry<u64>>(),
        ct.bytes_per_entry(),
        ct.bytes_per_entry_v6()
    );
    let now = 1_000_000_000u64;

    let t = Instant::now();
    for i in 0..n {
        let (s, d, sp, dp) = flow(i);
        let pm = PacketMeta::ipv4_tuple(s, d, 17, sp, dp);
        match ct.track(&pm, &[], now) {
            Track::New(p) => {
                ct.confirm(p, now).expect("room");
            }
            other => panic!("{i}: {other:?}"),
        }
    }
    let el = t.elapsed();
    println!(
        "new connections (track + confirm): {:.2} M/s ({:.0} ns each), len {}",
        n as f64 / el.as_secs_f64() / 1e6,
        el.as_nanos() as f64 / n as f64,
        ct.len()
    );

    println!(
        "mean probe length (successful lookup): {:.2} slots",
        ct.mean_probe_len()
    );

    // Random order over all flows (an LCG permutation of the index space).
    let rounds = 4u64 * n as u64;
    let mut x: u64 = 12345;
    let mut pick = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((x >> 33) % n as u64) as u32
    };
    let t = Instant::now();
    let mut hits = 0u64;
    for k in 0..rounds {
        let (s, d, sp, dp) = flow(pick());
        let pm = if k & 1 == 0 {
            PacketMeta::ipv4_tuple(s, d, 17, sp, dp)
        } else {
            PacketMeta::ipv4_tuple(d, s, 17, dp, sp)
        };
        if let Track::Existing { .. } = ct.track(&pm, &[], now + 1 + k) {
            hits += 1;
        }
    }
    let el = t.elapsed();
    assert_eq!(hits, rounds);
    println!(
        "established track (lookup + update), random flows: {:.2} M/s ({:.0} ns each)",
        rounds as f64 / el.as_secs_f64() / 1e6,
        el.as_nanos() as f64 / rounds as f64
    );

    let t = Instant::now();
    let mut found = 0u64;
    for k in 0..rounds {
        let (s, d, sp, dp) = flow(pick());
        let tu = Tuple {
            zone: 0,
            src: s as u128,
            dst: d as u128,
            sport: sp,
            dport: dp,
            proto: 17,
            v6: false,
        };
        let tu = if k & 1 == 0 { tu } else { tu.invert() };
        if black_box(ct.find(&tu)).is_some() {
            found += 1;
        }
    }
    let el = t.elapsed();
    assert_eq!(found, rounds);
    println!(
        "lookups only (find), random flows, both directions: {:.2} M/s ({:.0} ns each)",
        rounds as f64 / el.as_secs_f64() / 1e6,
        el.as_nanos() as f64 / rounds as f64
    );

    // Full-table churn: new flows evicting the oldest unassured ones.
    let t = Instant::now();
    let m = n / 4;
    for i in 0..m {
        let (s, d, sp, _) = flow(i);
        let pm = PacketMeta::ipv4_tuple(s, d, 17, sp, 54);
        if let Track::New(p) = ct.track(&pm, &[], now + rounds + 1) {
            ct.confirm(p, now + rounds + 1).expect("evicts");
        }
    }
    let el = t.elapsed();
    println!(
        "new connections on a full table (evicting): {:.2} M/s, stats {:?}",
        m as f64 / el.as_secs_f64() / 1e6,
        ct.stats()
    );
}
