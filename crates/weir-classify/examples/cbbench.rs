//! ClassBench benchmark: `cargo run --release -p weir-classify --example cbbench -- RULES TRACE [-v]`
//!
//! Prints rules, entries, tables, build time, memory, compiled and linear lookup rates, speedup,
//! median insert/delete times and mismatches against the linear reference (every header of the
//! trace is checked; the linear *rate* is measured on a sample of the trace, as printed).

use std::hint::black_box;
use std::time::{Duration, Instant};

use weir_classify::classbench::{parse_rules, parse_trace, to_entries, CB_WIDTHS};
use weir_classify::{Classifier, Linear};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let verbose = args.iter().any(|a| a == "-v");
    let files: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    if files.len() != 2 {
        eprintln!("usage: cbbench RULES TRACE [-v]");
        std::process::exit(2);
    }
    let rules = parse_rules(&std::fs::read_to_string(files[0]).expect("read rules")).unwrap_or_else(|e| {
        eprintln!("{}: {e}", files[0]);
        std::process::exit(1)
    });
    let trace = parse_trace(&std::fs::read_to_string(files[1]).expect("read trace")).unwrap_or_else(|e| {
        eprintln!("{}: {e}", files[1]);
        std::process::exit(1)
    });
    let entries = to_entries(&rules);
    let keys: Vec<[u64; 5]> = trace.iter().map(|h| h.key()).collect();

    let t0 = Instant::now();
    let mut cls = match std::env::var("LIMIT") {
        Ok(l) => Classifier::build_with_limit(CB_WIDTHS, entries.clone(), l.parse().unwrap()),
        Err(_) => Classifier::build(CB_WIDTHS, entries.clone()),
    };
    let build = t0.elapsed();
    let lin = Linear::build(CB_WIDTHS, entries.clone());
    let stats = cls.stats();

    // Compiled throughput: repeat the trace for at least ~1 s.
    let mut reps = 0usize;
    let mut sum = 0u64;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(1000) || reps == 0 {
        for k in &keys {
            if let Some((p, _)) = cls.first_match(black_box(k), 0, |_| true) {
                sum = sum.wrapping_add(u64::from(p));
            }
        }
        reps += 1;
    }
    let ct = t0.elapsed();
    let compiled_mpps = (reps * keys.len()) as f64 / ct.as_secs_f64() / 1e6;

    // Linear throughput on a sample.
    let sample = keys.len().min(if rules.len() > 20_000 { 2_000 } else { 20_000 });
    let t0 = Instant::now();
    for k in &keys[..sample] {
        if let Some((p, _)) = lin.first_match(black_box(k), 0, |_| true) {
            sum = sum.wrapping_add(u64::from(p));
        }
    }
    let lt = t0.elapsed();
    let linear_mpps = sample as f64 / lt.as_secs_f64() / 1e6;
    black_box(sum);

    // Mismatches over the whole trace.
    let mut mismatches = 0;
    for k in &keys {
        let a = cls.first_match(k, 0, |_| true);
        let b = lin.first_match(k, 0, |_| true);
        if a != b {
            if mismatches < 5 {
                eprintln!("mismatch key {k:?}: classifier {a:?} linear {b:?}");
            }
            mismatches += 1;
        }
    }

    // Lookup cost counters.
    let (mut probed, mut compared) = (0usize, 0usize);
    for k in &keys {
        let (p, c) = cls.lookup_cost(k);
        probed += p;
        compared += c;
    }

    // Updates: delete a random rule and re-insert it, 1000 times.
    let mut rng = 0x1234_5678_9abc_def0u64;
    let mut del = Vec::new();
    let mut ins = Vec::new();
    for _ in 0..1000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let i = (rng % entries.len() as u64) as usize;
        let t0 = Instant::now();
        let n = cls.remove_rule(entries[i].rule);
        del.push(t0.elapsed());
        assert_eq!(n, 1);
        let t0 = Instant::now();
        cls.insert(entries[i].clone());
        ins.push(t0.elapsed());
    }
    del.sort();
    ins.sort();
    let mut upd_mismatch = 0;
    for k in keys.iter().step_by(7) {
        if cls.first_match(k, 0, |_| true) != lin.first_match(k, 0, |_| true) {
            upd_mismatch += 1;
        }
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let name = std::path::Path::new(files[0]).file_name().unwrap().to_string_lossy().to_string();
    println!(
        "{name}: rules {} entries {} tables {} buckets {} max_bucket {} build {:.1} ms memory {} bytes ({:.1} MB) \
         compiled {:.2} Mpps ({:.0} ns) linear {:.4} Mpps (sample {}) speedup {:.0}x \
         probed {:.2} compared {:.2} insert p50 {:.2} us p99 {:.1} delete p50 {:.2} us p99 {:.1} \
         mismatches {} (after updates {}) trace {}",
        rules.len(),
        entries.len(),
        stats.tables,
        stats.buckets,
        stats.max_bucket,
        build.as_secs_f64() * 1e3,
        cls.memory_bytes(),
        cls.memory_bytes() as f64 / 1e6,
        compiled_mpps,
        1e3 / compiled_mpps,
        linear_mpps,
        sample,
        compiled_mpps / linear_mpps,
        probed as f64 / keys.len() as f64,
        compared as f64 / keys.len() as f64,
        us(ins[ins.len() / 2]),
        us(ins[ins.len() * 99 / 100]),
        us(del[del.len() / 2]),
        us(del[del.len() * 99 / 100]),
        mismatches,
        upd_mismatch,
        keys.len(),
    );
    if verbose {
        println!("  memory: {}", cls.memory_breakdown());
        let mut ps: Vec<u32> = keys.iter().map(|k| cls.first_match(k, 0, |_| true).map_or(u32::MAX, |m| m.0)).collect();
        ps.sort_unstable();
        let q: Vec<String> = [0.1, 0.25, 0.5, 0.75, 0.9, 0.99].iter().map(|f| format!("{}:{}", f, ps[(ps.len() as f64 * f) as usize])).collect();
        println!("  match prio quantiles {}", q.join(" "));
        let mut probes = vec![0usize; stats.tables];
        let mut hits = vec![0usize; stats.tables];
        for k in &keys {
            cls.lookup_profile(k, &mut probes, &mut hits);
        }
        for (i, (lens, n, b)) in stats.per_table.iter().enumerate() {
            println!("  table {lens:?} entries {n} buckets {b} probed {:.3} hits {:.3}", probes[i] as f64 / keys.len() as f64, hits[i] as f64 / keys.len() as f64);
        }
    }
}
