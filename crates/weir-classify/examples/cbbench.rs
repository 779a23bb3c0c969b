//! ClassBench benchmark of the classifier against the linear reference.
//!
//! ```text
//! cargo run --release -p weir-classify --example cbbench -- RULES TRACE [-v]
//! ```
//!
//! Prints rules, entries, the structure's shape, build time, memory, compiled and linear lookup
//! rates (the linear reference is run over the whole trace, which also gives the reference
//! answers), the speedup, median/p99/max insert and delete times (1000 times: delete a random
//! rule, then re-insert it) and mismatches against the linear answers, before and after the
//! updates. Rule `i` of the file gets `prio = rule = i`; flags are ignored.
//!
//! Environment knobs (for tuning): `QUICK=1` skips the linear reference (no speedup or
//! mismatches), `INCR=1` builds by inserting the entries one by one in a shuffled order,
//! `SEL=n` / `LEAF=n` fix the select / leaf limits, `WIDE=1` forces 64-bit compiled entries.
//! `-v` also prints per-table probe and hit rates.

use std::hint::black_box;
use std::time::{Duration, Instant};

use weir_classify::classbench::{parse_rules, parse_trace, to_entries, CB_WIDTHS};
use weir_classify::{BuildOptions, Classifier, Linear};

fn xorshift(r: &mut u64) -> u64 {
    *r ^= *r << 13;
    *r ^= *r >> 7;
    *r ^= *r << 17;
    *r
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let verbose = args.iter().any(|a| a == "-v");
    let files: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    if files.len() != 2 {
        eprintln!("usage: cbbench RULES TRACE [-v]");
        std::process::exit(2);
    }
    let read = |f: &str| {
        std::fs::read_to_string(f).unwrap_or_else(|e| {
            eprintln!("{f}: {e}");
            std::process::exit(1)
        })
    };
    let rules = parse_rules(&read(files[0])).unwrap_or_else(|e| {
        eprintln!("{}: {e}", files[0]);
        std::process::exit(1)
    });
    let trace = parse_trace(&read(files[1])).unwrap_or_else(|e| {
        eprintln!("{}: {e}", files[1]);
        std::process::exit(1)
    });
    let entries = to_entries(&rules);
    let keys: Vec<[u64; 5]> = trace.iter().map(|h| h.key()).collect();
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<usize>().ok());
    let quick = std::env::var_os("QUICK").is_some();
    let wide = std::env::var_os("WIDE").is_some();

    // Build.
    let t0 = Instant::now();
    let mut cls = if env("INCR").is_some() {
        let mut order: Vec<usize> = (0..entries.len()).collect();
        let mut r = 0x853c_49e6_748f_ea9bu64;
        for i in (1..order.len()).rev() {
            order.swap(i, (xorshift(&mut r) % (i as u64 + 1)) as usize);
        }
        let mut c = Classifier::new(CB_WIDTHS);
        for i in order {
            c.insert(entries[i].clone());
        }
        c
    } else if env("SEL").is_some() || env("LEAF").is_some() || wide {
        let o = BuildOptions {
            select_limit: env("SEL"),
            leaf_limit: env("LEAF").unwrap_or(BuildOptions::default().leaf_limit),
            force_wide: wide,
        };
        Classifier::build_with(CB_WIDTHS, entries.clone(), o)
    } else {
        Classifier::build(CB_WIDTHS, entries.clone())
    };
    let build = t0.elapsed();
    let stats = cls.stats();

    // Compiled throughput: repeat the trace for at least one second.
    let mut reps = 0usize;
    let mut sink = 0u64;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(1) {
        for k in &keys {
            if let Some((p, _)) = cls.first_match(black_box(k), 0, |_| true) {
                sink = sink.wrapping_add(u64::from(p));
            }
        }
        reps += 1;
    }
    let compiled_mpps = (reps * keys.len()) as f64 / t0.elapsed().as_secs_f64() / 1e6;

    // Linear reference over the whole trace: its rate and the reference answers.
    let (linear_mpps, answers) = if quick {
        (f64::NAN, Vec::new())
    } else {
        let lin = Linear::build(CB_WIDTHS, entries.clone());
        let t0 = Instant::now();
        let answers: Vec<Option<(u32, u32)>> = keys
            .iter()
            .map(|k| lin.first_match(black_box(k), 0, |_| true))
            .collect();
        (
            keys.len() as f64 / t0.elapsed().as_secs_f64() / 1e6,
            answers,
        )
    };
    black_box(sink);
    let mismatches = |c: &Classifier<5>| -> usize {
        keys.iter()
            .zip(&answers)
            .filter(|(k, a)| c.first_match(k, 0, |_| true) != **a)
            .count()
    };
    let before = mismatches(&cls);

    // Lookup work counters.
    let (mut probes, mut compared, mut nodes) = (0usize, 0usize, 0usize);
    for k in &keys {
        let c = cls.lookup_cost(k);
        probes += c.probes;
        compared += c.compared;
        nodes += c.nodes;
    }

    // Updates: delete a random rule and re-insert it, 1000 times.
    let mut rng = 0x1234_5678_9abc_def0u64;
    let (mut del, mut ins) = (Vec::new(), Vec::new());
    for _ in 0..1000 {
        let i = (xorshift(&mut rng) % entries.len() as u64) as usize;
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
    let after = mismatches(&cls);

    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let q = |v: &[Duration]| {
        (
            us(v[v.len() / 2]),
            us(v[v.len() * 99 / 100]),
            us(v[v.len() - 1]),
        )
    };
    let (ins50, ins99, insmax) = q(&ins);
    let (del50, del99, delmax) = q(&del);
    let n = keys.len() as f64;
    let name = std::path::Path::new(files[0])
        .file_name()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    println!("{name}");
    println!("  rules       {}", rules.len());
    println!("  entries     {}", cls.len());
    println!(
        "  tables      {} top-level ({} in all, {} nodes, depth {}, {} buckets, {} in lists); select limit {}, {} B/entry",
        stats.root_tables,
        stats.tables,
        stats.nodes,
        stats.max_depth,
        stats.buckets,
        stats.list_entries,
        stats.select_limit,
        stats.entry_bytes
    );
    println!("  build       {:.1} ms", build.as_secs_f64() * 1e3);
    println!(
        "  memory      {} bytes ({:.1} MB)",
        cls.memory_bytes(),
        cls.memory_bytes() as f64 / 1e6
    );
    println!(
        "  compiled    {:.2} Mpps ({:.1} ns/lookup; per lookup {:.2} probes, {:.2} compared, {:.2} nodes)",
        compiled_mpps,
        1e3 / compiled_mpps,
        probes as f64 / n,
        compared as f64 / n,
        nodes as f64 / n
    );
    if quick {
        println!("  linear      (skipped)");
    } else {
        println!(
            "  linear      {:.4} Mpps (whole trace, {} headers)",
            linear_mpps,
            keys.len()
        );
        println!("  speedup     {:.0}x", compiled_mpps / linear_mpps);
    }
    println!("  insert      median {ins50:.2} us, p99 {ins99:.1} us, max {insmax:.0} us (1000 x re-insert of a deleted rule)");
    println!("  delete      median {del50:.2} us, p99 {del99:.1} us, max {delmax:.0} us (1000 x a random rule)");
    if quick {
        println!("  mismatches  (skipped)");
    } else {
        println!(
            "  mismatches  {before} of {} headers; after the updates {after}",
            keys.len()
        );
    }
    println!(
        "SUMMARY {name} rules={} entries={} tables={} build_ms={:.1} memory={} compiled_mpps={:.2} ns={:.1} linear_mpps={:.4} speedup={:.0} insert_us={ins50:.2} delete_us={del50:.2} mismatches={}",
        rules.len(),
        cls.len(),
        stats.root_tables,
        build.as_secs_f64() * 1e3,
        cls.memory_bytes(),
        compiled_mpps,
        1e3 / compiled_mpps,
        linear_mpps,
        compiled_mpps / linear_mpps,
        if quick { "-".to_string() } else { (before + after).to_string() }
    );
    if verbose {
        let mut per = vec![(0usize, 0usize); stats.root_tables];
        for k in &keys {
            cls.lookup_profile(k, &mut per);
        }
        for (i, (lens, entries, buckets)) in stats.per_table.iter().enumerate() {
            println!(
                "  table {lens:?}: {entries} entries, {buckets} buckets, probed by {:.3}, hit by {:.3} of lookups",
                per[i].0 as f64 / n,
                per[i].1 as f64 / n
            );
        }
    }
}
