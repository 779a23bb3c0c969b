//! `weir bench classify`: the compiled classifier against the linear reference, side by side in
//! one run, on one rule set and one ClassBench trace.

use anyhow::Context;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use weir_classify::classbench::{parse_rules, parse_trace, to_entries, CbHeader, CB_WIDTHS};
use weir_classify::{Classifier, Linear};
use weir_engine::{Compiled, Engine, Meta, Mode, Pkt};
use weir_wire::PacketMeta;

#[derive(clap::Args)]
pub struct ClassifyArgs {
    /// Rule file: ClassBench format or an nftables ruleset.
    #[arg(long)]
    rules: PathBuf,
    /// nft or classbench (default: guessed from the file: ClassBench lines start with '@').
    #[arg(long)]
    format: Option<String>,
    /// ClassBench header trace.
    #[arg(long)]
    trace: PathBuf,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Run the compiled classifier for at least this many seconds.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// With an nft ruleset: stop the linear reference after this many seconds (0: run it over
    /// the whole trace). Its headers are the ones compared; `linear_packets` says how many.
    #[arg(long, default_value_t = 0.0)]
    linear_seconds: f64,
    /// Number of single-rule deletes and inserts timed.
    #[arg(long, default_value_t = 1000)]
    updates: usize,
}

struct Report {
    rules: usize,
    packets: usize,
    build_ms: f64,
    memory: usize,
    compiled_mpps: f64,
    linear_mpps: f64,
    linear_packets: usize,
    insert_us: f64,
    delete_us: f64,
    mismatches: usize,
    extra: String,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

pub fn classify(a: ClassifyArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&a.rules)
        .with_context(|| format!("cannot read {}", a.rules.display()))?;
    let trace_text = std::fs::read_to_string(&a.trace)
        .with_context(|| format!("cannot read {}", a.trace.display()))?;
    let trace =
        parse_trace(&trace_text).map_err(|e| anyhow::anyhow!("{}: {e}", a.trace.display()))?;
    anyhow::ensure!(
        !trace.is_empty(),
        "{}: the trace has no headers",
        a.trace.display()
    );
    let format = a.format.clone().unwrap_or_else(|| {
        if text.trim_start().starts_with('@') {
            "classbench".into()
        } else {
            "nft".into()
        }
    });
    let r = match format.as_str() {
        "classbench" => bench_classbench(&a, &text, &trace)?,
        "nft" => match bench_nft(&a, &trace)? {
            Some(r) => r,
            None => return Ok(ExitCode::from(1)),
        },
        other => anyhow::bail!("unknown format '{other}' (nft or classbench)"),
    };
    let speedup = if r.linear_mpps > 0.0 {
        r.compiled_mpps / r.linear_mpps
    } else {
        0.0
    };
    if a.json {
        println!(
            "{}",
            json!({
                "rules": r.rules, "packets": r.packets, "build_ms": r.build_ms, "memory_bytes": r.memory,
                "compiled_mpps": r.compiled_mpps, "linear_mpps": r.linear_mpps, "speedup": speedup,
                "insert_us": r.insert_us, "delete_us": r.delete_us, "mismatches": r.mismatches,
                "linear_packets": r.linear_packets, "format": format,
            })
        );
    } else {
        println!(
            "weir bench classify: {} ({format}) with {}",
            a.rules.display(),
            a.trace.display()
        );
        println!("  rules          {}", r.rules);
        println!("  headers        {}", r.packets);
        println!("  build          {:.1} ms", r.build_ms);
        println!(
            "  memory         {}",
            crate::cmd::check::human_bytes(r.memory)
        );
        println!(
            "  compiled       {:.3} Mpps ({:.0} ns per header)",
            r.compiled_mpps,
            1e3 / r.compiled_mpps.max(1e-9)
        );
        println!(
            "  linear         {:.4} Mpps ({:.0} ns per header; {} headers)",
            r.linear_mpps,
            1e3 / r.linear_mpps.max(1e-9),
            r.linear_packets
        );
        println!("  speedup        {speedup:.0}x");
        println!(
            "  insert 1 rule  {:.2} us (median of {})",
            r.insert_us, a.updates
        );
        println!(
            "  delete 1 rule  {:.2} us (median of {})",
            r.delete_us, a.updates
        );
        println!("  mismatches     {}", r.mismatches);
        if !r.extra.is_empty() {
            println!("  {}", r.extra);
        }
    }
    Ok(if r.mismatches == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}

fn bench_classbench(a: &ClassifyArgs, text: &str, trace: &[CbHeader]) -> anyhow::Result<Report> {
    let rules = parse_rules(text).map_err(|e| anyhow::anyhow!("{}: {e}", a.rules.display()))?;
    let entries = to_entries(&rules);
    let t0 = Instant::now();
    let mut cls = Classifier::build(CB_WIDTHS, entries.clone());
    let build_ms = t0.elapsed().as_secs_f64() * 1e3;
    let lin = Linear::build(CB_WIDTHS, entries.clone());
    let keys: Vec<[u64; 5]> = trace.iter().map(|h| h.key()).collect();

    // answers of both, and the linear reference's speed over the whole trace
    let mut compiled_ans = Vec::with_capacity(keys.len());
    for k in &keys {
        compiled_ans.push(cls.first_match(k, 0, |_| true).map(|x| x.1));
    }
    let t0 = Instant::now();
    let mut mismatches = 0;
    for (k, c) in keys.iter().zip(&compiled_ans) {
        if lin.first_match(k, 0, |_| true).map(|x| x.1) != *c {
            mismatches += 1;
        }
    }
    let linear_s = t0.elapsed().as_secs_f64();
    let linear_mpps = keys.len() as f64 / linear_s / 1e6;

    let mut n = 0usize;
    let mut sink = 0u64;
    let t0 = Instant::now();
    while t0.elapsed().as_secs_f64() < a.seconds {
        for k in &keys {
            if let Some((_, r)) = cls.first_match(k, 0, |_| true) {
                sink = sink.wrapping_add(r as u64);
            }
        }
        n += keys.len();
    }
    let compiled_mpps = n as f64 / t0.elapsed().as_secs_f64() / 1e6;
    std::hint::black_box(sink);

    let mut ins = Vec::new();
    let mut del = Vec::new();
    let mut rng = Lcg(42);
    for _ in 0..a.updates {
        let i = rng.next(entries.len());
        let rule = entries[i].rule;
        let t = Instant::now();
        cls.remove_rule(rule);
        del.push(t.elapsed().as_secs_f64() * 1e6);
        let e = entries[i].clone();
        let t = Instant::now();
        // one entry per ClassBench rule (to_entries: rule i is entry i)
        cls.insert(e);
        ins.push(t.elapsed().as_secs_f64() * 1e6);
    }
    // after the churn the answers must still be the same
    let after: usize = keys
        .iter()
        .zip(&compiled_ans)
        .filter(|(k, c)| cls.first_match(k, 0, |_| true).map(|x| x.1) != **c)
        .count();
    Ok(Report {
        rules: rules.len(),
        packets: keys.len(),
        build_ms,
        memory: cls.memory_bytes(),
        compiled_mpps,
        linear_mpps,
        linear_packets: keys.len(),
        insert_us: median(ins),
        delete_us: median(del),
        mismatches: mismatches + after,
        extra: format!(
            "{} classifier entries; answers re-checked after the updates: {after} differ",
            cls.len()
        ),
    })
}

/// A trace header as a parsed packet (no frame: the classifier reads the parsed fields).
fn header_meta(h: &CbHeader) -> PacketMeta {
    PacketMeta::ipv4_tuple(h.src, h.dst, h.proto, h.sport, h.dport)
}

fn bench_nft(a: &ClassifyArgs, trace: &[CbHeader]) -> anyhow::Result<Option<Report>> {
    let Some(rs) = crate::cmd::load_rules(&a.rules) else {
        return Ok(None);
    };
    let compiled = Compiled::build(&rs, Mode::Compiled);
    let build_ms = compiled.build_ns as f64 / 1e6;
    let memory = compiled.memory_bytes();
    let linear = Compiled::build(&rs, Mode::Linear);
    // the chain measured: the first base chain at forward, else the first base chain
    let pick = |c: &Compiled| -> Option<(usize, usize)> {
        c.hook_entries(weir_lang::ir::Hook::Forward)
            .first()
            .or_else(|| c.hooks.iter().flat_map(|v| v.first()).next())
            .map(|h| (h.table, h.chain))
    };
    let (ti, ci) = pick(&compiled).context("the ruleset has no base chain")?;
    let rules = compiled.tables[ti].chains[ci].len();
    let mut ce = Engine::new(compiled);
    let mut le = Engine::new(linear);
    let metas: Vec<PacketMeta> = trace.iter().map(header_meta).collect();
    let meta = Meta::with_ifnames("", "");
    let ans = |e: &mut Engine, pm: &PacketMeta| -> Option<usize> {
        let p = Pkt {
            frame: &[],
            pm,
            meta: &mut { meta },
            now_ns: 0,
            conns: None,
        };
        e.first_candidate(ti, ci, &p)
    };
    let compiled_ans: Vec<Option<usize>> = metas.iter().map(|m| ans(&mut ce, m)).collect();
    // the linear reference on the whole trace (or as much as fits in 60 s)
    let t0 = Instant::now();
    let mut mismatches = 0;
    let mut lin_n = 0;
    for (m, c) in metas.iter().zip(&compiled_ans) {
        if ans(&mut le, m) != *c {
            mismatches += 1;
        }
        lin_n += 1;
        if a.linear_seconds > 0.0 && t0.elapsed().as_secs_f64() > a.linear_seconds {
            break;
        }
    }
    let linear_mpps = lin_n as f64 / t0.elapsed().as_secs_f64() / 1e6;
    let mut n = 0usize;
    let mut sink = 0usize;
    let t0 = Instant::now();
    while t0.elapsed().as_secs_f64() < a.seconds {
        for m in &metas {
            sink = sink.wrapping_add(ans(&mut ce, m).unwrap_or(0));
        }
        n += metas.len();
    }
    let compiled_mpps = n as f64 / t0.elapsed().as_secs_f64() / 1e6;
    std::hint::black_box(sink);
    // single-rule updates: remove a rule by handle and put it back where it was (it gets a
    // new handle, as in nftables)
    let chain_rules: Vec<weir_lang::ir::Rule> = rs.tables[ti].chains[ci].rules.clone();
    let base_gid = first_gid(&rs, ti, ci);
    // current handle -> index of the rule in the original chain
    let mut orig: std::collections::HashMap<u64, usize> = chain_rules
        .iter()
        .enumerate()
        .map(|(i, r)| (r.handle, i))
        .collect();
    let mut ins = Vec::new();
    let mut del = Vec::new();
    let mut rng = Lcg(7);
    for _ in 0..a.updates.min(chain_rules.len()) {
        let c = &ce.rs.tables[ti].chains[ci];
        let pos = rng.next(c.len());
        let mut it = c.order.values().skip(pos.saturating_sub(1));
        let prev = if pos == 0 {
            None
        } else {
            it.next()
                .map(|&s| c.slots[s as usize].as_ref().unwrap().handle)
        };
        let handle = it
            .next()
            .map(|&s| c.slots[s as usize].as_ref().unwrap().handle)
            .unwrap();
        let idx = orig.remove(&handle).unwrap();
        let t = Instant::now();
        ce.rs.remove_rule(ti, ci, handle);
        del.push(t.elapsed().as_secs_f64() * 1e6);
        let at = match prev {
            Some(h) => weir_engine::compile::At::After(h),
            None => weir_engine::compile::At::First,
        };
        let t = Instant::now();
        let (_, new_handle) = ce
            .rs
            .insert_rule(ti, ci, at, &chain_rules[idx])
            .context("re-insert")?;
        ins.push(t.elapsed().as_secs_f64() * 1e6);
        orig.insert(new_handle, idx);
    }
    ce.sync_state();
    let after = metas
        .iter()
        .zip(&compiled_ans)
        .filter(|(m, c)| {
            let p = Pkt {
                frame: &[],
                pm: m,
                meta: &mut { meta },
                now_ns: 0,
                conns: None,
            };
            let got = ce.first_candidate(ti, ci, &p).map(|g| {
                let (_, _, slot) = ce.rs.rule_loc[g];
                orig[&ce.rs.tables[ti].chains[ci].slots[slot as usize]
                    .as_ref()
                    .unwrap()
                    .handle]
            });
            got != c.map(|g| g - base_gid)
        })
        .count();
    Ok(Some(Report {
        rules,
        packets: metas.len(),
        build_ms,
        memory,
        compiled_mpps,
        linear_mpps,
        linear_packets: lin_n,
        insert_us: median(ins),
        delete_us: median(del),
        mismatches: mismatches + after,
        extra: format!("answers re-checked after the updates: {after} differ"),
    }))
}

/// The counter id of the first rule of a chain (ids are assigned in ruleset order).
fn first_gid(rs: &weir_lang::ir::Ruleset, ti: usize, ci: usize) -> usize {
    let mut g = 0;
    for (i, t) in rs.tables.iter().enumerate() {
        for (j, c) in t.chains.iter().enumerate() {
            if (i, j) == (ti, ci) {
                return g;
            }
            g += c.rules.len();
        }
    }
    g
}
