//! `weir bench nft`: what a change made through `weir nft` costs a running weir with a large
//! ruleset, measured in one process on the dispatcher's own path (the same calls a batch
//! makes, without the control socket): the batch checked against the running ruleset (the
//! session), the workers' new engines built, and each worker's switch to its new engine (the
//! only moment its packets wait). For one `add element` and for a chain flush with 100 new
//! rules, in a ruleset of N naive rules; and `list ruleset`'s time and size.

use serde_json::json;
use std::process::ExitCode;
use std::time::Instant;
use weir_conntrack::Config as CtConfig;
use weir_engine::stateful::Stateful;

#[derive(clap::Args)]
pub struct NftArgs {
    /// Rules in the running ruleset (one chain of naive rules, as `weir bench lab`'s).
    #[arg(long, default_value_t = 50_000)]
    rules: u32,
    /// Batches of each kind measured (their median and worst are reported).
    #[arg(long, default_value_t = 20)]
    batches: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// The running ruleset: `rules` naive rules in `forward`, a set fail2ban-style tools add to,
/// a service chain kube-proxy-style syncs flush and refill.
fn ruleset(rules: u32) -> String {
    let mut s = String::from(
        "table ip weirb {\n set banned {\n  type ipv4_addr\n }\n chain svc {\n  ip daddr 198.18.200.1 tcp dport 80 accept\n }\n chain forward {\n  type filter hook forward priority filter; policy drop;\n  ip saddr @banned drop\n  jump svc\n",
    );
    for i in 0..rules.saturating_sub(1) {
        s.push_str(&format!(
            "  ip saddr 198.19.{}.{}/32 ct state new,established,related accept\n",
            i / 256 % 240,
            i % 256
        ));
    }
    s.push_str("  ip saddr 198.19.240.0/24 ct state new,established,related accept\n }\n}\n");
    s
}

/// A batch flushing the service chain and adding `n` rules (endpoint `k`).
fn resync(n: usize, k: usize) -> String {
    let mut s = String::from("flush chain ip weirb svc\n");
    for i in 0..n {
        s.push_str(&format!(
            "add rule ip weirb svc ip daddr 198.18.200.{} tcp dport {} accept\n",
            1 + k % 200,
            1000 + i
        ));
    }
    s
}

#[derive(Default)]
struct Times {
    check: Vec<f64>,
    build: Vec<f64>,
    swap: Vec<f64>,
    total: Vec<f64>,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

impl Times {
    fn json(&self) -> serde_json::Value {
        json!({
            "check_ms": median(&self.check),
            "build_ms": median(&self.build),
            "worker_stall_ms": median(&self.swap),
            "worker_stall_max_ms": max(&self.swap),
            "total_ms": median(&self.total),
            "total_max_ms": max(&self.total),
        })
    }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// The resident set size of this process, in bytes.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |p| p * 4096)
}

pub fn nft(a: NftArgs) -> anyhow::Result<ExitCode> {
    let text = ruleset(a.rules);
    let t = Instant::now();
    let (mut session, mut rs, _) = weir_lang::Session::load_str("bench.nft", &text)
        .map_err(|(src, d)| anyhow::anyhow!(weir_lang::diag::render_all(&d, &src)))?;
    let load_ms = ms(t);
    let t = Instant::now();
    let eng = weir_dataplane::daemon::engines(&rs, 1).remove(0);
    let compile_ms = ms(t);
    let mut sf = Stateful::new(eng, CtConfig::default());
    let run = |session: &mut weir_lang::Session,
               rs: &mut weir_lang::ir::Ruleset,
               sf: &mut Stateful,
               label: &str,
               batch: &dyn Fn(usize) -> String|
     -> anyhow::Result<Times> {
        let mut times = Times::default();
        for i in 0..a.batches {
            let b = batch(i);
            let t0 = Instant::now();
            let (s, r, _) = session
                .apply(label, &b)
                .map_err(|(src, d)| anyhow::anyhow!(weir_lang::diag::render_all(&d, &src)))?;
            times.check.push(ms(t0));
            let t = Instant::now();
            let eng = weir_dataplane::daemon::engines(&r, 1).remove(0);
            times.build.push(ms(t));
            let t = Instant::now();
            let old = sf.reload(eng);
            times.swap.push(ms(t));
            times.total.push(ms(t0));
            // (a worker frees the old engine on another thread)
            drop(old);
            (*session, *rs) = (s, r);
        }
        Ok(times)
    };
    // one element: the dispatcher's in-place path (the batch checked against its set, each
    // worker's set changed where it is)
    let mut add = Times::default();
    for i in 0..a.batches {
        let b = format!(
            "add element ip weirb banned {{ 198.18.{}.{} }}\n",
            i / 250,
            1 + i % 250
        );
        let t0 = Instant::now();
        let edits = match session.apply_elements(&mut rs, "add-element", &b) {
            Some(Ok(e)) => e,
            Some(Err((src, d))) => anyhow::bail!(weir_lang::diag::render_all(&d, &src)),
            None => anyhow::bail!("an add element batch did not take the in-place path"),
        };
        add.check.push(ms(t0));
        add.build.push(0.0);
        let t = Instant::now();
        for e in edits {
            let r = &mut sf.engine_mut().rs;
            let ti = r
                .tables
                .iter()
                .position(|x| x.name == e.table)
                .expect("table");
            let si = r.tables[ti]
                .set_names
                .iter()
                .position(|n| *n == e.set)
                .expect("set");
            r.add_element(ti, si, e.element);
        }
        add.swap.push(ms(t));
        add.total.push(ms(t0));
    }
    let flush = run(&mut session, &mut rs, &mut sf, "flush-100", &|i| {
        resync(100, i)
    })?;
    let opts = weir_lang::print::Options::default();
    let before = rss();
    let t = Instant::now();
    let listing = weir_lang::print::ruleset(session.ast(), &rs, &opts);
    let list_ms = ms(t);
    let list_rss = rss().saturating_sub(before);
    let out = json!({
        "rules": a.rules,
        "batches": a.batches,
        "load_ms": load_ms,
        "compile_ms": compile_ms,
        "add_element": add.json(),
        "flush_chain_100_rules": flush.json(),
        "list_ruleset_ms": list_ms,
        "list_ruleset_bytes": listing.len(),
        "list_ruleset_rss_growth_bytes": list_rss,
    });
    if a.json {
        println!("{out}");
    } else {
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(ExitCode::SUCCESS)
}
